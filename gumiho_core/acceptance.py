"""Acceptance statistics of real speculative decoding runs: tokens per target pass, per-depth acceptance, and
each proposer's calibration."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .config import MAX_DEPTH
from .records import RunResult, StepRecord


def expected_length(rates) -> float:
    """Expected accepted draft tokens per step from per-depth acceptance rates p_1..p_D (the bonus token not
    counted): sum over d of p_1 * ... * p_d. docs/method.md, "Why early tokens matter"."""
    total, reach = 0.0, 1.0
    for p in rates:
        reach *= p
        total += reach
    return total


def length_gains(rates) -> list[float]:
    """d expected_length / d p_j for each depth j: sum over i >= j of the product of p_1..p_i without p_j. An early
    depth sits in more of the products, so the same gain in acceptance is worth more there."""
    gains = []
    for j in range(len(rates)):
        before = math.prod(rates[:j])  # p_1 .. p_{j-1}
        after, reach = 1.0, 0.0
        for p in rates[j + 1:]:
            reach += after
            after *= p
        gains.append(before * (reach + after))
    return gains


@dataclass
class Acceptance:
    """Accumulates over steps and runs. Depth d's rate: P(the accepted path reaches depth d | it reached d - 1).

    Depths 1..max_depth are counted (default: the published drafters'); longer accepted paths count as max_depth.
    """

    max_depth: int = MAX_DEPTH
    steps: int = 0
    new_tokens: int = 0  # decoding steps' tokens only (the prefill's token is not counted)
    reached: list = field(default_factory=list)  # per depth 0..max_depth: steps whose path reached depth d - 1
    accepted: list = field(default_factory=list)  # ... and of those, steps that accepted a token at depth d
    histogram: list = field(default_factory=list)  # per accepted length 0..max_depth

    def __post_init__(self):
        for counts in (self.reached, self.accepted, self.histogram):
            counts.extend([0] * (self.max_depth + 1 - len(counts)))

    def add_step(self, rec: StepRecord) -> None:
        """Count one step (steps without a verdict, the prefill and plain decoding, count for nothing)."""
        if rec.verdict is None:
            return
        a = min(rec.verdict.accept_length, len(rec.new_token_ids))  # drafts past the end of the text count for nothing
        self.steps += 1
        self.new_tokens += len(rec.new_token_ids)
        self.histogram[min(a, self.max_depth)] += 1
        for d in range(1, self.max_depth + 1):
            if a >= d - 1:
                self.reached[d] += 1
                self.accepted[d] += a >= d

    def merge(self, other: "Acceptance") -> None:
        """Add another tally's counts (of the same max_depth) to this one."""
        self.steps, self.new_tokens = self.steps + other.steps, self.new_tokens + other.new_tokens
        for mine, theirs in ((self.reached, other.reached), (self.accepted, other.accepted),
                             (self.histogram, other.histogram)):
            mine[:] = [a + b for a, b in zip(mine, theirs, strict=True)]

    def add(self, run: RunResult) -> None:
        for rec in run.records:
            self.add_step(rec)

    @property
    def mean_accept_len(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0

    def per_depth(self) -> list[float]:
        """Acceptance rate at depths 1..max_depth (nan where never reached)."""
        return [self.accepted[d] / self.reached[d] if self.reached[d] else float("nan")
                for d in range(1, self.max_depth + 1)]

    def to_dict(self) -> dict:
        return {"steps": self.steps, "mean_accept_len": round(self.mean_accept_len, 4),
                "per_depth": [round(x, 4) for x in self.per_depth()],
                "accept_histogram": self.histogram}


@dataclass
class Calibration:
    """Whether each proposer's confidence means what it says, over every drafted node, verified or not (the
    target's logits at each node saw its true ancestry, Verdict.target_token).

    Per proposer ("serial1", "mlp2", ...): nodes drafted, their mean draft probability, and how often the token
    was the target's greedy choice after the node's parent. Close to each other: the tree's scores (cumulative
    draft log-probs) rank nodes by their real chances, so the heads' accuracy, not the tree's choice, bounds
    what a tree accepts."""

    tally: dict = field(default_factory=dict)  # proposer -> [nodes, sum of draft probabilities, agreements]

    def add_step(self, rec: StepRecord) -> None:
        tree, verdict = rec.tree, rec.verdict
        if verdict is None:
            return
        for i in range(1, len(tree)):
            t = self.tally.setdefault(tree.proposer[i], [0, 0.0, 0])
            t[0] += 1
            t[1] += math.exp(tree.logprob[i])
            t[2] += tree.tokens[i] == verdict.target_token[tree.parents[i]]

    def add(self, run: RunResult) -> None:
        for rec in run.records:
            self.add_step(rec)

    def to_dict(self) -> dict[str, dict]:
        return {name: {"nodes": n, "mean_prob": round(p / n, 4), "agreement": round(hits / n, 4)}
                for name, (n, p, hits) in sorted(self.tally.items())}

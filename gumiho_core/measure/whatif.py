"""What-if: what a recorded run's trees would have yielded at other sizes, and how fast that would be on this
device's verification cost curve or on a flat, GPU-like one. A prediction: measured acceptance, modelled cost.

Acceptance is read off the run's own verdicts. Each node's logits depend only on its ancestors, so the target's
verdict on every node says what any smaller tree drawn from the recorded one would have accepted: exactly at
temperature 0 (a node is accepted iff it and its ancestors are the target's argmax), in expectation when
sampling (the verification rule accepts child x of an accepted node with total probability p(x), the target's).
A tree of n nodes keeps the root and the n - 1 best-scored nodes, as drafting selects them.
Cost: step(n) = draft + verify(n) + commit, with verify(n) = ratio(n) x one plain step.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from ..records import StepRecord
from ..tree import DraftTree

FLAT_UP_TO = 64  # a GPU verifies up to about this many tokens in the time of one (the paper's tree size)


@dataclass(frozen=True)
class CostCurve:
    """Seconds to verify n tokens, as a multiple of one plain step, at measured sizes (linear in between)."""

    name: str
    ratios: tuple[tuple[int, float], ...]  # (n, verify(n) / plain step), n ascending, starting at n = 1

    def ratio(self, n: int) -> float:
        sizes = [m for m, _ in self.ratios]
        i = bisect.bisect_left(sizes, n)
        if i < len(sizes) and sizes[i] == n:
            return self.ratios[i][1]
        if i >= len(sizes):  # beyond the last measurement: proportional to the size
            last, r = self.ratios[-1]
            return r * n / last
        (n0, r0), (n1, r1) = self.ratios[i - 1], self.ratios[i]
        return r0 + (r1 - r0) * (n - n0) / (n1 - n0)


def flat_curve() -> CostCurve:
    return CostCurve(f"flat: n ≤ {FLAT_UP_TO} tokens cost one plain step (GPU-like)", ((1, 1.0), (FLAT_UP_TO, 1.0)))


def measured_curve(name: str, verify_s: dict, plain_s: float) -> CostCurve:
    """A curve from measured seconds {n: verify seconds} and the plain step they were measured with."""
    points = {1: 1.0, **{int(n): s / plain_s for n, s in verify_s.items()}}
    return CostCurve(name, tuple(sorted(points.items())))


@dataclass(frozen=True)
class StepCosts:
    """Mean seconds per decoding step measured in the run: a plain step, drafting, committing."""

    plain_s: float
    draft_s: float
    commit_s: float

    def speedup(self, tokens_per_step: float, verify_ratio: float) -> float:
        return tokens_per_step * self.plain_s / (self.draft_s + verify_ratio * self.plain_s + self.commit_s)


@dataclass(frozen=True)
class WhatIf:
    sizes: tuple[int, ...]  # tree sizes n, root included
    tokens_per_step: tuple[float, ...]  # per size: predicted tokens per step, bonus included
    speedup: dict  # curve name -> per size: predicted speedup over plain decoding
    exact: bool  # True at temperature 0 (acceptance known exactly); False: expected acceptance when sampling


def accept_probs(record: StepRecord, greedy: bool) -> tuple[float, ...] | None:
    """Per node: P(it is accepted | its parent is); None where the record cannot tell (not traced)."""
    tree, v = record.tree, record.verdict
    if greedy:
        return (1.0,) + tuple(float(tree.tokens[i] == v.target_token[tree.parents[i]]) for i in range(1, len(tree)))
    if len(v.target_prob) != len(tree) or any(math.isnan(p) for p in v.target_prob):
        return None
    return v.target_prob


def accepted_by_size(tree: DraftTree, probs) -> list[float]:
    """[expected accepted tokens of the best n - 1 nodes, for n = 1 .. len(tree)]."""
    reach = [1.0] * len(tree)
    for i in range(1, len(tree)):  # parents come first
        reach[i] = reach[tree.parents[i]] * probs[i]
    out = [0.0]
    for i in sorted(range(1, len(tree)), key=lambda i: (-tree.score[i], tree.depth[i], i)):
        out.append(out[-1] + reach[i])
    return out


def what_if(records, greedy: bool, costs: StepCosts, curves: list[CostCurve]) -> WhatIf | None:
    """Predicted tokens per step and speedup for every tree size up to the largest recorded tree; None when no
    record has what it needs (a tree, and at temperature > 0 the target's probability of every node)."""
    per_step = []
    for rec in records:
        probs = accept_probs(rec, greedy) if rec.tree is not None and rec.verdict is not None else None
        if probs is not None:
            per_step.append(accepted_by_size(rec.tree, probs))
    if not per_step:
        return None
    sizes = tuple(range(2, max(len(a) for a in per_step) + 1))
    tokens = tuple(1 + sum(a[min(n, len(a)) - 1] for a in per_step) / len(per_step) for n in sizes)
    speedup = {c.name: tuple(costs.speedup(t, c.ratio(n)) for n, t in zip(sizes, tokens)) for c in curves}
    return WhatIf(sizes=sizes, tokens_per_step=tokens, speedup=speedup, exact=greedy)

"""The numbers of a run, up to the step on screen, for every lane of its race: ONE function (`numbers`) that every
panel reads (the number boxes, the race and its verdict, the what-if, the charts, "How it works" and its formula),
so no two panels can disagree.

Counted the engine's way (gumiho_core.RunResult): tokens are the new tokens in the text, the prefill's first token
and a final <|im_end|> included, nothing after it (committed.py); a pass is a decoding step after the prefill;
tokens per pass = (tokens - 1) / passes. Speedup = plain decoding's compute time to the same number of tokens /
this lane's compute time (the prefill included in both; animation never counted).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from gumiho_core import AR, first_difference

from ..state import Run
from .committed import committed
from .lanes import Lane, lanes
from .phases import PREFILL_PART, VERIFY, is_drafting


@dataclass(frozen=True)
class LaneNumbers:
    method: str
    tokens: int  # new tokens in the text, the prefill's included
    steps: int  # target passes after the prefill
    seconds: float  # compute seconds, the prefill included
    finished: bool  # the lane's decoding has ended
    speedup: float | None  # plain decoding's time to as many tokens / this lane's time; None where unknown
    reached: tuple[int, ...] = ()  # per depth 1..D: steps whose committed path reached depth d - 1
    accepted: tuple[int, ...] = ()  # ... and of those, steps that committed a drafted token at depth d
    without_bonus: int = 0  # steps the text ended in before the target's own token (the last, at most)
    parts_ms: dict = field(default_factory=dict)  # part key (phases.py) -> mean milliseconds per pass
    nodes: float = 1.0  # mean nodes verified per pass, root included

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_pass(self) -> float | None:
        return (self.tokens - 1) / self.steps if self.steps else None

    @property
    def drafts(self) -> bool:
        return any(self.reached)

    @property
    def rates(self) -> list[float | None]:
        """Per depth 1..D: how often the drafted token was right once the path had got that far."""
        return [a / r if r else None for a, r in zip(self.accepted, self.reached)]

    @property
    def draft_ms(self) -> float:
        return sum(ms for key, ms in self.parts_ms.items() if is_drafting(key))

    @property
    def verify_ms(self) -> float:
        return self.parts_ms.get(VERIFY, 0.0)

    @property
    def step_ms(self) -> float:
        return sum(ms for key, ms in self.parts_ms.items() if key != PREFILL_PART)


@dataclass(frozen=True)
class Numbers:
    method: str  # the run's own
    lanes: tuple[LaneNumbers, ...]  # in the registry's order
    same: bool | None  # greedy: every lane wrote the same tokens, as far as all got; None when sampling
    differs_at: int | None = None  # the first new token (0-based) where this run's tokens part from plain decoding's

    def lane(self, method: str) -> LaneNumbers | None:
        return next((n for n in self.lanes if n.method == method), None)

    @property
    def main(self) -> LaneNumbers:
        return self.lane(self.method)

    @property
    def plain(self) -> LaneNumbers | None:
        return self.lane(AR)

    @property
    def drafting(self) -> list[LaneNumbers]:
        return [n for n in self.lanes if n.drafts]

    @property
    def ended(self) -> bool:
        """Every lane has ended: the race is over (no "so far")."""
        return all(n.finished for n in self.lanes)


def time_to(points: list[tuple[int, float]], tokens: int) -> float | None:
    """Seconds a lane of (tokens, seconds) points took to have `tokens` tokens, or None if it never got that far."""
    i = bisect.bisect_left([n for n, _ in points], tokens)
    return points[i][1] if i < len(points) else None


def plain_points(run: Run) -> list[tuple[int, float]]:
    """Plain decoding's (tokens, seconds) after each step: its lane, or the run itself when it is plain decoding."""
    if run.settings.method == AR:
        return [(r.total_new_tokens, c) for r, c in zip(run.records, run.clock)]
    return list(run.baseline)


def _depths(lane: Lane, deepest: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(reached, accepted) per depth 1..deepest from what each step committed, and the steps without a bonus."""
    reached, accepted, without = [0] * deepest, [0] * deepest, 0
    for rec in lane.records:
        if rec.tree is None:
            continue
        got = committed(rec)
        without += not got.bonus
        for d in range(1, deepest + 1):
            reached[d - 1] += got.drafted >= d - 1
            accepted[d - 1] += got.drafted >= d
    return tuple(reached), tuple(accepted), without


def _parts_ms(lane: Lane) -> tuple[dict, float]:
    """Mean milliseconds per pass of each part (prefill aside), and the mean nodes verified per pass."""
    passes = lane.steps[1:]
    totals: dict[str, float] = {}
    for step in passes:
        for part in step.parts:
            totals[part.key] = totals.get(part.key, 0.0) + 1000 * part.seconds
    trees = [len(r.tree) for r in lane.records if r.tree is not None]
    return {k: v / len(passes) for k, v in totals.items()}, (sum(trees) / len(trees) if trees else 1.0)


def _lane_numbers(lane: Lane, plain: list[tuple[int, float]], deepest: int) -> LaneNumbers:
    steps = max(len(lane.steps) - 1, 0)
    if lane.method == AR:
        speedup = 1.0
    else:
        base = time_to(plain, lane.tokens)
        speedup = base / lane.end if base is not None and lane.end > 0 else None
    reached, accepted, without = _depths(lane, deepest)
    parts_ms, nodes = _parts_ms(lane)
    return LaneNumbers(lane.method, lane.tokens, steps, lane.end, lane.finished, speedup, reached, accepted, without,
                       parts_ms, nodes)


def deepest(shown: list[Lane]) -> int:
    """The deepest level any lane's trees reached: the depths there are numbers for."""
    return max((max(r.tree.depth) for lane in shown for r in lane.records if r.tree is not None), default=0)


def numbers(run: Run, upto: int | None = None) -> Numbers:
    """Every lane's numbers as of step `upto` of the run (default: its last)."""
    upto = len(run.records) - 1 if upto is None else upto
    shown = lanes(run, upto)
    plain, depth = plain_points(run), deepest(shown)
    out = tuple(_lane_numbers(lane, plain, depth) for lane in shown)
    same = differs = None
    if run.settings.decode.greedy and shown:
        n = min(lane.tokens for lane in shown)
        same = len({lane.token_ids[:n] for lane in shown}) == 1
        if run.settings.method != AR and run.baseline_ids:
            differs = first_difference(run.baseline_ids, [t for r in run.records[: upto + 1] for t in r.new_token_ids])
    return Numbers(run.settings.method, out, same, differs)




def running_speedup(run: Run, upto: int) -> list[tuple[int, float]]:
    """(tokens, speedup) of this run after each step up to `upto`, where plain decoding got as far: the same
    definition as LaneNumbers.speedup, step by step (the last point is the number boxes' speedup)."""
    if run.settings.method == AR:
        return [(r.total_new_tokens, 1.0) for r in run.records[: upto + 1]]
    plain, out = plain_points(run), []
    for rec, seconds in zip(run.records[: upto + 1], run.clock):
        base = time_to(plain, rec.total_new_tokens)
        if base is not None and seconds > 0:
            out.append((rec.total_new_tokens, base / seconds))
    return out

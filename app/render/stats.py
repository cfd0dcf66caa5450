"""Numbers of a run, up to the step on screen: speed, speedup over plain decoding, acceptance by depth.

Times are compute seconds (the engine's work, measured around each step), never animation time.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from gumiho_core import AR, PREFILL, Acceptance, first_difference

from ..state import Run


@dataclass(frozen=True)
class Stats:
    method: str
    tokens: int
    steps: int  # decoding steps, the prefill not counted
    seconds: float
    tokens_per_s: float
    mean_accept_len: float  # tokens per target pass (bonus included), prefill not counted: as RunResult
    base_tokens_per_s: float | None  # plain decoding of the same prompt on this machine
    speedup: float | None  # time plain decoding needed for the same number of tokens / this run's time
    depth_reached: tuple[int, ...]  # per depth 1..7: steps whose accepted path reached depth d - 1
    depth_accepted: tuple[int, ...]  # ... and of those, steps that accepted a token at depth d
    draft_ms: float  # mean per decoding step
    verify_ms: float
    base_step_ms: float | None  # mean plain-decoding step (the prefill excluded)
    tree_nodes: float  # mean nodes verified per step, root included
    same_as_plain: bool | None  # greedy only: the tokens equal plain decoding's so far
    differs_at: int | None = None  # ... if not: the first new token (0-based) where they part

    @property
    def depth_rates(self) -> list[float | None]:
        return [a / r if r else None for a, r in zip(self.depth_accepted, self.depth_reached)]


def _tokens_at(run: Run, upto: int) -> list[int]:
    return [run.records[i].total_new_tokens for i in range(upto + 1)]


def baseline_time(run: Run, tokens: int) -> float | None:
    """Seconds plain decoding took to produce `tokens` tokens, or None if it has not got that far."""
    counts = [n for n, _ in run.baseline]
    i = bisect.bisect_left(counts, tokens)
    return run.baseline[i][1] if i < len(counts) else None


def running_speedup(run: Run, upto: int) -> list[tuple[int, float]]:
    """(tokens, speedup) after each step up to `upto`, where plain decoding has produced as many."""
    out = []
    for i, n in enumerate(_tokens_at(run, upto)):
        base = baseline_time(run, n)
        if base is not None and run.clock[i] > 0:
            out.append((n, base / run.clock[i]))
    return out


def _depths(run: Run, upto: int) -> tuple[list[int], list[int]]:
    """Per depth 1..MAX_DEPTH: steps whose accepted path reached depth d - 1, and those that accepted depth d."""
    acceptance = Acceptance()
    for rec in run.records[: upto + 1]:
        acceptance.add_step(rec)
    return acceptance.reached[1:], acceptance.accepted[1:]


def _mean_ms(values) -> float:
    values = list(values)
    return 1000 * sum(values) / len(values) if values else 0.0


def _baseline_stats(run: Run, upto: int, tokens: int, seconds: float):
    """(plain decoding tokens/s, speedup after step `upto`, mean plain step ms); each None where unknown."""
    if run.settings.method == AR:  # the run is its own baseline
        step_ms = _mean_ms(b - a for a, b in zip(run.clock, run.clock[1:upto + 1]))
        return (tokens / seconds if seconds else None), 1.0, step_ms
    points = [(n, t) for n, t in run.baseline if n <= tokens]
    if not points:
        return None, None, None
    n, t = points[-1]
    pairs = running_speedup(run, upto)
    step_ms = _mean_ms(b[1] - a[1] for a, b in zip(points, points[1:]))  # the prefill is the first point
    return (n / t if t else None), (pairs[-1][1] if pairs else None), step_ms


def run_stats(run: Run, upto: int | None = None) -> Stats:
    """Statistics of steps 0..upto (default: all)."""
    upto = len(run.records) - 1 if upto is None else upto
    recs = run.records[: upto + 1]
    tokens = recs[-1].total_new_tokens if recs else 0
    steps = sum(1 for r in recs if r.kind != PREFILL)
    seconds = run.clock[upto] if recs else 0.0
    base_tps, speedup, base_ms = _baseline_stats(run, upto, tokens, seconds) if recs else (None, None, None)
    reached, accepted = _depths(run, upto)
    spec = [r for r in recs if r.tree is not None]
    same = differs = None
    if run.settings.decode.greedy and run.settings.method != AR and run.baseline_ids:
        differs = first_difference(run.baseline_ids, [t for r in recs for t in r.new_token_ids])
        same = differs is None
    return Stats(
        method=run.settings.method, tokens=tokens, steps=steps, seconds=seconds,
        tokens_per_s=tokens / seconds if seconds else 0.0,
        mean_accept_len=(tokens - 1) / steps if steps else 0.0,
        base_tokens_per_s=base_tps, speedup=speedup,
        depth_reached=tuple(reached), depth_accepted=tuple(accepted),
        draft_ms=_mean_ms(r.draft_s for r in recs if r.kind != PREFILL),
        verify_ms=_mean_ms(r.verify_s for r in recs if r.kind != PREFILL),
        base_step_ms=base_ms, tree_nodes=sum(len(r.tree) for r in spec) / len(spec) if spec else 1.0,
        same_as_plain=same, differs_at=differs,
    )

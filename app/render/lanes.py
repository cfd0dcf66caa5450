"""The race's lanes up to the step on screen: this run, the drafting methods the visitor picked to race it (same
prompt, same tree request, each its own tree) and plain decoding. They were decoded interleaved step by step (each
caught up to this run's tokens after each of its steps), so each lane is shown as far as it had got when this run
reached the step on screen, and to its own end once this run's last step is on screen."""
from __future__ import annotations

from dataclasses import dataclass

from gumiho_core import AR, METHODS, StepRecord

from ..state import Run
from .phases import PLAIN, PREFILL_PART, Part, parts


@dataclass(frozen=True)
class LaneStep:
    index: int
    start: float  # compute seconds of the lane when the step began
    end: float
    parts: tuple[Part, ...]
    tokens: int  # tokens the step added


@dataclass(frozen=True)
class Lane:
    method: str
    steps: tuple[LaneStep, ...]
    finished: bool  # the lane's decoding has ended: its end is a finish line
    token_ids: tuple[int, ...]
    records: tuple[StepRecord, ...] = ()  # the drafting lanes' steps (the plain lane keeps only its times)

    @property
    def end(self) -> float:
        return self.steps[-1].end if self.steps else 0.0

    @property
    def tokens(self) -> int:
        return len(self.token_ids)


def _record_lane(method: str, records, finished: bool, clock=None) -> Lane:
    """A drafting lane (or the run's own), on its compute clock: `clock`, or each record's compute_s."""
    steps, start = [], 0.0
    for rec, end in zip(records, clock or [r.compute_s for r in records]):
        steps.append(LaneStep(rec.index, start, end, tuple(parts(rec)), len(rec.new_token_ids)))
        start = end
    return Lane(method, tuple(steps), finished, tuple(t for r in records for t in r.new_token_ids), tuple(records))


def _plain_lane(run: Run, count: int, finished: bool) -> Lane:
    steps, start, before = [], 0.0, 0
    for i, (n, t) in enumerate(run.baseline[:count]):
        steps.append(LaneStep(i, start, t, (Part(PREFILL_PART if i == 0 else PLAIN, t - start),), n - before))
        start, before = t, n
    return Lane(AR, tuple(steps), finished, tuple(run.baseline_ids[:before]))


def _upto(totals: list[int], tokens: int | None) -> int:
    """How many steps of a lane to show: all (tokens None), or up to the first that reached `tokens`."""
    if tokens is None:
        return len(totals)
    return next((i + 1 for i, n in enumerate(totals) if n >= tokens), len(totals))


def lanes(run: Run, upto: int) -> list[Lane]:
    """Every lane with something to show, in the registry's order (Gumiho, EAGLE-2 style, Medusa style, Gumiho's
    transformer at every depth, plain decoding), as of step `upto` of this run."""
    mine = run.records[: upto + 1]
    if not mine:
        return []
    at_end = upto == len(run.records) - 1 and run.finished
    tokens = None if at_end else mine[-1].total_new_tokens
    out = {run.settings.method: _record_lane(run.settings.method, mine, at_end, run.clock[: upto + 1])}
    for method, records in run.rivals.items():
        shown = records[: _upto([r.total_new_tokens for r in records], tokens)]
        if shown:
            out[method] = _record_lane(method, shown, shown[-1].done)
    if run.settings.method != AR and run.baseline:
        count = _upto([n for n, _ in run.baseline], tokens)
        out[AR] = _plain_lane(run, count, at_end and count == len(run.baseline) and run.baseline_done)
    return [out[m] for m in METHODS if m in out]

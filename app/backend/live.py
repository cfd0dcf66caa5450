"""Runs that can still compute: their decoders hold KV caches, so at most MAX_LIVE_RUNS are kept; beyond
that the least recently used one stops computing (its recorded steps stay and can still be browsed)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

MAX_LIVE_RUNS = 16  # paused runs that keep their caches (a 7B target: 0.5 MB per token); older ones stop computing


@dataclass
class Live:
    """The decoders behind a run that can still go on: the chosen method, its plain-decoding baseline and the
    other drafting methods it races."""

    session: object | None  # gumiho_core's decoder of the chosen method
    baseline: object | None  # plain decoding of the same prompt; None for method ar (its own baseline)
    tokenizer: object
    registry: LiveRuns | None = None
    rivals: dict = field(default_factory=dict)  # method -> decoder of the same prompt and tree shape

    @property
    def can_compute(self) -> bool:
        """Some lane can still take a step: this run's, or (Pause or Stop cut its last turn short) another lane's."""
        lanes = [self.session, self.baseline, *self.rivals.values()]
        return self.session is not None and any(lane is not None and not lane.done for lane in lanes)

    def release(self) -> None:
        """Drop the decoders (and with them their caches); the recorded run stays."""
        self.session = self.baseline = None
        self.rivals = {}
        if self.registry is not None:
            self.registry.forget(self)


class LiveRuns:
    def __init__(self, limit: int = MAX_LIVE_RUNS):
        self.limit = limit
        self._runs: OrderedDict[int, Live] = OrderedDict()
        self._lock = threading.RLock()  # an evicted run's release() calls forget() under it

    def keep(self, live: Live) -> None:
        """Track a run that can compute (as the most recently used); beyond the limit the oldest stops computing."""
        with self._lock:
            self._runs[id(live)] = live
            self._runs.move_to_end(id(live))
            while len(self._runs) > self.limit:
                self._runs.popitem(last=False)[1].release()

    def forget(self, live: Live) -> None:
        with self._lock:
            self._runs.pop(id(live), None)

    def __len__(self) -> int:
        return len(self._runs)

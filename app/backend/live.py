"""Runs that can still compute, and the race's schedule.

A live run's decoders hold KV caches, so at most MAX_LIVE_RUNS are kept; beyond that the least recently used
one is evicted: it stops computing (its recorded steps stay and can still be browsed). The race's lanes step in
an order that is a pure function of their progress (`next_lane`): each other lane catches up with the run's
own before it steps again, and once it has ended they run to their own ends."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

MAX_LIVE_RUNS = 16  # paused runs that keep their caches (a 7B target: 0.5 MB per token); older ones stop computing
MAIN, BASELINE = "main", "baseline"  # the run's own lane and plain decoding's; a rival's lane is its method


@dataclass
class Live:
    """The decoders behind a run that can still go on: the chosen method, its plain-decoding baseline and the
    other drafting methods it races. Its owner (a Player) frees them by letting go of them."""

    session: object | None  # gumiho_core's decoder of the chosen method
    baseline: object | None  # plain decoding of the same prompt; None for method ar (its own baseline)
    tokenizer: object
    rivals: dict = field(default_factory=dict)  # method -> decoder of the same prompt and tree shape

    def lanes(self) -> dict:
        """Lane name -> decoder, the run's own first; lanes already let go of are left out."""
        lanes = {MAIN: self.session, **self.rivals, BASELINE: self.baseline}
        return {name: lane for name, lane in lanes.items() if lane is not None}

    @property
    def can_compute(self) -> bool:
        """Some lane can still take a step: this run's, or (Pause or Stop cut its last turn short) another lane's."""
        return self.session is not None and any(not lane.done for lane in self.lanes().values())


@dataclass(frozen=True)
class Lane:
    """A lane's progress: tokens generated so far, and whether it has ended."""

    tokens: int
    done: bool


def progress(live: Live) -> dict[str, Lane]:
    return {name: Lane(len(lane.generated), lane.done) for name, lane in live.lanes().items()}


def next_lane(lanes: dict[str, Lane]) -> str | None:
    """The lane that takes the next lane-step: the first other lane that is behind the run's own (MAIN), or any
    unfinished one once MAIN has ended; else MAIN; None when every lane has ended. So the lanes interleave step by
    step (all see the same machine load) and a race cut anywhere goes on where it stopped."""
    main = lanes.get(MAIN)
    if main is None:
        return None
    for name, lane in lanes.items():
        if name != MAIN and not lane.done and (main.done or lane.tokens < main.tokens):
            return name
    return None if main.done else MAIN


class LiveRuns:
    """The players whose runs can still compute, least recently used first."""

    def __init__(self, limit: int = MAX_LIVE_RUNS):
        self.limit = limit
        self._runs: OrderedDict[int, object] = OrderedDict()
        self._lock = threading.RLock()  # an evicted player's evict() calls forget() under it

    def keep(self, player) -> None:
        """Track a player whose run can compute (as the most recently used); beyond the limit the oldest is
        evicted (player.evict())."""
        with self._lock:
            self._runs[id(player)] = player
            self._runs.move_to_end(id(player))
            while len(self._runs) > self.limit:
                self._runs.popitem(last=False)[1].evict()

    def forget(self, player) -> None:
        with self._lock:
            self._runs.pop(id(player), None)

    def __len__(self) -> int:
        return len(self._runs)

"""One visitor's player: the run on screen, the live decoders behind it, the cursor and the animation's stage.

Events call its methods (Run's `starting` and `load`, `pause`, `stop`, `prev`, `replay`, `close`); an animation
asks it for one tick at a time (`advance`): one lane-step of the race, or one more stage of the step on screen,
so a cancelled event (Stop, a closed tab) ends an animation within one lane-step. Nothing outside flips its state.

Live decoders hold KV caches. A player holds them only while they may still compute for this visitor: every
change ends in `_settle`, the one place that frees them (`release`). Evicted from the live runs (backend.live,
least recently used first), a paused run stops computing; its recorded steps stay and can still be browsed.
One Player lives in each browser session's gr.State.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass, field

from gumiho_core import GUMIHO

from .backend import MAIN, Backend, Live, LiveRuns, next_lane, progress, step_lane
from .stages import COMMITTED, stages
from .state import Run

PAUSE, STOP = "pause", "stop"  # why an animation ends before the run does
STAGE, LANE, WAITING = "stage", "lane", "waiting"  # what a tick shows
WAIT_SLICE_S = 0.05  # how soon Pause and speed changes act during a pause between pictures
HANDOVER_S = 120.0  # the longest an animation waits for this visitor's previous one to end (one lane-step)
_HANDOVER = threading.Lock()  # makes each look at who plays, and what follows from it, one step (all players:
# a Player must stay deep-copyable for gr.State, and these steps take microseconds)


@dataclass(frozen=True)
class Tick:
    """What one advance did: showed a stage of the step on screen (`charts`: its committed stage), took another
    lane's step (the race goes on), or found the model busy with another visitor's step."""

    shows: str  # STAGE, LANE or WAITING
    charts: bool = False
    wait: bool = False  # a pause of one picture's time comes after it (an animation stage)


@dataclass(eq=False)
class Player:
    run: Run | None = None
    live: Live | None = None  # while the run can still compute; never saved
    cursor: int = -1  # index of the step on screen
    stage: str = COMMITTED  # how far into that step's animation the screen is
    delay: float = 0.5  # seconds per animation picture
    fast: bool = False  # one picture per step, no pauses
    export_path: str | None = None
    export_key: tuple = ()
    charts: dict = field(default_factory=dict)  # the last numbers, charts and "How it works", by component
    loads: int = 0  # files this visitor has loaded or tried to: each answer on the page carries its number
    note: str = ""  # what became of the last of them (HTML), under the Load button
    method: str = GUMIHO  # the method the form shows: what the caption describes before any step
    race: tuple | None = None  # the methods ticked to race it (None: the page's default, of those that load)
    offered: tuple = ()  # the methods this visitor's page offers (handlers.on_tick changes them as drafters load)
    busy: bool = False  # a run is starting or animating for this visitor (read it; the methods set it)
    halt: str | None = None  # PAUSE or STOP once asked for, until the next animation begins (read it)
    registry: LiveRuns | None = field(default=None, repr=False)
    _one_step: bool = field(default=False, repr=False)
    _shown: int = field(default=0, repr=False)  # stages shown by this animation
    _told_busy: bool = field(default=False, repr=False)
    _asked: int = field(default=0, repr=False)  # animations asked for (each click of Run, Resume, Next, Replay)
    _playing: int = field(default=0, repr=False)  # the number of the animation running, 0 when none

    # -- what the visitor's events do -----------------------------------------------------------------------
    def starting(self) -> None:
        """Run was pressed: a run is being set up (Stop meanwhile ends it before its first step)."""
        self.busy, self.halt = True, None

    def load(self, run: Run | None, live: Live | None = None, registry: LiveRuns | None = None) -> None:
        """A run on screen from its start: a new one (computing if `live`), a loaded file, or none. The run it
        replaces will never compute again."""
        self._settle(keep=False)
        self.run, self.live, self.cursor, self.stage, self.registry = run, live, -1, COMMITTED, registry
        if live is not None and registry is not None:
            registry.keep(self)
        self._settle()

    def pause(self) -> None:
        self.halt = self.halt or PAUSE

    def stop(self) -> None:
        """End the run where it is, at once: its decoders are freed, and the animation (whose cancelling waits
        for its lane-step in progress) ends after it; a step cut short is shown whole."""
        self.halt, self.busy, self.stage = STOP, False, COMMITTED
        self._settle(keep=False)

    def prev(self) -> None:
        if self.run is not None and self.cursor > 0:
            self.cursor, self.stage = self.cursor - 1, COMMITTED

    def replay(self) -> None:
        self.cursor, self.stage = -1, COMMITTED

    def close(self) -> None:
        """The visitor has gone (gr.State's delete_callback): free what a paused run still holds."""
        self._settle(keep=False)
        self.drop_export()

    def evict(self) -> None:
        """The live runs are full (LiveRuns.keep): this paused run stops computing."""
        self._settle(keep=False)

    def drop_export(self) -> None:
        """Delete the last exported run file (each export has a folder of its own)."""
        if self.export_path:
            shutil.rmtree(os.path.dirname(self.export_path), ignore_errors=True)
        self.export_path, self.export_key = None, ()

    # -- the animation: begin, advance (and wait) until None, finish ----------------------------------------
    def begin(self, one_step: bool = False) -> int | None:
        """Start an animation, once this visitor's previous one has ended: a click that came before the buttons
        turned off (Resume right after Next) asks the running one to end at its next tick, then plays; one
        animation advances a player at a time, and the last click wins. Returns its number, or None when a
        later click came while it waited (that one plays)."""
        with _HANDOVER:
            self._asked += 1
            mine, waited = self._asked, bool(self._playing)
        end = time.monotonic() + HANDOVER_S
        while True:
            with _HANDOVER:
                if mine != self._asked:  # a later click came meanwhile: that one plays, and this one lets it be
                    return None
                if not self._playing or time.monotonic() >= end:
                    if waited and self.halt == STOP:  # Stop came meanwhile
                        return None
                    self._playing = mine
                    self.busy, self.halt, self._one_step, self._shown, self._told_busy = True, None, one_step, 0, False
                    return mine
                self.halt = self.halt or PAUSE
            time.sleep(WAIT_SLICE_S)

    def superseded(self, animation: int) -> bool:
        """A later click has asked for another animation: this one ends without a last picture of its own."""
        return animation != self._asked

    def advance(self, backend: Backend | None = None) -> Tick | None:
        """One tick: the next stage of the step on screen, else a lane-step of the race that is due (one behind
        this run catches up first), else the next recorded step, else this run's next step; None when there is
        nothing more to do (Pause, Stop, the end of the run, or `one_step` shown)."""
        if self.halt or self.run is None or self._one_step and self._shown and self.stage == COMMITTED:
            return None
        if self.stage != COMMITTED:
            order = stages(self.run.records[self.cursor])
            return self._show(order[-1] if self.fast else order[order.index(self.stage) + 1])
        live = self.live
        lane = next_lane(progress(live)) if backend is not None and live is not None else None
        if lane not in (None, MAIN):
            return self._lane_step(backend, live, lane)
        if self.cursor + 1 < len(self.run.records):
            self.cursor += 1
            order = stages(self.run.records[self.cursor])
            return self._show(order[-1] if self.fast else order[0])
        if lane == MAIN:
            tick = self._lane_step(backend, live, MAIN)
            return tick if tick.shows == WAITING or self.racing else self.advance(backend)
        return None

    def wait(self) -> None:
        """Sleep for one picture, in short slices so that Pause and speed changes act at once."""
        end = time.monotonic() + self.delay
        while not self.halt and not self.fast and time.monotonic() < end:
            time.sleep(WAIT_SLICE_S)

    def finish(self, animation: int | None = None) -> None:
        """The animation `animation` (None: the one running) has ended, also when its event was cancelled: a run
        whose lanes have all ended is freed. The next animation may start only after all of this (it waits for
        `_playing`)."""
        with _HANDOVER:
            if animation is not None and self._playing not in (0, animation):
                return  # another animation has taken over since: the player is that one's
            self.busy = False
            if self.halt == STOP:
                self.stage = COMMITTED
            self._settle()
            self._playing = 0

    def _show(self, stage: str) -> Tick:
        self.stage, self._shown = stage, self._shown + 1
        return Tick(STAGE, charts=stage == COMMITTED, wait=True)

    def _lane_step(self, backend: Backend, live: Live, lane: str) -> Tick:
        if backend.step_lock.locked() and not self._told_busy:  # say so once, then wait for it
            self._told_busy = True
            return Tick(WAITING)
        self._told_busy = False
        if lane == MAIN and self.registry is not None:
            self.registry.keep(self)  # recently used: the last to be evicted
        step_lane(backend, self.run, live, lane)
        self._settle()  # the race's last lane-step ends it
        return Tick(LANE)

    # -- its decoders ---------------------------------------------------------------------------------------
    def _settle(self, keep: bool = True) -> None:
        """Hold the live decoders only while they may still compute for this visitor (`keep`, not stopped, some
        lane unfinished): the one place that frees them."""
        if self.live is not None and not (keep and self.halt != STOP and self.live.can_compute):
            self.release()

    def release(self) -> None:
        """Let go of the live decoders, and with them their caches; the recorded run stays."""
        live, self.live = self.live, None
        live.session = live.baseline = None
        live.rivals = {}
        if self.registry is not None:
            self.registry.forget(self)

    # -- what the screen asks -------------------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        return self.halt == STOP

    @property
    def racing(self) -> bool:
        """Other lanes step beside this run (plain decoding, the other drafting methods)."""
        return self.live is not None and len(self.live.lanes()) > 1

    @property
    def can_compute(self) -> bool:
        """True while the live decoders can produce more steps."""
        return self.live is not None and self.live.can_compute

    @property
    def more_to_show(self) -> bool:
        """Steps (or the rest of a step) that Next or Resume would show."""
        if self.run is None:
            return False
        return self.stage != COMMITTED or self.cursor + 1 < len(self.run.records) or self.can_compute

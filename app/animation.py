"""The animation: a generator of pictures, one per stage of a step (serial 1, serial 2, parallel, verified,
committed), with a pause between them; a step is computed when the animation reaches it. The pauses are
never timed: the charts use the engine's compute time."""
from __future__ import annotations

import time
from html import escape

import gradio as gr

from .backend import Backend, turn
from .messages import report
from .render.status import describe, running_line
from .screen import picture
from .stages import COMMITTED, stages
from .state import UserState
from .view import View

REPLAYING = "Replaying recorded steps of"
WAIT_SLICE_S = 0.05  # how soon Pause and speed changes act during a pause between pictures


def _wait(user: UserState) -> None:
    """Sleep for one picture, in short slices so that Pause and speed changes act at once."""
    end = time.monotonic() + user.delay
    while not user.pause and not user.fast and time.monotonic() < end:
        time.sleep(WAIT_SLICE_S)


def _compute(view: View, user: UserState, backend: Backend, live):
    """The next turn of a live run (a generator): a picture after each of the race's other lanes' steps, so the
    visitor sees the race go on and a cancelled event (Stop, a closed tab) ends after one lane-step, not a whole
    turn. Returns whether the run took a step of its own (False: Pause or Stop came first, or only the other lanes
    were left)."""
    took, steps = False, turn(backend, user.run, live)
    racing = bool(live.rivals) or live.baseline is not None
    try:
        for record in steps:
            took = took or record is not None
            if user.pause:
                break
            if racing:
                yield picture(view, user, running_line(user, "Running", racing=True), charts=False)
    finally:
        steps.close()
    return took


def _next_stages(view: View, user: UserState, backend: Backend | None):
    """The stages still to show (a generator of progress pictures, returning them): the rest of the step on
    screen, or all of the next step (computed if need be). Returns None when there is nothing more to show."""
    run = user.run
    if user.stage != COMMITTED:
        order = stages(run.records[user.cursor])
        return order[order.index(user.stage) + 1:]
    if user.cursor + 1 >= len(run.records):
        live = user.live  # Stop may drop it meanwhile; turn() then finds it released
        if backend is None or live is None or not live.can_compute:
            return None
        if not (yield from _compute(view, user, backend, live)):
            return None  # Pause or Stop came first, or the race's other lanes only ran to their ends
    user.cursor += 1
    return stages(run.records[user.cursor])


def _frames(view: View, user: UserState, backend: Backend | None, one_step: bool, verb: str):
    """The pictures until Pause, the end of the run, or (one_step) the end of one step."""
    while not user.pause:
        if backend is not None and backend.step_lock.locked():
            yield picture(view, user, "Waiting for the model: another visitor's step is running…", False)
        what = "Running" if backend is not None and user.can_compute else verb
        todo = yield from _next_stages(view, user, backend)
        if todo is None:
            return
        for stage in (todo[-1:] if user.fast else todo):
            user.stage = stage
            if user.pause:  # Pause or Stop came while the step was computed: the last picture shows it
                break
            yield picture(view, user, running_line(user, what), charts=stage == COMMITTED)
            _wait(user)
            if user.pause:
                break
        if one_step and user.stage == COMMITTED:
            return


def play(view: View, user: UserState, backend: Backend | None = None, one_step: bool = False,
         verb: str = REPLAYING):
    """Pictures from the screen's position on, until Pause, the end of the run, or (one_step) one step.
    backend=None shows the recorded steps only (`verb` says how they were recorded)."""
    user.busy, user.pause, user.stop = True, False, False
    try:
        yield from _frames(view, user, backend, one_step, verb)
    except Exception as e:  # whatever went wrong, leave a usable page (buttons back on), then report it
        message = report(e, "a decoding step failed")
        user.busy = False
        yield picture(view, user, f"Stopped: {escape(message)}")
        raise gr.Error(message) from None
    finally:  # also when the event is cancelled (Stop, or the visitor left): the generator is closed here
        user.busy = False
        if user.stop:  # Stop came while a step was being computed: the step cut short is shown whole
            user.stage = COMMITTED
        if user.live is not None and not user.live.can_compute:  # every lane done (maybe cut before turn() saw it)
            user.live.release()
            user.live = None
    yield picture(view, user, describe(user))

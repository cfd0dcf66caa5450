"""The animation: a thin loop over the visitor's Player. Each advance takes one lane-step of the race or shows
one more stage of a step (serial 1, serial 2, parallel, verified, committed); a picture follows each, then (for
a stage) a pause. The pauses are never timed: the charts use the engine's compute time."""
from __future__ import annotations

from html import escape

import gradio as gr

from .backend import Backend
from .messages import report
from .player import LANE, WAITING, Player, Tick
from .render.status import describe, running_line
from .screen import picture
from .view import View

REPLAYING = "Replaying recorded steps of"


def _line(player: Player, tick: Tick, computing: bool, verb: str) -> str:
    if tick.shows == WAITING:
        return "Waiting for the model: another visitor's step is running…"
    return running_line(player, "Running" if computing else verb, racing=tick.shows == LANE)


def play(view: View, player: Player, backend: Backend | None = None, one_step: bool = False,
         verb: str = REPLAYING, replay: bool = False):
    """Pictures from the screen's position (or, `replay`, the run's start) on, until Pause, Stop, the end of the
    run, or (one_step) one step. backend=None shows the recorded steps only (`verb` says how they were recorded)."""
    animation = player.begin(one_step)
    if animation is None:  # a later click (or Stop) came while this one waited for the animation before it
        yield gr.skip()  # every output as it is
        return
    if replay:
        player.replay()
    computing = backend is not None and player.can_compute
    try:
        while (tick := player.advance(backend)) is not None:
            frame = picture(view, player, _line(player, tick, computing, verb), charts=tick.charts)
            if player.stopped:  # Stop came during this tick: its picture is on screen; this one would overwrite it
                break
            yield frame
            if tick.wait:
                player.wait()
    except Exception as e:  # whatever went wrong, leave a usable page (buttons back on), then report it
        message = report(e, "a decoding step failed")
        player.finish(animation)
        yield picture(view, player, f"Stopped: {escape(message)}")
        raise gr.Error(message) from None
    finally:  # also when the event is cancelled (Stop, or the visitor left): the generator is closed here
        player.finish(animation)
    if not player.superseded(animation):  # else the animation that took over draws the page
        yield picture(view, player, describe(player))

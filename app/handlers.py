"""One function per event of the page. Each calls a method of the visitor's Player (player.py) and redraws the
page; runs that animate are generators (animation.py)."""
from __future__ import annotations

import os
from functools import partial
from html import escape

import gradio as gr

from gumiho_core import AR, GUMIHO, GumihoError

from . import runfile
from .animation import play
from .backend import Backend, start_run
from .messages import public_message, report
from .render.explain import how_it_works_md
from .render.status import auto_note, describe, load_note_html, model_line
from .screen import picture
from .settings import CUSTOM, MEASURED, TREE_FIELDS, Form, parse_settings, preset_name, tree_presets, tree_settings
from .stages import COMMITTED
from .player import Player
from .view import News, View


def on_run(view: View, backend: Backend, compute, user: Player, form: Form):
    """Start a run and animate it. `compute` is compute_run as the GPU sees it, for whole-run mode (ZeroGPU)."""
    try:
        settings = parse_settings(form, backend.device)
    except GumihoError as e:
        raise gr.Error(public_message(e)) from None
    user.delay, user.fast = float(form.delay), bool(form.fast)
    user.starting()
    loading = "Loading the model (first run only)…" if not backend.ready else "Starting…"
    if backend.whole_runs:
        loading = "Computing the whole run on the GPU, then showing it step by step…"
    yield picture(view, user, loading, charts=False)  # no second Run while this one starts
    try:
        run, live = (compute(settings), None) if backend.whole_runs else start_run(backend, settings)
    except Exception as e:
        message = report(e, "starting a run")
        user.finish()
        yield picture(view, user, describe(user), charts=False)
        raise gr.Error(message) from None
    user.load(run, live, backend.live)  # if Stop came while the run was starting, it ends before its first step
    if user.stopped:
        yield picture(view, user, describe(user))
    elif backend.whole_runs:
        yield from play(view, user, None, verb="Showing the computed steps of")
    else:
        yield from play(view, user, backend)


def on_pause(user: Player):
    user.pause()
    return gr.update(interactive=False)


def on_stop(view: View, user: Player):
    """Ends the run where it is and frees its caches, at once; the animation (whose cancelling waits for its
    lane-step in progress) ends after that lane-step."""
    fresh = user.stage == COMMITTED  # the charts on screen are this step's
    user.stop()
    return picture(view, user, describe(user), charts=not fresh)


def on_prev(view: View, user: Player):
    user.prev()
    return picture(view, user, describe(user))


def on_replay(view: View, user: Player, delay, fast):
    if user.run is None:
        raise gr.Error("there is no run to replay: press Run, or load a run file")
    user.delay, user.fast = float(delay), bool(fast)
    yield from play(view, user, None, replay=True)


def on_load(view: View, user: Player, path):
    """Load a run file: checked whole, then drawn for a fresh view; only then does it replace the visitor's run.
    Either way the note under the button says, for this file, what became of it: a refusal in one line (and
    nothing else on screen changes), or what was loaded. Not a toast: Gradio drops a toast of an event when the
    same event fires again while it shows (gradio#5541, #9920), so every second refusal in a row went unseen.
    A checked file's note comes first, alone: the browser then draws the whole page in one go (0.8-0.9 s on the
    project's 2-core machine), and the note should not wait for it."""
    if not path:
        raise gr.Error("no file was uploaded")
    user.loads += 1
    note = partial(load_note_html, user.loads, os.path.basename(path)[:80])
    try:
        run = runfile.read(path)
    except runfile.RunFileError as e:
        user.note = note(f"Could not load this run file: {e}", refused=True)
        yield {view.load_note: user.note}
        return
    what = f"a saved {run.settings.method} run of {len(run.records) - 1} steps"
    yield {view.load_note: note(f"{what}; drawing it…", refused=False)}
    loaded = Player(delay=user.delay, fast=user.fast, loads=user.loads,
                    note=note(f"{what}: press Replay to watch it.", refused=False))
    loaded.load(run)
    loaded.cursor = len(run.records) - 1
    try:
        out = picture(view, loaded, f"Saved run loaded (no model needed): “{escape(run.settings.prompt[:120])}”. "
                      + describe(loaded))
    except Exception as e:  # a checked run should always draw; if not, the old one stays
        loaded.drop_export()
        user.note = note(f"Could not show this run file: {report(e, 'drawing a loaded run file')}", refused=True)
        yield {view.load_note: user.note}
        return
    user.close()  # the run it replaces: its caches and its exported file
    yield out  # its state is `loaded`: the visitor's from now on


def on_preset(backend: Backend, name: str, *values):
    """A preset fills the advanced tree fields ("auto", "fastest": with gumiho's tree as it stands now); "custom"
    leaves them as they are (sent back: a value, never a bare update, see screen.picture())."""
    cfg = backend.auto_tree(GUMIHO, name).tree if name in MEASURED else tree_presets(backend.device).get(name)
    if cfg is None:
        return list(values)
    return [getattr(cfg, k) for k in TREE_FIELDS]


def on_tree_edit(device: str, *values):
    """Editing a tree field shows which preset (if any) the fields now match."""
    try:
        return preset_name(tree_settings(values), device)
    except GumihoError:
        return CUSTOM


def on_delay(user: Player, delay):
    user.delay = float(delay)


def on_fast(user: Player, fast):
    """Fast mode has no pictures between steps, so the animation speed does nothing there."""
    user.fast = bool(fast)
    return gr.update(interactive=not user.fast)


def on_temperature(temperature):
    """Seed and top_p act only when sampling."""
    sampling = bool(temperature) and temperature > 0
    return gr.update(interactive=sampling), gr.update(interactive=sampling)


def on_method(method):
    """Plain decoding drafts no tree: its settings are off while it is chosen."""
    return [gr.update(interactive=method != AR)] * (1 + len(TREE_FIELDS))


def on_tick(news: News, backend: Backend, user: Player):
    """The server's news for one visitor: the model line and what auto means now (also in "How it works"
    while there is no run). The timer stops when nothing more will change."""
    status = backend.status()
    note = auto_note(status)
    how = user.charts.get(news.how) if user.run is not None else None
    return {news.model: model_line(status), news.auto: note, news.timer: gr.Timer(active=not status.final),
            news.how: how or how_it_works_md(None, None, note)}


def on_remeasure(backend: Backend):
    """Measure this device again (in the background); the news timer follows it."""
    gr.Info(backend.remeasure(), duration=6)
    return gr.Timer(active=True)

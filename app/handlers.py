"""One function per event of the page. Each calls a method of the visitor's Player (player.py) and redraws the
page; runs that animate are generators (animation.py). What the visitor asked for that cannot run is said on the
status line, where it stays until their next action (a toast fades, and a second one in a row may never show), and
the server's log gets one line for it."""
from __future__ import annotations

import os
from functools import partial
from html import escape

import gradio as gr

from gumiho_core import GUMIHO, MEASURED, TREE_FIELDS, GumihoError

from . import runfile
from .animation import play
from .backend import Backend, start_run
from .messages import report
from .render.explain import how_it_works_md, step_caption_placeholder
from .render.status import describe, load_note_html, measure_note, missing_words, model_line, refused_html, tree_note
from .screen import picture
from .settings import (CUSTOM, Form, method_choices, parse_request, preset_fields, preset_name, race_choices,
                       race_value, tree_settings)
from .player import Player
from .stages import COMMITTED
from .view import News, View


def _refused(view: View, user: Player, error: Exception, context: str) -> dict:
    """The page as it was, with why the action was refused on the status line (one line in the log)."""
    message = report(error, context)
    user.finish()
    return {**picture(view, user, "", charts=False), view.status: refused_html(message)}


def on_run(view: View, backend: Backend, compute, user: Player, form: Form):
    """Start a run and animate it. `compute` is compute_run as the GPU sees it, for whole-run mode (ZeroGPU)."""
    try:
        request = parse_request(form, user.race)
    except GumihoError as e:
        yield _refused(view, user, e, "refused a run")
        return
    user.delay, user.fast = float(form.delay), bool(form.fast)
    user.starting()
    loading = "Loading the model (first run only)…" if not backend.ready else "Starting…"
    if backend.whole_runs:
        loading = "Computing the whole run on the GPU, then showing it step by step…"
    yield picture(view, user, loading, charts=False)  # no second Run while this one starts
    try:
        run, live = (compute(request), None) if backend.whole_runs else start_run(backend, request)
    except Exception as e:
        yield _refused(view, user, e, "refused a run" if isinstance(e, GumihoError) else "starting a run")
        return
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
        yield {view.status: refused_html("there is no run to replay: press Run, or load a run file")}
        return
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
        yield {view.load_note: load_note_html(user.loads + 1, "", "no file was uploaded", refused=True)}
        return
    user.loads += 1
    note = partial(load_note_html, user.loads, os.path.basename(path)[:80])
    try:
        run = runfile.read(path)
    except runfile.RunFileError as e:
        report(GumihoError(str(e)), "refused a run file")
        user.note = note(f"Could not load this run file: {e}", refused=True)
        yield {view.load_note: user.note}
        return
    lanes = f", racing {len(run.rivals)} other drafting lanes" if run.rivals else ""
    what = f"a saved {run.settings.method} run of {len(run.records) - 1} steps{lanes}"
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
    """A preset fills the tree fields ("auto", "fastest": Gumiho's tree as it stands now on this device); "custom"
    leaves them as they are (sent back: a value, never a bare update, see screen.picture()). The note beside the
    preset says what it is and what it costs here."""
    cfg = backend.resolve(name, GUMIHO).tree if name in MEASURED else preset_fields(name)
    fields = list(values) if cfg is None else [getattr(cfg, k) for k in TREE_FIELDS]
    return [*fields, tree_note(backend.status(), name)]


def on_tree_edit(*values):
    """Editing a tree field shows which preset (if any) the fields now match."""
    try:
        return preset_name(tree_settings(values))
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


def on_race(user: Player, race):
    """The methods ticked to race: kept with the visitor for their next Run."""
    user.race = tuple(race or ())


def on_method(user: Player, method):
    """Before any step is on screen, the caption says what a step of the chosen method does."""
    user.method = method
    return gr.skip() if user.run is not None and user.cursor >= 0 else step_caption_placeholder(method)


def _offers(news: News, user: Player, methods, method) -> dict:
    """The methods the page offers, once they change (the drafters have loaded): the visitor's choices kept where
    they can still run."""
    if tuple(methods) == user.offered:
        return {news.method: gr.skip(), news.race: gr.skip()}
    user.offered, user.race = tuple(methods), None  # the default race again, of the methods that load now
    fresh = race_value(methods)
    return {news.method: gr.update(choices=method_choices(methods), value=method if method in methods else GUMIHO),
            news.race: gr.update(choices=race_choices(methods), value=fresh)}


def on_tick(news: News, backend: Backend, user: Player, preset, method):
    """The server's news for one visitor: the model line, the measurement, the note on the chosen tree, the methods
    the drafters allow (also in "How it works" while there is no run). The timer stops when nothing more will
    change."""
    status = backend.status()
    note = tree_note(status, preset)
    how = user.charts.get(news.how) if user.run is not None else None
    return {news.model: model_line(status), news.auto: measure_note(status), news.timer: gr.Timer(active=not
            status.final), news.how: how or how_it_works_md(None, None, note), news.tree_note: note,
            news.missing: f'<div class="gm-missing">{missing_words(status)}</div>',
            **_offers(news, user, status.methods, method)}


def on_remeasure(backend: Backend):
    """Measure this device again (in the background); the news timer follows it."""
    gr.Info(backend.remeasure(), duration=6)
    return gr.Timer(active=True)

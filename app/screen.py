"""What the page shows for the step on screen: `picture()` gives every output a value, from the view's
position in the run (`Player`) and the pure render functions."""
from __future__ import annotations

import os
import tempfile

import gradio as gr

from gumiho_core import AR

from . import runfile
from .render.charts import all_figures
from .render.early import early_figure, early_html
from .render.explain import how_it_works_md, numbers_html, step_caption, step_caption_placeholder
from .render.race import race_figure, race_html
from .render.sampling import sampling_html
from .render.stats import numbers
from .render.status import status_html
from .render.text_view import legend_html, output_html, proposers_in
from .render.timing import timing_figure
from .render.tree_view import tree_svg
from .render.waiting import WAITING, waiting_figure
from .render.whatif import whatif_figure, whatif_html
from .stages import COMMITTED
from .player import Player
from .view import View


def _export(user: Player):
    """The run as a file to download, written once per version of the run."""
    run = user.run
    if user.busy or run is None or not run.records:
        return gr.update(interactive=False)
    key = (id(run), len(run.records))
    if user.export_key != key:
        user.drop_export()  # one file per visitor on the server's disk
        folder = tempfile.mkdtemp(prefix="gumiho-run-")
        user.export_path = os.path.join(folder, export_name(run))
        with open(user.export_path, "w", encoding="utf-8") as f:
            f.write(runfile.dumps(run))
        user.export_key = key
    return gr.update(value=user.export_path, interactive=True)


def export_name(run) -> str:
    """'gumiho-visualiser-eagle-race-39-tokens.json': the app, the method shown, whether it raced, its length."""
    race = "-race" if run.rivals else ""
    return f"gumiho-visualiser-{run.settings.method}{race}-{run.records[-1].total_new_tokens}-tokens.json"


def controls(view: View, user: Player) -> dict:
    """Buttons are enabled exactly when they can do something; the status line says why the others are not."""
    busy, shown = user.busy, user.run is not None and user.cursor >= 0
    return {
        view.run_btn: gr.update(interactive=not busy),
        view.pause_btn: gr.update(interactive=busy),
        view.resume_btn: gr.update(interactive=not busy and user.more_to_show),
        view.stop_btn: gr.update(interactive=busy or user.can_compute),
        view.prev_btn: gr.update(interactive=not busy and shown and user.cursor > 0),
        view.next_btn: gr.update(interactive=not busy and user.more_to_show),
        view.replay_btn: gr.update(interactive=not busy and shown),
        view.export_btn: _export(user),
        view.load_btn: gr.update(interactive=not busy),
    }


def _answer_so_far(user: Player, upto: int) -> str:
    """The plain answer: the tokenizer's decoding once the whole run is on screen, else the tokens' texts."""
    run = user.run
    if upto == len(run.records) - 1:
        return run.text
    ids = [t for rec in run.records[: upto + 1] for t in rec.new_token_ids if t not in run.special_ids]
    return "".join(run.pieces.get(t, "") for t in ids)


def _charts(view: View, user: Player, upto: int) -> dict:
    run = user.run
    notes = {view.race_note: race_html(run, upto), view.whatif_note: whatif_html(run, upto),
             view.early_note: early_html(run, upto)}
    if upto < 0:
        waiting = {getattr(view, chart): waiting_figure(chart) for chart in WAITING}
        return {view.numbers: numbers_html(None), **waiting, view.how: how_it_works_md(run, None), **notes}
    tally = numbers(run, upto)
    speed, speedup, accept, depth = all_figures(run, upto)
    return {view.numbers: numbers_html(tally), view.speed: speed, view.speedup: speedup, view.accept: accept,
            view.depth: depth, view.race: race_figure(run, upto), view.timing: timing_figure(run, upto),
            view.whatif: whatif_figure(run, upto), view.early: early_figure(run, upto),
            view.how: how_it_works_md(run, tally), **notes}


def _blank(view: View, user: Player) -> dict:
    return {view.caption: step_caption_placeholder(user.method), view.tree: "", view.legend: "",
            view.text: output_html([], {}), view.answer: "", view.check: sampling_html(None, COMMITTED, {}, True)}


def _step_on_screen(view: View, user: Player) -> dict:
    """The caption, tree, legend and text of the step and stage on screen."""
    run, rec, stage = user.run, user.run.records[user.cursor], user.stage
    upto = user.cursor if stage == COMMITTED else user.cursor - 1  # the last step whose tokens are in the text
    return {
        view.caption: step_caption(rec, stage, run.pieces, run.prompt_tokens, run.settings.method),
        view.tree: tree_svg(rec, run.pieces, stage),
        view.legend: legend_html(proposers_in(run.records[: user.cursor + 1]), key=run.settings.method != AR),
        view.check: sampling_html(rec, stage, run.pieces, run.settings.decode.greedy),
        view.text: output_html(run.records[: upto + 1], run.pieces, run.special_ids,
                               highlight=rec.index if stage == COMMITTED else None),
        view.answer: _answer_so_far(user, upto),
    }


def picture(view: View, user: Player, message: str, charts: bool = True) -> dict:
    """Every output for the step and stage on screen. Charts are recomputed only when asked (after a commit);
    otherwise the last ones are sent again, unchanged (Gradio sends a generator's unchanged outputs as empty
    diffs). Every output always gets a value: a component left out of a picture would get Gradio's generic
    update, and its alternation with values makes the session's copy of the page grow at every step."""
    out = {view.status: status_html(message, user.run.notes if user.run else ()), view.state: user,
           view.load_note: user.note, **controls(view, user)}
    shown = user.run is not None and user.cursor >= 0
    out.update(_step_on_screen(view, user) if shown else _blank(view, user))
    if charts or not user.charts:
        upto = -1 if not shown else user.cursor if user.stage == COMMITTED else user.cursor - 1
        user.charts = _charts(view, user, upto)
    return {**out, **user.charts}

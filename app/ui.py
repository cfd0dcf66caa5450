"""The page. `build_demo(models)` lays out the components and wires the events; every handler is a few
lines that move the view (`UserState`) and redraw it with the pure render functions.

Animation: a handler is a generator that yields one picture per stage of a step (serial 1, serial 2,
parallel, verified, committed) and sleeps between them; the sleeps are never timed.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, fields
from functools import partial
from html import escape

import gradio as gr

from gumiho_core import GumihoError

from . import runfile
from .charts import all_figures
from .explain import how_it_works_md, numbers_html, step_caption
from .runner import Models, advance, api_generate, start_run
from .settings import (CUSTOM, TREE_FIELDS, api_settings, default_preset, parse_settings, preset_name, tree_presets,
                       tree_settings)
from .state import UserState
from .stats import run_stats
from .text_view import legend_html, output_html, proposers_in
from .tree_view import COMMITTED, stages, tree_svg

EXAMPLES = [
    "Write a haiku about the sea.",
    "Explain in three sentences why the sky is blue.",
    "List five red fruits, one per line.",
    "Write a Python function that tells whether a number is prime.",
    "What is 17 times 23? Show your working.",
]
METHOD_CHOICES = [("gumiho: serial head for tokens 1-2, MLP heads for 3-7", "gumiho"),
                  ("serial: the serial head at every depth (EAGLE-2 style)", "serial"),
                  ("ar: plain decoding, one token per target pass", "ar")]
PAGE_CSS = """
.gm-status{font-size:15px;padding:6px 10px;border-radius:6px;background:#f4f4f4;color:#111}
.gm-status .warn{color:#8a3b00}
#gm-buttons button{min-width:0}
"""


@dataclass
class View:
    """The components a picture updates, in the order handlers list them as outputs."""

    status: gr.HTML
    caption: gr.HTML
    tree: gr.HTML
    legend: gr.HTML
    text: gr.HTML
    answer: gr.Textbox
    numbers: gr.HTML
    speed: gr.Plot
    speedup: gr.Plot
    accept: gr.Plot
    depth: gr.Plot
    how: gr.Markdown
    run_btn: gr.Button
    pause_btn: gr.Button
    resume_btn: gr.Button
    stop_btn: gr.Button
    prev_btn: gr.Button
    next_btn: gr.Button
    replay_btn: gr.Button
    export_btn: gr.DownloadButton
    load_btn: gr.UploadButton
    state: gr.State

    @property
    def outputs(self) -> list:
        return [getattr(self, f.name) for f in fields(self)]


# -- pictures ----------------------------------------------------------------------------------
def status_html(message: str, notes=()) -> str:
    warn = "".join(f'<div class="warn">⚠ {escape(n)}</div>' for n in notes)
    return f'<div class="gm-status" role="status">{message}{warn}</div>'


def _export(user: UserState):
    """The run as a file to download, written once per version of the run."""
    run = user.run
    if user.busy or run is None or not run.records:
        return gr.update(interactive=False)
    key = (id(run), len(run.records))
    if user.export_key != key:
        folder = tempfile.mkdtemp(prefix="gumiho-run-")
        user.export_path = os.path.join(folder, f"gumiho-{run.settings.method}-{len(run.records) - 1}-steps.json")
        with open(user.export_path, "w", encoding="utf-8") as f:
            f.write(runfile.dumps(run))
        user.export_key = key
    return gr.update(value=user.export_path, interactive=True)


def controls(view: View, user: UserState) -> dict:
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


def _answer_so_far(user: UserState, upto: int) -> str:
    """The plain answer: the tokenizer's decoding once the whole run is on screen, else the tokens' texts."""
    run = user.run
    if upto == len(run.records) - 1:
        return run.text
    ids = [t for rec in run.records[: upto + 1] for t in rec.new_token_ids if t not in run.special_ids]
    return "".join(run.pieces.get(t, "") for t in ids)


def _charts(view: View, user: UserState, upto: int) -> dict:
    run = user.run
    if upto < 0:
        return {view.numbers: numbers_html(None), view.how: how_it_works_md(run, None)}
    stats = run_stats(run, upto)
    speed, speedup, accept, depth = all_figures(run, upto)
    return {view.numbers: numbers_html(stats), view.speed: speed, view.speedup: speedup, view.accept: accept,
            view.depth: depth, view.how: how_it_works_md(run, stats)}


def picture(view: View, user: UserState, message: str, charts: bool = True) -> dict:
    """Every output for the step and stage on screen. Charts are redrawn only when asked (after a commit)."""
    out = {view.status: status_html(message, user.run.notes if user.run else ()), view.state: user,
           **controls(view, user)}
    run = user.run
    if run is None or user.cursor < 0:
        return out
    rec, stage = run.records[user.cursor], user.stage
    upto = user.cursor if stage == COMMITTED else user.cursor - 1  # the last step whose tokens are in the text
    out.update({
        view.caption: step_caption(rec, stage, run.pieces, run.prompt_tokens),
        view.tree: tree_svg(rec, run.pieces, stage),
        view.legend: legend_html(proposers_in(run.records[: user.cursor + 1]), key=run.settings.method != "ar"),
        view.text: output_html(run.records[: upto + 1], run.pieces, run.special_ids,
                               highlight=rec.index if stage == COMMITTED else None),
        view.answer: _answer_so_far(user, upto),
    })
    if charts:
        out.update(_charts(view, user, upto))
    return out


def describe(user: UserState) -> str:
    """The status line when nothing is running."""
    run = user.run
    if run is None:
        return "Type a prompt and press <b>Run</b>."
    where = f"step {user.cursor} of {len(run.records) - 1}"
    if user.can_compute:
        return f"Paused at {where}. <b>Next</b> shows one more step, <b>Resume</b> goes on, <b>Prev</b> goes back."
    browse = "<b>Prev</b>/<b>Next</b> step through it, <b>Replay</b> animates it again, <b>Export</b> saves it."
    if not run.finished:
        return f"Stopped: showing {where}. {browse}"
    reason = run.records[-1].stop_reason
    how = {"eos": "the model ended its answer", "max_new_tokens": "max new tokens reached",
           "context": "the context is full"}.get(reason, escape(str(reason)))
    return f"Showing {where}; the run has ended ({how}). {browse}"


def _running(user: UserState, computing: bool) -> str:
    run = user.run
    s = run.settings
    what = "Running" if computing else "Replaying recorded steps of"
    last = "…" if user.can_compute else len(run.records) - 1
    return (f"{what} <b>{escape(s.method)}</b> on {escape(run.target)} ({escape(run.device)}), tree "
            f"<i>{escape(s.preset)}</i>: step {max(user.cursor, 0)} of {last}. <b>Pause</b> to step back and forth.")


# -- the animation -----------------------------------------------------------------------------
def _wait(user: UserState) -> None:
    """Sleep for one picture, in short slices so that Pause and speed changes act at once."""
    end = time.monotonic() + user.delay
    while not user.pause and not user.fast and time.monotonic() < end:
        time.sleep(0.05)


def _next_stages(user: UserState, models: Models | None):
    """The stages still to show: the rest of the step on screen, or all of the next step (computed if need be).
    Returns None when there is nothing more to show."""
    run = user.run
    if user.stage != COMMITTED:
        order = stages(run.records[user.cursor])
        return order[order.index(user.stage) + 1:]
    if user.cursor + 1 >= len(run.records):
        if models is None or not user.can_compute:
            return None
        advance(models, run, user.live)
    user.cursor += 1
    return stages(run.records[user.cursor])


def play(view: View, user: UserState, models: Models | None = None, one_step: bool = False):
    """Pictures from the screen's position on, until Pause, the end of the run, or (one_step) one step.
    models=None replays the recorded steps only."""
    user.busy, user.pause = True, False
    try:
        while not user.pause:
            if models is not None and models.step_lock.locked():
                yield picture(view, user, "Waiting for the model: another visitor's step is running…", False)
            todo = _next_stages(user, models)
            if todo is None:
                break
            for stage in (todo[-1:] if user.fast else todo):
                user.stage = stage
                yield picture(view, user, _running(user, models is not None and user.can_compute),
                              charts=stage == COMMITTED)
                _wait(user)
                if user.pause:
                    break
            if one_step and user.stage == COMMITTED:
                break
    except Exception as e:  # whatever went wrong, leave a usable page (buttons back on), then report it
        user.busy = False
        yield picture(view, user, f"Stopped: {escape(str(e))}")
        raise (_fail(e) if isinstance(e, GumihoError) else e) from None
    finally:
        user.busy = False
        if user.live is not None and user.live.session.done:
            user.live = None  # the run is over: free its caches (they matter with a large model on a GPU)
    yield picture(view, user, describe(user))


# -- handlers ----------------------------------------------------------------------------------
def _fail(e: Exception):
    return gr.Error(str(e))


def on_run(view: View, models: Models, user: UserState, prompt, method, max_new_tokens, temperature, top_p, seed,
           top_k, mlp_topk, pruning, total_tokens, depth, delay, fast):
    try:
        settings = parse_settings(prompt, method, max_new_tokens, temperature, top_p, seed, models.device,
                                  top_k, mlp_topk, pruning, total_tokens, depth)
    except GumihoError as e:
        raise _fail(e) from None
    user.delay, user.fast, user.busy = float(delay), bool(fast), True
    loading = "Loading the model (first run only, a few seconds)…" if not models.ready else "Starting…"
    yield {view.status: status_html(loading), **controls(view, user)}  # no second Run while this one starts
    try:
        run, live = start_run(models, settings)
    except GumihoError as e:
        user.busy = False
        yield {view.status: status_html(describe(user)), **controls(view, user)}
        raise _fail(e) from None
    user.reset(run, live)
    yield from play(view, user, models)


def on_pause(user: UserState):
    user.pause = True
    return gr.update(interactive=False)


def on_stop(view: View, user: UserState):
    """Ends the run where it is (the running animation is cancelled by the event itself)."""
    user.pause, user.busy, user.live = True, False, None
    user.stage = COMMITTED  # a step cut short is shown whole
    return picture(view, user, describe(user))


def on_prev(view: View, user: UserState):
    if user.run is None or user.cursor <= 0:
        return picture(view, user, describe(user))
    user.cursor, user.stage = user.cursor - 1, COMMITTED
    return picture(view, user, describe(user))


def on_replay(view: View, user: UserState, delay, fast):
    if user.run is None:
        raise gr.Error("there is no run to replay: press Run, or load a run file")
    user.delay, user.fast = float(delay), bool(fast)
    user.cursor, user.stage = -1, COMMITTED
    yield from play(view, user, None)


def on_load(view: View, user: UserState, path):
    if not path:
        raise gr.Error("no file was uploaded")
    try:
        run = runfile.read(path)
    except runfile.RunFileError as e:
        raise gr.Error(f"Could not load this run file: {e}") from None
    user.reset(run)
    user.cursor = len(run.records) - 1
    gr.Info(f"Loaded a saved {run.settings.method} run of {len(run.records) - 1} steps: press Replay to watch it.",
            duration=5)
    return picture(view, user, f"Saved run loaded (no model needed): “{escape(run.settings.prompt[:120])}”. "
                   + describe(user))


def on_preset(name: str, *, device: str):
    """A preset fills the advanced tree fields; "custom" leaves them as they are."""
    cfg = tree_presets(device).get(name)
    if cfg is None:
        return [gr.skip()] * len(TREE_FIELDS)
    return [getattr(cfg, k) for k in TREE_FIELDS]


def on_tree_edit(device: str, *values):
    """Editing a tree field shows which preset (if any) the fields now match."""
    try:
        return preset_name(tree_settings(*values), device)
    except GumihoError:
        return CUSTOM


def on_delay(user: UserState, delay):
    user.delay = float(delay)


def on_fast(user: UserState, fast):
    user.fast = bool(fast)


# -- layout ------------------------------------------------------------------------------------
def _form(device: str):
    """The left column: prompt, method, lengths, and the tree behind the "advanced" fold."""
    prompt = gr.Textbox(label="Prompt", lines=3, placeholder="Ask the model something…", elem_id="prompt")
    gr.Examples([[p] for p in EXAMPLES], inputs=[prompt], label="Example prompts")
    method = gr.Radio(METHOD_CHOICES, value="gumiho", label="Method", elem_id="method")
    max_new = gr.Slider(1, 512, value=64, step=1, label="Max new tokens", elem_id="max-new-tokens")
    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy, exact same text)",
                            elem_id="temperature")
    with gr.Accordion("Advanced: sampling and draft tree", open=False):
        seed = gr.Number(0, precision=0, label="Seed (sampling)", minimum=0, elem_id="seed")
        top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top_p (sampling)")
        preset = gr.Dropdown(list(tree_presets(device)) + [CUSTOM], value=default_preset(device),
                             label="Tree preset", info="fills the fields below", elem_id="preset")
        cfg = tree_presets(device)[default_preset(device)]
        tips = {"top_k": "children per node at the serial steps", "mlp_topk": "tokens per MLP head",
                "pruning": "paths kept per MLP level", "total_tokens": "nodes verified per step, root included",
                "depth": "deepest draft level"}
        tree = [gr.Number(getattr(cfg, k), precision=0, label=k, info=tips[k], elem_id=f"tree-{k}")
                for k in TREE_FIELDS]
    return prompt, method, max_new, temperature, seed, top_p, preset, tree


def _outputs_column():
    caption = gr.HTML(step_caption_placeholder(), elem_id="caption")
    tree = gr.HTML("", elem_id="tree")
    legend = gr.HTML("", elem_id="legend")
    text = gr.HTML(output_html([], {}), elem_id="text")
    answer = gr.Textbox(label="Answer as plain text (what the CLI prints)", lines=3, interactive=False,
                        buttons=["copy"], elem_id="answer")
    numbers = gr.HTML(numbers_html(None), elem_id="numbers")
    return caption, tree, legend, text, answer, numbers


def step_caption_placeholder() -> str:
    return ('<div class="gm-cap" style="font-size:16px;padding:8px 12px;border-left:5px solid #0072B2;'
            'background:#f5f9fc">Each step: the serial head drafts tokens 1 and 2, the MLP heads draft tokens '
            '3–7 at once, the target verifies the whole tree in one pass, and the accepted tokens join the '
            'text.</div>')


def _toolbar():
    """Run and step controls, above the picture they act on."""
    with gr.Row(elem_id="gm-buttons"):
        run_btn = gr.Button("▶ Run", variant="primary", elem_id="run")
        pause_btn = gr.Button("Pause", interactive=False, elem_id="pause")
        resume_btn = gr.Button("Resume", interactive=False, elem_id="resume")
        stop_btn = gr.Button("■ Stop", variant="stop", interactive=False, elem_id="stop")
        prev_btn = gr.Button("◀ Prev", interactive=False, elem_id="prev")
        next_btn = gr.Button("Next ▶", interactive=False, elem_id="next")
        replay_btn = gr.Button("⟲ Replay", interactive=False, elem_id="replay")
    return run_btn, pause_btn, resume_btn, stop_btn, prev_btn, next_btn, replay_btn


def _files():
    """Saving a run, and loading one to replay without a model."""
    with gr.Row():
        export_btn = gr.DownloadButton("Export run (JSON)", interactive=False, elem_id="export", size="sm")
        load_btn = gr.UploadButton("Load run file", file_types=[".json"], type="filepath", elem_id="load", size="sm")
    return export_btn, load_btn


def build_demo(models: Models) -> gr.Blocks:
    """The whole page for `models` (nothing is loaded until the first run)."""
    return build_view(models)[0]


def build_view(models: Models) -> tuple[gr.Blocks, View]:
    """The page and the components its pictures update (tests drive the handlers through the View)."""
    with gr.Blocks(title="Gumiho visualiser") as demo:
        gr.Markdown("# Gumiho visualiser\nWatch speculative decoding draft, verify and accept, step by step: "
                    "a serial transformer head drafts the first two tokens, parallel MLP heads the next five, "
                    "and the target model keeps what it agrees with.")
        status = gr.HTML(status_html("Type a prompt and press <b>Run</b>."), elem_id="status")
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                form = _form(models.device)
                with gr.Group():
                    delay = gr.Slider(0.05, 2, value=0.5, step=0.05, label="Animation: seconds per picture",
                                      elem_id="delay")
                    fast = gr.Checkbox(False, label="Fast mode: no animation, one picture per step", elem_id="fast")
                files = _files()
            with gr.Column(scale=3):
                toolbar = _toolbar()
                column = _outputs_column()
        with gr.Row():
            speed, speedup = gr.Plot(label="speed", elem_id="speed"), gr.Plot(label="speedup", elem_id="speedup")
        with gr.Row():
            accept, depth = gr.Plot(label="tokens per step", elem_id="accept"), gr.Plot(label="depth", elem_id="depth")
        with gr.Accordion("How it works", open=True):
            how = gr.Markdown(how_it_works_md(None, None), elem_id="how")
        state = gr.State(UserState())
        view = View(status, *column, speed, speedup, accept, depth, how, *toolbar, *files, state)
        _wire(view, models, form, delay, fast)
    return demo, view


def _wire(view: View, models: Models, form, delay, fast) -> None:
    prompt, method, max_new, temperature, seed, top_p, preset, tree = form
    quiet = dict(api_visibility="private", show_progress="hidden")
    free = dict(quiet, concurrency_limit=None)  # never waits behind a decoding run
    run_inputs = [view.state, prompt, method, max_new, temperature, top_p, seed, *tree, delay, fast]
    run_evt = view.run_btn.click(partial(on_run, view, models), run_inputs, view.outputs, **quiet)
    resume_evt = view.resume_btn.click(partial(play, view, models=models), view.state, view.outputs, **quiet)
    next_evt = view.next_btn.click(partial(play, view, models=models, one_step=True), view.state, view.outputs,
                                   **quiet)
    replay_evt = view.replay_btn.click(partial(on_replay, view), [view.state, delay, fast], view.outputs, **quiet)
    view.pause_btn.click(on_pause, view.state, view.pause_btn, **free)
    view.stop_btn.click(partial(on_stop, view), view.state, view.outputs,
                        cancels=[run_evt, resume_evt, next_evt, replay_evt], **free)
    view.prev_btn.click(partial(on_prev, view), view.state, view.outputs, **free)
    view.load_btn.upload(partial(on_load, view), [view.state, view.load_btn], view.outputs, **free)
    delay.change(on_delay, [view.state, delay], None, **free)
    fast.change(on_fast, [view.state, fast], None, **free)
    preset.input(partial(on_preset, device=models.device), preset, tree, **free)
    for box in tree:
        box.input(partial(on_tree_edit, models.device), tree, preset, **free)

    def generate(prompt: str, method: str = "gumiho", max_new_tokens: int = 64, temperature: float = 0.0,
                 seed: int = 0) -> dict:
        """Decode `prompt` and return the run as `python -m gumiho_core.generate --json` prints it."""
        try:
            return api_generate(models, api_settings(prompt, method, max_new_tokens, temperature, seed))
        except GumihoError as e:
            raise _fail(e) from None

    gr.api(generate, api_name="generate", concurrency_id="decode")


def launch_options() -> dict:
    """Page-wide look, passed to launch() (Gradio 6 takes css there)."""
    return dict(css=PAGE_CSS, theme=gr.themes.Default(), max_file_size=runfile.MAX_BYTES)

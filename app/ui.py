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
from .messages import public_message, report
from .runner import Models, advance, api_generate, compute_run, on_gpu, start_run
from .settings import (
    AUTO,
    CUSTOM,
    TREE_FIELDS,
    api_settings,
    parse_settings,
    preset_choices,
    preset_name,
    tree_presets,
    tree_settings,
)
from .state import UserState
from .stats import run_stats
from .status import auto_note, model_line
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
# The panels that scroll are the components themselves, not the HTML inside them: a new picture replaces
# the inside, and the scroll position (kept by the element that persists) stays where the visitor left it.
PAGE_CSS = """
.gm-status{font-size:15px;padding:6px 10px;border-radius:6px;background:#f4f4f4;color:#111}
.gm-status .warn{color:#8a3b00}
#gm-buttons button{min-width:0}
#tree{max-height:72vh;overflow:auto !important}
#text{max-height:40vh;overflow:auto !important}
"""
STATE_TTL_S = 3 * 3600  # a visitor's run (and a paused run's caches) is dropped this long after their last action


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
        user.drop_export()  # one file per visitor on the server's disk
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
        return {view.numbers: numbers_html(None), view.speed: None, view.speedup: None, view.accept: None,
                view.depth: None, view.how: how_it_works_md(run, None)}
    stats = run_stats(run, upto)
    speed, speedup, accept, depth = all_figures(run, upto)
    return {view.numbers: numbers_html(stats), view.speed: speed, view.speedup: speedup, view.accept: accept,
            view.depth: depth, view.how: how_it_works_md(run, stats)}


def _blank(view: View) -> dict:
    return {view.caption: step_caption_placeholder(), view.tree: "", view.legend: "", view.text: output_html([], {}),
            view.answer: ""}


def picture(view: View, user: UserState, message: str, charts: bool = True) -> dict:
    """Every output for the step and stage on screen. Charts are recomputed only when asked (after a commit);
    otherwise the last ones are sent again, unchanged (Gradio sends a generator's unchanged outputs as empty
    diffs). Every output always gets a value: a component left out of a picture would get Gradio's generic
    update, and its alternation with values makes the session's copy of the page grow at every step."""
    out = {view.status: status_html(message, user.run.notes if user.run else ()), view.state: user,
           **controls(view, user)}
    run = user.run
    if run is None or user.cursor < 0:
        out.update(_blank(view))
        if charts or not user.charts:
            user.charts = _charts(view, user, -1)
        return {**out, **user.charts}
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
    if charts or not user.charts:
        user.charts = _charts(view, user, upto)
    return {**out, **user.charts}


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


def _tree_words(run) -> str:
    s = run.settings
    if s.method == "ar" or s.tree is None:
        return ""
    fallback = " (not measured here yet)" if s.preset != AUTO and s.preset.startswith(AUTO) else ""
    return f", tree <i>{escape(s.preset)}</i>{fallback}: {s.tree.total_tokens} nodes"


def _running(user: UserState, what: str) -> str:
    run = user.run
    last = "…" if user.can_compute else len(run.records) - 1
    return (f"{what} <b>{escape(run.settings.method)}</b> on {escape(run.target)} ({escape(run.device)})"
            f"{_tree_words(run)}: step {max(user.cursor, 0)} of {last}. <b>Pause</b> to step back and forth.")


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


REPLAYING = "Replaying recorded steps of"


def play(view: View, user: UserState, models: Models | None = None, one_step: bool = False,
         verb: str = REPLAYING):
    """Pictures from the screen's position on, until Pause, the end of the run, or (one_step) one step.
    models=None shows the recorded steps only (`verb` says how they were recorded)."""
    user.busy, user.pause = True, False
    try:
        while not user.pause:
            if models is not None and models.step_lock.locked():
                yield picture(view, user, "Waiting for the model: another visitor's step is running…", False)
            todo = _next_stages(user, models)
            if todo is None:
                break
            what = "Running" if models is not None and user.can_compute else verb
            for stage in (todo[-1:] if user.fast else todo):
                user.stage = stage
                yield picture(view, user, _running(user, what), charts=stage == COMMITTED)
                _wait(user)
                if user.pause:
                    break
            if one_step and user.stage == COMMITTED:
                break
    except Exception as e:  # whatever went wrong, leave a usable page (buttons back on), then report it
        message = report(e, "a decoding step failed")
        user.busy = False
        yield picture(view, user, f"Stopped: {escape(message)}")
        raise gr.Error(message) from None
    finally:  # also when the event is cancelled (Stop, or the visitor left): the generator is closed here
        user.busy = False
        if user.live is not None and not user.live.can_compute:
            user.live = None
    yield picture(view, user, describe(user))


# -- handlers ----------------------------------------------------------------------------------
def _fail(e: GumihoError):
    return gr.Error(public_message(e))


def on_run(view: View, models: Models, compute, user: UserState, prompt, method, max_new_tokens, temperature,
           top_p, seed, preset, top_k, mlp_topk, pruning, total_tokens, depth, delay, fast):
    """Start a run and animate it. `compute` is compute_run as the GPU sees it, for whole-run mode (ZeroGPU)."""
    try:
        settings = parse_settings(prompt, method, max_new_tokens, temperature, top_p, seed, models.device,
                                  top_k, mlp_topk, pruning, total_tokens, depth, preset=preset)
    except GumihoError as e:
        raise _fail(e) from None
    user.delay, user.fast, user.busy = float(delay), bool(fast), True
    loading = "Loading the model (first run only)…" if not models.ready else "Starting…"
    if models.whole_runs:
        loading = "Computing the whole run on the GPU, then showing it step by step…"
    yield picture(view, user, loading, charts=False)  # no second Run while this one starts
    try:
        run, live = (compute(settings), None) if models.whole_runs else start_run(models, settings)
    except Exception as e:
        message = report(e, "starting a run")
        user.busy = False
        yield picture(view, user, describe(user), charts=False)
        raise gr.Error(message) from None
    user.reset(run, live)
    if models.whole_runs:
        yield from play(view, user, None, verb="Showing the computed steps of")
    else:
        yield from play(view, user, models)


def on_pause(user: UserState):
    user.pause = True
    return gr.update(interactive=False)


def on_stop(view: View, user: UserState):
    """Ends the run where it is (the running animation is cancelled by the event itself) and frees its caches."""
    user.pause, user.busy = True, False
    if user.live is not None:
        user.live.release()
        user.live = None
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


def on_preset(models: Models, name: str, *values):
    """A preset fills the advanced tree fields ("auto": with gumiho's tree as it stands now); "custom" leaves
    them as they are (sent back: a value, never a bare update, see picture())."""
    cfg = models.auto_tree("gumiho")[0] if name == AUTO else tree_presets(models.device).get(name)
    if cfg is None:
        return list(values)
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
    """Fast mode has no pictures between steps, so the animation speed does nothing there."""
    user.fast = bool(fast)
    return gr.update(interactive=not user.fast)


def on_temperature(temperature):
    """Seed and top_p act only when sampling."""
    sampling = bool(temperature) and temperature > 0
    return gr.update(interactive=sampling), gr.update(interactive=sampling)


def on_method(method):
    """Plain decoding drafts no tree: its settings are off while it is chosen."""
    return [gr.update(interactive=method != "ar")] * (1 + len(TREE_FIELDS))


@dataclass
class News:
    """The components that follow the server rather than the visitor's run (see on_tick)."""

    model: gr.HTML
    auto: gr.Markdown
    how: gr.Markdown
    timer: gr.Timer


def on_tick(news: News, models: Models, user: UserState):
    """The server's news for one visitor: the model line and what auto means now (also in "How it works"
    while there is no run). The timer stops when nothing more will change."""
    done = models.settled.is_set() or (models.error is not None and not models.ready)
    note = auto_note(models)
    how = user.charts.get(news.how) if user.run is not None else None
    return {news.model: model_line(models), news.auto: note, news.timer: gr.Timer(active=not done),
            news.how: how or how_it_works_md(None, None, note)}


# -- layout ------------------------------------------------------------------------------------
TREE_TIPS = {"top_k": "children per node at the serial steps", "mlp_topk": "tokens per MLP head",
             "pruning": "paths kept per MLP level", "total_tokens": "nodes verified per step, root included",
             "depth": "deepest draft level"}


def _form(models: Models):
    """The left column: prompt, method, lengths, and the tree behind the "advanced" fold."""
    prompt = gr.Textbox(label="Prompt", lines=3, placeholder="Ask the model something…", elem_id="prompt")
    gr.Examples([[p] for p in EXAMPLES], inputs=[prompt], label="Example prompts")
    method = gr.Radio(METHOD_CHOICES, value="gumiho", label="Method", elem_id="method")
    max_new = gr.Slider(1, 512, value=64, step=1, label="Max new tokens", elem_id="max-new-tokens")
    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy, exact same text)",
                            elem_id="temperature")
    with gr.Accordion("Advanced: sampling and draft tree", open=False, elem_id="advanced"):
        seed = gr.Number(0, precision=0, label="Seed (sampling)", minimum=0, interactive=False, elem_id="seed")
        top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top_p (sampling)", interactive=False, elem_id="top-p")
        preset = gr.Dropdown(preset_choices(models.device), value=AUTO, label="Tree preset",
                             info="auto: the best tree measured on this device; the others fill the fields below",
                             elem_id="preset")
        cfg = models.auto_tree("gumiho")[0]
        tree = [gr.Number(getattr(cfg, k), precision=0, label=k, info=TREE_TIPS[k], elem_id=f"tree-{k}")
                for k in TREE_FIELDS]
        auto = gr.Markdown(auto_note(models), elem_id="auto-note")
    return prompt, method, max_new, temperature, seed, top_p, preset, tree, auto


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
    """The whole page for `models` (nothing is loaded here: Models loads in the background)."""
    return build_view(models)[0]


def build_view(models: Models) -> tuple[gr.Blocks, View]:
    """The page and the components its pictures update (tests drive the handlers through the View)."""
    with gr.Blocks(title="Gumiho visualiser", delete_cache=(3600, 3600)) as demo:
        gr.Markdown("# Gumiho visualiser\nWatch speculative decoding draft, verify and accept, step by step: "
                    "a serial transformer head drafts the first two tokens, parallel MLP heads the next five, "
                    "and the target model keeps what it agrees with.")
        with gr.Group():  # what this visitor's run is doing, and under it what the server is doing
            status = gr.HTML(status_html("Type a prompt and press <b>Run</b>."), elem_id="status")
            model = gr.HTML(model_line(models), elem_id="model-line")
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                form = _form(models)
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
            how = gr.Markdown(how_it_works_md(None, None, auto_note(models)), elem_id="how")
        state = gr.State(UserState(), time_to_live=STATE_TTL_S, delete_callback=UserState.close)
        view = View(status, *column, speed, speedup, accept, depth, how, *toolbar, *files, state)
        news = News(model, form[-1], how, gr.Timer(1.0))
        _wire(demo, view, news, models, form, delay, fast)
    return demo, view


def _wire(demo: gr.Blocks, view: View, news: News, models: Models, form, delay, fast) -> None:
    prompt, method, max_new, temperature, seed, top_p, preset, tree, _ = form
    quiet = dict(show_progress="hidden")
    hidden = dict(quiet, api_visibility="private")
    free = dict(hidden, concurrency_limit=None)  # never waits behind a decoding run
    animate = dict(quiet, concurrency_id="animate")  # visitors animating at once: the queue's default limit
    compute = on_gpu(partial(compute_run, models), models.device)
    run_inputs = [view.state, prompt, method, max_new, temperature, top_p, seed, preset, *tree, delay, fast]
    # "run" and "stop" are callable by clients (not listed in the API page): tests drive many visitors through them
    run_evt = view.run_btn.click(partial(on_run, view, models, compute), run_inputs, view.outputs,
                                 api_name="run", api_visibility="undocumented", **animate)
    resume_evt = view.resume_btn.click(partial(play, view, models=models), view.state, view.outputs,
                                       api_visibility="private", **animate)
    next_evt = view.next_btn.click(partial(play, view, models=models, one_step=True), view.state, view.outputs,
                                   api_visibility="private", **animate)
    replay_evt = view.replay_btn.click(partial(on_replay, view), [view.state, delay, fast], view.outputs,
                                       concurrency_id="replay", **hidden)
    view.pause_btn.click(on_pause, view.state, view.pause_btn, **free)
    view.stop_btn.click(partial(on_stop, view), view.state, view.outputs, cancels=[run_evt, resume_evt, next_evt,
                        replay_evt], api_name="stop", api_visibility="undocumented", concurrency_limit=None, **quiet)
    view.prev_btn.click(partial(on_prev, view), view.state, view.outputs, **free)
    view.load_btn.upload(partial(on_load, view), [view.state, view.load_btn], view.outputs, **free)
    delay.change(on_delay, [view.state, delay], None, **free)
    fast.change(on_fast, [view.state, fast], delay, **free)
    temperature.change(on_temperature, temperature, [seed, top_p], **free)
    method.change(on_method, method, [preset, *tree], **free)
    preset.input(partial(on_preset, models), [preset, *tree], tree, **free)
    for box in tree:
        box.input(partial(on_tree_edit, models.device), tree, preset, **free)
    news.timer.tick(partial(on_tick, news, models), view.state, [news.model, news.auto, news.how, news.timer], **free)
    demo.load(partial(on_preset, models, AUTO), None, tree, **free)  # a new page's fields show auto as it is now
    view.run_btn.click(lambda: gr.Timer(active=True), None, news.timer, **free)  # a failed load may be retried

    api = on_gpu(partial(api_generate, models), models.device)

    def generate(prompt: str, method: str = "gumiho", max_new_tokens: int = 64, temperature: float = 0.0,
                 seed: int = 0, tree: str = AUTO) -> dict:
        """Decode `prompt` and return the run as `python -m gumiho_core.generate --json` prints it.

        tree: "auto" (the CLI's default: the tree measured best on this device; waits for that measurement
        if it is still running) or "paper" (the authors' 64-node tree).
        """
        try:
            return api(api_settings(prompt, method, max_new_tokens, temperature, seed, tree))
        except Exception as e:
            raise gr.Error(report(e, "the generate endpoint")) from None

    gr.api(generate, api_name="generate", concurrency_id="decode")


def launch_options() -> dict:
    """Page-wide look and limits, passed to launch() (Gradio 6 takes css there). Errors other than gr.Error
    show as a bare "Error" (show_error stays off): no traceback or server path reaches the page."""
    return dict(css=PAGE_CSS, theme=gr.themes.Default(), max_file_size=runfile.MAX_BYTES, show_error=False)

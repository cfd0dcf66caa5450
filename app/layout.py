"""The page: `build_demo(backend)` lays out the components (gr.Blocks) and hands them to events.wire().
Nothing is loaded here: the models load in the background."""
from __future__ import annotations

import gradio as gr

from gumiho_core import GUMIHO, TREE_FIELDS

from . import runfile
from .backend import Backend
from .events import wire
from .render.explain import how_it_works_md, numbers_html, step_caption_placeholder
from .render.early import early_html
from .render.race import race_html
from .render.sampling import sampling_html
from .render.status import measure_note, missing_words, model_line, status_html, tree_note
from .render.text_view import output_html
from .render.waiting import waiting_figure
from .render.whatif import whatif_html
from .settings import (DEFAULT_PRESET, PRESET_MENU, Form, method_choices, preset_fields, race_choices,
                       race_value)
from .stages import COMMITTED
from .player import Player
from .view import News, View

EXAMPLES = [
    "Write a haiku about the sea.",
    "Explain in three sentences why the sky is blue.",
    "List five red fruits, one per line.",
    "Write a Python function that tells whether a number is prime.",
    "What is 17 times 23? Show your working.",
]
# The panels that scroll are the components themselves, not the HTML inside them: a new picture replaces
# the inside, and the scroll position (kept by the element that persists) stays where the visitor left it.
PAGE_CSS = """
.gm-status{font-size:15px;padding:6px 10px;border-radius:6px;background:#f4f4f4;color:#111}
.gm-status .warn{color:#8a3b00}
.gm-status.refused{background:#fdf0e6;border-left:4px solid #D55E00}
.gm-missing{font-size:13px;color:#8a3b00;padding:0 4px}
#gm-buttons button{min-width:0}
#stop:disabled,#stop[disabled]{background:#e8e8e8 !important;color:#777 !important;border-color:#d0d0d0 !important}
#tree{max-height:72vh;overflow:auto !important}
#text{max-height:40vh;overflow:auto !important}
.gm-load{font-size:14px;padding:6px 10px;border-radius:6px;border-left:4px solid #0072B2;background:#eef5fb;color:#111}
.gm-load.refused{border-left-color:#D55E00;background:#fdf0e6}
"""
STATE_TTL_S = 3 * 3600  # a visitor's run (and a paused run's caches) is dropped this long after their last action
TREE_TIPS = {"top_k": "children per node at the serial steps", "mlp_topk": "tokens per MLP head",
             "pruning": "paths kept per MLP level", "total_tokens": "nodes verified per step, root included",
             "depth": "deepest draft level"}


def _advanced(backend: Backend) -> dict:
    """Sampling and the tree's fields, behind the "advanced" fold: the form's fields from seed on, and the note on
    how this device is measured with the button that measures it again."""
    with gr.Accordion("Advanced: sampling, the tree's fields, measuring this device", open=False, elem_id="advanced"):
        seed = gr.Number(0, precision=0, label="Seed (sampling)", minimum=0, interactive=False, elem_id="seed")
        top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top_p (sampling)", interactive=False, elem_id="top-p")
        cfg = preset_fields(DEFAULT_PRESET)
        tree = {k: gr.Number(getattr(cfg, k), precision=0, label=k, info=TREE_TIPS[k], elem_id=f"tree-{k}")
                for k in TREE_FIELDS}
        auto = gr.Markdown(measure_note(backend.status()), elem_id="auto-note")
        remeasure = gr.Button("Measure this device again", size="sm", elem_id="remeasure")
    return dict(seed=seed, top_p=top_p, auto=auto, remeasure=remeasure, **tree)


def _methods(backend: Backend) -> dict:
    """The method shown step by step, the methods racing it, and why any is missing."""
    methods = backend.methods()
    method = gr.Radio(method_choices(methods), value=GUMIHO, label="Method shown step by step", elem_id="method")
    race = gr.CheckboxGroup(race_choices(methods), value=race_value(methods), label="Race on the same prompt",
                            info="Plain decoding always runs beside them: every speedup is measured against it.",
                            elem_id="race-methods")
    missing = gr.HTML(f'<div class="gm-missing">{missing_words(backend.status())}</div>', elem_id="missing")
    return dict(method=method, race=race, missing=missing)


def _form(backend: Backend) -> tuple[Form, dict]:
    """The left column: prompt, methods, the tree, lengths, the advanced fold, the animation's speed. Returns the
    Run form's components and the ones the server's news updates."""
    prompt = gr.Textbox(EXAMPLES[0], label="Prompt", lines=3, placeholder="Ask the model something…", elem_id="prompt")
    gr.Examples([[p] for p in EXAMPLES], inputs=[prompt], label="Example prompts")
    methods = _methods(backend)
    preset = gr.Dropdown([(p, p) for p in PRESET_MENU], value=DEFAULT_PRESET, label="Draft tree",
                         allow_custom_value=True, elem_id="preset")  # an old name ("small (CPU)") from API callers
    note = gr.Markdown(tree_note(backend.status(), DEFAULT_PRESET), elem_id="tree-note")
    max_new = gr.Slider(1, 512, value=64, step=1, label="Max new tokens", elem_id="max-new-tokens")
    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy, exact same text)",
                            elem_id="temperature")
    advanced = _advanced(backend)
    news = dict(auto=advanced.pop("auto"), remeasure=advanced.pop("remeasure"), tree_note=note, **methods)
    with gr.Group():
        delay = gr.Slider(0.05, 2, value=0.5, step=0.05, label="Animation: seconds per picture", elem_id="delay")
        fast = gr.Checkbox(False, label="Fast mode: no animation, one picture per step", elem_id="fast")
    form = Form(prompt=prompt, method=methods["method"], max_new_tokens=max_new, temperature=temperature,
                preset=preset, delay=delay, fast=fast, **advanced)
    return form, news


def _outputs_column() -> dict:
    return dict(caption=gr.HTML(step_caption_placeholder(), elem_id="caption"),
                tree=gr.HTML("", elem_id="tree"),
                legend=gr.HTML("", elem_id="legend"),
                check=gr.HTML(sampling_html(None, COMMITTED, {}, True), elem_id="check"),
                text=gr.HTML(output_html([], {}), elem_id="text"),
                answer=gr.Textbox(label="Answer as plain text (what the CLI prints)", lines=3, interactive=False,
                                  buttons=["copy"], elem_id="answer"),
                numbers=gr.HTML(numbers_html(None), elem_id="numbers"))


def _toolbar() -> dict:
    """Run and step controls, above the picture they act on."""
    with gr.Row(elem_id="gm-buttons"):
        return dict(run_btn=gr.Button("▶ Run", variant="primary", elem_id="run"),
                    pause_btn=gr.Button("Pause", interactive=False, elem_id="pause"),
                    resume_btn=gr.Button("Resume", interactive=False, elem_id="resume"),
                    stop_btn=gr.Button("■ Stop", variant="stop", interactive=False, elem_id="stop"),
                    prev_btn=gr.Button("◀ Prev", interactive=False, elem_id="prev"),
                    next_btn=gr.Button("Next ▶", interactive=False, elem_id="next"),
                    replay_btn=gr.Button("⟲ Replay", interactive=False, elem_id="replay"))


def _files() -> dict:
    """Saving a run, and loading one to replay without a model; under them, what became of the last file."""
    with gr.Row():
        files = dict(export_btn=gr.DownloadButton("Export run (JSON)", interactive=False, elem_id="export", size="sm"),
                     load_btn=gr.UploadButton("Load run file", file_types=[".json"], type="filepath", elem_id="load",
                                              size="sm"))
    return dict(files, load_note=gr.HTML("", elem_id="load-note"))


def _chart(name: str, label: str) -> gr.Plot:
    """A chart, drawn from the start with what it will show (see render/waiting.py)."""
    return gr.Plot(waiting_figure(name), label=label, elem_id=name)


def _charts() -> dict:
    """The race across the page, then where the time goes, the what-if and why early tokens matter, then the run's
    own curves and every drafter's acceptance by depth."""
    race = _chart("race", "race")
    race_note = gr.HTML(race_html(None, -1), elem_id="race-note")
    timing, whatif = _chart("timing", "time per step"), _chart("whatif", "what-if")
    whatif_note = gr.HTML(whatif_html(None, -1), elem_id="whatif-note")
    early = _chart("early", "why early tokens matter")
    early_note = gr.HTML(early_html(None, -1), elem_id="early-note")
    with gr.Row():
        speed, speedup = _chart("speed", "speed"), _chart("speedup", "speedup")
    with gr.Row():
        accept, depth = _chart("accept", "tokens per step"), _chart("depth", "depth")
    return dict(race=race, race_note=race_note, timing=timing, whatif=whatif, whatif_note=whatif_note, early=early,
                early_note=early_note, speed=speed, speedup=speedup, accept=accept, depth=depth)


INTRO = ("# Gumiho visualiser\nWatch speculative decoding draft, verify and accept, step by step. In the default "
         "tree, Gumiho's 2-layer transformer drafts tokens 1 and 2 one after the other (S1, S2), its MLP heads draft "
         "tokens 3–7 all at once (M1–M5), and the target model keeps what it agrees with; the race below runs "
         "EAGLE-2-style and Medusa-style drafters on the same prompt where their heads load.")


def build_demo(backend: Backend) -> gr.Blocks:
    """The whole page for `backend` (nothing is loaded here: the models load in the background)."""
    return build_view(backend)[0]


def build_view(backend: Backend) -> tuple[gr.Blocks, View]:
    """The page and the components its pictures update (tests drive the handlers through the View)."""
    with gr.Blocks(title="Gumiho visualiser", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(INTRO)
        with gr.Group():  # what this visitor's run is doing, and under it what the server is doing
            status = gr.HTML(status_html("Type a prompt and press <b>Run</b>."), elem_id="status")
            model = gr.HTML(model_line(backend.status()), elem_id="model-line")
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                form, news = _form(backend)
                files = _files()
            with gr.Column(scale=3):
                toolbar = _toolbar()
                column = _outputs_column()
        charts = _charts()
        with gr.Accordion("How it works", open=True):
            how = gr.Markdown(how_it_works_md(None, None, tree_note(backend.status(), DEFAULT_PRESET)),
                              elem_id="how")
        state = gr.State(Player(), time_to_live=STATE_TTL_S, delete_callback=Player.close)
        view = View(status=status, how=how, state=state, **column, **charts, **toolbar, **files)
        wire(demo, view, News(model=model, how=how, timer=gr.Timer(1.0), **news), backend, form)
    return demo, view


def launch_options() -> dict:
    """Page-wide look and limits, passed to launch() (Gradio 6 takes css there). Errors other than gr.Error
    show as a bare "Error" (show_error stays off): no traceback or server path reaches the page."""
    return dict(css=PAGE_CSS, theme=gr.themes.Default(), max_file_size=runfile.MAX_BYTES, show_error=False)

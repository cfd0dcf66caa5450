"""Which handler each event of the page calls, with which inputs and outputs, and the `generate` API
endpoint. Decoding events share the queue's "animate" limit; small ones never wait behind a run. Every event a
visitor causes marks them as acting (Backend.touch): a measurement of this device waits for quiet meanwhile."""
from __future__ import annotations

import inspect
from functools import partial

import gradio as gr

from gumiho_core import AUTO

from . import handlers as on
from .animation import play
from .backend import Backend, api_generate, compute_run, on_gpu
from .limits import LOADS_AT_ONCE
from .messages import report
from .settings import Form, api_settings
from .view import News, View

QUIET = dict(show_progress="hidden")
HIDDEN = dict(QUIET, api_visibility="private")
FREE = dict(HIDDEN, concurrency_limit=None)  # never waits behind a decoding run
ANIMATE = dict(QUIET, concurrency_id="animate")  # visitors animating at once: the queue's default limit
LOAD = dict(HIDDEN, concurrency_id="load", concurrency_limit=LOADS_AT_ONCE)  # each checked and drawn in bounded time


def acting(backend: Backend, fn):
    """`fn`, marking the visitor as acting when called and at every picture of an animation."""
    if inspect.isgeneratorfunction(fn.func if isinstance(fn, partial) else fn):
        def animate(*args):
            backend.touch()
            for out in fn(*args):
                backend.touch()
                yield out
        return animate

    def act(*args):
        backend.touch()
        return fn(*args)
    return act


def _run_handler(view: View, backend: Backend, compute):
    """on_run with the form's values gathered into one Form (the inputs are the Form's fields, in order)."""
    def run(user, *values):
        yield from on.on_run(view, backend, compute, user, Form(*values))
    return run


def _wire_run(view: View, backend: Backend, form: Form, news: News) -> None:
    """Run, Resume, Next, Replay and Stop (which cancels the others). "run" and "stop" are callable by clients
    (not listed in the API page): tests drive many visitors through them."""
    compute = on_gpu(partial(compute_run, backend), backend.device)
    act = partial(acting, backend)
    run_evt = view.run_btn.click(act(_run_handler(view, backend, compute)), [view.state, *form.inputs],
                                 view.outputs, api_name="run", api_visibility="undocumented", **ANIMATE)
    resume_evt = view.resume_btn.click(act(partial(play, view, backend=backend)), view.state, view.outputs,
                                       api_visibility="private", **ANIMATE)
    next_evt = view.next_btn.click(act(partial(play, view, backend=backend, one_step=True)), view.state,
                                   view.outputs, api_visibility="private", **ANIMATE)
    replay_evt = view.replay_btn.click(act(partial(on.on_replay, view)), [view.state, form.delay, form.fast],
                                       view.outputs, concurrency_id="replay", **HIDDEN)
    view.stop_btn.click(act(partial(on.on_stop, view)), view.state, view.outputs, cancels=[run_evt, resume_evt,
                        next_evt, replay_evt], api_name="stop", api_visibility="undocumented", concurrency_limit=None,
                        **QUIET)
    for evt in (run_evt, resume_evt, next_evt):  # a run's end may note that the measurement is out of date
        evt.then(lambda: gr.Timer(active=True), None, news.timer, **FREE)


def _wire_controls(demo: gr.Blocks, view: View, news: News, backend: Backend, form: Form) -> None:
    """The buttons and fields that change the view or the form, and the server's news."""
    tree, act = form.tree, partial(acting, backend)
    view.pause_btn.click(act(on.on_pause), view.state, view.pause_btn, **FREE)
    view.prev_btn.click(act(partial(on.on_prev, view)), view.state, view.outputs, **FREE)
    view.load_btn.upload(act(partial(on.on_load, view)), [view.state, view.load_btn], view.outputs, **LOAD)
    form.delay.change(on.on_delay, [view.state, form.delay], None, **FREE)
    form.fast.change(on.on_fast, [view.state, form.fast], form.delay, **FREE)
    form.temperature.change(on.on_temperature, form.temperature, [form.seed, form.top_p], **FREE)
    form.method.change(on.on_method, [view.state, form.method], view.caption, **FREE)
    news.race.input(on.on_race, [view.state, news.race], None, **FREE)
    form.preset.input(partial(on.on_preset, backend), [form.preset, *tree], [*tree, news.tree_note], **FREE)
    for box in tree:
        box.input(on.on_tree_edit, tree, form.preset, **FREE)
    inputs = [view.state, form.preset, form.method]
    news.timer.tick(partial(on.on_tick, news, backend), inputs, news.outputs, **FREE)
    demo.load(partial(on.on_tick, news, backend), inputs, news.outputs, **FREE)  # what this server offers now
    news.remeasure.click(act(partial(on.on_remeasure, backend)), None, news.timer, **FREE)
    view.run_btn.click(lambda: gr.Timer(active=True), None, news.timer, **FREE)  # a failed load may be retried


def _api(backend: Backend) -> None:
    api = on_gpu(partial(api_generate, backend), backend.device)

    def generate(prompt: str, method: str = "gumiho", max_new_tokens: int = 64, temperature: float = 0.0,
                 seed: int = 0, tree: str = AUTO) -> dict:
        """Decode `prompt` and return the run as `python -m gumiho_core.generate --json` prints it.

        tree: "auto" (the CLI's default: the fastest tree measured on this device that drafts deeper than the
        serial steps, so the MLP heads take part; waits for that measurement if it is still running), "fastest"
        (the fastest measured tree of any depth), "paper" (the authors' 64-node tree), "classroom" (22 nodes in
        which every head shows) or "small".
        """
        try:
            return api(api_settings(prompt, method, max_new_tokens, temperature, seed, tree))
        except Exception as e:
            raise gr.Error(report(e, "the generate endpoint")) from None

    gr.api(generate, api_name="generate", concurrency_id="decode")


def wire(demo: gr.Blocks, view: View, news: News, backend: Backend, form: Form) -> None:
    """Every event of the page (`form` holds the Run form's components), and the API."""
    _wire_run(view, backend, form, news)
    _wire_controls(demo, view, news, backend, form)
    _api(backend)

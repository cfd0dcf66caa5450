"""Status lines in words. For the visitor's run: the status line (what is running, paused or ended).
For the server: the model line under it (loading, measuring this device, ready, or what failed and what
still works) and the note under the tree settings on what "auto" chose.

Every message that came from an error is already scrubbed of paths.
"""
from __future__ import annotations

from html import escape
from pathlib import PurePath

from ..messages import scrub
from ..runner import TREE_MODES, Models
from ..settings import AUTO, fallback_preset
from ..state import UserState

CSS = """
.gm-model{font-size:13px;color:#333;padding:2px 10px}
.gm-model.bad{color:#8a1c00;font-weight:600}
"""


def status_html(message: str, notes=()) -> str:
    warn = "".join(f'<div class="warn">⚠ {escape(n)}</div>' for n in notes)
    return f'<div class="gm-status" role="status">{message}{warn}</div>'


STOP_WORDS = {"eos": "the model ended its answer", "max_new_tokens": "max new tokens reached",
              "context": "the context is full"}


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
    return f"Showing {where}; the run has ended ({STOP_WORDS.get(reason, escape(str(reason)))}). {browse}"


def _tree_words(run) -> str:
    s = run.settings
    if s.method == "ar" or s.tree is None:
        return ""
    fallback = " (not measured here yet)" if s.preset != AUTO and s.preset.startswith(AUTO) else ""
    return f", tree <i>{escape(s.preset)}</i>{fallback}: {s.tree.total_tokens} nodes"


def running_line(user: UserState, what: str) -> str:
    """The status line while a run animates: `what` it does ("Running", "Replaying ..."), where it is."""
    run = user.run
    last = "…" if user.can_compute else len(run.records) - 1
    return (f"{what} <b>{escape(run.settings.method)}</b> on {escape(run.target)} ({escape(run.device)})"
            f"{_tree_words(run)}: step {max(user.cursor, 0)} of {last}. <b>Pause</b> to step back and forth.")


def _drafter_words(models: Models) -> str:
    loaded = models.loaded
    if loaded.drafter is None:
        return f"⚠ not loaded ({escape(loaded.drafter_error or '')}): only plain decoding (ar) works"
    if not loaded.drafter.trained:
        return "untrained heads (exact output, little speedup)"
    return f"heads from {escape(PurePath(loaded.drafter.origin).name)}"


def _auto_words(models: Models) -> str:
    if models.measuring is not None:
        return (f"measuring this device once ({escape(models.measuring)}); until then auto runs use the "
                f"<i>{escape(fallback_preset(models.device))}</i> tree")
    if models.choices:
        sizes = ", ".join(f"{c.tree.total_tokens} nodes for {m}" for m, c in models.choices.items())
        return f"{sizes} (measured on this device)"
    return f"the <i>{escape(fallback_preset(models.device))}</i> tree (this device is not measured)"


def model_line(models: Models) -> str:
    """One line: which model, on what, with which drafter, and what "auto" means now."""
    if models.error is not None and not models.ready:
        text = (f"⚠ The model could not be loaded: {escape(models.error)} Runs are off until it loads; "
                f"<b>Load run file</b> still replays saved runs.")
        return f'<style>{CSS}</style><div class="gm-model bad" role="status">{text}</div>'
    if not models.ready:
        text = (f"Loading the model {escape(scrub(models.target_spec))} on {escape(models.device)}… "
                f"The page works meanwhile; a Run waits for it.")
    else:
        text = (f"Model: <b>{escape(models.loaded.target.name)}</b> on {escape(models.device)} · drafter: "
                f"{_drafter_words(models)} · auto tree: {_auto_words(models)}")
    return f'<style>{CSS}</style><div class="gm-model" role="status">{text}</div>'


def auto_note(models: Models) -> str:
    """Markdown under the tree settings: what auto chose on this device and why, or what it uses until then."""
    head = (f"**{AUTO}** (the default, like the CLI's `--tree auto`): the tree with the best tokens/s measured on "
            "this device, once per device, target and drafter.")
    chosen = [f"*{mode}:* {escape(models.choices[mode].summary())}" for mode in TREE_MODES if mode in models.choices]
    if chosen:
        return "\n\n".join([head, *chosen])
    tree, label, why = models.auto_tree(TREE_MODES[0])
    return (f"{head}\n\nRight now auto means {escape(why)} ({tree.total_tokens} nodes, top_k {tree.top_k}, "
            f"depth {tree.depth}).")

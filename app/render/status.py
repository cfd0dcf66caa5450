"""Status lines in words. For the visitor's run: the status line (what is running, paused or ended).
For the server: the model line under it (loading, measuring this device, ready, or what failed and what
still works) and the note under the tree settings on what "auto" chose.

Every message that came from an error is already scrubbed of paths.
"""
from __future__ import annotations

from html import escape
from pathlib import PurePath
from typing import TYPE_CHECKING

from gumiho_core import AR, REMEASURE_GAP, TREE_MODES

from ..messages import scrub
from ..settings import AUTO, fallback_preset
from ..state import ServerStatus

if TYPE_CHECKING:  # what a status line reads of the visitor's player: run, cursor, can_compute
    from ..player import Player

CSS = """
.gm-model{font-size:13px;color:#333;padding:2px 10px}
.gm-model.bad{color:#8a1c00;font-weight:600}
"""


def status_html(message: str, notes=()) -> str:
    warn = "".join(f'<div class="warn">⚠ {escape(n)}</div>' for n in notes)
    return f'<div class="gm-status" role="status">{message}{warn}</div>'


def load_note_html(number: int, name: str, message: str, refused: bool) -> str:
    """What became of this visitor's `number`th file (`name`): read by screen readers as it changes."""
    label = "Refused" if refused else "Loaded"
    return (f'<div class="gm-load{" refused" if refused else ""}" role="status" aria-live="polite">'
            f"<b>{label}</b> (file {number}: {escape(name, quote=False)}): {escape(message, quote=False)}</div>")


STOP_WORDS = {"eos": "the model ended its answer", "max_new_tokens": "max new tokens reached",
              "context": "the context is full"}


def describe(user: Player) -> str:
    """The status line when nothing is running."""
    run = user.run
    if run is None:
        return "Type a prompt and press <b>Run</b>."
    if not run.records and not user.can_compute:
        return "Stopped before the first step. Press <b>Run</b> to start again."
    where = f"step {user.cursor} of {len(run.records) - 1}"
    if user.can_compute and run.finished:
        return f"Paused at {where}: the race's other lanes have not finished yet; <b>Resume</b> lets them finish."
    if user.can_compute:
        return f"Paused at {where}. <b>Next</b> shows one more step, <b>Resume</b> goes on, <b>Prev</b> goes back."
    browse = "<b>Prev</b>/<b>Next</b> step through it, <b>Replay</b> animates it again, <b>Export</b> saves it."
    if not run.finished:
        return f"Stopped: showing {where}. {browse}"
    reason = run.records[-1].stop_reason
    return f"Showing {where}; the run has ended ({STOP_WORDS.get(reason, escape(str(reason)))}). {browse}"


def _tree_words(run) -> str:
    s = run.settings
    if s.method == AR or s.tree is None:
        return ""
    fallback = " (not measured here yet)" if "→" in s.preset else ""
    return f", tree <i>{escape(s.preset)}</i>{fallback}: {s.tree.total_tokens} nodes"


def running_line(user: Player, what: str, racing: bool = False) -> str:
    """The status line while a run animates: `what` it does ("Running", "Replaying ..."), where it is, and
    (racing) that the race's other lanes are taking their steps."""
    run = user.run
    step = max(user.cursor, 0)
    where = f"step {step}, more to come" if user.can_compute else f"step {step} of {len(run.records) - 1}"
    lanes = " and ".join([*run.rivals, *(["plain decoding"] if run.baseline or run.settings.method != AR else [])])
    doing = (f" The race's other lanes ({escape(lanes)}) are catching up." if racing and lanes
             else " <b>Pause</b> to step back and forth.")
    return (f"{what} <b>{escape(run.settings.method)}</b> on {escape(run.target)} ({escape(run.device)})"
            f"{_tree_words(run)}: {where}.{doing}")


def _drafter_words(status: ServerStatus) -> str:
    if status.drafter_origin is None:
        return f"⚠ not loaded ({escape(status.drafter_error or '')}): only plain decoding (ar) works"
    if not status.drafter_trained:
        return "untrained heads (exact output, little speedup)"
    return f"heads from {escape(PurePath(status.drafter_origin).name)}"


def _auto_words(status: ServerStatus) -> str:
    if status.measuring is not None and status.choices:
        return f"measuring this device {escape(status.measuring)}; auto runs use the last measurement meanwhile"
    if status.measuring is not None:
        return (f"measuring this device once ({escape(status.measuring)}); until then auto runs use the "
                f"<i>{escape(fallback_preset(status.device))}</i> tree")
    if status.choices:
        sizes = ", ".join(f"{c.tree.total_tokens} nodes for {m}" for m, c in status.choices.items())
        return f"{sizes} (measured on this device)"
    return f"the <i>{escape(fallback_preset(status.device))}</i> tree (this device is not measured)"


def model_line(status: ServerStatus) -> str:
    """One line: which model, on what, with which drafter, and what "auto" means now."""
    if status.failed:
        text = (f"⚠ The model could not be loaded: {escape(status.load_error)} Runs are off until it loads; "
                f"<b>Load run file</b> still replays saved runs.")
        return f'<style>{CSS}</style><div class="gm-model bad" role="status">{text}</div>'
    if not status.ready:
        text = (f"Loading the model {escape(scrub(status.target_spec))} on {escape(status.device)}… "
                f"The page works meanwhile; a Run waits for it.")
    else:
        text = (f"Model: <b>{escape(status.target_name)}</b> on {escape(status.device)} · drafter: "
                f"{_drafter_words(status)} · auto tree: {_auto_words(status)}")
    return f'<style>{CSS}</style><div class="gm-model" role="status">{text}</div>'


def auto_note(status: ServerStatus) -> str:
    """Markdown under the tree settings: what auto chose on this device and why, or what it uses until then."""
    head = (f"**{AUTO}** (the default, like the CLI's `--tree auto`): the fastest tree measured on this device that "
            "drafts deeper than the serial steps, so that the MLP heads always take part; **fastest**: the fastest "
            f"of any depth. Measured once per device, target and drafter; a run whose steps cost more than "
            f"{REMEASURE_GAP:.0%} off the prediction measures again, as does the button below.")
    chosen = [f"*{mode}:* {escape(status.choices[mode].summary())}" for mode in TREE_MODES if mode in status.choices]
    if chosen:
        return "\n\n".join([head, *chosen])
    tree = status.auto_tree
    return (f"{head}\n\nRight now auto means {escape(status.auto_why)} ({tree.total_tokens} nodes, "
            f"top_k {tree.top_k}, depth {tree.depth}).")

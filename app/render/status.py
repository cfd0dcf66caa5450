"""Status lines in words. For the visitor's run: the status line (what is running, paused, ended, or what was
refused). For the server: the model line (loading, ready with which drafters, or what failed and what still works)
and under it, on a line of its own, this device's measurement; the note beside the tree preset (the tree and what
it costs here); the note under the method choices (which drafters are missing, and why).

Every message that came from an error is already scrubbed of paths.
"""
from __future__ import annotations

from html import escape
from pathlib import PurePath
from typing import TYPE_CHECKING

from gumiho_core import (AR, AUTO, CLASSROOM, CUSTOM, FASTEST, GUMIHO, MEASURED, PAPER, REMEASURE_GAP, SMALL,
                         TREE_PRESETS, TreeConfig, fallback_preset, measured_curve)

from ..messages import scrub
from ..settings import member_label
from ..state import ServerStatus
from .mdtext import plain_words
from .palette import method_label

if TYPE_CHECKING:  # what a status line reads of the visitor's player: run, cursor, can_compute
    from ..player import Player

CSS = """
.gm-model{font-size:13px;color:#333;padding:2px 10px}
.gm-model.bad{color:#8a1c00;font-weight:600}
.gm-measure{font-size:13px;color:#444;padding:0 10px 4px}
"""
STOP_WORDS = {"eos": "the model ended its answer", "max_new_tokens": "max new tokens reached",
              "context": "the context is full", "out_of_memory": "the GPU ran out of memory"}


def status_html(message: str, notes=(), refused: bool = False) -> str:
    """The status line; `refused`: it says why the last action was refused (and stays until the next one)."""
    warn = "".join(f'<div class="warn">⚠ {escape(n)}</div>' for n in notes)
    css = "gm-status refused" if refused else "gm-status"
    return f'<div class="{css}" role="status">{message}{warn}</div>'


def refused_html(message: str) -> str:
    return status_html(f"<b>Not run:</b> {escape(message)}", refused=True)


def load_note_html(number: int, name: str, message: str, refused: bool) -> str:
    """What became of this visitor's `number`th file (`name`): read by screen readers as it changes."""
    label = "Refused" if refused else "Loaded"
    return (f'<div class="gm-load{" refused" if refused else ""}" role="status" aria-live="polite">'
            f"<b>{label}</b> (file {number}: {escape(name, quote=False)}): {escape(message, quote=False)}</div>")


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
    if s.method == AR and not run.rivals:
        return ""
    fallback = " (not measured here yet)" if "→" in s.preset else ""
    return f", tree <i>{escape(s.preset)}</i>{fallback}: {s.tree.total_tokens} nodes"


def running_line(user: Player, what: str, racing: bool = False) -> str:
    """The status line while a run animates: `what` it does ("Running", "Replaying ..."), where it is, and
    (racing) that the race's other lanes are taking their steps."""
    run = user.run
    step = max(user.cursor, 0)
    where = f"step {step}, more to come" if user.can_compute else f"step {step} of {len(run.records) - 1}"
    others = [method_label(m) for m in run.rivals] + (["plain decoding"] if run.baseline else [])
    doing = (f" The race's other lanes ({escape(', '.join(others))}) are catching up." if racing and others
             else " <b>Pause</b> to step back and forth.")
    return (f"{what} <b>{escape(method_label(run.settings.method))}</b> on {escape(run.target)} "
            f"({escape(run.device)}){_tree_words(run)}: {where}.{doing}")


def missing_words(status: ServerStatus) -> str:
    """Which drafters the page cannot offer, and why, in a sentence (or "")."""
    words = []
    if status.not_trained:
        names = " and ".join(member_label(m).replace(" style", "-style") for m in status.not_trained)
        words.append(f"{names} heads are not trained yet for this model")
    words += [f"{member_label(m)} heads could not be loaded ({e})" for m, e in status.drafter_errors.items()]
    return escape("; ".join(words)) + ("." if words else "")


def _drafter_words(status: ServerStatus) -> str:
    if not status.drafters:
        return "⚠ no drafter could be loaded: only plain decoding works"
    return "; ".join(f"{escape(member_label(m))} " + (f"heads from {escape(PurePath(origin).name)}{_steps(steps)}"
                                                     if trained else "untrained heads (exact output, little speedup)")
                     for m, (origin, trained, steps) in status.drafters.items())


def _steps(steps: int | None) -> str:
    return "" if steps is None else f" ({steps:,} training steps)"


def measure_line(status: ServerStatus) -> str:
    """This device's measurement, in a line of its own (it never takes the model line's place)."""
    if status.measuring is not None:
        again = "again" if status.again else "once, in the background"
        return (f"Measuring this device {again}: {escape(plain_words(status.measuring))}. It pauses while anyone "
                "acts on the page; runs go on meanwhile.")
    if status.choices:
        sizes = ", ".join(f"{method_label(m)} {c.tree.total_tokens} nodes" for m, c in status.choices.items())
        stale = (f" A run's steps cost more than {REMEASURE_GAP:.0%} off the prediction for "
                 f"{', '.join(method_label(m) for m in status.gaps)}: the measurement may be out of date"
                 " (“Measure this device again”, under Advanced)." if status.gaps else "")
        return f"Measured on this device: auto tree {escape(sizes)}.{escape(stale)}"
    return (f"This device is not measured{' yet' if status.policy == 'measure' else ''}: the trees auto and fastest "
            f"stand in with the <i>{escape(fallback_preset(status.device))}</i> tree.")


def model_line(status: ServerStatus) -> str:
    """Which model, on what, with which drafters; under it, this device's measurement."""
    if status.failed:
        text = (f"⚠ The model could not be loaded: {escape(status.load_error)} Runs are off until it loads; "
                f"<b>Load run file</b> still replays saved runs.")
        return f'<style>{CSS}</style><div class="gm-model bad" role="status">{text}</div>'
    if not status.ready:
        text = (f"Loading the model {escape(scrub(status.target_spec))} on {escape(status.device)}… "
                f"The page works meanwhile; a Run waits for it.")
        return f'<style>{CSS}</style><div class="gm-model" role="status">{text}</div>'
    missing = missing_words(status)
    text = (f"Model: <b>{escape(status.target_name)}</b> on {escape(status.device)} · drafters: "
            f"{_drafter_words(status)}{' · ' + missing if missing else ''}")
    return (f'<style>{CSS}</style><div class="gm-model" role="status">{text}</div>'
            f'<div class="gm-measure" role="status">{measure_line(status)}</div>')


def verify_cost(ratios: dict[int, float], nodes: int) -> str:
    """What verifying `nodes` tokens costs here, in plain steps: measured, or said not to be yet."""
    if not ratios:
        return (f"What verifying {nodes} tokens costs on this machine is not measured yet (on a GPU it costs about "
                "one plain step; on a CPU several).")
    ratio = measured_curve("", ratios, 1.0).ratio(nodes)
    return f"Verifying {nodes} tokens costs ~{ratio:.1f}× a plain step here (measured)."


_PRESET_WORDS = {
    CLASSROOM: "a tree to read: 3 candidates per level, {n} nodes, {d} levels, and every node the drafter pools makes "
               "the tree, so S1, S2 and the MLP heads M1–M5 all show in every step. Chosen to teach, not for speed.",
    PAPER: "the Gumiho authors' tree: {n} nodes, {d} levels. On a GPU, where verifying 64 tokens costs about one "
           "plain step, it is fast.",
    SMALL: "a small tree for a CPU: {n} nodes, {d} levels; auto's stand-in until this device is measured.",
}


def _measured_words(status: ServerStatus, preset: str) -> tuple[str, TreeConfig]:
    choice = status.choices.get(GUMIHO)
    if choice is None:
        fallback = fallback_preset(status.device)
        return (f"this device's fastest tree once measured; until then the {fallback} tree stands in.",
                TREE_PRESETS[fallback])
    summary = choice.fastest_summary() if preset == FASTEST else choice.summary()
    return escape(plain_words(summary)), choice.fastest_tree if preset == FASTEST else choice.tree


def tree_note(status: ServerStatus, preset: str) -> str:
    """Markdown beside the tree preset: what the chosen tree is, and what verifying it costs on this machine."""
    if preset == CUSTOM:
        return "**custom**: the tree fields under Advanced."
    if preset in MEASURED:
        words, tree = _measured_words(status, preset)
        what = {AUTO: "the fastest tree measured here that reaches the MLP heads", FASTEST: "the fastest measured "
                "tree of any depth: one click away from the classroom tree, to see how fast speculative decoding "
                "gets here"}[preset]
        return f"**{preset}**: {what}: {words}"
    tree = TREE_PRESETS.get(preset)
    if tree is None:
        return ""
    words = _PRESET_WORDS[preset].format(n=tree.total_tokens, d=tree.depth)
    return f"**{preset}**: {words} {verify_cost(status.verify_ratios, tree.total_tokens)}"


def measure_note(status: ServerStatus) -> str:
    """Markdown under Advanced: how this device is measured, and what each method's measurement chose."""
    head = ("**auto** and **fastest** (the CLI's `--tree auto` and `--tree fastest`) use trees measured on this "
            "device, once per target and drafter: in the background when the app starts, and again only when you "
            "press the button below. A measurement pauses while anyone acts on the page.")
    chosen = [f"*{method_label(m)}:* {escape(plain_words(c.summary()))}" for m, c in status.choices.items()]
    return "\n\n".join([plain_words(head), *chosen, measure_line(status)])

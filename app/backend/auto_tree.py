"""What the tree presets "auto" and "fastest" mean on this device, now: the trees gumiho_core's choose_tree
measured here (once per device, target and drafter, cached on disk), or a fallback preset until then.

The measurement runs in the background after the models load; until it is there, such runs use the fallback
and say why. The API, like the CLI, may wait for it instead. A finished run whose step costs are more than
REMEASURE_GAP off the prediction (judge) marks the measurement stale and measures again in the background, as
the page's "Measure again" button does (remeasure); meanwhile the old measurement stays in use.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from gumiho_core import (REMEASURE_GAP, TREE_MODES, GumihoError, method as method_info, TreeChoice, TreeConfig, cached_tree_choice,
                         choose_tree, mark_stale, prediction_gap)

from ..messages import report
from ..settings import AUTO, FASTEST, MEASURED, fallback_preset, tree_presets
from ..state import Run, Settings
from .loader import Loaded

AUTO_TREE_POLICIES = ("measure", "cached", "off")  # measure once if not cached / only read the cache / never


@dataclass(frozen=True)
class AutoPick:
    """What "auto" (or "fastest") means for a drafting mode right now."""

    tree: TreeConfig
    preset: str  # as shown: "auto", "fastest", or "auto → small (CPU)" while this device is unmeasured
    why: str  # the measured choice's summary, or why the fallback


class AutoTree:
    def __init__(self, device: str, policy: str = "measure", lock=None):
        if policy not in AUTO_TREE_POLICIES:
            raise GumihoError(f"auto tree policy must be one of {', '.join(AUTO_TREE_POLICIES)}; got {policy!r}")
        self.device, self.policy, self.lock = device, policy, lock  # lock: the step lock, held per timed call
        self.choices: dict[str, TreeChoice] = {}  # the measured trees per drafting mode, once known
        self.measuring: str | None = None  # progress of the measurement, e.g. "gumiho 40%: timing drafting"
        self.error: str | None = None
        self.settled = threading.Event()  # set once the auto tree is known, or known to stay the fallback
        self.expected = False  # a settle_all() is on its way (the background thread has started)
        self._busy = threading.Lock()  # one measurement at a time

    def settle_all(self, loaded: Loaded | None) -> None:
        """Find the auto tree of each drafting mode: cached, else measured here once (policy "measure")."""
        try:
            if loaded is None or loaded.drafter is None or self.policy == "off":
                return
            with self._busy:
                for mode in TREE_MODES:
                    choice = cached_tree_choice(loaded.target, loaded.drafter, mode)
                    if choice is None and self.policy == "measure":
                        choice = self._measure(loaded, mode, refresh=False)
                    if choice is not None:
                        self.choices[mode] = choice
        finally:
            self.measuring = None
            self.settled.set()

    def _measure(self, loaded: Loaded, mode: str, refresh: bool) -> TreeChoice | None:
        again = "again, " if refresh else ""

        def progress(frac: float, text: str) -> None:
            self.measuring = f"{again}{mode} drafting, {100 * frac:.0f}%: {text}"

        progress(0.0, "starting")
        try:
            return choose_tree(loaded.target, loaded.drafter, mode, refresh=refresh, progress=progress, lock=self.lock)
        except Exception as e:  # auto keeps its fallback (or the last measurement); the page says why
            self.error = report(e, f"measuring the auto tree for {mode}")
            return None

    def remeasure(self, loaded: Loaded | None, modes=TREE_MODES) -> str:
        """Measure `modes` again in a background thread; returns what the page should say."""
        if loaded is None or loaded.drafter is None:
            return "There is no drafter to measure trees for."
        if self._busy.locked():
            return "This device is being measured already."
        threading.Thread(target=self._remeasure, args=(loaded, tuple(modes)), name="gumiho-remeasure",
                         daemon=True).start()
        return "Measuring this device again in the background (1-2 minutes on a CPU); runs go on meanwhile."

    def _remeasure(self, loaded: Loaded, modes: tuple[str, ...]) -> None:
        with self._busy:
            try:
                self.error = None
                for mode in modes:
                    choice = self._measure(loaded, mode, refresh=True)
                    if choice is not None:
                        self.choices[mode] = choice
            finally:
                self.measuring = None

    def judge(self, run: Run, loaded: Loaded | None) -> str | None:
        """After a run with a measured tree: if its step costs (relative to plain steps measured alongside) are
        more than REMEASURE_GAP off the prediction, mark the measurement stale and measure again. Returns a note
        for the run, or None."""
        tree = run.settings.tree
        choice = self.choices.get(tree.mode) if tree is not None and run.settings.preset in MEASURED else None
        if choice is None or self.policy != "measure" or method_info(run.settings.method).mode is None:
            return None
        plain = [b - a for (_, a), (_, b) in zip(run.baseline, run.baseline[1:])]  # the prefill is the first
        gap = prediction_gap(choice, tree, [r.seconds for r in run.records if r.tree is not None], plain)
        if gap is None or abs(gap) <= REMEASURE_GAP:
            return None
        mark_stale(loaded.target, loaded.drafter, tree.mode)
        self.remeasure(loaded, (tree.mode,))
        return (f"This run's steps cost {abs(100 * gap):.0f}% {'more' if gap > 0 else 'less'} (against a plain step) "
                f"than the measurement of this device predicted; measuring again in the background.")

    def _why_fallback(self, models_ready: bool) -> str:
        """Why there is no measured auto tree, said after "until this device is measured:"."""
        if not models_ready:
            return "the model is still loading"
        if self.measuring is not None:
            return f"measuring now ({self.measuring})"
        if self.error is not None:
            return f"measuring failed ({self.error})"
        if self.policy == "off":
            return "this app was started with --auto-tree off, so it never is"
        if self.policy == "cached":
            return "no measurement is cached, and this app was started with --auto-tree cached"
        return "the measurement has not started yet"

    def pick(self, method: str, models_ready: bool, preset: str = AUTO) -> AutoPick:
        """What `preset` ("auto" or "fastest") means for `method` right now: the measured tree, or the fallback."""
        mode = method_info(method).mode or TREE_MODES[0]
        choice = self.choices.get(mode)
        if choice is not None:
            if preset == FASTEST:
                return AutoPick(choice.fastest_tree.with_(mode=mode), FASTEST, choice.fastest_summary())
            return AutoPick(choice.tree.with_(mode=mode), AUTO, choice.summary())
        name = fallback_preset(self.device)
        return AutoPick(tree_presets(self.device)[name].with_(mode=mode), f"{preset} → {name}",
                        f"the {name} tree until this device is measured: {self._why_fallback(models_ready)}")

    def settle(self, settings: Settings, models_ready: bool, wait: bool = False) -> Settings:
        """`settings` with a tree: an auto or fastest request gets this device's tree. wait=True (the API, like
        the CLI) waits for a measurement on its way instead of taking the fallback."""
        if settings.tree is not None:
            return settings
        if wait and self.expected:
            self.settled.wait()
        pick = self.pick(settings.method, models_ready, settings.preset)
        return replace(settings, tree=pick.tree, preset=pick.preset, tree_source=pick.why)

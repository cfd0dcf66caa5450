"""What the tree preset "auto" means on this device, now: the tree measured best here (gumiho_core's
choose_tree, once per device, target and drafter, cached on disk), or a fallback preset until then.

The measurement runs in the background after the models load; until it is there, "auto" runs use the
fallback and say why. The API, like the CLI, may wait for it instead.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from gumiho_core import TREE_MODES, GumihoError, TreeChoice, TreeConfig, cached_tree_choice, choose_tree

from ..messages import report
from ..settings import AUTO, fallback_preset, tree_presets
from ..state import Settings
from .loader import Loaded

AUTO_TREE_POLICIES = ("measure", "cached", "off")  # measure once if not cached / only read the cache / never


@dataclass(frozen=True)
class AutoPick:
    """What "auto" means for a drafting mode right now."""

    tree: TreeConfig
    preset: str  # as shown: "auto", or "auto → small (CPU)" while this device is unmeasured
    why: str  # the measured choice's summary, or why the fallback


class AutoTree:
    def __init__(self, device: str, policy: str = "measure"):
        if policy not in AUTO_TREE_POLICIES:
            raise GumihoError(f"auto tree policy must be one of {', '.join(AUTO_TREE_POLICIES)}; got {policy!r}")
        self.device, self.policy = device, policy
        self.choices: dict[str, TreeChoice] = {}  # the auto tree per drafting mode, once known
        self.measuring: str | None = None  # progress of the measurement, e.g. "gumiho 40%: timing drafting"
        self.error: str | None = None
        self.settled = threading.Event()  # set once the auto tree is known, or known to stay the fallback
        self.expected = False  # a settle_all() is on its way (the background thread has started)

    def settle_all(self, loaded: Loaded | None) -> None:
        """Find the auto tree of each drafting mode: cached, else measured here once (policy "measure")."""
        try:
            if loaded is None or loaded.drafter is None or self.policy == "off":
                return
            for mode in TREE_MODES:
                choice = cached_tree_choice(loaded.target, loaded.drafter, mode)
                if choice is None and self.policy == "measure":
                    choice = self._measure(loaded, mode)
                if choice is not None:
                    self.choices[mode] = choice
        finally:
            self.measuring = None
            self.settled.set()

    def _measure(self, loaded: Loaded, mode: str) -> TreeChoice | None:
        def progress(frac: float, text: str) -> None:
            self.measuring = f"{mode} drafting, {100 * frac:.0f}%: {text}"

        progress(0.0, "starting")
        try:
            return choose_tree(loaded.target, loaded.drafter, mode, progress=progress)
        except Exception as e:  # auto keeps its fallback; the page says why
            self.error = report(e, f"measuring the auto tree for {mode}")
            return None

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

    def pick(self, method: str, models_ready: bool) -> AutoPick:
        """What "auto" means for `method` right now: the measured choice, or the fallback."""
        mode = method if method in TREE_MODES else TREE_MODES[0]
        choice = self.choices.get(mode)
        if choice is not None:
            return AutoPick(choice.tree.with_(mode=mode), AUTO, choice.summary())
        name = fallback_preset(self.device)
        return AutoPick(tree_presets(self.device)[name].with_(mode=mode), f"{AUTO} → {name}",
                        f"the {name} tree until this device is measured: {self._why_fallback(models_ready)}")

    def settle(self, settings: Settings, models_ready: bool, wait: bool = False) -> Settings:
        """`settings` with a tree: an auto request gets this device's tree. wait=True (the API, like the CLI)
        waits for a measurement on its way instead of taking the fallback."""
        if settings.tree is not None:
            return settings
        if wait and self.expected:
            self.settled.wait()
        pick = self.pick(settings.method, models_ready)
        return replace(settings, tree=pick.tree, preset=pick.preset, tree_source=pick.why)

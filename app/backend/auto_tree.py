"""This device's measured trees, per drafting method (gumiho_core.choose_tree, keyed by drafter and mode): what the
tree requests "auto" and "fastest" mean here (gumiho_core.resolve_tree is given that measurement), and what
verifying n tokens costs here (the line beside the page's tree preset).

Measured only when asked: once in the background as the models load, for the methods not cached yet (policy
"measure"), and again when a visitor presses "Measure this device again". A run whose step costs are far from the
prediction gets a note, and the method's measurement is marked as perhaps out of date; nothing is measured again
on its own while a class watches. measuring.py says where a measurement runs and how it takes turns with visitors.
"""
from __future__ import annotations

import threading

from gumiho_core import (DRAFTING_METHODS, MEASURED, REMEASURE_GAP, GumihoError, ResolvedTree, TreeChoice, TreeConfig,
                         cached_tree_choice, method as method_info, prediction_gap, resolve_tree)

from ..messages import report
from ..state import Run
from .loader import Loaded
from .measuring import CHOICE, DONE, ERROR, PROGRESS, ModelSpec, Quiet, StepLock, in_process, in_thread

AUTO_TREE_POLICIES = ("measure", "cached", "off")  # measure once if not cached / only read the cache / never
ALL = "all"  # an error of the whole measurement, not of one method


class Measurements:
    def __init__(self, device: str, policy: str = "measure", lock: StepLock | None = None):
        if policy not in AUTO_TREE_POLICIES:
            raise GumihoError(f"auto tree policy must be one of {', '.join(AUTO_TREE_POLICIES)}; got {policy!r}")
        self.device, self.policy = device, policy
        self.lock = lock or StepLock()  # the step lock, held around each timed call
        self.choices: dict[str, TreeChoice] = {}  # method -> its measured trees, once known
        self.measuring: str | None = None  # progress of the measurement, e.g. "EAGLE-2 style 40%: timing drafting"
        self.again = False  # the measurement running was asked for (not the first one)
        self.errors: dict[str, str] = {}  # method (or ALL) -> why its measurement failed
        self.gaps: dict[str, float] = {}  # method -> a run's step cost off the prediction by more than REMEASURE_GAP
        self.settled = threading.Event()  # set once the first measurement is known, or known not to come
        self.expected = False  # a settle_all() is on its way (the background thread has started)
        self.isolate = device == "cpu"  # measure in a process of its own (measuring.py)
        self.quiet = Quiet()  # until when a measurement lets visitors act
        self._busy = threading.Lock()  # one measurement at a time

    def touch(self) -> None:
        """A visitor acts: a measurement waits for QUIET_S of quiet before its next timed call."""
        self.quiet.touch()

    def settle_all(self, loaded: Loaded | None, spec: ModelSpec | None = None) -> None:
        """Each drafting method's trees: cached, else measured here once (policy "measure")."""
        try:
            if loaded is None or self.policy == "off":
                return
            methods = [m for m in loaded.methods() if m in DRAFTING_METHODS]
            for name in methods:
                m = method_info(name)
                choice = cached_tree_choice(loaded.target, loaded.drafters[m.drafter], m.mode)
                if choice is not None:
                    self.choices[name] = choice
            missing = [m for m in methods if m not in self.choices]
            if missing and self.policy == "measure":
                with self._busy:
                    self._measure(loaded, spec, missing, refresh=False)
        finally:
            self.measuring = None
            self.settled.set()

    def remeasure(self, loaded: Loaded | None, spec: ModelSpec | None = None) -> str:
        """Measure every drafting method again, in the background; returns what the page should say."""
        methods = [m for m in loaded.methods() if m in DRAFTING_METHODS] if loaded is not None else []
        if not methods:
            return "There is no drafter to measure trees for."
        if self._busy.locked():
            return "This device is being measured already."
        threading.Thread(target=self._remeasure, args=(loaded, spec, methods), name="gumiho-remeasure",
                         daemon=True).start()
        return ("Measuring this device again in the background (a few minutes on a CPU); it pauses while anyone "
                "acts on the page, and runs go on meanwhile.")

    def _remeasure(self, loaded: Loaded, spec: ModelSpec | None, methods: list[str]) -> None:
        with self._busy:
            try:
                self.errors.clear()
                self._measure(loaded, spec, methods, refresh=True)
            finally:
                self.measuring = None

    def _measure(self, loaded: Loaded, spec: ModelSpec | None, methods: list[str], refresh: bool) -> None:
        self.again = refresh
        self.measuring = "starting"
        try:
            if self.isolate and spec is not None:
                in_process(spec, methods, refresh, self._receive, self.lock, self.quiet)
            else:
                in_thread(loaded, methods, refresh, self._receive, self.lock, self.quiet)
        except Exception as e:  # e.g. no process could be started here: the trees stay as they were, and say why
            self.errors[ALL] = report(e, "measuring this device")

    def _receive(self, message: tuple) -> None:
        """One report of the measurement (measuring.py): progress, a method's trees, a failure, the end."""
        kind, name, *rest = message
        if kind == PROGRESS:
            frac, text = rest
            self.measuring = f"{method_info(name).label} {100 * frac:.0f}%: {text}"
        elif kind == CHOICE:
            self.choices[name] = TreeChoice.from_dict(rest[0])
            self.errors.pop(name, None)
            self.gaps.pop(name, None)
        elif kind == ERROR:
            self.errors[name or ALL] = rest[0]
        elif kind == DONE:
            self.measuring = None

    def judge(self, run: Run) -> str | None:
        """After a run on a measured tree: if its step costs (against plain steps measured alongside) are more
        than REMEASURE_GAP off the prediction, note it (here and on the page), and say so. Nothing is measured."""
        s = run.settings
        choice = self.choices.get(s.method) if s.preset in MEASURED and s.tree is not None else None
        if choice is None:
            return None
        plain = [b - a for (_, a), (_, b) in zip(run.baseline, run.baseline[1:])]  # the prefill is the first
        gap = prediction_gap(choice, s.tree, [r.seconds for r in run.records if r.tree is not None], plain)
        if gap is None or abs(gap) <= REMEASURE_GAP:
            return None
        self.gaps[s.method] = gap
        return (f"This run's steps cost {abs(100 * gap):.0f}% {'more' if gap > 0 else 'less'} (against a plain step) "
                "than this device's measurement predicted: it may be out of date. Press “Measure this device again” "
                "(under Advanced) when no one is watching a run.")

    def why_unmeasured(self, method: str, models_ready: bool) -> str:
        """Why `method` has no measured trees, in a few words."""
        if not models_ready:
            return "the model is still loading"
        if self.measuring is not None:
            return f"measuring now: {self.measuring}"
        error = self.errors.get(method) or self.errors.get(ALL)
        if error is not None:
            return f"measuring failed: {error}"
        if self.policy == "off":
            return "this app was started with --auto-tree off"
        if self.policy == "cached":
            return "none is cached, and this app was started with --auto-tree cached"
        return "the measurement has not started yet"

    def resolve(self, request: str, method: str, shape: TreeConfig | None, models_ready: bool) -> ResolvedTree:
        """The tree of `request` (or the explicit `shape`) for `method`: gumiho_core.resolve_tree, given this
        device's measurement of that method."""
        return resolve_tree(request, method, self.device, choice=self.choices.get(method), shape=shape,
                            unmeasured=self.why_unmeasured(method, models_ready))

    def verify_ratios(self) -> dict[int, float]:
        """This device's measured cost of verifying n tokens, in plain steps (Gumiho's measurement first)."""
        choice = self.choices.get(DRAFTING_METHODS[0]) or next(iter(self.choices.values()), None)
        return {} if choice is None else {int(n): s / choice.ar_step_s for n, s in choice.verify_s.items()}

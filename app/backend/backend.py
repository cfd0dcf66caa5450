"""The Backend: what all visitors share, in one place. The models (loaded once, in the background), this device's
measured trees, the runs that can still compute, and the lock on which decoding steps take turns.

Decoding steps of all visitors take turns on one lock: timings stay honest (no two steps share the CPU
or GPU) and memory stays bounded, while the animations between steps run side by side. The lock is held
for one step only, so a visitor who stops or leaves frees it when that step ends. A measurement of this device
takes the same lock around each timed call, and waits while a visitor acts (touch).
"""
from __future__ import annotations

import os
import threading

import torch

from gumiho_core import GumihoError, ResolvedTree, TreeConfig, resolve_device

from ..state import ServerStatus
from .auto_tree import Measurements
from .live import LiveRuns
from .loader import Loaded, ModelLoader, drafter_specs, expected_methods
from .measuring import ModelSpec, StepLock

DEFAULT_MAX_PROMPT_TOKENS = 2048  # a longer prompt makes the first step slow on a CPU; --max-prompt-tokens raises it


class Backend:
    def __init__(self, target: str = "default", draft: str = "default", device: str | None = None,
                 max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS, *, dtype: str | None = None,
                 device_map: str | None = None, trust_remote_code: bool = False, auto_tree: str = "measure",
                 whole_runs: bool = False, draft_for: dict[str, str] | None = None):
        self.device = str(resolve_device(device))
        self.step_lock = StepLock()  # one decoding step at a time, across all visitors (and timed calls)
        self.auto = Measurements(self.device, auto_tree, lock=self.step_lock)
        self.loader = ModelLoader(target, drafter_specs(draft, draft_for), self.device, dtype=dtype,
                                  device_map=device_map, trust_remote_code=trust_remote_code)
        self.live = LiveRuns()
        self.max_prompt_tokens = max_prompt_tokens
        self.whole_runs = whole_runs  # ZeroGPU: a run is computed in one GPU call, then animated from its records

    @property
    def ready(self) -> bool:
        return self.loader.ready

    def get(self) -> Loaded:
        """The models, loaded on first use (GumihoError with a message for the page if they cannot be)."""
        return self.loader.get()

    def touch(self) -> None:
        """A visitor acts: a measurement in progress lets the page have the machine (auto_tree.Measurements)."""
        self.auto.touch()

    def start_background(self) -> None:
        """Load the models, then this device's measured trees, in a thread: the page is served meanwhile."""
        self.auto.expected = True
        threading.Thread(target=self._prepare, name="gumiho-prepare", daemon=True).start()

    def _prepare(self) -> None:
        try:
            loaded = self.get()
        except GumihoError:
            loaded = None  # nothing to measure; settle_all says so at once
        self.auto.settle_all(loaded, self.model_spec())

    def model_spec(self) -> ModelSpec:
        """How the models were loaded, for a measuring process to load its own copy."""
        return ModelSpec(self.loader.target_spec, dict(self.loader.drafts), self.device,
                         dict(self.loader.load_options), torch.get_num_threads())

    def methods(self) -> tuple[str, ...]:
        """The methods the page offers: those whose drafters loaded (before the load: those that should)."""
        loaded = self.loader.loaded
        return loaded.methods() if loaded else expected_methods(self.loader.target_spec, self.loader.drafts)

    def resolve(self, request: str, method: str, shape: TreeConfig | None = None) -> ResolvedTree:
        """The tree of `request` (or the explicit `shape`) for `method` on this device, now."""
        return self.auto.resolve(request, method, shape, self.ready)

    def remeasure(self) -> str:
        """Measure this device's trees again, in the background; returns what the page should say."""
        return self.auto.remeasure(self.loader.loaded, self.model_spec())

    def status(self) -> ServerStatus:
        """A snapshot of the models and the measurements, for the page's status lines."""
        loaded = self.loader.loaded
        drafters = loaded.drafters if loaded else {}
        return ServerStatus(
            target_spec=self.loader.target_spec, device=self.device,
            load_error=self.loader.error if loaded is None else None,
            target_name=loaded.target.name if loaded else None,
            drafters={m: (d.origin, d.trained, d.steps) for m, d in drafters.items()},
            drafter_errors=dict(loaded.drafter_errors) if loaded else {},
            not_trained=loaded.not_trained if loaded else (),
            methods=self.methods(),
            measuring=self.auto.measuring, again=self.auto.again, choices=dict(self.auto.choices),
            gaps=dict(self.auto.gaps), errors=dict(self.auto.errors), policy=self.auto.policy,
            verify_ratios=self.auto.verify_ratios(), settled=self.auto.settled.is_set())


def set_threads(requested: int) -> int:
    """Leave a core to the browser and the web server. On the project's 2-core CPU, with one core busy
    elsewhere, decoding with 2 threads ran at 4.2 tokens/s and with 1 thread at 13.1: every parallel matmul
    waits for its slowest thread, and a thread that shares its core with the browser is always the slowest."""
    if requested < 0:
        raise GumihoError(f"--threads must be >= 0 (0 = all cores but one); got {requested}")
    if requested == 0 and os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()  # the user chose already
    torch.set_num_threads(requested or max(1, torch.get_num_threads() - 1))
    return torch.get_num_threads()

"""The Backend: what all visitors share, in one place. The models (loaded once, in the background), the
auto tree, the runs that can still compute, and the lock on which decoding steps take turns.

Decoding steps of all visitors take turns on one lock: timings stay honest (no two steps share the CPU
or GPU) and memory stays bounded, while the animations between steps run side by side. The lock is held
for one step only, so a visitor who stops or leaves frees it when that step ends.
"""
from __future__ import annotations

import os
import threading

import torch

from gumiho_core import GUMIHO, GumihoError, resolve_device

from ..settings import AUTO
from ..state import ServerStatus, Settings
from .auto_tree import AutoPick, AutoTree
from .live import LiveRuns
from .loader import Loaded, ModelLoader

DEFAULT_MAX_PROMPT_TOKENS = 2048  # a longer prompt makes the first step slow on a CPU; --max-prompt-tokens raises it


class Backend:
    def __init__(self, target: str = "default", draft: str = "default", device: str | None = None,
                 max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS, *, dtype: str | None = None,
                 device_map: str | None = None, trust_remote_code: bool = False, auto_tree: str = "measure",
                 whole_runs: bool = False):
        self.device = str(resolve_device(device))
        self.step_lock = threading.Lock()  # one decoding step at a time, across all visitors (and measurements)
        self.auto = AutoTree(self.device, auto_tree, lock=self.step_lock)
        self.loader = ModelLoader(target, draft, self.device, dtype=dtype, device_map=device_map,
                                  trust_remote_code=trust_remote_code)
        self.live = LiveRuns()
        self.max_prompt_tokens = max_prompt_tokens
        self.whole_runs = whole_runs  # ZeroGPU: a run is computed in one GPU call, then animated from its records

    @property
    def ready(self) -> bool:
        return self.loader.ready

    def get(self) -> Loaded:
        """The models, loaded on first use (GumihoError with a message for the page if they cannot be)."""
        return self.loader.get()

    def start_background(self) -> None:
        """Load the models, then settle the auto tree, in a thread: the page is served meanwhile."""
        self.auto.expected = True
        threading.Thread(target=self._prepare, name="gumiho-prepare", daemon=True).start()

    def _prepare(self) -> None:
        try:
            loaded = self.get()
        except GumihoError:
            loaded = None  # the auto tree stays the fallback; settle_all says so at once
        self.auto.settle_all(loaded)

    def auto_tree(self, method: str, preset: str = AUTO) -> AutoPick:
        """What "auto" (or "fastest") means for `method` right now."""
        return self.auto.pick(method, self.ready, preset)

    def remeasure(self) -> str:
        """Measure this device's trees again, in the background; returns what the page should say."""
        return self.auto.remeasure(self.loader.loaded)

    def settle(self, settings: Settings, wait: bool = False) -> Settings:
        """`settings` with a tree (see AutoTree.settle)."""
        return self.auto.settle(settings, self.ready, wait)

    def status(self) -> ServerStatus:
        """A snapshot of the models and the auto tree, for the page's status lines."""
        loaded, auto = self.loader.loaded, self.auto_tree(GUMIHO)
        drafter = loaded.drafter if loaded else None
        return ServerStatus(
            target_spec=self.loader.target_spec, device=self.device,
            load_error=self.loader.error if loaded is None else None,
            target_name=loaded.target.name if loaded else None,
            drafter_origin=drafter.origin if drafter is not None else None,
            drafter_trained=drafter is not None and drafter.trained,
            drafter_error=loaded.drafter_error if loaded else None,
            measuring=self.auto.measuring, choices=dict(self.auto.choices), auto_tree=auto.tree, auto_why=auto.why,
            settled=self.auto.settled.is_set())


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

"""The target and drafter the app was started with: loaded once, on first use, and shared read-only by all
visitors. A failure is kept with its message (scrubbed for the page); a later Run tries again, at most
every RETRY_LOAD_S. Without a drafter plain decoding still works."""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass

from gumiho_core import GumihoDrafter, GumihoError, Target, load_drafter, load_target

from ..messages import report

log = logging.getLogger(__name__)
RETRY_LOAD_S = 60.0  # after a failed load (e.g. the hub unreachable), a Run tries again at most this often
UNTRAINED_NOTE = "untrained drafter: the output is exact, but it rarely guesses right, so expect little speedup"


@dataclass(frozen=True)
class Loaded:
    target: Target
    drafter: GumihoDrafter | None  # None when it could not be loaded (plain decoding still works)
    drafter_error: str | None  # why there is no drafter, as shown to visitors
    notes: tuple[str, ...]  # shown on the page with every run


class ModelLoader:
    def __init__(self, target: str, draft: str, device: str, **load_options):
        self.target_spec, self.draft_spec, self.device = target, draft, device
        self.load_options = load_options  # dtype, device_map, trust_remote_code: as load_target takes them
        self._lock = threading.Lock()
        self._loaded: Loaded | None = None
        self.error: str | None = None  # why the models could not be loaded, as shown to visitors
        self._failed_at = -math.inf

    @property
    def ready(self) -> bool:
        return self._loaded is not None

    @property
    def loaded(self) -> Loaded | None:
        return self._loaded

    def get(self) -> Loaded:
        """The models, loaded on first use. A failure raises GumihoError with a message fit for the page."""
        with self._lock:
            if self._loaded is None:
                if self.error is not None and time.monotonic() - self._failed_at < RETRY_LOAD_S:
                    raise GumihoError(self.error)
                try:
                    self._loaded = self._load()
                    self.error = None
                except Exception as e:  # whatever the cause, the page says what to do and keeps serving run files
                    self.error = report(e, f"could not load the target {self.target_spec!r}")
                    self._failed_at = time.monotonic()
                    raise GumihoError(self.error) from None
            return self._loaded

    def _load(self) -> Loaded:
        t0 = time.perf_counter()
        target = load_target(self.target_spec, device=self.device, **self.load_options)
        drafter, error = None, None
        try:
            drafter = load_drafter(self.draft_spec, target)
        except Exception as e:  # the target works without it: plain decoding stays available
            error = report(e, f"could not load the drafter {self.draft_spec!r}")
        notes = (UNTRAINED_NOTE,) if drafter is not None and not drafter.trained else ()
        log.info("loaded %s (drafter: %s) on %s in %.1f s", target.name, getattr(drafter, "origin", "none"),
                 self.device, time.perf_counter() - t0)
        return Loaded(target, drafter, error, notes)

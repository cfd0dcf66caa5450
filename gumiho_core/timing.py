"""Wall-clock timing that waits for the accelerator, so GPU stages are timed honestly."""
from __future__ import annotations

import time

import torch


def synchronize(device) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    def __init__(self, device):
        self.device = device
        self._t = time.perf_counter()

    def start(self) -> None:
        synchronize(self.device)
        self._t = time.perf_counter()

    def lap(self) -> float:
        """Seconds since the last start/lap."""
        synchronize(self.device)
        now = time.perf_counter()
        dt, self._t = now - self._t, now
        return dt

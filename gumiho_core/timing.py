"""Wall-clock timing that waits for the accelerator, so GPU stages are timed honestly; and the name of
the device a measurement ran on."""
from __future__ import annotations

import platform
import time
from pathlib import Path

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


def device_name(device: torch.device) -> str:
    """What a measurement ran on: the GPU's name, or the CPU's model and the threads torch uses on it."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    n = torch.get_num_threads()
    return f"{cpu}, {n} thread{'s' if n != 1 else ''}"

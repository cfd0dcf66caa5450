"""A training run's resumable state on disk: latest.pt, written atomically, and how far its epoch had got.

A resumed run equals an uninterrupted one: the checkpoint holds the weights, the optimizer's moments, the step
(the rate schedule is a function of it and the fixed total), the data order's random state at the epoch's start
with the micro-batches already done, and torch's random state (feature noise, the CE's sampled positions).
Checkpoints are taken between optimizer steps, when no gradient is pending; `stop_on_signals` turns SIGTERM (what
`timeout` sends when a device call's time is up) and a first Ctrl-C into a stop after the current step, with one.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..errors import GumihoError


@dataclass
class EpochProgress:
    """How far the current epoch has got, and its running training metrics."""

    rng: tuple | None = None  # the data order's random state at the epoch's start
    micro: int = 0  # micro-batches done
    seconds: float = 0.0
    tokens: int = 0
    sums: dict = field(default_factory=Counter)  # metric -> sum over micro-batches of value * tokens
    # sums not yet read from the device: metric names -> [names] tensor, added to `sums` when read
    pending: dict = field(default_factory=dict, repr=False)

    def add(self, metrics, tokens: int) -> None:
        """Add a micro-batch's objective.Metrics, weighed by its tokens, where they are (no read of the device)."""
        held = self.pending.get(metrics.names)
        weighed = metrics.values.double() * tokens  # float64: an epoch sums thousands of them
        self.pending[metrics.names] = weighed if held is None else held + weighed
        self.tokens += tokens

    def _read(self) -> None:
        for names, values in self.pending.items():
            for k, v in zip(names, values.tolist()):
                self.sums[k] = self.sums.get(k, 0.0) + v
        self.pending.clear()

    def means(self, prefix: str) -> dict[str, float]:
        self._read()
        return {f"{prefix}{k}": v / self.tokens for k, v in self.sums.items()} if self.tokens else {}

    def to_state(self) -> dict:
        self._read()
        return {"rng": self.rng, "micro": self.micro, "seconds": self.seconds, "tokens": self.tokens,
                "sums": dict(self.sums)}

    @classmethod
    def from_state(cls, state: dict | None) -> "EpochProgress":
        return cls(**state) if state else cls()


class Stopped(Exception):
    """A run stopped by a signal after an optimizer step, with a checkpoint there: the same command resumes it."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum  # the shell's code for a process ended by that signal


class StopRequest(threading.Event):
    """Set by SIGTERM or a first Ctrl-C while `stop_on_signals` holds; `signum` says which came first."""

    signum: int = 0


@contextlib.contextmanager
def stop_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)):
    """Within the block, the signals set the StopRequest it yields instead of ending the process, so that a run
    stops after its current optimizer step with a checkpoint and loses no trained step; a second Ctrl-C stops at
    once. Outside the main thread (where Python delivers no signals) the request is only there to be set."""
    stop = StopRequest()

    def request(signum, frame):
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.signum = stop.signum or signum
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    before = {s: signal.signal(s, request) for s in signals}
    try:
        yield stop
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    tmp.rename(path)  # a run killed while saving keeps its previous checkpoint


def load_checkpoint(path: Path, cfg, data: dict, free: tuple[str, ...]) -> dict:
    """The state in `path`, refused (naming the differences) if its settings or data differ from the run's."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    saved = {**asdict(cfg), **state["train_config"]}
    diff = {k: (v, getattr(cfg, k)) for k, v in saved.items() if k not in free and getattr(cfg, k) != v}
    if diff:
        raise GumihoError(f"cannot resume {path}: settings differ from the checkpoint's: "
                          + ", ".join(f"{k} was {a!r}, now {b!r}" for k, (a, b) in diff.items())
                          + "; use the same settings or another --workdir")
    if state.get("data", data) != data:
        raise GumihoError(f"cannot resume {path}: it was trained on {state['data']['conversations']} conversations "
                          f"({state['data']['tokens']} tokens), this run has {data['conversations']} "
                          f"({data['tokens']}); use the same data or another --run")
    return state


def random_state(device: torch.device) -> dict:
    """torch's random state and, on a GPU, the GPU's too (the feature noise is drawn where the batch is)."""
    return {"torch_rng": torch.get_rng_state(),
            "device_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def restore_random_state(device: torch.device, state: dict) -> None:
    torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and state.get("device_rng") is not None:
        torch.cuda.set_rng_state(state["device_rng"], device)

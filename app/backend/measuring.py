"""Measuring this device without starving the page: where the measurement runs, and how it takes turns.

gumiho_core.choose_tree times verification and drafting call by call, holding the lock it is given around each
timed call. Here that lock is a `Gate`: before each call it waits while a visitor acts (Backend.touch marks when),
then takes the step lock that visitors' decoding steps take, so neither disturbs the other's timings. On a CPU the
measurement runs in a process of its own at the lowest priority, with its own copy of the models: it shares neither
the interpreter's lock nor a core on equal terms with the page, whose loads and clicks are answered meanwhile (issue
#52). On a GPU it runs in a thread on the loaded models (a second copy would double the GPU memory).
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch

from gumiho_core import choose_tree, load_drafter, load_target, method as method_info

from ..messages import report

log = logging.getLogger(__name__)
SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: torch's threads do not survive a fork
LOWEST_PRIORITY = 19  # os.nice: the scheduler gives the page's process the core whenever it wants it
QUIET_S = 2.0  # a measurement waits until no visitor has acted for this long before its next timed call
POLL_S = 0.1  # how often a waiting measurement (or a step waiting for one's timed call) looks again
FOLLOW_S = 1.0  # how often the page looks whether a silent measuring process is still alive
JOIN_S = 10.0  # the longest the page waits for a measuring process to exit once it is done
PROGRESS, CHOICE, ERROR, DONE = "progress", "choice", "error", "done"  # what a measurement reports


class StepLock:
    """One decoding step or one timed call at a time, across visitors (threads) and a measuring process: a thread
    lock, then (while a process measures) the lock shared with it. `locked()` says whether another visitor's step
    holds it. A process that dies holding the shared lock cannot hold the page with it: a step waits for the shared
    lock in slices, and lets go of it once the process has ended (unshare)."""

    def __init__(self):
        self._threads = threading.Lock()
        self.shared = None  # what a measuring process takes around each timed call, while one runs
        self._taken = None  # the shared lock this step holds, if it took one

    def share(self):
        """The lock a measuring process shares (made when it starts)."""
        with self._threads:
            self.shared = SPAWN.Lock()
        return self.shared

    def unshare(self) -> None:
        """The measuring process has ended: steps take turns among themselves again."""
        self.shared = None

    def acquire(self, blocking: bool = True) -> bool:
        if not self._threads.acquire(blocking):
            return False
        while (shared := self.shared) is not None:
            if shared.acquire(block=blocking, timeout=POLL_S if blocking else None):
                self._taken = shared
                break
            if not blocking:
                self._threads.release()
                return False
        return True

    def release(self) -> None:
        taken, self._taken = self._taken, None
        if taken is not None:
            taken.release()
        self._threads.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def locked(self) -> bool:
        return self._threads.locked()


class Quiet:
    """Until when (time.monotonic(), one clock for every process) a measurement lets visitors act; mirrored into
    the memory a measuring process shares, once one runs."""

    def __init__(self):
        self.value = 0.0
        self.shared = None

    def touch(self) -> None:
        self.value = time.monotonic() + QUIET_S
        if self.shared is not None:
            self.shared.value = self.value

    def share(self):
        if self.shared is None:
            self.shared = SPAWN.RawValue("d", self.value)  # one float, written by the page, read by the process
        return self.shared


class Gate:
    """What a measurement holds around each timed call: it waits while a visitor acts (until `quiet_until.value`),
    then takes `lock`."""

    def __init__(self, lock, quiet_until):
        self.lock, self.quiet_until = lock, quiet_until

    def __enter__(self):
        while time.monotonic() < self.quiet_until.value:
            time.sleep(POLL_S)
        self.lock.acquire()
        return self

    def __exit__(self, *exc):
        self.lock.release()


@dataclass(frozen=True)
class ModelSpec:
    """How the app loaded its models: what a measuring process needs to load its own copy."""

    target: str
    drafts: dict  # member -> drafter spec
    device: str
    options: dict  # load_target's dtype, device_map, trust_remote_code
    threads: int  # torch threads: a measurement is keyed by them (gumiho_core's device name)


def measure_methods(target, drafter_of: Callable, methods, refresh: bool, send: Callable, lock) -> None:
    """Measure each method's trees (its drafter, its mode), reporting through send((kind, method, ...))."""
    for name in methods:
        m = method_info(name)
        try:
            choice = choose_tree(target, drafter_of(m.drafter), m.mode, refresh=refresh, lock=lock,
                                 progress=lambda frac, text, name=name: send((PROGRESS, name, frac, text)))
            send((CHOICE, name, choice.to_dict()))
        except Exception as e:  # that method keeps its last measurement (or none); the page says why
            send((ERROR, name, report(e, f"measuring the trees of {name}")))
    send((DONE, None))


def _child(spec: ModelSpec, methods, refresh: bool, out, lock, quiet_until) -> None:
    """The measuring process: lowest priority, its own models, every timed call through the Gate."""
    os.nice(LOWEST_PRIORITY)
    torch.set_num_threads(spec.threads)
    try:
        target = load_target(spec.target, device=spec.device, **spec.options)
    except Exception as e:
        out.put((ERROR, None, report(e, "loading the models to measure this device")))
        out.put((DONE, None))
        return
    drafters = {}

    def drafter_of(member: str):
        if member not in drafters:
            drafters[member] = load_drafter(spec.drafts[member], target, member)
        return drafters[member]

    measure_methods(target, drafter_of, methods, refresh, out.put, Gate(lock, quiet_until))


def in_process(spec: ModelSpec, methods, refresh: bool, receive: Callable, lock: StepLock, quiet: Quiet) -> None:
    """Measure in a process of its own (blocks until it has ended); each report goes to receive()."""
    out = SPAWN.Queue()
    proc = SPAWN.Process(target=_child, args=(spec, tuple(methods), refresh, out, lock.share(), quiet.share()),
                         name="gumiho-measure", daemon=True)
    proc.start()
    try:
        _follow(proc, out, receive)
    finally:
        proc.join(timeout=JOIN_S)
        lock.unshare()


def _follow(proc, out, receive: Callable) -> None:
    """The measuring process's reports, until it is done or has ended."""
    while True:
        try:
            message = out.get(timeout=FOLLOW_S)
        except queue.Empty:
            if proc.is_alive():
                continue
            receive((ERROR, None, f"the measuring process ended unexpectedly (exit code {proc.exitcode})"))
            break
        receive(message)
        if message[0] == DONE:
            break


def in_thread(loaded, methods, refresh: bool, receive: Callable, lock: StepLock, quiet: Quiet) -> None:
    """Measure on the loaded models, in the calling thread (blocks until done)."""
    measure_methods(loaded.target, lambda member: loaded.drafters[member], methods, refresh, receive,
                    Gate(lock, quiet))

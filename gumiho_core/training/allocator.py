"""The memory allocator of the training command line: tcmalloc where the system has it.

A run draws micro-batches of varied lengths, so each one allocates and frees tensors of new sizes, hundreds of MB
apiece. glibc's malloc serves that pattern badly (it maps, faults in and zeroes the large blocks again each time,
and its heap fragments), so long runs slowed down and grew by gigabytes; tcmalloc keeps freed spans for the next
micro-batch. docs/training.md, "Precision and memory", has the figures.

`python -m gumiho_core.train` therefore runs itself again, once, with tcmalloc preloaded (LD_PRELOAD), where a
libtcmalloc is installed (Debian and Ubuntu: libtcmalloc-minimal4). Where none is installed, the training commands
log how to install it. GUMIHO_MALLOC=system keeps the system's malloc. Nothing trained depends on the choice:
an allocator places tensors in memory, it does not change what is computed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

SWITCH = "GUMIHO_MALLOC"  # "system": keep the system's malloc
AGAIN = "GUMIHO_MALLOC_AGAIN"  # set in the process run again, so that it never runs itself a third time
LIBRARIES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                "/usr/local/lib")
KNOWN = ("tcmalloc", "jemalloc")  # allocators a user may have preloaded themselves; either is kept
INSTALL = "apt install libtcmalloc-minimal4"


def find_tcmalloc(dirs: tuple[str, ...] = LIBRARY_DIRS) -> Path | None:
    """The first tcmalloc library found in the usual library folders, or None."""
    return next((Path(d) / name for d in dirs for name in LIBRARIES if (Path(d) / name).is_file()), None)


def in_use(maps: str) -> str | None:
    """Which known allocator a process's memory map (/proc/<pid>/maps) shows loaded; None: the system's malloc."""
    return next((name for name in KNOWN if f"lib{name}" in maps), None)


def environment_again(env: dict[str, str], maps: str, library: Path | None) -> dict[str, str] | None:
    """The environment to run the command again in, with `library` preloaded; None: go on as it is."""
    if env.get(SWITCH) == "system" or env.get(AGAIN) or library is None or in_use(maps):
        return None
    preload = " ".join(p for p in (str(library), env.get("LD_PRELOAD", "")) if p)
    return {**env, "LD_PRELOAD": preload, AGAIN: "1"}


def _own_maps() -> str:
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:  # no /proc (not Linux): no allocator known to be loaded
        return ""


def run_with_tcmalloc() -> None:
    """Run this very command again with tcmalloc preloaded, where that applies (then this call never returns).

    The package's import (torch, about 3.7 s) is paid twice then: `-m gumiho_core.train` imports gumiho_core first."""
    env = environment_again(dict(os.environ), _own_maps(), find_tcmalloc())
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError:  # could not run itself again: go on with the system's malloc (describe() says which runs)
        pass


def describe() -> str:
    """One line for the log: the allocator in use, and how to get tcmalloc where the system's malloc runs."""
    name = in_use(_own_maps())
    if name:
        return f"memory allocator: {name}"
    if os.environ.get(SWITCH) == "system":
        return f"memory allocator: the system's ({SWITCH}=system)"
    return (f"memory allocator: the system's; training on a CPU runs faster with tcmalloc ({INSTALL}; "
            "docs/training.md, Precision and memory)")

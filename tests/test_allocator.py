"""The training command line runs with tcmalloc where the system has it (gumiho_core/training/allocator.py).

The command-line test runs `python -m gumiho_core.train` for real and reads the allocator it logs. It is skipped
where no tcmalloc is installed, unless GUMIHO_REQUIRE_TCMALLOC is set (CI installs it), where that fails.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gumiho_core.training.allocator import AGAIN, SWITCH, environment_again, find_tcmalloc, in_use

ROOT = Path(__file__).resolve().parent.parent
LIB = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
GLIBC_MAPS = "7f3a00000000-7f3a00028000 r--p 00000000 fe:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
TCMALLOC_MAPS = GLIBC_MAPS + "7f3b00000000-7f3b00010000 r-xp 00000000 fe:01 2 /usr/lib/libtcmalloc_minimal.so.4.5.10\n"
JEMALLOC_MAPS = GLIBC_MAPS + "7f3c00000000-7f3c00010000 r-xp 00000000 fe:01 3 /usr/lib/libjemalloc.so.2\n"
HAVE_TCMALLOC = find_tcmalloc() is not None
if os.environ.get("GUMIHO_REQUIRE_TCMALLOC"):
    assert HAVE_TCMALLOC, "GUMIHO_REQUIRE_TCMALLOC is set but no libtcmalloc is installed (libtcmalloc-minimal4)"


def test_runs_again_with_tcmalloc_ahead_of_what_the_user_preloads():
    env = environment_again({"LD_PRELOAD": "/opt/mine.so", "PATH": "/bin"}, GLIBC_MAPS, LIB)
    assert env == {"LD_PRELOAD": f"{LIB} /opt/mine.so", "PATH": "/bin", AGAIN: "1"}
    assert environment_again({}, GLIBC_MAPS, LIB)["LD_PRELOAD"] == str(LIB)


@pytest.mark.parametrize("env, maps, library", [
    ({SWITCH: "system"}, GLIBC_MAPS, LIB),  # the user's choice
    ({AGAIN: "1"}, GLIBC_MAPS, LIB),  # already ran again: the preload did not take, never loop
    ({}, TCMALLOC_MAPS, LIB),  # already there
    ({}, JEMALLOC_MAPS, LIB),  # the user preloaded another allocator
    ({}, GLIBC_MAPS, None),  # none installed
], ids=["system", "ran-again", "tcmalloc-loaded", "jemalloc-loaded", "not-installed"])
def test_goes_on_as_it_is(env, maps, library):
    assert environment_again(env, maps, library) is None


def test_in_use_reads_the_memory_map():
    assert (in_use(GLIBC_MAPS), in_use(TCMALLOC_MAPS), in_use(JEMALLOC_MAPS)) == (None, "tcmalloc", "jemalloc")


def test_find_tcmalloc_looks_in_the_folders_given(tmp_path):
    assert find_tcmalloc((str(tmp_path),)) is None
    (tmp_path / "libtcmalloc.so.4").write_bytes(b"")
    assert find_tcmalloc((str(tmp_path),)) == tmp_path / "libtcmalloc.so.4"


def _train_log(tmp_path: Path, command: str = "train", **env: str) -> str:
    """What `python -m gumiho_core.train <command>` logs before it refuses a target that does not exist."""
    clean = {k: v for k, v in os.environ.items() if k not in (SWITCH, AGAIN, "LD_PRELOAD")}
    done = subprocess.run([sys.executable, "-m", "gumiho_core.train", command, "--target", str(tmp_path / "none"),
                           "--workdir", str(tmp_path)], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    return done.stderr


@pytest.mark.skipif(not HAVE_TCMALLOC, reason="no libtcmalloc installed here (apt install libtcmalloc-minimal4)")
def test_the_training_command_runs_with_tcmalloc_unless_told_not_to(tmp_path):
    assert "memory allocator: tcmalloc" in _train_log(tmp_path)
    assert f"memory allocator: the system's ({SWITCH}=system)" in _train_log(tmp_path, **{SWITCH: "system"})


@pytest.mark.skipif(not HAVE_TCMALLOC, reason="no libtcmalloc installed here (apt install libtcmalloc-minimal4)")
@pytest.mark.parametrize("command", ["tune", "family"])
def test_the_family_commands_train_with_tcmalloc_and_say_so(tmp_path, command):
    assert "memory allocator: tcmalloc" in _train_log(tmp_path, command)

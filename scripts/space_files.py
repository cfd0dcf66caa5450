"""Which files of a checkout go to a Hugging Face Space, and the Hub's limits on them (scripts/deploy_space.py).

In a git checkout: those git would commit (tracked, and untracked but not ignored); elsewhere every file under the
folder. Minus what a Space must not carry or never uses: LEFT_OUT_DIRS at any depth, LEFT_OUT_TOP at the top, and
data/ unless it is asked for.
"""
from __future__ import annotations

import os
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

LFS_ABOVE = 10 * 1024 * 1024  # the Hub takes larger files only through LFS (upload_folder does that itself)
# The Hub's documented limits (huggingface.co/docs/hub/storage-limits, "Repository limitations and
# recommendations", as read in 2026-12): no single file over 500 GB, at most 10k entries in one folder.
MAX_FILE_BYTES = 500 * 1000**3
MAX_FOLDER_ENTRIES = 10_000
LEFT_OUT_DIRS = {  # at any depth: environments, version control and caches (upload_folder never sends .git)
    ".venv": "virtual environment", "venv": "virtual environment", ".git": "version control",
    "__pycache__": "cache", ".pytest_cache": "cache", ".ruff_cache": "cache", ".mypy_cache": "cache",
    ".cache": "cache", ".gradio": "Gradio's cache and flagged data",
}
LEFT_OUT_TOP = {  # at the top: outputs, and what only development uses
    "out": "output", "runs": "run files", ".whl": "local wheel cache", ".gl": "local cache",
    "tests": "tests (a Space installs requirements.txt only, never runs them; CI runs them from the repository)",
    ".ci": "CI",
}
DATA = "data"


class DeployError(Exception):
    """Bad input or a check that fails: one line for the user, exit code 2."""


@dataclass(frozen=True)
class SpaceFile:
    path: str  # relative, with "/"
    size: int

    @property
    def lfs(self) -> bool:
        return self.size > LFS_ABOVE


def left_out(path: str, with_data: bool) -> str | None:
    """Why `path` stays off the Space, or None if it goes."""
    parts = PurePosixPath(path).parts
    for part in parts:  # a worktree's .git is a file
        if part in LEFT_OUT_DIRS:
            return LEFT_OUT_DIRS[part]
    if len(parts) > 1 and parts[0] in LEFT_OUT_TOP:
        return LEFT_OUT_TOP[parts[0]]
    if parts[0] == DATA and len(parts) > 1 and not with_data:
        return "data/ (the training corpus; --with-data to include it)"
    if path.endswith((".pyc", ".pyo")):
        return "cache"
    return None


def git_files(root: Path) -> list[str] | None:
    """What git would commit under root (tracked, and untracked but not ignored); None if root is no checkout."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted({p for p in out.decode("utf-8", "surrogateescape").split("\0") if p})


def walked_files(root: Path) -> list[str]:
    """Every file under root, not descending into the folders that never go."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in LEFT_OUT_DIRS]
        found += [Path(folder, n).relative_to(root).as_posix() for n in names]
    return sorted(found)


def git_commit(root: Path) -> str | None:
    """The checkout's commit, "-dirty" if it has changes: the upload's commit message names what went."""
    try:
        return subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def select(root: Path, with_data: bool) -> tuple[list[SpaceFile], Counter, str]:
    """(the files that go, how many were left out for each reason, where the list came from)."""
    listed = git_files(root)
    source = "git: tracked and untracked-not-ignored files" if listed is not None else "every file in the folder"
    files, dropped = [], Counter()
    for path in listed if listed is not None else walked_files(root):
        if not (root / path).is_file():
            continue  # deleted but still tracked, or a link to a folder: upload_folder would not send it
        reason = left_out(path, with_data)
        if reason:
            dropped[reason] += 1
        else:
            files.append(SpaceFile(path, (root / path).stat().st_size))
    return files, dropped, source


def folder_entries(paths) -> Counter:
    """How many entries (files and subfolders) each folder would hold."""
    children = set()
    for path in paths:
        parts = PurePosixPath(path).parts
        children |= {("/".join(parts[:depth]) or ".", parts[depth]) for depth in range(len(parts))}
    return Counter(folder for folder, _ in children)


def check_limits(files: tuple[SpaceFile, ...]) -> None:
    for f in files:
        if f.size > MAX_FILE_BYTES:
            raise DeployError(f"{f.path} is {human(f.size)}: the Hub takes no file over {human(MAX_FILE_BYTES)}")
    for folder, n in folder_entries(f.path for f in files).items():
        if n > MAX_FOLDER_ENTRIES:
            raise DeployError(f"folder {folder!r} would hold {n} entries: the Hub allows at most {MAX_FOLDER_ENTRIES}")


def human(n: float) -> str:
    """A size in decimal units, as the Hub shows them."""
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1000
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}"

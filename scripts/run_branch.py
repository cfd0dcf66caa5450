"""Keep a long training run's resumable state in git, on a branch of its own, so a fresh machine can go on with it.

    .venv/bin/python scripts/run_branch.py save v8      # the run folder -> branch train/v8 (one commit, replaced)
    .venv/bin/python scripts/run_branch.py restore v8   # branch train/v8 -> the run folder
    .venv/bin/python scripts/run_branch.py drop v8      # delete the branch once the run's heads are shipped

A run's checkpoint (latest.pt: weights, AdamW moments, step, data order, random state; about 230 MB) lives in the
cache folder, which a fresh machine does not have, and a run started again from its heads would re-warm its rate
and lose its schedule. The branch holds one commit without parents: every file of the run folder (latest.pt,
history.json, data.json, the heads kept along the run). Each save replaces that commit and prunes the objects of
the one before, so the repository holds one checkpoint while the run lasts and none once it is dropped; main never
refers to it. `restore` refuses to overwrite a local checkpoint that is further on than the branch's.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gumiho_core.training.workspace import run_dir  # noqa: E402


MAKER = {**os.environ, **{f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
                          for what, value in (("NAME", "gumiho training"), ("EMAIL", "training@localhost"))}}


class BranchError(Exception):
    pass


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode:
        raise BranchError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def branch(run: str) -> str:
    return f"refs/heads/train/{run}"


def checkpoint_step(path: Path) -> int:
    import torch

    return int(torch.load(path, map_location="cpu", weights_only=True)["step"])


def save(repo: Path, folder: Path, run: str) -> str:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".tmp"))
    if not (folder / "latest.pt").is_file():
        raise BranchError(f"{folder} holds no latest.pt: nothing to save")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        for path in files:  # a private index: the work tree and main's index stay as they are
            blob = git(repo, "hash-object", "-w", str(path))
            git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path.relative_to(folder)}", env=env)
        tree = git(repo, "write-tree", env=env)
    step = checkpoint_step(folder / "latest.pt")
    commit = git(repo, "commit-tree", tree, "-m", f"training run {run}: checkpoint at optimizer step {step}", env=MAKER)
    git(repo, "update-ref", branch(run), commit)
    git(repo, "reflog", "expire", "--expire=now", branch(run))
    git(repo, "prune", "--expire=now")  # the replaced checkpoint's objects
    return f"saved {len(files)} files of {folder} (step {step}) as {branch(run)}"


def restore(repo: Path, folder: Path, run: str) -> str:
    try:
        names = git(repo, "ls-tree", "-r", "--name-only", branch(run)).splitlines()
    except BranchError:
        raise BranchError(f"{repo} has no branch train/{run}: nothing to restore") from None
    if (folder / "latest.pt").is_file():
        here = checkpoint_step(folder / "latest.pt")
        there = int(git(repo, "log", "-1", "--format=%s", branch(run)).rsplit(" ", 1)[1])
        if here > there:
            raise BranchError(f"{folder}/latest.pt is at step {here}, the branch at {there}: kept the local one")
    for name in names:
        dest = folder / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") as out:
            subprocess.run(["git", "cat-file", "blob", f"{branch(run)}:{name}"], cwd=repo, stdout=out, check=True)
    return f"restored {len(names)} files of {branch(run)} into {folder}"


def drop(repo: Path, run: str) -> str:
    git(repo, "update-ref", "-d", branch(run))
    git(repo, "prune", "--expire=now")
    return f"deleted {branch(run)}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["save", "restore", "drop"])
    p.add_argument("run", help="the run's name (train --run)")
    p.add_argument("--workdir", help="the training work folder, as train takes it (default: the cache's)")
    p.add_argument("--target", default="default", help="the target, as train takes it (names the work folder)")
    args = p.parse_args()
    folder = run_dir(args)  # where `train --run` keeps it
    try:
        if args.action == "save":
            print(save(ROOT, folder, args.run))
        elif args.action == "restore":
            print(restore(ROOT, folder, args.run))
        else:
            print(drop(ROOT, args.run))
    except BranchError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()

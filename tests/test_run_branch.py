"""scripts/run_branch.py: a run folder kept on a branch of its own and brought back, main untouched."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import run_branch  # noqa: E402


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    _git(repo, "add", "README.md")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def _run_folder(folder: Path, step: int) -> Path:
    (folder / "drafter-step5").mkdir(parents=True, exist_ok=True)
    torch.save({"step": step, "w": torch.randn(64, generator=torch.Generator().manual_seed(step))},
               folder / "latest.pt")
    (folder / "history.json").write_text(f'[{{"step": {step}}}]')
    (folder / "drafter-step5" / "config.json").write_text('{"h": 8}')
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_saved_run_comes_back_byte_for_byte_and_main_is_untouched(repo, tmp_path):
    run = _run_folder(tmp_path / "work" / "v8", step=40)
    head = _git(repo, "rev-parse", "HEAD")
    run_branch.save(repo, run, "v8")
    assert _git(repo, "rev-parse", "HEAD") == head and _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "rev-list", "--count", "train/v8") == "1"  # no parent: main's history is not in it
    back = tmp_path / "fresh" / "v8"
    run_branch.restore(repo, back, "v8")
    assert _files(back) == _files(run)


def test_saving_again_replaces_the_checkpoint_and_drops_the_old_one(repo, tmp_path):
    run = _run_folder(tmp_path / "v8", step=40)
    run_branch.save(repo, run, "v8")
    old = _git(repo, "rev-parse", "train/v8:latest.pt")
    _run_folder(run, step=80)
    run_branch.save(repo, run, "v8")
    assert _git(repo, "rev-list", "--count", "train/v8") == "1"
    assert "step 80" in _git(repo, "log", "-1", "--format=%s", "train/v8")
    gone = subprocess.run(["git", "cat-file", "-e", old], cwd=repo, capture_output=True)
    assert gone.returncode != 0, "the replaced checkpoint's blob is still in the repository"


def test_restore_keeps_a_local_checkpoint_that_is_further_on(repo, tmp_path):
    run = _run_folder(tmp_path / "v8", step=40)
    run_branch.save(repo, run, "v8")
    _run_folder(run, step=120)
    before = _files(run)
    with pytest.raises(run_branch.BranchError, match="step 120, the branch at 40"):
        run_branch.restore(repo, run, "v8")
    assert _files(run) == before


def test_a_missing_run_and_a_dropped_branch_say_so(repo, tmp_path):
    with pytest.raises(run_branch.BranchError, match="no branch train/v9"):
        run_branch.restore(repo, tmp_path / "v9", "v9")
    with pytest.raises(run_branch.BranchError, match="holds no latest.pt"):
        run_branch.save(repo, tmp_path, "v9")
    run_branch.save(repo, _run_folder(tmp_path / "v8", step=40), "v8")
    run_branch.drop(repo, "v8")
    assert _git(repo, "branch", "--list", "train/*") == ""

"""setup.sh's choice of PyTorch build, checked without installing anything (`./setup.sh --print-torch-args`).

The script runs from a copy in a temporary folder, with a PATH that holds only a stand-in `nvidia-smi` (or
nothing), so a real GPU or driver on the test machine changes nothing and no .venv is made anywhere that matters.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU = ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
BASH = shutil.which("bash")


def _pin() -> str:
    return next(line.split()[0] for line in (ROOT / "requirements.txt").read_text().splitlines()
                if line.startswith("torch=="))


@pytest.fixture
def checkout(tmp_path):
    for name in ("setup.sh", "requirements.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "bin").mkdir()
    return tmp_path


def _nvidia_smi(checkout: Path, exit_code: int) -> None:
    stub = checkout / "bin" / "nvidia-smi"
    stub.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    stub.chmod(0o755)


def torch_args(checkout: Path, **env) -> list[str]:
    run = subprocess.run([BASH, str(checkout / "setup.sh"), "--print-torch-args"], capture_output=True, text=True,
                         env={"PATH": str(checkout / "bin"), "HOME": os.environ.get("HOME", "/tmp"), **env},
                         timeout=30)
    assert run.returncode == 0, run.stderr
    assert not (checkout / ".venv").exists(), "--print-torch-args must install nothing"
    return run.stdout.split()


def test_without_nvidia_smi_torch_comes_from_the_cpu_index(checkout):
    assert torch_args(checkout) == [_pin(), *CPU]


def test_a_failing_nvidia_smi_counts_as_no_gpu(checkout):
    _nvidia_smi(checkout, 9)  # installed, but no driver or no device: the CUDA build would be dead weight
    assert torch_args(checkout) == [_pin(), *CPU]


def test_a_working_nvidia_gpu_keeps_pypis_default_build(checkout):
    _nvidia_smi(checkout, 0)
    assert torch_args(checkout) == [_pin()]


def test_gumiho_torch_index_overrides_the_choice(checkout):
    assert torch_args(checkout, GUMIHO_TORCH_INDEX="default") == [_pin()]
    _nvidia_smi(checkout, 0)
    assert torch_args(checkout, GUMIHO_TORCH_INDEX="cpu") == [_pin(), *CPU]
    cu = "https://download.pytorch.org/whl/cu126"
    assert torch_args(checkout, GUMIHO_TORCH_INDEX=cu) == [_pin(), "--extra-index-url", cu]


def test_the_torch_version_is_requirements_txts(checkout):
    pinned = (checkout / "requirements.txt").read_text().replace(_pin(), "torch==9.9.9  # a comment")
    (checkout / "requirements.txt").write_text(pinned)
    assert torch_args(checkout)[0] == "torch==9.9.9"

"""scripts/gpu_check.py without a GPU: its refusals, and every part of it run on a CPU with the tiny pair."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402
from gumiho_core import load_drafter, load_target  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_help_documents_the_check():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0
    for words in ("64 MiB", "8 minutes", "code 2", "verification cost curve", "auto", "--device cpu"):
        assert words in done.stdout, words


def test_without_cuda_one_line_and_code_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpu_check: no CUDA device here")
    assert not (tmp_path / "r.json").exists()


def test_another_transformers_one_line_and_code_2(monkeypatch, capsys, tmp_path):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "transformers 5.17.0 here" in err and gpu_check.pinned_transformers() in err


def test_tiny_pair_on_a_cpu_writes_the_report(tmp_path):
    out = tmp_path / "r.json"
    assert gpu_check.main(["--device", "cpu", "--quick", "--skip-tests", "--skip-default", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["machine"]["torch"] == torch.__version__ and report["elapsed_s"] >= 0
    for dtype in gpu_check.DTYPES:
        part = report["tiny"][dtype]
        assert part["peak_gpu_mib"] is None  # a CPU has none
        for method in gpu_check.METHODS:
            row = part["methods"][method]
            assert row["tokens_per_s"] > 0 and row["mean_accept_len"] >= 1.0
            times = row["step_ms"]  # the timed runs' own steps: a mean far above the median is a few slow steps
            assert 0 < times["median"] <= times["max"] and 0 < times["mean"] <= times["max"]
            assert times["slowest_tenth"] / times["steps"] <= times["slowest_tenth_share"] <= 1  # k of n: >= k/n
            assert times["prefill_mean"] > 0 and 0 < times["stages_mean"] <= times["mean"]  # stages: parts of a step
            assert times["record_mean"] >= 0  # step()'s wall time holds its own count
        for method in ("gumiho", "gumiho-serial"):
            row = part["methods"][method]
            assert row["runs"] == gpu_check.QUICK.prompts and 0 <= row["identical"] <= row["runs"]
            assert all(d["near_tie"] for d in row["divergences"]), row["divergences"]
            steps = part["step_overhead"][method]  # scripts/step_overhead.py's breakdown
            assert steps["ops"]["target"] > 0 and steps["ops"]["drafter"] > 0 and steps["host_reads_max"] >= 1
            assert steps["cpu"]["draft_ms"] > 0 and steps["cpu"]["target_forward_ms"] > 0


def test_the_step_breakdown_decodes_a_prompt_the_timed_runs_never_met(tmp_path, monkeypatch):
    """Its steps then meet new shapes as the timed runs' steps do, so a cost per new shape shows in its stages."""
    timed, broken_down = [], []
    run_methods, breakdown = gpu_check.run_methods, gpu_check.step_breakdown

    def timing(target, drafter, prompts, *args):
        timed.extend(map(tuple, prompts))
        return run_methods(target, drafter, prompts, *args)

    def breaking_down(target, drafter, prompt, *args):
        broken_down.append(tuple(prompt))
        return breakdown(target, drafter, prompt, *args)

    monkeypatch.setattr(gpu_check, "run_methods", timing)
    monkeypatch.setattr(gpu_check, "step_breakdown", breaking_down)
    argv = ["--device", "cpu", "--quick", "--skip-tests", "--skip-default", "--out", str(tmp_path / "r.json")]
    assert gpu_check.main(argv) == 0
    assert len(broken_down) == len(gpu_check.DTYPES) and not set(broken_down) & set(timed)
    assert len(set(timed)) == gpu_check.QUICK.prompts


def test_skip_tiny_leaves_the_budget_to_the_default_model(tmp_path, monkeypatch):
    """A short lease spends the whole budget on the default model: no tiny pair is built or run."""
    monkeypatch.setattr(gpu_check, "write_pair", lambda *a, **k: pytest.fail("the tiny pair was built"))
    out = tmp_path / "r.json"
    argv = ["--device", "cpu", "--quick", "--skip-tests", "--skip-tiny", "--skip-default", "--out", str(out)]
    assert gpu_check.main(argv) == 0
    assert json.loads(out.read_text())["tiny"] == {"skipped": "--skip-tiny"}


def test_verify_curve_and_auto_choice(tiny_pair, monkeypatch):
    monkeypatch.setenv("GUMIHO_DRAFTER_DTYPE", "bfloat16")
    target = load_target(str(tiny_pair[0]), device="cpu", dtype="bfloat16")
    drafter = load_drafter(str(tiny_pair[1]), target)
    prompts = gpu_check.random_prompts(gpu_check.TINY_VOCAB, 2)
    curve = gpu_check.verify_curve(target, drafter, prompts[0], gpu_check.QUICK)
    assert set(curve["verify_s"]) == {str(n) for n in gpu_check.QUICK.curve} and curve["plain_step_s"] > 0
    assert curve["context_tokens"] > len(prompts[0])
    auto = gpu_check.auto_choice(target, drafter, prompts)
    assert auto["tree"]["total_tokens"] >= 2 and auto["summary"].startswith("auto tree for")


def test_default_shape_without_the_default_model(tmp_path, monkeypatch):
    """Where the weights cannot travel: the default model's shape (one layer here, for speed), loadable with the
    trained heads, and random prompts in its vocabulary."""
    monkeypatch.setattr(gpu_check, "default_model_dir", lambda: tmp_path / "absent")
    monkeypatch.setattr(gpu_check, "DEFAULT_WHEEL", "no_such_wheel_here")
    monkeypatch.setattr(gpu_check, "SMOLLM2_LAYERS", 1)
    (target_dir, drafter_path, weights), prompts = gpu_check.default_pair(tmp_path, 3)
    assert weights.startswith("random") and len(prompts) == 3
    target = load_target(target_dir, device="cpu", dtype="bfloat16")
    drafter = load_drafter(drafter_path, target)
    assert target.config.num_hidden_layers == 1 and target.config.hidden_size == drafter.cfg.hidden_size
    assert drafter.shared.vocab_map is not None  # the trained heads' reduced draft vocabulary came along
    assert all(0 <= t < target.vocab_size for p in prompts for t in p)

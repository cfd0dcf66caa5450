"""Export to the authors' published layout: the round trip through this project's official-layout loader,
the file's keys, and the config.json fields that the authors' loader and vLLM's Gumiho model read."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

from gumiho_core import DecodeConfig, TreeConfig, generate, start
from gumiho_core.drafter import SharedWeights, save_drafter
from gumiho_core.models import load_drafter
from gumiho_core.training.cli import main
from gumiho_core.training.export import rope_fields
from reference import plain_greedy
from test_checkpoints import official_layout
from tiny import random_drafter, tiny_target

# Every config field the authors' loader reads (github.com/AMD-AIG-AIMA/Gumiho), and where:
AUTHORS_FIELDS = {
    # gumiho/model/cnets.py, Model.__init__: the embedding, the layer count, the activation
    "pad_token_id", "vocab_size", "hidden_size", "num_hidden_layers", "hidden_act",
    # gumiho/model/cnets.py, LlamaAttention and its _init_rope (rope_theta and qkv_bias through hasattr:
    # absent, RoPE falls back to base 10000), LlamaMLP, LlamaDecoderLayer
    "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rope_scaling", "rope_theta",
    "qkv_bias", "pretraining_tp", "intermediate_size", "rms_norm_eps",
    # gumiho/model/gumiho_model.py, GumihoModel.__init__ reads the JSON's "bias"
    "bias",
}
# ... and those vLLM's Gumiho method reads (vllm-project/vllm pull request #43544): its GumihoConfig wraps the
# config AutoConfig makes of config.json (vllm/transformers_utils/configs/gumiho.py); its model
# (vllm/model_executor/models/gumiho.py) reads gumiho_fc_bias; its LLaMA decoder layers read the rest
# (vllm/model_executor/models/llama.py: "bias" too, as the attention projections' bias).
VLLM_FIELDS = {
    "architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "gumiho_fc_bias",
    "rms_norm_eps", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "hidden_act",
    "max_position_embeddings", "rope_theta", "rope_scaling", "attention_bias", "bias", "mlp_bias",
}
PROMPTS = [[5, 6, 7, 8, 9], [11, 40, 2, 2, 2, 71, 9, 30, 12, 13, 14, 15]]
NEW_TOKENS = 16
TREE = TreeConfig(top_k=4, mlp_topk=5, pruning=6, total_tokens=24)  # all 7 depths, small enough for a busy CPU


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, scale=6.0)


@pytest.fixture(scope="module")
def pair(target, tmp_path_factory):
    """The tiny pair as files: the target folder (save_pretrained), full and reduced-vocabulary heads (ours)."""
    root = tmp_path_factory.mktemp("pair")
    target.model.save_pretrained(root / "target")
    save_drafter(random_drafter(target, seed=1), root / "full")
    reduced = random_drafter(target, seed=2)
    vocab_map = torch.randperm(target.vocab_size, generator=torch.Generator().manual_seed(0))[:40].sort().values
    shared = target.shared_weights()
    reduced.bind(SharedWeights(shared.embed, shared.lm_head[vocab_map], vocab_map))
    save_drafter(reduced, root / "reduced")
    return root


def export(pair, heads: str, out) -> int:
    # the target folder holds no tokenizer: loading the target model would fail, so rc 0 also says it was not loaded
    return main(["export", "--target", str(pair / "target"), "--draft", str(pair / heads), "--out", str(out)])


@pytest.fixture(scope="module")
def exported(pair):
    for heads in ("full", "reduced"):
        assert export(pair, heads, pair / f"{heads}-official") == 0
    return pair


def decode_all(drafter, target):
    return [generate(start("gumiho", target, p, DecodeConfig(max_new_tokens=NEW_TOKENS), TREE, drafter))
            for p in PROMPTS]


def trees(run):
    return [r.tree for r in run.records if r.kind == "speculative"]


@pytest.mark.parametrize("heads", ["full", "reduced"])
def test_round_trip_drafts_and_decodes_identically(target, exported, heads):
    original = decode_all(load_drafter(str(exported / heads), target), target)
    again = decode_all(load_drafter(str(exported / f"{heads}-official"), target), target)
    for prompt, a, b in zip(PROMPTS, original, again):
        assert list(a.token_ids) == list(b.token_ids) == plain_greedy(target.model, prompt, NEW_TOKENS)
        assert len(trees(a)) == len(trees(b)) > 0
        for ta, tb in zip(trees(a), trees(b)):
            assert (ta.tokens, ta.parents, ta.depth, ta.proposer) == (tb.tokens, tb.parents, tb.depth, tb.proposer)
            torch.testing.assert_close(torch.tensor(tb.score), torch.tensor(ta.score), rtol=0, atol=1e-5)


def test_reduced_vocabulary_needs_its_file(target, exported, tmp_path):
    """Without draft_vocab.json (what the authors' code and vLLM see) the heads propose from the whole vocabulary."""
    allowed = set(json.loads((exported / "reduced-official" / "draft_vocab.json").read_text())["draft_to_target"])
    shutil.copy(exported / "reduced-official" / "pytorch_model.bin", tmp_path / "pytorch_model.bin")
    with_file = decode_all(load_drafter(str(exported / "reduced-official"), target), target)
    without = decode_all(load_drafter(str(tmp_path), target), target)
    drafted = lambda runs: {t for run in runs for tree in trees(run) for t in tree.tokens[1:]}  # noqa: E731
    assert drafted(with_file) <= allowed
    assert drafted(without) - allowed, "the whole-vocabulary head never left the draft vocabulary"
    assert [r.token_ids for r in with_file] == [r.token_ids for r in without]  # exact either way


def test_weights_file_holds_exactly_the_authors_keys(target, exported):
    """Their loader is strict: every key of the published layout (docs/method.md), with its shape, and nothing else."""
    cfg = target.config
    want = official_layout(cfg.hidden_size, cfg.intermediate_size, 2 * 16, cfg.vocab_size)
    for heads in ("full", "reduced"):
        state = torch.load(exported / f"{heads}-official" / "pytorch_model.bin", weights_only=True)
        assert {k: tuple(v.shape) for k, v in state.items()} == want
        torch.testing.assert_close(state["embed_tokens.weight"].float(),
                                   target.shared_weights().embed.half().float(), rtol=0, atol=0)
    assert not (exported / "full-official" / "draft_vocab.json").exists()


def test_config_holds_every_field_the_loaders_read(target, exported):
    cfg = json.loads((exported / "full-official" / "config.json").read_text())
    assert AUTHORS_FIELDS - cfg.keys() == set()
    assert VLLM_FIELDS - cfg.keys() == set()
    assert (cfg["architectures"], cfg["model_type"], cfg["num_hidden_layers"]) == (["LlamaForCausalLM"], "llama", 2)
    assert (cfg["gumiho_fc_bias"], cfg["bias"], cfg["qkv_bias"], cfg["attention_bias"]) == (True, False, False, False)
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == cfg["head_dim"]  # the authors derive head_dim so
    assert (cfg["rope_theta"], cfg["rope_scaling"]) == (target.config.rope_parameters["rope_theta"], None)
    hf = AutoConfig.from_pretrained(exported / "full-official")  # how vLLM reads a draft's config.json
    t = target.config
    assert (hf.model_type, hf.num_hidden_layers, hf.hidden_size, hf.intermediate_size, hf.num_key_value_heads,
            hf.head_dim, hf.vocab_size, hf.rms_norm_eps, hf.rope_parameters["rope_theta"]) == (
        "llama", 2, t.hidden_size, t.intermediate_size, t.num_key_value_heads, t.head_dim, t.vocab_size,
        t.rms_norm_eps, t.rope_parameters["rope_theta"])
    card = (exported / "reduced-official" / "README.md").read_text()
    assert "40 of 97 target token ids" in card and '"method": "gumiho"' in card


def test_rope_scaling_in_the_form_the_authors_read():
    assert rope_fields({"rope_type": "default", "rope_theta": 5e5}) == (5e5, None)
    assert rope_fields({"rope_type": "linear", "rope_theta": 1e4, "factor": 2}) == (1e4, {"type": "linear",
                                                                                           "factor": 2.0})


def test_bad_exports_are_refused(pair, tmp_path, capsys):
    (tmp_path / "clash").mkdir()
    (tmp_path / "clash" / "model.safetensors").write_bytes(b"")  # vLLM would load it, not pytorch_model.bin
    save_drafter(random_drafter(tiny_target(seed=0, hidden=32, heads=4, kv_heads=2)), tmp_path / "other")
    shutil.copytree(pair / "full", tmp_path / "partial")
    state = load_file(str(tmp_path / "partial" / "model.safetensors"))
    del state["fc.bias"]
    save_file(state, str(tmp_path / "partial" / "model.safetensors"))
    out = ["--out", str(tmp_path / "out")]
    cases = [
        (["--draft", str(pair / "full")], "needs --out"),
        (["--draft", str(pair / "full"), "--out", str(pair / "full")], "heads' own folder"),
        (["--draft", str(pair / "full"), "--out", str(tmp_path / "clash")], "already holds model.safetensors"),
        (["--draft", str(tmp_path / "nope"), *out], "not heads in this project's format"),
        (["--draft", str(tmp_path / "other"), *out], "belong to another model"),
        (["--draft", str(tmp_path / "partial"), *out], "missing keys ['fc.bias']"),
    ]
    for extra, message in cases:
        assert main(["export", "--target", str(pair / "target"), *extra]) == 2
        assert message in capsys.readouterr().err
    assert main(["export", "--target", str(tmp_path / "none"), "--draft", str(pair / "full"), *out]) == 2
    assert "local model folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_broken_draft_vocabulary_file_is_named(target, exported, tmp_path):
    from gumiho_core import GumihoError

    shutil.copy(exported / "reduced-official" / "pytorch_model.bin", tmp_path / "pytorch_model.bin")
    (tmp_path / "draft_vocab.json").write_text(json.dumps({"target_vocab_size": 97, "draft_to_target": [1, 1]}))
    with pytest.raises(GumihoError, match="distinct target ids"):
        load_drafter(str(tmp_path), target)
    (tmp_path / "draft_vocab.json").write_text("{")
    with pytest.raises(GumihoError, match="not a draft vocabulary file"):
        load_drafter(str(tmp_path), target)


def test_target_embedding_from_a_bin_file_or_shards(target, tmp_path):
    from gumiho_core import GumihoError
    from gumiho_core.training.export import TARGET_EMBEDDING, target_embedding

    embed = target.shared_weights().embed.clone()
    (tmp_path / "bin").mkdir()
    torch.save({TARGET_EMBEDDING: embed, "lm_head.weight": embed}, tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "shards").mkdir()
    save_file({"lm_head.weight": embed}, str(tmp_path / "shards" / "model-00001-of-00002.safetensors"))
    save_file({TARGET_EMBEDDING: embed}, str(tmp_path / "shards" / "model-00002-of-00002.safetensors"))
    weight_map = {"lm_head.weight": "model-00001-of-00002.safetensors",
                  TARGET_EMBEDDING: "model-00002-of-00002.safetensors"}
    (tmp_path / "shards" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    for folder in ("bin", "shards"):
        assert torch.equal(target_embedding(tmp_path / folder), embed)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GumihoError, match="has no model.safetensors or pytorch_model.bin"):
        target_embedding(tmp_path / "empty")
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(GumihoError, match="not a readable checkpoint"):
        target_embedding(tmp_path / "bin")

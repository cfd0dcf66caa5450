"""The Gumiho draft network: fc fusion, a 2-layer serial LLaMA stack, and parallel MLP heads.

Module names equal the official checkpoint keys (GUMIHO.md): fc, layers.{i}.self_attn.*,
layers.{i}.mlp.*, layers.{i}.*_layernorm, mlp.{head}.{block}.linear. The target's embedding and
lm_head are shared and frozen: they are held by reference, never stored with the drafter.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from .errors import GumihoError
from .kv_cache import KVCache

log = logging.getLogger(__name__)
FORMAT = "gumiho_core-drafter-1"


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_parameters: dict = field(default_factory=lambda: {"rope_type": "default", "rope_theta": 10000.0})
    max_position_embeddings: int = 4096
    hidden_act: str = "silu"
    attention_bias: bool = False
    num_layers: int = 2
    serial_steps: int = 2
    mlp_heads: int = 5
    res_blocks: int = 5

    def __post_init__(self):
        for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                     "head_dim", "vocab_size", "num_layers", "serial_steps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise GumihoError(f"drafter config: {name} must be an integer >= 1; got {v!r}")
        for name in ("mlp_heads", "res_blocks"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise GumihoError(f"drafter config: {name} must be an integer >= 0; got {v!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise GumihoError(f"drafter config: num_attention_heads {self.num_attention_heads} is not a multiple "
                              f"of num_key_value_heads {self.num_key_value_heads}")

    @classmethod
    def from_target(cls, cfg, **overrides) -> "DrafterConfig":
        """The draft architecture of a target: its LLaMA layer shapes, 2 layers (GUMIHO.md)."""
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        rope = dict(getattr(cfg, "rope_parameters", None) or {"rope_type": "default", "rope_theta": cfg.rope_theta})
        base = dict(
            hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
            num_attention_heads=cfg.num_attention_heads,
            num_key_value_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
            head_dim=head_dim, vocab_size=cfg.vocab_size, rms_norm_eps=float(cfg.rms_norm_eps),
            rope_parameters=rope, max_position_embeddings=cfg.max_position_embeddings,
            hidden_act=getattr(cfg, "hidden_act", "silu"),
        )
        base.update(overrides)
        return cls(**base)

    def llama_config(self) -> LlamaConfig:
        """The HF config whose RoPE, MLP and RMSNorm classes this drafter reuses."""
        return LlamaConfig(
            hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim, vocab_size=self.vocab_size, rms_norm_eps=self.rms_norm_eps,
            rope_parameters=dict(self.rope_parameters), max_position_embeddings=self.max_position_embeddings,
            hidden_act=self.hidden_act, num_hidden_layers=self.num_layers, mlp_bias=False,
        )


@dataclass(frozen=True, eq=False)
class SharedWeights:
    """The target's frozen token embedding [V, H] and lm_head [V', H] (V' < V with a reduced draft vocabulary)."""

    embed: torch.Tensor
    lm_head: torch.Tensor
    vocab_map: torch.Tensor | None = None  # [V'] target ids of the lm_head rows, None = identity


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class DraftAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        H, nh, kvh, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.nh, self.kvh, self.hd = nh, kvh, hd
        self.q_proj = nn.Linear(H, nh * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(H, kvh * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(H, kvh * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)

    def forward(self, x, cos, sin, mask, cache: KVCache | None, layer: int):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)  # [B, nh, T, hd]
        k = self.k_proj(x).view(B, T, self.kvh, self.hd).transpose(1, 2)  # [B, kvh, T, hd]
        v = self.v_proj(x).view(B, T, self.kvh, self.hd).transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, hd]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(layer, k, v)  # [1, kvh, S, hd]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.kvh != self.nh)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class DraftLayer(nn.Module):
    """A LLaMA decoder layer; layer 0 has no input norm (its input is the fc fusion, GUMIHO.md)."""

    def __init__(self, cfg: DrafterConfig, index: int):
        super().__init__()
        hf = cfg.llama_config()
        self.index = index
        if index > 0:
            self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = LlamaMLP(hf)

    def forward(self, x, cos, sin, mask, cache):
        h = self.input_layernorm(x) if self.index > 0 else x
        x = x + self.self_attn(h, cos, sin, mask, cache, self.index)
        return x + self.mlp(self.post_attention_layernorm(x))


class MLPBlock(nn.Module):
    """Linear + SiLU, with a residual when shapes allow (blocks 1..5 of a head; block 0 maps s*H -> H)."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)
        self.residual = d_in == d_out
        nn.init.zeros_(self.linear.weight)

    def forward(self, x):
        y = F.silu(self.linear(x))
        return x + y if self.residual else y


class GumihoDrafter(nn.Module):
    def __init__(self, cfg: DrafterConfig, shared: SharedWeights, origin: str = "untrained"):
        super().__init__()
        H = cfg.hidden_size
        self.cfg = cfg
        self.origin = origin  # where the weights came from: a path, a hub id, or "untrained"
        self.fc = nn.Linear(2 * H, H, bias=True)
        self.layers = nn.ModuleList(DraftLayer(cfg, i) for i in range(cfg.num_layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(MLPBlock(cfg.serial_steps * H, H), *(MLPBlock(H, H) for _ in range(cfg.res_blocks)))
            for _ in range(cfg.mlp_heads)
        )
        self.rotary = LlamaRotaryEmbedding(cfg.llama_config())
        self.bind(shared)

    @property
    def trained(self) -> bool:
        return self.origin != "untrained"

    def _apply(self, fn, recurse=True):
        """Casts and moves keep RoPE's inverse frequencies in fp32, as HF's loaders keep the target's.

        In bf16 they keep 8 bits: at position 500 a rotation angle would be off by up to 0.7 radian.
        """
        rope = {name: buf.float() for name, buf in self.rotary.named_buffers()}
        super()._apply(fn, recurse)
        for name, fp32 in rope.items():
            setattr(self.rotary, name, fp32.to(getattr(self.rotary, name).device))
        return self

    def bind(self, shared: SharedWeights) -> None:
        V, H = shared.embed.shape
        if (V, H) != (self.cfg.vocab_size, self.cfg.hidden_size):
            raise GumihoError(
                f"drafter does not fit this target: drafter has hidden size {self.cfg.hidden_size} and vocabulary "
                f"{self.cfg.vocab_size}, the target has hidden size {H} and vocabulary {V}")
        object.__setattr__(self, "shared", shared)  # a plain reference: not a submodule, not in state_dict

    # -- the four pieces the tree builder and the trainer compose --------------------------------
    def fuse(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """fc(concat(embedding(token), feature)), embedding first. [..., T] x [..., T, H] -> [..., T, H]"""
        emb = F.embedding(tokens.to(self.shared.embed.device), self.shared.embed)  # on the target's first GPU
        return self.fc(torch.cat((emb.to(features.device, features.dtype), features), dim=-1))

    def serial(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
               cache: KVCache | None = None) -> torch.Tensor:
        """Run the serial stack on fused inputs x [B, T, H] at `positions` [B, T].

        mask: bool [B, 1, T, S] (True = may attend), S = cache length + T; None = causal, no cache.
        """
        cos, sin = self.rotary(x, positions)  # [B, T, hd]
        if cache is not None:
            cache.reserve(x.shape[1])
        if mask is None:
            T = x.shape[1]
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()[None, None]
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache)
        if cache is not None:
            cache.advance(x.shape[1])
        return x

    def heads(self, u: torch.Tensor, n_heads: int | None = None) -> torch.Tensor:
        """Parallel MLP heads on u [..., serial_steps * H] -> features [n_heads, ..., H]."""
        heads = self.mlp if n_heads is None else self.mlp[:n_heads]
        return torch.stack([head(u) for head in heads])

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Draft logits over the draft vocabulary (the target's, or its reduced subset)."""
        return F.linear(features.to(self.shared.lm_head.dtype), self.shared.lm_head)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        vm = self.shared.vocab_map
        return draft_ids if vm is None else vm[draft_ids]

    def new_cache(self) -> KVCache:
        p = self.fc.weight
        return KVCache(self.cfg.num_layers, self.cfg.num_key_value_heads, self.cfg.head_dim, p.dtype, p.device)


# -- checkpoints ---------------------------------------------------------------------------------
OFFICIAL_IGNORED = ("embed_tokens.weight",)


def save_drafter(drafter: GumihoDrafter, folder: str | Path, dtype: torch.dtype = torch.float16,
                 extra: dict | None = None) -> Path:
    """Write config.json + model.safetensors (our format)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in drafter.state_dict().items()
             if not k.startswith("rotary.")}
    if drafter.shared.vocab_map is not None:
        state["draft_vocab"] = drafter.shared.vocab_map.detach().to("cpu", torch.int64)
    save_file(state, str(folder / "model.safetensors"))
    meta = {"format": FORMAT, "config": asdict(drafter.cfg), **(extra or {})}
    (folder / "config.json").write_text(json.dumps(meta, indent=2))
    return folder


def load_state(drafter: GumihoDrafter, state: dict[str, torch.Tensor], source: str) -> None:
    """Load a state dict (ours or the official layout), naming any mismatch."""
    state = {k: v for k, v in state.items() if k not in OFFICIAL_IGNORED and k != "draft_vocab"}
    own = {k: v for k, v in drafter.state_dict().items() if not k.startswith("rotary.")}
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise GumihoError(f"{source}: not a Gumiho drafter for this target; missing keys {missing[:4]}"
                          f"{'...' if len(missing) > 4 else ''}, unexpected keys {unexpected[:4]}"
                          f"{'...' if len(unexpected) > 4 else ''}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise GumihoError(f"{source}: {k} has shape {tuple(v.shape)}, this target needs {tuple(own[k].shape)} "
                              "(the checkpoint belongs to another model)")
    drafter.load_state_dict(state, strict=False)

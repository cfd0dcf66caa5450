"""The draft network of the family: fc fusion, a serial LLaMA stack, and parallel MLP heads (each optional).

Gumiho has all three (2 layers, 5 heads), EAGLE-2 style the stack alone (1 layer), Medusa style the heads alone
(config.ARCHITECTURES). Module names equal the official checkpoint keys (docs/method.md, "Checkpoint layout"):
fc, layers.{i}.self_attn.*, layers.{i}.mlp.*, layers.{i}.*_layernorm, mlp.{head}.{block}.linear. The target's
embedding and lm_head are shared and frozen: they are held by reference, never stored with the drafter.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from .attention import attention_kernels
from .cpu_kernels import PackedCopy, follow_linears, prepare_linears
from .config import DrafterConfig
from .errors import GumihoError
from .kv_cache import KVCache
from .target import SharedWeights

log = logging.getLogger(__name__)
FORMAT = "gumiho_core-drafter-1"


def llama_config(cfg: DrafterConfig) -> LlamaConfig:
    """The HF config whose RoPE, MLP and RMSNorm classes this drafter reuses."""
    return LlamaConfig(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim, vocab_size=cfg.vocab_size, rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters=dict(cfg.rope_parameters), max_position_embeddings=cfg.max_position_embeddings,
        hidden_act=cfg.hidden_act, num_hidden_layers=max(1, cfg.num_layers), mlp_bias=False,
    )


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
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.kvh != self.nh)
        else:  # the cache keeps the keys, and knows which of them each query may see
            y = cache.attend(layer, q, k, v, mask)  # [B, nh, T, hd]
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class DraftLayer(nn.Module):
    """A LLaMA decoder layer; layer 0 has no input norm (its input is the fc fusion, docs/method.md)."""

    def __init__(self, cfg: DrafterConfig, index: int):
        super().__init__()
        hf = llama_config(cfg)
        self.index = index
        if index > 0:
            self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = LlamaMLP(hf)

    def forward(self, x, cos, sin, mask, cache):
        h = _rms_norm(self.input_layernorm, x) if self.index > 0 else x
        x = x + self.self_attn(h, cos, sin, mask, cache, self.index)
        return x + self.mlp(_rms_norm(self.post_attention_layernorm, x))


def _rms_norm(norm: LlamaRMSNorm, x: torch.Tensor) -> torch.Tensor:
    """The norm's weights through torch's fused RMSNorm: one op where HF's module dispatches eight."""
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)


class MLPBlock(nn.Module):
    """Linear + SiLU, with a residual when shapes allow (blocks 1..5 of a head; block 0 maps s*H -> H, and is
    residual too where a head reads one feature: zero-initialised, it starts as the identity)."""

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
        self.steps: int | None = 0 if origin == "untrained" else None  # optimizer steps trained, where known
        if cfg.has_stack:
            self.fc = nn.Linear(2 * H, H, bias=True)
        self.layers = nn.ModuleList(DraftLayer(cfg, i) for i in range(cfg.num_layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(MLPBlock(cfg.heads_in, H), *(MLPBlock(H, H) for _ in range(cfg.res_blocks)))
            for _ in range(cfg.mlp_heads)
        )
        self.rotary = LlamaRotaryEmbedding(llama_config(cfg))
        follow_linears(self, half=True)  # packed matmuls on a CPU (fp16 weights when decoding), re-packed on change
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
        object.__setattr__(self, "_head_copy", PackedCopy(half=True))  # lm_head packed at its first CPU use

    # -- the four pieces the tree builder and the trainer compose --------------------------------
    def fuse(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """fc(concat(embedding(token), feature)), embedding first. [..., T] x [..., T, H] -> [..., T, H]"""
        emb = F.embedding(tokens.to(self.shared.embed.device), self.shared.embed)  # on the target's first GPU
        return self.fc(torch.cat((emb.to(features.device, features.dtype), features), dim=-1))

    def serial(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
               cache: KVCache | None = None) -> torch.Tensor:
        """Run the serial stack on fused inputs x [B, T, H] at `positions` [B, T].

        mask: bool [B, 1, T, S] (True = may attend), S = cache length + T; None = causal, no cache. A cache
        may read the mask its own way (training's rollout: rollout.StepKeys).
        """
        cos, sin = self.rotary(x, positions)  # [B, T, hd]
        if cache is not None:
            cache.reserve(x.shape[1])
        if mask is None:
            T = x.shape[1]
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()[None, None]
        with attention_kernels(x.device):
            for layer in self.layers:
                x = layer(x, cos, sin, mask, cache)
        if cache is not None:
            cache.advance(x.shape[1])
        return x

    def heads(self, u: torch.Tensor, n_heads: int | None = None, first: int = 0) -> torch.Tensor:
        """Parallel MLP heads first..n_heads-1 on u [..., serial_steps * H] -> features [n_heads - first, ..., H]."""
        heads = self.mlp[first:n_heads]
        return torch.stack([head(u) for head in heads])

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Draft logits over the draft vocabulary (the target's, or its reduced subset).

        On a CPU without gradients a packed copy of lm_head does the matmul, as in the drafter's own linear layers
        (cpu_kernels): while decoding its fp16 copy where fbgemm runs one, else a oneDNN one (the same values to fp32
        rounding); a stock matmul re-packs the weight at every call, which was most of a draft step's time with the
        default model.
        """
        return self._head_copy.linear(features.to(self.shared.lm_head.dtype), self.shared.lm_head)

    def prepare(self) -> None:
        """Pack the weights for decoding on a CPU now, not in the first step that uses each (cpu_kernels)."""
        prepare_linears(self)
        self._head_copy.prepare(self.shared.lm_head)

    @property
    def draft_vocab_size(self) -> int:
        """Tokens the drafter proposes from: the target's vocabulary, or its reduced subset."""
        return self.shared.lm_head.shape[0]

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        vm = self.shared.vocab_map
        return draft_ids if vm is None else vm[draft_ids]

    @property
    def weight(self) -> torch.Tensor:
        """A parameter that tells the drafter's device and dtype (fc's, or the first head's without a stack)."""
        return self.fc.weight if self.cfg.has_stack else self.mlp[0][0].linear.weight

    def new_cache(self) -> KVCache | None:
        """The serial stack's cache; None for a drafter without one."""
        if not self.cfg.has_stack:
            return None
        p = self.weight
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
    (folder / "evaluation.json").unlink(missing_ok=True)  # an evaluation of the weights just replaced
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


# -- a reduced draft vocabulary beside an official-layout checkpoint (which has no place for it) ----
DRAFT_VOCAB_FILE = "draft_vocab.json"


def write_draft_vocab(file: str | Path, vocab_map: torch.Tensor, vocab_size: int) -> None:
    """Record the target ids [V'] a drafter proposes from (its lm_head rows), for read_draft_vocab."""
    meta = {"format": FORMAT, "target_vocab_size": vocab_size, "draft_to_target": vocab_map.tolist()}
    Path(file).write_text(json.dumps(meta))


def read_draft_vocab(file: str | Path, vocab_size: int) -> torch.Tensor:
    """The target ids [V'] a drafter proposes from, as write_draft_vocab recorded them."""
    try:
        meta = json.loads(Path(file).read_text())
        ids = torch.tensor(meta["draft_to_target"], dtype=torch.long)
        written_for = meta["target_vocab_size"]
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        raise GumihoError(f"{file}: not a draft vocabulary file ({type(e).__name__}: {e})") from None
    if written_for != vocab_size:
        raise GumihoError(f"{file}: written for a vocabulary of {written_for}, the target has {vocab_size}")
    return check_draft_vocab(ids, vocab_size, f"{file}: draft_to_target")


def check_draft_vocab(ids: torch.Tensor, vocab_size: int, what: str) -> torch.Tensor:
    """ids [V'] as long, if they are distinct target ids in [0, vocab_size); else an error naming `what`."""
    if ids.ndim != 1 or not len(ids) or int(ids.min()) < 0 or int(ids.max()) >= vocab_size \
            or len(ids.unique()) != len(ids):
        raise GumihoError(f"{what} must list distinct target ids in [0, {vocab_size})")
    return ids.long()

"""KV caches: the drafter's own preallocated cache, and compaction of the target's HF cache."""
from __future__ import annotations

import torch
import torch.nn.functional as F


class KVCache:
    """Keys and values of a small decoder stack, batch 1, grown in chunks, cropped in O(1).

    A forward pass calls `reserve(T)`, then `attend(layer, q, k, v, mask)` once per layer (each layer writes
    slots [length, length + T) and sees [0, length + T)), then `advance(T)`.
    """

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device, chunk: int = 256):
        self.n_layers, self.kv_heads, self.head_dim, self.chunk = n_layers, kv_heads, head_dim, chunk
        self.length = 0
        self._k = [torch.empty(1, kv_heads, 0, head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
        self._v = [torch.empty_like(k) for k in self._k]

    @property
    def capacity(self) -> int:
        return self._k[0].shape[2]

    def reserve(self, extra: int) -> None:
        need = self.length + extra
        if need <= self.capacity:
            return
        new_cap = ((need + self.chunk - 1) // self.chunk) * self.chunk
        for store in (self._k, self._v):
            for i, old in enumerate(store):
                grown = old.new_empty(1, self.kv_heads, new_cap, self.head_dim)
                grown[:, :, : self.length] = old[:, :, : self.length]
                store[i] = grown

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T = k.shape[2]
        end = self.length + T
        self._k[layer][:, :, self.length : end] = k
        self._v[layer][:, :, self.length : end] = v
        return self._k[layer][:, :, :end], self._v[layer][:, :, :end]

    def attend(self, layer: int, q, k, v, mask) -> torch.Tensor:
        """Store this layer's new keys and values, and attend to everything stored. mask [B, 1, T, S]."""
        k, v = self.update(layer, k, v)  # [1, kvh, S, hd]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[1])

    def advance(self, T: int) -> None:
        self.length += T

    def crop(self, length: int) -> None:
        assert 0 <= length <= self.length, f"cannot crop a cache of length {self.length} to {length}"
        self.length = length


def keep_accepted(cache, past_len: int, accepted) -> None:
    """Compact an HF DynamicCache after verification.

    The cache holds past_len context entries followed by one entry per tree node. Keep the context
    and, in consecutive slots after it, the entries of the accepted nodes (`accepted` are node
    indices, root first: a tensor, or host ints); drop the rest. Given host ints, the accepted nodes
    already in place (the root, and node i at slot i) are not copied.
    """
    if isinstance(accepted, torch.Tensor):
        m, moves = accepted.numel(), _Moves(accepted + past_len, past_len)
    else:
        m, start = len(accepted), _in_place(accepted)
        moves = _Moves([a + past_len for a in accepted[start:]], past_len + start) if start < m else None
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name)  # [B, kv_heads, past_len + n, head_dim]; layers may sit on several GPUs
            kept = t[:, :, : past_len + m]
            if moves is not None:  # the gather reads before the copy writes, so overlapping slots are safe
                src, dst = moves.on(t.device)
                kept.index_copy_(2, dst, t.index_select(2, src))
            setattr(layer, name, kept)


class _Moves:
    """Cache slots to gather (src) and where they go (dst, consecutive from `first`), made once per device."""

    def __init__(self, src, first: int):
        self.src, self.first, self._on = src, first, {}

    def on(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._on:
            src = torch.as_tensor(self.src, dtype=torch.long, device=device)  # [k]
            self._on[device] = src, torch.arange(self.first, self.first + src.numel(), device=device)
        return self._on[device]


def _in_place(accepted) -> int:
    """How many accepted nodes, from the root on, already sit in their final slot (node i at slot i)."""
    start = 0
    while start < len(accepted) and accepted[start] == start:
        start += 1
    return start


def crop_cache(cache, length: int) -> None:
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, :length]
        layer.values = layer.values[:, :, :length]

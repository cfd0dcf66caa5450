"""KV caches: the drafter's own preallocated cache, and compaction of the target's HF cache."""
from __future__ import annotations

import torch


class KVCache:
    """Keys and values of a small decoder stack, batch 1, grown in chunks, cropped in O(1).

    A forward pass calls `reserve(T)`, then `update(layer, k, v)` once per layer (each layer writes
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

    def advance(self, T: int) -> None:
        self.length += T

    def crop(self, length: int) -> None:
        assert 0 <= length <= self.length, f"cannot crop a cache of length {self.length} to {length}"
        self.length = length


def keep_accepted(cache, past_len: int, accepted: torch.Tensor) -> None:
    """Compact an HF DynamicCache after verification.

    The cache holds past_len context entries followed by one entry per tree node. Keep the context
    and, in consecutive slots after it, the entries of the accepted nodes (`accepted` are node
    indices, root first); drop the rest.
    """
    src = accepted + past_len  # [m]
    m = accepted.numel()
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name)  # [B, kv_heads, past_len + n, head_dim]; layers may sit on several GPUs
            t[:, :, past_len : past_len + m] = t[:, :, src.to(t.device)]  # advanced indexing copies first
            setattr(layer, name, t[:, :, : past_len + m])


def crop_cache(cache, length: int) -> None:
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, :length]
        layer.values = layer.values[:, :, :length]

"""Frozen, validated settings. Every default lives here and only here."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from .errors import GumihoError

METHODS = ("gumiho", "serial", "ar")
TREE_MODES = ("gumiho", "serial")
MAX_TREE_TOKENS = 1024  # a sanity bound; the context length is checked per session


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise GumihoError(message)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class TreeConfig:
    """Shape of the draft tree. Defaults are the Gumiho authors' (GUMIHO.md).

    mode:         "gumiho" (serial head for depths 1-2, MLP heads after) or "serial" (serial head at every depth).
    top_k:        children kept per expanded node, and nodes expanded per serial level.
    mlp_topk:     tokens per MLP-head distribution entering the beam.
    pruning:      beam width at each MLP level.
    total_tokens: nodes verified per step, root included.
    depth:        deepest draft level (2 serial + up to 5 MLP heads in gumiho mode).
    """

    mode: str = "gumiho"
    top_k: int = 14
    mlp_topk: int = 35
    pruning: int = 35
    total_tokens: int = 64
    depth: int = 7

    def __post_init__(self):
        _check(self.mode in TREE_MODES, f"tree mode must be one of {', '.join(TREE_MODES)}; got {self.mode!r}")
        for name in ("top_k", "mlp_topk", "pruning", "depth"):
            value = getattr(self, name)
            _check(_is_int(value) and value >= 1, f"{name} must be an integer >= 1; got {value!r}")
        _check(
            _is_int(self.total_tokens) and 2 <= self.total_tokens <= MAX_TREE_TOKENS,
            f"total_tokens must be an integer in [2, {MAX_TREE_TOKENS}] (root included); got {self.total_tokens!r}",
        )

    def with_(self, **changes) -> "TreeConfig":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode: length, randomness and stopping."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop_on_eos: bool = True

    def __post_init__(self):
        _check(
            _is_int(self.max_new_tokens) and self.max_new_tokens >= 1,
            f"max_new_tokens must be an integer >= 1; got {self.max_new_tokens!r}",
        )
        _check(
            isinstance(self.temperature, (int, float)) and 0 <= self.temperature <= 100,
            f"temperature must be a number in [0, 100] (0 = greedy); got {self.temperature!r}",
        )
        _check(
            isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1,
            f"top_p must be a number in (0, 1]; got {self.top_p!r}",
        )
        _check(_is_int(self.seed) and self.seed >= 0, f"seed must be an integer >= 0; got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def check_method(method: str) -> str:
    _check(method in METHODS, f"method must be one of {', '.join(METHODS)}; got {method!r}")
    return method

"""Exactness of real runs: is a run token-identical to plain decoding, and where it is not, why.

At temperature 0 both runs emit the target's argmax at every position. In fp32 a tree pass and a one-token
pass agree to about 1e-6, and the outputs are identical. In bf16 or fp16 they round differently (other matmul
shapes and kernels; keys and values computed in another pass), by up to the dtype's own error. Where the
target's two best tokens are closer than that error, the two runs may pick different ones, and from there on
they continue from different texts. `first_divergence` tells such a rounding near-tie from a real error: it
recomputes the logits up to the first difference in fp32 arithmetic (the same weights, a float32 copy) and
compares the two tokens' fp32 gap with how far the dtype's own logits stray from fp32 on that prefix.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from .target import Target


@dataclass(frozen=True)
class Divergence:
    position: int  # index into the new tokens of the first difference
    plain_token: int
    other_token: int
    fp32_gap: float  # |logit(plain_token) - logit(other_token)| in fp32 arithmetic at that position
    noise: float  # largest |logit - fp32 logit| of the target's own dtype over the prefix

    @property
    def near_tie(self) -> bool:
        """Two runs whose logits each stray from fp32 by at most `noise` (as the dtype's own full pass over the prefix
        does) can order two tokens differently only when the tokens' fp32 gap is within 2 * noise."""
        return self.fp32_gap <= 2 * self.noise

    def to_dict(self) -> dict:
        return {"position": self.position, "plain_token": self.plain_token, "other_token": self.other_token,
                "fp32_gap": round(self.fp32_gap, 5), "noise": round(self.noise, 5), "near_tie": self.near_tie}


def first_difference(plain, other) -> int | None:
    """Index of the first token where two outputs differ, over their common length; None if none does."""
    return next((i for i, (a, b) in enumerate(zip(plain, other)) if a != b), None)


@torch.inference_mode()
def first_divergence(target: Target, prompt_ids, plain, other) -> Divergence | None:
    """None if `other` equals `plain` (new tokens of the same prompt) over their common length, else the diagnosis.

    Runs the prefix through the target and, for a bf16/fp16 target, a float32 copy of it (4 bytes per parameter).
    """
    i = first_difference(plain, other)
    if i is None:
        return None
    n = len(prompt_ids)
    seq = torch.tensor([list(prompt_ids) + list(plain[:i])], device=target.device)
    own = target.model(input_ids=seq).logits[0, n - 1:].float()  # [i + 1, V]: the logits before new tokens 0..i
    fp32 = target.model if target.dtype == torch.float32 else copy.deepcopy(target.model).float()
    ref = fp32(input_ids=seq).logits[0, n - 1:].float()
    a, b = int(plain[i]), int(other[i])
    return Divergence(i, a, b, float((ref[i, a] - ref[i, b]).abs()), float((own - ref).abs().max()))

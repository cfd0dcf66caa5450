"""Which fused attention kernels the two models may use on a GPU: every kernel but cuDNN's.

PyTorch (2.10 and later with cuDNN 9.15 or later, on sm90/sm100: the H100, the H200, Blackwell) tries cuDNN's
fused attention first. cuDNN builds an execution graph for each new shape of q, k and v and caches it. Decoding
meets a new key length at every step (the context grows), and training a new padded batch shape at many
micro-steps, so each would pay a graph build where the kernel itself takes microseconds. The other fused
kernels (flash, memory-efficient) need no per-shape build; the math kernel stays allowed as the fallback for
whatever those two refuse. On a CPU this changes nothing: cuDNN is a GPU library. On an H200, steps over new
shapes had taken about twice those over shapes met before (docs/performance.md, the H200's table).
"""
from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPE_STABLE = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_kernels(device: torch.device) -> contextlib.AbstractContextManager:
    """Inside: the models' scaled_dot_product_attention calls on `device` leave cuDNN's kernel out."""
    return sdpa_kernel(SHAPE_STABLE) if device.type == "cuda" else contextlib.nullcontext()

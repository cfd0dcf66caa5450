"""On a GPU the models' attention leaves cuDNN's kernel out (gumiho_core/attention.py: cuDNN builds a graph per
new shape, and decoding meets a new key length at every step). Checked here on the CPU by pretending to be a GPU."""
import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from gumiho_core import DecodeConfig, TreeConfig, drafter as drafter_module, generate, start, target as target_module
from gumiho_core.attention import SHAPE_STABLE, attention_kernels
from tiny import random_drafter, tiny_target


def test_a_gpu_gets_every_kernel_but_cudnns_and_a_cpu_keeps_its_settings():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with attention_kernels(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()  # the fallback for masks the fused kernels refuse
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with attention_kernels(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before


@pytest.mark.parametrize("on_gpu", [True, False])  # False: the control, the spy sees cuDNN allowed
def test_every_attention_call_of_a_decode_runs_inside(monkeypatch, on_gpu):
    if on_gpu:  # what attention_kernels does for a CUDA tensor, for the CPU tensors of this test
        pretend = lambda device: sdpa_kernel(SHAPE_STABLE)  # noqa: E731
    else:
        pretend = lambda device: contextlib.nullcontext()  # noqa: E731
    monkeypatch.setattr(target_module, "attention_kernels", pretend)
    monkeypatch.setattr(drafter_module, "attention_kernels", pretend)
    seen, sdpa = [], F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    target = tiny_target()
    session = start("gumiho", target, [1, 2, 3], DecodeConfig(max_new_tokens=6), TreeConfig(total_tokens=8),
                    random_drafter(target))
    generate(session)
    layers = target.config.num_hidden_layers
    assert len(seen) > 2 * layers  # the target's prefill and a verification, and the drafter's serial layers
    assert not any(seen) if on_gpu else all(seen)

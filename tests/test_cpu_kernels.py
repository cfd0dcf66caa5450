"""Packed oneDNN linear layers (cpu_kernels.py): same numbers as nn.Linear to fp32 rounding, switchable."""
import pytest
import torch

from gumiho_core import cpu_kernels
from gumiho_core.cpu_kernels import stock_kernels
from tiny import tiny_target

pytestmark = pytest.mark.skipif(not cpu_kernels.available(), reason="this torch build has no oneDNN linear")


def test_target_layers_are_packed_and_match_the_stock_path():
    target = tiny_target(seed=3)
    assert target.packed_linears > 0
    ids, pos = torch.tensor([5, 9, 2, 7]), torch.arange(4)

    def run():
        with torch.inference_mode(), torch.profiler.profile() as prof:
            out = target.logits(target.forward(ids, pos, None, target.new_cache()))
        return out, {e.key for e in prof.key_averages()}

    fast, fast_ops = run()
    with stock_kernels():
        stock, stock_ops = run()
    assert "mkldnn::_linear_pointwise" in fast_ops and "mkldnn::_linear_pointwise" not in stock_ops
    torch.testing.assert_close(fast, stock, rtol=1e-4, atol=1e-4)


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("GUMIHO_CPU_KERNELS", "0")
    assert tiny_target(seed=3).packed_linears == 0


def test_gradients_take_the_stock_path():
    target = tiny_target(seed=3)
    layer = target.lm_head
    x = torch.randn(3, layer.in_features, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0

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


def _ops(fn):
    with torch.inference_mode(), torch.profiler.profile() as prof:
        out = fn()
    return out, {e.key for e in prof.key_averages()}


def test_one_row_takes_the_path_measured_faster(monkeypatch, caplog):
    """Plain decoding's one-row matmuls take the stock path where a probe found it faster, trees still packed;
    the probe times every layer both ways and records what it found."""
    target = tiny_target(seed=3)
    ids, pos = torch.tensor([5, 9, 2, 7]), torch.arange(4)
    monkeypatch.setitem(cpu_kernels._ONE_ROW, "stock", True)
    one, one_ops = _ops(lambda: target.logits(target.forward(ids[:1], pos[:1], None, target.new_cache())))
    _, many_ops = _ops(lambda: target.logits(target.forward(ids, pos, None, target.new_cache())))
    assert "mkldnn::_linear_pointwise" not in one_ops and "mkldnn::_linear_pointwise" in many_ops
    monkeypatch.setitem(cpu_kernels._ONE_ROW, "stock", False)
    packed, packed_ops = _ops(lambda: target.logits(target.forward(ids[:1], pos[:1], None, target.new_cache())))
    assert "mkldnn::_linear_pointwise" in packed_ops
    torch.testing.assert_close(one, packed, rtol=1e-4, atol=1e-4)
    linears = [m for m in target.model.modules() if hasattr(m, "_gumiho_packed")]
    monkeypatch.setitem(cpu_kernels._ONE_ROW, "decided", False)
    with caplog.at_level("INFO", logger="gumiho_core.cpu_kernels"):
        cpu_kernels._decide_one_row(linears, rounds=1)
    assert cpu_kernels._ONE_ROW["decided"]
    assert f"one row through {len(linears)} layers: packed " in caplog.text, caplog.text


def test_speculation_stays_exact_with_one_row_stock(monkeypatch):
    """Plain decoding on the stock one-row path, verification packed: still the same tokens."""
    from gumiho_core import DecodeConfig, generate, start
    from tiny import random_drafter
    monkeypatch.setitem(cpu_kernels._ONE_ROW, "stock", True)
    target = tiny_target(seed=4, scale=4.0)
    drafter = random_drafter(target, seed=2)
    prompt = [3, 14, 15, 92, 6]
    plain = generate(start("ar", target, prompt, DecodeConfig(max_new_tokens=40))).token_ids
    for method in ("gumiho", "gumiho-serial"):
        assert generate(start(method, target, prompt, DecodeConfig(max_new_tokens=40), drafter=drafter)).token_ids \
            == plain, method


@pytest.mark.skipif(not cpu_kernels.packable(torch.bfloat16), reason="oneDNN runs no bf16 matmuls on this CPU")
def test_a_bf16_drafter_is_packed_to_bf16_rounding_and_stays_exact(monkeypatch):
    """A bf16 drafter (what a CPU with native bf16 gets) runs its layers and draft head packed. Each matmul equals
    the stock bf16 one to bf16 rounding (at one row the stock path's gemv sums in another order, so a few outputs
    differ in their last bit; the trees may then differ where two scores tie that closely), and the output is
    plain decoding's. The target is left unpacked: every oneDNN matmul seen is the drafter's."""
    from gumiho_core import DecodeConfig, generate, start
    from gumiho_core.target import SharedWeights
    from tiny import random_drafter
    monkeypatch.setenv("GUMIHO_CPU_KERNELS", "0")
    target = tiny_target(seed=4, scale=4.0)
    monkeypatch.delenv("GUMIHO_CPU_KERNELS")
    drafter = random_drafter(target, seed=2)
    shared = target.shared_weights()
    drafter.bind(SharedWeights(shared.embed, shared.lm_head.bfloat16()))
    drafter = drafter.to(torch.bfloat16)
    calls, linear = [], cpu_kernels.PackedCopy.linear

    def compared(self, x, weight, bias=None):
        y = linear(self, x, weight, bias)
        with stock_kernels():
            calls.append((tuple(x.shape), y, linear(self, x, weight, bias)))
        return y
    with monkeypatch.context() as m:
        m.setattr(cpu_kernels.PackedCopy, "linear", compared)
        with torch.profiler.profile() as prof:
            run = generate(start("gumiho", target, [3, 14, 15, 92, 6], DecodeConfig(max_new_tokens=40),
                                 drafter=drafter))
    assert target.packed_linears == 0 and "mkldnn::_linear_pointwise" in {e.key for e in prof.key_averages()}
    assert {shape[-2] for shape, _, _ in calls} >= {1, 14}, "one-row and tree-level matmuls both seen"
    for shape, packed, stock in calls:
        torch.testing.assert_close(packed, stock, rtol=2 ** -7, atol=1e-5, msg=lambda m: f"{shape}: {m}")
    assert run.token_ids == generate(start("ar", target, [3, 14, 15, 92, 6], DecodeConfig(max_new_tokens=40))).token_ids


half_only = pytest.mark.skipif(not cpu_kernels.half_weights_available(), reason="no fbgemm fp16-weight kernel here")


def _pair(seed=2):
    """A tiny target and a random fp32 drafter for it, and 14 rows of drafter inputs."""
    from tiny import random_drafter
    target = tiny_target(seed=4, scale=4.0)
    return target, random_drafter(target, seed=seed, std=0.08), torch.randn(14, target.config.hidden_size)


@half_only
def test_decoding_reads_the_drafters_weights_as_fp16_and_training_as_fp32():
    """While decoding (inference mode) a drafter layer and its draft head compute x @ fp16(W) + b in fp32 arithmetic;
    under no_grad (training's targets and held-out loss) they compute with the fp32 weights, as before."""
    _, drafter, x = _pair()
    layer = drafter.layers[0].mlp.gate_proj
    w16 = layer.weight.detach().half().float()
    assert not torch.equal(w16, layer.weight), "random fp32 weights: fp16 rounding must show"
    decoding, decoding_ops = _ops(lambda: (layer(x), drafter.logits(x)))
    assert "quantized::linear_dynamic_fp16" in decoding_ops
    torch.testing.assert_close(decoding[0], x @ w16.T, rtol=1e-5, atol=1e-5)
    head16 = drafter.shared.lm_head.half().float()
    torch.testing.assert_close(decoding[1], x @ head16.T, rtol=1e-5, atol=1e-5)
    with torch.no_grad(), torch.profiler.profile() as prof:
        training = layer(x), drafter.logits(x)
    assert "quantized::linear_dynamic_fp16" not in {e.key for e in prof.key_averages()}
    torch.testing.assert_close(training[0], x @ layer.weight.detach().T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(training[1], x @ drafter.shared.lm_head.T, rtol=1e-5, atol=1e-5)


@half_only
def test_fp16_copy_follows_weight_and_bias_changes_and_keeps_fp32_beyond_fp16_range():
    _, drafter, x = _pair()
    layer = drafter.fc  # has a bias
    x = torch.randn(5, layer.in_features)
    with torch.inference_mode():
        layer(x)  # packed
    with torch.no_grad():
        layer.weight.mul_(-2.0)  # an optimizer step changes weights in place
        layer.bias.add_(1.0)
    want = x @ layer.weight.detach().half().float().T + layer.bias.detach()
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        layer.weight[0, 0] = 1e6  # beyond fp16: that weight stays fp32, the layer with it
    (y,), ops = _ops(lambda: (layer(x),))
    assert "quantized::linear_dynamic_fp16" not in ops
    torch.testing.assert_close(y, x @ layer.weight.detach().T + layer.bias.detach(), rtol=1e-5, atol=1e-3)


@half_only
def test_a_session_packs_its_drafter_before_its_first_step_and_stays_exact():
    """Starting a session packs the drafter (packing reads each weight's range into Python, which a decoding step
    must not do: tests/test_step_overhead.py counts); the output is plain decoding's."""
    from gumiho_core import DecodeConfig, generate, start
    target, drafter, _ = _pair(seed=3)
    copies = [m._gumiho_copy for m in drafter.modules() if hasattr(m, "_gumiho_copy")] + [drafter._head_copy]
    session = start("gumiho", target, [3, 14, 15, 92, 6], DecodeConfig(max_new_tokens=40), drafter=drafter)
    assert all("half" in c._copies for c in copies), "every drafter weight packed as fp16 at the session's start"
    plain = generate(start("ar", target, [3, 14, 15, 92, 6], DecodeConfig(max_new_tokens=40))).token_ids
    assert generate(session).token_ids == plain

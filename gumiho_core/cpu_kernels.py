"""Faster linear layers on a CPU: oneDNN matmuls with weights packed once (fp32, and bf16 where oneDNN has it).

A stock `nn.Linear` on a CPU hands every call to a BLAS that re-packs the weight for each matmul.
For one token that path is a matrix-vector product and cheap enough; for the 2-64 tokens of a draft
tree it costs a full re-pack of every weight, so verifying a few tokens cost far more than one. Weights packed
once for oneDNN make a small tree cost about what one token does (docs/performance.md). The auto tree's
measurement (measure/costs.py, cached per device) records this curve; GUMIHO_CPU_KERNELS=0 gives the stock one.

`pack_linears(model)` gives each CPU fp32 `nn.Linear` of the model a packed copy of its weight and a
forward that uses it. The module's own weight stays (the embedding may be tied to it, and the
`stock_kernels()` context turns the packed path off, which the benchmark uses for the `hf` methods:
stock transformers as a user would run it). Results equal the stock path to fp32 rounding, like
any change of matmul blocking; exactness of speculative decoding does not depend on it, because the
plain loop and verification run through the same layers.

Off with GUMIHO_CPU_KERNELS=0. Models whose linear weights exceed 4 GiB are not packed (the copy would
double their memory).

bf16 weights (the drafter on a CPU with native bf16, models.drafter_dtype) are packed too where oneDNN runs
bf16 (`torch.ops.mkldnn._is_mkldnn_bf16_supported()`): about twice as fast at a tree level's row counts. Outputs
equal the stock bf16 matmul's to bf16 rounding (at one row the stock gemv sums in another order, so a few outputs
differ in their last bit).

One row (plain decoding's every step) is another matter, and which path wins depends on the CPU (on an AVX2
EPYC the stock path, on an AMX Xeon the packed one). So the first packed model large enough to stream from memory
times one row of all its layers both ways (about a second, once per process) and one-row matmuls take the faster
path from then on (`one_row_stock`; the drafter's too where it does not read fp16 weights, below). Plain decoding
is the baseline every speed-up is measured against; it must not run on the slower kernel.

The drafter's fp32 matmuls while decoding (inference mode) keep their weights in fp16 where fbgemm has its
fp16-weight kernel (x86 CPUs with AVX2 and F16C: `half_weights_available`): the weights are read as fp16 and
widened, the activations and the sums stay fp32. A draft tree reads every weight once or more and is bound by
memory bandwidth, so half the bytes is faster (docs/performance.md, "What a step costs outside the models"). The
shipped heads are stored in fp16, so their weights lose nothing; the draft head (the target's lm_head rows) is rounded to fp16 (relative error at
most 2**-11; a native-bf16 CPU runs the whole drafter in bf16, 8x coarser). The output stays exact whatever the
drafter computes: the target verifies every token. Training (autograd, or no_grad for its targets and held-out
loss) keeps the fp32 weights.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import types

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)
MAX_PACKED_BYTES = 4 << 30
BATCH_HINT = 16  # tokens per matmul the packing is tuned for (tree sizes on a CPU: 4-32)
ONE_ROW_PROBE_BYTES = 64 << 20  # models whose linear weights stream from memory, not cache, decide the one-row path
FP16_MAX = 65504.0  # the largest finite fp16: a weight beyond it keeps the fp32 path
HOST = torch.device("cpu")  # the packed copies live in host memory (a numbered "cpu:1" is tests' simulated GPU)
_state = threading.local()
_ONE_ROW = {"stock": False, "decided": False}  # process-wide: does a one-row matmul take the stock path?


def available() -> bool:
    ops = getattr(torch.ops, "mkldnn", None)
    return (torch.backends.mkldnn.is_available() and ops is not None
            and hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise"))


def enabled() -> bool:
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def stock_kernels():
    """Within this block (this thread) packed layers run the stock nn.Linear path."""
    before = enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = before


def one_row_stock() -> bool:
    """Whether one-row matmuls take the stock path here (measured on the first large packed model; see above)."""
    return _ONE_ROW["stock"]


def _one_row(x: torch.Tensor) -> bool:
    """A one-row fp32 matmul where the probe found the stock path faster (the probe times fp32 only; bf16 packed
    was faster at one row too on the AMX machine above)."""
    return _ONE_ROW["stock"] and x.dtype == torch.float32 and x.numel() == x.shape[-1]


def _packed_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if not usable(x, self.weight) or _one_row(x):
        return F.linear(x, self.weight, self.bias)
    return packed_linear(x, self._gumiho_packed, self.bias)


def packable(dtype: torch.dtype) -> bool:
    """Whether oneDNN runs packed matmuls in this dtype here: fp32 always, bf16 where the CPU supports it."""
    if dtype == torch.float32:
        return True
    return dtype == torch.bfloat16 and _bf16_supported()


def _bf16_supported() -> bool:
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check is not None and check())


def usable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether x @ weight.T may take the packed path here: on, a packable dtype on a CPU, no gradient to track."""
    return (enabled() and x.device == HOST and x.dtype == weight.dtype and packable(x.dtype)
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)))


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., d_in] times a weight packed by pack_weight -> [..., d_out]."""
    lead = x.shape[:-1]
    y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), packed, bias, "none", [], "")
    return y.reshape(*lead, y.shape[-1])


def pack_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """A packed copy of one CPU weight [d_out, d_in] (fp32, or bf16 where packable), or None where packing does
    not apply."""
    if (os.environ.get("GUMIHO_CPU_KERNELS", "1") == "0" or not available() or weight.device != HOST
            or not packable(weight.dtype) or weight.numel() * weight.element_size() > MAX_PACKED_BYTES):
        return None
    try:
        with torch.no_grad():
            return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), BATCH_HINT)
    except RuntimeError as e:
        log.info("oneDNN packing unavailable (%s); stock linear layer", e)
        return None


def _stamp(weight: torch.Tensor | None) -> tuple | None:
    """What changes when a weight does: its tensor, its storage, its in-place version (an optimizer step)."""
    if weight is None:
        return None
    try:
        version = weight._version
    except RuntimeError:  # an inference-mode tensor tracks no version, and cannot be changed outside that mode
        version = None
    return id(weight), weight.data_ptr(), version


def half_weights_available() -> bool:
    """Whether fbgemm's matmul with fp16 weights and fp32 arithmetic runs here (x86 CPUs with AVX2 and F16C)."""
    return (os.environ.get("GUMIHO_CPU_KERNELS", "1") != "0" and "fbgemm" in torch.backends.quantized.supported_engines
            and hasattr(torch.ops.quantized, "linear_prepack_fp16"))


def pack_half(weight: torch.Tensor, bias: torch.Tensor | None) -> object | None:
    """fbgemm's packed fp16 copy of a CPU fp32 weight [d_out, d_in] with its fp32 bias, or None where it does not
    apply (no such kernel here, another device or dtype, or a weight beyond fp16's range)."""
    if (not half_weights_available() or weight.device != HOST or weight.dtype != torch.float32
            or weight.numel() * 2 > MAX_PACKED_BYTES):
        return None
    if not bool(weight.detach().abs().max() <= FP16_MAX):  # also refuses inf and nan
        return None
    b = None if bias is None else bias.detach().float().contiguous()
    return torch.ops.quantized.linear_prepack_fp16(weight.detach().contiguous(), b)


def half_linear(x: torch.Tensor, packed: object) -> torch.Tensor:
    """x [..., d_in] fp32 times a weight packed by pack_half (its bias included) -> [..., d_out] fp32."""
    if x.dim() > 1:  # the op takes any leading shape but one; a reshape would cost two ops per matmul
        return torch.ops.quantized.linear_dynamic_fp16(x, packed)
    return torch.ops.quantized.linear_dynamic_fp16(x[None], packed)[0]


class PackedCopy:
    """The packed copy of one weight that may change (a drafter's, which training updates): made at the first
    call that may use it, and made again after the weight changed (updated in place, or replaced).

    half: in inference mode an fp32 call reads the weight as fp16 (pack_half), where that kernel runs here; other
    calls (training's, with or without gradients) take the fp32 oneDNN copy. Each kind is packed when first used,
    or ahead by `prepare` (packing reads the weight's range into Python: not inside a decoding step).
    """

    def __init__(self, half: bool = False):
        self.half = half and half_weights_available()  # decided once: no fp16 kernel here, no fp16 copy tried
        self._copies: dict[str, tuple] = {}  # kind -> (stamp of what it was packed from, packed copy or None)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if usable(x, weight):
            if self.half and x.dtype == torch.float32 and torch.is_inference_mode_enabled():
                packed = self._half(weight, bias)
                if packed is not None:
                    return half_linear(x, packed)
            if not _one_row(x):
                packed = self._packed(weight)
                if packed is not None:
                    return packed_linear(x, packed, bias)
        return F.linear(x, weight, bias)

    def prepare(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Pack now the copy that decoding will use: the fp16 one where it applies, else the oneDNN one."""
        if not (self.half and weight.dtype == torch.float32 and self._half(weight, bias) is not None):
            self._packed(weight)

    def _half(self, weight: torch.Tensor, bias: torch.Tensor | None):
        return self._copy("half", (_stamp(weight), _stamp(bias)), lambda: pack_half(weight, bias))

    def _packed(self, weight: torch.Tensor):
        return self._copy("packed", _stamp(weight), lambda: pack_weight(weight))

    def _copy(self, kind: str, stamp: tuple, pack):
        made = self._copies.get(kind)
        if made is None or made[0] != stamp:
            made = self._copies[kind] = (stamp, pack())
        return made[1]


def _following_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return self._gumiho_copy.linear(x, self.weight, self.bias)


def follow_linears(model: nn.Module, half: bool = False) -> int:
    """Give every nn.Linear of `model` a PackedCopy of its weight (packed when first used, re-packed after a
    change; `half` as PackedCopy takes it), for models whose weights may change; returns how many. Nothing is
    packed until a CPU call that may use it."""
    if os.environ.get("GUMIHO_CPU_KERNELS", "1") == "0" or not (available() or half_weights_available()):
        return 0
    linears = [m for m in model.modules() if isinstance(m, nn.Linear) and not hasattr(m, "_gumiho_copy")]
    for m in linears:
        m._gumiho_copy = PackedCopy(half)
        m.forward = types.MethodType(_following_forward, m)
    return len(linears)


def prepare_linears(model: nn.Module) -> None:
    """Pack now, for decoding, every copy follow_linears gave `model`'s linear layers (PackedCopy.prepare)."""
    for m in model.modules():
        if hasattr(m, "_gumiho_copy"):
            m._gumiho_copy.prepare(m.weight, m.bias)


def pack_linears(model: nn.Module) -> int:
    """Pack every CPU fp32 nn.Linear of `model` once; returns how many were packed (0 when not applicable)."""
    if os.environ.get("GUMIHO_CPU_KERNELS", "1") == "0" or not available():
        return 0
    linears = [m for m in model.modules() if isinstance(m, nn.Linear) and m.weight.device.type == "cpu"
               and m.weight.dtype == torch.float32 and not hasattr(m, "_gumiho_packed")]
    size = sum(m.weight.numel() * 4 for m in linears)
    if not linears or size > MAX_PACKED_BYTES:
        return 0
    try:
        with torch.no_grad():
            packed = [torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), BATCH_HINT) for m in linears]
    except RuntimeError as e:  # an unusual shape or a build without the op: keep the stock path
        log.info("oneDNN packing unavailable (%s); stock linear layers", e)
        return 0
    for m, w in zip(linears, packed):
        m._gumiho_packed = w
        m.forward = types.MethodType(_packed_forward, m)
    log.info("packed %d linear layers for oneDNN (%.0f MB)", len(linears), size / 2**20)
    if size >= ONE_ROW_PROBE_BYTES and not _ONE_ROW["decided"]:
        _decide_one_row(linears)
    return len(linears)


def _decide_one_row(linears: list[nn.Linear], rounds: int = 3) -> None:
    """Time one row through every layer, packed and stock, alternating; the faster takes one-row matmuls."""
    xs = [torch.zeros(1, m.in_features) for m in linears]

    def once(stock: bool) -> float:
        t0 = time.perf_counter()
        for m, x in zip(linears, xs):
            F.linear(x, m.weight, m.bias) if stock else packed_linear(x, m._gumiho_packed, m.bias)
        return time.perf_counter() - t0
    best = {False: float("inf"), True: float("inf")}
    with torch.inference_mode():
        for _ in range(rounds):
            for stock in best:
                best[stock] = min(best[stock], once(stock))
    _ONE_ROW.update(stock=best[True] < best[False], decided=True)
    log.info("one row through %d layers: packed %.1f ms, stock %.1f ms; one-row matmuls take the %s path",
             len(linears), 1000 * best[False], 1000 * best[True], "stock" if _ONE_ROW["stock"] else "packed")

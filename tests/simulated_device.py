"""A simulated accelerator on a CPU: the placement rules of CUDA, checked without a GPU.

Tensors "on the accelerator" are of the subclass `OnDevice` and report `device` "cpu:1" (or "cpu:2", ... for a
device map); their arithmetic runs on the CPU as usual. Under `SimulatedDevices`, a torch function mode:
- a tensor made with device="cpu:k" (factories, .to, *_like, new_*) is on simulated device k;
- an op's result is on its inputs' device; .cpu() and .to("cpu") bring it back to the host;
- an op whose tensor inputs sit on different devices is recorded in `mixed`, as CUDA would raise, except host
  0-dim tensors (CUDA accepts CPU scalars) and host index tensors of t[...] and t[...] = v;
- an op mixing floating dtypes (beyond a 0-dim scalar) is recorded in `promoted`.
Each record names the op and the file:line that called it.
"""
from __future__ import annotations

import sys

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map_only

HOST = torch.device("cpu")
INDEXING = (torch.Tensor.__getitem__, torch.Tensor.__setitem__)
UNTRACKED = (torch.Tensor.dim, torch.Tensor.size, torch.Tensor.numel, torch.Tensor.tolist, torch.Tensor.item,
             torch.Tensor.__len__, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
             torch.Tensor.__index__, torch.Tensor.__format__, torch.Tensor.__repr__)


class OnDevice(torch.Tensor):
    sim_index = 1  # which simulated device; set per tensor by `place_tensor`

    @property
    def device(self) -> torch.device:
        return torch.device("cpu", self.sim_index)

    __torch_function__ = torch._C._disabled_torch_function_impl  # SimulatedDevices decides placement


def device_of(t: torch.Tensor) -> torch.device:
    return t.device if isinstance(t, OnDevice) else HOST


def place_tensor(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.index is None:
        return t.as_subclass(torch.Tensor)
    out = t.as_subclass(OnDevice)
    out.sim_index = device.index
    return out


def place_module(module: nn.Module, device: torch.device) -> nn.Module:
    """Move every parameter and buffer of `module` to a simulated device (in place, values unchanged)."""
    for sub in module.modules():
        for name, p in sub._parameters.items():
            if p is not None:
                sub._parameters[name] = place_tensor(p.detach(), device)  # inference only: no Parameter needed
        for name, b in sub._buffers.items():
            if b is not None:
                sub._buffers[name] = place_tensor(b, device)
    return module


def _requested(func, args, kwargs) -> torch.device | None:
    """The device a call asks for explicitly, if any."""
    if func is torch.Tensor.cpu:
        return HOST
    wanted = kwargs.get("device")
    if wanted is None and func is torch.Tensor.to:
        wanted = next((a for a in args[1:] if isinstance(a, (str, torch.device))), None)
        other = next((a for a in args[1:] if isinstance(a, torch.Tensor)), None)
        wanted = device_of(other) if wanted is None and other is not None else wanted
    return None if wanted is None else torch.device(wanted)


def _caller() -> str:
    """file:line of the code that called the torch op (torch's own Python frames skipped)."""
    frame = sys._getframe(3)
    while frame is not None and "/torch/" in frame.f_code.co_filename:
        frame = frame.f_back
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


class SimulatedDevices(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.mixed: list[str] = []
        self.promoted: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in UNTRACKED:
            return func(*args, **kwargs)
        checked = list(args[:1]) + list(args[2:]) if func in INDEXING else list(args)
        tensors = [t for t in tree_flatten((checked, kwargs))[0] if isinstance(t, torch.Tensor)]
        self._check(func, [t for t in tensors if isinstance(t, OnDevice) or t.dim() > 0])
        out = func(*args, **kwargs)
        wanted = _requested(func, args, kwargs)
        inputs = {device_of(t) for t in tensors} - {HOST}
        device = wanted if wanted is not None else (inputs.pop() if len(inputs) == 1 else HOST)
        return tree_map_only(torch.Tensor, lambda t: place_tensor(t, device), out)

    def _check(self, func, tensors) -> None:
        name = getattr(func, "__qualname__", str(func))
        if len({device_of(t) for t in tensors}) > 1:
            self.mixed.append(f"{name} at {_caller()}: {sorted({str(device_of(t)) for t in tensors})}")
        floats = {t.dtype for t in tensors if t.is_floating_point()}
        if len(floats) > 1:
            self.promoted.append(f"{name} at {_caller()}: {sorted(str(d) for d in floats)}")

"""Which predictions a batch's loss takes, as index tensors made on the host from the batch's masks.

Every choice that depends on the data is made here, before the batch goes to the device: which pairs count,
which rows the MLP heads run on, which predictions enter the sampled soft cross-entropy. The loss
(objective.py) then only gathers with these indices. On a GPU a boolean mask, a `nonzero` or a value read
into Python waits for the queue to drain; the loss made about forty such waits per micro-batch, so the host
could not queue the next ops while the GPU ran the last ones.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .batch import Batch


@dataclass(frozen=True)
class PartPlan:
    """One prediction of the loss: serial step `step` (1-based) or MLP head `head` (0-based) at the rows `src`
    of its outputs (serial: flattened [B * (T-1)] pairs; heads: LossPlan.head_rows), predicting the target
    features at positions `flat` (b * T + t)."""

    name: str
    step: int  # 0 for an MLP head
    head: int  # -1 for a serial step
    src: torch.Tensor  # [N]
    flat: torch.Tensor  # [N]
    l1_weight: float
    ce_weight: float
    ce: torch.Tensor | None  # [n] which of the N enter the soft cross-entropy; None: the part has no CE


@dataclass(frozen=True)
class LossPlan:
    parts: tuple[PartPlan, ...]
    serial_steps: int  # serial outputs the rollout makes (rollout.serial_outputs)
    head_rows: torch.Tensor  # [R] rows b * L + j of the MLP heads' input [B, L, s*H] that the heads run on
    need: torch.Tensor  # [M] sorted target positions whose distribution the CE needs
    rows: torch.Tensor  # [sum n]: each CE prediction's row of `need`, parts in order
    sizes: tuple[int, ...]  # CE predictions per part with a CE
    tokens: int  # real tokens in the batch (a micro-batch's weight in its step)

    def to(self, device: torch.device) -> LossPlan:
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        parts = tuple(replace(p, src=move(p.src), flat=move(p.flat), ce=move(p.ce)) for p in self.parts)
        return replace(self, parts=parts, head_rows=move(self.head_rows), need=move(self.need), rows=move(self.rows))


def _serial_parts(valid, counts, serial_steps: int, weights) -> list[PartPlan]:
    """Serial step k at pair j predicts f_{j+k}: pairs whose token counts and whose target is real."""
    B, T = valid.shape
    parts = []
    for k in range(1, serial_steps + 1):
        b, j = (counts[:, :T - k] & valid[:, k:]).nonzero(as_tuple=True)
        parts.append(PartPlan("serial" if k == 1 else f"serial{k}", k, -1, b * (T - 1) + j, b * T + j + k,
                              weights.serial_l1, weights.serial_ce, None))
    return parts


def _head_parts(valid, counts, s: int, n_heads: int, weights) -> tuple[list[PartPlan], torch.Tensor]:
    """MLP head m at pair j predicts f_{j+s+1+m}; the heads run once on the rows where head 0 has a target."""
    B, T = valid.shape
    L = max(0, T - 1 - s)
    if not n_heads or L <= 0:
        return [], torch.zeros(0, dtype=torch.long)
    b, j = (counts[:, :L] & valid[:, s + 1:s + 1 + L]).nonzero(as_tuple=True)
    parts = []
    for m in range(n_heads):
        t = j + s + 1 + m
        ok = t < T
        ok[ok.clone()] = valid[b[ok], t[ok]]
        if not ok.any():
            break
        scale = weights.head_decay ** (m + 1) * weights.mlp_scale
        parts.append(PartPlan(f"mlp{m + 1}", 0, m, ok.nonzero()[:, 0], b[ok] * T + t[ok], scale,
                              scale * weights.mlp_ce, None))
    return parts, b * L + j


def loss_plan(batch: Batch, serial_steps: int, s: int, n_heads: int, weights, metrics: bool) -> LossPlan:
    """The plan of `batch` (its masks on the host). serial_steps: serial outputs of the rollout; s: the drafter's
    serial steps (the MLP heads' input width). In training (not metrics) the CE takes a random ce_fraction of the
    positions, drawn from torch's host generator: an unbiased estimate at a fraction of the cost."""
    valid, assistant = batch.valid.cpu(), batch.assistant.cpu()
    counts = valid[:, 1:] & assistant[:, 1:]  # pairs whose token is an answer token
    heads, head_rows = _head_parts(valid, counts, s, n_heads, weights)
    parts = [p for p in _serial_parts(valid, counts, serial_steps, weights) + heads if len(p.flat)]
    keep = None
    if not metrics and weights.ce_fraction < 1:
        keep = torch.rand(valid.numel()) < weights.ce_fraction  # [B*T]
    for i, p in enumerate(parts):
        if p.ce_weight > 0 or metrics:
            parts[i] = replace(p, ce=torch.arange(len(p.flat)) if keep is None else keep[p.flat].nonzero()[:, 0])
    chosen = [p.flat[p.ce] for p in parts if p.ce is not None]
    flat_ce = torch.cat(chosen) if chosen else torch.zeros(0, dtype=torch.long)
    need = flat_ce.unique()  # sorted
    return LossPlan(tuple(parts), serial_steps, head_rows, need, torch.searchsorted(need, flat_ce),
                    tuple(len(c) for c in chosen), int(valid.sum()))

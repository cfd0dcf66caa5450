"""The Gumiho training objective (GUMIHO.md, "Training") over a rollout of the drafter (rollout.py).

Serial step k's output at pair j regresses f_{j+k} and matches its token distribution; MLP head m regresses
f_{j+s+1+m} (s = serial steps). Teacher-forced, step 1 alone covers every serial target.

Loss = sum_k (1.0 L1_serial_k + 0.1 CE_serial_k) + sum_m 0.8^(m+1) (L1_m + w CE_m) / 9.
CE is the soft cross-entropy against the target's own distribution; over a reduced draft
vocabulary both distributions are taken over that subset (the drafter can only propose from it),
which cuts the CPU cost of the 49k-way softmax about six-fold for the default model.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from ..drafter import GumihoDrafter
from .batch import Batch, collate, uniform_noise  # noqa: F401  (collate, uniform_noise: re-exported)
from .rollout import ROLLOUT_FNS, TEACHER_FORCED, Rollout


TOPK_METRIC = 10  # also report whether the target's token is among the drafter's best 10 (what a tree can catch)


@dataclass(frozen=True)
class LossWeights:
    """Weights of the loss's parts; the defaults are the paper's (GUMIHO.md)."""

    serial_l1: float = 1.0
    serial_ce: float = 0.1
    head_decay: float = 0.8
    mlp_ce: float = 0.1  # w
    mlp_ce_from_epoch: int = 2  # w = 0 before this epoch
    mlp_scale: float = 1 / 9
    ce_fraction: float = 1.0  # CE on a random share of positions: an unbiased estimate at a fraction of the cost

    def at_epoch(self, epoch: int, ce_fraction: float = 1.0) -> "LossWeights":
        return replace(self, mlp_ce=self.mlp_ce if epoch >= self.mlp_ce_from_epoch else 0.0, ce_fraction=ce_fraction)


# The objectives `train --objective` offers. "distill" weighs matching the target's own next-token distribution
# (the soft cross-entropy) as much as regressing its features, for every head from the first step.
OBJECTIVES = {
    "paper": LossWeights(),
    "distill": LossWeights(serial_ce=1.0, mlp_ce=1.0, mlp_ce_from_epoch=0),
}


@dataclass(frozen=True)
class Part:
    """One prediction of the loss: features pred [N, H] for the target positions flat [N] (b * T + t)."""

    name: str
    pred: torch.Tensor
    flat: torch.Tensor
    l1_weight: float
    ce_weight: float


def _serial_parts(r: Rollout, batch: Batch, counts: torch.Tensor, weights: LossWeights) -> list[Part]:
    """Serial step k at pair j predicts f_{j+k}: pairs whose token counts and whose target is real."""
    B, T = batch.ids.shape
    parts = []
    for k, o in enumerate(r.serial, 1):
        rows = counts[:, :T - k] & batch.valid[:, k:]  # [B, T-k]
        b, j = rows.nonzero(as_tuple=True)
        parts.append(Part("serial" if k == 1 else f"serial{k}", o[b, j], b * T + j + k, weights.serial_l1,
                          weights.serial_ce))
    return parts


def _head_parts(drafter, r: Rollout, batch: Batch, counts: torch.Tensor, weights: LossWeights,
                n_heads: int) -> list[Part]:
    """MLP head m at pair j predicts f_{j+s+1+m}; the heads run once on the rows where head 0 has a target."""
    s, (B, T) = drafter.cfg.serial_steps, batch.ids.shape
    L = r.heads_in.shape[1]
    if not n_heads or L <= 0:
        return []
    rows = counts[:, :L] & batch.valid[:, s + 1:s + 1 + L]
    b, j = rows.nonzero(as_tuple=True)
    feats = drafter.heads(r.heads_in[b, j], n_heads)  # [heads, N, H]
    parts = []
    for m in range(n_heads):
        t = j + s + 1 + m
        ok = t < T
        ok[ok.clone()] = batch.valid[b[ok], t[ok]]
        if not ok.any():
            break
        scale = weights.head_decay ** (m + 1) * weights.mlp_scale
        parts.append(Part(f"mlp{m + 1}", feats[m][ok], b[ok] * T + t[ok], scale, scale * weights.mlp_ce))
    return parts


CE_ROWS = 64  # rows per chunk of the fused soft cross-entropy: [64, 8192] fp32 is 2 MB, a core's L2 cache


class SoftCrossEntropy(torch.autograd.Function):
    """-sum_v p_v log softmax(z)_v for each row of z, with p = target[rows]; -> [N], fp32 at least.

    Since p sums to 1, the loss is logsumexp(z) - p.z and its gradient softmax(z) - p. Row chunks small enough
    to stay in cache carry each step, so neither log-softmax nor the gathered p [N, V] is ever made whole
    (that was half of a training step on the CPU: 5,000 x 8,192 fp32 tensors written and read five times).
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, target: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        wide = torch.promote_types(z.dtype, torch.float32)  # bf16 logits are summed in fp32
        lse, nll = z.new_empty(z.shape[0], dtype=wide), z.new_empty(z.shape[0], dtype=wide)
        for zc, rc, lc, nc in zip(*(t.split(CE_ROWS) for t in (z, rows, lse, nll))):
            zc = zc.to(wide)  # [n, V]
            lc.copy_(torch.logsumexp(zc, -1))
            nc.copy_(lc - (target[rc] * zc).sum(-1))
        ctx.save_for_backward(z, target, rows, lse)
        return nll

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        z, target, rows, lse = ctx.saved_tensors
        dz = torch.empty_like(z)
        for zc, rc, lc, gc, dc in zip(*(t.split(CE_ROWS) for t in (z, rows, lse, grad, dz))):
            q = (zc.to(lc.dtype) - lc[:, None]).exp_()  # softmax(z) [n, V]
            dc.copy_((q - target[rc]) * gc[:, None])
        return dz, None, None


def _soft_ce(drafter, hidden: torch.Tensor, parts: list[Part], keep: torch.Tensor | None, metrics: bool) -> list:
    """Per part, (CE, agreement or None) against the target's distribution softmax(lm_head(f_t)).

    That distribution at position t is the same for every prediction of t (serial step 1 at t-1, step 2 at t-2,
    head m at t-3-m): it is computed once per position, and all predictions go through the lm_head together.
    keep [B*T] (or None = all) samples the positions that enter the CE.
    """
    sel = [p.flat if keep is None else p.flat[keep[p.flat]] for p in parts]
    preds = [p.pred if keep is None else p.pred[keep[p.flat]] for p in parts]
    need = torch.cat(sel).unique()  # sorted target positions
    if not len(need):
        return [(hidden.new_zeros(()), None)] * len(parts)
    with torch.no_grad():
        target = torch.softmax(drafter.logits(hidden[need]).float(), -1)  # [M, V'] once per position
    rows = torch.searchsorted(need, torch.cat(sel))  # [N]: each prediction's row of target
    logits = drafter.logits(torch.cat(preds))  # [N, V']
    nll = SoftCrossEntropy.apply(logits, target, rows)  # [N]
    sizes = [len(f) for f in sel]
    wants = target.argmax(-1)[rows].split(sizes) if metrics else [None] * len(sizes)  # the target's own token
    out = []
    for part_nll, part_logits, want in zip(nll.split(sizes), logits.split(sizes), wants):
        ce = part_nll.mean() if len(part_nll) else nll.sum() * 0
        out.append((ce, _agreement(want, part_logits) if metrics and len(part_nll) else None))
    return out


def _agreement(want: torch.Tensor, logits: torch.Tensor) -> tuple[float, float]:
    """(top-1, top-k) agreement of the drafter's choices with the target's own next token want [N]."""
    top = logits.topk(min(TOPK_METRIC, logits.shape[-1]), -1).indices  # [N, k]
    return (top[:, 0] == want).float().mean().item(), (top == want[:, None]).any(-1).float().mean().item()


def _ce_positions(batch: Batch, weights: LossWeights, metrics: bool) -> torch.Tensor | None:
    """The positions whose CE counts this step: a random ce_fraction of them in training (an unbiased estimate:
    the 8k-way softmax dominates a CPU step), all when measuring."""
    if metrics or weights.ce_fraction >= 1:
        return None
    return torch.rand(batch.ids.numel(), device=batch.ids.device) < weights.ce_fraction


def _record(out: dict, name: str, l1, ce, agree) -> None:
    out.update({f"{name}_l1": l1.item(), f"{name}_ce": ce.item()})
    if agree is not None:
        out[f"{name}_top1"], out[f"{name}_top{TOPK_METRIC}"] = agree


def gumiho_loss(drafter: GumihoDrafter, batch: Batch, weights: LossWeights, noise: torch.Tensor | None = None,
                n_heads: int | None = None, metrics: bool = True,
                rollout: str = TEACHER_FORCED) -> tuple[torch.Tensor, dict[str, float]]:
    """The total loss and its parts (per-head L1, CE and top-1 agreement with the target).

    Only positions that count (answer pairs with a real target) reach the lm_head, and parts whose CE weight is
    0 skip it entirely unless `metrics` asks for their top-1 agreement.
    """
    n_heads = drafter.cfg.mlp_heads if n_heads is None else n_heads
    r = ROLLOUT_FNS[rollout](drafter, batch, noise)
    counts = batch.valid[:, 1:] & batch.assistant[:, 1:]  # pairs whose token is an answer token
    parts = _serial_parts(r, batch, counts, weights) + _head_parts(drafter, r, batch, counts, weights, n_heads)
    parts = [p for p in parts if len(p.flat)]
    hidden = batch.hidden.reshape(-1, batch.hidden.shape[-1])  # [B*T, H]
    with_ce = [p for p in parts if p.ce_weight > 0 or metrics]
    ce = dict(zip((p.name for p in with_ce), _soft_ce(drafter, hidden, with_ce, _ce_positions(batch, weights, metrics),
                                                      metrics)))
    total, out = hidden.new_zeros(()), {}
    for p in parts:
        l1 = F.smooth_l1_loss(p.pred.float(), hidden[p.flat], reduction="none").mean(-1).mean()
        part_ce, agree = ce.get(p.name, (l1.new_zeros(()), None))
        total = total + p.l1_weight * l1 + p.ce_weight * part_ce
        _record(out, p.name, l1, part_ce, agree)
    out["loss"] = total.item()
    return total, out

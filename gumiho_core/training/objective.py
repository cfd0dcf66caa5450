"""The Gumiho training objective (GUMIHO.md, "Training"), teacher-forced in one pass.

Pair j is (target feature f_j, next token x_{j+1}). The serial output o_j regresses f_{j+1} and
matches its token distribution; u_j = fc(emb(x_{j+2}), o_j); MLP head m reads
concat(u_j .. u_{j+s-1}) (s = serial steps) and regresses f_{j+s+1+m}.

Loss = 1.0 L1_serial + 0.1 CE_serial + sum_m 0.8^(m+1) (L1_m + w CE_m) / 9.
CE is the soft cross-entropy against the target's own distribution; over a reduced draft
vocabulary both distributions are taken over that subset (the drafter can only propose from it),
which cuts the CPU cost of the 49k-way softmax about six-fold for the default model.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from ..drafter import GumihoDrafter


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
class Batch:
    hidden: torch.Tensor  # [B, T, H] target features (fp32)
    ids: torch.Tensor  # [B, T] token ids
    valid: torch.Tensor  # [B, T] bool: a real token (not padding)
    assistant: torch.Tensor  # [B, T] bool: an answer token
    lengths: torch.Tensor  # [B]


def collate(seqs) -> Batch:
    """Right-pad sequences (objects with hidden [T, H], ids [T], mask [T]) into a Batch."""
    B, T, H = len(seqs), max(s.ids.shape[0] for s in seqs), seqs[0].hidden.shape[1]
    hidden = torch.zeros(B, T, H)
    ids = torch.zeros(B, T, dtype=torch.long)
    valid = torch.zeros(B, T, dtype=torch.bool)
    assistant = torch.zeros(B, T, dtype=torch.bool)
    for i, s in enumerate(seqs):
        n = s.ids.shape[0]
        hidden[i, :n], ids[i, :n], valid[i, :n], assistant[i, :n] = s.hidden.float(), s.ids, True, s.mask
    return Batch(hidden, ids, valid, assistant, valid.sum(1))


def uniform_noise(batch: Batch, scale: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """EAGLE's feature noise: (U - 0.5) * scale * 512 / sequence length, per sequence."""
    u = torch.rand(batch.hidden.shape, generator=generator) - 0.5
    return u * (scale * 512 / batch.lengths.clamp(min=1).float())[:, None, None]


def _part(drafter, pred: torch.Tensor, tgt: torch.Tensor, ce_weight: float, weights: LossWeights, metrics: bool):
    """(L1, CE, top-1 and top-k agreement or None) of predicted features pred [N, H] against the target's tgt [N, H].

    CE is the soft cross-entropy against the target's own next-token distribution softmax(lm_head(tgt)).
    """
    l1 = F.smooth_l1_loss(pred.float(), tgt, reduction="none").mean(-1).mean() if len(tgt) else pred.sum() * 0
    if len(tgt) == 0 or (ce_weight == 0 and not metrics):
        return l1, l1.new_zeros(()), None
    if weights.ce_fraction < 1 and not metrics:  # the 8k-way softmax dominates a CPU step
        keep = torch.rand(len(tgt), device=tgt.device) < weights.ce_fraction
        pred, tgt = pred[keep], tgt[keep]
        if len(tgt) == 0:
            return l1, l1.new_zeros(()), None
    with torch.no_grad():
        p = torch.softmax(drafter.logits(tgt).float(), -1)  # the target's own distribution [N, V']
    logq = torch.log_softmax(drafter.logits(pred).float(), -1)
    ce = -(p * logq).sum(-1).mean()
    if not metrics:
        return l1, ce, None
    want = p.argmax(-1, keepdim=True)  # the target's own next token
    top = logq.topk(min(TOPK_METRIC, logq.shape[-1]), -1).indices
    return l1, ce, ((top[:, :1] == want).float().mean().item(), (top == want).any(-1).float().mean().item())


def _record(out: dict, name: str, l1, ce, agree) -> None:
    out.update({f"{name}_l1": l1.item(), f"{name}_ce": ce.item()})
    if agree is not None:
        out[f"{name}_top1"], out[f"{name}_top{TOPK_METRIC}"] = agree


def _serial_outputs(drafter: GumihoDrafter, batch: Batch, noise: torch.Tensor | None) -> torch.Tensor:
    """Teacher-forced serial outputs o_j over pairs (f_j, x_{j+1}). -> [B, T-1, H]"""
    hidden, ids, valid = batch.hidden, batch.ids, batch.valid
    B, T, _ = hidden.shape
    f_in = hidden[:, :-1] + (noise[:, :-1] if noise is not None else 0)
    x = drafter.fuse(ids[:, 1:], f_in)  # pair j: (f_j, x_{j+1})  [B, T-1, H]
    causal = torch.ones(T - 1, T - 1, dtype=torch.bool, device=x.device).tril()
    key_ok = valid[:, 1:]  # pair j exists iff x_{j+1} is real
    return drafter.serial(x, torch.arange(T - 1, device=x.device)[None].expand(B, -1),
                          causal[None, None] & key_ok[:, None, None, :])


def _mlp_loss(drafter, batch: Batch, o: torch.Tensor, counts, weights: LossWeights, n_heads: int, metrics: bool,
              out: dict) -> torch.Tensor:
    """MLP head m reads concat(u_j .. u_{j+s-1}), u_j = fc(emb(x_{j+2}), o_j), and regresses f_{j+s+1+m}."""
    s, T = drafter.cfg.serial_steps, batch.hidden.shape[1]
    total = o.new_zeros(())
    if not n_heads or T - 1 - s <= 0:
        return total
    u = drafter.fuse(batch.ids[:, 2:], o[:, :-1])  # [B, T-2, H]
    L = T - 1 - s
    rows = counts[:, :L] & batch.valid[:, s + 1:s + 1 + L]  # positions j where at least head 0 has a target
    feats = drafter.heads(torch.cat([u[:, k:k + L] for k in range(s)], dim=-1)[rows], n_heads)  # [heads, N, H]
    b_idx, j_idx = rows.nonzero(as_tuple=True)
    for m in range(n_heads):
        t_idx = j_idx + s + 1 + m  # head m's target position
        ok = t_idx < T
        ok[ok.clone()] = batch.valid[b_idx[ok], t_idx[ok]]
        if not ok.any():
            break
        l1, ce, agree = _part(drafter, feats[m][ok], batch.hidden[b_idx[ok], t_idx[ok]], weights.mlp_ce, weights,
                              metrics)
        total = total + weights.head_decay ** (m + 1) * (l1 + weights.mlp_ce * ce) * weights.mlp_scale
        _record(out, f"mlp{m + 1}", l1, ce, agree)
    return total


def gumiho_loss(drafter: GumihoDrafter, batch: Batch, weights: LossWeights, noise: torch.Tensor | None = None,
                n_heads: int | None = None, metrics: bool = True) -> tuple[torch.Tensor, dict[str, float]]:
    """The total loss and its parts (per-head L1, CE and top-1 agreement with the target).

    Only positions that count (answer pairs with a real target) reach the lm_head, and a part whose
    CE weight is 0 skips it entirely unless `metrics` asks for its top-1 agreement.
    """
    n_heads = drafter.cfg.mlp_heads if n_heads is None else n_heads
    o = _serial_outputs(drafter, batch, noise)  # [B, T-1, H]
    counts = batch.valid[:, 1:] & batch.assistant[:, 1:]  # pairs whose token is an answer token
    serial_rows = counts & batch.valid[:, 1:]  # o_j regresses f_{j+1}
    l1, ce, agree = _part(drafter, o[serial_rows], batch.hidden[:, 1:][serial_rows], weights.serial_ce, weights,
                          metrics)
    out: dict[str, float] = {}
    _record(out, "serial", l1, ce, agree)
    total = weights.serial_l1 * l1 + weights.serial_ce * ce
    total = total + _mlp_loss(drafter, batch, o, counts, weights, n_heads, metrics, out)
    out["loss"] = total.item()
    return total, out

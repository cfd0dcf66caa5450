"""The training objective of every drafter of the family (docs/method.md, "Training") over a rollout (rollout.py).

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
from .plan import LossPlan, loss_plan
from .rollout import ROLLOUT_FNS, TEACHER_FORCED, Rollout, serial_outputs


TOPK_METRIC = 10  # also report whether the target's token is among the drafter's best 10 (what a tree can catch)


@dataclass(frozen=True)
class LossWeights:
    """Weights of the loss's parts; the defaults are the Gumiho paper's (docs/method.md, "Training")."""

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


CE_ROWS = 64  # rows per chunk of the fused soft cross-entropy on a CPU: [64, 8192] fp32 is 2 MB, a core's L2 cache
GPU_CE_ELEMENTS = 2 ** 27  # a GPU takes the rows whole, up to [rows, V] fp32 temporaries of 512 MB each


def ce_chunk_rows(device: torch.device, vocab: int) -> int:
    """Rows per chunk of SoftCrossEntropy: cache-sized on a CPU; on a GPU as many as GPU_CE_ELEMENTS allow, since there
    each op of a chunk is a kernel launch. In 64-row chunks a micro-batch of 3,218 tokens of the default model
    dispatched 3,007 ops forward and backward; in one chunk 2,106."""
    return CE_ROWS if device.type == "cpu" else max(CE_ROWS, GPU_CE_ELEMENTS // max(1, vocab))


class SoftCrossEntropy(torch.autograd.Function):
    """-sum_v p_v log softmax(z)_v for each row of z, with p = target[rows]; -> [N], fp32 at least.

    Since p sums to 1, the loss is logsumexp(z) - p.z and its gradient softmax(z) - p. Row chunks (`chunk` rows:
    ce_chunk_rows) small enough to stay in a CPU's cache carry each step, so neither log-softmax nor the gathered
    p [N, V] is ever made whole there (that was half of a training step on the CPU: 5,000 x 8,192 fp32 tensors
    written and read five times). With `overwrite`, z is a temporary nothing else reads after this backward (the
    logits of the loss), and its gradient is written over it: for the default model a fresh [N, V] buffer is about
    200 MB of new pages, and writing them took 0.74 s of a 6-s micro-batch on the project's 2-core CPU.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, target: torch.Tensor, rows: torch.Tensor, chunk: int = CE_ROWS,
                overwrite: bool = False) -> torch.Tensor:
        wide = torch.promote_types(z.dtype, torch.float32)  # bf16 logits are summed in fp32
        lse, nll = z.new_empty(z.shape[0], dtype=wide), z.new_empty(z.shape[0], dtype=wide)
        for zc, rc, lc, nc in zip(*(t.split(chunk) for t in (z, rows, lse, nll))):
            zc = zc.to(wide)  # [n, V]
            lc.copy_(torch.logsumexp(zc, -1))
            nc.copy_(lc - (target[rc] * zc).sum(-1))
        ctx.save_for_backward(z, target, rows, lse)
        ctx.chunk, ctx.overwrite = chunk, overwrite
        return nll

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        z, target, rows, lse = ctx.saved_tensors
        dz = z if ctx.overwrite else torch.empty_like(z)  # a chunk of z is read whole before its gradient replaces it
        for zc, rc, lc, gc, dc in zip(*(t.split(ctx.chunk) for t in (z, rows, lse, grad, dz))):
            q = (zc.to(lc.dtype) - lc[:, None]).exp_()  # softmax(z) [n, V]
            dc.copy_((q - target[rc]) * gc[:, None])
        return dz, None, None, None, None


@dataclass(frozen=True)
class Metrics:
    """A loss's parts by name (per-head L1, CE, top-1 agreement; "loss" the total), still where the loss was
    computed: one tensor, read into Python at once by floats()."""

    names: tuple[str, ...]
    values: torch.Tensor  # [len(names)], detached

    def floats(self) -> dict[str, float]:
        return dict(zip(self.names, self.values.tolist()))


def _predictions(drafter, r: Rollout, plan: LossPlan) -> dict[str, torch.Tensor]:
    """Each part's predicted features [N, H], gathered by the plan's indices (no mask, no host read)."""
    H = r.heads_in.shape[-1] if not r.serial else r.serial[0].shape[-1]
    feats, n_heads = None, 1 + max(p.head for p in plan.parts) if plan.parts else 0
    if n_heads:
        rows = r.heads_in.reshape(-1, r.heads_in.shape[-1])[plan.head_rows]  # [R, s*H]
        # heads x [R, H]; unbound, the backward pass stacks one gradient, where indexing the stack would zero
        # a [heads, R, H] gradient for each head
        feats = drafter.heads(rows, n_heads).unbind(0)
    return {p.name: r.serial[p.step - 1].reshape(-1, H)[p.src] if p.step else feats[p.head][p.src]
            for p in plan.parts}


def _soft_ce(drafter, hidden: torch.Tensor, plan: LossPlan, preds: dict, metrics: bool) -> dict:
    """Per part with a CE, (CE, (top-1, top-k) agreement or None) against the target's softmax(lm_head(f_t)).

    That distribution at position t is the same for every prediction of t (serial step 1 at t-1, step 2 at t-2,
    head m at t-3-m): it is computed once per position, and all predictions go through the lm_head together.
    """
    parts = [p for p in plan.parts if p.ce is not None]
    if not plan.need.numel():
        return {p.name: (hidden.new_zeros(()), None) for p in parts}
    with torch.no_grad():
        target = torch.softmax(drafter.logits(hidden[plan.need]).float(), -1)  # [M, V'] once per position
    logits = drafter.logits(torch.cat([preds[p.name][p.ce] for p in parts]))  # [N, V']
    chunk = ce_chunk_rows(logits.device, logits.shape[-1])
    nll = SoftCrossEntropy.apply(logits, target, plan.rows, chunk, True)  # [N]; the logits are read here alone
    wants = target.argmax(-1)[plan.rows].split(plan.sizes) if metrics else [None] * len(parts)  # the target's token
    out = {}
    for p, part_nll, part_logits, want in zip(parts, nll.split(plan.sizes), logits.split(plan.sizes), wants):
        ce = part_nll.mean() if len(part_nll) else nll.sum() * 0
        out[p.name] = (ce, _agreement(want, part_logits) if metrics and len(part_nll) else None)
    return out


def _agreement(want: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(top-1, top-k) agreement of the drafter's choices with the target's own next token want [N]."""
    top = logits.topk(min(TOPK_METRIC, logits.shape[-1]), -1).indices  # [N, k]
    return (top[:, 0] == want).float().mean(), (top == want[:, None]).any(-1).float().mean()


def plan_for(drafter: GumihoDrafter, batch: Batch, weights: LossWeights, n_heads: int | None = None,
             metrics: bool = True, rollout: str = TEACHER_FORCED) -> LossPlan:
    """The loss plan of `batch` (see plan.py), for this drafter and rollout, on the host."""
    s = drafter.cfg.serial_steps
    return loss_plan(batch, serial_outputs(rollout, s), s, drafter.cfg.mlp_heads if n_heads is None else n_heads,
                     weights, metrics)


def gumiho_loss(drafter: GumihoDrafter, batch: Batch, weights: LossWeights, noise: torch.Tensor | None = None,
                n_heads: int | None = None, metrics: bool = True, rollout: str = TEACHER_FORCED,
                plan: LossPlan | None = None) -> tuple[torch.Tensor, Metrics]:
    """The total loss and its parts (per-head L1, CE and top-1 agreement with the target), as `Metrics`.

    `plan`: plan_for's for this batch with the same settings, moved to the batch's device (the trainer makes it
    from the host copy of the batch); None makes it here, reading the batch's masks back. Only positions that
    count reach the lm_head, and parts whose CE weight is 0 skip it unless `metrics` asks for their agreement.
    """
    plan = plan or plan_for(drafter, batch, weights, n_heads, metrics, rollout).to(batch.hidden.device)
    r = ROLLOUT_FNS[rollout](drafter, batch, noise)
    assert len(r.serial) == plan.serial_steps, f"a plan for {plan.serial_steps} serial outputs; {len(r.serial)} made"
    preds = _predictions(drafter, r, plan)
    hidden = batch.hidden.reshape(-1, batch.hidden.shape[-1])  # [B*T, H]
    ce = _soft_ce(drafter, hidden, plan, preds, metrics)
    total, names, values = hidden.new_zeros(()), [], []
    for p in plan.parts:
        l1 = F.smooth_l1_loss(preds[p.name].float(), hidden[p.flat], reduction="none").mean(-1).mean()
        part_ce, agree = ce.get(p.name, (l1.new_zeros(()), None))
        total = total + p.l1_weight * l1 + p.ce_weight * part_ce
        names += [f"{p.name}_l1", f"{p.name}_ce"] + ([f"{p.name}_top1", f"{p.name}_top{TOPK_METRIC}"] if agree else [])
        values += [l1, part_ce, *(agree or ())]
    values = torch.stack([v.detach().float() for v in values + [total]])
    return total, Metrics(tuple(names) + ("loss",), values)

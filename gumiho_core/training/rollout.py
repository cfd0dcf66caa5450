"""The drafter's forward pass in training: teacher-forced, or unrolled the way drafting runs ("train as you draft").

Pair j is (target feature f_j, next token x_{j+1}); the drafter's step-1 output o_{1,j} at pair j predicts
f_{j+1}, so its token is x_{j+2}. Both rollouts share step 1 (causal over the pairs) and differ after it:

- teacher-forced: every later input is built from the target's true features. Drafting's depth-k output at
  pair j stands in as the step-1 output at pair j+k-1 (which read f_{j+k-1}), and the MLP heads read
  concat(u_j .. u_{j+s-1}), u_j = fc(emb(x_{j+2}), o_{1,j}).
- as-drafted: serial step k (2..s) at pair j reads fc(emb(x_{j+k}), o_{k-1,j}) at position j+k-1 and attends,
  as drafting's depth-(k-1) node does, to the step-1 keys of pairs 0..j, to its own earlier steps at pair j
  and to itself; the MLP heads read concat(u_1 .. u_s), u_k = fc(emb(x_{j+k+1}), o_{k,j}), the drafter's
  own outputs. One batched pass per step: queries of every pair at once against the keys of all steps.
Head m predicts f_{j+s+1+m} in both. A drafter without a serial stack (Medusa style, s = 0) has no rollout to
speak of: its heads read the target's own feature f_j (noised as step 1's input is) and head m predicts f_{j+1+m}.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..drafter import GumihoDrafter
from .batch import Batch

TEACHER_FORCED, AS_DRAFTED = "teacher-forced", "as-drafted"
ROLLOUTS = (TEACHER_FORCED, AS_DRAFTED)


@dataclass(frozen=True)
class Rollout:
    serial: tuple[torch.Tensor, ...]  # step k's outputs [B, T-1, H]: serial[k-1][:, j] predicts f_{j+k}
    heads_in: torch.Tensor  # [B, T-1-s, s*H]: the MLP heads' input at pair j

    def drafted_at(self, depth: int, b: int, j: int) -> torch.Tensor:
        """The output that stands for drafting's serial depth `depth` at pair j of sequence b. [H]"""
        if depth <= len(self.serial):
            return self.serial[depth - 1][b, j]
        return self.serial[0][b, j + depth - 1]  # teacher-forced: the step-1 output at a later pair


class StepKeys:
    """GumihoDrafter.serial's cache over a batch in the as-drafted rollout, kept differentiable (torch ops only,
    where KVCache writes slots in place, which autograd cannot follow).

    Step 1 stores the pairs' keys and attends causally (its mask). A later step k's query at pair j may see the
    step-1 keys of pairs 0..j (the same mask) and its own chain at pair j: steps 2..k there, one key per step. So
    the chain is attended position by position, [T, k-1] scores beside the [T, T] of the pairs, where one mask
    over all steps' keys would be [T, k * T], almost all of it masked.
    """

    def __init__(self, n_layers: int):
        self.k: list[torch.Tensor | None] = [None] * n_layers  # step 1's keys [B, kvh, T, hd]
        self.v: list[torch.Tensor | None] = [None] * n_layers
        self.chain: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(n_layers)]  # steps 2..k

    def reserve(self, extra: int) -> None:
        pass

    def advance(self, T: int) -> None:
        pass

    def attend(self, layer: int, q, k, v, mask) -> torch.Tensor:
        """q [B, nh, T, hd], k and v [B, kvh, T, hd]; mask: step 1's [B, 1, T, T]."""
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[1])
        self.chain[layer].append((k, v))
        ck = torch.stack([c for c, _ in self.chain[layer]], dim=3)  # [B, kvh, T, c, hd]
        cv = torch.stack([c for _, c in self.chain[layer]], dim=3)
        return _pairs_and_chain(q, self.k[layer], self.v[layer], mask, ck, cv)


def _pairs_and_chain(q, k, v, mask, ck, cv) -> torch.Tensor:
    """One softmax over the pairs' keys (masked) and the query's own chain of keys (all visible)."""
    g = q.shape[1] // k.shape[1]  # query heads per key head
    k, v, ck, cv = (t.repeat_interleave(g, dim=1) for t in (k, v, ck, cv))
    scale = q.shape[-1] ** -0.5
    pairs = (q @ k.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf"))  # [B, nh, T, T]
    chain = (q.unsqueeze(3) * ck).sum(-1) * scale  # [B, nh, T, c]
    p = torch.softmax(torch.cat((pairs, chain), dim=-1), dim=-1)
    p_pairs, p_chain = p.split((pairs.shape[-1], chain.shape[-1]), dim=-1)
    return p_pairs @ v + (p_chain.unsqueeze(-1) * cv).sum(3)  # [B, nh, T, hd]


def _first_step(drafter: GumihoDrafter, batch: Batch, noise: torch.Tensor | None, cache=None):
    """Step 1 over pairs (f_j, x_{j+1}), causal: -> (outputs [B, T-1, H], its mask [B, 1, T-1, T-1])."""
    hidden, ids, valid = batch.hidden, batch.ids, batch.valid
    B, T, _ = hidden.shape
    f_in = hidden[:, :-1] + (noise[:, :-1] if noise is not None else 0)
    x = drafter.fuse(ids[:, 1:], f_in)  # pair j: (f_j, x_{j+1})  [B, T-1, H]
    causal = torch.ones(T - 1, T - 1, dtype=torch.bool, device=x.device).tril()
    mask = causal[None, None] & valid[:, 1:][:, None, None, :]  # pair j exists iff x_{j+1} is real
    positions = torch.arange(T - 1, device=x.device)[None].expand(B, -1)
    return drafter.serial(x, positions, mask, cache), mask


def _target_only(batch: Batch, noise: torch.Tensor | None) -> Rollout:
    """Heads that read the target's feature f_j at pair j (no serial stack)."""
    return Rollout((), batch.hidden[:, :-1] + (noise[:, :-1] if noise is not None else 0))  # [B, T-1, H]


def _no_heads(batch: Batch, outs) -> Rollout:
    B, T, H = batch.hidden.shape
    return Rollout(tuple(outs), batch.hidden.new_zeros(B, 0, H))


def teacher_forced(drafter: GumihoDrafter, batch: Batch, noise: torch.Tensor | None = None) -> Rollout:
    if not drafter.cfg.has_stack:
        return _target_only(batch, noise)
    s, T = drafter.cfg.serial_steps, batch.hidden.shape[1]
    o, _ = _first_step(drafter, batch, noise)
    if not drafter.cfg.mlp_heads:
        return _no_heads(batch, (o,))
    u = drafter.fuse(batch.ids[:, 2:], o[:, :-1])  # u_j = fc(emb(x_{j+2}), o_j)  [B, T-2, H]
    L = max(0, T - 1 - s)
    return Rollout((o,), torch.cat([u[:, k:k + L] for k in range(s)], dim=-1))


def as_drafted(drafter: GumihoDrafter, batch: Batch, noise: torch.Tensor | None = None) -> Rollout:
    if not drafter.cfg.has_stack:
        return _target_only(batch, noise)
    s, (B, T) = drafter.cfg.serial_steps, batch.ids.shape
    keys = StepKeys(drafter.cfg.num_layers)
    o, first_mask = _first_step(drafter, batch, noise, keys)
    ids = F.pad(batch.ids, (0, s + 1))  # [B, T+s+1]: tokens past the end are padding, never in the loss
    positions = torch.arange(T - 1, device=o.device)[None].expand(B, -1)
    outs, fused = [o], []
    for k in range(2, s + 1):
        fused.append(drafter.fuse(ids[:, k:k + T - 1], outs[-1]))  # fc(emb(x_{j+k}), o_{k-1,j})  [B, T-1, H]
        outs.append(drafter.serial(fused[-1], positions + k - 1, first_mask, keys))  # StepKeys adds the chain
    if not drafter.cfg.mlp_heads:
        return _no_heads(batch, outs)
    fused.append(drafter.fuse(ids[:, s + 1:s + T], outs[-1]))  # u_s = fc(emb(x_{j+s+1}), o_{s,j})
    L = max(0, T - 1 - s)
    return Rollout(tuple(outs), torch.cat(fused, dim=-1)[:, :L])


ROLLOUT_FNS = {TEACHER_FORCED: teacher_forced, AS_DRAFTED: as_drafted}


def serial_outputs(name: str, serial_steps: int) -> int:
    """How many serial steps' outputs a rollout makes (Rollout.serial): teacher-forced runs step 1 alone."""
    return serial_steps if name == AS_DRAFTED else min(1, serial_steps)


def rollout(name: str, drafter: GumihoDrafter, batch: Batch, noise: torch.Tensor | None = None) -> Rollout:
    return ROLLOUT_FNS[name](drafter, batch, noise)

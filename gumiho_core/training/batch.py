"""A training batch: right-padded conversations with their target features, and EAGLE's feature noise."""
from __future__ import annotations

from dataclasses import dataclass

import torch


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
    """EAGLE's feature noise: (U - 0.5) * scale * 512 / sequence length, per sequence. Drawn where the batch is: the
    host took 25 ms per 4,096-token micro-batch (one EPYC core), a third of a GPU's whole micro-step there."""
    u = torch.rand(batch.hidden.shape, generator=generator, device=batch.hidden.device) - 0.5
    return u * (scale * 512 / batch.lengths.clamp(min=1).float())[:, None, None]

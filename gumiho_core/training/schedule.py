"""The order of the data and the rate schedule: length-sorted micro-batches, where steps end, warm-up and decay."""
from __future__ import annotations

import random

import torch

from .data import Sequence

CPU_MICRO_TOKENS = 4096  # padded tokens per forward on a CPU (larger: fewer weight casts per token)


def micro_tokens_for(device: torch.device, tokens_per_step: int) -> int:
    """Padded tokens per micro-batch: cache-sized on a CPU; on a GPU twice tokens_per_step, so that one micro-batch
    holds what two hold on a CPU when the two sizes are equal (padding leaves a micro-batch short of its size, so a
    step takes two) and a step's tokens stay about the same. On a GPU each op of a micro-batch is a kernel launch
    whatever its size: one micro-batch a step launches about half as many (tests/test_training.py counts them)."""
    return CPU_MICRO_TOKENS if device.type == "cpu" else 2 * tokens_per_step


def micro_batches(seqs: list[Sequence], budget: int, rng: random.Random) -> list[list[Sequence]]:
    """Length-sorted groups whose padded size stays under `budget` tokens, in random order."""
    order = sorted(range(len(seqs)), key=lambda i: (seqs[i].ids.shape[0], rng.random()))
    batches, cur, longest = [], [], 0
    for i in order:
        n = seqs[i].ids.shape[0]
        if cur and max(longest, n) * (len(cur) + 1) > budget:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(seqs[i])
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def lr_at(step: int, total: int, cfg) -> float:
    """Linear warm-up over warmup_steps (at most a tenth of the run, so short runs train too), then linear decay."""
    warm = max(1, min(cfg.warmup_steps, total // 10))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    return cfg.lr * max(0.0, (total - step) / max(1, total - warm))


def step_ends(batches: list[list[Sequence]], tokens_per_step: int) -> list[int]:
    """The micro-batches after which the optimizer steps: gradients of whole micro-batches accumulate until they
    hold tokens_per_step tokens (so a step usually takes more than tokens_per_step / micro_tokens of them), and the
    epoch's last micro-batch ends a step too. len() of it is the epoch's optimizer steps."""
    ends, acc = [], 0
    for i, micro in enumerate(batches):
        acc += sum(s.ids.shape[0] for s in micro)
        if acc >= tokens_per_step or i == len(batches) - 1:
            ends.append(i)
            acc = 0
    return ends

"""What a decoding step costs on THIS device, measured at a live session's context: verifying n tree
tokens, drafting a (top_k, depth) tree, and a plain step. The auto tree (autotree.py) weighs these against
what each tree would have accepted.

A moment of noise (another process taking a core for a second) must not decide the tree for good, so every
timing is repeated in ROUNDS interleaved rounds (each round times every size once, in a rotated order) and
the median counts: a slow moment slows one round of every size alike, not every repetition of one size.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass

import torch

from ..config import SERIAL, TreeConfig
from ..engine import SpeculativeDecoder
from ..timing import device_name, synchronize
from ..tree import ROOT, DraftTree, proposer_name

TOP_K_GRID = (1, 2, 3, 4, 6, 8, 10)
NODES_GRID = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
BEAM = 10  # mlp_topk and pruning of every candidate (and of the calibration tree)
ROUNDS = 5  # interleaved timings of every size; the median counts


@dataclass(frozen=True)
class Costs:
    """Measured seconds: a plain decoding step, verifying n tree tokens, drafting a (top_k, depth) tree, and the
    mean commit of a speculative step."""

    ar_step_s: float
    verify_s: dict  # str(n) -> seconds to verify n tree tokens (string keys: as TreeChoice stores them)
    draft_s: dict  # (top_k, depth) -> seconds to draft such a tree
    commit_s: float
    device: str

    def step_s(self, top_k: int, depth: int, nodes: int) -> float:
        """Predicted seconds of a speculative step with this tree: draft + verify + commit."""
        return self.draft_s[(top_k, depth)] + self.verify_s[str(nodes)] + self.commit_s


def timed_rounds(fns: dict, rounds: int, device, lock=None) -> dict:
    """{key: median seconds of fns[key]()} over `rounds` interleaved rounds (after one warm-up call each).
    `lock` (e.g. the app's step lock) is held for each call only: no other decoding step runs while one is timed."""
    lock = lock or contextlib.nullcontext()
    keys, times = list(fns), {k: [] for k in fns}
    for r in range(-1, rounds):  # round -1 warms up
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:  # who goes first rotates
            with lock:
                synchronize(device)
                t0 = time.perf_counter()
                fns[k]()
                synchronize(device)
                seconds = time.perf_counter() - t0
            if r >= 0:
                times[k].append(seconds)
    return {k: statistics.median(v) for k, v in times.items()}


def _chain(root: int, n: int, vocab: int) -> DraftTree:
    """A chain of n nodes (the root first): verification costs depend on the node count, not the shape."""
    return DraftTree(tokens=tuple((root + i) % vocab for i in range(n)), parents=tuple(range(-1, n - 1)),
                     depth=tuple(range(n)), proposer=(ROOT,) + (proposer_name(SERIAL, 1),) * (n - 1),
                     logprob=(0.0,) * n, score=(0.0,) * n)


def measure_verify(session: SpeculativeDecoder, nodes=NODES_GRID, rounds: int = ROUNDS,
                   lock=None) -> tuple[float, dict]:
    """(seconds per plain decoding step, {str(n): seconds to verify n tree tokens}) at the session's context."""
    vocab = session.target.vocab_size

    def verify(tree: DraftTree | None) -> None:
        session.verify_forward(tree).argmax(-1)

    fns = {"plain": lambda: verify(None)}
    fns.update({str(n): lambda n=n: verify(_chain(session.last_token, n, vocab)) for n in nodes})
    times = timed_rounds(fns, rounds, session.target.device, lock)
    return times.pop("plain"), times


@torch.inference_mode()
def measure_draft(session: SpeculativeDecoder, mode: str, rounds: int = ROUNDS, lock=None) -> dict:
    """{(top_k, depth): seconds to draft such a tree} at the session's context, for the depths its drafter has."""
    # the largest tree of the grid: on a CPU drafting skips what cannot make the tree (drafting.prunes), so a
    # smaller tree drafts faster; this is the cost without that help, an upper bound for the smaller trees
    cfgs = {(k, depth): TreeConfig(mode=mode, top_k=k, mlp_topk=BEAM, pruning=BEAM, total_tokens=max(NODES_GRID),
                                   depth=depth)
            for k in TOP_K_GRID for depth in range(1, session.drafter.cfg.max_depth + 1)}
    return timed_rounds({key: lambda cfg=cfg: session.draft(cfg) for key, cfg in cfgs.items()}, rounds,
                        session.target.device, lock)


def measure(session: SpeculativeDecoder, mode: str, commit_s: float, progress, lock=None) -> Costs:
    """Every cost at the session's context (the commit's comes from real steps: `commit_s`). progress(frac, text)."""
    progress(0.6, "timing verification on this device")
    ar_s, verify_s = measure_verify(session, lock=lock)
    progress(0.8, "timing drafting")
    return Costs(ar_step_s=ar_s, verify_s=verify_s, draft_s=measure_draft(session, mode, lock=lock),
                 commit_s=commit_s, device=device_name(session.target.device))

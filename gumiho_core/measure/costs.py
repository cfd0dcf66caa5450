"""What a decoding step costs on THIS device, measured at a live session's context: verifying n tree
tokens, drafting a (top_k, depth) tree, and a plain step. The auto tree (autotree.py) weighs these against
what each tree would have accepted."""
from __future__ import annotations

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
REPS = 3  # timings per measurement; the median counts


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


def _timed(fn, reps: int, device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _chain(root: int, n: int, vocab: int) -> DraftTree:
    """A chain of n nodes (the root first): verification costs depend on the node count, not the shape."""
    return DraftTree(tokens=tuple((root + i) % vocab for i in range(n)), parents=tuple(range(-1, n - 1)),
                     depth=tuple(range(n)), proposer=(ROOT,) + (proposer_name(SERIAL, 1),) * (n - 1),
                     logprob=(0.0,) * n, score=(0.0,) * n)


def measure_verify(session: SpeculativeDecoder, nodes=NODES_GRID, reps: int = REPS) -> tuple[float, dict]:
    """(seconds per plain decoding step, {str(n): seconds to verify n tree tokens}) at the session's context."""
    dev, vocab = session.target.device, session.target.vocab_size

    def verify(tree: DraftTree | None) -> None:
        session.verify_forward(tree).argmax(-1)

    ar = _timed(lambda: verify(None), reps, dev)
    return ar, {str(n): _timed(lambda n=n: verify(_chain(session.last_token, n, vocab)), reps, dev) for n in nodes}


@torch.inference_mode()
def measure_draft(session: SpeculativeDecoder, mode: str, reps: int = REPS) -> dict:
    """{(top_k, depth): seconds to draft such a tree} at the session's context, for the depths its drafter has."""
    out = {}
    for k in TOP_K_GRID:
        for depth in range(1, session.drafter.cfg.max_depth + 1):
            cfg = TreeConfig(mode=mode, top_k=k, mlp_topk=BEAM, pruning=BEAM, total_tokens=2, depth=depth)
            out[(k, depth)] = _timed(lambda cfg=cfg: session.draft(cfg), reps, session.target.device)
    return out


def measure(session: SpeculativeDecoder, mode: str, commit_s: float, progress) -> Costs:
    """Every cost at the session's context (the commit's comes from real steps: `commit_s`). progress(frac, text)."""
    progress(0.6, "timing verification and drafting on this device")
    ar_s, verify_s = measure_verify(session)
    progress(0.8, "timing drafting")
    return Costs(ar_step_s=ar_s, verify_s=verify_s, draft_s=measure_draft(session, mode), commit_s=commit_s,
                 device=device_name(session.target.device))

"""Drafting a tree with a drafter of the family (docs/method.md, "Drafting a tree"), both upstream bugs fixed.

The drafter's runtime state between steps is a `DraftContext`: its KV cache over the committed
(feature, next token) pairs, its output at the last pair, and the target's last feature (what Medusa-style
heads read). `build_tree` proposes candidates into
a pool level by level, then keeps the best `total_tokens - 1` as a `DraftTree`.

Everything stays on the drafter's device in batched ops, a level at a time: the top-k of whole levels,
the beam over the MLP heads, the selection. The chosen tree is read back to the host once, in one packed
tensor (on a GPU each read into Python waits for the queue). Ties resolve as torch.topk and a stable sort
resolve them, the same ops whatever the tree size.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import SERIAL, TreeConfig
from .drafter import GumihoDrafter
from .pool import Frontier, Pool, expand_beam, expand_serial, reachable
from .timing import Stopwatch
from .tree import PARALLEL, ROOT, DraftTree, proposer_name

FIRST_HEADS = 2  # MLP heads a CPU runs on every row before pruning (the authors' tree nearly always uses both)


def prunes(device: torch.device) -> bool:
    """Whether drafting skips what cannot make the tree: on a CPU, where arithmetic and not launches is the cost.

    The tree keeps the best total_tokens - 1 pool nodes and a child never scores above its parent, so once the
    pool holds that many, a node below the current bar has no descendant in the tree (pool.cutoff). Skipping
    them sizes tensors by their contents, which on a GPU would stall the queue at every level to save arithmetic
    it barely pays for. The drafted tree is the same either way (tests/test_drafting.py).
    """
    return device.type == "cpu"


@dataclass(frozen=True)
class DraftPhase:
    """One stage of drafting: a serial step "serial<d>", or "parallel" (all MLP heads at once). Each node of the
    tree names the phase that proposed it (DraftTree.phase)."""

    name: str
    depths: tuple[int, ...]  # tree depths this phase proposed
    candidates: int  # nodes it put into the pool
    seconds: float


@dataclass
class DraftContext:
    """The drafter's state for one decoding session."""

    drafter: GumihoDrafter
    cache: object = None
    committed: int = 0  # pairs in the cache that belong to the committed sequence; tree nodes follow them
    last_out: torch.Tensor | None = None  # [H] drafter output at the last committed pair (None: no serial stack)
    last_feature: torch.Tensor | None = None  # [H] the target's feature at the last committed pair

    def __post_init__(self):
        self.cache = self.drafter.new_cache()
        self.drafter.prepare()

    def ingest(self, features: torch.Tensor, next_tokens: torch.Tensor) -> None:
        """Run the serial stack over new pairs (target feature f_i, token x_{i+1}). [T, H], [T]"""
        T = next_tokens.shape[0]
        weight = self.drafter.weight  # the target's features come from its last layer's device (--device-map)
        features = features.to(weight.device, weight.dtype)
        self.last_feature = features[-1]
        if self.cache is not None:
            self.cache.crop(self.committed)
            start = self.committed
            x = self.drafter.fuse(next_tokens[None], features[None])  # [1, T, H]
            positions = torch.arange(start, start + T, device=x.device)[None]
            causal = torch.ones(T, start + T, dtype=torch.bool, device=x.device).tril(start)[None, None]
            self.last_out = self.drafter.serial(x, positions, causal, self.cache)[0, -1]
        self.committed += T


def _logprobs(drafter: GumihoDrafter, features: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(drafter.logits(features).float(), dim=-1)


@dataclass
class _Run:
    """The last serial level run through the drafter, row by row (one row per node of that level)."""

    out: torch.Tensor  # [n, H] drafter outputs
    chain: torch.Tensor | None  # [n, d * H] fused inputs of each node's ancestry, depth 1 first (gumiho only)
    mask: torch.Tensor  # [n, S] bool: the cache slots each node saw (context, its ancestors, itself)


def _run_nodes(ctx: DraftContext, front: Frontier, parent_out: torch.Tensor, prev: _Run | None,
               depth: int, chained: bool) -> _Run:
    """Run a level's kept nodes through the serial stack, each seeing the context, its ancestors and itself."""
    drafter, n, L = ctx.drafter, front.size, ctx.committed
    fused = drafter.fuse(front.tokens[None], parent_out[None])[0]  # [n, H]
    own = torch.eye(n, dtype=torch.bool, device=fused.device)  # [n, n]
    if prev is None:  # depth 1: the context alone came before
        seen = torch.ones(n, L, dtype=torch.bool, device=fused.device)  # [n, L]
    else:  # a parent's row already holds the context, the parent's ancestors and the parent
        seen = prev.mask[front.rows]  # [n, S_prev]
    mask = torch.cat((seen, own), dim=1)  # [n, cache + n]
    positions = torch.full((1, n), L + depth - 1, device=fused.device)
    out = drafter.serial(fused[None], positions, mask[None, None], ctx.cache)[0]  # [n, H]
    chain = None
    if chained:
        chain = fused if prev is None else torch.cat((prev.chain[front.rows], fused), dim=-1)
    return _Run(out, chain, mask)


def _parent_out(ctx: DraftContext, front: Frontier, run: _Run | None) -> torch.Tensor:
    """Drafter outputs [n, H] of the frontier's parents: the root's is the context's last output."""
    if run is None:
        return ctx.last_out[None].expand(front.size, -1)
    return run.out[front.rows]


def _serial_levels(ctx: DraftContext, pool: Pool, cfg: TreeConfig, levels: int, clock: Stopwatch,
                   phases: list) -> tuple[Frontier | None, _Run | None]:
    """Depth 1 from the context's last output; each deeper level runs the previous level's best top_k (on a CPU
    only those that can still make the tree; a None frontier: none could, and drafting stops)."""
    drafter, s = ctx.drafter, ctx.drafter.cfg.serial_steps
    pool_all, chained = cfg.mode == SERIAL or cfg.pool == "all", cfg.mode != SERIAL
    front, run = pool.root_frontier((ctx.last_out if ctx.last_out is not None else ctx.last_feature).device), None
    if not levels:
        return front, run
    prune = prunes(ctx.last_out.device)
    logp = _logprobs(drafter, ctx.last_out[None])  # [1, V]
    for d in range(1, levels + 1):
        if d > 1:
            if prune and (front := reachable(pool, front, cfg.total_tokens)) is None:
                break
            run = _run_nodes(ctx, front, _parent_out(ctx, front, run), run, d - 1, chained)
            logp = _logprobs(drafter, run.out)  # [n, V]
        name, before = proposer_name(cfg.mode, d, s), pool.size
        front = expand_serial(pool, front, logp, cfg.top_k, d, name, drafter.to_target_ids, pool_all)
        phases.append(DraftPhase(name=name, depths=(d,), candidates=pool.size - before, seconds=clock.lap()))
    return front, run


def _parallel_levels(ctx: DraftContext, pool: Pool, cfg: TreeConfig, front: Frontier, run: _Run | None,
                     n_heads: int, clock: Stopwatch, phases: list) -> None:
    """The MLP heads read each last-serial-level node's OWN ancestry of fused inputs (Gumiho), or the target's
    last feature below the root (Medusa style: no serial levels, one row).

    On a GPU all heads run at once, in one batch, with no host read. On a CPU, where arithmetic and not launches
    is the cost, the first FIRST_HEADS run at once and each later head only on the rows a path that can still make
    the tree comes from, stopping at the first head no such path reaches (pool.expand_beam); the tree is the same.
    """
    drafter, s = ctx.drafter, ctx.drafter.cfg.serial_steps
    if drafter.cfg.heads_read == "target":
        chains = ctx.last_feature[None]  # [1, H]: the root's row
    else:
        last_fused = drafter.fuse(front.tokens, _parent_out(ctx, front, run))  # [n, H]
        chains = last_fused if run is None else torch.cat((run.chain[front.rows], last_fused), dim=-1)  # [n, s*H]
    prune = prunes(chains.device)
    batched = min(FIRST_HEADS, n_heads) if prune else n_heads
    logp = _logprobs(drafter, drafter.heads(chains, batched))  # [batched, n, V]
    k = min(cfg.mlp_topk, logp.shape[-1])
    top = logp.topk(k, dim=-1)  # [batched, n, k]

    def head_top(m: int, rows: torch.Tensor | None):
        if m < batched:
            return (top.values[m], top.indices[m]) if rows is None else (top.values[m][rows], top.indices[m][rows])
        later = _logprobs(drafter, drafter.heads(chains[rows], m + 1, first=m)[0]).topk(k, dim=-1)  # [r, k]
        return later.values, later.indices

    before = pool.size
    ran = expand_beam(pool, front, head_top, cfg, s + 1,
                      [proposer_name(cfg.mode, s + 1 + m, s) for m in range(n_heads)], drafter.to_target_ids, prune)
    if ran:
        phases.append(DraftPhase(name=PARALLEL, depths=tuple(range(s + 1, s + 1 + ran)),
                                 candidates=pool.size - before, seconds=clock.lap()))


@torch.inference_mode()
def build_tree(ctx: DraftContext, root_token: int, cfg: TreeConfig, max_depth: int | None = None,
               clock: Stopwatch | None = None) -> tuple[DraftTree, tuple[DraftPhase, ...]]:
    """Draft a tree below `root_token` (the target's last token) from the drafter's current state.

    max_depth caps the depth (near the end of the context). Leaves the drafter cache as it found it.
    """
    drafter, clock = ctx.drafter, clock or Stopwatch(None)
    depth = min(cfg.depth, max_depth if max_depth is not None else cfg.depth)
    if depth < 1:
        return DraftTree((int(root_token),), (-1,), (0,), (ROOT,), (0.0,), (0.0,)), ()
    serial_depth = depth if cfg.mode == SERIAL else min(depth, drafter.cfg.serial_steps)
    n_heads = min(depth - serial_depth, drafter.cfg.mlp_heads)
    pool, phases = Pool(int(root_token)), []
    clock.start()
    front, run = _serial_levels(ctx, pool, cfg, serial_depth, clock, phases)
    if n_heads > 0 and front is not None:
        _parallel_levels(ctx, pool, cfg, front, run, n_heads, clock, phases)
    if ctx.cache is not None:
        ctx.cache.crop(ctx.committed)
    return pool.select(cfg.total_tokens), tuple(phases)

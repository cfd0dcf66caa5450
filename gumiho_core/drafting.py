"""Drafting a tree with the Gumiho drafter (GUMIHO.md, "Drafting a tree"), both upstream bugs fixed.

The drafter's runtime state between steps is a `DraftContext`: its KV cache over the committed
(feature, next token) pairs and its output at the last pair. `build_tree` proposes candidates into
a pool level by level, then keeps the best `total_tokens - 1` as a `DraftTree`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import SERIAL, TreeConfig
from .drafter import GumihoDrafter
from .timing import Stopwatch
from .tree import PARALLEL, ROOT, DraftTree, proposer_name


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
    last_out: torch.Tensor | None = None  # [H] drafter output at the last committed pair

    def __post_init__(self):
        self.cache = self.drafter.new_cache()

    def ingest(self, features: torch.Tensor, next_tokens: torch.Tensor) -> None:
        """Run the serial stack over new pairs (target feature f_i, token x_{i+1}). [T, H], [T]"""
        T = next_tokens.shape[0]
        self.cache.crop(self.committed)
        start = self.committed
        weight = self.drafter.fc.weight  # the target's features come from its last layer's device (--device-map)
        x = self.drafter.fuse(next_tokens[None], features[None].to(weight.device, weight.dtype))  # [1, T, H]
        positions = torch.arange(start, start + T, device=x.device)[None]
        causal = torch.ones(T, start + T, dtype=torch.bool, device=x.device).tril(start)[None, None]
        out = self.drafter.serial(x, positions, causal, self.cache)
        self.committed += T
        self.last_out = out[0, -1]


@dataclass
class _Pool:
    """Candidate nodes in proposal order; index 0 is the root."""

    tokens: list = field(default_factory=list)
    parents: list = field(default_factory=list)
    depth: list = field(default_factory=list)
    logprob: list = field(default_factory=list)
    score: list = field(default_factory=list)
    proposer: list = field(default_factory=list)

    def add(self, tokens, parents, depth, logprobs, scores, proposer) -> list[int]:
        first = len(self.tokens)
        self.tokens += tokens
        self.parents += parents
        self.depth += [depth] * len(tokens)
        self.logprob += logprobs
        self.score += scores
        self.proposer += [proposer] * len(tokens)
        return list(range(first, len(self.tokens)))


def _logprobs(drafter: GumihoDrafter, features: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(drafter.logits(features).float(), dim=-1)


def _ancestors(pool: _Pool, node: int) -> list[int]:
    out = []
    while node > 0:
        out.append(node)
        node = pool.parents[node]
    return out


def _run_nodes(ctx: DraftContext, pool: _Pool, nodes: list[int], parent_out: torch.Tensor,
               slots: dict[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Run drafted nodes through the serial stack, each seeing the context, its own run ancestors and itself.

    Returns (fused inputs [n, H], outputs [n, H]); records each node's cache slot in `slots`.
    """
    drafter, cache = ctx.drafter, ctx.cache
    n, L, past = len(nodes), ctx.committed, cache.length
    tokens = torch.tensor([pool.tokens[i] for i in nodes], device=parent_out.device)
    fused = drafter.fuse(tokens[None], parent_out[None])  # [1, n, H]
    mask = torch.zeros(n, past + n, dtype=torch.bool)
    mask[:, :L] = True
    for row, node in enumerate(nodes):
        for a in _ancestors(pool, pool.parents[node]):
            mask[row, slots[a]] = True
        mask[row, past + row] = True
        slots[node] = past + row
    positions = torch.full((1, n), L + pool.depth[nodes[0]] - 1, device=fused.device)
    out = drafter.serial(fused, positions, mask[None, None].to(fused.device), cache)
    return fused[0], out[0]


def _expand_serial(pool: _Pool, parents: list[int], logp: torch.Tensor, top_k: int, depth: int,
                   proposer: str, to_target, pool_all: bool) -> list[int]:
    """Top-k children of each parent row of logp [P, V]; the best top_k of them stay expandable.

    pool_all: all P * k children may be chosen into the tree (EAGLE-2), else only the kept top_k (Gumiho).
    Returns the kept ones' pool indices, best first.
    """
    k = min(top_k, logp.shape[-1])
    top = logp.topk(k, dim=-1)
    base = torch.tensor([pool.score[p] for p in parents], device=logp.device)[:, None]
    cum = (top.values + base).flatten()  # [P * k]
    keep = cum.topk(min(top_k, cum.numel())).indices.tolist()
    rows = range(cum.numel()) if pool_all else keep
    tokens, logq = to_target(top.indices).flatten().tolist(), top.values.flatten().tolist()
    new = pool.add([tokens[i] for i in rows], [parents[i // k] for i in rows], depth, [logq[i] for i in rows],
                   [float(cum[i]) for i in rows], proposer)
    index = dict(zip(rows, new))
    return [index[i] for i in keep]


def _beam_mlp(pool: _Pool, rows: list[int], logp: torch.Tensor, cfg: TreeConfig, first_depth: int,
              to_target) -> int:
    """Beam search over the MLP heads' distributions logp [heads, rows, V]; returns candidates added."""
    heads = logp.shape[0]
    k = min(cfg.mlp_topk, logp.shape[-1])
    top = logp.topk(k, dim=-1)  # [heads, rows, k]
    vals, idx = top.values.cpu(), to_target(top.indices).cpu()
    beam = list(rows)  # pool nodes, each tagged with its MLP row
    beam_row = list(range(len(rows)))
    added = 0
    for m in range(heads):
        r = torch.tensor(beam_row)
        base = torch.tensor([pool.score[b] for b in beam])[:, None]
        cum = (vals[m, r] + base).flatten()  # [beam * k]
        keep = cum.topk(min(cfg.pruning, cum.numel())).indices
        src, col = (keep // k).tolist(), (keep % k).tolist()
        new = pool.add([int(idx[m, beam_row[s], c]) for s, c in zip(src, col)], [beam[s] for s in src],
                       first_depth + m, [float(vals[m, beam_row[s], c]) for s, c in zip(src, col)],
                       cum[keep].tolist(), proposer_name(cfg.mode, first_depth + m, first_depth - 1))
        beam, beam_row = new, [beam_row[s] for s in src]
        added += len(new)
    return added


def _select(pool: _Pool, total_tokens: int, max_depth: int) -> DraftTree:
    """The best total_tokens - 1 candidates by score (ancestors first on ties), in topological order."""
    cands = [i for i in range(1, len(pool.tokens)) if pool.depth[i] <= max_depth]
    chosen = sorted(cands, key=lambda i: (-pool.score[i], pool.depth[i], i))[: total_tokens - 1]
    order = [0] + sorted(chosen, key=lambda i: (pool.depth[i], -pool.score[i], i))
    index = {old: new for new, old in enumerate(order)}
    return DraftTree(
        tokens=tuple(int(pool.tokens[i]) for i in order),
        parents=tuple(-1 if i == 0 else index[pool.parents[i]] for i in order),
        depth=tuple(pool.depth[i] for i in order),
        proposer=tuple(pool.proposer[i] for i in order),
        logprob=tuple(float(pool.logprob[i]) for i in order),
        score=tuple(float(pool.score[i]) for i in order),
    )


@dataclass
class _Serial:
    """What the serial levels leave for the parallel one: each run node's output and fused input."""

    out_of: dict  # pool node -> drafter output [H] (the root's is the context's last output)
    fused_of: dict  # pool node -> its fused input fc(emb(token), parent output) [H]
    frontier: list  # the last serial level's best top_k nodes


def _serial_levels(ctx: DraftContext, pool: _Pool, cfg: TreeConfig, levels: int, clock: Stopwatch,
                   phases: list) -> _Serial:
    """Depth 1 from the context's last output; each deeper level runs the previous level's best top_k."""
    drafter, to_target = ctx.drafter, ctx.drafter.to_target_ids
    first, pool_all = proposer_name(cfg.mode, 1, drafter.cfg.serial_steps), cfg.mode == SERIAL or cfg.pool == "all"
    before = len(pool.tokens)
    frontier = _expand_serial(pool, [0], _logprobs(drafter, ctx.last_out[None]), cfg.top_k, 1, first, to_target,
                              pool_all)
    phases.append(DraftPhase(name=first, depths=(1,), candidates=len(pool.tokens) - before, seconds=clock.lap()))
    state, slots = _Serial({0: ctx.last_out}, {}, frontier), {}
    for d in range(2, levels + 1):
        parent_out = torch.stack([state.out_of[pool.parents[i]] for i in state.frontier])  # [n, H]
        fused, out = _run_nodes(ctx, pool, state.frontier, parent_out, slots)
        for row, node in enumerate(state.frontier):
            state.out_of[node], state.fused_of[node] = out[row], fused[row]
        name, before = proposer_name(cfg.mode, d, drafter.cfg.serial_steps), len(pool.tokens)
        state.frontier = _expand_serial(pool, state.frontier, _logprobs(drafter, out), cfg.top_k, d, name, to_target,
                                        pool_all)
        phases.append(DraftPhase(name=name, depths=(d,), candidates=len(pool.tokens) - before, seconds=clock.lap()))
    return state


def _parallel_levels(ctx: DraftContext, pool: _Pool, cfg: TreeConfig, serial: _Serial, n_heads: int,
                     clock: Stopwatch, phases: list) -> None:
    """The MLP heads read each last-serial-level node's OWN ancestry of fused inputs, all depths at once."""
    drafter, s = ctx.drafter, ctx.drafter.cfg.serial_steps
    frontier = serial.frontier
    parent_out = torch.stack([serial.out_of[pool.parents[i]] for i in frontier])
    tokens = torch.tensor([pool.tokens[i] for i in frontier], device=parent_out.device)
    last_fused = drafter.fuse(tokens, parent_out)  # [n, H]
    chains = [torch.cat([serial.fused_of[a] for a in reversed(_ancestors(pool, pool.parents[node]))]
                        + [last_fused[row]]) for row, node in enumerate(frontier)]  # each [s * H]
    feats = drafter.heads(torch.stack(chains), n_heads)  # [heads, n, H]
    added = _beam_mlp(pool, frontier, _logprobs(drafter, feats), cfg, s + 1, drafter.to_target_ids)
    phases.append(DraftPhase(name=PARALLEL, depths=tuple(range(s + 1, s + 1 + n_heads)), candidates=added,
                             seconds=clock.lap()))


@torch.inference_mode()
def build_tree(ctx: DraftContext, root_token: int, cfg: TreeConfig, max_depth: int | None = None,
               clock: Stopwatch | None = None) -> tuple[DraftTree, tuple[DraftPhase, ...]]:
    """Draft a tree below `root_token` (the target's last token) from the drafter's current state.

    max_depth caps the depth (near the end of the context). Leaves the drafter cache as it found it.
    """
    drafter, clock = ctx.drafter, clock or Stopwatch(None)
    depth = min(cfg.depth, max_depth if max_depth is not None else cfg.depth)
    serial_depth = depth if cfg.mode == SERIAL else min(depth, drafter.cfg.serial_steps)
    n_heads = min(depth - serial_depth, drafter.cfg.mlp_heads)
    pool, phases = _Pool(), []
    pool.add([int(root_token)], [-1], 0, [0.0], [0.0], ROOT)
    if depth >= 1:
        clock.start()
        serial = _serial_levels(ctx, pool, cfg, serial_depth, clock, phases)
        if n_heads > 0:
            _parallel_levels(ctx, pool, cfg, serial, n_heads, clock, phases)
        ctx.cache.crop(ctx.committed)
    return _select(pool, cfg.total_tokens if depth >= 1 else 1, depth), tuple(phases)

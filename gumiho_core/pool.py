"""The candidate pool of one draft step, on the drafter's device: what each level proposed, and the selection.

Nodes are numbered in proposal order, the root 0, then level by level (so a node's depth never falls as its
number grows). Levels hold tensors; the host knows only their sizes, which the shapes fix. `select` keeps the
best `total_tokens - 1` and reads the tree back in one packed copy.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import TreeConfig
from .tree import ROOT, DraftTree


@dataclass(frozen=True)
class Frontier:
    """A level's nodes that stay expandable, best first."""

    nodes: torch.Tensor  # [n] pool numbers
    scores: torch.Tensor  # [n] cumulative draft log-probs
    tokens: torch.Tensor | None  # [n] target token ids (None for the root)
    rows: torch.Tensor | None  # [n] each node's parent's row in the frontier it was expanded from (None: root)
    size: int  # n

    def __post_init__(self):
        assert self.nodes.shape == (self.size,), f"frontier of {self.size} nodes has {tuple(self.nodes.shape)}"


@dataclass(frozen=True)
class _Level:
    depth: int
    proposer: str
    tokens: torch.Tensor  # [c] target token ids
    parents: torch.Tensor  # [c] pool numbers
    logprob: torch.Tensor  # [c] draft log-prob of the token given its parent
    score: torch.Tensor  # [c] cumulative draft log-prob from the root


class Pool:
    def __init__(self, root_token: int):
        self.root_token = root_token
        self.levels: list[_Level] = []
        self.size = 1  # the root

    def root_frontier(self, device) -> Frontier:
        zero = torch.zeros(1, dtype=torch.long, device=device)  # [1]
        return Frontier(zero, torch.zeros(1, device=device), None, None, 1)

    def add(self, depth: int, proposer: str, tokens, parents, logprob, score) -> int:
        """Append a level's candidates; returns the pool number of the first."""
        assert tokens.shape == parents.shape == logprob.shape == score.shape, "a level's arrays differ in shape"
        self.levels.append(_Level(depth, proposer, tokens, parents, logprob, score))
        first, self.size = self.size, self.size + tokens.numel()
        return first

    def select(self, total_tokens: int) -> DraftTree:
        """The best total_tokens - 1 candidates by score (ancestors first on ties), in topological order."""
        field = lambda name: torch.cat([getattr(lv, name) for lv in self.levels])  # noqa: E731  [size - 1]
        score = field("score")
        n = min(total_tokens - 1, self.size - 1)
        # stable: equal scores keep pool order, so a parent (numbered first) precedes a child of probability 1
        best = score.sort(descending=True, stable=True).indices[:n]  # [n] pool number - 1
        ends = torch.tensor(_level_ends(self.levels), device=score.device)  # [levels]
        level = torch.bucketize(best, ends, right=True)  # [n]
        by_depth = level.sort(stable=True).indices  # [n] (depth, -score, number) order
        chosen, level = best[by_depth], level[by_depth]
        renumber = torch.zeros(self.size, dtype=torch.long, device=score.device)  # pool number -> tree index
        renumber[chosen + 1] = torch.arange(1, n + 1, device=score.device)
        packed = torch.stack([x.double() for x in (field("tokens")[chosen], renumber[field("parents")[chosen]],
                                                   level, field("logprob")[chosen], score[chosen])])  # [5, n]
        return self._tree(*packed.tolist())

    def _tree(self, tokens, parents, level, logprob, score) -> DraftTree:
        levels = [self.levels[int(i)] for i in level]
        return DraftTree(tokens=(self.root_token,) + tuple(int(t) for t in tokens),
                         parents=(-1,) + tuple(int(p) for p in parents),
                         depth=(0,) + tuple(lv.depth for lv in levels),
                         proposer=(ROOT,) + tuple(lv.proposer for lv in levels),
                         logprob=(0.0,) + tuple(logprob), score=(0.0,) + tuple(score))


def _level_ends(levels) -> list[int]:
    ends, total = [], 0
    for lv in levels:
        total += lv.tokens.numel()
        ends.append(total)
    return ends


def _numbers(first: int, n: int, device) -> torch.Tensor:
    return torch.arange(first, first + n, device=device)  # [n]


def expand_serial(pool: Pool, front: Frontier, logp: torch.Tensor, top_k: int, depth: int, proposer: str,
                  to_target, pool_all: bool) -> Frontier:
    """Top-k children of each frontier row of logp [P, V]; the best top_k of them stay expandable.

    pool_all: all P * k children may be chosen into the tree (EAGLE-2), else only the kept top_k (Gumiho).
    """
    k = min(top_k, logp.shape[-1])
    top = logp.topk(k, dim=-1)  # [P, k]
    cum = (top.values + front.scores[:, None]).flatten()  # [P * k]
    K = min(top_k, cum.numel())
    keep = cum.topk(K).indices  # [K] best first
    tokens, logq, rows = to_target(top.indices).flatten(), top.values.flatten(), keep // k  # [P * k] x2, [K]
    kept_tokens, kept_scores = tokens[keep], cum[keep]  # [K]
    if pool_all:
        first = pool.add(depth, proposer, tokens, front.nodes.repeat_interleave(k), logq, cum)
        nodes = keep + first
    else:
        first = pool.add(depth, proposer, kept_tokens, front.nodes[rows], logq[keep], kept_scores)
        nodes = _numbers(first, K, keep.device)
    return Frontier(nodes, kept_scores, kept_tokens, rows, K)


def cutoff(pool: Pool, total_tokens: int) -> torch.Tensor | None:
    """The score a node needs to stay in the running for the tree: the pool's (total_tokens - 1)-th best so far.

    The selection keeps the best total_tokens - 1 nodes, and adding nodes only raises that bar, so a node scoring
    below it now can never be chosen, nor can any of its descendants (a child scores at most its parent). None
    while the pool holds fewer nodes than the tree takes.
    """
    n = total_tokens - 1
    if pool.size - 1 < n:
        return None
    return torch.cat([lv.score for lv in pool.levels]).topk(n).values[-1]


def reachable(pool: Pool, front: Frontier, total_tokens: int) -> Frontier | None:
    """The frontier's nodes whose children could still make the tree, or None when none can.

    A mask picks them (a frontier is best first, so they lead it), and the result's shape says how many: no
    element is read into Python, though on a GPU sizing a tensor by its contents would wait for the queue.
    """
    bar = cutoff(pool, total_tokens)
    if bar is None:
        return front
    alive = front.scores >= bar  # [n]
    nodes = front.nodes[alive]
    n = nodes.shape[0]
    if n == front.size or n == 0:
        return front if n else None
    return Frontier(nodes, front.scores[alive], front.tokens[alive], front.rows[alive], n)


def expand_beam(pool: Pool, front: Frontier, head_top, cfg: TreeConfig, first_depth: int, proposers: list[str],
                to_target, prune: bool = False) -> int:
    """Beam search over the MLP heads (one level per head, each named in `proposers`) from `front`; returns how
    many heads ran.

    head_top(m, rows) gives head m's top mlp_topk draft log-probs and draft ids ([r, k] each) at the front rows
    `rows` (None: every row, in front order). With prune, before each head the beam drops the paths that score
    below the cutoff (no node below them can make the tree), the head runs only on the front rows the remaining
    paths come from, and drafting stops at the first head no path can reach. The tree is the same either way.
    Pruning sizes tensors by their contents (a mask), which on a CPU costs nothing and on a GPU would wait for
    the queue.
    """
    beam, beam_row, base = front.nodes, None, front.scores  # beam_row: each path's front row (None: the front)
    for m, proposer in enumerate(proposers):
        rows, local = None, beam_row
        if prune:
            bar = cutoff(pool, cfg.total_tokens)
            if beam_row is None:
                beam_row = torch.arange(front.size, device=base.device)
            if bar is not None:
                alive = base >= bar
                beam, beam_row, base = beam[alive], beam_row[alive], base[alive]
                if not beam.shape[0]:  # no path can reach the tree
                    return m
            rows, local = torch.unique(beam_row, return_inverse=True)  # rows sorted, local: each path's row in them
        vals, ids = head_top(m, rows)  # [r, k]
        if local is not None:
            vals, ids = vals[local], ids[local]  # [paths, k]
        k = vals.shape[-1]
        cum = (vals + base[:, None]).flatten()  # [paths * k]
        width = min(cfg.pruning, cum.numel())
        keep = cum.topk(width).indices  # [width] best first
        src, base = keep // k, cum[keep]
        first = pool.add(first_depth + m, proposer, to_target(ids.flatten()[keep]), beam[src],
                         vals.flatten()[keep], base)
        beam, beam_row = _numbers(first, width, keep.device), src if beam_row is None else beam_row[src]
    return len(proposers)

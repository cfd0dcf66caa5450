"""Tree shapes weighed against each other: what each would have accepted, read off large verified trees, and
what it would cost here (costs.py).

Each node's logits depend only on its own ancestors, so the target's verdict on every node of a large drafted
tree says exactly what any smaller tree drawn from it would have accepted. A candidate is a (top_k, depth,
node count, pool) shape; its expected tokens/s = (1 + expected accepted) / (draft + verify(n) + commit).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..config import HYBRID, POOLS, SERIAL, DrafterConfig, TreeConfig
from ..tree import DraftTree
from .costs import BEAM, NODES_GRID, Costs

DEEP_SHARE = 0.5  # auto's trees must reach past the serial steps in at least this share of the calibration steps
KEPT, ALL = POOLS  # Gumiho's own pool (only the kept serial candidates), and EAGLE-2's (all of them)


def _sibling_rank(tree: DraftTree) -> list[int]:
    rank = [0] * len(tree)
    for kids in tree.children:  # children are sorted best-first
        for r, k in enumerate(kids):
            rank[k] = r
    return rank


def _best(nodes, tree: DraftTree, n: int) -> list[int]:
    return sorted(nodes, key=lambda i: -tree.score[i])[:n]


def candidate_order(tree: DraftTree, mode: str, top_k: int, depth: int,
                    serial_steps: int = DrafterConfig.serial_steps, pool: str = ALL) -> list[int]:
    """Nodes a (top_k, depth, pool) drafter would propose, approximated inside a larger drafted tree, best first.

    A tree of n nodes keeps the root and the first n - 1 of them (an ancestor-closed set). The large tree
    should pool all candidates (pool "all"): a smaller pool is then a subset of it.
    """
    rank = _sibling_rank(tree)
    serial_levels = depth if mode == SERIAL else serial_steps
    kept_only = mode == HYBRID and pool == KEPT
    valid = {0}
    for d in range(1, depth + 1):
        prev = [i for i in valid if tree.depth[i] == d - 1]
        width = top_k if d - 1 <= serial_levels else BEAM  # only the best `width` of a level have children
        expanded = set(_best(prev, tree, width)) if d >= 2 else {0}
        level = [i for i in range(len(tree)) if tree.depth[i] == d and tree.parents[i] in expanded]
        if d <= serial_levels:
            level = [i for i in level if rank[i] < top_k]
            if kept_only and d >= 2:  # Gumiho pools only the top_k it keeps to expand
                level = _best(level, tree, top_k)
        valid |= set(level)
    return sorted(valid - {0}, key=lambda i: (-tree.score[i], tree.depth[i], i))


def accepted_in(tree: DraftTree, keep: set[int], target_token) -> int:
    node, accepted = 0, 0
    while True:
        nxt = next((c for c in tree.children[node] if c in keep and tree.tokens[c] == target_token[node]), None)
        if nxt is None:
            return accepted
        node, accepted = nxt, accepted + 1


@dataclass(frozen=True, order=True)
class Candidate:
    """A tree shape with what it should yield here; candidates sort by tokens/s (then by the other fields)."""

    tokens_per_s: float
    tokens_per_step: float  # expected, bonus included
    step_s: float  # predicted seconds per step
    top_k: int
    depth: int
    nodes: int
    pool: str = KEPT
    deep_share: float = 0.0  # calibration steps whose tree of this shape held a node deeper than the serial steps

    def tree(self, mode: str) -> TreeConfig:
        return TreeConfig(mode=mode, top_k=self.top_k, mlp_topk=BEAM, pruning=BEAM, total_tokens=self.nodes,
                          depth=self.depth, pool=self.pool)

    def to_dict(self, mode: str) -> dict:
        return {"tree": self.tree(mode).to_dict(), "tokens_per_step": round(self.tokens_per_step, 3),
                "step_s": round(self.step_s, 5), "tokens_per_s": round(self.tokens_per_s, 2),
                "deep_share": round(self.deep_share, 3)}


def candidates(steps, mode: str, serial_steps: int, costs: Costs) -> list[Candidate]:
    """Every measured (top_k, depth) with every node count (and, for Gumiho, both pools), best first.
    `steps`: (tree, target_token) pairs."""
    out = []
    for pool in POOLS if mode == HYBRID else (KEPT,):
        for k, depth in costs.draft_s:
            orders = [candidate_order(t, mode, k, depth, serial_steps, pool) for t, _ in steps]
            for n in NODES_GRID:
                per_step = 1 + statistics.mean(accepted_in(t, {0, *order[: n - 1]}, tt)
                                               for (t, tt), order in zip(steps, orders))
                deep = statistics.mean(any(t.depth[i] > serial_steps for i in order[: n - 1])
                                       for (t, _), order in zip(steps, orders))
                step = costs.step_s(k, depth, n)
                out.append(Candidate(tokens_per_s=per_step / step, tokens_per_step=per_step, step_s=step, top_k=k,
                                     depth=depth, nodes=n, pool=pool, deep_share=deep))
    return sorted(out, reverse=True)


def ranked(steps, mode: str, serial_steps: int, costs: Costs) -> tuple[Candidate, Candidate | None, list[Candidate]]:
    """(auto, fastest, runners-up). auto, in hybrid mode: the fastest candidate that drafts deeper than the serial
    steps (the MLP heads take part) in at least DEEP_SHARE of the calibration steps, else the fastest whose depth
    allows it, else the fastest of all; in serial mode the fastest of all. fastest: the fastest of any depth, None
    when that is auto itself; runners-up: the next five of auto's kind."""
    every = candidates(steps, mode, serial_steps, costs)
    if mode == SERIAL:
        return every[0], None, every[1:6]
    allowed = [c for c in every if c.depth > serial_steps]
    deep = [c for c in allowed if c.deep_share >= DEEP_SHARE] or allowed or every
    auto = deep[0]
    return auto, (every[0] if every[0] != auto else None), deep[1:6]

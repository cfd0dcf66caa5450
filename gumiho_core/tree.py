"""The draft tree: one frozen value that drives verification and the picture in the browser.

Node 0 is the root: the last token the target produced, not yet in its KV cache. Every other node
is a drafted token whose parent comes before it (topological order). Masks, position ids and
paths are derived here and nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from .config import SERIAL, DrafterConfig

ROOT, PARALLEL = "root", "parallel"  # the root's proposer; the drafting phase of every MLP head
SERIAL_STEP, MLP_HEAD = "serial", "mlp"  # proposers are "serial<d>" and "mlp<m>", 1-based


def proposer_name(mode: str, depth: int, serial_steps: int = DrafterConfig.serial_steps) -> str:
    """Label of what drafted a node at `depth`: serial step d, or MLP head m (1-based)."""
    if mode == SERIAL or depth <= serial_steps:
        return f"{SERIAL_STEP}{depth}"
    return f"{MLP_HEAD}{depth - serial_steps}"


def phase_of(proposer: str) -> str:
    """The drafting phase that proposed a node: each serial step is a phase of its own (named like its
    proposer); the MLP heads all draft at once, in the phase "parallel"."""
    return PARALLEL if proposer.startswith(MLP_HEAD) else proposer


@dataclass(frozen=True, eq=False)
class DraftTree:
    tokens: tuple[int, ...]  # token id per node
    parents: tuple[int, ...]  # parent index per node, -1 for the root
    depth: tuple[int, ...]  # 0 for the root
    proposer: tuple[str, ...]  # "root", "serial1", "serial2", "mlp1".."mlp5" (see proposer_name)
    logprob: tuple[float, ...]  # drafter log-prob of the node's token given its parent (0 for the root)
    score: tuple[float, ...]  # cumulative draft log-prob from the root

    def __post_init__(self):
        n = len(self.tokens)
        lengths = {len(a) for a in (self.parents, self.depth, self.proposer, self.logprob, self.score)}
        assert lengths == {n}, f"parallel arrays differ in length: {n} tokens vs {sorted(lengths)}"
        assert n >= 1 and self.parents[0] == -1 and self.depth[0] == 0, "node 0 must be the root"
        for i in range(1, n):
            p = self.parents[i]
            assert 0 <= p < i, f"node {i} has parent {p}: parents must come first"
            assert self.depth[i] == self.depth[p] + 1, f"node {i} depth {self.depth[i]} != parent's + 1"

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    @cached_property
    def phase(self) -> tuple[str, ...]:
        """The drafting phase (DraftPhase.name) that proposed each node; "root" for the root."""
        return tuple(phase_of(p) for p in self.proposer)

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """Children of each node, best draft score first."""
        kids: list[list[int]] = [[] for _ in self.tokens]
        for i in range(1, len(self)):
            kids[self.parents[i]].append(i)
        return tuple(tuple(sorted(k, key=lambda i: -self.score[i])) for k in kids)

    def path_to(self, node: int) -> tuple[int, ...]:
        """Node indices from the root down to `node`."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return tuple(reversed(path))

    @cached_property
    def paths(self) -> tuple[tuple[int, ...], ...]:
        """Every root-to-leaf path."""
        return tuple(self.path_to(i) for i in range(len(self)) if not self.children[i])

    @cached_property
    def ancestor_rows(self) -> tuple[tuple[bool, ...], ...]:
        """Row q: for each node k, whether k is q or an ancestor of q (host values: no tensor op per node)."""
        rows: list[list[bool]] = []
        for q in range(len(self)):
            row = list(rows[self.parents[q]]) if q else [False] * len(self)
            row[q] = True
            rows.append(row)
        return tuple(tuple(r) for r in rows)

    @cached_property
    def ancestor_mask(self) -> torch.Tensor:
        """[n, n] bool: entry (q, k) is True iff k is q or an ancestor of q."""
        return torch.tensor(self.ancestor_rows, dtype=torch.bool)

    def attention_mask(self, past_len: int, dtype: torch.dtype, device) -> torch.Tensor:
        """[1, 1, n, past_len + n] additive mask: the whole context is visible, tree nodes see their ancestors."""
        n = len(self)
        mask = torch.zeros(1, 1, n, past_len + n, dtype=dtype, device=device)
        hidden = ~self.ancestor_mask.to(device)  # [n, n]
        mask[0, 0, :, past_len:].masked_fill_(hidden, torch.finfo(dtype).min)
        return mask

    def position_ids(self, past_len: int, device=None) -> torch.Tensor:
        """[1, n]: the root sits at position past_len, a node at depth d at past_len + d."""
        return torch.tensor([[past_len + d for d in self.depth]], dtype=torch.long, device=device)

    def truncated(self, max_depth: int) -> "DraftTree":
        """The nodes no deeper than max_depth (ancestor-closed, order kept)."""
        keep = [i for i in range(len(self)) if self.depth[i] <= max_depth]
        if len(keep) == len(self):
            return self
        new_index = {old: new for new, old in enumerate(keep)}
        parents = tuple(-1 if self.parents[i] < 0 else new_index[self.parents[i]] for i in keep)
        pick = lambda a: tuple(a[i] for i in keep)  # noqa: E731
        return DraftTree(tokens=pick(self.tokens), parents=parents, depth=pick(self.depth),
                         proposer=pick(self.proposer), logprob=pick(self.logprob), score=pick(self.score))

    def to_dict(self) -> dict:
        return {
            "tokens": list(self.tokens),
            "parents": list(self.parents),
            "depth": list(self.depth),
            "proposer": list(self.proposer),
            "logprob": [round(x, 5) for x in self.logprob],
            "score": [round(x, 5) for x in self.score],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "DraftTree":
        return cls(
            tokens=tuple(int(x) for x in d["tokens"]),
            parents=tuple(int(x) for x in d["parents"]),
            depth=tuple(int(x) for x in d["depth"]),
            proposer=tuple(str(x) for x in d["proposer"]),
            logprob=tuple(float(x) for x in d["logprob"]),
            score=tuple(float(x) for x in d["score"]),
        )

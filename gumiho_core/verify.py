"""Verification: which drafted path the target accepts, and its bonus token. Both rules are lossless.

Greedy: accept the longest path whose every token is the target's argmax after its parent.
Sampling (EAGLE-2 rule for a deterministic drafter): walk down from the root; try the children of
the current node in turn, accepting child x with probability p(x) under the residual p; a rejected
child is zeroed and p renormalised; when all children fail, the bonus is drawn from the residual.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .tree import DraftTree


@dataclass(frozen=True)
class Verdict:
    accepted: tuple[int, ...]  # node indices of the accepted path, root first
    bonus: int  # the target's own token after the last accepted node
    target_token: tuple[int, ...]  # per node: the target's argmax after that node
    target_prob: tuple[float, ...]  # per node: target probability of the node's token given its parent (root: 1)

    @property
    def accept_length(self) -> int:
        """Drafted tokens accepted (root excluded)."""
        return len(self.accepted) - 1


def warp(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Target probabilities after temperature and nucleus filtering. logits [..., V] -> probs [..., V] (fp32)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)
    outside = sorted_p.cumsum(-1) - sorted_p >= top_p  # mass before a token already reaches top_p
    sorted_p = sorted_p.masked_fill(outside, 0.0)
    filtered = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return filtered / filtered.sum(-1, keepdim=True)


def _per_node(tree: DraftTree, dist: torch.Tensor) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(target argmax after each node, target prob of each node's token given its parent) from dist [n, V]."""
    argmax = dist.argmax(-1).tolist()
    parents = torch.tensor(tree.parents[1:], device=dist.device, dtype=torch.long)
    tokens = torch.tensor(tree.tokens[1:], device=dist.device, dtype=torch.long)
    probs = dist[parents, tokens].tolist() if len(tree) > 1 else []
    return tuple(argmax), (1.0, *probs)


def verify_greedy(tree: DraftTree, logits: torch.Tensor) -> Verdict:
    """logits [n, V]: the target's logits after each node."""
    argmax, _ = _per_node(tree, logits)
    probs = torch.softmax(logits.float(), dim=-1)
    _, target_prob = _per_node(tree, probs)
    path, node = [0], 0
    while True:
        nxt = next((c for c in tree.children[node] if tree.tokens[c] == argmax[node]), None)
        if nxt is None:
            break
        path.append(nxt)
        node = nxt
    return Verdict(tuple(path), argmax[node], argmax, target_prob)


def verify_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> Verdict:
    """probs [n, V]: the target's (warped) distribution after each node."""
    argmax, target_prob = _per_node(tree, probs)
    path, node = [0], 0
    while True:
        residual = probs[node].clone()
        accepted = None
        for child in tree.children[node]:
            x = tree.tokens[child]
            mass = residual.sum()
            u = torch.rand((), generator=generator, device=residual.device)
            if u * mass < residual[x]:  # accept x with probability p(x) / sum(p): q is a point mass on x
                accepted = child
                break
            residual[x] = 0.0
        if accepted is None:
            bonus = int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
            return Verdict(tuple(path), bonus, argmax, target_prob)
        path.append(accepted)
        node = accepted

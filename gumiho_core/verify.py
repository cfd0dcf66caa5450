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
    target_token: tuple[int, ...]  # per node: the target's argmax after that node (its logits saw the true ancestry)
    target_prob: tuple[float, ...]  # per node: target probability of its token given its parent; nan where the
    #                                 parent was not reached (not checked), 1 for the root; () when not traced

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


def reached_probs(tree: DraftTree, path, rows) -> tuple[float, ...]:
    """Target probability of each node's token given its parent, for the children of the accepted path.

    rows[i] is the target's distribution after path[i]. Other nodes were never checked: nan.
    """
    out = [float("nan")] * len(tree)
    out[0] = 1.0
    for node, row in zip(path, rows):
        kids = tree.children[node]
        if kids:
            for k, v in zip(kids, row[torch.tensor([tree.tokens[k] for k in kids], device=row.device)].tolist()):
                out[k] = v
    return tuple(out)


def verify_greedy(tree: DraftTree, logits: torch.Tensor, trace: bool = True) -> Verdict:
    """logits [n, V]: the target's logits after each node."""
    argmax = logits.argmax(-1).tolist()
    path, node = [0], 0
    while True:
        nxt = next((c for c in tree.children[node] if tree.tokens[c] == argmax[node]), None)
        if nxt is None:
            break
        path.append(nxt)
        node = nxt
    target_prob = ()
    if trace:
        rows = torch.softmax(logits[torch.tensor(path, device=logits.device)].float(), -1)  # [len(path), V]
        target_prob = reached_probs(tree, path, rows)
    return Verdict(accepted=tuple(path), bonus=argmax[node], target_token=tuple(argmax), target_prob=target_prob)


def verify_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator, trace: bool = True) -> Verdict:
    """probs [n, V]: the target's (warped) distribution after each node."""
    argmax = tuple(probs.argmax(-1).tolist())
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
            target_prob = reached_probs(tree, path, probs[torch.tensor(path, device=probs.device)]) if trace else ()
            return Verdict(accepted=tuple(path), bonus=bonus, target_token=argmax, target_prob=target_prob)
        path.append(accepted)
        node = accepted

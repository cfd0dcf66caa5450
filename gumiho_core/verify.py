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


BONUS_TOP = 5  # entries kept of the distribution a sampled bonus token was drawn from


@dataclass(frozen=True)
class SamplingTrace:
    """How a sampled verification decided (traced runs only): the numbers a viewer needs to follow the draws."""

    accept_prob: tuple[float, ...]  # per node: P(accept) when its turn came, residual p(x) / sum(residual p);
    #                                 nan for a node never tried
    draw: tuple[float, ...]  # per node: the uniform draw u it was accepted on (u < accept_prob); nan if never tried
    bonus_from: tuple[tuple[int, float], ...]  # top entries (token, probability) of the distribution the bonus was
    #                                            drawn from: the residual after rejections, else the target's own


@dataclass(frozen=True)
class Verdict:
    accepted: tuple[int, ...]  # node indices of the accepted path, root first
    bonus: int  # the target's own token after the last accepted node
    target_token: tuple[int, ...]  # per node: the target's argmax after that node (its logits saw the true ancestry)
    target_prob: tuple[float, ...]  # per node: the target's probability of its token given its parent (computed in
    #                                 the tree pass, so also for nodes verification never reached), 1 for the root;
    #                                 () when not traced
    sampling: SamplingTrace | None = None  # temperature > 0, traced: acceptance probabilities, draws, residual

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


def _node_probs(tree: DraftTree, probs: torch.Tensor) -> torch.Tensor:
    """[n - 1] the target's probability of each non-root node's token given its parent, on probs' device."""
    parents = torch.tensor(tree.parents[1:], device=probs.device, dtype=torch.long)
    tokens = torch.tensor(tree.tokens[1:], device=probs.device, dtype=torch.long)
    return probs[parents, tokens]


def node_probs(tree: DraftTree, probs: torch.Tensor) -> tuple[float, ...]:
    """The target's probability of each node's token given its parent (1 for the root). probs [n, V]: the
    target's distribution after each node."""
    return (1.0,) + tuple(_node_probs(tree, probs).tolist())


def _greedy_read(tree: DraftTree, logits: torch.Tensor, trace: bool) -> tuple[list[int], tuple[float, ...]]:
    """The target's argmax after each node and (traced) each node's target probability, in one read back."""
    argmax = logits.argmax(-1)  # [n]
    if not trace:
        return argmax.tolist(), ()
    probs = _node_probs(tree, torch.softmax(logits.float(), -1))  # [n - 1]
    packed = torch.cat((argmax.double(), probs.double())).tolist()  # ids are exact in float64
    return [int(t) for t in packed[: len(tree)]], (1.0,) + tuple(packed[len(tree):])


def verify_greedy(tree: DraftTree, logits: torch.Tensor, trace: bool = True) -> Verdict:
    """logits [n, V]: the target's logits after each node."""
    argmax, target_prob = _greedy_read(tree, logits, trace)
    path, node = [0], 0
    while True:
        nxt = next((c for c in tree.children[node] if tree.tokens[c] == argmax[node]), None)
        if nxt is None:
            break
        path.append(nxt)
        node = nxt
    return Verdict(accepted=tuple(path), bonus=argmax[node], target_token=tuple(argmax), target_prob=target_prob)


def verify_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator, trace: bool = True) -> Verdict:
    """probs [n, V]: the target's (warped) distribution after each node."""
    argmax = tuple(probs.argmax(-1).tolist())
    nan = float("nan")
    accept_prob, draw = [nan] * len(tree), [nan] * len(tree)
    path, node = [0], 0
    while True:
        residual = probs[node].clone()
        accepted = None
        for child in tree.children[node]:
            x = tree.tokens[child]
            mass = residual.sum()
            u = torch.rand((), generator=generator, device=residual.device)
            if trace:
                accept_prob[child], draw[child] = float(residual[x] / mass), float(u)
            if u * mass < residual[x]:  # accept x with probability p(x) / sum(p): q is a point mass on x
                accepted = child
                break
            residual[x] = 0.0
        if accepted is None:
            residual = residual / residual.sum()  # after rejections: p without the rejected tokens, renormalised
            bonus = int(torch.multinomial(residual, 1, generator=generator))
            if not trace:
                return Verdict(accepted=tuple(path), bonus=bonus, target_token=argmax, target_prob=())
            top = residual.topk(min(BONUS_TOP, residual.numel()))
            trail = SamplingTrace(accept_prob=tuple(accept_prob), draw=tuple(draw),
                                  bonus_from=tuple(zip(top.indices.tolist(), top.values.tolist())))
            return Verdict(accepted=tuple(path), bonus=bonus, target_token=argmax,
                           target_prob=node_probs(tree, probs), sampling=trail)
        path.append(accepted)
        node = accepted

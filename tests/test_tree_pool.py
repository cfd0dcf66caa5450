"""Which candidates may be chosen into the tree, on a hand-worked case with fixed drafter outputs.

The stub drafter is a Markov table P[token] of draft probabilities: the distribution after a node depends
only on its token, and the MLP head reads the row of its node's level-2 token. top_k 2, root token 0:

  level 1: a = 1 (p .6), b = 2 (.3)
  level 2: a->3 (.5), a->4 (.3), b->3 (.45), b->1 (.35); scores .30, .18, .135, .105: kept a3 and a4.
           Gumiho ("paper") pools only those two; EAGLE-2 ("all") pools all four.
  level 3 (MLP, pruning 2): a3->4 (.7) .21, a3->1 (.2) .06, a4->0 (.8) .144, a4->2 (.1) .018: a34, a40 kept.
  By score the whole pool ranks a .6, b .3, a3 .3, a34 .21, a4 .18, a40 .144, b3 .135, b1 .105.
"""
import math
from types import SimpleNamespace

import pytest
import torch

from gumiho_core import TreeConfig
from gumiho_core.drafting import DraftContext, build_tree

V = 5
P = torch.tensor([[0.1 / 3, 0.6, 0.3, 0.1 / 3, 0.1 / 3],
                  [0.2 / 3, 0.2 / 3, 0.2 / 3, 0.5, 0.3],
                  [0.2 / 3, 0.35, 0.2 / 3, 0.45, 0.2 / 3],
                  [0.1 / 3, 0.2, 0.1 / 3, 0.1 / 3, 0.7],
                  [0.8, 0.1 / 3, 0.1, 0.1 / 3, 0.1 / 3]])


class _Cache:
    length = 0

    def crop(self, n):
        self.length = n


class TableDrafter:
    """Features are one-hot tokens; a feature's logits are the log of its token's table row."""

    cfg = SimpleNamespace(serial_steps=2, mlp_heads=1, heads_read="serial")

    def new_cache(self):
        return _Cache()

    def prepare(self):
        pass  # nothing to pack

    def fuse(self, tokens, features):
        return torch.nn.functional.one_hot(tokens, V).float()

    def serial(self, x, positions, mask, cache):
        return x  # a node's output carries its own token

    def heads(self, u, n_heads):
        return u[None, :, V:]  # the MLP head reads the level-2 token (the second half of concat(u1, u2))

    def logits(self, feats):
        return P[feats.argmax(-1)].log()

    def to_target_ids(self, ids):
        return ids


def _tree(pool, total):
    ctx = DraftContext(TableDrafter())
    ctx.last_out = torch.nn.functional.one_hot(torch.tensor(0), V).float()
    cfg = TreeConfig(top_k=2, mlp_topk=2, pruning=2, total_tokens=total, depth=3, pool=pool)
    tree, _ = build_tree(ctx, 0, cfg)
    return {tuple(tree.tokens[i] for i in tree.path_to(n)[1:]): tree.score[n] for n in range(1, len(tree))}


PAPER = {(1,): .6, (2,): .3, (1, 3): .3, (1, 4): .18, (1, 3, 4): .21, (1, 4, 0): .144}


def test_gumiho_pools_only_the_kept_level2_candidates():
    tree = _tree("paper", 64)
    assert tree.keys() == PAPER.keys()
    for path, p in PAPER.items():
        assert tree[path] == pytest.approx(math.log(p), abs=1e-5), path


def test_eagle2_pool_lets_unexpanded_level2_candidates_win_places():
    tree = _tree("all", 64)
    assert tree.keys() == PAPER.keys() | {(2, 3), (2, 1)}
    assert tree[(2, 3)] == pytest.approx(math.log(.135), abs=1e-5)
    assert _tree("all", 7) == _tree("paper", 7)  # 6 places: b3 (.135) is the 7th best
    assert (2, 3) in _tree("all", 8) and len(_tree("paper", 8)) == 6


def test_unknown_pool_is_refused():
    with pytest.raises(Exception, match="pool must be one of"):
        TreeConfig(pool="eagle")

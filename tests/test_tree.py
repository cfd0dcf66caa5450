import random

import pytest
import torch

from gumiho_core.tree import DraftTree


def random_tree(n, seed, max_children=4):
    rng = random.Random(seed)
    parents, depth = [-1], [0]
    for i in range(1, n):
        p = rng.randrange(i)
        parents.append(p)
        depth.append(depth[p] + 1)
    return DraftTree(tuple(rng.randrange(50) for _ in range(n)), tuple(parents), tuple(depth),
                     tuple("root" if i == 0 else f"serial{d}" for i, d in enumerate(depth)),
                     tuple(0.0 for _ in range(n)), tuple(-float(d) for d in depth))


def brute_is_ancestor(tree, q, k):
    node = q
    while node != -1:
        if node == k:
            return True
        node = tree.parents[node]
    return False


@pytest.mark.parametrize("n,seed", [(1, 0), (2, 1), (7, 2), (30, 3), (64, 4)])
def test_mask_positions_paths_match_brute_force(n, seed):
    tree = random_tree(n, seed)
    past = 5
    mask = tree.attention_mask(past, torch.float32, "cpu")[0, 0]
    assert mask.shape == (n, past + n)
    for q in range(n):
        assert (mask[q, :past] == 0).all(), "the whole context is visible"
        for k in range(n):
            visible = mask[q, past + k] == 0
            assert bool(visible) == brute_is_ancestor(tree, q, k), (q, k)
    pos = tree.position_ids(past)[0].tolist()
    assert pos == [past + d for d in tree.depth]
    leaves = [i for i in range(n) if i not in tree.parents]
    assert sorted(p[-1] for p in tree.paths) == sorted(leaves)
    for path in tree.paths:
        assert path[0] == 0
        assert all(tree.parents[b] == a for a, b in zip(path, path[1:]))


def test_tree_rejects_bad_parents():
    with pytest.raises(AssertionError):
        DraftTree((1, 2), (-1, 1), (0, 1), ("root", "serial1"), (0.0, 0.0), (0.0, 0.0))
    with pytest.raises(AssertionError):
        DraftTree((1, 2), (-1, 0), (0, 2), ("root", "serial1"), (0.0, 0.0), (0.0, 0.0))


def test_round_trip_and_truncate():
    tree = random_tree(20, 7)
    again = DraftTree.from_dict(tree.to_dict())
    assert again.tokens == tree.tokens and again.parents == tree.parents and again.depth == tree.depth
    short = tree.truncated(2)
    assert max(short.depth) <= 2
    assert len(short) == sum(d <= 2 for d in tree.depth)

"""The drafted tree against an independent, path-by-path computation of every node's draft log-prob.

This pins down both upstream bugs fixed here: level-2 siblings must not see each other, and each
MLP row must use its node's true level-1 parent.
"""
from unittest import mock

import pytest
import torch

from gumiho_core import DecodeConfig, TreeConfig, drafting, start
from gumiho_core.drafting import build_tree
from tiny import random_drafter, tiny_target


@pytest.fixture(scope="module")
def setup():
    target = tiny_target(seed=5, scale=2.0)
    drafter = random_drafter(target, seed=9, std=0.08)
    prompt = [4, 8, 15, 16, 23, 42]
    session = start("gumiho", target, prompt, DecodeConfig(max_new_tokens=50), drafter=drafter)
    session.step()  # prefill: the drafter has ingested the prompt
    seq = session.prompt_ids + session.generated
    with torch.inference_mode():
        feats = target.model(input_ids=torch.tensor([seq[:-1]]), output_hidden_states=True).hidden_states[-1][0]
        ctx_inputs = drafter.fuse(torch.tensor(seq[1:])[None], feats[None])[0]  # [L, H]
    return target, drafter, session, ctx_inputs


def run_path(drafter, ctx_inputs, path_tokens):
    """Serial outputs along a path, recomputed from scratch with plain causal attention."""
    L = ctx_inputs.shape[0]
    xs = [ctx_inputs]
    out = drafter.serial(ctx_inputs[None], torch.arange(L)[None], None)[0, -1]
    outs, fused = [out], []
    for tok in path_tokens:
        u = drafter.fuse(torch.tensor([tok]), out[None])  # [1, H]
        fused.append(u[0])
        xs.append(u)
        x = torch.cat(xs)
        out = drafter.serial(x[None], torch.arange(x.shape[0])[None], None)[0, -1]
        outs.append(out)
    return outs, fused


def expected_logprob(drafter, ctx_inputs, tree, node, mode):
    path = tree.path_to(node)[1:]
    tokens = [tree.tokens[i] for i in path]
    d = len(path)
    s = drafter.cfg.serial_steps
    if mode == "serial" or d <= s:
        outs, _ = run_path(drafter, ctx_inputs, tokens[:-1])
        logp = torch.log_softmax(drafter.logits(outs[-1]).float(), -1)
    else:
        _, fused = run_path(drafter, ctx_inputs, tokens[:s])
        head = drafter.heads(torch.cat(fused)[None])[d - s - 1, 0]
        logp = torch.log_softmax(drafter.logits(head).float(), -1)
    return float(logp[tokens[-1]])


@pytest.mark.parametrize("mode,pool", [("hybrid", "paper"), ("hybrid", "all"), ("serial", "paper")])
def test_every_node_logprob_matches_its_own_path(setup, mode, pool):
    target, drafter, session, ctx_inputs = setup
    cfg = TreeConfig(mode=mode, top_k=4, mlp_topk=5, pruning=6, total_tokens=48, depth=7, pool=pool)
    # Gumiho's own pool holds the root, 4 + 4 serial nodes and 6 per MLP level; the others more than 48
    size = 1 + 4 + 4 + 6 * 5 if (mode, pool) == ("hybrid", "paper") else 48
    with torch.inference_mode():
        tree, phases = build_tree(session.ctx, session.generated[-1], cfg)
        assert session.ctx.cache.length == session.ctx.committed, "drafting must leave the cache as it was"
        assert len(tree) == size and tree.max_depth >= 4
        for node in range(1, len(tree)):
            want = expected_logprob(drafter, ctx_inputs, tree, node, mode)
            assert tree.logprob[node] == pytest.approx(want, abs=2e-4), (node, tree.depth[node], tree.proposer[node])
            parent = tree.parents[node]
            assert tree.score[node] == pytest.approx(tree.score[parent] + tree.logprob[node], abs=1e-4)
    names = [p.name for p in phases]
    every = ["serial1", "serial2", "parallel"] if mode == "hybrid" else [f"serial{d}" for d in range(1, 8)]
    assert names == every[:len(names)] and len(names) >= 3, names  # levels no node could reach were skipped
    with torch.inference_mode(), mock.patch.object(drafting, "prunes", lambda device: False):
        _, phases = build_tree(session.ctx, session.generated[-1], cfg)
    assert [p.name for p in phases] == every


TREES = [TreeConfig(mode=mode, top_k=4, mlp_topk=5, pruning=6, total_tokens=total, depth=7, pool=pool)
         for mode, pool in (("hybrid", "paper"), ("hybrid", "all"), ("serial", "paper")) for total in (8, 20, 48)]


@pytest.mark.parametrize("std", [0.08, 0.2])  # a drafter of flat (child log-probs near -4) and of peaked guesses
def test_pruned_drafting_drafts_the_same_tree(std):
    """On a CPU drafting skips nodes below the tree's bar; at every step of a session, for every tree shape, the tree
    equals the one drafted without skipping (tokens, parents, proposers exactly; log-probs to the fp32 rounding of
    matmuls over fewer rows), and the skipping really happens: whole levels, and MLP-head rows."""
    target = tiny_target(seed=5, scale=2.0)
    drafter = random_drafter(target, seed=9, std=std)
    session = start("gumiho", target, [4, 8, 15, 16, 23, 42], DecodeConfig(max_new_tokens=24), drafter=drafter)
    rows, skipped_levels, rows_cut, compared = [], 0, 0, 0
    heads = drafter.heads

    def counting_heads(u, *args, **kwargs):
        rows.append(u.shape[0])
        return heads(u, *args, **kwargs)
    with mock.patch.object(drafter, "heads", counting_heads):
        while not session.done:
            session.step()
            for cfg in TREES:
                with torch.inference_mode():
                    rows.clear()
                    pruned, short = build_tree(session.ctx, session.last_token, cfg)
                    fewer_rows = len(rows) > 1 and min(rows) < max(rows)
                    with mock.patch.object(drafting, "prunes", lambda device: False):
                        full, phases = build_tree(session.ctx, session.last_token, cfg)
                assert (pruned.tokens, pruned.parents, pruned.depth, pruned.proposer) == \
                    (full.tokens, full.parents, full.depth, full.proposer), cfg
                assert pruned.score == pytest.approx(full.score, abs=1e-4)
                assert pruned.logprob == pytest.approx(full.logprob, abs=1e-4)
                skipped_levels += sum(len(p.depths) for p in phases) - sum(len(p.depths) for p in short)
                compared += 1
                rows_cut += fewer_rows
    assert compared >= 100 and skipped_levels > 0 and rows_cut > 0, (compared, skipped_levels, rows_cut)


def test_selection_keeps_best_scores_and_topology(setup):
    _, _, session, _ = setup
    cfg = TreeConfig(top_k=5, mlp_topk=6, pruning=8, total_tokens=20, depth=7)
    with torch.inference_mode():
        tree, _ = build_tree(session.ctx, session.generated[-1], cfg)
    assert len(tree) == 20
    assert all(tree.parents[i] < i for i in range(1, len(tree)))
    assert list(tree.depth) == sorted(tree.depth)
    proposers = {tree.proposer[i] for i in range(1, len(tree))}
    assert proposers <= {"serial1", "serial2", "mlp1", "mlp2", "mlp3", "mlp4", "mlp5"}
    # siblings carry distinct tokens
    for kids in tree.children:
        toks = [tree.tokens[k] for k in kids]
        assert len(toks) == len(set(toks))


def test_max_depth_caps_the_tree(setup):
    _, _, session, _ = setup
    with torch.inference_mode():
        tree, phases = build_tree(session.ctx, session.generated[-1], TreeConfig(), max_depth=3)
    assert tree.max_depth <= 3 and [p.name for p in phases] == ["serial1", "serial2", "parallel"]

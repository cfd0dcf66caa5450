"""Train as you draft: the as-drafted rollout computes, at every pair, what drafting computes there.

Drafting runs through its public API (DraftContext.ingest, build_tree with a one-path tree); the training side
through the rollout on a sequence whose tokens after the context are the drafted ones. The teacher-forced
rollout must not pass: its step 2 and MLP heads read the target's true features, which drafting never has.
"""
import pytest
import torch

from gumiho_core import TreeConfig
from gumiho_core.drafting import DraftContext, build_tree
from gumiho_core.training.objective import collate
from gumiho_core.training.rollout import AS_DRAFTED, ROLLOUTS, TEACHER_FORCED, rollout
from gumiho_core.training.data import Sequence
from tiny import random_drafter, tiny_target

CONTEXT = 9  # committed pairs before drafting
ONE_PATH = TreeConfig(top_k=1, mlp_topk=1, pruning=1, total_tokens=8, depth=7)


@pytest.fixture(scope="module")
def drafted():
    """A tiny random pair, a context of random features and tokens, and the one-path tree drafted from it."""
    target = tiny_target(seed=5, vocab=61, hidden=48, heads=4, kv_heads=2)
    drafter = random_drafter(target, seed=6, std=0.08)
    with torch.no_grad():  # weights as shipped heads store them (fp16), which decoding may read as fp16 (cpu_kernels)
        for w in [*drafter.parameters(), drafter.shared.lm_head]:
            w.copy_(w.half().float())
    g = torch.Generator().manual_seed(7)
    features = torch.randn(CONTEXT, 48, generator=g)  # f_0 .. f_{L-1}
    tokens = torch.randint(0, 61, (CONTEXT + 1,), generator=g)  # x_0 .. x_L; pairs (f_i, x_{i+1})
    ctx = DraftContext(drafter)
    ctx.ingest(features, tokens[1:])
    tree, _ = build_tree(ctx, int(tokens[-1]), ONE_PATH)
    assert tree.depth == tuple(range(8)), "a one-path tree: one node per depth"
    return drafter, features, tokens, tree


def training_logprobs(drafter, features, tokens, tree, name: str) -> list[float]:
    """The training forward's log-probs of the drafted tokens d1..d7 at the context's last pair (the features at
    x_L and later, which drafting has not got yet, are random)."""
    drafted = torch.tensor(tree.tokens[1:])
    ids = torch.cat([tokens, drafted])  # x_0 .. x_L, then d1 .. d7 as the next tokens
    later = torch.randn(len(drafted) + 1, features.shape[1], generator=torch.Generator().manual_seed(8))
    seq = Sequence(torch.cat([features, later]), ids, torch.ones(len(ids), dtype=torch.bool))
    j = CONTEXT - 1  # the last committed pair
    with torch.no_grad():
        r = rollout(name, drafter, collate([seq]))
        serial = [drafter.logits(r.drafted_at(d, 0, j)) for d in (1, 2)]  # [V] each
        heads = drafter.logits(drafter.heads(r.heads_in[0, j]))  # [heads, V]
    logp = torch.log_softmax(torch.cat([torch.stack(serial), heads]).float(), -1)  # [7, V]
    return logp[torch.arange(7), drafted].tolist()


@pytest.mark.parametrize("name", [AS_DRAFTED, pytest.param(
    TEACHER_FORCED, marks=pytest.mark.xfail(strict=True, raises=AssertionError,
                                            reason="teacher-forced step 2 and heads read true features"))])
def test_training_forward_scores_the_drafted_tokens_as_drafting_does(drafted, name):
    drafter, features, tokens, tree = drafted
    got = training_logprobs(drafter, features, tokens, tree, name)
    assert got == pytest.approx(list(tree.logprob[1:]), abs=1e-5), (name, got, tree.logprob[1:])


def test_both_rollouts_agree_on_step_one_and_disagree_after(drafted):
    """Step 1 is shared; the rest differs (else the parity test above would prove nothing)."""
    drafter, features, tokens, tree = drafted
    forced, as_drafted = (training_logprobs(drafter, features, tokens, tree, n) for n in ROLLOUTS)
    assert forced[0] == pytest.approx(as_drafted[0], abs=1e-6)
    assert all(abs(a - b) > 1e-4 for a, b in zip(forced[1:], as_drafted[1:])), (forced, as_drafted)


def _member_parity(architecture: str, method_mode: str):
    """The one-path tree a family member drafts, and its training forward's log-probs of those tokens."""
    target = tiny_target(seed=5, vocab=61, hidden=48, heads=4, kv_heads=2)
    drafter = random_drafter(target, seed=6, std=0.08, architecture=architecture)
    with torch.no_grad():
        for w in [*drafter.parameters(), drafter.shared.lm_head]:
            w.copy_(w.half().float())
    g = torch.Generator().manual_seed(7)
    features, tokens = torch.randn(CONTEXT, 48, generator=g), torch.randint(0, 61, (CONTEXT + 1,), generator=g)
    ctx = DraftContext(drafter)
    ctx.ingest(features, tokens[1:])
    tree, _ = build_tree(ctx, int(tokens[-1]), ONE_PATH.with_(mode=method_mode))
    drafted = torch.tensor(tree.tokens[1:])
    later = torch.randn(len(drafted) + 1, 48, generator=torch.Generator().manual_seed(8))
    seq = Sequence(torch.cat([features, later]), torch.cat([tokens, drafted]), torch.ones(len(tokens) + 7, dtype=torch.bool))
    with torch.no_grad():
        r = rollout(AS_DRAFTED, drafter, collate([seq]))
        outs = [r.serial[d][0, CONTEXT - 1] for d in range(len(r.serial))]
        if drafter.cfg.mlp_heads:
            outs += list(drafter.heads(r.heads_in[0, CONTEXT - 1]))
        logp = torch.log_softmax(drafter.logits(torch.stack(outs)).float(), -1)  # [7, V]
    return logp[torch.arange(7), drafted].tolist(), list(tree.logprob[1:])


@pytest.mark.parametrize("architecture,mode", [("eagle", "serial"), ("medusa", "hybrid")])
def test_every_member_trains_on_what_it_drafts(architecture, mode):
    """EAGLE style: each of the 7 serial steps reads the stack's own previous output, as drafting at every depth does;
    Medusa style: each head reads the target's last feature, as drafting does."""
    got, want = _member_parity(architecture, mode)
    assert got == pytest.approx(want, abs=1e-5), (architecture, got, want)

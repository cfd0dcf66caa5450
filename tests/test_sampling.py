"""Sampling keeps the target's distribution: seeded statistical tests on small vocabularies.

Each test also runs a deliberately wrong variant as a negative control, to show the statistic can fail.
"""
import itertools
import math

import pytest
import torch

from gumiho_core import DecodeConfig, TreeConfig, generate, start
from gumiho_core.tree import DraftTree
from gumiho_core.verify import Verdict, verify_sampling, warp
from tiny import random_drafter, tiny_target


def chi2_z(counts: dict, probs: dict, n: int) -> float:
    """Wilson-Hilferty z-score of Pearson's chi-square (bins with tiny expectation pooled)."""
    chi2, df, pool_obs, pool_exp = 0.0, -1, 0, 0.0
    for key, p in probs.items():
        exp = n * p
        if exp < 5:
            pool_obs += counts.get(key, 0)
            pool_exp += exp
            continue
        chi2 += (counts.get(key, 0) - exp) ** 2 / exp
        df += 1
    if pool_exp > 0:
        chi2 += (pool_obs - pool_exp) ** 2 / max(pool_exp, 1e-9)
        df += 1
    df = max(df, 1)
    return ((chi2 / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))


def small_tree():
    # root -> {0, 1, 2}; node 1 (token 0) -> {3, 4}
    return DraftTree((5, 0, 1, 2, 3, 4), (-1, 0, 0, 0, 1, 1), (0, 1, 1, 1, 2, 2),
                     ("root", "serial1", "serial1", "serial1", "serial2", "serial2"),
                     (0.0,) * 6, (0.0, -1.0, -1.1, -1.2, -2.0, -2.1))


def first_two(tree, verdict):
    toks = [tree.tokens[i] for i in verdict.accepted[1:]] + [verdict.bonus]
    return toks[0], (toks[1] if len(toks) > 1 else None)


def greedy_accepting_verify(tree, probs, generator):
    """WRONG on purpose: accepts the best child whenever the target gives it >= 10%."""
    node, path = 0, [0]
    while tree.children[node] and probs[node, tree.tokens[tree.children[node][0]]] >= 0.1:
        node = tree.children[node][0]
        path.append(node)
    bonus = int(torch.multinomial(probs[node], 1, generator=generator))
    return Verdict(tuple(path), bonus, (0,) * len(tree), (1.0,) * len(tree))


@pytest.mark.parametrize("verify,should_pass", [(verify_sampling, True), (greedy_accepting_verify, False)])
def test_verify_sampling_reproduces_target_marginals(verify, should_pass):
    torch.manual_seed(0)
    tree = small_tree()
    probs = torch.softmax(torch.randn(len(tree), 6) * 1.5, -1)
    gen = torch.Generator().manual_seed(123)
    n = 20000
    first, second = {}, {}
    for _ in range(n):
        a, b = first_two(tree, verify(tree, probs, gen))
        first[a] = first.get(a, 0) + 1
        if a == 0:  # token 0 is node 1, which has children: the next token must follow probs[1]
            second[b] = second.get(b, 0) + 1
    z1 = chi2_z(first, {t: float(probs[0, t]) for t in range(6)}, n)
    n2 = sum(second.values())
    z2 = chi2_z(second, {t: float(probs[1, t]) for t in range(6)}, n2)
    if should_pass:
        assert z1 < 4 and z2 < 4, (z1, z2)
    else:
        assert max(z1, z2) > 4, (z1, z2)


def exact_joint(target, prompt, temperature, top_p, n_tokens):
    """P(t1..tn) of the target by enumeration over a tiny vocabulary."""
    V = target.vocab_size
    out = {}
    with torch.inference_mode():
        for combo in itertools.product(range(V), repeat=n_tokens):
            p, seq = 1.0, list(prompt)
            for tok in combo:
                logits = target.model(input_ids=torch.tensor([seq])).logits[0, -1]
                p *= float(warp(logits, temperature, top_p)[tok])
                seq.append(tok)
            out[combo] = p
    return out


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_speculative_sampling_has_the_target_distribution(temperature, top_p, monkeypatch):
    target = tiny_target(seed=2, vocab=5, hidden=32, scale=1.5)
    drafter = random_drafter(target, seed=4, std=0.3)
    prompt = [1, 3, 0]
    want = exact_joint(target, prompt, temperature, top_p, 3)
    tree = TreeConfig(top_k=3, mlp_topk=3, pruning=3, total_tokens=12, depth=4)
    n = 3000
    counts, accepted = {}, 0
    for seed in range(n):
        run = generate(start("gumiho", target, prompt, DecodeConfig(max_new_tokens=3, temperature=temperature,
                                                                     top_p=top_p, seed=seed), tree, drafter))
        key = tuple(run.token_ids)
        counts[key] = counts.get(key, 0) + 1
        accepted += sum(r.verdict.accept_length for r in run.records[1:])
    assert accepted > n // 4, "the drafter must get tokens accepted for this test to mean anything"
    z = chi2_z(counts, want, n)
    assert z < 4, z


def test_the_sampling_trace_records_the_draws_and_changes_nothing():
    """The numbers the app shows: each tried node's acceptance probability (p(x) over what is left of p after the
    earlier rejections), the draw it was accepted or rejected on, and the distribution the bonus came from.
    Recording them draws no extra random numbers: traced and untraced verdicts are the same."""
    torch.manual_seed(1)
    tree = small_tree()
    probs = torch.softmax(torch.randn(len(tree), 6) * 1.5, -1)
    seen_rejection = seen_leaf = False
    for seed in range(200):
        v = verify_sampling(tree, probs, torch.Generator().manual_seed(seed))
        plain = verify_sampling(tree, probs, torch.Generator().manual_seed(seed), trace=False)
        assert (plain.accepted, plain.bonus, plain.sampling) == (v.accepted, v.bonus, None)
        t = v.sampling
        for node in v.accepted:
            left = probs[node].clone()
            for child in tree.children[node]:
                if math.isnan(t.accept_prob[child]):
                    break  # never tried: an earlier sibling was accepted
                x = tree.tokens[child]
                assert t.accept_prob[child] == pytest.approx(float(left[x] / left.sum()), rel=1e-5)
                assert (t.draw[child] < t.accept_prob[child]) == (child in v.accepted)
                left[x] = 0.0
        last = v.accepted[-1]  # every child of it rejected (or it has none): the bonus's distribution is left
        top = (left / left.sum()).topk(5)
        assert [tok for tok, _ in t.bonus_from] == top.indices.tolist()
        assert [p for _, p in t.bonus_from] == pytest.approx(top.values.tolist(), rel=1e-5)
        seen_rejection |= bool(tree.children[last])
        seen_leaf |= not tree.children[last]
        assert v.target_prob == pytest.approx([1.0] + [float(probs[tree.parents[i], tree.tokens[i]])
                                                       for i in range(1, len(tree))])
    assert seen_rejection and seen_leaf

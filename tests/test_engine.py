"""Losslessness at temperature 0: speculative output equals a separately written greedy loop."""
import random

import pytest
import torch

import gumiho_core.engine as engine
import gumiho_core.timing as timing
from gumiho_core import DecodeConfig, GumihoError, TreeConfig, generate, start
from gumiho_core.target import Target
from reference import plain_greedy
from tiny import oracle_build_tree, random_drafter, tiny_target

TREES = {
    "one-node": TreeConfig(top_k=1, total_tokens=2, depth=1),
    "chain": TreeConfig(top_k=1, mlp_topk=1, pruning=1, total_tokens=8, depth=7),
    "wide": TreeConfig(top_k=20, total_tokens=30, depth=2),
    "deep": TreeConfig(top_k=3, mlp_topk=4, pruning=6, total_tokens=40, depth=7),
    "defaults": TreeConfig(),
}
PROMPTS = [[3], [5, 6, 7, 8, 9], [11, 40, 2, 2, 2, 71, 9, 30, 12, 13, 14, 15]]


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, scale=6.0)


@pytest.fixture(scope="module")
def drafter(target):
    return random_drafter(target, seed=1)


@pytest.fixture(scope="module")
def family(target, drafter):
    """A random drafter of each family member, by the method that drafts with it."""
    eagle, medusa = (random_drafter(target, seed=2, architecture=a) for a in ("eagle", "medusa"))
    return {"gumiho": drafter, "gumiho-serial": drafter, "eagle": eagle, "medusa": medusa}


@pytest.mark.parametrize("method", ["gumiho", "gumiho-serial", "eagle", "medusa"])
@pytest.mark.parametrize("tree_name", list(TREES))
def test_random_drafter_matches_plain_greedy(target, family, method, tree_name):
    for prompt in PROMPTS:
        for max_new in (1, 7, 40):
            want = plain_greedy(target.model, prompt, max_new)
            decode = DecodeConfig(max_new_tokens=max_new)
            run = generate(start(method, target, prompt, decode, TREES[tree_name], family[method]))
            assert list(run.token_ids) == want, (method, tree_name, prompt, max_new)
            assert run.new_tokens == len(want) and run.stop_reason == "max_new_tokens"
            assert run.method == method


def test_each_member_drafts_its_own_levels(target, family):
    """Gumiho: S1, S2, then the MLP heads; EAGLE style: the 1-layer stack at every depth; Medusa style: heads only,
    head d at depth d."""
    want = {"gumiho": ["serial1", "serial2", "mlp1", "mlp2", "mlp3", "mlp4", "mlp5"],
            "eagle": [f"serial{d}" for d in range(1, 8)], "medusa": [f"mlp{d}" for d in range(1, 8)]}
    chain = TREES["chain"]  # one node per level, 7 levels
    for method, proposers in want.items():
        run = generate(start(method, target, PROMPTS[1], DecodeConfig(max_new_tokens=4), chain, family[method]))
        tree = run.records[1].tree
        assert list(tree.proposer[1:]) == proposers, method
        phases = [p.name for p in run.records[1].phases]
        assert phases == {"gumiho": ["serial1", "serial2", "parallel"], "eagle": proposers,
                          "medusa": ["parallel"]}[method]


def test_a_method_refuses_another_members_heads(target, family):
    with pytest.raises(GumihoError, match="eagle heads"):
        start("gumiho", target, PROMPTS[0], tree=TreeConfig(), drafter=family["eagle"])
    with pytest.raises(GumihoError, match="medusa"):
        start("eagle", target, PROMPTS[0], drafter=family["medusa"])


def test_the_old_name_serial_still_starts_gumiho_serial(target, drafter):
    assert start("serial", target, PROMPTS[0], drafter=drafter).method == "gumiho-serial"


def test_ar_decoder_matches_plain_greedy(target):
    for prompt in PROMPTS:
        want = plain_greedy(target.model, prompt, 30)
        assert list(generate(start("ar", target, prompt, DecodeConfig(max_new_tokens=30))).token_ids) == want


@pytest.mark.parametrize("depth", [1, 4, 7])
def test_oracle_drafter_full_acceptance_and_bonus(target, drafter, monkeypatch, depth):
    prompt = PROMPTS[1]
    want = plain_greedy(target.model, prompt, 50)
    reference = prompt + want
    monkeypatch.setattr(engine, "build_tree", oracle_build_tree(reference, depth, random.Random(0)))
    run = generate(start("gumiho", target, prompt, DecodeConfig(max_new_tokens=50), drafter=drafter))
    assert list(run.token_ids) == want
    full_steps = [r for r in run.records[1:] if not r.done]
    assert full_steps, "some steps must be complete"
    for rec in full_steps:
        assert rec.verdict.accept_length == depth  # every drafted token of the true chain accepted
        assert len(rec.new_token_ids) == depth + 1  # ... plus the target's bonus token
        assert rec.new_token_ids[-1] == rec.verdict.bonus


def test_eos_inside_an_accepted_path(drafter, monkeypatch):
    base = tiny_target(seed=0, scale=6.0)
    prompt = PROMPTS[1]
    free = plain_greedy(base.model, prompt, 40)
    eos = free[9]  # a token the model emits mid-answer
    model = base.model
    model.config.eos_token_id = eos
    model.generation_config.eos_token_id = eos
    target = Target(model, None, "tiny-eos")
    want = plain_greedy(model, prompt, 40, eos_ids={eos})
    assert len(want) < 40 and want[-1] == eos
    monkeypatch.setattr(engine, "build_tree", oracle_build_tree(prompt + free, 7, random.Random(1)))
    run = generate(start("gumiho", target, prompt, DecodeConfig(max_new_tokens=40), drafter=drafter))
    assert list(run.token_ids) == want and run.stop_reason == "eos"
    # the EOS arrived in the middle of a step's accepted path: the rest of that step was cut
    last = run.records[-1]
    assert last.verdict.accept_length + 1 > len(last.new_token_ids)


def test_eos_with_real_drafting(drafter):
    base = tiny_target(seed=0, scale=6.0)
    prompt = PROMPTS[2]
    eos = plain_greedy(base.model, prompt, 30)[12]
    base.model.config.eos_token_id = eos
    target = Target(base.model, None, "tiny-eos")
    want = plain_greedy(base.model, prompt, 30, eos_ids={eos})
    for method in ("gumiho", "gumiho-serial"):
        run = generate(start(method, target, prompt, DecodeConfig(max_new_tokens=30), drafter=drafter))
        assert list(run.token_ids) == want and run.stop_reason == "eos"


def test_context_limit_stops_like_plain_greedy():
    target = tiny_target(seed=3, scale=6.0, max_len=24)
    drafter = random_drafter(target)
    prompt = list(range(10, 20))
    want = plain_greedy(target.model, prompt, 100, max_len=24)
    assert len(prompt) + len(want) == 24
    for method in ("gumiho", "gumiho-serial", "ar"):
        run = generate(start(method, target, prompt, DecodeConfig(max_new_tokens=100), TreeConfig(total_tokens=16),
                             drafter))
        assert list(run.token_ids) == want and run.stop_reason == "context", method


def test_target_cache_after_acceptance_equals_fresh_forward(target, drafter):
    session = start("gumiho", target, PROMPTS[2], DecodeConfig(max_new_tokens=60), TreeConfig(), drafter)
    for _ in range(6):
        session.step()
    seq = session.prompt_ids + session.generated[:-1]  # the last token is the next root, not cached yet
    with torch.inference_mode():
        fresh = target.model(input_ids=torch.tensor([seq]), use_cache=True).past_key_values
    assert session.cache.get_seq_length() == len(seq)
    for mine, ref in zip(session.cache.layers, fresh.layers):
        torch.testing.assert_close(mine.keys, ref.keys, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(mine.values, ref.values, atol=2e-5, rtol=1e-4)


def test_drafter_state_after_steps_equals_fresh_pass(target, drafter):
    session = start("gumiho", target, PROMPTS[2], DecodeConfig(max_new_tokens=60), TreeConfig(), drafter)
    for _ in range(5):
        session.step()
    seq = session.prompt_ids + session.generated
    with torch.inference_mode():
        feats = target.model(input_ids=torch.tensor([seq[:-1]]), output_hidden_states=True).hidden_states[-1][0]
        x = drafter.fuse(torch.tensor(seq[1:])[None], feats[None])
        out = drafter.serial(x, torch.arange(len(seq) - 1)[None], None)
    assert session.ctx.committed == len(seq) - 1
    torch.testing.assert_close(session.ctx.last_out, out[0, -1], atol=1e-4, rtol=1e-4)


def test_records_are_consistent(target, drafter):
    run = generate(start("gumiho", target, PROMPTS[1], DecodeConfig(max_new_tokens=30), drafter=drafter))
    first = run.records[0]
    assert first.kind == "prefill" and first.tree is None and len(first.new_token_ids) == 1
    tokens = []
    for i, rec in enumerate(run.records):
        assert rec.index == i and rec.total_steps == i
        tokens += rec.new_token_ids
        assert rec.total_new_tokens == len(tokens)
        if rec.kind == "speculative":
            accepted = [rec.tree.tokens[j] for j in rec.verdict.accepted[1:]]
            assert list(rec.new_token_ids) == (accepted + [rec.verdict.bonus])[: len(rec.new_token_ids)]
            assert len(rec.tree) <= TreeConfig().total_tokens
            assert {p.name for p in rec.phases} == {"serial1", "serial2", "parallel"}
            on_path = set(rec.verdict.accepted)
            for node in range(1, len(rec.tree)):  # the target's view of every node, reached or not
                prob = rec.verdict.target_prob[node]
                assert 0.0 <= prob <= 1.0
                siblings = rec.tree.children[rec.tree.parents[node]]
                if node in on_path:  # greedy accepts the target's argmax: the likeliest sibling
                    assert prob == max(rec.verdict.target_prob[k] for k in siblings)
                if rec.tree.tokens[node] == rec.verdict.target_token[rec.tree.parents[node]]:
                    assert prob == max(rec.verdict.target_prob[k] for k in siblings)  # off the path too
    assert tuple(tokens) == run.token_ids
    assert run.mean_accept_len == pytest.approx((run.new_tokens - 1) / run.steps)
    again = [type(r).from_dict(r.to_dict()) for r in run.records]
    assert [r.new_token_ids for r in again] == [r.new_token_ids for r in run.records]


class TickingClock:
    """A clock that moves one second per reading: a duration becomes a count of readings, the same anywhere."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


@pytest.mark.parametrize("trace", [True, False])
def test_a_steps_times_add_up_to_no_more_than_the_time_inside_it(target, drafter, monkeypatch, trace):
    """draft + verify + commit is at most the time step() took, and drafting covers its phases. With trace=False
    drafting was once counted twice (its phases, then the engine's lap over the whole draft)."""
    clock = TickingClock()
    monkeypatch.setattr(engine, "time", clock)
    monkeypatch.setattr(timing, "time", clock)
    session = start("gumiho", target, PROMPTS[1], DecodeConfig(max_new_tokens=20), TreeConfig(), drafter, trace=trace)
    before = 0.0
    while not session.done:
        rec = session.step()
        assert rec.draft_s + rec.verify_s + rec.commit_s <= rec.compute_s - before, rec.index
        if rec.phases:
            assert rec.draft_s >= sum(p.seconds for p in rec.phases) > 0
        before = rec.compute_s
    assert rec.index > 1

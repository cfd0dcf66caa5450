"""The auto tree: smaller trees read off a large verified tree, and a choice that follows measured costs."""
import pytest
import torch

from gumiho_core import DecodeConfig, TreeConfig, generate, start
from gumiho_core.measure.autotree import accepted_in, best_choice, candidate_order, choose_tree
from gumiho_core.measure.costs import BEAM, NODES_GRID, TOP_K_GRID, Costs
from tiny import random_drafter, tiny_target


@pytest.fixture(scope="module")
def setup():
    target = tiny_target(seed=0, scale=6.0)
    return target, random_drafter(target, seed=1, std=0.08)


def token_paths(tree, nodes):
    return {tuple(tree.tokens[j] for j in tree.path_to(i)) for i in nodes}


@pytest.mark.parametrize("mode", ["gumiho", "serial"])
def test_smaller_trees_are_read_off_the_big_one(setup, mode):
    """With the same top_k and depth, an n-node tree is the big tree's best n - 1 nodes, so what it would
    accept is known from the big tree's verdict (each node's logits depend only on its ancestors)."""
    target, drafter = setup
    big = TreeConfig(mode=mode, top_k=6, mlp_topk=BEAM, pruning=BEAM, total_tokens=40, depth=7)
    session = start(mode, target, [5, 6, 7, 8, 9], DecodeConfig(max_new_tokens=40), big, drafter)
    session.step()  # prefill
    checked = 0
    while not session.done and checked < 6:
        root = session.generated[-1]
        smalls = {n: session.draft(big.with_(total_tokens=n)) for n in (2, 5, 12)}
        assert session.last_token == root
        rec = session.step()
        order = candidate_order(rec.tree, mode, 6, 7)
        for n, small in smalls.items():
            keep = {0, *order[: n - 1]}
            assert token_paths(rec.tree, keep) == token_paths(small, range(len(small)))
        full = {0, *order}
        assert accepted_in(rec.tree, full, rec.verdict.target_token) == rec.verdict.accept_length
        checked += 1


def test_best_follows_the_cost_curve():
    """Same acceptance data, two devices: a flat verify cost (GPU-like) picks a big tree, a steep one a small tree."""
    target = tiny_target(seed=0, scale=6.0)
    drafter = random_drafter(target, seed=1, std=0.08)
    steps = []
    for prompt in ([5, 6, 7], [9, 10, 11, 12], [40, 41]):
        run = generate(start("gumiho", target, prompt, DecodeConfig(max_new_tokens=30),
                             TreeConfig(top_k=10, mlp_topk=BEAM, pruning=BEAM, total_tokens=64), drafter))
        steps += [(r.tree, r.verdict.target_token) for r in run.records[1:]]
    draft = {(k, d): 0.001 * k for k in TOP_K_GRID for d in range(1, drafter.cfg.max_depth + 1)}

    def costs(verify, device):
        return Costs(ar_step_s=0.010, verify_s=verify, draft_s=draft, commit_s=0.0, device=device)

    flat = best_choice(steps, "gumiho", 2, costs({str(n): 0.010 for n in NODES_GRID}, "flat"))
    steep = best_choice(steps, "gumiho", 2, costs({str(n): 0.010 * n for n in NODES_GRID}, "steep"))
    assert flat.tree.total_tokens > steep.tree.total_tokens
    assert flat.tokens_per_step >= steep.tokens_per_step
    assert steep.speedup <= flat.speedup
    assert len(flat.alternatives) == 5 and flat.alternatives[0]["tokens_per_s"] <= round(flat.tokens_per_s, 2)
    assert flat.device == "flat" and flat.tree.mlp_topk == BEAM


def test_verify_forward_is_a_verification_that_leaves_the_session_as_it_was(setup):
    """The public helper the auto tree measures with: the target's logits over a tree (each node's are those
    of a plain forward over its own path), or over the last token alone, with the caches rolled back."""
    target, drafter = setup
    tree_cfg = TreeConfig(top_k=3, total_tokens=12)
    session = start("gumiho", target, [5, 6, 7, 8], DecodeConfig(max_new_tokens=24), tree_cfg, drafter)
    for _ in range(3):
        session.step()
    past, context = session.cache.get_seq_length(), session.prompt_ids + session.generated[:-1]
    tree = session.draft()
    logits, plain = session.verify_forward(tree), session.verify_forward(None)
    assert session.cache.get_seq_length() == past and logits.shape == (len(tree), target.vocab_size)
    with torch.inference_mode():
        for node in (0, len(tree) - 1):
            path = [tree.tokens[i] for i in tree.path_to(node)]
            ref = target.model(input_ids=torch.tensor([context + path])).logits[0, -1]
            torch.testing.assert_close(logits[node], ref, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(plain[0], logits[0], atol=1e-4, rtol=1e-4)  # the root alone: a plain step
    rest = generate(session)
    fresh = start("gumiho", target, [5, 6, 7, 8], DecodeConfig(max_new_tokens=24), tree_cfg, drafter)
    assert rest.token_ids == generate(fresh).token_ids  # the probes changed nothing


def test_choose_tree_measures_and_caches(setup, tmp_path, monkeypatch):
    monkeypatch.setenv("GUMIHO_CACHE", str(tmp_path))
    target, drafter = setup
    prompts = [[5, 6, 7, 8], [20, 21, 22]]
    choice = choose_tree(target, drafter, prompts=prompts, max_new_tokens=12)
    assert isinstance(choice.tree, TreeConfig) and choice.step_s > 0 and choice.ar_step_s > 0
    assert "auto tree for" in choice.summary()
    files = list((tmp_path / "autotree").glob("*.json"))
    assert len(files) == 1
    again = choose_tree(target, drafter, prompts=prompts)  # from the cache: no new measurement
    assert again.to_dict() == choice.to_dict()
    run = generate(start("gumiho", target, [5, 6, 7], DecodeConfig(max_new_tokens=10), choice.tree, drafter))
    assert run.new_tokens == 10


@pytest.mark.parametrize("mode,depth,serial_steps,says", [("gumiho", 1, 2, True), ("gumiho", 2, 2, True),
                                                         ("gumiho", 3, 2, False), ("gumiho", 3, 3, True),
                                                         ("serial", 1, 2, False)])
def test_summary_says_when_the_mlp_heads_are_left_out(mode, depth, serial_steps, says):
    from gumiho_core import TreeChoice

    choice = TreeChoice(TreeConfig(mode=mode, top_k=4, total_tokens=5, depth=depth), 1.5, 0.05, 0.04,
                        {"5": 0.045}, serial_steps=serial_steps)
    assert ("the deeper levels the MLP heads propose" in choice.summary()) == says

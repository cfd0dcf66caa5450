"""The auto tree: smaller trees read off a large verified tree, and a choice that follows measured costs."""
import pytest
import torch

from gumiho_core import DecodeConfig, TreeConfig, generate, start
from gumiho_core.measure.autotree import best_choice, choose_tree
from gumiho_core.measure.candidates import accepted_in, candidate_order
from gumiho_core.measure.costs import BEAM, NODES_GRID, TOP_K_GRID, Costs
from tiny import random_drafter, tiny_target


@pytest.fixture(scope="module")
def setup():
    target = tiny_target(seed=0, scale=6.0)
    return target, random_drafter(target, seed=1, std=0.08)


def token_paths(tree, nodes):
    return {tuple(tree.tokens[j] for j in tree.path_to(i)) for i in nodes}


@pytest.mark.parametrize("mode,pool", [("hybrid", "all"), ("hybrid", "paper"), ("serial", "paper")])
def test_smaller_trees_are_read_off_the_big_one(setup, mode, pool):
    """With the same top_k and depth, an n-node tree is the big tree's best n - 1 nodes, so what it would
    accept is known from the big tree's verdict (each node's logits depend only on its ancestors). The big tree
    pools every candidate (pool "all"); Gumiho's own pool (only the kept level-2 nodes) is a subset of it."""
    target, drafter = setup
    big = TreeConfig(mode=mode, top_k=6, mlp_topk=BEAM, pruning=BEAM, total_tokens=64, depth=7, pool="all")
    session = start({"hybrid": "gumiho", "serial": "gumiho-serial"}[mode], target, [5, 6, 7, 8, 9],
                    DecodeConfig(max_new_tokens=40), big, drafter)
    session.step()  # prefill
    checked = 0
    while not session.done and checked < 6:
        root = session.generated[-1]
        smalls = {n: session.draft(big.with_(total_tokens=n, pool=pool)) for n in (2, 5, 12, 20, 30)}  # at 20 and
        #     30 nodes the two pools' trees differ here: read with the other pool, 12 of these comparisons fail
        assert session.last_token == root
        rec = session.step()
        order = candidate_order(rec.tree, mode, 6, 7, pool=pool)
        for n, small in smalls.items():
            keep = {0, *order[: n - 1]}
            assert token_paths(rec.tree, keep) == token_paths(small, range(len(small)))
        full = {0, *order}
        assert accepted_in(rec.tree, full, rec.verdict.target_token) == rec.verdict.accept_length
        checked += 1


@pytest.fixture(scope="module")
def calibration(setup):
    """Verified large trees (pool "all", as the auto tree's calibration drafts them) of a few prompts."""
    target, drafter = setup
    steps = []
    for prompt in ([5, 6, 7], [9, 10, 11, 12], [40, 41]):
        run = generate(start("gumiho", target, prompt, DecodeConfig(max_new_tokens=30),
                             TreeConfig(top_k=10, mlp_topk=BEAM, pruning=BEAM, total_tokens=64, pool="all"), drafter))
        steps += [(r.tree, r.verdict.target_token) for r in run.records[1:]]
    return steps


def test_best_follows_the_cost_curve(calibration):
    """Same acceptance data, two devices: a flat verify cost (GPU-like) picks a big tree, a steep one a small tree."""
    steps = calibration
    draft = {(k, d): 0.001 * k for k in TOP_K_GRID for d in range(1, 8)}

    def costs(verify, device):
        return Costs(ar_step_s=0.010, verify_s=verify, draft_s=draft, commit_s=0.0, device=device)

    flat = best_choice(steps, "hybrid", 2, costs({str(n): 0.010 for n in NODES_GRID}, "flat"))
    steep = best_choice(steps, "hybrid", 2, costs({str(n): 0.010 * n for n in NODES_GRID}, "steep"))
    assert flat.tree.total_tokens > steep.tree.total_tokens
    assert flat.tokens_per_step >= steep.tokens_per_step
    assert steep.speedup <= flat.speedup
    assert len(flat.alternatives) == 5 and flat.alternatives[0]["tokens_per_s"] <= round(flat.tokens_per_s, 2)
    assert flat.device == "flat" and flat.tree.mlp_topk == BEAM


def spine_steps(n_steps=6, right=5):
    """Verified trees of a confident drafter: a best path ("spine") 7 deep, the target agreeing with its first
    `right` tokens, and three unlikely siblings beside every spine node."""
    from gumiho_core import DraftTree

    tokens, parents, depth, proposer, score, target = [0], [-1], [0], ["root"], [0.0], {}
    spine = 0
    for d in range(1, 8):
        for j in range(4):  # the spine's child first, then its unlikely siblings
            tokens.append(10 * d + j), parents.append(spine), depth.append(d), score.append(-0.1 * d - 3.0 * j)
            proposer.append(f"serial{d}" if d <= 2 else f"mlp{d - 2}")
        target[spine] = tokens[-4] if d <= right else 999
        spine = len(tokens) - 4
    n = len(tokens)
    tree = DraftTree(tuple(tokens), tuple(parents), tuple(depth), tuple(proposer), (0.0,) * n, tuple(score))
    return [(tree, tuple(target.get(i, 999) for i in range(n)))] * n_steps


def test_auto_is_the_fastest_tree_that_uses_the_mlp_heads_and_names_the_fastest():
    """Where every level beyond the first costs a lot to draft, the fastest tree stops early; auto still drafts
    deeper than the serial steps (its trees reach an MLP level in most steps) and says what that costs."""
    calibration = spine_steps()
    def costs(draft_per_level):
        draft = {(k, d): 0.001 * k + draft_per_level * (d - 1) for k in TOP_K_GRID for d in range(1, 8)}
        return Costs(ar_step_s=0.010, verify_s={str(n): 0.010 * (1 + n / 16) for n in NODES_GRID}, draft_s=draft,
                     commit_s=0.0, device="test")

    dear = best_choice(calibration, "hybrid", 2, costs(0.02))
    assert dear.fastest is not None and TreeConfig(**dear.fastest["tree"]).depth <= 2
    assert dear.tree.depth >= 3 and dear.deep_share >= 0.5
    assert dear.fastest["tokens_per_s"] >= round(dear.tokens_per_s, 2)
    assert dear.fastest_tree == TreeConfig(**dear.fastest["tree"]) and "`fastest`" in dear.summary()
    assert f"{dear.fastest['tokens_per_s']:.1f} tokens/s" in dear.summary()
    assert all(a["tree"]["depth"] >= 3 for a in dear.alternatives)
    cheap = best_choice(calibration, "hybrid", 2, costs(0.0))
    assert cheap.fastest is None and cheap.fastest_tree == cheap.tree
    assert "also the fastest tree of any depth" in cheap.summary()
    assert {a["tree"]["pool"] for a in cheap.alternatives + dear.alternatives} <= {"paper", "all"}


def test_predictions_are_checked_against_runs_and_a_stale_measurement_is_measured_again(setup, tmp_path,
                                                                                         monkeypatch):
    from gumiho_core import mark_stale, prediction_gap
    from gumiho_core.measure import autotree

    monkeypatch.setenv("GUMIHO_CACHE", str(tmp_path))
    target, drafter = setup
    choice = choose_tree(target, drafter, prompts=[[5, 6, 7, 8]], max_new_tokens=8)
    predicted = choice.step_s / choice.ar_step_s  # seconds per step, in plain steps
    assert prediction_gap(choice, choice.tree, [1.3 * predicted] * 8, [1.0] * 8) == pytest.approx(0.3)
    assert prediction_gap(choice, choice.tree, [0.8 * choice.step_s] * 8) == pytest.approx(-0.2)
    assert prediction_gap(choice, choice.tree, [choice.step_s] * 7) is None  # too few steps to judge
    assert prediction_gap(choice, choice.tree.with_(total_tokens=1000), [1.0] * 8) is None  # never measured
    mark_stale(target, drafter)
    assert autotree.cached_tree_choice(target, drafter) is None
    measured = []
    monkeypatch.setattr(autotree, "measure", lambda *a, **k: measured.append(1) or Costs(
        ar_step_s=0.01, verify_s={str(n): 0.01 for n in NODES_GRID}, draft_s={(1, 3): 0.001}, commit_s=0.0,
        device="again"))
    again = choose_tree(target, drafter, prompts=[[5, 6, 7, 8]], max_new_tokens=8)
    assert measured and again.device == "again" and autotree.cached_tree_choice(target, drafter).device == "again"


def test_timings_are_medians_of_interleaved_rounds_under_the_lock(monkeypatch):
    """A noisy moment slows one round of every size alike: the medians ignore it, and the ratios stay true."""
    from gumiho_core.measure import costs

    clock = {"now": 0.0, "round": -1, "calls": 0}
    monkeypatch.setattr(costs.time, "perf_counter", lambda: clock["now"])

    def work(seconds):
        def fn():
            clock["calls"] += 1
            noisy = clock["calls"] in (5, 6, 7, 8)  # the third round (calls 7-9 of 3 sizes) partly slowed
            clock["now"] += seconds * (10 if noisy else 1)
        return fn

    class CountingLock:
        held = 0

        def __enter__(self):
            CountingLock.held += 1

        def __exit__(self, *exc):
            return False

    times = costs.timed_rounds({"a": work(1.0), "b": work(2.0), "c": work(4.0)}, 5, None, CountingLock())
    assert times == {"a": 1.0, "b": 2.0, "c": 4.0}
    assert CountingLock.held == 3 * 6  # every call under the lock: a warm-up round and 5 timed rounds


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


@pytest.mark.parametrize("mode,depth,serial_steps,says", [("hybrid", 3, 2, "the MLP heads reached into 70%"),
                                                         ("serial", 3, 2, "the fastest tree measured here."),
                                                         ("hybrid", 2, 2, "this drafter has no deeper level"),
                                                         ("serial", 1, 2, "the fastest tree measured here.")])
def test_summary_says_why_this_tree(mode, depth, serial_steps, says):
    from gumiho_core import TreeChoice

    choice = TreeChoice(TreeConfig(mode=mode, top_k=4, total_tokens=5, depth=depth), 1.5, 0.05, 0.04,
                        {"5": 0.045}, serial_steps=serial_steps, deep_share=0.7)
    assert says in choice.summary()
    assert "It is also the fastest tree of any depth measured here." in choice.summary()

"""One home per fact: the names and bounds that the engine, the CLIs and the app share come from gumiho_core,
and the engine labels each node with the phase that drafted it."""
import dataclasses

from gumiho_core import (
    AR,
    EAGLE,
    GUMIHO,
    GUMIHO_SERIAL,
    HYBRID,
    MEDUSA,
    REGISTRY,
    MAX_DEPTH,
    METHODS,
    PARALLEL,
    SERIAL,
    STEP_KINDS,
    TREE_FIELDS,
    TREE_MODES,
    Acceptance,
    DecodeConfig,
    TreeConfig,
    generate,
    start,
)
from tiny import random_drafter, tiny_target


def test_methods_modes_and_tree_fields():
    assert METHODS == (GUMIHO, EAGLE, MEDUSA, GUMIHO_SERIAL, AR) and TREE_MODES == (HYBRID, SERIAL)
    assert [REGISTRY[m].mode for m in METHODS] == [HYBRID, SERIAL, HYBRID, SERIAL, None]
    assert [REGISTRY[m].drafter for m in METHODS] == ["gumiho", "eagle", "medusa", "gumiho", None]
    assert all("EAGLE" not in REGISTRY[m].label + REGISTRY[m].about for m in METHODS if m != EAGLE)
    assert TREE_FIELDS == ("top_k", "mlp_topk", "pruning", "total_tokens", "depth")
    assert set(TREE_FIELDS) | {"mode", "pool"} == {f.name for f in dataclasses.fields(TreeConfig)}
    assert STEP_KINDS == ("prefill", "speculative", "autoregressive")


def test_the_depths_come_from_the_drafters_shape():
    target = tiny_target(seed=0)
    drafter = random_drafter(target)
    assert drafter.cfg.max_depth == drafter.cfg.serial_steps + drafter.cfg.mlp_heads == MAX_DEPTH
    assert TreeConfig().depth == MAX_DEPTH and len(Acceptance().per_depth()) == MAX_DEPTH
    assert random_drafter(target, mlp_heads=3).cfg.max_depth == 5


def test_each_node_is_labelled_with_the_phase_that_drafted_it():
    target = tiny_target(seed=0, scale=6.0)
    drafter = random_drafter(target, seed=1)
    for method, mode in ((GUMIHO, HYBRID), (GUMIHO_SERIAL, SERIAL)):
        run = generate(start(method, target, [5, 6, 7], DecodeConfig(max_new_tokens=12), TreeConfig(total_tokens=24),
                             drafter))
        for rec in run.records[1:]:
            names = [p.name for p in rec.phases]
            assert set(rec.tree.phase[1:]) <= set(names) and rec.tree.phase[0] == "root"
            for node in range(1, len(rec.tree)):
                serial = mode == SERIAL or rec.tree.depth[node] <= drafter.cfg.serial_steps
                want = f"serial{rec.tree.depth[node]}" if serial else PARALLEL
                assert rec.tree.phase[node] == want and rec.tree.proposer[node].startswith(("serial", "mlp"))
        assert (PARALLEL in names) == (mode == HYBRID)


def test_acceptance_counts_steps_as_the_run_does():
    target = tiny_target(seed=0, scale=6.0)
    run = generate(start(GUMIHO, target, [5, 6, 7], DecodeConfig(max_new_tokens=20), TreeConfig(total_tokens=16),
                         random_drafter(target, seed=1)))
    acc, by_step = Acceptance(), Acceptance()
    acc.add(run)
    for rec in run.records:
        by_step.add_step(rec)
    assert (acc.reached, acc.accepted, acc.histogram) == (by_step.reached, by_step.accepted, by_step.histogram)
    assert acc.steps == by_step.steps == run.steps
    assert acc.mean_accept_len == run.mean_accept_len
    assert acc.reached[1] == run.steps and sum(acc.histogram) == run.steps

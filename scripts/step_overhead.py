"""What a decoding step spends outside the two models' forward passes (issue #20), counted on any device.

    python scripts/step_overhead.py                    # default model, the authors' tree, T=0, 40 new tokens
    python scripts/step_overhead.py --model tiny       # a tiny random pair (tests/tiny.py): the models cost nothing

For each method it runs one session under a TorchDispatchMode that counts every aten op dispatched while
`session.step()` runs, split into the target's forward (Target.forward and its lm_head, Target.logits), the
drafter's network (fuse / serial / heads / logits) and the rest (tree building, masks, pool selection,
verification, cache commit); and it counts host reads: element reads into Python (item, float, int, bool,
index on a tensor) and copies to the host (tolist, cpu, numpy). On a GPU each op outside the models is a kernel
launch and each host read waits for the queue. Another session of the same prompt, not counted and run first
(so that its steps meet the prompt's shapes first, as a real run does), gives times per step: the drafting phase
(build_tree) and the rest outside the target's forward (CPU process time; on a GPU, wall time with the queue
drained at each boundary). Prefill steps are left out of every figure.
scripts/gpu_check.py records the same breakdown on a GPU.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gumiho_core import engine  # noqa: E402
from gumiho_core.config import DecodeConfig, TreeConfig  # noqa: E402
from gumiho_core.engine import start  # noqa: E402

TARGET, DRAFTER, REST = "target", "drafter", "rest"
DRAFTER_PARTS = ("fuse", "serial", "heads", "logits")
READS = ("item", "__float__", "__int__", "__bool__", "__index__")  # one element into Python
COPIES = ("tolist", "cpu", "numpy")  # a tensor copied to the host
PROMPT = "Explain in two sentences why the sky is blue."


@dataclass
class Tally:
    """Counts of one session's decoding steps, by region (TARGET, DRAFTER, REST)."""

    ops: dict = field(default_factory=lambda: {TARGET: 0, DRAFTER: 0, REST: 0})
    reads: dict = field(default_factory=lambda: {TARGET: 0, DRAFTER: 0, REST: 0})
    region: list = field(default_factory=lambda: [REST])  # a stack: where the code now runs
    on: bool = False  # counting only inside a decoding step


class _Ops(TorchDispatchMode):
    def __init__(self, tally: Tally):
        super().__init__()
        self.tally = tally

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.tally.on:
            self.tally.ops[self.tally.region[-1]] += 1
        return func(*args, **(kwargs or {}))


def _in_region(tally: Tally, region: str, fn):
    def wrapped(*args, **kwargs):
        tally.region.append(region)
        try:
            return fn(*args, **kwargs)
        finally:
            tally.region.pop()
    return wrapped


def _counting_reads(tally: Tally, name: str):
    original = getattr(torch.Tensor, name)

    def wrapped(self, *args, **kwargs):
        if tally.on:
            tally.reads[tally.region[-1]] += 1
        return original(self, *args, **kwargs)
    return original, wrapped


@contextlib.contextmanager
def counting(session, tally: Tally):
    """Count ops and host reads of `session` (its target's and drafter's calls marked) while tally.on."""
    target, drafter = session.target, getattr(session, "drafter", None)
    target.forward = _in_region(tally, TARGET, target.forward)
    target.logits = _in_region(tally, TARGET, target.logits)
    for part in DRAFTER_PARTS if drafter is not None else ():
        setattr(drafter, part, _in_region(tally, DRAFTER, getattr(drafter, part)))
    saved = {}
    for name in READS + COPIES:
        saved[name], patched = _counting_reads(tally, name)
        setattr(torch.Tensor, name, patched)
    try:
        with _Ops(tally):
            yield tally
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)
        _unpatch(target, drafter)


def count_steps(method: str, target, drafter, prompt_ids, tree: TreeConfig, new_tokens: int) -> dict:
    """Per decoding step means of ops and host reads by region, over one session at T=0."""
    session = start(method, target, prompt_ids, DecodeConfig(max_new_tokens=new_tokens), tree, drafter)
    tally, reads_per_step = Tally(), []
    with counting(session, tally):
        session.step()  # the prefill, not counted
        while not session.done:
            before, tally.on = sum(tally.reads.values()), True
            session.step()
            tally.on = False
            reads_per_step.append(sum(tally.reads.values()) - before)
    steps = max(1, len(reads_per_step))  # a session that ended at its prefill has no decoding step
    per = lambda d: {k: round(v / steps, 1) for k, v in d.items()}  # noqa: E731
    ops = per(tally.ops)
    return {"steps": steps, "ops": {**ops, "total": round(sum(ops.values()), 1)}, "host_reads": per(tally.reads),
            "host_reads_max": max(reads_per_step, default=0), "tokens": list(session.generated)}


def _clock(device: torch.device):
    """CPU process time (waits for a busy CPU do not count); on a GPU, wall time after the queue has drained."""
    if device.type != "cuda":
        return time.process_time

    def now() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return now


def _timed(spent: dict, key: str, fn, clock):
    def wrapped(*args, **kwargs):
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += clock() - t0
    return wrapped


def time_steps(method: str, target, drafter, prompt_ids, tree: TreeConfig, new_tokens: int) -> dict:
    """Median milliseconds per decoding step (on a CPU its process time, so waits for a busy CPU do not count): the
    drafting phase (build_tree) and its part outside the drafter's forwards, the drafter's forwards (in drafting
    and in the commit's ingest), the target's forward, and the rest of the step (verification and commit, the
    ingest included)."""
    session = start(method, target, prompt_ids, DecodeConfig(max_new_tokens=new_tokens), tree, drafter,
                    trace=False)
    spent, clock = dict.fromkeys((TARGET, DRAFTER, "draft", "draft_network"), 0.0), _clock(target.device)
    target.forward = _timed(spent, TARGET, target.forward, clock)
    target.logits = _timed(spent, TARGET, target.logits, clock)
    for part in DRAFTER_PARTS if drafter is not None else ():
        setattr(drafter, part, _timed(spent, DRAFTER, getattr(drafter, part), clock))
    rows = []
    draft = _timed(spent, "draft", engine.build_tree, clock)

    def drafting(*args, **kwargs):  # the drafter's forwards inside the drafting phase, apart
        before = spent[DRAFTER]
        try:
            return draft(*args, **kwargs)
        finally:
            spent["draft_network"] += spent[DRAFTER] - before
    try:
        with mock.patch.object(engine, "build_tree", drafting):
            session.step()
            while not session.done:
                for key in spent:
                    spent[key] = 0.0
                t0 = clock()
                session.step()
                rows.append({"total": clock() - t0, **spent})
    finally:
        _unpatch(target, drafter)
    ms = lambda xs: round(1000 * statistics.median(xs), 3) if xs else None  # noqa: E731
    return {"draft_ms": ms([r["draft"] for r in rows]),
            "draft_outside_network_ms": ms([r["draft"] - r["draft_network"] for r in rows]),
            "drafter_network_ms": ms([r[DRAFTER] for r in rows]),
            "target_forward_ms": ms([r[TARGET] for r in rows]),
            "rest_ms": ms([r["total"] - r["draft"] - r[TARGET] for r in rows]),
            "step_ms": ms([r["total"] for r in rows])}


def _unpatch(target, drafter) -> None:
    for obj, parts in ((target, ("forward", "logits")), (drafter, DRAFTER_PARTS)):
        for part in parts if obj is not None else ():
            obj.__dict__.pop(part, None)


def _models(name: str):
    if name == "tiny":
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny import random_drafter, tiny_target
        target = tiny_target(scale=6.0)
        return target, random_drafter(target), [5, 17, 33, 2, 41, 8]
    from gumiho_core.models import load_drafter, load_target
    from gumiho_core.text import encode_prompt
    target = load_target("default")
    return target, load_drafter("default", target), encode_prompt(target.tokenizer, PROMPT)


def measure(target, drafter, prompt_ids, methods, tree: TreeConfig, new_tokens: int, timing: bool = True,
            counts: bool = True) -> dict:
    """Per method: the timed session first, so that a prompt decoded here for the first time gives times with the
    costs of shapes met for the first time (as a real run pays them), then the counted one."""
    out = {}
    for method in methods:
        times = time_steps(method, target, drafter, prompt_ids, tree, new_tokens) if timing else None
        row = count_steps(method, target, drafter, prompt_ids, tree, new_tokens) if counts else {}
        out[method] = row if times is None else {**row, "cpu": times}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("default", "tiny"), default="default")
    ap.add_argument("--methods", default="ar,gumiho,serial")
    ap.add_argument("--new-tokens", type=int, default=40)
    ap.add_argument("--total-tokens", type=int, default=TreeConfig.total_tokens)
    ap.add_argument("--no-timing", action="store_true", help="counts only")
    ap.add_argument("--no-counts", action="store_true", help="CPU times only")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    target, drafter, prompt = _models(args.model)
    tree = TreeConfig(total_tokens=args.total_tokens)
    res = measure(target, drafter, prompt, args.methods.split(","), tree, args.new_tokens, not args.no_timing,
                  not args.no_counts)
    for method, row in res.items():
        line = {k: v for k, v in row.items() if k != "tokens"}
        print(method, json.dumps(line))
    if args.out:
        Path(args.out).write_text(json.dumps({"model": args.model, "tree": asdict(tree), "results": res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training throughput: tokens per second of the real Trainer over a fixed number of optimizer steps.

    .venv/bin/python scripts/measure_train_speed.py --corpus DIR --workdir DIR [--steps 20] [--threads 1]
        [--precision fp32] [--rollout teacher-forced] [--fraction 1] [--code PATH]

Runs Trainer's own loop (micro-batches, loss, backward, optimizer steps) on the default target and stops it
after --steps optimizer steps (the first step, which pays one-time costs, is not timed). Prints one JSON
line: seconds, optimizer steps, padded tokens/s, tokens/s (real tokens, prompt and answer: the unit the
trainer's steps are sized in) and answer tokens/s (the tokens the loss trains on). --code runs another
checkout's trainer (e.g. an older commit exported with git archive), so two versions can be interleaved on
the same data in one run. Compare versions only as ratios measured in one interleaved run.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path


class _Done(Exception):
    pass


def _count(trainer, sums: dict, steps: int) -> None:
    """Wrap the trainer's micro-batch and step hooks: count tokens, start the clock after step 1, stop after
    `steps` more."""
    on_device, step = trainer._on_device, trainer._optimizer_step

    def counted_batch(micro, *args, **kwargs):
        moved = on_device(micro, *args, **kwargs)
        batch = moved[0] if isinstance(moved, tuple) else moved  # (batch, noise, plan) since the loss plan
        if sums["t0"] is not None:
            sums["padded"] += batch.valid.numel()
            sums["tokens"] += int(batch.valid.sum())
            sums["answer"] += int((batch.valid & batch.assistant).sum())
        return moved

    def counted_step():
        step()
        sums["steps"] += 1
        if sums["steps"] == 1:
            sums["t0"] = time.perf_counter()
        elif sums["steps"] == steps + 1:
            sums["seconds"] = time.perf_counter() - sums["t0"]
            raise _Done

    trainer._on_device, trainer._optimizer_step = counted_batch, counted_step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True)
    p.add_argument("--workdir", required=True, help="holds features/ for the corpus's parts")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--rollout", help="teacher-forced or as-drafted (only for a trainer that has rollouts)")
    p.add_argument("--fraction", type=float, default=1.0)
    p.add_argument("--code", help="a checkout whose gumiho_core to run (default: this one)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(args.code).resolve() if args.code else Path(__file__).resolve().parent.parent))
    import torch

    torch.set_num_threads(args.threads)
    from gumiho_core.models import load_target
    from gumiho_core.training.data import load_corpus
    from gumiho_core.training.trainer import TrainConfig, Trainer

    target = load_target()
    seqs = load_corpus(args.corpus, Path(args.workdir) / "features", target.config.hidden_size, args.fraction)
    extra = {"rollout": args.rollout} if args.rollout else {}
    if "steps" in {f.name for f in fields(TrainConfig)}:
        extra["steps"] = 10 ** 6  # a long schedule: the rate stays near its warm-up ramp, as the old trainer's
    cfg = TrainConfig(epochs=1000, precision=args.precision, holdout=0.0, **extra)
    sums = {"padded": 0, "tokens": 0, "answer": 0, "steps": 0, "t0": None}
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(target, seqs, cfg, out)
        _count(trainer, sums, args.steps)
        try:
            trainer.run()
        except _Done:
            pass
    s = sums["seconds"]
    print(json.dumps({"code": args.code or "this", "threads": args.threads, "precision": args.precision,
                      "rollout": args.rollout or "teacher-forced", "steps": args.steps, "seconds": round(s, 2),
                      "padded_tok_s": round(sums["padded"] / s, 1), "tok_s": round(sums["tokens"] / s, 1),
                      "answer_tok_s": round(sums["answer"] / s, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

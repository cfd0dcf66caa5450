"""Tokens per second of the training loss (forward and backward) on the trainer's own micro-batches.

    .venv/bin/python scripts/measure_loss_speed.py --corpus DIR --workdir DIR [--code PATH] [--precision fp32]
        [--micro-batches 2] [--micro-tokens 2048] [--rollout teacher-forced]

Builds the Trainer (one thread) on the corpus's parts that have features under --workdir/features, runs
micro-batch 0 to warm up, then times gumiho_loss + backward on micro-batches 1..N, as train_epoch runs them
(no optimizer step). --code runs another checkout's gumiho_core (e.g. an older commit exported with git
archive), so versions can be interleaved on the same micro-batches; --rollout only for a checkout that has
rollouts. Prints one JSON line. Compare versions only as ratios measured in one interleaved run.
"""
from __future__ import annotations

import argparse
import inspect
import json
import random
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True)
    p.add_argument("--workdir", required=True, help="holds features/ for the corpus's parts")
    p.add_argument("--code", help="a checkout whose gumiho_core to run (default: this one)")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--micro-batches", type=int, default=2)
    p.add_argument("--micro-tokens", type=int, default=2048)
    p.add_argument("--rollout")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(args.code).resolve() if args.code else Path(__file__).resolve().parent.parent))
    import torch

    torch.set_num_threads(1)
    from gumiho_core.models import load_target
    from gumiho_core.training.data import load_corpus
    from gumiho_core.training.objective import OBJECTIVES, gumiho_loss, uniform_noise
    from gumiho_core.training.trainer import TrainConfig, Trainer, micro_batches

    target = load_target()
    seqs = load_corpus(args.corpus, Path(args.workdir) / "features", target.config.hidden_size)
    rollout = {"rollout": args.rollout} if args.rollout else {}
    cfg = TrainConfig(precision=args.precision, holdout=0.0, micro_tokens=args.micro_tokens, **rollout)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(target, seqs, cfg, out)
    batches = micro_batches(trainer.train_seqs, cfg.micro_tokens, random.Random(0))
    weights = OBJECTIVES[cfg.objective].at_epoch(0, cfg.ce_fraction)
    extra = dict(rollout)

    def one(micro) -> tuple[int, int]:
        if "weights" in inspect.signature(trainer._on_device).parameters:  # since the loss plan (plan.py)
            batch, noise, plan = trainer._on_device(micro, weights, metrics=False)
            extra.update(plan=plan, rollout=cfg.rollout)
        else:
            batch = trainer._on_device(micro)
            noise = uniform_noise(batch, cfg.noise)
        with trainer._autocast():
            loss, _ = gumiho_loss(trainer.drafter, batch, weights, noise, metrics=False, **extra)
        loss.backward()
        return int(batch.valid.sum()), int((batch.valid & batch.assistant).sum())

    torch.manual_seed(0)
    one(batches[0])
    t0, tokens, answer = time.perf_counter(), 0, 0
    for micro in batches[1:1 + args.micro_batches]:
        t, a = one(micro)
        tokens, answer = tokens + t, answer + a
    s = time.perf_counter() - t0
    print(json.dumps({"code": args.code or "this", "precision": args.precision,
                      "rollout": extra.get("rollout", "teacher-forced"), "micro_batches": args.micro_batches,
                      "micro_tokens": args.micro_tokens, "seconds": round(s, 1), "tok_s": round(tokens / s, 1),
                      "answer_tok_s": round(answer / s, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

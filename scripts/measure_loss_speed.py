"""Tokens per second of the training loss (forward and backward) on the trainer's own micro-batches.

    .venv/bin/python scripts/measure_loss_speed.py --corpus DIR --workdir DIR [--code PATH] [--precision fp32]
        [--micro-batches 2] [--micro-tokens 2048] [--rollout teacher-forced] [--threads 1] [--flops]

Builds the Trainer (--threads, default one) on the corpus's parts that have features under
--workdir/features, runs micro-batch 0 to warm up, then times gumiho_loss + backward on micro-batches 1..N, as
train_epoch runs them (no optimizer step). --code runs another checkout's gumiho_core (e.g. an older commit
exported with git archive), so versions can be interleaved on the same micro-batches; --rollout only for a
checkout that has rollouts. Prints one JSON line. Compare versions only as ratios measured in one interleaved run.

--flops then counts the arithmetic of the same micro-batches (torch's FlopCounterMode: the matmuls, forward and
backward, and the attention kernels it knows) and times one matmul of the drafter's shape in the run's precision
on the same threads: "achieved_gflops" over "matmul_gflops" is the share of this device's matmul rate the loss
reaches. Near 1, only less arithmetic makes training faster here; far below it, the time goes elsewhere (on a GPU,
launching kernels).
"""
from __future__ import annotations

import argparse
import inspect
import json
import random
import sys
import tempfile
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
    p.add_argument("--architecture", help="the family member (gumiho, eagle, medusa; default gumiho)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--flops", action="store_true", help="also count the arithmetic and the share of the matmul rate")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(args.code).resolve() if args.code else Path(__file__).resolve().parent.parent))
    import torch

    torch.set_num_threads(args.threads)
    from gumiho_core.models import load_target
    from gumiho_core.training.data import load_corpus
    from gumiho_core.training.objective import OBJECTIVES, gumiho_loss, uniform_noise
    from gumiho_core.timing import Stopwatch
    from gumiho_core.training.trainer import TrainConfig, Trainer, micro_batches

    target = load_target()
    seqs = load_corpus(args.corpus, Path(args.workdir) / "features", target.config.hidden_size)
    rollout = {"rollout": args.rollout} if args.rollout else {}
    member = {"architecture": args.architecture} if args.architecture else {}
    cfg = TrainConfig(precision=args.precision, holdout=0.0, micro_tokens=args.micro_tokens, **rollout, **member)
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
    timed, watch = batches[1:1 + args.micro_batches], Stopwatch(trainer.target.device)  # waits for a GPU's queue
    watch.start()
    tokens, answer = (sum(c) for c in zip(*[one(micro) for micro in timed]))
    s = watch.lap()
    out = {"code": args.code or "this", "precision": args.precision, "threads": args.threads,
           "rollout": extra.get("rollout", "teacher-forced"), "architecture": args.architecture or "gumiho",
           "micro_batches": args.micro_batches,
           "micro_tokens": args.micro_tokens, "seconds": round(s, 1), "tok_s": round(tokens / s, 1),
           "answer_tok_s": round(answer / s, 1)}
    if args.flops:
        out.update(_arithmetic(torch, lambda: [one(micro) for micro in timed], s, tokens, trainer,
                               args.micro_tokens))
    print(json.dumps(out))
    return 0


def _arithmetic(torch, timed, seconds: float, tokens: int, trainer, rows: int) -> dict:
    """FLOPs of the timed micro-batches (run again under the counter, which slows them) against the rate of one
    [rows, H] x [H, I] matmul of the drafter's own sizes, in the run's precision."""
    from torch.utils.flop_counter import FlopCounterMode

    from gumiho_core.timing import Stopwatch

    counter = FlopCounterMode(display=False)
    with counter:
        timed()
    flops = counter.get_total_flops()
    cfg = trainer.target.config
    a = torch.randn(rows, cfg.hidden_size, device=trainer.target.device)
    b = torch.randn(cfg.hidden_size, cfg.intermediate_size, device=trainer.target.device)
    with trainer._autocast():
        for _ in range(3):
            a @ b
        n, watch = 20, Stopwatch(trainer.target.device)
        watch.start()
        for _ in range(n):
            a @ b
        rate = 2 * rows * cfg.hidden_size * cfg.intermediate_size * n / watch.lap()
    return {"gflop": round(flops / 1e9, 1), "mflop_per_token": round(flops / tokens / 1e6, 1),
            "achieved_gflops": round(flops / seconds / 1e9, 1), "matmul_gflops": round(rate / 1e9, 1),
            "share_of_matmul_rate": round(flops / seconds / rate, 3)}


if __name__ == "__main__":
    sys.exit(main())

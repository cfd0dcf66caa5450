"""Training throughput: tokens per second of the real Trainer over a fixed number of optimizer steps.

    .venv/bin/python scripts/measure_train_speed.py --corpus DIR --workdir DIR [--steps 20] [--threads 1]
        [--precision fp32] [--rollout teacher-forced] [--fraction 1] [--micro-tokens N[,M...]] [--code PATH]
        [--profile FILE]

Runs Trainer's own loop (micro-batches, loss, backward, optimizer steps) on the default target and stops it
after --steps optimizer steps (the first step, which pays one-time costs, is not timed). Prints one JSON
line: seconds, optimizer steps, padded tokens/s, tokens/s (real tokens, prompt and answer: the unit the
trainer's steps are sized in) and answer tokens/s (the tokens the loss trains on). --code runs another
checkout's trainer (e.g. an older commit exported with git archive), so two versions can be interleaved on
the same data in one run. Compare versions only as ratios measured in one interleaved run. --micro-tokens times
each micro-batch size in turn, one JSON line each, on the features loaded once (default: the size `train` takes on
this device, schedule.micro_tokens_for; an older checkout's own default with --code).

Runs on the GPU where there is one (the target's default device). --profile FILE records --steps more steps,
after the timed ones, with torch.profiler, and writes the ops that took the most device time and the most host
time (on a GPU a step waits on either: the kernels, or the Python and dispatch that launch them), for the first
--micro-tokens size. The profiler slows the steps it records, so the JSON line's figures come from the steps
before it.

It runs with the memory allocator it is started with, while `python -m gumiho_core.train` runs itself with tcmalloc
where the system has it (gumiho_core/training/allocator.py): start it with LD_PRELOAD=<that libtcmalloc> to time
what `train` runs, or without to time glibc's malloc.
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


def _count(trainer, sums: dict, steps: int, prof=None) -> None:
    """Wrap the trainer's micro-batch and step hooks: count tokens, start the clock after step 1, stop after
    `steps` more; with a profiler `prof`, record `steps` more after those."""
    on_device, step = trainer._on_device, trainer._optimizer_step

    def counted_batch(micro, *args, **kwargs):
        moved = on_device(micro, *args, **kwargs)
        batch = moved[0] if isinstance(moved, tuple) else moved  # (batch, noise, plan) since the loss plan
        if sums["t0"] is not None and sums["seconds"] is None:
            sums["padded"] += batch.valid.numel()
            sums["tokens"] += int(batch.valid.sum())
            sums["answer"] += int((batch.valid & batch.assistant).sum())
        return moved

    def counted_step():
        step()
        sums["steps"] += 1
        if sums["steps"] == 1:
            sums["t0"] = _clock(trainer)
        elif sums["steps"] == steps + 1:
            sums["seconds"] = _clock(trainer) - sums["t0"]
            if prof is None:
                raise _Done
            prof.start()
        elif sums["steps"] == 2 * steps + 1:
            prof.stop()
            raise _Done

    trainer._on_device, trainer._optimizer_step = counted_batch, counted_step


def _clock(trainer) -> float:
    """Seconds now, once the device has finished the work queued so far (a GPU runs behind the host)."""
    import torch

    if trainer.target.device.type == "cuda":
        torch.cuda.synchronize(trainer.target.device)
    return time.perf_counter()


def _profiler(trainer):
    from torch.profiler import ProfilerActivity, profile

    cuda = trainer.target.device.type == "cuda"
    return profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))


def _write_profile(prof, cuda: bool, steps: int, path: Path) -> None:
    """The top ops of the profiled steps by device time (on a GPU) and by host time."""
    table = prof.key_averages()
    lines = [f"{steps} optimizer steps under torch.profiler, after the timed ones (calls: over all {steps}; an op's "
             "total includes the ops it calls, its self time does not)"]
    if cuda:
        lines += ["", "by device time:", table.table(sort_by="self_cuda_time_total", row_limit=30)]
    lines += ["", "by host time:", table.table(sort_by="self_cpu_time_total", row_limit=30)]
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True)
    p.add_argument("--workdir", required=True, help="holds features/ for the corpus's parts")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--rollout", help="teacher-forced or as-drafted (only for a trainer that has rollouts)")
    p.add_argument("--architecture", help="the family member to train: gumiho, eagle or medusa (default gumiho)")
    p.add_argument("--fraction", type=float, default=1.0)
    p.add_argument("--code", help="a checkout whose gumiho_core to run (default: this one)")
    p.add_argument("--profile", help="record --steps more steps with torch.profiler into this file (see above)")
    p.add_argument("--micro-tokens", default="", help="comma-separated micro-batch sizes to time in turn")
    args = p.parse_args(argv)
    sizes = [m.strip() for m in args.micro_tokens.split(",") if m.strip()]
    if not all(m.isdigit() and int(m) > 0 for m in sizes):
        p.error(f"--micro-tokens takes comma-separated positive sizes; got {args.micro_tokens!r}")
    sys.path.insert(0, str(Path(args.code).resolve() if args.code else Path(__file__).resolve().parent.parent))
    import torch

    torch.set_num_threads(args.threads)
    from gumiho_core.models import load_target
    from gumiho_core.training.data import load_corpus

    target = load_target()
    seqs = load_corpus(args.corpus, Path(args.workdir) / "features", target.config.hidden_size, args.fraction)
    for i, micro in enumerate([int(m) for m in sizes] or [None]):
        print(json.dumps(_measure(args, target, seqs, micro, args.profile if i == 0 else None)), flush=True)
    return 0


def _measure(args, target, seqs, micro: int | None, profile: str | None) -> dict:
    """One JSON line's figures: --steps timed optimizer steps of a fresh Trainer with micro-batches of `micro`
    padded tokens (None: as `train` takes them here), then as many profiled into `profile` if given."""
    from gumiho_core.training.trainer import TrainConfig, Trainer

    extra = {"rollout": args.rollout} if args.rollout else {}
    if args.architecture:
        extra["architecture"] = args.architecture
    if "steps" in {f.name for f in fields(TrainConfig)}:
        extra["steps"] = 10 ** 6  # a long schedule: the rate stays near its warm-up ramp, as the old trainer's
    if micro is None and not args.code:
        from gumiho_core.training.schedule import micro_tokens_for

        micro = micro_tokens_for(target.device, TrainConfig.tokens_per_step)
    if micro is not None:
        extra["micro_tokens"] = micro
    cfg = TrainConfig(epochs=1000, precision=args.precision, holdout=0.0, **extra)
    sums = {"padded": 0, "tokens": 0, "answer": 0, "steps": 0, "t0": None, "seconds": None}
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(target, seqs, cfg, out)
        prof = _profiler(trainer) if profile else None
        _count(trainer, sums, args.steps, prof)
        try:
            trainer.run()
        except _Done:
            pass
        if prof is not None:
            _write_profile(prof, trainer.target.device.type == "cuda", args.steps, Path(profile))
    s = sums["seconds"]
    return {"code": args.code or "this", "threads": args.threads, "precision": args.precision,
            "rollout": args.rollout or "teacher-forced", "architecture": args.architecture or "gumiho",
            "micro_tokens": cfg.micro_tokens, "steps": args.steps,
            "seconds": round(s, 2), "step_s": round(s / args.steps, 4), "padded_tok_s": round(sums["padded"] / s, 1),
            "tok_s": round(sums["tokens"] / s, 1), "answer_tok_s": round(sums["answer"] / s, 1)}


if __name__ == "__main__":
    sys.exit(main())

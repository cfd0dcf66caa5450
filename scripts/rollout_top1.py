"""Held-out top-1 per depth of trained heads, under both rollouts of training (teacher-forced and as-drafted).

    .venv/bin/python scripts/rollout_top1.py --workdir DIR --corpus DIR RUN [RUN ...]

Each RUN is a folder under --workdir holding drafter/ (what `train` writes). The held-out conversations are
the trainer's own split (TrainConfig's holdout and seed) of the corpus's parts that have features. Prints one
JSON line per run and rollout: agreement of each part's top choice with the target's (serial = depth 1,
serial2 = depth 2 as drafting runs it, mlp1.. = depths 3..). as-drafted is what drafting sees.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gumiho_core.models import load_drafter, load_target  # noqa: E402
from gumiho_core.training.data import load_corpus, split  # noqa: E402
from gumiho_core.training.objective import OBJECTIVES, collate, gumiho_loss  # noqa: E402
from gumiho_core.training.rollout import ROLLOUTS  # noqa: E402
from gumiho_core.training.trainer import TrainConfig, micro_batches  # noqa: E402


@torch.no_grad()
def top1(drafter, seqs, rollout: str) -> dict[str, float]:
    sums, n = {}, 0
    for micro in micro_batches(seqs, TrainConfig.micro_tokens, random.Random(0)):
        batch = collate(micro)
        _, metrics = gumiho_loss(drafter, batch, OBJECTIVES["distill"], rollout=rollout)
        tokens = int(batch.valid.sum())
        for k, v in metrics.floats().items():
            if k.endswith("_top1"):
                sums[k] = sums.get(k, 0.0) + v * tokens
        n += tokens
    return {k[:-5]: round(v / n, 4) for k, v in sums.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("runs", nargs="+")
    args = p.parse_args(argv)
    target = load_target()
    seqs = load_corpus(args.corpus, Path(args.workdir) / "features", target.config.hidden_size)
    _, held = split(seqs, TrainConfig.holdout, TrainConfig.seed)
    for run in args.runs:
        drafter = load_drafter(str(Path(args.workdir) / run / "drafter"), target).float().eval()
        for name in ROLLOUTS:
            print(json.dumps({"run": run, "rollout": name, "conversations": len(held), **top1(drafter, held, name)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Are the heads data-bound? Each head's agreement with the target on conversations it trained on, beside its
held-out split and prompts added to the corpus after it was trained.

    .venv/bin/python scripts/generalization_gap.py [--draft assets/smollm2-135m-instruct-gumiho]
        [--new-prompts prompts/train_generated_3.jsonl] [--n 300] [--threads 2] [--out gap.json]

Three sets of the corpus's conversations (data/ for the default target): `trained-on`, N drawn from the training
side of the heads' own held-out split (their holdout share and seed, read from the heads' config; prompts named
by --new-prompts excluded); `held-out`, up to N of the other side; `new`, N whose prompts are in --new-prompts (a
prompt file the corpus gained after the heads were trained: training never saw them, and they were not chosen as
the held-out ones were). The target's features are computed here for the drawn conversations alone, so no
`extract-features` is needed. Each set goes through the trainer's own validation (the heads' rollout, no noise):
per head, top-1 and top-10 agreement with the target's choice among the draft vocabulary, soft cross-entropy,
and the loss. A head whose trained-on agreement is far above its held-out one fits its data better than it
generalises (more data should pay); one with the same low figure on both is limited by its steps or capacity.
About 12 minutes on two CPU cores at N = 300, most of it the target's features.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gumiho_core.models import DEFAULT_DRAFTER  # noqa: E402

SETS = ("trained-on", "held-out", "new")
SHOWN = ("serial", "serial2", "mlp1", "mlp2", "mlp3", "mlp4", "mlp5")


def _conversations(corpus: Path, new_keys: set[str], holdout: float, seed: int) -> dict:
    """The corpus's conversations (no features yet) by set."""
    from gumiho_core.training.corpus import parts, read_part
    from gumiho_core.training.data import held_out_groups

    rows = [r for part in parts(corpus) for r in read_part(part)]
    held = held_out_groups(sorted({r.prompt_key for r in rows}), holdout, seed) - new_keys
    return {"trained-on": [r for r in rows if r.prompt_key not in held and r.prompt_key not in new_keys],
            "held-out": [r for r in rows if r.prompt_key in held],
            "new": [r for r in rows if r.prompt_key in new_keys]}


def _with_features(target, rows) -> list:
    import torch

    from gumiho_core.training.data import conversation_sequence
    from gumiho_core.training.distill import batched_features

    with torch.inference_mode():  # else every feature keeps the target's whole forward graph alive
        feats = batched_features(target, [list(r.ids) for r in rows], max_batch_tokens=4096)
    return [conversation_sequence(r, f) for r, f in zip(rows, feats)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draft", default=str(ROOT / DEFAULT_DRAFTER), help="trained heads (a drafter folder)")
    p.add_argument("--new-prompts", nargs="*", default=[str(ROOT / "prompts" / "train_generated_3.jsonl")],
                   help="prompt files the corpus gained after these heads were trained")
    p.add_argument("--n", type=int, default=300, help="conversations per set")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1, help="which conversations are drawn")
    p.add_argument("--out", help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    if args.n < 1:
        p.error(f"--n must be at least 1; got {args.n}")
    config = Path(args.draft) / "config.json"
    if not config.is_file():
        p.error(f"--draft {args.draft} is not a drafter folder (no config.json)")
    trained = json.loads(config.read_text()).get("train_config")
    if not trained:
        p.error(f"{config} does not say how the heads were trained (no train_config): their split is unknown")
    import torch

    from gumiho_core.jsonl import read_jsonl
    from gumiho_core.models import load_target
    from gumiho_core.training.corpus import prompt_key
    from gumiho_core.training.trainer import TrainConfig, Trainer
    from gumiho_core.training.workspace import DEFAULT_CORPUS

    torch.set_num_threads(args.threads)
    new_keys = {prompt_key(r["prompt"]) for f in args.new_prompts for r in read_jsonl(f)}
    pools = _conversations(Path(DEFAULT_CORPUS), new_keys, trained["holdout"], trained["seed"])
    rng = random.Random(args.seed)
    drawn = {k: rng.sample(v, min(args.n, len(v))) for k, v in pools.items()}
    target = load_target()
    cfg = TrainConfig(init_from=str(args.draft), precision="fp32", holdout=0.0, rollout=trained["rollout"],
                      objective=trained["objective"])
    figures = {}
    with tempfile.TemporaryDirectory() as out:
        trainer = None
        for name in SETS:
            if not drawn[name]:
                continue
            seqs = _with_features(target, drawn[name])
            trainer = trainer or Trainer(target, seqs[:1], cfg, out)
            figures[name] = {k.removeprefix("val_"): round(v, 4) for k, v in trainer.validate(seqs).items()}
            figures[name]["conversations"] = len(seqs)
            figures[name]["answer_tokens"] = int(sum(int(s.mask.sum()) for s in seqs))
    _print(figures, {k: len(v) for k, v in pools.items()})
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


def _print(figures: dict, pool_sizes: dict) -> None:
    sets = [s for s in SETS if s in figures]
    print("conversations drawn / in the corpus: " + ", ".join(
        f"{s} {figures[s]['conversations']} / {pool_sizes[s]} ({figures[s]['answer_tokens']:,} answer tokens)"
        for s in sets))
    print("| head | " + " | ".join(f"top-1 {s}" for s in sets) + " | top-1 gap (trained-on - held-out) |")
    print("|---" * (len(sets) + 2) + "|")
    for head in SHOWN:
        top = [figures[s].get(f"{head}_top1") for s in sets]
        if None in top:
            continue
        gap = figures["trained-on"][f"{head}_top1"] - figures["held-out"][f"{head}_top1"] \
            if {"trained-on", "held-out"} <= set(sets) else float("nan")
        print(f"| {head} | " + " | ".join(f"{t:.3f}" for t in top) + f" | {gap:+.3f} |")
    print("loss: " + ", ".join(f"{s} {figures[s]['loss']:.3f}" for s in sets))


if __name__ == "__main__":
    sys.exit(main())

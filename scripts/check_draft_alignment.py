"""Does drafting at run time see what training saw? Teacher-forced and as-drafted top-1 against the engine's
acceptance at depths 1, 2 (the serial step fed its own output) and 3 (the first MLP head).

    .venv/bin/python scripts/check_draft_alignment.py [--n 6] [--tokens 96] [--draft default] [--out FILE]

On N held-out prompts (spread over prompts/heldout.jsonl's categories) the target answers greedily; then:
1. the engine decodes each prompt with a one-path gumiho tree of depth 3 (the drafter's top choice at each
   depth); depth d's acceptance is the share of steps accepting depth d among those that accepted d - 1;
2. the same answers' features are extracted as for training, and each rollout of training
   (gumiho_core/training/rollout.py) is scored at the positions the engine drafted from: whether its top
   choice at depth d is the answer's actual token, among the positions whose depths before d were right.
   The serial head's teacher-forced top-1 is also given as the trainer's metric (agreement with the target's
   choice among the draftable tokens) and against the actual tokens at every answer position.
The rollout whose figures match (1) is the one that feeds the heads what drafting feeds them. --out also writes the
figures as JSON; as `alignment.json` in a training run's folder, `train ship` puts them in the model card.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gumiho_core import DecodeConfig, TreeConfig, generate, start  # noqa: E402
from gumiho_core.jsonl import read_jsonl  # noqa: E402
from gumiho_core.models import load_drafter, load_target  # noqa: E402
from gumiho_core.text import encode_prompt  # noqa: E402
from gumiho_core.training.data import extract_features, load_features  # noqa: E402
from gumiho_core.training.objective import OBJECTIVES, collate, gumiho_loss  # noqa: E402
from gumiho_core.training.rollout import ROLLOUTS, TEACHER_FORCED, rollout  # noqa: E402
from gumiho_core.training.run_commands import spread  # noqa: E402

ONE_PATH = TreeConfig(top_k=1, mlp_topk=1, pruning=1, total_tokens=4, depth=3)
DEPTHS = 3


def engine_steps(target, drafter, prompt_ids: list[int], tokens: int) -> list[tuple[int, int]]:
    """(position of the first drafted token, tokens accepted) of each step of a one-path tree."""
    run = generate(start("gumiho", target, prompt_ids, DecodeConfig(max_new_tokens=tokens), ONE_PATH, drafter))
    pos, steps = len(prompt_ids) + len(run.records[0].new_token_ids), []
    for rec in run.records[1:]:
        steps.append((pos, rec.verdict.accept_length))
        pos += len(rec.new_token_ids)
    return steps


@torch.no_grad()
def rollout_hits(drafter, seq, name: str) -> dict[int, list[bool]]:
    """Position q -> whether the rollout's top choice at depths 1..3 drafted from pair q - 2 is the actual token."""
    r = rollout(name, drafter, collate([seq]))
    L = len(seq.ids) - DEPTHS - 1  # pairs whose depth-3 token is in the answer
    feats = torch.stack([r.serial[0][0, :L], torch.stack([r.drafted_at(2, 0, j) for j in range(L)]),
                         drafter.heads(r.heads_in[0, :L], 1)[0]])  # [3, L, H]: depth d at pair j predicts x_{j+d+1}
    top = drafter.to_target_ids(drafter.logits(feats).argmax(-1))  # [3, L]
    ids = seq.ids
    return {j + 2: [bool(top[d, j] == ids[j + 2 + d]) for d in range(DEPTHS)] for j in range(L)}


def conditional(hits: list[list[bool]]) -> list[float]:
    """Per depth, the share right among those right at every depth before it."""
    rates = []
    for d in range(DEPTHS):
        reached = [h for h in hits if all(h[:d])]
        rates.append(sum(h[d] for h in reached) / max(1, len(reached)))
    return rates


@torch.no_grad()
def actual_hits(drafter, seq, prompt_len: int) -> dict[int, bool]:
    """Position -> whether the serial head's teacher-forced top choice is the answer's actual token there."""
    o = rollout(TEACHER_FORCED, drafter, collate([seq])).serial[0][0]  # o_j predicts the token at j + 2
    top = drafter.to_target_ids(drafter.logits(o).argmax(-1))
    return {j + 2: bool(top[j] == seq.ids[j + 2]) for j in range(prompt_len - 2, len(seq.ids) - 2)}


def _fmt(rates) -> str:
    return " / ".join(f"{x:.3f}" for x in rates)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=6, help="held-out prompts")
    p.add_argument("--tokens", type=int, default=96, help="new tokens per answer")
    p.add_argument("--draft", default="default")
    p.add_argument("--out", help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    target = load_target()
    drafter = load_drafter(args.draft, target).float().eval()
    rows, drafted = [], []
    for row in spread(read_jsonl(ROOT / "prompts" / "heldout.jsonl", required=("prompt",)), args.n):
        ids = list(encode_prompt(target.tokenizer, row["prompt"]))
        answer = generate(start("ar", target, ids, DecodeConfig(max_new_tokens=args.tokens))).token_ids
        rows.append({"prompt_ids": ids, "answer_ids": list(answer)})
        drafted.append(engine_steps(target, drafter, ids, args.tokens))
    with tempfile.TemporaryDirectory() as d:
        seqs = load_features(extract_features(target, rows, d), target.config.hidden_size)
    with torch.no_grad():
        _, metrics = gumiho_loss(drafter, collate(seqs), OBJECTIVES["distill"].at_epoch(99, 1.0))
    accepted = [[a >= d for d in range(1, DEPTHS + 1)] for steps in drafted for _, a in steps]
    figures = {"heads": str(args.draft), "prompts": len(rows), "tokens": args.tokens, "steps": len(accepted),
               "engine": conditional(accepted)}
    print(f"engine, one-path tree of depth {DEPTHS}: acceptance per depth {_fmt(figures['engine'])} over "
          f"{len(accepted)} steps")
    for name in ROLLOUTS:
        at = [hits[q] for seq, steps in zip(seqs, drafted) for hits in [rollout_hits(drafter, seq, name)]
              for q, _ in steps if q in hits]
        figures[name] = conditional(at)
        print(f"{name}: top-1 per depth at the engine's {len(at)} positions {_fmt(figures[name])}")
    every = [h for seq, row in zip(seqs, rows) for h in actual_hits(drafter, seq, len(row["prompt_ids"])).values()]
    print(f"teacher-forced serial top-1: trainer's metric {metrics.floats()['serial_top1']:.3f}; against the actual "
          f"tokens "
          f"{sum(every) / len(every):.3f} over {len(every)} positions")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

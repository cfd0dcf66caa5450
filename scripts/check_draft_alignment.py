"""Does drafting at run time see what training saw? Teacher-forced top-1 against the engine's depth-1 acceptance.

    .venv/bin/python scripts/check_draft_alignment.py [--n 6] [--tokens 96] [--draft default]

On N held-out prompts (spread over prompts/heldout.jsonl's categories) the target answers greedily; then:
1. the engine decodes each prompt with a one-node gumiho tree (the serial head's top choice only), and the
   share of steps whose draft was accepted is its depth-1 acceptance;
2. the same answers' features are extracted as for training, and the serial head's teacher-forced top-1 is
   measured three ways: the trainer's metric (agreement with the target's choice among the draftable
   tokens), against the answer's actual next tokens, and against them only at the positions the engine drafted.
If (1) and the last of (2) agree, the engine feeds the heads what training fed them.
"""
from __future__ import annotations

import argparse
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
from gumiho_core.training.objective import OBJECTIVES, _serial_outputs, collate, gumiho_loss  # noqa: E402
from gumiho_core.training.run_commands import spread  # noqa: E402

ONE_NODE = TreeConfig(top_k=1, mlp_topk=1, pruning=1, total_tokens=2, depth=1)


def engine_positions(target, drafter, prompt_ids: list[int], tokens: int) -> tuple[list[int], list[bool]]:
    """The positions the engine drafted with a one-node tree, and whether each draft was accepted."""
    run = generate(start("gumiho", target, prompt_ids, DecodeConfig(max_new_tokens=tokens), ONE_NODE, drafter))
    pos, where, hit = len(prompt_ids) + len(run.records[0].new_token_ids), [], []
    for rec in run.records[1:]:
        where.append(pos)
        hit.append(len(rec.new_token_ids) > 1)
        pos += len(rec.new_token_ids)
    return where, hit


@torch.no_grad()
def actual_hits(drafter, seq, prompt_len: int) -> dict[int, bool]:
    """Position -> whether the serial head's teacher-forced top choice is the answer's actual token there."""
    o = _serial_outputs(drafter, collate([seq]), None)[0]  # o_j predicts the token at j + 2
    top = drafter.logits(o).argmax(-1)
    vocab = drafter.shared.vocab_map
    top = vocab[top] if vocab is not None else top
    return {j + 2: bool(top[j] == seq.ids[j + 2]) for j in range(prompt_len - 2, len(seq.ids) - 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=6, help="held-out prompts")
    p.add_argument("--tokens", type=int, default=96, help="new tokens per answer")
    p.add_argument("--draft", default="default")
    args = p.parse_args(argv)
    target = load_target()
    drafter = load_drafter(args.draft, target).float().eval()
    rows, drafted = [], []
    for row in spread(read_jsonl(ROOT / "prompts" / "heldout.jsonl", required=("prompt",)), args.n):
        ids = list(encode_prompt(target.tokenizer, row["prompt"]))
        answer = generate(start("ar", target, ids, DecodeConfig(max_new_tokens=args.tokens))).token_ids
        rows.append({"prompt_ids": ids, "answer_ids": list(answer)})
        drafted.append(engine_positions(target, drafter, ids, args.tokens))
    with tempfile.TemporaryDirectory() as d:
        seqs = load_features(extract_features(target, rows, d), target.config.hidden_size)
    with torch.no_grad():
        _, metrics = gumiho_loss(drafter, collate(seqs), OBJECTIVES["distill"].at_epoch(99, 1.0))
    every, at = [], []
    for seq, row, (where, _) in zip(seqs, rows, drafted):
        hits = actual_hits(drafter, seq, len(row["prompt_ids"]))
        every += hits.values()
        at += [hits[q] for q in where if q in hits]
    accepted = [h for _, hit in drafted for h in hit]
    print(f"engine, one-node tree: depth-1 acceptance {sum(accepted) / len(accepted):.3f} over {len(accepted)} steps")
    print(f"teacher-forced serial top-1: trainer's metric {metrics['serial_top1']:.3f}; against the actual tokens "
          f"{sum(every) / len(every):.3f} over {len(every)} positions, {sum(at) / len(at):.3f} at the {len(at)} "
          "positions the engine drafted")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Do the drafter's fp16 weights change what it drafts? Every step's tree drafted both ways from the same state.

    .venv/bin/python scripts/compare_draft_precision.py [--n 16] [--tokens 64] [--methods gumiho,serial]

On a CPU where decoding reads the drafter's weights as fp16 (cpu_kernels.half_weights_available), N held-out
prompts (spread over prompts/heldout.jsonl's categories) are decoded greedily with the authors' tree. Before each
step the tree is drafted as decoding drafts it and again with the stock fp32 matmuls (cpu_kernels.stock_kernels),
from the same state, and the two are compared: the same nodes (the same set of root-to-node paths, hence the same
greedy acceptance), the same node order, and the largest difference of a node's cumulative draft log-prob. Where
the nodes differ, the target verifies both trees (greedily) and the tokens each would have accepted are counted.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gumiho_core import DecodeConfig, TreeConfig, start  # noqa: E402
from gumiho_core.cpu_kernels import half_weights_available, stock_kernels  # noqa: E402
from gumiho_core.jsonl import read_jsonl  # noqa: E402
from gumiho_core.models import load_drafter, load_target  # noqa: E402
from gumiho_core.text import encode_prompt  # noqa: E402
from gumiho_core.training.run_commands import spread  # noqa: E402
from gumiho_core.verify import verify_greedy  # noqa: E402


def paths(tree) -> dict[tuple[int, ...], float]:
    """Each node's token path from the root -> its cumulative draft log-prob."""
    return {tuple(tree.tokens[i] for i in tree.path_to(n)): tree.score[n] for n in range(len(tree))}


def compare_session(session) -> list[dict]:
    """Step the session to its end; before each decoding step, its tree both ways."""
    rows = []
    session.step()  # the prefill
    while not session.done:
        fast = session.draft()
        with stock_kernels():
            full = session.draft()
        a, b = paths(fast), paths(full)
        common = a.keys() & b.keys()
        row = {"same_nodes": a.keys() == b.keys(), "same_order": fast.tokens == full.tokens
               and fast.parents == full.parents, "nodes": len(a), "differing": len(a.keys() ^ b.keys()) // 2,
               "max_dscore": max(abs(a[p] - b[p]) for p in common)}
        if not row["same_nodes"]:  # what each tree would have accepted
            row["accepted"] = [verify_greedy(t, session.verify_forward(t), trace=False).accept_length
                               for t in (fast, full)]
        rows.append(row)
        session.step()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16, help="held-out prompts, spread over the categories")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    ap.add_argument("--methods", default="gumiho,serial")
    ap.add_argument("--prompts", default=str(ROOT / "prompts" / "heldout.jsonl"))
    args = ap.parse_args(argv)
    if not half_weights_available():
        print("this CPU reads the drafter's weights in fp32 (no fbgemm fp16 kernel): nothing to compare")
        return 0
    target = load_target("default")
    drafter = load_drafter("default", target)
    prompts = spread(read_jsonl(args.prompts, required=("prompt",)), args.n)
    for method in args.methods.split(","):
        rows = []
        for p in prompts:
            ids = encode_prompt(target.tokenizer, p["prompt"])
            rows += compare_session(start(method, target, ids, DecodeConfig(max_new_tokens=args.tokens), TreeConfig(),
                                          drafter, trace=False))
        differing = [r["differing"] for r in rows if not r["same_nodes"]]
        accepted = [r["accepted"] for r in rows if not r["same_nodes"]]
        print(method, json.dumps({
            "steps": len(rows), "same_nodes": sum(r["same_nodes"] for r in rows),
            "same_order": sum(r["same_order"] for r in rows), "nodes_per_tree": rows[0]["nodes"] if rows else 0,
            "differing_nodes_where_not_same": differing,
            "accepted_fp16_fp32_where_not_same": [sum(a for a, _ in accepted), sum(b for _, b in accepted)],
            "max_dscore": round(max((r["max_dscore"] for r in rows), default=0.0), 5)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

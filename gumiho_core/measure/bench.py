"""Is it really faster here? Benchmark decoding methods on this machine, interleaved prompt by prompt.

    python -m gumiho_core.bench --prompts prompts/mtbench_style.jsonl --out results.json --plot results.png

Methods: ar (our plain loop), hf (transformers generate, greedy, cache on), hf-lookup
(transformers prompt-lookup decoding, a draft-free peer), gumiho, serial (EAGLE-2-style drafting).
On a CPU our methods (ar, gumiho, serial) run the target's linear layers with packed oneDNN weights
(cpu_kernels.py); hf and hf-lookup run stock transformers. gumiho/hf is what a user gains over what
they would otherwise run; gumiho/ar is the part that speculation alone contributes.
Each prompt runs every method back to back in a rotating order, so machine noise hits all alike;
speedups are ratios of totals measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..cli import bad_input, explicit_tree, model_args, quiet_transformers, resolve_tree, target_from_args, tree_args
from ..config import DecodeConfig, TreeConfig
from ..cpu_kernels import stock_kernels
from ..engine import generate, start
from ..errors import GumihoError
from ..models import ASSETS, load_drafter
from ..text import encode_prompt
from ..timing import device_name, synchronize

log = logging.getLogger(__name__)
ALL_METHODS = ("ar", "hf", "hf-lookup", "gumiho", "serial")
OURS = ("ar", "gumiho", "serial", "gumiho-traced")
DEFAULT_PROMPTS = ASSETS.parent / "prompts" / "mtbench_style.jsonl"
LOOKUP_TOKENS = 10  # transformers' prompt_lookup_num_tokens


@dataclass(frozen=True)
class Outcome:
    token_ids: tuple[int, ...]
    wall_s: float
    steps: int | None  # decoding steps (prefill excluded); None where the method does not say


def run_ours(method: str, target, drafter, trees: dict, ids, decode: DecodeConfig) -> Outcome:
    traced = method == "gumiho-traced"  # what the app pays: records with per-phase timings and verdicts
    name = "gumiho" if traced else method
    session = start(name, target, ids, decode, trees.get(name, TreeConfig()), drafter, trace=traced)
    synchronize(target.device)
    t0 = time.perf_counter()
    result = generate(session, keep_records=traced)
    synchronize(target.device)
    return Outcome(result.token_ids, time.perf_counter() - t0, result.steps)


@torch.inference_mode()
def run_hf(method: str, target, ids, decode: DecodeConfig) -> Outcome:
    inp = torch.tensor([ids], device=target.device)
    kwargs = dict(max_new_tokens=decode.max_new_tokens, eos_token_id=sorted(target.eos_ids),
                  pad_token_id=sorted(target.eos_ids)[0], attention_mask=torch.ones_like(inp))
    if decode.greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        torch.manual_seed(decode.seed)
        kwargs.update(do_sample=True, temperature=decode.temperature, top_p=decode.top_p, top_k=None)
    if method == "hf-lookup":
        kwargs["prompt_lookup_num_tokens"] = LOOKUP_TOKENS
    synchronize(target.device)
    t0 = time.perf_counter()
    with stock_kernels():  # transformers as a user runs it, without the packed CPU layers of cpu_kernels.py
        out = target.model.generate(inp, **kwargs)[0, len(ids):].tolist()
    synchronize(target.device)
    wall = time.perf_counter() - t0
    for i, tok in enumerate(out):  # generate pads after the end token
        if tok in target.eos_ids:
            out = out[: i + 1]
            break
    return Outcome(tuple(out), wall, None)


def run_method(method, target, drafter, trees, ids, decode) -> Outcome:
    if method in OURS:
        return run_ours(method, target, drafter, trees, ids, decode)
    return run_hf(method, target, ids, decode)


def summarise(per_prompt: list[dict], methods: list[str], greedy: bool) -> dict:
    out = {}
    for m in methods:
        rows = [p[m] for p in per_prompt]
        tokens = sum(r["new_tokens"] for r in rows)
        wall = sum(r["wall_s"] for r in rows)
        steps = [r["steps"] for r in rows]
        mal = (sum(r["new_tokens"] - 1 for r in rows) / sum(steps)) if None not in steps and sum(steps) else None
        out[m] = {"tokens_per_s": round(tokens / wall, 3), "mean_accept_len": None if mal is None else round(mal, 4),
                  "new_tokens": tokens, "wall_s": round(wall, 3),
                  "identical_prompts": sum(r["identical"] for r in rows) if greedy else None,
                  "per_prompt_tokens_per_s": [round(r["new_tokens"] / r["wall_s"], 3) for r in rows]}
    bases = [b for b in ("hf", "ar") if b in out] or [methods[0]]
    for m in out:
        for base in bases:
            out[m]["speedup_vs_" + base] = round(out[m]["tokens_per_s"] / out[base]["tokens_per_s"], 3)
    return out


def table(results: dict) -> str:
    methods = results["methods"]
    bases = [k for k in next(iter(methods.values())) if k.startswith("speedup_vs_")]
    lines = [f"{'method':<15}{'tokens/s':>10}{'mean acc len':>14}"
             + "".join(f"{b.replace('_', ' '):>16}" for b in bases) + f"{'identical':>11}"]
    for m, r in methods.items():
        mal = "-" if r["mean_accept_len"] is None else f"{r['mean_accept_len']:.2f}"
        ident = "-" if r["identical_prompts"] is None else f"{r['identical_prompts']}/{results['n_prompts']}"
        lines.append(f"{m:<15}{r['tokens_per_s']:>10.2f}{mal:>14}" + "".join(f"{r[b]:>15.2f}x" for b in bases)
                     + f"{ident:>11}")
    return "\n".join(lines)


def plot(results: dict, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(results["methods"])
    fig, ax = plt.subplots(figsize=(1.6 * len(methods) + 2, 4))
    for i, m in enumerate(methods):
        r = results["methods"][m]
        speculative = m in ("gumiho", "serial", "gumiho-traced")
        ax.bar(i, r["tokens_per_s"], color="#F58518" if speculative else "#4C78A8", alpha=0.85)
        pts = r["per_prompt_tokens_per_s"]
        ax.scatter([i + (j / max(1, len(pts) - 1) - 0.5) * 0.5 for j in range(len(pts))], pts, s=8, color="k",
                   alpha=0.5, zorder=3)
        ax.text(i, max([r["tokens_per_s"], *pts]) * 1.02, f"{r['tokens_per_s']:.1f}", ha="center", va="bottom",
                fontsize=10, fontweight="bold")
    ax.set_xticks(range(len(methods)), methods)
    ax.set_ylabel("tokens / s (bar: total, dots: per prompt)")
    ax.set_title(f"{results['model']} on {results['device']}\n{results['n_prompts']} prompts, "
                 f"{results['max_new_tokens']} new tokens, T={results['temperature']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def trees_for(args, methods, target, drafter) -> tuple[dict, dict]:
    """TreeConfig per speculative method, and where each came from (for the report)."""
    trees, notes = {}, {}
    for m in ("gumiho", "serial"):
        if m in methods or (m == "gumiho" and "gumiho-traced" in methods):
            trees[m], notes[m] = resolve_tree(args, m, target, drafter)
    return trees, notes


def bench(args) -> dict:
    from ..jsonl import read_jsonl

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in ALL_METHODS + ("gumiho-traced",)]
    if bad:
        raise GumihoError(f"unknown method {bad[0]!r}: choose from {', '.join(ALL_METHODS)}, gumiho-traced")
    rows = read_jsonl(args.prompts, required=("prompt",))[: args.n_prompts or None]
    target = target_from_args(args)
    drafter = load_drafter(args.draft, target) if set(methods) & {"gumiho", "serial", "gumiho-traced"} else None
    explicit_tree(args)
    trees, notes = trees_for(args, methods, target, drafter)
    prompts = [encode_prompt(target.tokenizer, r["prompt"]) for r in rows]
    greedy = args.temperature == 0
    for m in methods:  # warm-up: first calls pay for allocations and lazy initialisation
        run_method(m, target, drafter, trees, prompts[0], DecodeConfig(max_new_tokens=8))
    per_prompt = []
    bar = tqdm(total=len(prompts) * len(methods), desc="bench", unit="run")
    for i, ids in enumerate(prompts):
        decode = DecodeConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=i)
        order = methods[i % len(methods):] + methods[: i % len(methods)]  # rotate who goes first
        outcomes = {}
        for m in order:
            outcomes[m] = run_method(m, target, drafter, trees, ids, decode)
            bar.update(1)
        ref = outcomes.get("ar")
        per_prompt.append({m: {"new_tokens": len(o.token_ids), "wall_s": o.wall_s, "steps": o.steps,
                               "identical": ref is not None and o.token_ids == ref.token_ids}
                           for m, o in outcomes.items()})
    bar.close()
    return {"device": device_name(target.device), "model": target.name,
            "dtype": str(target.dtype).replace("torch.", ""),
            "n_prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
            "tree": {m: t.to_dict() for m, t in trees.items()}, "tree_source": notes,
            "methods": summarise(per_prompt, methods, greedy)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho_core.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="JSONL, one {\"prompt\": ...} per line")
    p.add_argument("--n-prompts", type=int, default=0, help="use the first N prompts (0 = all)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--methods", default=",".join(ALL_METHODS),
                   help="comma list of ar, hf, hf-lookup, gumiho, serial, gumiho-traced (gumiho with the records "
                        "the app keeps, to measure their overhead)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--plot", help="write a bar chart (PNG) here")
    model_args(p)
    tree_args(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    quiet_transformers()
    try:
        DecodeConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
        results = bench(args)
    except GumihoError as e:
        return bad_input(e)
    for m, note in results["tree_source"].items():
        print(f"[{m}] {note}")
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

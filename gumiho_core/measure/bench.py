"""Is it really faster here? Benchmark decoding methods on this machine, interleaved prompt by prompt.

    python -m gumiho_core.bench --methods ar,gumiho,eagle,medusa,gumiho-serial --trees auto,paper

Methods: every name of the registry (methods.py: ar, gumiho, eagle, medusa, gumiho-serial), hf (transformers
generate, greedy, cache on), hf-lookup (transformers prompt-lookup decoding, a draft-free peer) and gumiho-traced
(gumiho with the records the app keeps, to price them). On a CPU our methods run the target's linear layers with
packed oneDNN weights (cpu_kernels.py); hf and hf-lookup run stock transformers. Each prompt runs every method back
to back in a rotating order, so machine noise hits all alike; speedups are ratios of totals from the same run.
Each speculative method runs once per tree request of --trees (its first is the one tokens/s are compared at).
docs/performance.md holds the current tables.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from ..acceptance import Acceptance
from ..cli import bad_input, explicit_tree, measurement, model_args, quiet_transformers, target_from_args, tree_args, \
    tree_for
from ..config import DecodeConfig, TreeConfig
from ..cpu_kernels import stock_kernels
from ..engine import generate, start
from ..errors import GumihoError
from ..methods import AR, GUMIHO, METHODS, method
from ..models import ASSETS, load_drafter
from ..text import encode_prompt
from ..timing import device_name, synchronize

log = logging.getLogger(__name__)
PEERS = ("hf", "hf-lookup")  # transformers' own decoding, run as a user would
TRACED = "gumiho-traced"
ALL_METHODS = (AR, *PEERS, *(m for m in METHODS if m != AR))
DEFAULT_PROMPTS = ASSETS.parent / "prompts" / "mtbench_style.jsonl"
LOOKUP_TOKENS = 10  # transformers' prompt_lookup_num_tokens


@dataclass(frozen=True)
class Lane:
    """One column of the benchmark: a method, and for a speculative one the tree request it runs with."""

    name: str  # as the table shows it: "gumiho", or "gumiho@paper" for a second tree request
    method: str
    tree: TreeConfig | None = None
    traced: bool = False


@dataclass
class Outcome:
    token_ids: tuple[int, ...]
    wall_s: float
    steps: int | None  # decoding steps (prefill excluded); None where the method does not say
    draft_s: float = 0.0  # seconds drafting, summed over the decoding steps
    acceptance: Acceptance | None = None
    phases: dict = field(default_factory=dict)  # drafting phase -> seconds, summed (traced runs only)


def run_ours(lane: Lane, target, drafters: dict, ids, decode: DecodeConfig) -> Outcome:
    m = method(lane.method)
    session = start(m.name, target, ids, decode, lane.tree or TreeConfig(), drafters.get(m.drafter), trace=lane.traced)
    out = Outcome((), 0.0, None, acceptance=Acceptance())

    def on_step(rec):
        out.draft_s += rec.draft_s
        out.acceptance.add_step(rec)
        for phase in rec.phases:
            out.phases[phase.name] = out.phases.get(phase.name, 0.0) + phase.seconds

    synchronize(target.device)
    t0 = time.perf_counter()
    result = generate(session, keep_records=False, on_step=on_step)
    synchronize(target.device)
    out.token_ids, out.wall_s, out.steps = result.token_ids, time.perf_counter() - t0, result.steps
    return out


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


def run_lane(lane: Lane, target, drafters, ids, decode) -> Outcome:
    if lane.method in PEERS:
        return run_hf(lane.method, target, ids, decode)
    return run_ours(lane, target, drafters, ids, decode)


def summarise(per_prompt: list[dict], lanes: list[str], greedy: bool) -> dict:
    out = {}
    for m in lanes:
        rows = [p[m] for p in per_prompt]
        tokens = sum(len(r.token_ids) for r in rows)
        wall = sum(r.wall_s for r in rows)
        steps = [r.steps for r in rows]
        mal = (sum(len(r.token_ids) - 1 for r in rows) / sum(steps)) if None not in steps and sum(steps) else None
        acc = Acceptance()
        for r in rows:
            if r.acceptance is not None:
                acc.merge(r.acceptance)
        phases = {}
        for r in rows:
            for k, v in r.phases.items():
                phases[k] = phases.get(k, 0.0) + v
        n_steps = sum(s for s in steps if s) or 1
        out[m] = {"tokens_per_s": round(tokens / wall, 3), "mean_accept_len": None if mal is None else round(mal, 4),
                  "new_tokens": tokens, "wall_s": round(wall, 3),
                  "identical_prompts": sum(p["identical"][m] for p in per_prompt) if greedy else None,
                  "per_prompt_tokens_per_s": [round(len(r.token_ids) / r.wall_s, 3) for r in rows]}
        if acc.steps:
            out[m].update(per_depth=[round(x, 4) for x in acc.per_depth()],
                          draft_ms_per_step=round(1000 * sum(r.draft_s for r in rows) / n_steps, 3),
                          phase_ms_per_step={k: round(1000 * v / n_steps, 3) for k, v in phases.items()})
    bases = [b for b in ("hf", "ar") if b in out] or [lanes[0]]
    for m in out:
        for base in bases:
            out[m]["speedup_vs_" + base] = round(out[m]["tokens_per_s"] / out[base]["tokens_per_s"], 3)
    return out


def table(results: dict) -> str:
    methods = results["methods"]
    bases = [k for k in next(iter(methods.values())) if k.startswith("speedup_vs_")]
    lines = [f"{'method':<22}{'tokens/s':>10}{'mean acc len':>14}{'draft ms/step':>15}"
             + "".join(f"{b.replace('_', ' '):>16}" for b in bases) + f"{'identical':>11}"]
    for m, r in methods.items():
        mal = "-" if r["mean_accept_len"] is None else f"{r['mean_accept_len']:.2f}"
        draft = f"{r['draft_ms_per_step']:.1f}" if "draft_ms_per_step" in r else "-"
        ident = "-" if r["identical_prompts"] is None else f"{r['identical_prompts']}/{results['n_prompts']}"
        lines.append(f"{m:<22}{r['tokens_per_s']:>10.2f}{mal:>14}{draft:>15}"
                     + "".join(f"{r[b]:>15.2f}x" for b in bases) + f"{ident:>11}")
    return "\n".join(lines)


def depth_table(results: dict) -> str:
    """Per-depth acceptance of every speculative lane: P(the accepted path reaches depth d | it reached d - 1)."""
    rows = {m: r["per_depth"] for m, r in results["methods"].items() if "per_depth" in r}
    if not rows:
        return ""
    depth = max(len(v) for v in rows.values())
    lines = [f"{'acceptance by depth':<22}" + "".join(f"{d:>7}" for d in range(1, depth + 1))]
    for m, v in rows.items():
        lines.append(f"{m:<22}" + "".join("      -" if x != x else f"{x:>7.2f}" for x in v))
    return "\n".join(lines)


def plot(results: dict, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(results["methods"])
    fig, ax = plt.subplots(figsize=(1.6 * len(methods) + 2, 4))
    for i, m in enumerate(methods):
        r = results["methods"][m]
        speculative = "mean_accept_len" in r and r["mean_accept_len"] not in (None, 1.0)
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


def lanes_for(args, names: list[str], target, drafters: dict) -> tuple[list[Lane], dict]:
    """The benchmark's lanes (one per method, and per further tree request for speculative ones) and where each
    lane's tree came from (trees.resolve_tree: the same resolution as generate's and the app's)."""
    requests = [r.strip() for r in (args.trees or args.tree).split(",") if r.strip()]
    lanes, notes = [], {}
    for name in names:
        traced, m = name == TRACED, method(GUMIHO if name == TRACED else name) if name not in PEERS else None
        if m is None or not m.speculative:
            lanes.append(Lane(name, name))
            continue
        for i, request in enumerate(requests):
            choice = measurement(args, m.name, target, drafters[m.drafter], request)
            resolved = tree_for(args, m.name, target, choice, request)
            label = name if i == 0 else f"{name}@{request}"
            lanes.append(Lane(label, m.name, resolved.tree, traced))
            notes[label] = resolved.source
    return lanes, notes


def load_drafters(args, names: list[str], target) -> dict:
    """The family members the methods need: --draft for Gumiho's heads, --draft-for MEMBER=SPEC for the others'
    (default: the heads shipped under assets/)."""
    specs = {"gumiho": args.draft}
    for item in args.draft_for or []:
        member, _, spec = item.partition("=")
        if not spec:
            raise GumihoError(f"--draft-for takes MEMBER=FOLDER, e.g. eagle=assets/smollm2-135m-instruct-eagle; got "
                              f"{item!r}")
        specs[member] = spec
    wanted = {method(GUMIHO if n == TRACED else n).drafter for n in names if n not in PEERS} - {None}
    return {member: load_drafter(specs.get(member, "default"), target, member) for member in wanted}


def bench(args) -> dict:
    from ..jsonl import read_jsonl

    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in names if m not in ALL_METHODS + (TRACED, "serial")]
    if bad:
        raise GumihoError(f"unknown method {bad[0]!r}: choose from {', '.join(ALL_METHODS)}, {TRACED}")
    names = [method(n).name if n not in PEERS + (TRACED,) else n for n in names]  # old names read as today's
    rows = read_jsonl(args.prompts, required=("prompt",))[: args.n_prompts or None]
    explicit_tree(args)
    target = target_from_args(args)
    drafters = load_drafters(args, names, target)
    lanes, notes = lanes_for(args, names, target, drafters)
    prompts = [encode_prompt(target.tokenizer, r["prompt"]) for r in rows]
    greedy = args.temperature == 0
    for lane in lanes:  # warm-up: first calls pay for allocations and lazy initialisation
        run_lane(lane, target, drafters, prompts[0], DecodeConfig(max_new_tokens=8))
    per_prompt = []
    bar = tqdm(total=len(prompts) * len(lanes), desc="bench", unit="run")
    for i, ids in enumerate(prompts):
        decode = DecodeConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=i)
        order = lanes[i % len(lanes):] + lanes[: i % len(lanes)]  # rotate who goes first
        outcomes = {}
        for lane in order:
            outcomes[lane.name] = run_lane(lane, target, drafters, ids, decode)
            bar.update(1)
        ref = outcomes.get(AR)
        outcomes["identical"] = {k: ref is not None and o.token_ids == ref.token_ids for k, o in outcomes.items()}
        per_prompt.append(outcomes)
    bar.close()
    return {"device": device_name(target.device), "model": target.name,
            "dtype": str(target.dtype).replace("torch.", ""),
            "n_prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
            "tree": {lane.name: lane.tree.to_dict() for lane in lanes if lane.tree is not None},
            "tree_source": notes, "drafters": {k: d.origin for k, d in drafters.items()},
            "methods": summarise(per_prompt, [lane.name for lane in lanes], greedy)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho_core.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="JSONL, one {\"prompt\": ...} per line")
    p.add_argument("--n-prompts", type=int, default=0, help="use the first N prompts (0 = all)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--methods", default=",".join(ALL_METHODS),
                   help=f"comma list of {', '.join(ALL_METHODS)}, {TRACED} (gumiho with the records the app keeps, to "
                        "measure their overhead)")
    p.add_argument("--trees",
                   help="comma list of tree requests (auto, fastest, paper, classroom, small): each speculative method "
                        "runs once with each, tokens/s compared at the first (default: --tree alone). Shape flags "
                        "override them all")
    p.add_argument("--draft-for", action="append", metavar="MEMBER=SPEC",
                   help="the heads of another family member than Gumiho's (eagle=FOLDER, medusa=FOLDER); default: "
                        "the ones shipped under assets/")
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
    print(depth_table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

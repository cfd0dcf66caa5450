"""The drafter family trained alike, for the paper's comparison: `tune`, `family` and `family-steps`.

Every member gets the same data, held-out split, target features, optimizer, schedule, batch and number of steps,
from random weights, each trained as it drafts (as-drafted rollouts). The one setting tuned, the learning rate, is
chosen per member by the same sweep on the validation split (never on prompts/heldout.jsonl), by one criterion for
all: the expected accepted length that the validation top-1 at each depth implies (acceptance.expected_length).
docs/training.md, "The comparison drafters", gives the procedure and its cost.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from ..acceptance import expected_length
from ..config import ARCHITECTURES, DrafterConfig
from ..errors import GumihoError
from ..methods import REGISTRY
from . import card
from .workspace import run_dir, workdir_for

log = logging.getLogger(__name__)
TUNE = "tune.json"  # in the work folder: the sweep's runs and each member's chosen rate
FAMILY_STEPS = "family-steps.json"


def depth_parts(cfg: DrafterConfig) -> list[str]:
    """The loss parts of a drafter in the order of the depths they draft (plan.py's names)."""
    serial = ["serial", *(f"serial{k}" for k in range(2, cfg.serial_steps + 1))] if cfg.serial_steps else []
    return serial + [f"mlp{m}" for m in range(1, cfg.mlp_heads + 1)]


def validation_length(row: dict, cfg: DrafterConfig) -> float:
    """The tuning criterion: expected accepted length if each depth were accepted at its validation top-1 rate."""
    return expected_length([row[f"val_{part}_top1"] for part in depth_parts(cfg)])


def members(args) -> list[str]:
    names = [n.strip() for n in args.architectures.split(",") if n.strip()]
    bad = [n for n in names if n not in ARCHITECTURES]
    if bad or not names:
        raise GumihoError(f"--architectures takes a comma list of {', '.join(ARCHITECTURES)}; got {args.architectures!r}")
    return names


def rates(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise GumihoError(f"--lrs takes comma-separated learning rates; got {text!r}") from None
    if not values or min(values) <= 0:
        raise GumihoError(f"--lrs takes positive learning rates; got {text!r}")
    return values


def _with(args, **changes) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def _finished(folder: Path, steps: int) -> list | None:
    history = card.read_json(folder / "history.json") or []
    return history if history and history[-1]["step"] >= steps else None


def cmd_tune(args, models) -> None:
    """Each member at each rate of --lrs for --steps steps; the rate with the longest validation length wins."""
    from .run_commands import train_run

    if not args.steps:
        raise GumihoError("tune needs --steps, the length of each trial run (the same for every member and rate)")
    target, path = models.target(), workdir_for(args) / TUNE
    sweep = card.read_json(path) or {}
    for arch in members(args):
        cfg = DrafterConfig.from_target(target.config, arch)
        for lr in rates(args.lrs):
            run = f"tune-{arch}-lr{lr:g}-s{args.steps}"
            history = _finished(run_dir(args, run), args.steps) or \
                train_run(_with(args, architecture=arch, lr=lr, run=run, keep_steps=""), target, run).history
            last = history[-1]
            trial = {"lr": lr, "steps": args.steps, "tokens_per_step": args.tokens_per_step,
                     "validation_length": round(validation_length(last, cfg), 4), "val_loss": last.get("val_loss"),
                     "val_top1": [round(last[f"val_{p}_top1"], 4) for p in depth_parts(cfg)]}
            trials = [t for t in sweep.get(arch, {}).get("trials", []) if (t["lr"], t["steps"]) != (lr, args.steps)]
            best = max([*trials, trial], key=lambda t: t["validation_length"])
            sweep[arch] = {"trials": [*trials, trial], "lr": best["lr"]}
            path.write_text(json.dumps(sweep, indent=1))
            log.info("%s lr %g: validation length %.3f", arch, lr, trial["validation_length"])
    log.info("chosen rates: %s", {a: sweep[a]["lr"] for a in members(args) if a in sweep})


def _batches(sweep: dict) -> set[int]:
    """The tokens per step the trials of `sweep` (tune.json, or one member's part of it) ran at."""
    return {t.get("tokens_per_step") for m in sweep.values() for t in m.get("trials", [])} - {None}


def run_batch(args) -> int:
    """The tokens per step of a family run: --tokens-per-step, else the batch the sweep ran at (its smallest, if
    several), else the trainer's default; a rate holds at the batch it was chosen at."""
    from .trainer import TrainConfig

    if args.tokens_per_step is not None:
        return args.tokens_per_step
    batches = _batches(card.read_json(workdir_for(args) / TUNE) or {})
    return min(batches) if batches else TrainConfig.tokens_per_step


def chosen_rate(args, arch: str) -> float:
    """The member's rate from the sweep (tune.json), else --lr for all alike; a sweep that has not reached this
    member is refused, since the members would then have had unequal tuning."""
    sweep = card.read_json(workdir_for(args) / TUNE)
    if sweep is None:
        return args.lr
    if arch not in sweep:
        raise GumihoError(f"{workdir_for(args) / TUNE} holds no rate for {arch} (it has {', '.join(sweep) or 'none'}): "
                          f"finish the sweep (train tune --architectures {arch}) or remove the file to train every "
                          "member at --lr")
    batches, batch = _batches({arch: sweep[arch]}), run_batch(args)
    if batches and batch not in batches:
        raise GumihoError(f"{workdir_for(args) / TUNE} chose {arch}'s rate at {', '.join(map(str, sorted(batches)))} "
                          f"tokens per step, and this run takes {batch}: leave --tokens-per-step out (family then "
                          "takes the sweep's), or sweep again at this batch (a rate does not carry over to another one)")
    return sweep[arch]["lr"]


def cmd_family(args, models) -> None:
    """Train each member of --architectures as run <--run>-<member>, one after the other, alike but for the rate the
    sweep chose (run several processes with one member each to train them side by side)."""
    from .run_commands import train_run

    if not args.steps:
        raise GumihoError("family needs --steps, the same number of optimizer steps for every member")
    args = _with(args, tokens_per_step=run_batch(args))
    log.info("%d tokens per step", args.tokens_per_step)
    target = models.target()
    for arch in members(args):
        lr = chosen_rate(args, arch)
        log.info("%s: lr %g", arch, lr)
        train_run(_with(args, architecture=arch, lr=lr), target, f"{args.run}-{arch}")


def cmd_family_steps(args, models) -> None:
    """The step curve of every member at the same steps (`steps` on each run), as one table and one plot."""
    from .run_commands import cmd_steps

    points = {}
    for arch in members(args):
        run = f"{args.run}-{arch}"
        cmd_steps(_with(args, run=run), models)
        points[arch] = card.read_json(run_dir(args, run) / "steps.json")
    (workdir_for(args) / FAMILY_STEPS).write_text(json.dumps(points, indent=1))
    plot_family(points, workdir_for(args) / "family-steps.png")
    log.info("family step curve in %s", workdir_for(args) / "family-steps.png")


COMPARISON = "## The comparison"  # the section every member's card shares


def cmd_family_ship(args, models) -> None:
    """Ship each member's heads into its folder under assets/ (`ship`), then give every card the same comparison:
    the family's step curve and, with --bench FILE (bench --out), one interleaved benchmark of all the methods.
    Heads of an earlier version in Gumiho's folder move to a folder named after that version, so they stay
    available by name (git keeps one copy of an unchanged file)."""
    from .run_commands import cmd_ship, ship_dest

    points = card.read_json(workdir_for(args) / FAMILY_STEPS)
    if not points:
        raise GumihoError(f"no {FAMILY_STEPS} in {workdir_for(args)}: run family-steps first")
    bench = card.read_json(Path(args.bench)) if args.bench else None
    if args.bench and bench is None:
        raise GumihoError(f"--bench {args.bench}: no such file (write one with bench --out)")
    folders = []
    for arch in members(args):
        member_args = _with(args, run=f"{args.run}-{arch}", ship_to=None)
        _keep_earlier(ship_dest(member_args), f"{args.run}-{arch}")
        cmd_ship(member_args, models)
        folders.append(ship_dest(member_args))
    plot_family(points, folders[0] / "family-steps.png")
    section = comparison_section(points, bench, args.run)
    for folder in folders:
        if folder != folders[0]:
            (folder / "family-steps.png").write_bytes((folders[0] / "family-steps.png").read_bytes())
        (folder / "README.md").write_text(card.with_section((folder / "README.md").read_text(), COMPARISON, section))
    log.info("shipped %s with the comparison in each card", ", ".join(str(f) for f in folders))


def _keep_earlier(dest: Path, run: str) -> None:
    """Move heads of another run out of `dest`, to <dest>-<their version> (the last row of their card's Versions)."""
    meta = card.read_json(dest / "config.json")
    if meta is None or not (dest / "README.md").is_file():
        return
    rows = card.versions_of((dest / "README.md").read_text())
    version = rows[-1][0] if rows else "earlier"
    if version == run:
        return
    kept = dest.with_name(f"{dest.name}-{version}")
    if kept.exists():
        raise GumihoError(f"{kept} exists already: move the heads in {dest} aside by hand before shipping {run}")
    dest.rename(kept)
    log.info("the heads of %s in %s moved to %s", version, dest, kept)


def comparison_section(points: dict, bench: dict | None, run: str) -> list[str]:
    """The cards' shared section: tokens per target pass of every method at the same steps, and the benchmark."""
    steps = sorted({p["step"] for curve in points.values() for p in curve})
    names = [m for m in REGISTRY if any(m in p for curve in points.values() for p in curve)]
    at = {m: {p["step"]: p[m]["mean_accept_len"] for curve in points.values() for p in curve if m in p} for m in names}
    out = [COMPARISON, "", "![the family's step curves](family-steps.png)", "",
           f"The drafter family trained alike (runs `{run}-<member>`: the same data, split, features, optimizer, "
           "schedule, batch and steps, from random weights, each as it drafts; each member's learning rate chosen "
           "by the same sweep on the validation split: `docs/training.md`, \"The comparison drafters\"). Tokens per "
           "target pass on held-out prompts, the authors' tree, T=0, at the same steps:", "",
           "| step | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
           *(f"| {s:,} | " + " | ".join(f"{at[m][s]:.2f}" if s in at[m] else "-" for m in names) + " |"
             for s in steps), ""]
    return out + (_bench_lines(bench) if bench else [])


def _bench_lines(bench: dict) -> list[str]:
    """One interleaved benchmark of every method (bench --out): speed against plain decoding, accepted length,
    drafting time per step and acceptance by depth."""
    rows = bench["methods"]
    head = (f"One interleaved benchmark on {bench['device']}: {bench['n_prompts']} prompts, {bench['max_new_tokens']} "
            f"new tokens, T={bench['temperature']}, each speculative method at its tree (`@paper`: the authors' tree; "
            "otherwise the tree request named by `tree_source`):")
    out = [head, "", "| method | tokens/s | vs ar | tokens per target pass | drafting ms per step | identical to ar | "
           "acceptance by depth |", "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        depth = " ".join("-" if x != x else f"{x:.2f}" for x in r.get("per_depth", []))
        mal = "-" if r.get("mean_accept_len") is None else f"{r['mean_accept_len']:.2f}"
        draft = f"{r['draft_ms_per_step']:.1f}" if "draft_ms_per_step" in r else "-"
        ident = "-" if r.get("identical_prompts") is None else f"{r['identical_prompts']}/{bench['n_prompts']}"
        out.append(f"| {name} | {r['tokens_per_s']:.2f} | {r.get('speedup_vs_ar', float('nan')):.2f}x | {mal} | "
                   f"{draft} | {ident} | {depth} |")
    return out + [""]


def plot_family(points: dict, path: Path) -> Path:
    """Tokens per target pass against optimizer steps, every method of every member on one plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arch, curve in points.items():
        for name in [m for m in REGISTRY if REGISTRY[m].drafter == arch]:
            xs = [p["step"] for p in curve if name in p]
            ax.plot(xs, [p[name]["mean_accept_len"] for p in curve if name in p], marker="o",
                    linestyle="--" if name == "gumiho-serial" else "-", label=f"{name} ({REGISTRY[name].label})")
    ax.set_xlabel("optimizer step (the same schedule for every drafter)"), ax.set_ylabel("tokens per target pass")
    ax.set_title("held-out prompts, the authors' 64-node tree, T=0", fontsize=9), ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)

"""The step curve of a training run: its kept heads decoded on held-out prompts, as the model card shows it; and the
curve of a later run that went on from the shipped heads."""
from __future__ import annotations

from pathlib import Path

from ..methods import METHODS

STEPS = "steps.json"  # in a run folder: the step curve
CONTINUED = "## Going on from these heads"  # the card's section on a later run that started from them
TOP1_KEYS = ["val_serial_top1", *(f"val_serial{k}_top1" for k in range(2, 8)),
             *(f"val_mlp{m}_top1" for m in range(1, 8))]  # history's, for any member of the family
MODES = ("gumiho", "gumiho-serial")  # the two methods Gumiho's heads draft with


def by_method(report: dict) -> dict:
    """A report or point with the methods under today's names (gumiho-serial was "serial" in older files)."""
    return {("gumiho-serial" if k == "serial" else k): v for k, v in report.items()}


def step_point(step: int, report: dict) -> dict:
    """One point of the step curve: the heads after `step` optimizer steps, decoded on held-out prompts."""
    report = by_method(report)
    methods = [m for m in METHODS if m in report]
    return {"step": step, "prompts": report["prompts"], "max_new_tokens": report["max_new_tokens"],
            **{m: {k: report[m][k] for k in ("mean_accept_len", "per_depth")} for m in methods}}


def continued_section(run: str, cfg: dict, points: list[dict], history: list[dict]) -> list[str]:
    """The card's section on a later run that went on from the shipped heads (its step 0) without replacing them:
    where more steps took them, measured as the step curve is."""
    first, end = points[0], history[-1]
    loss = (f" Held-out loss {history[0]['val_loss']:.3f} after its first epoch and {end['val_loss']:.3f} at step "
            f"{end['step']:,} (train loss {end['train_loss']:.3f})." if "val_loss" in end and "train_loss" in end
            else "")
    return [CONTINUED, "", "![more steps](continued.png)", "",
            f"Run `{run}` went on from these heads for {end['step']:,} more optimizer steps, on a schedule fixed in "
            f"advance (AdamW lr {cfg['lr']}, warm-up then a linear decay to zero, {cfg.get('precision', 'fp32')} "
            f"matmuls, rollout `{cfg.get('rollout', 'teacher-forced')}`). Its kept heads, each decoded on "
            f"{first['prompts']} held-out prompts, {first['max_new_tokens']} new tokens, the authors' tree, T=0 "
            f"(`python -m gumiho_core.train steps --run {run}`); step 0 is these heads.", "",
            *table(points), "", f"{spread(points)}, {best_gain(points):+.2f} against step 0.{loss}", ""]


def methods_in(points: list[dict]) -> list[str]:
    """The methods a step curve decoded, in the registry's order: the heads' own first (gumiho, eagle or medusa)."""
    return [m for m in METHODS if m in by_method(points[0])]


def table(points: list[dict]) -> list[str]:
    """The card's table of a step curve: each point's tau and depth-2 acceptance for each method of the heads."""
    points, ms = [by_method(p) for p in points], methods_in(points)
    return ["| step | " + " | ".join(f"{m} tau" for m in ms) + " | " + " | ".join(f"{m} depth 2" for m in ms) + " |",
            "|---|" + "---|" * 2 * len(ms),
            *(f"| {p['step']:,} | " + " | ".join(f"{p[m]['mean_accept_len']:.2f}" for m in ms) + " | "
              + " | ".join(rate(p[m], 2) for m in ms) + " |" for p in points)]


def spread(points: list[dict]) -> str:
    """One line on the curve: where each method's tau ranged, and the step(s) of the highest tau of the heads' own
    method (ties within half a hundredth named too, so a plateau reads as one)."""
    points, ms = [by_method(p) for p in points], methods_in(points)
    taus = {m: [p[m]["mean_accept_len"] for p in points] for m in ms}
    own = ms[0]
    top = max(taus[own])
    at = [f"{p['step']:,}" for p in points if top - p[own]["mean_accept_len"] < 0.005]
    span = "; ".join(f"{m} tau {min(t):.2f}-{max(t):.2f}" for m, t in taus.items())
    where = f"step {at[0]}" if len(at) == 1 else f"steps {', '.join(at[:-1])} and {at[-1]}"
    return f"Over the run: {span}; the highest {own} tau at {where}"


def best_gain(points: list[dict]) -> float:
    """The highest tau of the heads' own method against the curve's first point's."""
    own = methods_in(points)[0]
    return max(by_method(p)[own]["mean_accept_len"] for p in points) - by_method(points[0])[own]["mean_accept_len"]


def rate(r: dict, depth: int) -> str:
    x = r["per_depth"][depth - 1] if len(r["per_depth"]) >= depth else float("nan")
    return "-" if x != x else f"{x:.2f}"


def plot_steps(points: list[dict], history: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    plot_top1(a, [h["step"] for h in history], history)
    a.set_xlabel("optimizer step"), a.set_title("held-out conversations, at each epoch's end")
    points = [by_method(p) for p in points]
    for m in [m for m in METHODS if m in points[0]]:
        b.plot([p["step"] for p in points], [p[m]["mean_accept_len"] for p in points], marker="o", label=m)
    b.set_xlabel("optimizer step"), b.set_ylabel("tokens per target pass")
    b.set_title("held-out prompts, authors' 64-node tree, T=0"), b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_top1(ax, xs: list, history: list[dict]) -> None:
    """Each head's held-out top-1 agreement along the history rows, one line per head the history has."""
    for key in TOP1_KEYS:
        if key in history[0]:
            ax.plot(xs, [h.get(key, float("nan")) for h in history], marker=".", label=key[4:-5])
    ax.set_ylabel("top-1 agreement with the target")
    if ax.lines:
        ax.legend(fontsize=7)
    else:  # a run without a held-out split records no agreement
        ax.text(0.5, 0.5, "no held-out split in this run", ha="center", va="center", transform=ax.transAxes)

"""The data curve: heads trained on nested shares of the corpus's prompts (`train scaling`), one point per share,
its plot and the model card's section on it."""
from __future__ import annotations

import math
from pathlib import Path

from .stepcurve import MODES, by_method

HEADS = ["serial"] + [f"mlp{m}" for m in range(1, 6)]
TAU_GOAL = 3.5
FARTHEST = 1000  # an extrapolation past this many times the data trained on predicts nothing worth showing
HEADING = "## What more data brings"


def credible(need: float | None, most: int) -> bool:
    """Whether a straight line's prediction (tokens_for_tau) lies within FARTHEST times the most data trained on."""
    return bool(need) and need <= FARTHEST * most


def scaling_point(fraction: float, data: dict, history: list, report: dict) -> dict:
    """One point of the curve from a finished run's files: data.json, history.json, evaluation.json."""
    last = history[-1]
    return {"fraction": fraction, "conversations": data["conversations"], "answer_tokens": data["answer_tokens"],
            "epochs": last["epoch"], "steps": last["step"],
            "val_top1": {h: round(last.get(f"val_{h}_top1", float("nan")), 4) for h in HEADS},
            "train_loss": last.get("train_loss"), "val_loss": last.get("val_loss"),  # equal: not data-bound
            **{m: by_method(report)[m] for m in MODES}, "eval_prompts": report["prompts"],
            "eval_tokens": report.get("max_new_tokens")}


def tokens_for_tau(points: list[dict], tau: float = TAU_GOAL) -> float | None:
    """Answer tokens at which a straight line through (log tokens, gumiho tau) reaches tau; None if it never does."""
    xs = [math.log10(p["answer_tokens"]) for p in points]
    ys = [p["gumiho"]["mean_accept_len"] for p in points]
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / max(1e-12, sum((x - mx) ** 2 for x in xs))
    return 10 ** (mx + (tau - my) / slope) if slope > 0 else None


def plot_scaling(points: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = [p["answer_tokens"] for p in points]
    losses = all(p.get("val_loss") is not None for p in points)
    fig, (a, b, *c) = plt.subplots(1, 3 if losses else 2, figsize=(15 if losses else 10, 3.8))
    for h in HEADS:
        a.plot(tokens, [p["val_top1"][h] for p in points], marker="o", label=h)
    a.set_xscale("log"), a.set_xlabel("answer tokens trained on"), a.set_ylabel("top-1 agreement with the target")
    top = max(max(p["val_top1"].values()) for p in points)
    a.set_ylim(0, top * 1.3)  # room above the lines for the legend, which hid the serial head's last point
    a.set_title("held-out, per head"), a.legend(fontsize=7, ncol=3, loc="upper center")
    for m in MODES:
        b.plot(tokens, [by_method(p)[m]["mean_accept_len"] for p in points], marker="o", label=m)
    need = tokens_for_tau(points)
    if need and need > tokens[-1] and credible(need, tokens[-1]):
        b.plot([tokens[-1], need], [points[-1]["gumiho"]["mean_accept_len"], TAU_GOAL], "k--", lw=1,
               label=f"straight-line extrapolation: {need:,.0f} tokens")
    b.axhline(TAU_GOAL, color="grey", lw=0.8, ls=":")
    b.set_xscale("log"), b.set_xlabel("answer tokens trained on"), b.set_ylabel("tokens per target pass")
    b.set_title("held-out prompts, authors' 64-node tree, T=0"), b.legend(fontsize=7)
    if losses:
        _plot_losses(c[0], tokens, points)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _plot_losses(ax, tokens: list, points: list[dict]) -> None:
    for key, label in (("train_loss", "train (its last epoch)"), ("val_loss", "held-out (after the last step)")):
        ax.plot(tokens, [p[key] for p in points], marker="o", label=label)
    for x, p in zip(tokens, points):
        ax.annotate(f"{p['epochs']:.1f} epochs", (x, p["val_loss"]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=7)
    ax.margins(x=0.12)  # the outer points' labels stay inside the panel
    ax.set_xscale("log"), ax.set_xlabel("answer tokens trained on"), ax.set_ylabel("loss")
    ax.set_title("the training objective"), ax.legend(fontsize=7)


def scaling_section(points: list | None) -> list[str]:
    """The card's section on the data curve (none without one)."""
    if not points:
        return []
    need, points = tokens_for_tau(points), [by_method(p) for p in points]
    rows = [f"| {p['fraction']:g} | {p['answer_tokens']:,} | {p['epochs']:.1f} | {_loss(p.get('train_loss'))} | "
            f"{_loss(p.get('val_loss'))} | {p['val_top1']['serial']:.3f} | "
            f"{p['val_top1']['mlp1']:.3f} | {p['gumiho']['mean_accept_len']:.2f} | "
            f"{p['gumiho-serial']['mean_accept_len']:.2f} |" for p in points]
    if need and not credible(need, max(p["answer_tokens"] for p in points)):
        guess = (f"Tau barely rises with data here: a straight line through tau against log(tokens) reaches "
                 f"{TAU_GOAL} only past a thousand times this data, so data is not what limits it at these steps.")
    else:
        guess = (f"A straight line through tau against log(tokens) reaches {TAU_GOAL} at about {need:,.0f} answer "
                 "tokens: an extrapolation, not a measurement." if need else
                 f"Tau does not rise with data here, so no amount is predicted to reach {TAU_GOAL}.")
    epochs, steps = sorted({p["epochs"] for p in points}), sorted({p["steps"] for p in points})
    tokens = points[0].get("eval_tokens") or 128  # points made before they recorded it used 128
    where = (f"Held-out prompts: {points[0]['eval_prompts']} of `prompts/heldout.jsonl`, {tokens} new tokens "
             "each, T=0. Train loss: the mean over the share's last epoch; held-out loss: on the same held-out "
             "conversations for every share, after the last step. A train loss well below the held-out loss means "
             "the heads learn the share's own answers more than the target: more data would pay at these steps.")
    if len(steps) == 1:
        how = (f"Each share was trained for the same {steps[0]:,} optimizer steps (`scaling --steps`), so the curve "
               f"separates data from compute. {where}")
    elif len(epochs) == 1:
        how = (f"Each share was trained for {epochs[0]} epochs, so a smaller share also had fewer optimizer steps: the "
               f"curve measures data and steps together, at this recipe. {where}")
    else:
        how = "The shares were trained for differing numbers of epochs and steps."
    return [HEADING, "", "![data scaling](scaling.png)", "", how, "",
            "| share of prompts | answer tokens | epochs | train loss | held-out loss | serial top-1 | mlp1 top-1 "
            "| gumiho tau | gumiho-serial tau |", "|---|---|---|---|---|---|---|---|---|", *rows, "",
            *_largest_against_smallest(points), guess, ""]


def _largest_against_smallest(points: list[dict]) -> list[str]:
    """One line under the table: what the most data changed against the least, head by head, and both taus."""
    if len(points) < 2:
        return []
    lo, hi = min(points, key=lambda p: p["answer_tokens"]), max(points, key=lambda p: p["answer_tokens"])
    heads = ", ".join(f"{h} {hi['val_top1'][h] - lo['val_top1'][h]:+.3f}" for h in HEADS)
    loss = (f"held-out loss {hi['val_loss'] - lo['val_loss']:+.3f}; "
            if hi.get("val_loss") is not None and lo.get("val_loss") is not None else "")
    hi, lo = by_method(hi), by_method(lo)
    taus = ", ".join(f"{m} {hi[m]['mean_accept_len'] - lo[m]['mean_accept_len']:+.2f}" for m in MODES)
    return [f"{hi['answer_tokens'] / lo['answer_tokens']:.1f} times the answer tokens ({lo['fraction']:g} -> "
            f"{hi['fraction']:g} of the prompts): {loss}held-out top-1 {heads}; tau {taus}.", ""]


def _loss(value) -> str:
    return f"{value:.3f}" if value is not None else "n/a"

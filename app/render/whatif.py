"""What-if, computed from the run on screen: predicted tokens per step and speedup for every tree size up to the
one it drafted, on this device's verification cost curve and on a flat, GPU-like one, beside what the run itself
measured at the size it used. Labelled as what it is: a prediction from measured acceptance and a cost model.

Its measured values are the run's own numbers (stats.numbers: the same speedup as the number boxes); its predicted
speedup means the same thing: plain decoding's time for this run's tokens over the predicted time of a run with
that tree (the measured prefill, then the run's tokens at the predicted tokens per step and cost per step).
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gumiho_core import CostCurve, StepCosts, WhatIf, flat_curve, what_if

from ..state import Run
from .figure import new_figure
from .lanes import Lane, lanes
from .palette import method_colour, method_label
from .phases import COMMIT, PLAIN
from .stats import LaneNumbers, numbers, plain_points, time_to

FLAT_COLOUR = "#009E73"
CSS = """
.gm-whatif{font-size:14px;line-height:1.5;color:#222;padding:4px 8px}
"""
HEIGHT = 430  # pixels
MANY_SIZES = 16  # beyond this, the size axis gets plotly's own ticks
HEADROOM = 1.25  # the y axes run this far above the highest value: room for the labels
STAR = dict(symbol="star", size=17, color="#111111")


@dataclass(frozen=True)
class Prediction:
    """What the what-if chart shows: the predictions, and what the run measured at its own tree size."""

    lane: Lane  # the drafting lane predicted from (this run's, or the first drafting lane when it is plain)
    measured: LaneNumbers  # its numbers, as every panel shows them
    costs: StepCosts
    device: CostCurve
    result: WhatIf
    speedups: dict[str, tuple[float, ...]]  # curve name -> predicted whole-run speedup per size
    nodes: int  # the run's tree size (its mean, rounded)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _device_curve(run: Run, nodes: int, verify_ratio: float) -> CostCurve:
    if run.verify_ratios:
        return CostCurve("this device (measured)", tuple(sorted({1: 1.0, **run.verify_ratios}.items())))
    return CostCurve("this device (a line through this run's two costs)", ((1, 1.0), (max(nodes, 2), verify_ratio)))


def _whole_run(result: WhatIf, lane: Lane, plain_total: float, plain_s: float) -> dict[str, tuple[float, ...]]:
    """Per curve and size: plain decoding's time for the lane's tokens over a predicted run's time (its measured
    prefill, then tokens - 1 at the per-step speedup the engine predicts: (tokens - 1) x plain step / speedup)."""
    prefill, rest = lane.steps[0].end, lane.tokens - 1
    return {name: tuple(plain_total / (prefill + rest * plain_s / s) for s in per_step)
            for name, per_step in result.speedup.items()}


def predict(run: Run, upto: int) -> Prediction | None:
    tally = numbers(run, upto)
    shown = {lane.method: lane for lane in lanes(run, upto)}
    lane = next((shown[n.method] for n in [tally.main, *tally.drafting] if n is not None and n.drafts
                 and n.steps), None)
    plain = tally.plain
    if lane is None or plain is None or not plain.steps:
        return None
    measured, plain_total = tally.lane(lane.method), time_to(plain_points(run), lane.tokens)
    spec = [r for r in lane.records if r.tree is not None]
    plain_s = plain.parts_ms[PLAIN] / 1000
    if plain_total is None or not spec or measured.speedup is None:
        return None
    costs = StepCosts(plain_s=plain_s, draft_s=measured.draft_ms / 1000, commit_s=measured.parts_ms[COMMIT] / 1000)
    nodes = round(measured.nodes)
    device = _device_curve(run, nodes, measured.verify_ms / 1000 / plain_s)
    result = what_if(spec, run.settings.decode.greedy, costs, [device, flat_curve()])
    if result is None:
        return None
    return Prediction(lane, measured, costs, device, result, _whole_run(result, lane, plain_total, plain_s), nodes)


def _empty(fig: go.Figure, why: str) -> go.Figure:
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=15))
    return fig


def _measured(fig: go.Figure, p: Prediction, col: int, value: float, text: str) -> None:
    """The run's own value at its size: a star, its label in a box above it (never on a line)."""
    fig.add_scatter(x=[p.nodes], y=[value], mode="markers", marker=STAR, showlegend=col == 1,
                    name=f"measured in this run ({p.nodes} nodes)", row=1, col=col)
    fig.add_annotation(x=p.nodes, y=value, text=text, showarrow=True, arrowhead=0, ax=-56, ay=-44,
                       bgcolor="rgba(255,255,255,0.95)", bordercolor="#111111", borderpad=3, font=dict(size=13),
                       row=1, col=col)


def whatif_figure(run: Run, upto: int) -> go.Figure:
    title = "What-if: other tree sizes, other hardware — a PREDICTION from this run"
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("tokens per step (the target's own included)",
                                        "speedup over plain decoding (1 = as fast)"),
                        figure=new_figure(title=dict(text=title, font=dict(size=15)), height=HEIGHT,
                                          margin=dict(l=60, r=16, t=78, b=96),
                                          legend=dict(orientation="h", yanchor="top", y=-0.3, x=0, font=dict(size=13))))
    fig.update_annotations(font=dict(size=14))
    p = predict(run, upto) if upto >= 1 else None
    if p is None:
        return _empty(fig, "no decoding step yet" if upto < 1 else "needs a drafting lane and plain decoding")
    colour, sizes, name = method_colour(p.lane.method), list(p.result.sizes), method_label(p.lane.method)
    fig.add_scatter(x=sizes, y=list(p.result.tokens_per_step), mode="lines+markers", line=dict(color=colour, width=3),
                    name=f"{name}, predicted from this run's verdicts", row=1, col=1)
    mine = "this device's measured verify cost" if run.verify_ratios else "this run's own verify cost, as a line"
    for curve, dash, c, what in ((p.device, "solid", colour, mine),
                                 (flat_curve(), "dash", FLAT_COLOUR, "flat verify cost, n ≤ 64 (GPU-like)")):
        fig.add_scatter(x=sizes, y=list(p.speedups[curve.name]), mode="lines", name=f"speedup with {what}",
                        line=dict(color=c, width=3, dash=dash), row=1, col=2)
    fig.add_hline(y=1.0, line=dict(color="#7a7a7a", dash="dot"), row=1, col=2)
    _measured(fig, p, 1, p.measured.tokens_per_pass, f"measured {p.measured.tokens_per_pass:.2f}")
    _measured(fig, p, 2, p.measured.speedup, f"measured {p.measured.speedup:.2f}×")
    fig.update_xaxes(title_text="tree size: nodes verified per step", range=[1.5, max(sizes) + 0.5],
                     dtick=1 if max(sizes) <= MANY_SIZES else None)
    top = max(max(v) for v in p.speedups.values())
    fig.update_yaxes(range=[0, max(top, p.measured.speedup, 1.0) * HEADROOM], row=1, col=2)
    fig.update_yaxes(range=[1, max(max(p.result.tokens_per_step), p.measured.tokens_per_pass) * HEADROOM],
                     row=1, col=1)
    return fig


def _device_words(run: Run) -> str:
    if run.verify_ratios:
        return "verify(n) as measured on this device"
    return "verify(n) on the line through this run's plain step and its own tree's verification (unmeasured here)"


def whatif_html(run: Run | None, upto: int) -> str:
    p = predict(run, upto) if run is not None and upto >= 1 else None
    if p is None:
        return (f'<style>{CSS}</style><div class="gm-whatif">The what-if chart predicts, from this run\'s own '
                f'verdicts, what other tree sizes would give here and on a GPU-like device.</div>')
    at = p.result.sizes.index(p.nodes) if p.nodes in p.result.sizes else None
    predicted = f"{p.speedups[p.device.name][at]:.2f}×" if at is not None else "–"
    acceptance = ("at temperature 0 exact for each of these steps: a smaller tree accepts exactly what its nodes "
                  "were judged; a run with it would start its steps elsewhere, so its mean can differ by a few "
                  "percent" if p.result.exact else "expected values when sampling")
    flat = p.speedups[flat_curve().name]
    best = max(range(len(flat)), key=flat.__getitem__)
    ended = (" The text ended inside the last step's accepted path, so the run's measured tokens per step are a "
             "little under what its verdicts predict at its own size." if p.measured.without_bonus else "")
    text = (f"<b>A prediction, not a measurement</b>, from the {escape(method_label(p.lane.method))} lane. Tokens per "
            f"step for smaller trees are read off the target's verdict on every node of this run's trees "
            f"({acceptance}); sizes go up to the {max(p.result.sizes)} nodes this run drafted.{ended} A step's cost is "
            f"modelled as draft + verify(n) + commit, with this run's means: drafting {1000 * p.costs.draft_s:.0f} "
            f"ms, commit {1000 * p.costs.commit_s:.0f} ms, one plain step {1000 * p.costs.plain_s:.0f} ms; the "
            f"speedup is over the whole run, prefill included, as in the boxes above. <i>{escape(p.device.name)}</i>: "
            f"{_device_words(run)}; <i>flat</i>: verifying up to 64 tokens costs one plain step, as "
            f"on a GPU (there the best size here would be {p.result.sizes[best]} nodes, {flat[best]:.2f}×). Check "
            f"at this run's size ({p.nodes} nodes): predicted {predicted}, measured <b>{p.measured.speedup:.2f}×</b>.")
    return f'<style>{CSS}</style><div class="gm-whatif">{text}</div>'

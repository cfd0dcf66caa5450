"""What-if, computed from the run on screen: predicted tokens per step and speedup for every tree size up to the
one it drafted, on this device's verification cost curve and on a flat, GPU-like one, beside what the run itself
measured at the size it used. Labelled as what it is: a prediction from measured acceptance and a cost model."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gumiho_core import AR, CostCurve, StepCosts, WhatIf, flat_curve, what_if

from ..state import Run
from .charts import METHOD_COLOUR
from .figure import new_figure
from .lanes import Lane, lanes

FLAT_COLOUR = "#009E73"
CSS = """
.gm-whatif{font-size:14px;line-height:1.5;color:#222;padding:4px 8px}
"""


@dataclass(frozen=True)
class Prediction:
    """What the what-if chart shows: the predictions, and what the run measured at its own tree size."""

    lane: Lane  # the drafting lane predicted from (this run's, or gumiho's when this run is plain decoding)
    costs: StepCosts
    device: CostCurve
    result: WhatIf
    nodes: int  # the run's tree size (its mean, rounded)
    tokens_per_step: float  # measured
    speedup: float  # measured over the decoding steps (prefill excluded)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _device_curve(run: Run, nodes: int, verify_ratio: float) -> CostCurve:
    if run.verify_ratios:
        return CostCurve("this device (measured for auto)", tuple(sorted({1: 1.0, **run.verify_ratios}.items())))
    return CostCurve("this device (a line through this run's two costs)", ((1, 1.0), (max(nodes, 2), verify_ratio)))


def predict(run: Run, upto: int) -> Prediction | None:
    shown = lanes(run, upto)
    plain = next((lane for lane in shown if lane.method == AR), None)
    lane = next((lane for lane in shown if lane.method != AR and len(lane.records) > 1), None)
    plain_steps = [s.end - s.start for s in plain.steps[1:]] if plain else []
    if lane is None or not plain_steps:
        return None
    spec = [r for r in lane.records if r.tree is not None]
    costs = StepCosts(plain_s=_mean(plain_steps), draft_s=_mean(r.draft_s for r in spec),
                      commit_s=_mean(r.commit_s for r in spec))
    nodes = round(_mean(len(r.tree) for r in spec))
    device = _device_curve(run, nodes, _mean(r.verify_s for r in spec) / costs.plain_s)
    result = what_if(spec, run.settings.decode.greedy, costs, [device, flat_curve()])
    if result is None:
        return None
    per_step = _mean(len(r.new_token_ids) for r in spec)
    return Prediction(lane, costs, device, result, nodes, per_step, per_step * costs.plain_s / _mean(r.seconds
                                                                                                    for r in spec))


def _empty(fig: go.Figure, why: str) -> go.Figure:
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=15))
    return fig


HEIGHT = 430  # pixels


def whatif_figure(run: Run, upto: int) -> go.Figure:
    title = "What-if: other tree sizes, other hardware — a PREDICTION from this run"
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("tokens per step (bonus included)", "speedup over plain decoding"),
                        figure=new_figure(title=dict(text=title, font=dict(size=15)), height=HEIGHT,
                                          margin=dict(l=60, r=16, t=78, b=96),
                                          legend=dict(orientation="h", yanchor="top", y=-0.3, x=0, font=dict(size=13))))
    fig.update_annotations(font=dict(size=14))
    p = predict(run, upto) if upto >= 1 else None
    if p is None:
        why = "no decoding step yet" if upto < 1 or run.settings.method != AR else "needs a drafting lane"
        return _empty(fig, why)
    colour, sizes = METHOD_COLOUR[p.lane.method], list(p.result.sizes)
    fig.add_scatter(x=sizes, y=list(p.result.tokens_per_step), mode="lines+markers", line=dict(color=colour, width=3),
                    name=f"{p.lane.method}, predicted from this run's verdicts", row=1, col=1)
    for curve, dash, c, what in ((p.device, "solid", colour, "this device's measured verify cost"),
                                 (flat_curve(), "dash", FLAT_COLOUR, "flat verify cost, n ≤ 64 (GPU-like)")):
        fig.add_scatter(x=sizes, y=list(p.result.speedup[curve.name]), mode="lines", name=f"speedup with {what}",
                        line=dict(color=c, width=3, dash=dash), row=1, col=2)
    star = dict(symbol="star", size=17, color="#111111")
    fig.add_scatter(x=[p.nodes], y=[p.tokens_per_step], mode="markers+text", text=[f"{p.tokens_per_step:.2f}"],
                    textposition="top center", name=f"measured in this run ({p.nodes} nodes)", marker=star,
                    row=1, col=1)
    fig.add_scatter(x=[p.nodes], y=[p.speedup], mode="markers+text", text=[f"measured {p.speedup:.2f}×"],
                    textposition="top left" if p.speedup >= 1 else "bottom left", marker=star, showlegend=False,
                    row=1, col=2)
    fig.add_hline(y=1.0, line=dict(color="#7a7a7a", dash="dot"), annotation_text="plain decoding",
                  annotation_position="bottom left", row=1, col=2)
    fig.update_xaxes(title_text="tree size: nodes verified per step", range=[1.5, max(sizes) + 0.5],
                     dtick=1 if max(sizes) <= 16 else None)
    top = max(max(v) for v in p.result.speedup.values())
    fig.update_yaxes(range=[0, max(top, p.speedup, 1.0) * 1.2], row=1, col=2)
    fig.update_yaxes(range=[1, max(max(p.result.tokens_per_step), p.tokens_per_step) * 1.15], row=1, col=1)
    return fig


def whatif_html(run: Run | None, upto: int) -> str:
    p = predict(run, upto) if run is not None and upto >= 1 else None
    if p is None:
        return (f'<style>{CSS}</style><div class="gm-whatif">The what-if chart predicts, from this run\'s own '
                f'verdicts, what other tree sizes would give here and on a GPU-like device.</div>')
    at = p.result.sizes.index(p.nodes) if p.nodes in p.result.sizes else None
    predicted = f"{p.result.speedup[p.device.name][at]:.2f}×" if at is not None else "–"
    acceptance = ("at temperature 0 exact for each of these steps: a smaller tree accepts exactly what its nodes "
                  "were judged; a run with it would start its steps elsewhere, so its mean can differ by a few "
                  "percent" if p.result.exact else "expected values when sampling")
    flat = p.result.speedup[flat_curve().name]
    best = max(range(len(flat)), key=flat.__getitem__)
    text = (f"<b>A prediction, not a measurement.</b> Tokens per step for smaller trees are read off the target's "
            f"verdict on every node of this run's trees ({acceptance}); sizes go up to the {max(p.result.sizes)} "
            f"nodes this run drafted. A step's cost is modelled as draft + verify(n) + commit, with this run's "
            f"means: drafting {1000 * p.costs.draft_s:.0f} ms, commit {1000 * p.costs.commit_s:.0f} ms, one plain "
            f"step {1000 * p.costs.plain_s:.0f} ms. <i>{escape(p.device.name)}</i>: verify(n) as measured on this "
            f"device; <i>flat</i>: verifying up to 64 tokens costs one plain step, as on a GPU (there the best size "
            f"here would be {p.result.sizes[best]} nodes, {flat[best]:.2f}×). Check at this run's size "
            f"({p.nodes} nodes): predicted {predicted}, measured <b>{p.speedup:.2f}×</b> over its decoding steps "
            f"(prefill excluded).")
    return f'<style>{CSS}</style><div class="gm-whatif">{text}</div>'

"""Time per step: every decoding step of the run on screen as a stacked bar of where its time went (each
drafting phase, choosing the tree, verification, commit), beside the cost of one plain step measured alongside."""
from __future__ import annotations

import plotly.graph_objects as go

from gumiho_core import PREFILL

from ..state import Run
from .figure import new_figure
from .palette import method_label
from .phases import PLAIN, part_look, part_order, parts
from .stats import numbers

HEIGHT = 360  # pixels
MANY_STEPS = 20  # beyond this, the step axis gets plotly's own ticks


def timing_figure(run: Run, upto: int) -> go.Figure:
    steps = [r for r in run.records[: upto + 1] if r.kind != PREFILL]
    fig = new_figure(title=dict(text=f"Time per step, {method_label(run.settings.method)} (measured)",
                                font=dict(size=15)), height=HEIGHT, barmode="stack", bargap=0.15,
                     margin=dict(l=64, r=16, t=48, b=52), xaxis_title="step (the prefill is not shown)",
                     yaxis_title="milliseconds", legend=dict(orientation="v", yanchor="top", y=1.0, xanchor="left",
                                                             x=1.01, font=dict(size=13), traceorder="reversed"))
    by_key: dict[str, list[float]] = {}
    for i, rec in enumerate(steps):
        for part in parts(rec):
            by_key.setdefault(part.key, [0.0] * len(steps))[i] += 1000 * part.seconds
    for key in part_order(by_key):
        lk = part_look(key)
        fig.add_bar(x=[r.index for r in steps], y=by_key[key], name=lk.label, marker=dict(color=lk.colour),
                    hovertemplate=f"step %{{x}}: {lk.tag} %{{y:.1f}} ms<extra></extra>")
    plain = numbers(run, upto).plain if steps else None
    if plain is not None and plain.steps and PLAIN not in by_key:
        ms = plain.parts_ms[PLAIN]
        fig.add_scatter(x=[0.4, len(steps) + 0.6], y=[ms, ms], mode="lines", name=f"one plain step: {ms:.0f} ms",
                        line=dict(color="#111111", dash="dot", width=2), hoverinfo="skip")
    fig.update_xaxes(range=[0.4, max(len(steps), 1) + 0.6], dtick=1 if len(steps) <= MANY_STEPS else None)
    if not steps:
        fig.add_annotation(text="no decoding step yet", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                           font=dict(size=16))
    return fig

"""Plotly charts of a run up to the step on screen: tokens over time, running speedup, tokens per step, and the
acceptance by depth of every drafter in the race. Their numbers come from stats.numbers, as every panel's do."""
from __future__ import annotations

import plotly.graph_objects as go

from gumiho_core import AR

from ..state import Run
from .figure import new_figure
from .lanes import lanes
from .palette import TARGET, look, method_colour, method_label
from .stats import numbers, running_speedup
from .text_view import token_origins
from .tree_view import legend_items

HEIGHT = 300  # pixels, each of the four run charts
MANY_STEPS = 20  # beyond this, a step axis gets plotly's own ticks
FEW_TOKENS = 10  # ... and a token axis beyond this
RATE_ROOM = 1.35  # the depth chart's y axis runs to 135%: room for the label over a 100% bar


def _figure(title: str, x: str, y: str) -> go.Figure:
    return new_figure(title=dict(text=title, font=dict(size=15)), height=HEIGHT, margin=dict(l=60, r=16, t=48, b=48),
                      xaxis_title=x, yaxis_title=y,
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))


def speed_figure(run: Run, upto: int) -> go.Figure:
    """Tokens against compute time, for every lane of the race (plain decoding dotted)."""
    fig = _figure("Tokens over time (measured here)", "compute seconds (animation excluded)", "tokens")
    for lane in lanes(run, upto):
        points = [(s.end, sum(x.tokens for x in lane.steps[: i + 1])) for i, s in enumerate(lane.steps)]
        fig.add_scatter(x=[0.0] + [t for t, _ in points], y=[0] + [n for _, n in points], mode="lines",
                        line_shape="hv", name=method_label(lane.method),
                        line=dict(color=method_colour(lane.method), width=2 if lane.method == AR else 3,
                                  dash="dot" if lane.method == AR else "solid"))
    return fig


def speedup_figure(run: Run, upto: int) -> go.Figure:
    """The running speedup: plain decoding's time to the same number of tokens, over this run's time."""
    fig = _figure(f"Speedup of {method_label(run.settings.method)} over plain decoding", "tokens so far", "× faster")
    pairs = running_speedup(run, upto)
    fig.add_scatter(x=[n for n, _ in pairs], y=[s for _, s in pairs], mode="lines+markers", name="speedup",
                    line=dict(color=method_colour(run.settings.method), width=3))
    fig.add_hline(y=1.0, line=dict(color=method_colour(AR), dash="dot"), annotation_text="plain decoding",
                  annotation_position="bottom right")
    top = max([s for _, s in pairs] + [1.5])
    fig.update_yaxes(range=[0, top * 1.15])
    most = max([n for n, _ in pairs] + [1])
    fig.update_xaxes(range=[0, max(most * 1.05, most + 1)])  # room for the first point; never plotly's -1..6
    return fig


def accept_figure(run: Run, upto: int) -> go.Figure:
    """Tokens each step added, stacked by who proposed them (the target's own token on top)."""
    main = numbers(run, upto).main if upto >= 0 else None
    mean = f" (mean {main.tokens_per_pass:.2f})" if main is not None and main.steps else ""
    fig = _figure(f"Tokens per step{mean}", "step", "tokens added")
    steps = list(run.records[1: upto + 1])
    origins = [token_origins(r) for r in steps]
    drafted = legend_items({o for row in origins for o in row} - {TARGET})
    for who in drafted + [TARGET]:  # stacked as in a step: drafted tokens by depth, the target's own on top
        lk = look(who)
        fig.add_bar(x=[r.index for r in steps], y=[row.count(who) for row in origins], name=lk.tag,
                    marker=dict(color=lk.colour, line=dict(color="#ffffff", width=0.5)),
                    hovertemplate=f"step %{{x}}: %{{y}} from {lk.name}<extra></extra>")
    fig.update_layout(barmode="stack", bargap=0.15, legend_traceorder="normal")
    most = max([len(r.new_token_ids) for r in steps] + [1])
    fig.update_yaxes(dtick=1 if most <= FEW_TOKENS else None, range=[0, most + 0.5])
    fig.update_xaxes(dtick=1 if len(steps) <= MANY_STEPS else None, range=[0.4, max(len(steps), 1) + 0.6])
    if not steps:
        fig.add_annotation(text="no decoding step yet", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                           font=dict(size=16))
    return fig


def _heads_by_depth(records) -> dict[int, str]:
    heads = {}
    for rec in records:
        if rec.tree is not None:
            heads.update({d: p for d, p in zip(rec.tree.depth, rec.tree.proposer) if d > 0})
    return heads


def depth_figure(run: Run, upto: int) -> go.Figure:
    """Per depth, for every drafter in the race side by side: how often the drafted token was right once the
    accepted path had got that far ("–": drafted, never reached). Only the depths the trees reached."""
    fig = _figure("Acceptance by depth, every drafter in the race", "draft depth (tag: who drafted it)",
                  "right, once reached")
    tally = numbers(run, upto) if upto >= 0 else None
    drafting = tally.drafting if tally is not None else []
    depth = len(drafting[0].rates) if drafting else run.settings.tree.depth
    depths = list(range(1, depth + 1))
    fig.update_yaxes(range=[0, RATE_ROOM], tickformat=".0%", tickvals=[0, 0.25, 0.5, 0.75, 1])
    fig.update_xaxes(range=[0.5, depth + 0.5], tickvals=depths)
    if not drafting:
        why = "no drafter in this run" if upto >= 1 else "no decoding step yet"
        fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=16))
        return fig
    records = {lane.method: lane.records for lane in lanes(run, upto)}
    for lane in drafting:
        heads, name = _heads_by_depth(records[lane.method]), method_label(lane.method)
        fig.add_bar(x=depths, y=[r or 0 for r in lane.rates], name=name, marker=dict(color=method_colour(lane.method)),
                    text=[f"{look(heads[d]).tag}<br>{r:.0%}" if d in heads and r is not None else
                          "–" if d in heads else "" for d, r in zip(depths, lane.rates)],
                    textposition="outside", cliponaxis=False, constraintext="none", textfont=dict(size=11),
                    customdata=list(zip(lane.accepted, lane.reached)),
                    hovertemplate=f"{name}, depth %{{x}}: right in %{{customdata[0]}} of %{{customdata[1]}} "
                                  "steps<extra></extra>")
    fig.update_layout(barmode="group", bargap=0.12, bargroupgap=0.05)  # bars wide enough for "100%" side by side
    return fig


def all_figures(run: Run, upto: int) -> tuple[go.Figure, go.Figure, go.Figure, go.Figure]:
    return speed_figure(run, upto), speedup_figure(run, upto), accept_figure(run, upto), depth_figure(run, upto)

"""Plotly charts of a run up to the step on screen: speed, running speedup, tokens per step, acceptance by depth."""
from __future__ import annotations

import plotly.graph_objects as go

from gumiho_core import AR, GUMIHO, GUMIHO_SERIAL, MAX_DEPTH, Acceptance

from ..state import Run
from .figure import new_figure
from .lanes import lanes
from .palette import TARGET, look
from .stats import run_stats, running_speedup
from .text_view import token_origins
from .tree_view import legend_items

PLAIN_COLOUR = "#7a7a7a"
METHOD_COLOUR = {GUMIHO: "#D55E00", GUMIHO_SERIAL: "#0072B2", AR: PLAIN_COLOUR}
HEIGHT = 300  # pixels, each of the four run charts


def _figure(title: str, x: str, y: str) -> go.Figure:
    return new_figure(title=dict(text=title, font=dict(size=15)), height=HEIGHT, margin=dict(l=60, r=16, t=48, b=48),
                      xaxis_title=x, yaxis_title=y,
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))


def speed_figure(run: Run, upto: int) -> go.Figure:
    """Tokens against compute time, for the run and for plain decoding of the same prompt on this machine."""
    fig = _figure("Tokens over time (measured here)", "compute seconds (animation excluded)", "tokens")
    method = run.settings.method
    tokens = [r.total_new_tokens for r in run.records[: upto + 1]]
    name = method if method != AR else "plain decoding"
    fig.add_scatter(x=[0.0] + run.clock[: upto + 1], y=[0] + tokens, mode="lines+markers", line_shape="hv",
                    name=name, line=dict(color=METHOD_COLOUR[method], width=3))
    if method != AR and run.baseline:
        limit = tokens[-1] if tokens else 0
        pts = [(n, t) for n, t in run.baseline if n <= limit]
        fig.add_scatter(x=[0.0] + [t for _, t in pts], y=[0] + [n for n, _ in pts], mode="lines", line_shape="hv",
                        name="plain decoding", line=dict(color=PLAIN_COLOUR, width=2, dash="dot"))
    return fig


def speedup_figure(run: Run, upto: int) -> go.Figure:
    """The running speedup: plain decoding's time to the same number of tokens, over this run's time."""
    fig = _figure("Speedup over plain decoding", "tokens so far", "× faster")
    if run.settings.method == AR:
        pairs = [(r.total_new_tokens, 1.0) for r in run.records[: upto + 1]]
    else:
        pairs = running_speedup(run, upto)
    fig.add_scatter(x=[n for n, _ in pairs], y=[s for _, s in pairs], mode="lines+markers", name="speedup",
                    line=dict(color=METHOD_COLOUR[run.settings.method], width=3))
    fig.add_hline(y=1.0, line=dict(color=PLAIN_COLOUR, dash="dot"), annotation_text="plain decoding",
                  annotation_position="bottom right")
    top = max([s for _, s in pairs] + [1.5])
    fig.update_yaxes(range=[0, top * 1.15])
    most = max([n for n, _ in pairs] + [1])
    fig.update_xaxes(range=[0, max(most * 1.05, most + 1)])  # room for the first point; never plotly's -1..6
    return fig


def accept_figure(run: Run, upto: int) -> go.Figure:
    """Tokens each step added, stacked by who proposed them (the target's bonus on top)."""
    stats = run_stats(run, upto)
    mean = f" (mean {stats.mean_accept_len:.2f})" if stats.steps else ""
    fig = _figure(f"Tokens per step{mean}", "step", "tokens added")
    steps = [r for r in run.records[1: upto + 1]]
    origins = [token_origins(r) for r in steps]
    drafted = legend_items({o for row in origins for o in row} - {TARGET})
    for who in drafted + [TARGET]:  # stacked as in a step: drafted tokens by depth, the bonus on top
        lk = look(who)
        fig.add_bar(x=[r.index for r in steps], y=[row.count(who) for row in origins], name=lk.tag,
                    marker=dict(color=lk.colour, line=dict(color="#ffffff", width=0.5)),
                    hovertemplate=f"step %{{x}}: %{{y}} from {lk.name}<extra></extra>")
    fig.update_layout(barmode="stack", bargap=0.15, legend_traceorder="normal")
    most = max([len(r.new_token_ids) for r in steps] + [1])
    fig.update_yaxes(dtick=1 if most <= 10 else None, range=[0, most + 0.5])
    fig.update_xaxes(dtick=1 if len(steps) <= 20 else None, range=[0.4, max(len(steps), 1) + 0.6])
    if not steps:
        fig.add_annotation(text="no decoding step yet", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                           font=dict(size=16))
    return fig


def depth_figure(run: Run, upto: int) -> go.Figure:
    """Per depth, for each drafting lane of the race (gumiho and serial side by side): how often the drafted token
    was right once the accepted path had got that far."""
    fig = _figure("Acceptance by depth: gumiho beside serial", "draft depth (tag: who drafted it)",
                  "right, once reached")  # a longer title runs past the plot's 204 px height
    depths = list(range(1, MAX_DEPTH + 1))
    # the axes are fixed, so an empty chart already shows what will come (plotly's default is -1..6)
    fig.update_yaxes(range=[0, 1.35], tickformat=".0%", tickvals=[0, 0.25, 0.5, 0.75, 1])  # room for 100%'s label
    fig.update_xaxes(range=[0.5, MAX_DEPTH + 0.5], tickvals=depths)
    drafting = [lane for lane in lanes(run, upto) if lane.method != AR and any(r.tree for r in lane.records)]
    if not drafting:
        why = "plain decoding drafts nothing" if run.settings.method == AR else "no decoding step yet"
        fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=16))
        return fig
    for lane in drafting:
        acceptance = Acceptance()
        for rec in lane.records:
            acceptance.add_step(rec)
        reached, accepted = acceptance.reached[1:], acceptance.accepted[1:]
        heads = _head_by_depth(lane.records)
        fig.add_bar(x=depths, y=[a / r if r else 0 for a, r in zip(accepted, reached)], name=lane.method,
                    marker=dict(color=METHOD_COLOUR[lane.method]),
                    text=[f"{look(heads[d]).tag}<br>{a / r:.0%}" if d in heads and r else ""
                          for d, a, r in zip(depths, accepted, reached)],
                    textposition="outside", cliponaxis=False, constraintext="none", textfont=dict(size=11),
                    customdata=list(zip(accepted, reached)),
                    hovertemplate=f"{lane.method}, depth %{{x}}: right in %{{customdata[0]}} of %{{customdata[1]}} "
                                  "steps<extra></extra>")
    fig.update_layout(barmode="group", bargap=0.12, bargroupgap=0.05)  # bars wide enough for "100%" side by side
    return fig


def _head_by_depth(records) -> dict[int, str]:
    heads = {}
    for rec in records:
        if rec.tree is not None:
            heads.update({d: p for d, p in zip(rec.tree.depth, rec.tree.proposer) if d > 0})
    return heads


def all_figures(run: Run, upto: int) -> tuple[go.Figure, go.Figure, go.Figure, go.Figure]:
    return speed_figure(run, upto), speedup_figure(run, upto), accept_figure(run, upto), depth_figure(run, upto)

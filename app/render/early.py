"""Why early tokens matter, read off the run's own acceptance rates, for every drafter in the race.

A drafted token counts only if every token before it on its path was accepted, so with p_k the rate at depth k
(how often the drafted token was right once the path had got that far) the expected accepted length is
    E[L] = sum over depths d of prod_{k <= d} p_k                         (the Gumiho paper's Theorem 3.1)
and raising one rate p_j adds
    dE[L]/dp_j = sum over i >= j of prod_{k <= i, k != j} p_k,
which is largest for j = 1: every later term depends on it. Read on the run's own rates, the products telescope to
the run's counts (prod_{k <= d} p_k = the share of passes that kept a drafted token at depth d), so
1 + E[L] is the run's tokens per pass, plus the share of passes that ended the text before the target's own token.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..state import Run
from .figure import new_figure
from .palette import method_colour, method_label
from .stats import LaneNumbers, numbers

BUMP = 0.05  # the what-if raise of one depth's acceptance rate
LATE_DEPTH = 6  # the late depth the words compare with depth 1 (the deepest there is, if shallower)
HEIGHT = 380  # pixels
HEADROOM = 1.3  # the y axes run this far above the highest bar: room for its label
NOTHING = 0.005  # a bar below this carries no label (it would read 0.00, over its neighbours')
CSS = """
.gm-early{font-size:14px;line-height:1.55;color:#222;padding:4px 8px}
"""


@dataclass(frozen=True)
class Early:
    """One drafter's expected accepted length from its rates, what each depth adds to it, and what a raise adds."""

    lane: LaneNumbers
    rates: tuple[float, ...]  # p_1..p_D (0 where never reached: nothing beyond it counts either)
    adds: tuple[float, ...]  # prod_{k <= d} p_k: what depth d adds to E[L]
    gains: tuple[float, ...]  # BUMP x dE[L]/dp_j: what raising p_j by BUMP adds (E[L] is linear in each p_j)

    @property
    def expected(self) -> float:
        return sum(self.adds)


def early(lane: LaneNumbers) -> Early:
    rates = tuple(r or 0.0 for r in lane.rates)
    adds = tuple(math.prod(rates[: d + 1]) for d in range(len(rates)))
    gains = tuple(BUMP * sum(math.prod(p for k, p in enumerate(rates[: i + 1]) if k != j) for i in range(j, len(rates)))
                  for j in range(len(rates)))
    return Early(lane, rates, adds, gains)


def _bars(fig: go.Figure, views: list[Early]) -> None:
    for view in views:
        depths = list(range(1, len(view.rates) + 1))
        name, colour = method_label(view.lane.method), method_colour(view.lane.method)
        for col, values, what in ((1, view.adds, "adds"), (2, view.gains, f"+{BUMP:.2f} here adds")):
            fig.add_bar(x=depths, y=list(values), name=name, legendgroup=name, showlegend=col == 1,
                        marker=dict(color=colour), text=[f"{v:.2f}" if v >= NOTHING else "" for v in values],
                        textposition="outside",
                        cliponaxis=False, textfont=dict(size=11),
                        hovertemplate=f"{name}, depth %{{x}}: {what} %{{y:.3f}} tokens per pass<extra></extra>",
                        row=1, col=col)


def early_figure(run: Run, upto: int) -> go.Figure:
    title = "Why early tokens matter: the run's own acceptance rates, depth by depth"
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.09,
                        subplot_titles=("what each depth adds to E[L]: p₁·p₂·…·p_d",
                                        f"what +{BUMP:.2f} acceptance at one depth would add: {BUMP:.2f}·dE[L]/dp_j"),
                        figure=new_figure(title=dict(text=title, font=dict(size=15)), height=HEIGHT, barmode="group",
                                          bargap=0.15, margin=dict(l=60, r=16, t=84, b=56),
                                          legend=dict(orientation="h", yanchor="bottom", y=1.1, xanchor="right",
                                                      x=1.0)))
    fig.update_annotations(font=dict(size=14))
    views = [early(lane) for lane in numbers(run, upto).drafting] if upto >= 1 else []
    if not views:
        fig.add_annotation(text="no drafter has taken a step yet", showarrow=False, x=0.5, y=0.5, xref="paper",
                           yref="paper", font=dict(size=15))
        return fig
    _bars(fig, views)
    depth = len(views[0].rates)
    fig.update_xaxes(title_text="draft depth", tickvals=list(range(1, depth + 1)), range=[0.5, depth + 0.5])
    for col, values in ((1, [a for v in views for a in v.adds]), (2, [g for v in views for g in v.gains])):
        fig.update_yaxes(range=[0, max(values + [0.01]) * HEADROOM], title_text="tokens per pass" if col == 1 else
                         None, row=1, col=col)
    return fig


def _lane_words(view: Early) -> str:
    lane, depth = view.lane, len(view.rates)
    late = min(LATE_DEPTH, depth)
    terms = " + ".join(f"{a:.2f}" for a in view.adds)
    gap = lane.without_bonus / lane.steps if lane.steps else 0.0
    ended = (f" (the run's {lane.tokens_per_pass:.2f} tokens per pass, plus {gap:.2f} for the last pass, which ended "
             "the text before the target's own token)" if lane.without_bonus else
             f", the run's {lane.tokens_per_pass:.2f} tokens per pass")
    return (f"<b>{escape(method_label(lane.method))}</b>: E[L] = {terms} = {view.expected:.2f} drafted tokens "
            f"accepted per pass, so 1 + E[L] = {1 + view.expected:.2f}{ended}. +{BUMP:.2f} acceptance at depth 1 "
            f"would add {view.gains[0]:.2f} tokens per pass; at depth {late}, {view.gains[late - 1]:.3f}.")


def early_html(run: Run | None, upto: int) -> str:
    views = [early(lane) for lane in numbers(run, upto).drafting] if run is not None and upto >= 1 else []
    head = ("A drafted token counts only if every token before it on its path was accepted: depth d adds "
            "p₁·p₂·…·p_d to the expected accepted length E[L] (the rates p are this run's own: the chart "
            "“Acceptance by depth” shows them). So a better first guess lifts every later term, and a better sixth guess "
            "lifts almost nothing: why Gumiho gives the first tokens a transformer and the later ones cheap heads.")
    lines = "".join(f"<li>{_lane_words(v)}</li>" for v in views)
    return f'<style>{CSS}</style><div class="gm-early">{head}{f"<ul>{lines}</ul>" if lines else ""}</div>'

"""What each chart shows before its first step: its name and when it will fill, at the chart's own height (no jump
when the real one arrives). The page is built with these, so the browser loads its plotting library with the page,
not at the first chart: there it made the first run file's answer take 2.1 s instead of 1.2 s (Chromium, here)."""
from __future__ import annotations

from functools import cache

import plotly.graph_objects as go

from . import charts, early, race, timing, whatif
from .figure import new_figure

# chart -> (what it will show, the height its own figure function draws it at)
WAITING = {
    "race": ("The race: the methods you tick and plain decoding, on the same prompt", race.HEIGHT),
    "timing": ("Time per step, split by phase", timing.HEIGHT),
    "whatif": ("What-if: other tree sizes, other hardware (a prediction)", whatif.HEIGHT),
    "early": ("Why early tokens matter: each depth's share of the accepted length", early.HEIGHT),
    "speed": ("Tokens over time", charts.HEIGHT),
    "speedup": ("Speedup over plain decoding", charts.HEIGHT),
    "accept": ("Tokens per step", charts.HEIGHT),
    "depth": ("Acceptance by depth", charts.HEIGHT),
}
WHEN = "appears with the first step: press ▶ Run, or load a run file"


@cache  # the same figures for every page and every reset; nothing changes them once made
def waiting_figure(chart: str) -> go.Figure:
    title, height = WAITING[chart]
    fig = new_figure(title=dict(text=title, font=dict(size=15)), height=height, margin=dict(l=16, r=16, t=48, b=16),
                     xaxis=dict(visible=False), yaxis=dict(visible=False))
    fig.add_annotation(text=WHEN, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=15, color="#555555"))
    return fig

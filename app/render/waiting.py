"""What each chart shows before its first step: its name and when it will fill, at the chart's own height (no jump
when the real one arrives). The page is built with these, so the browser loads its plotting library with the page:
done at the first chart instead, that load took about 1.5 s of the first step or file (measured in Chromium)."""
from __future__ import annotations

from functools import cache

import plotly.graph_objects as go

# chart -> (what it will show, its height in pixels as drawn by its own figure function)
WAITING = {
    "race": ("The race: gumiho, serial and plain decoding on the same prompt", 350),
    "timing": ("Time per step, split by phase", 360),
    "whatif": ("What-if: other tree sizes, other hardware (a prediction)", 430),
    "speed": ("Tokens over time", 300),
    "speedup": ("Speedup over plain decoding", 300),
    "accept": ("Tokens per step", 300),
    "depth": ("Acceptance by depth", 300),
}
WHEN = "appears with the first step: press ▶ Run, or load a run file"


@cache  # the same seven figures for every page and every reset; nothing changes them once made
def waiting_figure(chart: str) -> go.Figure:
    title, height = WAITING[chart]
    fig = go.Figure()
    fig.update_layout(title=dict(text=title, font=dict(size=15)), template="plotly_white", height=height,
                      font=dict(size=14, family="system-ui, sans-serif"), margin=dict(l=16, r=16, t=48, b=16),
                      xaxis=dict(visible=False), yaxis=dict(visible=False))
    fig.add_annotation(text=WHEN, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=15, color="#555555"))
    return fig

"""A new plotly figure in the page's look: plotly_white cut down to what these charts draw (scatter and bar traces
on cartesian axes, lines, notes). The whole template is about 7 KB of JSON in every figure sent to the browser,
settings of trace kinds and axes that no chart here has; cut down, a figure is built and sent several times faster.

Two axis settings differ from plotly_white, both for the browser's time: each figure sets margins that hold its
labels, so the axes do not push the margins out (`automargin`: plotly draws a chart a second time whenever they
grow, and each update starts again from the figure's own margins), and tick labels are not measured one by one to
hide those that would cross the page's edge (`ticklabeloverflow`). Together they cut the browser's long tasks
while a run animates by about a third (docs/performance.md)."""
from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

LAYOUT_KEYS = ("annotationdefaults", "autotypenumbers", "colorway", "font", "hoverlabel", "hovermode",
               "paper_bgcolor", "plot_bgcolor", "shapedefaults", "title", "xaxis", "yaxis")
TRACE_KINDS = ("bar", "scatter")
FONT = dict(size=14, family="system-ui, sans-serif")


def _template() -> go.layout.Template:
    whole = pio.templates["plotly_white"].to_plotly_json()
    layout = {k: whole["layout"][k] for k in LAYOUT_KEYS}
    for axis in ("xaxis", "yaxis"):
        layout[axis] = dict(layout[axis], ticklabeloverflow="allow", automargin=False)
    return go.layout.Template(layout=layout, data={k: whole["data"][k] for k in TRACE_KINDS})


TEMPLATE = _template()


def new_figure(**layout) -> go.Figure:
    """An empty figure with the page's template and font; `layout` as plotly's update_layout takes it."""
    return go.Figure(layout=dict(template=TEMPLATE, font=FONT, **layout))

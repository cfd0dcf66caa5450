"""The race: this run, the other drafting method (same prompt, same tree shape) and plain decoding, decoded
interleaved step by step on this machine, as lanes on one compute-time axis. Each step is a block split into
where its time went (drafting phases, verification, commit), labelled with the tokens it added; a finished lane
ends in a finish line. Under it, the race in words and numbers."""
from __future__ import annotations

from html import escape

import plotly.graph_objects as go

from gumiho_core import AR

from ..state import Run
from .figure import new_figure
from .lanes import Lane, lanes
from .phases import PLAIN_STEP, PREFILL_PART, VERIFY, part_look, part_order

LANE_NAMES = {"gumiho": "gumiho", "gumiho-serial": "gumiho-serial", AR: "plain"}
HEIGHT = 350  # pixels
LANE_HALF = 0.36  # half a lane's bar height, in lane units
CSS = """
.gm-race{font-size:15px;line-height:1.5;color:#111;padding:4px 8px}
.gm-race .ok{color:#0b6e2f;font-weight:650}
.gm-race .bad{color:#8a1c00;font-weight:650}
"""


def _label(lane: Lane) -> str:
    what = f"{lane.tokens} tokens · {lane.tokens_per_s:.1f}/s" if lane.end else "waiting"
    return f"<b>{LANE_NAMES[lane.method]}</b><br>{what}"


def _bars(shown: list[Lane]) -> dict[str, dict]:
    """Per part key: the bars (lane position, start, seconds, text, hover) of every lane's steps."""
    bars: dict[str, dict] = {}
    for pos, lane in zip(range(len(shown) - 1, -1, -1), shown):
        for step in lane.steps:
            start = step.start
            for part in step.parts:
                key = "plain" if lane.method == AR and part.key == VERIFY else part.key
                b = bars.setdefault(key, {"y": [], "base": [], "x": [], "text": [], "hover": []})
                label = f"+{step.tokens}" if part.key == VERIFY and lane.method != AR else ""
                b["y"].append(pos), b["base"].append(start), b["x"].append(part.seconds)
                b["text"].append("prefill" if part.key == PREFILL_PART else label)
                b["hover"].append(f"{LANE_NAMES[lane.method]}, step {step.index}: {part_look(part.key).tag} "
                                  f"{1000 * part.seconds:.1f} ms; the step added {step.tokens}")
                start += part.seconds
    return bars


def _finish_lines(fig: go.Figure, shown: list[Lane]) -> None:
    for pos, lane in zip(range(len(shown) - 1, -1, -1), shown):
        if lane.finished and lane.end:
            fig.add_shape(type="line", x0=lane.end, x1=lane.end, y0=pos - LANE_HALF - 0.08, y1=pos + LANE_HALF + 0.08,
                          line=dict(color="#111111", width=3))
            fig.add_annotation(x=lane.end, y=pos, text=f"<b>{lane.end:.2f} s</b>", showarrow=False, xanchor="left",
                               xshift=6, font=dict(size=14, color="#111111"))


def race_figure(run: Run, upto: int) -> go.Figure:
    shown = lanes(run, upto)
    title = "Race on this machine: the same prompt, steps interleaved (compute seconds, animation excluded)"
    fig = new_figure(title=dict(text=title, font=dict(size=16)), height=HEIGHT, margin=dict(l=150, r=20, t=84, b=10),
                     barmode="overlay", bargap=0.3,
                     uniformtext=dict(minsize=10, mode="hide"),  # the time ruler on top, the legend under the lanes
                     legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.01, x=0, font=dict(size=12)))
    bars = _bars(shown)
    for key in part_order(bars):
        lk = PLAIN_STEP if key == "plain" else part_look(key)
        b = bars[key]
        fig.add_bar(y=b["y"], x=b["x"], base=b["base"], orientation="h", name=lk.label, width=2 * LANE_HALF,
                    marker=dict(color=lk.colour, line=dict(color="#ffffff", width=0.6)), text=b["text"],
                    textposition="inside", insidetextanchor="middle", textangle=0, textfont=dict(color=lk.ink),
                    hovertext=b["hover"], hoverinfo="text", cliponaxis=False)
    _finish_lines(fig, shown)
    end = max([lane.end for lane in shown] + [0.1])
    fig.update_xaxes(range=[0, end * 1.1], ticksuffix=" s", side="top")
    fig.update_yaxes(tickvals=list(range(len(shown))), ticktext=[_label(lane) for lane in reversed(shown)],
                     range=[-0.6, max(len(shown), 1) - 0.4], showgrid=False)
    if not shown:
        fig.add_annotation(text="the race appears with the first step", showarrow=False, x=0.5, y=0.5, xref="paper",
                           yref="paper", font=dict(size=16))
    return fig


def _speed_words(shown: list[Lane]) -> str:
    plain = next((lane for lane in shown if lane.method == AR and lane.tokens_per_s), None)
    words = []
    for lane in shown:
        if lane.method != AR and plain is not None and lane.tokens_per_s:
            words.append(f"<b>{LANE_NAMES[lane.method]}</b> {lane.tokens_per_s / plain.tokens_per_s:.2f}× plain "
                         f"decoding")
    return (", ".join(words) + " (tokens per compute second so far)." if words else "")


def _same_words(run: Run, shown: list[Lane]) -> str:
    if not run.settings.decode.greedy:
        return ("Sampling (temperature > 0): each lane draws its own random numbers, so the texts differ; each one "
                "is a sample from the target's own distribution.")
    n = min(lane.tokens for lane in shown)
    same = len({lane.token_ids[:n] for lane in shown}) == 1
    names = ", ".join(LANE_NAMES[lane.method] for lane in shown)
    if same:
        return (f'<span class="ok">✓ Identical output</span>: {names} wrote the same {n} tokens so far '
                "(temperature 0).")
    return f'<span class="bad">✗ The outputs differ</span> ({names}): please report this.'


def race_html(run: Run | None, upto: int) -> str:
    """The race in words: who is ahead by how much, and whether the outputs are the same."""
    shown = lanes(run, upto) if run is not None and upto >= 0 else []
    if len(shown) < 2:
        text = ("Each run also decodes the same prompt with the other drafting method (the same tree budget) and "
                "with plain decoding, one step each in turn, so all three see the same machine load.")
        if run is not None and upto >= 0 and not run.rivals and run.settings.method != AR:
            text = "This run was loaded from a file: run files keep the run and its plain-decoding times, not the race."
        return f'<style>{CSS}</style><div class="gm-race">{text}</div>'
    missing = "" if run.rivals or run.settings.method == AR else (
        " (Loaded from a file: the other drafting method's lane is not kept in run files.)")
    return (f'<style>{CSS}</style><div class="gm-race">{_speed_words(shown)} {_same_words(run, shown)}'
            f'{escape(missing)}</div>')

"""The race: this run, the drafting methods picked to race it (same prompt, same tree request, each its own tree)
and plain decoding, decoded interleaved step by step on this machine, as lanes on one compute-time axis. Each
step is a block split into where its time went (drafting phases, choosing the tree, verification, commit),
labelled with the tokens it added; a finished lane ends in a finish line. Beside it, an inset: the drafting of one
step of each lane, magnified (the mean of its passes), where each serial step and the one pass of the MLP heads
can be read (on a CPU verification takes most of a step, and drafting is a sliver of each block in the race).
Under it, the verdict in words: who won, by how much, and whether the outputs are identical."""
from __future__ import annotations

from html import escape

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gumiho_core import AR

from ..state import Run
from .figure import new_figure
from .lanes import Lane, lanes
from .palette import method_label, method_lines
from .phases import PREFILL_PART, VERIFY, is_drafting, part_look, part_order
from .stats import LaneNumbers, Numbers, numbers

HEIGHT = 400  # pixels
LANE_HALF = 0.36  # half a lane's bar height, in lane units
RACE_SHARE = 0.72  # of the width: the race; the rest is the inset of one step
MIN_LABEL_SHARE = 0.12  # an inset block narrower than this share of its lane's drafting carries no tag
TITLE_LIFT = 26  # pixels: the panels' titles sit above their time axes
AXIS_ROOM = 1.12  # the time axis runs this far past the last finish line: room for its label
CSS = """
.gm-race{font-size:15px;line-height:1.5;color:#111;padding:4px 8px}
.gm-race .ok{color:#0b6e2f;font-weight:650}
.gm-race .bad{color:#8a1c00;font-weight:650}
"""


def _label(lane: LaneNumbers) -> str:
    what = f"{lane.tokens} tokens · {lane.seconds:.2f} s" if lane.seconds else "waiting"
    return "<br>".join(f"<b>{escape(line)}</b>" for line in method_lines(lane.method)) + f"<br>{what}"


def _bars(shown: list[Lane]) -> dict[str, dict]:
    """Per part key: the bars (lane position, start, seconds, text, hover) of every lane's steps."""
    bars: dict[str, dict] = {}
    for pos, lane in zip(range(len(shown) - 1, -1, -1), shown):
        for step in lane.steps:
            start = step.start
            for part in step.parts:
                b = bars.setdefault(part.key, {"y": [], "base": [], "x": [], "text": [], "hover": []})
                label = f"+{step.tokens}" if part.key == VERIFY else ""
                b["y"].append(pos), b["base"].append(start), b["x"].append(part.seconds)
                b["text"].append("prefill" if part.key == PREFILL_PART else label)
                b["hover"].append(f"{method_label(lane.method)}, step {step.index}: {part_look(part.key).tag} "
                                  f"{1000 * part.seconds:.1f} ms; the step added {step.tokens}")
                start += part.seconds
    return bars


def _inset(fig: go.Figure, tally: Numbers, shown_keys: set) -> None:
    """The drafting of one mean pass of each lane, phase after phase, in milliseconds (the figure overlays its bars:
    each starts where the one before it ended); plain decoding drafts nothing."""
    count, ends = len(tally.lanes), [0.0] * len(tally.lanes)
    for key in part_order({k for n in tally.lanes for k in n.parts_ms if is_drafting(k)}):
        lk = part_look(key)
        ys, xs, bases, texts = [], [], [], []
        for i, (pos, lane) in enumerate(zip(range(count - 1, -1, -1), tally.lanes)):
            ms = lane.parts_ms.get(key)
            if ms:
                ys.append(pos), xs.append(ms), bases.append(ends[i])
                texts.append(lk.tag if ms >= MIN_LABEL_SHARE * lane.draft_ms else "")
                ends[i] += ms
        if xs:
            fig.add_bar(y=ys, x=xs, base=bases, orientation="h", name=lk.label, legendgroup=key,
                        showlegend=key not in shown_keys, width=2 * LANE_HALF,
                        marker=dict(color=lk.colour, line=dict(color="#ffffff", width=0.6)), text=texts,
                        textposition="inside", insidetextanchor="middle", textangle=0, textfont=dict(color=lk.ink),
                        hovertemplate=f"{lk.tag}: %{{x:.1f}} ms<extra></extra>", row=1, col=2)
            shown_keys.add(key)


def _finish_lines(fig: go.Figure, shown: list[Lane]) -> None:
    for pos, lane in zip(range(len(shown) - 1, -1, -1), shown):
        if lane.finished and lane.end:
            fig.add_shape(type="line", x0=lane.end, x1=lane.end, y0=pos - LANE_HALF - 0.08, y1=pos + LANE_HALF + 0.08,
                          line=dict(color="#111111", width=3), row=1, col=1)
            fig.add_annotation(x=lane.end, y=pos, text=f"<b>{lane.end:.2f} s</b>", showarrow=False, xanchor="left",
                               xshift=6, font=dict(size=14, color="#111111"), row=1, col=1)


def race_figure(run: Run, upto: int) -> go.Figure:
    shown, tally = lanes(run, upto), numbers(run, upto)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, column_widths=[RACE_SHARE, 1 - RACE_SHARE],
                        horizontal_spacing=0.03,
                        subplot_titles=("the whole run: compute seconds, animation excluded",
                                        "drafting in one step, magnified (mean ms)"),
                        figure=new_figure(title=dict(text="Race on this machine: the same prompt, steps interleaved",
                                                     font=dict(size=16)),
                                          height=HEIGHT, margin=dict(l=170, r=20, t=110, b=10), barmode="overlay",
                                          bargap=0.3, uniformtext=dict(minsize=10, mode="hide"),
                                          legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.01,
                                                      x=0, font=dict(size=12))))
    fig.update_annotations(font=dict(size=13), yshift=TITLE_LIFT)  # only the panels' titles exist yet
    bars, keys = _bars(shown), set()
    for key in part_order(bars):
        lk, b = part_look(key), bars[key]
        fig.add_bar(y=b["y"], x=b["x"], base=b["base"], orientation="h", name=lk.label, legendgroup=key,
                    width=2 * LANE_HALF, marker=dict(color=lk.colour, line=dict(color="#ffffff", width=0.6)),
                    text=b["text"], textposition="inside", insidetextanchor="middle", textangle=0,
                    textfont=dict(color=lk.ink), hovertext=b["hover"], hoverinfo="text", cliponaxis=False,
                    row=1, col=1)
        keys.add(key)
    _inset(fig, tally, keys)
    _finish_lines(fig, shown)
    end = max([lane.end for lane in shown] + [0.1])
    fig.update_xaxes(range=[0, end * AXIS_ROOM], ticksuffix=" s", side="top", row=1, col=1)
    fig.update_xaxes(ticksuffix=" ms", side="top", row=1, col=2)
    fig.update_yaxes(tickvals=list(range(len(shown))), ticktext=[_label(n) for n in reversed(tally.lanes)],
                     range=[-0.6, max(len(shown), 1) - 0.4], showgrid=False, row=1, col=1)
    for pos, lane in zip(range(len(tally.lanes) - 1, -1, -1), tally.lanes):
        if not lane.draft_ms:
            fig.add_annotation(x=0, y=pos, text="no drafting", showarrow=False, xanchor="left",
                               font=dict(size=13, color="#555555"), row=1, col=2)
    if not shown:
        fig.add_annotation(text="the race appears with the first step", showarrow=False, x=0.5, y=0.5, xref="paper",
                           yref="paper", font=dict(size=16))
    return fig


def _ranked(tally: Numbers) -> list[LaneNumbers]:
    """The lanes, fastest first (tokens per compute second: with the same text, the first to finish)."""
    return sorted(tally.lanes, key=lambda n: -n.tokens_per_s)


def _times(lane: LaneNumbers) -> str:
    speed = f", {lane.speedup:.2f}× plain decoding" if lane.speedup is not None and lane.method != AR else ""
    return f"{lane.tokens} tokens in {lane.seconds:.2f} s{speed}"


def verdict_words(tally: Numbers) -> str:
    """Who won and by how much (the race over), or who leads (so far)."""
    first, *rest = _ranked(tally)
    if not rest:
        return ""
    second = rest[0]
    if not tally.ended:
        return (f"So far <b>{escape(method_label(first.method))}</b> leads ({_times(first)}); "
                + "; ".join(f"{escape(method_label(n.method))}: {_times(n)}" for n in rest) + ".")
    margin = second.seconds - first.seconds
    by = (f"{margin:.2f} s ({100 * margin / second.seconds:.0f}%) ahead of {escape(method_label(second.method))}"
          if first.tokens == second.tokens and second.seconds else
          f"{first.tokens_per_s / second.tokens_per_s:.2f}× the tokens per second of "
          f"{escape(method_label(second.method))}")
    others = "; ".join(f"{escape(method_label(n.method))}: {_times(n)}" for n in rest)
    lesson = (" The drafts were not accepted often enough to pay for their cost on this machine."
              if first.method == AR else "")
    return f"🏁 <b>{escape(method_label(first.method))} won</b>, {by}: {_times(first)}. {others}.{lesson}"


def same_words(run: Run, tally: Numbers) -> str:
    if tally.same is None:
        return ("Sampling (temperature > 0): each lane draws its own random numbers, so the texts differ; each one "
                "is a sample from the target's own distribution.")
    n = min(lane.tokens for lane in tally.lanes)
    names = ", ".join(method_label(lane.method) for lane in tally.lanes)
    so_far = "" if tally.ended else " so far"
    if tally.same:
        return (f'<span class="ok">✓ Identical output</span>: {escape(names)} wrote the same {n} tokens{so_far} '
                "(temperature 0).")
    return f'<span class="bad">✗ The outputs differ</span> ({escape(names)}): please report this.'


def budget_words(run: Run) -> str:
    """Whether the racing drafters had the same training budget (optimizer steps), where their heads say."""
    methods = [m for m in (run.settings.method, *run.rivals) if m != AR]
    steps = {m: run.trained_steps.get(m) for m in methods}
    if len(methods) < 2 or None in steps.values():
        return ""
    if len(set(steps.values())) == 1:
        n = steps[methods[0]]
        return (" Every drafter here is untrained." if n == 0 else
                f" Every drafter here was trained for {n:,} optimizer steps: an equal budget.")
    each = ", ".join(f"{method_label(m)} {n:,}" for m, n in steps.items())
    return (f" Their heads were trained for different numbers of optimizer steps ({each}): this race compares these "
            "heads, not the methods at an equal budget.")


def race_html(run: Run | None, upto: int) -> str:
    """The race in words: who won by how much (or who leads), and whether the outputs are the same."""
    tally = numbers(run, upto) if run is not None and upto >= 0 else None
    if tally is None or len(tally.lanes) < 2:
        text = ("Each run also decodes the same prompt with the methods ticked under “Race” (the same tree budget) "
                "and with plain decoding, one step each in turn, so all of them see the same machine load.")
        return f'<style>{CSS}</style><div class="gm-race">{text}</div>'
    older = ("" if run.rivals or run.settings.method == AR else
             " (This run has no other drafting lane: none was ticked, or it was loaded from an older run file.)")
    return (f'<style>{CSS}</style><div class="gm-race">{verdict_words(tally)} {same_words(run, tally)}'
            f'{escape(budget_words(run) + older)}</div>')

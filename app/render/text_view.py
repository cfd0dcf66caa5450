"""The answer coloured by where each token came from, and the legend shared with the tree."""
from __future__ import annotations

from html import escape
from typing import Iterable, Mapping, Sequence

from gumiho_core import PREFILL, StepRecord

from .committed import committed
from .palette import TARGET, look
from .tree_view import legend_items, piece_of, visible

CSS = """
.gm-out{font-size:17px;line-height:1.9;white-space:pre-wrap;word-break:break-word;padding:10px 12px;
  border:1px solid #ddd;border-radius:8px;background:#fff;color:#111;min-height:3em}
.gm-out .gm-t{border-bottom:3px solid;border-radius:3px;padding:1px 0}
.gm-out .gm-t.gm-target{border-bottom-style:dotted}
.gm-out .gm-special{font-size:12px;color:#555;border:1px solid #999;border-radius:4px;padding:0 3px;margin:0 2px}
.gm-out .gm-nl{color:#999;font-size:13px}
.gm-out .gm-new{animation:gm-flash 1.2s ease-out}
@keyframes gm-flash{0%{box-shadow:0 0 0 3px #ffbf00}100%{box-shadow:none}}
.gm-legend{display:flex;flex-wrap:wrap;gap:6px 14px;font-size:14px;margin:6px 2px;color:#222}
.gm-legend span.gm-sw{display:inline-block;min-width:24px;text-align:center;font-weight:700;font-size:11px;
  border:2px solid;border-radius:4px;margin-right:4px;font-family:ui-monospace,monospace}
.gm-key{font-size:13px;color:#444}
.gm-placeholder{color:#777;font-style:italic}
"""


def token_origins(record: StepRecord) -> list[str]:
    """Who proposed each token this step committed: the accepted nodes' heads, then the target's own token (a stop,
    at the end of the text or the length limit, may cut the step short: committed.py)."""
    if record.tree is None or record.verdict is None:
        return [TARGET] * len(record.new_token_ids)
    got = committed(record)
    return [record.tree.proposer[i] for i in got.nodes] + [TARGET] * got.bonus


def _token_tip(record: StepRecord, origin: str, position: int) -> str:
    if record.kind == PREFILL:
        return "step 0 (prefill): the target's first token after reading the prompt"
    if origin == TARGET:
        what = "the target's own token" if record.tree is None else "the target's bonus token"
        return f"step {record.index}: {what}"
    return f"step {record.index}: drafted by {look(origin).tag} ({look(origin).name}), accepted at depth {position + 1}"


def _token_span(token: int, text: str, origin: str, tip: str, special: bool, new: bool) -> str:
    lk = look(origin)
    css = "gm-t" + (" gm-target" if origin == TARGET else "") + (" gm-new" if new else "")
    if special:
        inner = f'<span class="gm-special">{escape(visible(text))}</span>'
    elif "\n" in text:  # keep the line break, and show where it is
        inner = escape(text).replace("\n", '<span class="gm-nl">↵</span>\n')
    else:
        inner = escape(text)
    return (f'<span class="{css}" style="background:{lk.tint};border-color:{lk.colour}" '
            f'title="{escape(tip)} · token {token}">{inner}</span>')


def output_html(records: Sequence[StepRecord], pieces: Mapping[int, str], special_ids: Iterable[int] = (),
                highlight: int | None = None) -> str:
    """The committed text of `records`, each token coloured by origin; step `highlight`'s tokens flash."""
    special = set(special_ids)
    spans = []
    for rec in records:
        for pos, (tok, origin) in enumerate(zip(rec.new_token_ids, token_origins(rec))):
            spans.append(_token_span(tok, piece_of(pieces, tok), origin, _token_tip(rec, origin, pos),
                                     tok in special, rec.index == highlight))
    if not spans:
        spans = ['<span class="gm-placeholder">The answer appears here, token by token.</span>']
    origins = {o for rec in records for o in token_origins(rec)}
    return (f'<style>{CSS}</style>' + (_text_key(origins) if origins else "")
            + f'<div class="gm-out" role="document" aria-label="answer">{"".join(spans)}</div>')


def _text_key(origins) -> str:
    """The text's own legend: the underline of each token says who wrote it."""
    chips = "".join(f'<span><span class="gm-sw" style="background:{look(o).tint};border-color:{look(o).colour};'
                    f'color:{look(o).colour}">{escape(look(o).tag)}</span>{escape(_ORIGIN_WORDS.get(o, look(o).name))}'
                    "</span>" for o in legend_items(origins))
    return (f'<div class="gm-legend gm-key" aria-label="who wrote each token"><span>Underline: who wrote each '
            f'token.</span>{chips}</div>')


_ORIGIN_WORDS = {TARGET: "the target itself (its own token: one per pass, and every plain-decoding token)"}


_KEY = ("<span><b>bold outline</b>: accepted by the target</span><span><i>dashed, faded</i>: rejected</span>"
        "<span><i>pale</i>: never checked (an earlier token was rejected)</span><span>★: the target's own token</span>"
        "<span><i>faded, solid</i>: accepted, but after the end of the text (not kept)</span>")


def legend_html(proposers: Iterable[str], key: bool = True) -> str:
    """Swatch (colour and tag) and name for each proposer that appears, in a fixed order; then how to read a node."""
    items = []
    for p in legend_items(proposers):
        lk = look(p)
        items.append(f'<span><span class="gm-sw" style="background:{lk.tint};border-color:{lk.colour};'
                     f'color:{lk.colour}">{escape(lk.tag)}</span>{escape(lk.name)}</span>')
    return (f'<style>{CSS}</style><div class="gm-legend" aria-label="legend">{"".join(items)}</div>'
            + (f'<div class="gm-legend gm-key">{_KEY}</div>' if key else ""))


def proposers_in(records: Sequence[StepRecord]) -> set[str]:
    """Every proposer that appears in these steps' trees and text (for the legend)."""
    seen = {TARGET}
    for rec in records:
        if rec.tree is not None:
            seen.update(rec.tree.proposer)
    return seen

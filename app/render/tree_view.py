"""The draft tree as an SVG picture: a column per depth, a row per leaf.

A node sits on the row of its best child, so the drafter's favourite continuation reads as one line
from left to right. The layout depends on the tree alone, so every stage of the animation ("serial1",
"serial2", "parallel", "verified", "committed") puts each node in the same place: nodes appear in place,
nothing jumps.
Pure functions of a StepRecord and the token texts; no Gradio here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Mapping

from gumiho_core import PARALLEL, PREFILL, DraftTree, StepRecord

from ..stages import COMMITTED, VERIFIED, stages
from .committed import committed
from .palette import LOOKS, TARGET, look

COL_W, NODE_W, NODE_H, ROW_H = 92, 86, 20, 24  # px: 9 columns (depth 7) fit the panel of a 1440 px wide page
TOP, LEFT = 50, 6  # room for the column headers
LABEL_CHARS = 7  # token text shown on a node; the full text is on hover
TIP_CHARS = 80  # ... up to this many characters (SmolLM2's longest token has 81)
_VISIBLE = str.maketrans({" ": "·", "\n": "↵", "\t": "⇥", "\r": "␍"})

CSS = """
.gm-tree{border:1px solid #ddd;border-radius:8px;background:#fff;width:max-content;min-width:100%;box-sizing:border-box}
.gm-tree svg{display:block;font-family:ui-monospace,Menlo,Consolas,'DejaVu Sans Mono',monospace}
.gm-tree .gm-tok{font-size:13px;fill:#111}
.gm-tree .gm-tag{font-size:10px;font-weight:700}
.gm-tree .gm-head{font-size:11px;fill:#444;font-family:system-ui,sans-serif}
.gm-tree .gm-band{font-size:12px;font-weight:600;font-family:system-ui,sans-serif}
.gm-enter{animation:gm-in .45s ease-out both}
.gm-fade{animation:gm-out .7s ease-in both}
.gm-pop{animation:gm-pop .7s ease-out both}
@keyframes gm-in{from{opacity:0;transform:translateX(-10px)}to{opacity:1;transform:none}}
@keyframes gm-out{from{opacity:1}}
@keyframes gm-pop{0%{opacity:0}40%{opacity:1;filter:drop-shadow(0 0 6px #ffbf00)}100%{opacity:1}}
@media (prefers-reduced-motion: reduce){.gm-enter,.gm-fade,.gm-pop{animation:none}}
"""


def visible(piece: str) -> str:
    """Token text with whitespace made visible: '·' for a space, '↵' for a newline."""
    text = piece.translate(_VISIBLE)
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text) or "∅"


def short(piece: str, limit: int = LABEL_CHARS) -> str:
    text = visible(piece[: limit + 1])  # a piece may be long: only what is shown is made visible
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tip_text(piece: str) -> str:
    """A token's text as a hover tip quotes it: visible, and cut at TIP_CHARS (one tip per node)."""
    return short(piece, TIP_CHARS)


def piece_of(pieces: Mapping[int, str], token: int) -> str:
    return pieces.get(token, f"#{token}")


# -- layout ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    row: tuple[int, ...]  # per node; row 0 is the target's lane (the bonus token), drafts start at row 1
    rows: int


BONUS_ROW = 0  # a lane of its own, the same at every stage, so an empty slot never hints at the verdict


def layout(tree: DraftTree) -> Layout:
    """Rows in depth-first order, best child first; a node shares the row of its first child. Without recursion
    (a chain of any depth), in time linear in the tree."""
    rows = [-1] * len(tree)
    next_row = BONUS_ROW + 1
    stack = [(0, False)]  # (node, its children placed)
    while stack:
        node, placed = stack.pop()
        kids = tree.children[node]
        if not placed:
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(kids))  # the best child is placed first
        elif kids:
            rows[node] = rows[kids[0]]
        else:
            rows[node], next_row = next_row, next_row + 1
    return Layout(tuple(rows), next_row)


def node_status(tree: DraftTree, accepted: tuple[int, ...], cut: tuple[int, ...] = ()) -> list[str]:
    """Per node after verification: accepted (and in the text), ended (accepted, but after the end of the text:
    not kept, committed.py), rejected (its parent was accepted, it was not) or unreached."""
    on_path, after = set(accepted), set(cut)
    return ["accepted" if i in on_path else "ended" if i in after
            else "rejected" if tree.parents[i] in on_path else "unreached" for i in range(len(tree))]


def verdict_status(record: StepRecord) -> list[str]:
    """node_status() of a verified step, from what it committed."""
    got = committed(record)
    return node_status(record.tree, (0, *got.nodes), got.cut)


# -- hover text --------------------------------------------------------------------------------
def _pct(p: float) -> str:
    return f"{100 * p:.1f}%" if p >= 0.001 else f"{100 * p:.2g}%"


def node_tip(record: StepRecord, node: int, pieces: Mapping[int, str], verified: bool,
             status: list[str] | None = None) -> str:
    """What hovering a node tells: who drafted it and how sure it was; after verification, the target's view.
    `status`: node_status() of the tree, computed once per tree by the caller (else here)."""
    tree, v = record.tree, record.verdict
    tok = tree.tokens[node]
    lines = [f"{tip_text(piece_of(pieces, tok))!r}  (token {tok})"]
    if node == 0:
        lines.append("root: the last token already in the text; the draft continues from here")
        return "\n".join(lines)
    lk = look(tree.proposer[node])
    lines += [f"drafted by {lk.tag}: {lk.name}, depth {tree.depth[node]}",
              f"draft probability {_pct(math.exp(tree.logprob[node]))} given its parent; "
              f"path probability {_pct(math.exp(tree.score[node]))}"]
    if verified and v is not None:
        state = (status or verdict_status(record))[node]
        if state != "unreached":  # the target only checked the children of the accepted path
            wanted = tip_text(piece_of(pieces, v.target_token[tree.parents[node]]))
            prob = v.target_prob[node] if node < len(v.target_prob) else math.nan  # () when not traced
            said = f"{_pct(prob)} for this token; " if math.isfinite(prob) else ""
            lines.append(f"target: {said}its top choice here: {wanted!r}")
        lines.append({"accepted": "✓ accepted",
                      "rejected": "✗ rejected: the target did not take this token here",
                      "ended": "accepted, but after the end of the text: not kept",
                      "unreached": "not checked: an earlier token on its path was rejected"}[state])
    return "\n".join(lines)


# -- drawing -----------------------------------------------------------------------------------
def _xy(col: int, row: int) -> tuple[int, int]:
    return LEFT + col * COL_W, TOP + row * ROW_H


def _node_svg(col: int, row: int, proposer: str, label: str, tip: str, css: str, strong: bool) -> str:
    x, y = _xy(col, row)
    lk = look(proposer)
    stroke, width = ("#111", 3) if strong else (lk.colour, 2)
    dash = ' stroke-dasharray="4 3"' if "gm-rejected" in css else ""
    weight = ' font-weight="700"' if strong else ""
    return (f'<g class="{css}"><title>{escape(tip)}</title>'
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="5" fill="{lk.tint}" '
            f'stroke="{stroke}" stroke-width="{width}"{dash}/>'
            f'<text class="gm-tag" x="{x + 5}" y="{y + 14}" fill="{lk.colour}">{escape(lk.tag)}</text>'
            f'<text class="gm-tok" x="{x + 26}" y="{y + 15}"{weight}>'
            f'{escape(label)}</text></g>')


def _edge_svg(pcol: int, prow: int, col: int, row: int, css: str, strong: bool, dashed: bool = False) -> str:
    x0, y0 = _xy(pcol, prow)
    x1, y1 = _xy(col, row)
    x0, y0, y1 = x0 + NODE_W, y0 + NODE_H / 2, y1 + NODE_H / 2
    mid = (x0 + x1) / 2
    stroke, width = ("#111", 3.5) if strong else ("#9a9a9a", 1.3)
    dash = ' stroke-dasharray="5 4"' if dashed else ""
    return (f'<path class="{css}" d="M{x0},{y0} C{mid},{y0} {mid},{y1} {x1},{y1}" fill="none" '
            f'stroke="{stroke}" stroke-width="{width}"{dash}/>')


def _columns(tree: DraftTree) -> dict[int, int]:
    """A node of each depth's column (one proposer, and so one phase, per depth in both drafting modes)."""
    return {tree.depth[i]: i for i in range(len(tree) - 1, -1, -1)}


_BANDS = ((False, "transformer: step by step", "#eef5fb", "#0b4f80"),
          (True, "MLP heads: all at once, in one pass", "#fdf3ea", "#8a3b00"))
LANE_FILL = "#efefef"  # the target's lane: opaque, over the bands (its ★ belongs to no drafting phase)


def _headers(tree: DraftTree, cols: int, height: int) -> str:
    """Column titles, and two shaded bands: what the transformer drafts step by step and what the MLP heads draft
    at once."""
    by_depth = _columns(tree)
    parts = []
    for parallel, title, fill, ink in _BANDS:
        depths = [d for d, i in by_depth.items() if d > 0 and (tree.phase[i] == PARALLEL) == parallel]
        if depths:
            x0, _ = _xy(min(depths), 0)
            x1, _ = _xy(max(depths), 0)
            parts.append(f'<rect x="{x0 - 8}" y="2" width="{x1 - x0 + NODE_W + 16}" height="{height - 4}" '
                         f'rx="8" fill="{fill}"/><text class="gm-band" x="{x0}" y="17" fill="{ink}">{title}</text>')
    for col in range(cols):
        x, _ = _xy(col, 0)
        name = "root" if col == 0 else (f"{look(tree.proposer[by_depth[col]]).tag} · depth {col}"
                                        if col in by_depth else "")
        parts.append(f'<text class="gm-head" x="{x + 2}" y="38">{escape(name)}</text>')
    return "".join(parts)


def _visible_nodes(tree: DraftTree, stage: str, order: tuple[str, ...]) -> tuple[list[int], set[int]]:
    """Nodes shown at `stage`, and those that appear at this very stage (they get the entry animation)."""
    place = {name: k for k, name in enumerate(order)}
    at = place.get(stage, len(order))
    shown, fresh = [], set()
    for i in range(len(tree)):
        idx = place.get(tree.phase[i], -1)  # the root (and any unknown phase) is always shown
        if idx <= at:
            shown.append(i)
            if idx == at:
                fresh.add(i)
    return shown, fresh


def _node_css(i: int, status: list[str] | None, fresh: set[int], stage: str) -> str:
    css = ["gm-node"]
    if i in fresh:
        css.append("gm-enter")
    if status is not None and i:
        css.append(f"gm-{status[i]}")
        if status[i] != "accepted" and stage == VERIFIED:
            css.append("gm-fade")  # fades only once, when the verdict arrives
    return " ".join(css)


_OPACITY = {"rejected": 0.3, "unreached": 0.16, "ended": 0.3}


def tree_svg(record: StepRecord, pieces: Mapping[int, str], stage: str = COMMITTED) -> str:
    """HTML (a scrolling div around an SVG) of the step's tree as it looks at `stage`."""
    if record.tree is None or record.verdict is None:
        return single_step_svg(record, pieces)
    tree, v = record.tree, record.verdict
    order = stages(record)
    verified = stage in (VERIFIED, COMMITTED)
    lay = layout(tree)
    status = verdict_status(record) if verified else None
    shown, fresh = _visible_nodes(tree, stage, order)
    cols = max(tree.depth) + 2  # room for a bonus after the deepest node, at every stage: the width gives nothing away
    width, height = LEFT + cols * COL_W, TOP + lay.rows * ROW_H + 6
    lane = (f'<rect x="0" y="{TOP - 2}" width="{width}" height="{ROW_H}" fill="{LANE_FILL}"/>'
            f'<text class="gm-head" x="{LEFT + 2}" y="{TOP + 13}" font-style="italic">target\u2019s own ★</text>')
    body = [_headers(tree, cols, height), lane]
    for i in shown[1:]:
        p = tree.parents[i]
        strong = bool(status) and status[i] == "accepted"
        css = _node_css(i, status, fresh, stage)
        body.append(f'<g opacity="{_OPACITY.get(status[i], 1) if status else 1}">'
                    + _edge_svg(tree.depth[p], lay.row[p], tree.depth[i], lay.row[i],
                                css.replace("gm-node", "gm-edge"), strong) + "</g>")
    for i in shown:
        css = _node_css(i, status, fresh, stage)
        strong = bool(status) and status[i] == "accepted" and i > 0
        label = short(piece_of(pieces, tree.tokens[i]))
        body.append(f'<g opacity="{_OPACITY.get(status[i], 1) if status and i else 1}">'
                    + _node_svg(tree.depth[i], lay.row[i], tree.proposer[i], label,
                                node_tip(record, i, pieces, verified, status), css, strong) + "</g>")
    if not verified:
        body.append(_lane_hint())
    elif committed(record).bonus:
        body.append(_bonus_svg(record, pieces, lay, stage))
    else:
        body.append(_lane_hint(f"the text ended at {visible(piece_of(pieces, record.new_token_ids[-1]))}: "
                               "no token of the target\u2019s own follows"))
    return _wrap(body, width, height, "draft tree")


def _bonus_svg(record: StepRecord, pieces: Mapping[int, str], lay: Layout, stage: str) -> str:
    """The target's own token, in its lane, one column right of the last accepted node."""
    tree, v = record.tree, record.verdict
    last = v.accepted[-1]
    col = tree.depth[last] + 1
    css = "gm-node gm-bonus" + (" gm-pop" if stage == VERIFIED else "")
    tip = (f"{tip_text(piece_of(pieces, v.bonus))!r}  (token {v.bonus})\nthe target's own next token after the "
           f"accepted path: every step gains at least this one token")
    return (_edge_svg(tree.depth[last], lay.row[last], col, BONUS_ROW, css.replace("gm-node", "gm-edge"), True,
                      dashed=True)
            + _node_svg(col, BONUS_ROW, TARGET, "★" + short(piece_of(pieces, v.bonus), LABEL_CHARS - 1), tip, css,
                        True))


def _lane_hint(words: str = "target\u2019s own token (★) will appear in this row after verification") -> str:
    """Before the verdict, the empty lane says what will appear in it (after it, why nothing did)."""
    x, y = _xy(1, BONUS_ROW)
    return f'<text class="gm-head" x="{x + 2}" y="{y + 14}" font-style="italic">{escape(words)}</text>'



def single_step_svg(record: StepRecord, pieces: Mapping[int, str]) -> str:
    """A step without a draft (the prefill, or plain decoding): context -> the target's one token."""
    token = record.new_token_ids[0] if record.new_token_ids else None
    what = "prompt" if record.kind == PREFILL else "context"
    heads = ("the prompt" if record.kind == PREFILL else "the text so far", "the target's token")
    body = [f'<text class="gm-head" x="{_xy(col, 0)[0] + 2}" y="38">{escape(h)}</text>' for col, h in enumerate(heads)]
    body.append(_node_svg(0, 0, "root", what, f"{heads[0]}: the target reads it in one pass", "gm-node", False))
    if token is not None:
        tip = f"{tip_text(piece_of(pieces, token))!r}  (token {token})\nthe target's own token: one pass, one token"
        body += [_edge_svg(0, 0, 1, 0, "gm-edge", True),
                 _node_svg(1, 0, TARGET, "★" + short(piece_of(pieces, token), LABEL_CHARS - 1), tip,
                           "gm-node gm-enter", True)]
    return _wrap(body, LEFT + 3 * COL_W, TOP + ROW_H, "one target step")  # room for the second title


def _wrap(body: list[str], width: int, height: int, label: str) -> str:
    return (f'<style>{CSS}</style><div class="gm-tree"><svg xmlns="http://www.w3.org/2000/svg" role="img" '
            f'aria-label="{label}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            + "".join(body) + "</svg></div>")


def legend_items(proposers) -> list[str]:
    """Proposer names in legend order (serial steps, MLP heads, then the target)."""
    order = list(LOOKS)
    return sorted(set(proposers), key=lambda p: order.index(p) if p in order else len(order))

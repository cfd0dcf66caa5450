"""The target's check, node by node, for the step on screen: what the drafter thought of each checked token, what
the target thinks, and the verdict. When sampling (temperature > 0): the acceptance probability each token was
drawn against, the draw, and, after a rejection, the residual distribution the next token came from."""
from __future__ import annotations

import math
from html import escape
from typing import Mapping

from gumiho_core import StepRecord

from ..stages import COMMITTED, VERIFIED
from .committed import committed
from .palette import look
from .tree_view import piece_of, verdict_status, visible

MAX_ROWS = 12  # checked nodes listed per step; the rest are counted
CSS = """
.gm-check{font-size:14px;color:#111;border:1px solid #ddd;border-radius:8px;padding:6px 10px;background:#fff}
.gm-check table{border-collapse:collapse;margin:4px 0}
.gm-check th,.gm-check td{padding:2px 10px 2px 0;text-align:right;font-variant-numeric:tabular-nums}
.gm-check th{font-weight:600;color:#333;border-bottom:1px solid #ccc}
.gm-check td.tok{text-align:left;font-family:ui-monospace,Menlo,Consolas,monospace}
.gm-check .tag{display:inline-block;min-width:22px;text-align:center;font-weight:700;font-size:11px;border:2px solid;
  border-radius:4px;margin-right:4px;font-family:ui-monospace,monospace}
.gm-check .yes{color:#0b6e2f;font-weight:700}.gm-check .no{color:#8a1c00;font-weight:700}
.gm-check .note{color:#333;margin-top:4px}
"""


def _pct(p: float) -> str:
    return "–" if math.isnan(p) else f"{100 * p:.1f}%" if p >= 0.001 else f"{100 * p:.2g}%"


def _tok(pieces: Mapping[int, str], token: int) -> str:
    return "“" + escape(visible(piece_of(pieces, token))) + "”"


def _checked(record: StepRecord, greedy: bool) -> list[int]:
    """The nodes the target checked, in the order it checked them: the children of each accepted node (when
    sampling: those tried before one was accepted)."""
    tree, v = record.tree, record.verdict
    trace = v.sampling
    kids = [c for node in v.accepted for c in tree.children[node]]
    return kids if greedy or trace is None else [c for c in kids if not math.isnan(trace.accept_prob[c])]


def _row(record: StepRecord, node: int, pieces, greedy: bool) -> str:
    tree, v = record.tree, record.verdict
    lk = look(tree.proposer[node])
    state = verdict_status(record)[node]
    verdict = {"accepted": '<span class="yes">✓ accepted</span>',
               "ended": '<span class="yes">✓ accepted</span>, after the end of the text: not kept'}.get(
        state, '<span class="no">✗ rejected</span>')
    target_p = v.target_prob[node] if len(v.target_prob) == len(tree) else math.nan
    cells = [f'<td class="tok"><span class="tag" style="border-color:{lk.colour};color:{lk.colour}">'
             f'{escape(lk.tag)}</span>{_tok(pieces, tree.tokens[node])}</td>', f"<td>{tree.depth[node]}</td>",
             f"<td>{_pct(math.exp(tree.logprob[node]))}</td>", f"<td>{_pct(target_p)}</td>"]
    if greedy:
        cells.append(f'<td class="tok">{_tok(pieces, v.target_token[tree.parents[node]])}</td>')
    else:
        cells += [f"<td>{_pct(v.sampling.accept_prob[node])}</td>", f"<td>{v.sampling.draw[node]:.3f}</td>"]
    return "<tr>" + "".join(cells) + f"<td>{verdict}</td></tr>"


def _bonus_note(record: StepRecord, pieces, greedy: bool) -> str:
    tree, v = record.tree, record.verdict
    if not committed(record).bonus:
        return (f"The text ended at {_tok(pieces, record.new_token_ids[-1])}: the target's own next token "
                f"({_tok(pieces, v.bonus)}) is not kept.")
    last = v.accepted[-1]
    after = _tok(pieces, tree.tokens[last])
    if greedy:
        return f"Bonus ★ {_tok(pieces, v.bonus)}: the target's top choice after {after}."
    top = ", ".join(f"{_tok(pieces, t)} {_pct(p)}" for t, p in v.sampling.bonus_from)
    if tree.children[last]:
        return (f"Every proposal after {after} was rejected, so the next token comes from the <b>residual "
                f"distribution</b>: the target's, without the rejected tokens, renormalised. Its top entries: {top}. "
                f"The draw gave ★ {_tok(pieces, v.bonus)}.")
    return (f"The accepted path ends at a leaf, so the next token is drawn from the target's own distribution "
            f"after {after}: {top}. The draw gave ★ {_tok(pieces, v.bonus)}.")


def _header(greedy: bool) -> str:
    last = ["target's top choice"] if greedy else ["accept with", "draw u"]
    return "<tr>" + "".join(f"<th>{h}</th>" for h in ["token", "depth", "draft p", "target p", *last, ""]) + "</tr>"


def sampling_html(record: StepRecord | None, stage: str, pieces: Mapping[int, str], greedy: bool) -> str:
    """The check of the step on screen, once its verdict is shown; a line saying what will appear before."""
    if record is None or record.tree is None or record.verdict is None or stage not in (VERIFIED, COMMITTED):
        rule = ("a drafted token is accepted when it is the target's top choice" if greedy else "each drafted token "
                "is accepted with probability p(x) / (what is left of p), drawn at random")
        return (f'<style>{CSS}</style><div class="gm-check">The target\'s check appears here after verification: '
                f"{rule}.</div>")
    if not greedy and record.verdict.sampling is None:
        return (f'<style>{CSS}</style><div class="gm-check">This step was sampled; its draws are not kept in run '
                f'files.</div>')
    nodes = _checked(record, greedy)
    rows = "".join(_row(record, n, pieces, greedy) for n in nodes[:MAX_ROWS])
    more = f'<div class="note">… and {len(nodes) - MAX_ROWS} more checked.</div>' if len(nodes) > MAX_ROWS else ""
    rule = ("Greedy (temperature 0): a token is accepted when it is the target's top choice." if greedy else
            "Sampling: a token is accepted when the draw u falls below its acceptance probability, p(x) divided by "
            "what is left of the target's distribution after the earlier rejections; this keeps the output "
            "distributed exactly as the target's.")
    return (f'<style>{CSS}</style><div class="gm-check"><b>The target\'s check, node by node.</b> {rule}'
            f"<table>{_header(greedy)}{rows}</table>{more}<div class=\"note\">{_bonus_note(record, pieces, greedy)}"
            f"</div></div>")

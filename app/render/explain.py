"""Words around the pictures: the caption of each animation stage, the big numbers, and "How it works"
told with the numbers of the run on screen."""
from __future__ import annotations

from html import escape
from typing import Mapping

from gumiho_core import AR, FULL_PRECISION, HALF_PRECISION, PARALLEL, PREFILL, StepRecord

from ..stages import COMMITTED, VERIFIED
from ..state import Run
from .mdtext import md_text
from .palette import look
from .stats import Stats
from .tree_view import piece_of, visible

CSS = """
.gm-cap{font-size:16px;line-height:1.45;padding:8px 12px;border-left:5px solid #0072B2;background:#f5f9fc;
  border-radius:4px;color:#111;min-height:2.9em}
.gm-cap b{font-weight:650}
.gm-nums{display:flex;flex-wrap:wrap;gap:10px}
.gm-num{flex:1 1 150px;border:1px solid #ddd;border-radius:8px;padding:8px 12px;background:#fff;color:#111}
.gm-num .v{font-size:30px;font-weight:700;line-height:1.15}
.gm-num .k{font-size:13px;color:#444}
.gm-sub{font-size:13px;color:#444;margin-top:4px}
"""


def step_caption_placeholder() -> str:
    return ('<div class="gm-cap" style="font-size:16px;padding:8px 12px;border-left:5px solid #0072B2;'
            'background:#f5f9fc">Each step: the serial head drafts tokens 1 and 2, the MLP heads draft tokens '
            '3–7 at once, the target verifies the whole tree in one pass, and the accepted tokens join the '
            'text.</div>')


def _quote(pieces: Mapping[int, str], tokens) -> str:
    return "“" + escape("".join(visible(piece_of(pieces, t)) for t in tokens)) + "”"


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.0f} ms"


def _phase_sentence(record: StepRecord, name: str) -> str:
    phase = next(p for p in record.phases if p.name == name)
    kept = record.tree.phase.count(name)
    if name == PARALLEL:
        first, last = min(phase.depths), max(phase.depths)
        return (f"<b>MLP heads, all at once:</b> {len(phase.depths)} small networks each guess one later position "
                f"(tokens {first}–{last}) from the same input, none waiting for another's guess, for every path that "
                f"could still make the tree: {phase.candidates} candidates in {_ms(phase.seconds)}; {kept} of them "
                "made the final tree.")
    depth = phase.depths[0]
    run_on = "the target's last features" if depth == 1 else f"each of its best depth-{depth - 1} guesses"
    return (f"<b>Serial head, step {depth}:</b> the 2-layer transformer runs on {run_on} and proposes "
            f"{phase.candidates} candidates for token {depth} in {_ms(phase.seconds)}; {kept} made the final tree.")


def step_caption(record: StepRecord, stage: str, pieces: Mapping[int, str], prompt_tokens: int) -> str:
    """One or two sentences saying what the picture shows at this stage of this step."""
    if record.kind == PREFILL:
        text = (f"<b>Step 0, prefill:</b> the target reads the prompt ({prompt_tokens} tokens) in one pass and "
                f"writes its first token {_quote(pieces, record.new_token_ids)} ({_ms(record.seconds)}).")
    elif record.tree is None:
        text = (f"<b>Step {record.index}, plain decoding:</b> one target pass, one token: "
                f"{_quote(pieces, record.new_token_ids)} ({_ms(record.seconds)}).")
    elif stage == VERIFIED:
        text = _verdict_sentence(record, pieces)
    elif stage == COMMITTED:
        n = len(record.new_token_ids)
        text = (f"<b>Step {record.index}, commit:</b> {_plural(n, 'token')} {_quote(pieces, record.new_token_ids)} "
                f"{'joins' if n == 1 else 'join'} the text. Draft {_ms(record.draft_s)} + verify "
                f"{_ms(record.verify_s)} + commit {_ms(record.commit_s)}.")
    else:
        text = f"<b>Step {record.index}.</b> " + _phase_sentence(record, stage)
    return f'<style>{CSS}</style><div class="gm-cap" aria-live="polite">{text}</div>'


def _verdict_sentence(record: StepRecord, pieces: Mapping[int, str]) -> str:
    tree, v = record.tree, record.verdict
    accepted = [tree.tokens[i] for i in v.accepted[1:]]
    kept = (f"accepts {_plural(len(accepted), 'drafted token')} {_quote(pieces, accepted)}" if accepted
            else "accepts none of the drafted tokens")
    return (f"<b>Step {record.index}, verification:</b> the target checks all {len(tree)} nodes in one pass "
            f"({_ms(record.verify_s)}), {kept}, and adds its own next token {_quote(pieces, [v.bonus])} (★). "
            f"Faded nodes were rejected or never reached.")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _num(value: str, key: str) -> str:
    return f'<div class="gm-num"><div class="v">{value}</div><div class="k">{key}</div></div>'


def numbers_html(stats: Stats | None) -> str:
    """The big numbers: speed of the run, of plain decoding, the speedup, and tokens per target pass."""
    if stats is None:
        cards = [_num("–", "tokens/s"), _num("–", "plain decoding tokens/s"), _num("–", "speedup"),
                 _num("–", "tokens per target pass")]
        return f'<style>{CSS}</style><div class="gm-nums">{"".join(cards)}</div>'
    name = "plain decoding" if stats.method == AR else stats.method
    base = f"{stats.base_tokens_per_s:.1f}" if stats.base_tokens_per_s else "–"
    speed = f"{stats.speedup:.2f}×" if stats.speedup else "–"
    cards = [_num(f"{stats.tokens_per_s:.1f}", f"tokens/s, {escape(name)}"),
             _num(base, "tokens/s, plain decoding (same prompt, measured here)"),
             _num(speed, "speedup over plain decoding"),
             _num(f"{stats.mean_accept_len:.2f}" if stats.steps else "–",
                  "tokens per target pass (mean accepted length)")]
    sub = (f"{_plural(stats.tokens, 'token')} in {_plural(stats.steps, 'step')} after the prefill; "
           f"{stats.seconds:.2f} s of compute (animation time not counted).")
    return f'<style>{CSS}</style><div class="gm-nums">{"".join(cards)}</div><div class="gm-sub">{sub}</div>'


def _reach_sum(stats: Stats) -> str:
    """'1 + 0.62 + 0.41 + ...': tokens per pass as the sum of the chances of reaching each depth."""
    terms = [a / stats.steps for a in stats.depth_accepted if a] if stats.steps else []
    return " + ".join(["1"] + [f"{t:.2f}" for t in terms]) + f" = {1 + sum(terms):.2f}"


def how_it_works_md(run: Run | None, stats: Stats | None, auto: str | None = None) -> str:
    """The idea of speculative decoding and of Gumiho, with this run's numbers where there is a run.
    `auto` (markdown) says what the auto tree is on this device; it is shown while there is no run."""
    parts = [_INTRO]
    if run is not None and stats is not None and stats.steps:
        parts.append(_this_run(run, stats))
    parts.append(_GUMIHO)
    if run is not None and stats is not None and run.settings.method != AR and stats.steps:
        parts.append(_depth_story(run, stats))
    tree = _tree_story(run) if run is not None else (f"**The draft tree.** {auto}" if auto else "")
    if tree:
        parts.append(tree)
    return "\n\n".join(parts)


_TREE_SIZE = ("A bigger tree finds more tokens to accept but costs more to verify. On a GPU, verifying 64 tokens "
              "costs about what verifying one does; on a CPU it costs several times more, so the best size depends "
              "on the device: that is what the *auto* preset measures.")


def _tree_story(run: Run) -> str:
    s = run.settings
    if s.method == AR or s.tree is None:
        return ""
    t = s.tree
    source = f" ({md_text(s.tree_source.rstrip('.'))})" if s.tree_source else ""  # from a run file, maybe
    return (f"**The draft tree.** Each step of this run verified up to {t.total_tokens} nodes (top_k {t.top_k}, "
            f"mlp_topk {t.mlp_topk}, pruning {t.pruning}, depth {t.depth}): preset *{md_text(s.preset)}*{source}. "
            f"{_TREE_SIZE}")


_INTRO = (
    "**Speculative decoding.** A language model (the *target*) normally writes one token per forward pass. "
    "Speculative decoding lets a small *drafter* guess several tokens ahead, as a tree of alternatives. The "
    "target then checks the whole tree in **one** pass, keeps the longest path that matches what it would have "
    "written itself, and adds one token of its own (the *bonus*, ★). So every pass yields at least one token, "
    "and the text is exactly the target's own: token for token at temperature 0, the same distribution when "
    "sampling.")

_GUMIHO = (
    "**Gumiho's idea.** A draft token only counts if every token before it on its path was accepted, so tokens "
    "per pass = 1 + P(reach depth 1) + P(reach depth 2) + …: an error at depth 1 throws away everything behind "
    "it, while an error at depth 6 costs little. Gumiho spends its compute accordingly: a small 2-layer "
    "*transformer* drafts depths 1 and 2 one after the other (serial, **S1**, **S2**: accurate where it matters "
    "most), and five cheap *MLP heads* draft depths 3–7 all at the same time (parallel, **M1**–**M5**: fast "
    "where a miss is cheap). Method *serial* runs the transformer at every depth instead (EAGLE-2 style), for "
    "comparison.")


def _this_run(run: Run, stats: Stats) -> str:
    if run.settings.method == AR:
        passes = stats.steps + 1
        return (f"**This run** is plain decoding: {passes} target pass{'es' if passes != 1 else ''} for "
                f"{_plural(stats.tokens, 'token')}, "
                f"{stats.tokens_per_s:.1f} tokens/s. Run *gumiho* on the same prompt to compare.")
    text = (f"**This run.** {stats.steps} target passes after the prefill produced {stats.tokens - 1} tokens: "
            f"**{stats.mean_accept_len:.2f} tokens per pass** instead of 1. A pass costs more than a plain one: it "
            f"drafts ({stats.draft_ms:.0f} ms) and verifies {stats.tree_nodes:.0f} tree nodes at once "
            f"({stats.verify_ms:.0f} ms)")
    if stats.base_step_ms:
        text += f", against {stats.base_step_ms:.0f} ms for one plain step here"
    if stats.speedup:
        verdict = "faster" if stats.speedup >= 1 else "slower: the drafts are not accepted often enough to pay"
        text += f". Net: **{stats.speedup:.2f}×** {verdict}"
    text += "."
    text += _exactness(run, stats)
    if any("untrained" in n for n in run.notes):
        text += (" *The drafter here is untrained, so it almost never guesses right: expect about 1 token per "
                 "pass and a slowdown. The output is still exact.*")
    return text


_ROUNDING = ("a tree pass and a one-token pass round differently there, so where the target's two best tokens "
             "are that close either can come out, and the texts go on differently from that token")
_SEE_README = "see *Exactness* in the README"


def _exactness(run: Run, stats: Stats) -> str:
    """Greedy runs: identical to plain decoding so far, or where they part and what that means in the target's
    dtype. In fp32 a difference is a bug; in bf16/fp16 it can be an honest rounding near-tie (the renderer has
    no model to tell which: gumiho_core.exactness does, from the weights)."""
    if stats.same_as_plain is None:
        return ""
    if stats.same_as_plain:
        return " Exactness check: the tokens are **identical** to plain decoding's so far ✓."
    at = f"from new token {stats.differs_at + 1} on"
    if run.dtype in FULL_PRECISION:
        return (f" Exactness check: the tokens DIFFER from plain decoding's {at} ✗. The target runs in "
                f"{run.dtype}, where they must be identical: this is a bug, please report it.")
    if run.dtype in HALF_PRECISION:
        return (f" Exactness check: the tokens part from plain decoding's {at}. The target runs in {run.dtype}: "
                f"{_ROUNDING}. That is half-precision arithmetic, not a lost token ({_SEE_README}).")
    return (f" Exactness check: the tokens part from plain decoding's {at}. This run file does not say the "
            f"target's dtype: in fp32 that is a bug (please report it); in bf16 or fp16 {_ROUNDING} "
            f"({_SEE_README}).")


def _depth_story(run: Run, stats: Stats) -> str:
    rates = [(d + 1, r) for d, r in enumerate(stats.depth_rates) if r is not None and stats.depth_reached[d]]
    if not rates:
        return ""
    shown = ", ".join(f"depth {d}: {100 * r:.0f}%" for d, r in rates[:4])
    return (f"**On this run**, once the path had got that far, the drafted token was right at {shown}. "
            f"Tokens per pass = {_reach_sum(stats)}: the first terms carry most of the gain, which is why the "
            f"first two depths get the transformer ({escape(look('serial1').tag)}, {escape(look('serial2').tag)}).")

"""Words around the pictures: the caption of each animation stage, the big numbers, and "How it works" told with
the numbers of the run on screen (stats.numbers: the same numbers every panel shows)."""
from __future__ import annotations

from html import escape
from typing import Mapping

from gumiho_core import (AR, ARCHITECTURES, DRAFTING_METHODS, EAGLE, FULL_PRECISION, GUMIHO, GUMIHO_SERIAL,
                         HALF_PRECISION, MEDUSA, PARALLEL, PREFILL, StepRecord, method as method_info)

from ..stages import COMMITTED, VERIFIED
from ..state import Run
from .committed import committed
from .mdtext import md_text, plain_words
from .palette import method_label
from .phases import is_drafting, part_look, part_order
from .stats import LaneNumbers, Numbers
from .status import STOP_WORDS, verify_cost
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
FEW_MS = 10  # below this, a part's milliseconds get a decimal
# What drafts each token, in plain words: the idle caption and "How it works" say it the same way.
ARCHITECTURE = {
    GUMIHO: "a 2-layer transformer drafts tokens 1 and 2 one after the other (S1, S2), then five MLP heads draft "
            "tokens 3–7 all at once, in one pass (M1–M5)",
    EAGLE: "a 1-layer transformer drafts every token one after the other (S1, S2, …), each step waiting for the "
           "one before",
    MEDUSA: "seven MLP heads read the target's last hidden state and draft tokens 1–7 all at once, in one pass "
            "(M1–M7): no serial step at all",
    GUMIHO_SERIAL: "Gumiho's own 2-layer transformer drafts every token one after the other (S1, S2, …): more "
                   "accurate than its MLP heads, slower to draft",
    AR: "no drafter: the target writes one token per pass",
}


def step_caption_placeholder(method: str = GUMIHO) -> str:
    """The caption before any step: what a step of the chosen method does."""
    if method == AR:
        text = ("Each step of plain decoding: the target writes one token. The race below runs the drafting "
                "methods on the same prompt beside it.")
    else:
        text = (f"Each step of {escape(method_label(method))}: {ARCHITECTURE[method]}; the target verifies the whole "
                "tree in one pass, and the accepted tokens join the text.")
    return (f'<div class="gm-cap" style="font-size:16px;padding:8px 12px;border-left:5px solid #0072B2;'
            f'background:#f5f9fc">{text}</div>')


def quote(pieces: Mapping[int, str], tokens) -> str:
    return "“" + escape("".join(visible(piece_of(pieces, t)) for t in tokens)) + "”"


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.0f} ms"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


def _layers(method: str) -> str:
    return f"{ARCHITECTURES[method_info(method).drafter]['num_layers']}-layer transformer"


def _phase_sentence(record: StepRecord, name: str, method: str) -> str:
    phase = next(p for p in record.phases if p.name == name)
    kept = record.tree.phase.count(name)
    if name == PARALLEL:
        first, last = min(phase.depths), max(phase.depths)
        reads = "the target's last hidden state" if first == 1 else "the transformer's last output"
        return (f"<b>MLP heads, all at once:</b> {len(phase.depths)} small networks each guess one position (tokens "
                f"{first}–{last}) from {reads}, in one pass, none waiting for another's guess, for every path that "
                f"could still make the tree: {phase.candidates} candidates in {_ms(phase.seconds)}; {kept} of them "
                "made the final tree.")
    depth = phase.depths[0]
    run_on = "the target's last features" if depth == 1 else f"each of its best depth-{depth - 1} guesses"
    return (f"<b>Transformer, step {depth}:</b> the {_layers(method)} runs on {run_on} and proposes "
            f"{phase.candidates} candidates for token {depth} in {_ms(phase.seconds)}; {kept} made the final tree.")


def step_caption(record: StepRecord, stage: str, pieces: Mapping[int, str], prompt_tokens: int,
                 method: str = GUMIHO) -> str:
    """One or two sentences saying what the picture shows at this stage of this step."""
    if record.kind == PREFILL:
        text = (f"<b>Step 0, prefill:</b> the target reads the prompt ({prompt_tokens} tokens) in one pass and "
                f"writes its first token {quote(pieces, record.new_token_ids)} ({_ms(record.seconds)}).")
    elif record.tree is None:
        text = (f"<b>Step {record.index}, plain decoding:</b> one target pass, one token: "
                f"{quote(pieces, record.new_token_ids)} ({_ms(record.seconds)}).")
    elif stage == VERIFIED:
        text = _verdict_sentence(record, pieces)
    elif stage == COMMITTED:
        n = len(record.new_token_ids)
        text = (f"<b>Step {record.index}, commit:</b> {plural(n, 'token')} {quote(pieces, record.new_token_ids)} "
                f"{'joins' if n == 1 else 'join'} the text. Draft {_ms(record.draft_s)} + verify "
                f"{_ms(record.verify_s)} + commit {_ms(record.commit_s)}.")
    else:
        text = f"<b>Step {record.index}.</b> " + _phase_sentence(record, stage, method)
    return f'<style>{CSS}</style><div class="gm-cap" aria-live="polite">{text}</div>'


def _verdict_sentence(record: StepRecord, pieces: Mapping[int, str]) -> str:
    tree, v, got = record.tree, record.verdict, committed(record)
    kept = [tree.tokens[i] for i in got.nodes]
    accepts = (f"accepts {plural(len(kept), 'drafted token')} {quote(pieces, kept)}" if kept
               else "accepts none of the drafted tokens")
    if got.bonus:
        tail = f", and adds its own next token {quote(pieces, [v.bonus])} (★)"
    else:
        after = (f"the accepted {quote(pieces, [tree.tokens[i] for i in got.cut])} after it and " if got.cut else "")
        tail = (f"; the text ends there ({STOP_WORDS.get(record.stop_reason, escape(str(record.stop_reason)))}), "
                f"so {after}the target's own next token are not kept")
    return (f"<b>Step {record.index}, verification:</b> the target checks all {len(tree)} nodes in one pass "
            f"({_ms(record.verify_s)}), {accepts}{tail}. Faded nodes were rejected, never reached, or came after "
            "the end of the text.")


def _num(value: str, key: str) -> str:
    return f'<div class="gm-num"><div class="v">{value}</div><div class="k">{key}</div></div>'


def numbers_html(tally: Numbers | None) -> str:
    """The big numbers of the run's own lane: its speed, plain decoding's, the speedup, and tokens per pass."""
    main = tally.main if tally is not None else None
    if main is None:
        cards = [_num("–", "tokens/s"), _num("–", "plain decoding tokens/s"), _num("–", "speedup"),
                 _num("–", "tokens per target pass")]
        return f'<style>{CSS}</style><div class="gm-nums">{"".join(cards)}</div>'
    plain = tally.plain
    base = f"{plain.tokens_per_s:.1f}" if plain is not None and plain.seconds else "–"
    speed = f"{main.speedup:.2f}×" if main.speedup is not None else "–"
    per_pass = f"{main.tokens_per_pass:.2f}" if main.steps else "–"
    cards = [_num(f"{main.tokens_per_s:.1f}", f"tokens/s, {escape(method_label(main.method))}"),
             _num(base, "tokens/s, plain decoding (same prompt, measured here)"),
             _num(speed, "speedup over plain decoding"),
             _num(per_pass, "tokens per target pass (mean accepted length)")]
    sub = (f"{plural(main.tokens, 'token')}: the prefill's first, then {main.tokens - 1} in "
           f"{plural(main.steps, 'pass')} after it; {main.seconds:.2f} s of compute (animation time not counted).")
    return f'<style>{CSS}</style><div class="gm-nums">{"".join(cards)}</div><div class="gm-sub">{sub}</div>'


def how_it_works_md(run: Run | None, tally: Numbers | None, tree_note: str | None = None) -> str:
    """The idea of speculative decoding and of Gumiho, with this run's numbers where there is a run.
    `tree_note` (markdown) says what the chosen tree is on this device; it is shown while there is no run."""
    main = tally.main if tally is not None else None
    parts = [_INTRO]
    if run is not None and main is not None and main.steps:
        parts.append(_this_run(run, tally))
    parts.append(_architectures(tally))
    formula = _formula(tally) if tally is not None else ""
    if formula:
        parts.append(formula)
    tree = _tree_story(run) if run is not None else (f"**The draft tree.** {tree_note}" if tree_note else "")
    if tree:
        parts.append(tree)
    return "\n\n".join(parts)


_INTRO = (
    "**Speculative decoding.** A language model (the *target*) normally writes one token per forward pass. "
    "Speculative decoding lets a small *drafter* guess several tokens ahead, as a tree of alternatives. The "
    "target then checks the whole tree in **one** pass, keeps the longest path that matches what it would have "
    "written itself, and adds one token of its own (★). So every pass yields at least one token, and the text is "
    "exactly the target's own: token for token at temperature 0, the same distribution when sampling.")


def _this_run(run: Run, tally: Numbers) -> str:
    main, plain = tally.main, tally.plain
    if main.method == AR:
        return (f"**This run** is plain decoding: {main.steps + 1} target passes for {plural(main.tokens, 'token')}, "
                f"{main.tokens_per_s:.1f} tokens/s; the drafting methods in the race are compared with it below.")
    text = (f"**This run** wrote {plural(main.tokens, 'token')}: the prefill's first, then {main.tokens - 1} in "
            f"{plural(main.steps, 'target pass')}: **{main.tokens_per_pass:.2f} tokens per pass** instead of 1. A "
            f"pass costs more than a plain one: it drafts ({main.draft_ms:.0f} ms) and verifies {main.nodes:.0f} "
            f"tree nodes at once ({main.verify_ms:.0f} ms)")
    if plain is not None and plain.steps:
        text += f", against {plain.step_ms:.0f} ms for one plain step here"
    if main.speedup is not None:
        verdict = "faster" if main.speedup >= 1 else "slower: the drafts are not accepted often enough to pay"
        text += f". Net: **{main.speedup:.2f}×** {verdict}"
    text += "." + _exactness(run, tally)
    if any("untrained" in n for n in run.notes):
        text += (" *Some heads here are untrained, so they almost never guess right: expect about 1 token per "
                 "pass and a slowdown from them. The output is still exact.*")
    return text


def _split(lane: LaneNumbers) -> str:
    """'S1 4 ms, S2 4 ms, M (all heads at once) 3 ms, choosing 1 ms': a pass's drafting, part by part."""
    keys = [k for k in part_order(lane.parts_ms) if is_drafting(k)]
    return ", ".join(f"{part_look(k).tag} {_few_ms(lane.parts_ms[k])}" for k in keys)


def _few_ms(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < FEW_MS else f"{ms:.0f} ms"


def _lane_line(method: str, tally: Numbers | None) -> str:
    lane = tally.lane(method) if tally is not None else None
    line = f"- *{method_label(method)}*: {ARCHITECTURE[method]}."
    if lane is None or not lane.steps:
        return line + (" Not in this race." if tally is not None and tally.lanes else "")
    speed = f"; **{lane.speedup:.2f}×** plain decoding" if lane.speedup is not None else ""
    return (line + f" In this run: **{lane.tokens_per_pass:.2f} tokens per pass**; drafting {lane.draft_ms:.0f} ms a "
            f"pass ({_split(lane)}){speed}.")


def _architectures(tally: Numbers | None) -> str:
    shown = [m for m in DRAFTING_METHODS if m != GUMIHO_SERIAL or tally is not None and tally.lane(m)]
    return ("**Three ways to draft.** " + "A serial step is accurate, since it sees the token drafted before it, but "
            "each one waits for the one before; parallel heads draft every position in one pass, but guess further "
            "from what they know.\n\n" + "\n".join(_lane_line(m, tally) for m in shown) + "\n\nGumiho puts the "
            "transformer where accuracy matters most, the first tokens (see *Why early tokens matter*), and the "
            "cheap heads where a miss costs little.")


def _formula(tally: Numbers) -> str:
    lane = next((n for n in [tally.main, *tally.drafting] if n is not None and n.drafts and n.steps), None)
    if lane is None:
        return ""
    terms = [a / lane.steps for a in lane.accepted if a]
    end = lane.without_bonus / lane.steps
    tail = (f" − {end:.2f} (the last pass ended the text before the target's own token)" if lane.without_bonus else "")
    total = 1 + sum(terms) - end
    return (f"**Tokens per pass, term by term** ({method_label(lane.method)}). A drafted token counts only if every "
            "token before it on its path was accepted, so tokens per pass = 1 (the target's own) + P(keep depth 1) + "
            f"P(keep depth 2) + …: on this run, " + " + ".join(["1"] + [f"{t:.2f}" for t in terms]) + tail
            + f" = **{total:.2f}**. The first terms carry most of the gain.")


def _tree_story(run: Run) -> str:
    s = run.settings
    t = s.tree
    lanes = ", ".join(method_label(m) for m in (s.method, *run.rivals) if m != AR)
    if not lanes:
        return ""
    source = f" ({md_text(plain_words(s.tree_source).rstrip('.'))})" if s.tree_source else ""  # from a file, maybe
    cost = verify_cost(run.verify_ratios, t.total_tokens)
    return (f"**The tree on screen.** Each step of this run verified up to {t.total_tokens} nodes, {t.depth} levels "
            f"deep (top_k {t.top_k}, mlp_topk {t.mlp_topk}, pruning {t.pruning}): preset *{md_text(s.preset)}*"
            f"{source}; every drafting lane of the race ({lanes}) drew its own tree of the same request. {cost}")


_ROUNDING = ("a tree pass and a one-token pass round differently there, so where the target's two best tokens "
             "are that close either can come out, and the texts go on differently from that token")
_SEE_EXACTNESS = "see *Exactness* in docs/method.md"


def _exactness(run: Run, tally: Numbers) -> str:
    """Greedy runs: identical to plain decoding so far, or where they part and what that means in the target's
    dtype. In fp32 a difference is a bug; in bf16/fp16 it can be an honest rounding near-tie (the renderer has
    no model to tell which: gumiho_core.exactness does, from the weights)."""
    if tally.same is None or not run.baseline_ids:
        return ""
    if tally.differs_at is None:
        return " Exactness check: the tokens are **identical** to plain decoding's so far ✓."
    at = f"from new token {tally.differs_at + 1} on"
    if run.dtype in FULL_PRECISION:
        return (f" Exactness check: the tokens DIFFER from plain decoding's {at} ✗. The target runs in "
                f"{run.dtype}, where they must be identical: this is a bug, please report it.")
    if run.dtype in HALF_PRECISION:
        return (f" Exactness check: the tokens part from plain decoding's {at}. The target runs in {run.dtype}: "
                f"{_ROUNDING}. That is half-precision arithmetic, not a lost token ({_SEE_EXACTNESS}).")
    return (f" Exactness check: the tokens part from plain decoding's {at}. This run file does not say the "
            f"target's dtype: in fp32 that is a bug (please report it); in bf16 or fp16 {_ROUNDING} "
            f"({_SEE_EXACTNESS}).")

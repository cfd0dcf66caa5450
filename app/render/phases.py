"""A step's time as the engine timed it: each drafting phase (S1, S2, ... one after another; the MLP heads all at
once), choosing the tree, the target's verification pass and the commit; a plain step is one target pass. One
look per part, shared by the race and the time-per-step chart: a colour of its own for each (a serial step's and
the MLP heads' are their proposers' colours, as in the tree)."""
from __future__ import annotations

from dataclasses import dataclass

from gumiho_core import MLP_HEAD, PARALLEL, PREFILL, StepRecord

from .palette import LOOKS, TARGET, look

VERIFY, COMMIT, SELECT, PREFILL_PART, PLAIN = "verify", "commit", "select", "prefill", "plain"


@dataclass(frozen=True)
class Part:
    key: str  # a drafting phase's name ("serial1", "parallel"), or VERIFY, COMMIT, SELECT, PREFILL_PART, PLAIN
    seconds: float


@dataclass(frozen=True)
class PartLook:
    label: str  # legend entry
    tag: str  # short, on blocks
    colour: str
    ink: str  # text drawn on the colour


_FIXED = {
    PREFILL_PART: PartLook("prefill: the target reads the prompt", "prefill", "#CAB2D6", "#111111"),
    SELECT: PartLook("choosing the tree from the candidates", "choose", "#F0E442", "#111111"),
    VERIFY: PartLook("verify: one target pass over the tree", "verify", LOOKS[TARGET].colour, "#ffffff"),
    COMMIT: PartLook("commit: keep the accepted path", "commit", "#B15928", "#ffffff"),
    PLAIN: PartLook("plain step: one target pass, one token", "plain", "#9a9a9a", "#111111"),
}
DRAFTING = "drafting"  # the parts that draft: every phase, and choosing the tree


def part_look(key: str) -> PartLook:
    if key in _FIXED:
        return _FIXED[key]
    if key == PARALLEL:
        return PartLook("M: the MLP heads, all at once (one pass)", "M", look(f"{MLP_HEAD}1").colour, "#ffffff")
    lk = look(key)
    return PartLook(f"{lk.tag}: transformer, step {lk.tag[1:]}", lk.tag, lk.colour, "#ffffff")


def is_drafting(key: str) -> bool:
    return key not in _FIXED or key == SELECT


def part_order(keys) -> list[str]:
    """Legend order: prefill, the serial steps, the MLP heads, choosing, verification, commit, the plain step."""
    rank = {PREFILL_PART: 0, PARALLEL: 2, SELECT: 3, VERIFY: 4, COMMIT: 5, PLAIN: 6}

    def serial_depth(key: str) -> int:
        digits = "".join(c for c in key if c.isdigit())
        return int(digits) if digits else 0

    return sorted(set(keys), key=lambda k: (rank.get(k, 1), serial_depth(k), k))


def parts(record: StepRecord) -> list[Part]:
    """Where the step's time went, in the order it was spent."""
    if record.kind == PREFILL:
        return [Part(PREFILL_PART, record.seconds)]
    if record.tree is None:
        return [Part(PLAIN, record.seconds)]
    drafting = [Part(p.name, p.seconds) for p in record.phases]
    rest = record.draft_s - sum(p.seconds for p in drafting)  # after the phases: the best nodes chosen
    return drafting + ([Part(SELECT, rest)] if rest > 0 else []) + [Part(VERIFY, record.verify_s),
                                                                   Part(COMMIT, record.commit_s)]

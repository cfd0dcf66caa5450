"""A step's time as the engine timed it: each drafting phase (S1, S2, ... one after another; the MLP heads all at
once), choosing the tree, the target's verification pass and the commit. One look per part, shared by the race
and the time-per-step chart."""
from __future__ import annotations

from dataclasses import dataclass

from gumiho_core import MLP_HEAD, PARALLEL, PREFILL, StepRecord

from .palette import LOOKS, TARGET, look

VERIFY, COMMIT, SELECT, PREFILL_PART = "verify", "commit", "select", "prefill"


@dataclass(frozen=True)
class Part:
    key: str  # a drafting phase's name ("serial1", "parallel"), or VERIFY, COMMIT, SELECT, PREFILL_PART
    seconds: float


@dataclass(frozen=True)
class PartLook:
    label: str  # legend entry
    tag: str  # short, on blocks
    colour: str
    ink: str  # text drawn on the colour


_FIXED = {
    PREFILL_PART: PartLook("prefill: the target reads the prompt", "prefill", "#d9d9d9", "#111111"),
    SELECT: PartLook("choosing the tree from the candidates", "sel", "#c7c7c7", "#111111"),
    VERIFY: PartLook("verify: one target pass over the tree", "verify", LOOKS[TARGET].colour, "#ffffff"),
    COMMIT: PartLook("commit: keep the accepted path", "commit", "#8c8c8c", "#ffffff"),
}
PLAIN_STEP = PartLook("plain step: one target pass, one token", "plain", "#7a7a7a", "#ffffff")


def part_look(key: str) -> PartLook:
    if key in _FIXED:
        return _FIXED[key]
    if key == PARALLEL:
        lk = look(f"{MLP_HEAD}1")
        return PartLook("M1–M5: the MLP heads, all at once", "M", lk.colour, "#ffffff")
    lk = look(key)
    return PartLook(f"{lk.tag}: {lk.name}", lk.tag, lk.colour, "#ffffff")


def part_order(keys) -> list[str]:
    """Legend order: prefill, the serial steps, the MLP heads, choosing, verification, commit."""
    rank = {PREFILL_PART: 0, PARALLEL: 2, SELECT: 3, VERIFY: 4, COMMIT: 5}
    return sorted(set(keys), key=lambda k: (rank.get(k, 1), k))


def parts(record: StepRecord) -> list[Part]:
    """Where the step's time went, in the order it was spent."""
    if record.kind == PREFILL:
        return [Part(PREFILL_PART, record.seconds)]
    if record.tree is None:
        return [Part(VERIFY, record.seconds)]
    drafting = [Part(p.name, p.seconds) for p in record.phases]
    rest = record.draft_s - sum(p.seconds for p in drafting)  # after the phases: the best nodes chosen
    return drafting + ([Part(SELECT, rest)] if rest > 0 else []) + [Part(VERIFY, record.verify_s),
                                                                   Part(COMMIT, record.commit_s)]

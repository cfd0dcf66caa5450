"""One look per proposer, shared by the tree, the coloured text, the charts and the legends.

Colours are Okabe-Ito (told apart with the common colour-vision deficiencies), and every node and
token also carries a short tag (S1, M3, T), so nothing is said by colour alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from gumiho_core import MLP_HEAD, ROOT, SERIAL_STEP, SERIAL_STEPS

TARGET = "target"  # origin of the target's own tokens: the bonus, the prefill's token, plain decoding


@dataclass(frozen=True)
class Look:
    tag: str  # short label drawn on nodes and in legends
    name: str  # what a student reads in the legend and on hover
    colour: str  # strokes, chart bars, underlines
    tint: str  # light fill behind black text


def _tint(colour: str, keep: float = 0.22) -> str:
    """`colour` mixed with white, light enough for black text on top."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 - (255 - c) * keep):02x}" for c in rgb)


def _look(tag: str, name: str, colour: str) -> Look:
    return Look(tag, name, colour, _tint(colour))


# Serial steps are blues (one network run again and again); MLP heads are warm and distinct (five networks).
_SERIAL = ("#0072B2", "#56B4E9", "#3d6f96", "#6f9bbf", "#2a4d69", "#8db4d4", "#1b3a52")
_MLP = ("#D55E00", "#E69F00", "#CC79A7", "#009E73", "#A08C00")

LOOKS: dict[str, Look] = {
    ROOT: _look("R", "root: the last token already decided", "#6b6b6b"),
    TARGET: _look("T", "target model: the bonus token (its own pick)", "#404040"),
    **{f"{SERIAL_STEP}{d}": _look(f"S{d}", f"serial transformer head, step {d}", c) for d, c in enumerate(_SERIAL, 1)},
    **{f"{MLP_HEAD}{m}": _look(f"M{m}", f"MLP head {m} (draft token {m + SERIAL_STEPS}, in parallel)", c)
       for m, c in enumerate(_MLP, 1)},
}
_FALLBACK = "#7f7f7f"


def look(proposer: str) -> Look:
    """The look of a proposer name from a DraftTree ("serial1", "mlp3", ...) or TARGET."""
    if proposer in LOOKS:
        return LOOKS[proposer]
    return _look(proposer[:3].upper(), proposer, _FALLBACK)  # a drafter with more heads than we have colours for

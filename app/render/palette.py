"""One look per proposer and per method, shared by the tree, the coloured text, the charts and the legends.

Colours are Okabe-Ito and its extensions (told apart with the common colour-vision deficiencies), and every node,
token and lane also carries a short tag or a name (S1, M3, T; "EAGLE-2 style"), so nothing is said by colour alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from gumiho_core import AR, EAGLE, GUMIHO, GUMIHO_SERIAL, MEDUSA, MLP_HEAD, REGISTRY, ROOT, SERIAL_STEP

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


# Serial steps are blues (one network run again and again); MLP heads are warm and distinct (one network each:
# Gumiho's five, Medusa's seven).
_SERIAL = ("#0072B2", "#56B4E9", "#3d6f96", "#6f9bbf", "#2a4d69", "#8db4d4", "#1b3a52")
_MLP = ("#D55E00", "#E69F00", "#CC79A7", "#009E73", "#A08C00", "#882255", "#44AA99")

LOOKS: dict[str, Look] = {
    ROOT: _look("R", "root: the last token already decided", "#6b6b6b"),
    TARGET: _look("T", "target model: its own token (★, the bonus)", "#404040"),
    **{f"{SERIAL_STEP}{d}": _look(f"S{d}", f"transformer, step {d} (one step after another)", c)
       for d, c in enumerate(_SERIAL, 1)},
    **{f"{MLP_HEAD}{m}": _look(f"M{m}", f"MLP head {m} (all heads at once)", c) for m, c in enumerate(_MLP, 1)},
}
_FALLBACK = "#7f7f7f"


def look(proposer: str) -> Look:
    """The look of a proposer name from a DraftTree ("serial1", "mlp3", ...) or TARGET."""
    if proposer in LOOKS:
        return LOOKS[proposer]
    return _look(proposer[:3].upper(), proposer, _FALLBACK)  # a drafter with more heads than we have colours for


METHOD_COLOURS = {GUMIHO: "#D55E00", EAGLE: "#0072B2", MEDUSA: "#009E73", GUMIHO_SERIAL: "#CC79A7", AR: "#7a7a7a"}
LINE_CHARS = 18  # a method's name wraps after this many characters where a chart labels a lane with it


def method_colour(method: str) -> str:
    return METHOD_COLOURS.get(method, _FALLBACK)


def method_label(method: str) -> str:
    """The name a newcomer reads: the registry's label ("EAGLE-2 style", "Plain decoding")."""
    return REGISTRY[method].label if method in REGISTRY else method


def method_lines(method: str, width: int = LINE_CHARS) -> list[str]:
    """The label cut into lines of about `width` characters, at spaces (for a lane's name beside a chart)."""
    lines: list[str] = []
    for word in method_label(method).split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines

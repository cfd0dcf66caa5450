"""The pictures of one step, in order: its drafting phases (as the engine names them), then the target's
verdict and the commit. The animation walks them; the view remembers which one is on screen."""
from __future__ import annotations

from gumiho_core import StepRecord

VERIFIED, COMMITTED = "verified", "committed"


def stages(record: StepRecord) -> tuple[str, ...]:
    """The pictures of one step: its drafting phases, then verification and commit."""
    if record.tree is None or record.verdict is None:
        return (COMMITTED,)
    return tuple(p.name for p in record.phases) + (VERIFIED, COMMITTED)

"""What a step put into the text, in one place: the accepted path's drafted tokens up to where the text ended, and
whether the target's own token (the bonus) followed them. The engine cuts a step's tokens at the end of the text
(<|im_end|>) or at the length limit; a drafted node the target accepted after that cut is not in the text, and no
picture, count or rate here treats it as if it were."""
from __future__ import annotations

from dataclasses import dataclass

from gumiho_core import StepRecord


@dataclass(frozen=True)
class Committed:
    nodes: tuple[int, ...]  # the accepted tree nodes whose tokens joined the text, root excluded, in path order
    bonus: bool  # the target's own token joined after them
    cut: tuple[int, ...]  # accepted nodes after the end of the text: accepted by the target, not kept

    @property
    def drafted(self) -> int:
        return len(self.nodes)

    @property
    def tokens(self) -> int:
        return len(self.nodes) + self.bonus


def committed(record: StepRecord) -> Committed:
    """What `record` committed. A step without a draft (prefill, plain decoding) commits the target's token."""
    if record.tree is None or record.verdict is None:
        return Committed((), bool(record.new_token_ids), ())
    path = record.verdict.accepted[1:]
    kept = min(len(path), len(record.new_token_ids))
    return Committed(tuple(path[:kept]), len(record.new_token_ids) > len(path), tuple(path[kept:]))

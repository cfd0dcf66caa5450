"""What decoding returns: a frozen `StepRecord` per step and a `RunResult` per run. Plain data: the app
animates the records, run files store them, the CLIs and the API print a run's JSON from one method."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Strict

from .config import MAX_SEED, DecodeConfig, TreeConfig
from .methods import ALIASES, METHODS
from .drafting import DraftPhase
from .schema import (MAX_ANSWER_CHARS, MAX_NEW_TOKENS, MAX_NOTES, MAX_PIECE_CHARS, MAX_PROMPT_CHARS, MAX_RECORDS,
                     MAX_SPECIAL_IDS, MAX_TREE_DEPTH, TOKEN_KEY, FileModel, Name, Note, Omissible, Seconds, Token,
                     config_model, file_model, listed, pattern, text, to_file, tupled, whole)
from .tree import DraftTree
from .verify import Verdict

PREFILL, SPECULATIVE, AUTOREGRESSIVE = STEP_KINDS = ("prefill", "speculative", "autoregressive")
STOP_REASONS = ("eos", "max_new_tokens", "context", "out_of_memory")  # why a run ended (StepRecord.stop_reason)
FULL_PRECISION, HALF_PRECISION = ("float32", "float64"), ("bfloat16", "float16")  # a target's dtype, by name
RUN_FILE_FORMAT, RUN_FILE_VERSION = "gumiho-visualiser-run", 1


@dataclass(frozen=True)
class StepRecord:
    """One step as the engine makes it, the app animates it and a run file stores it. Each annotation is also the
    field's type, range and limit in a run file (schema.py): a new field is declared here, once."""

    index: whole(0, MAX_RECORDS)  # 0 is the prefill
    kind: Literal[STEP_KINDS]
    tree: Annotated[DraftTree | None, Omissible(None)]
    phases: Annotated[tupled(DraftPhase, MAX_TREE_DEPTH, "drafting phases per step"), Omissible(())]
    verdict: Annotated[Verdict | None, Omissible(None)]
    # what this step appended to the output (after any stop truncation): the accepted path and the bonus
    new_token_ids: tupled(Token, MAX_TREE_DEPTH + 1, "tokens per step: the accepted path and the bonus", least=1)
    draft_s: Seconds
    verify_s: Seconds
    commit_s: Seconds
    total_new_tokens: whole(1, MAX_NEW_TOKENS)
    total_steps: whole(0, MAX_RECORDS)  # decoding steps so far, the prefill not counted
    compute_s: Seconds  # seconds spent inside step() so far, the prefill included (pauses between steps excluded)
    done: bool
    stop_reason: Annotated[Literal[STOP_REASONS] | None, Omissible(None)]  # on the last step, else None

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s + self.commit_s

    def to_dict(self) -> dict:
        """This step as a run file holds it (StepFile, derived from the annotations above)."""
        return to_file(StepFile, self)

    @classmethod
    def from_dict(cls, d: dict) -> StepRecord:
        """The step a run file's entry holds, every field checked (a pydantic ValidationError if one is wrong)."""
        return StepFile.model_validate(d).build()


StepFile = file_model(StepRecord, "StepFile")


@dataclass(frozen=True)
class RunResult:
    method: str
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]  # new tokens only
    steps: int  # decoding steps, the prefill not counted
    wall_s: float  # seconds inside the steps (waits for a shared step lock excluded)
    stop_reason: str | None
    records: tuple[StepRecord, ...]
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    tree: TreeConfig | None = None  # the draft tree's shape; None for plain decoding

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def mean_accept_len(self) -> float:
        """Tokens per target pass (bonus included), over decoding steps; the prefill's token is not counted."""
        return (self.new_tokens - 1) / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> dict:
        return {"method": self.method, "token_ids": list(self.token_ids), "steps": self.steps,
                "new_tokens": self.new_tokens, "mean_accept_len": round(self.mean_accept_len, 4),
                "wall_s": round(self.wall_s, 4), "tokens_per_s": round(self.tokens_per_s, 3),
                "stop_reason": self.stop_reason}

    def report(self, text: str, target: str, tree_source: str | None) -> dict:
        """The run as `python -m gumiho_core.generate --json` prints it (and the app's generate API returns it):
        summary() plus the decoded `text`, the target's name, the settings and where the tree came from."""
        return {**self.summary(), "text": text, "target": target, "prompt_tokens": len(self.prompt_ids),
                "tree": self.tree.to_dict() if self.tree else None, "tree_source": tree_source if self.tree else None,
                "decode": self.decode.to_dict()}

Prompt, Answer = text(MAX_PROMPT_CHARS, "characters per prompt"), text(MAX_ANSWER_CHARS, "characters per answer")
Piece = text(MAX_PIECE_CHARS, "characters per token text")
DecodeFile, TreeShapeFile = config_model(DecodeConfig, "DecodeFile"), config_model(TreeConfig, "TreeShapeFile")


class RunFile(FileModel):
    """A run saved by the app (app/runfile.py writes it, runcheck.py adds what no single field can say), in the
    order a refusal names the first fault: format, the texts, the settings, the steps, the clocks."""

    format: Literal[RUN_FILE_FORMAT]
    version: Literal[RUN_FILE_VERSION]
    saved: Name = ""
    prompt: Prompt
    text: Answer
    target: Name
    device: Name
    preset: Name
    tree_source: Note = ""  # absent before the auto tree
    notes: listed(Note, MAX_NOTES, "notes per run")
    decode: DecodeFile
    tree: TreeShapeFile
    method: Literal[METHODS + tuple(ALIASES)]  # an old name is read as the method it names now (check_method)
    dtype: Literal[FULL_PRECISION + HALF_PRECISION] = ""  # absent before the exactness line told fp32 from half
    prompt_tokens: whole(1, MAX_SEED)
    pieces: dict[pattern(TOKEN_KEY, "a token id"), Piece]
    records: listed(StepFile, MAX_RECORDS, "steps per run")
    clock: listed(Seconds, MAX_RECORDS, "one time per step")
    baseline: listed(Annotated[tuple[whole(1, MAX_NEW_TOKENS), Seconds], Strict(False)], MAX_NEW_TOKENS,
                     "plain decoding steps")  # plain decoding of the prompt: [tokens, seconds] after each step
    baseline_ids: listed(Token, MAX_NEW_TOKENS, "tokens per run")
    special_ids: listed(Token, MAX_SPECIAL_IDS, "special tokens")

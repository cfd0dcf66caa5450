"""What decoding returns: a frozen `StepRecord` per step and a `RunResult` per run. Plain data: the app
animates the records, run files store them, the CLIs and the API print a run's JSON from one method."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .config import DecodeConfig, TreeConfig
from .drafting import DraftPhase
from .tree import DraftTree
from .verify import Verdict

PREFILL, SPECULATIVE, AUTOREGRESSIVE = STEP_KINDS = ("prefill", "speculative", "autoregressive")
STOP_REASONS = ("eos", "max_new_tokens", "context", "out_of_memory")  # why a run ended (StepRecord.stop_reason)


def _phase_dict(p: DraftPhase) -> dict:
    return {"name": p.name, "depths": list(p.depths), "candidates": p.candidates, "seconds": round(p.seconds, 6)}


def _phase(d: dict) -> DraftPhase:
    return DraftPhase(name=str(d["name"]), depths=tuple(int(x) for x in d["depths"]), candidates=int(d["candidates"]),
                      seconds=float(d["seconds"]))


def _verdict_dict(v: Verdict) -> dict:
    return {"accepted": list(v.accepted), "bonus": v.bonus, "target_token": list(v.target_token),
            "target_prob": [None if math.isnan(p) else round(p, 5) for p in v.target_prob]}  # null: never checked


def _verdict(d: dict) -> Verdict:
    return Verdict(accepted=tuple(int(x) for x in d["accepted"]), bonus=int(d["bonus"]),
                   target_token=tuple(int(x) for x in d["target_token"]),
                   target_prob=tuple(float("nan") if x is None else float(x) for x in d["target_prob"]))


@dataclass(frozen=True)
class StepRecord:
    index: int  # 0 is the prefill
    kind: str  # one of STEP_KINDS
    tree: DraftTree | None
    phases: tuple[DraftPhase, ...]
    verdict: Verdict | None
    new_token_ids: tuple[int, ...]  # what this step appended to the output (after any stop truncation)
    draft_s: float
    verify_s: float
    commit_s: float
    total_new_tokens: int
    total_steps: int  # decoding steps so far, the prefill not counted
    compute_s: float  # seconds spent inside step() so far, the prefill included (pauses between steps excluded)
    done: bool
    stop_reason: str | None  # one of STOP_REASONS on the last step, else None

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s + self.commit_s

    def to_dict(self) -> dict:
        return {
            "index": self.index, "kind": self.kind, "tree": self.tree.to_dict() if self.tree else None,
            "phases": [_phase_dict(p) for p in self.phases],
            "verdict": None if self.verdict is None else _verdict_dict(self.verdict),
            "new_token_ids": list(self.new_token_ids),
            "draft_s": round(self.draft_s, 6), "verify_s": round(self.verify_s, 6),
            "commit_s": round(self.commit_s, 6), "total_new_tokens": self.total_new_tokens,
            "total_steps": self.total_steps, "compute_s": round(self.compute_s, 6),
            "done": self.done, "stop_reason": self.stop_reason,
        }

    @classmethod
    def from_dict(cls, d: dict) -> StepRecord:
        return cls(
            index=int(d["index"]), kind=str(d["kind"]),
            tree=DraftTree.from_dict(d["tree"]) if d.get("tree") else None,
            phases=tuple(_phase(p) for p in d.get("phases", [])),
            verdict=None if d.get("verdict") is None else _verdict(d["verdict"]),
            new_token_ids=tuple(int(x) for x in d["new_token_ids"]),
            draft_s=float(d["draft_s"]), verify_s=float(d["verify_s"]), commit_s=float(d["commit_s"]),
            total_new_tokens=int(d["total_new_tokens"]), total_steps=int(d["total_steps"]),
            compute_s=float(d["compute_s"]), done=bool(d["done"]), stop_reason=d.get("stop_reason"),
        )


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

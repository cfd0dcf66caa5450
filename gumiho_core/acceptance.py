"""Acceptance statistics of real speculative decoding runs: tokens per target pass, per-depth acceptance."""
from __future__ import annotations

from dataclasses import dataclass, field

from .records import RunResult

MAX_DEPTH = 7


@dataclass
class Acceptance:
    """Accumulates over runs. Depth d's rate: P(the accepted path reaches depth d | it reached d - 1)."""

    steps: int = 0
    new_tokens: int = 0  # decoding steps' tokens only (the prefill's token is not counted)
    reached: list = field(default_factory=lambda: [0] * (MAX_DEPTH + 1))
    accepted: list = field(default_factory=lambda: [0] * (MAX_DEPTH + 1))
    histogram: list = field(default_factory=lambda: [0] * (MAX_DEPTH + 1))

    def add(self, run: RunResult) -> None:
        for rec in run.records:
            if rec.verdict is None:
                continue
            a = rec.verdict.accept_length
            self.steps += 1
            self.new_tokens += len(rec.new_token_ids)
            self.histogram[min(a, MAX_DEPTH)] += 1
            for d in range(1, MAX_DEPTH + 1):
                if a >= d - 1:
                    self.reached[d] += 1
                    self.accepted[d] += a >= d

    @property
    def mean_accept_len(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0

    def per_depth(self) -> list[float]:
        """Acceptance rate at depths 1..7 (nan where never reached)."""
        return [self.accepted[d] / self.reached[d] if self.reached[d] else float("nan")
                for d in range(1, MAX_DEPTH + 1)]

    def to_dict(self) -> dict:
        return {"steps": self.steps, "mean_accept_len": round(self.mean_accept_len, 4),
                "per_depth": [round(x, 4) for x in self.per_depth()],
                "accept_histogram": self.histogram}

"""The data the page shows: per user, a recorded run (plain data, can be saved and replayed without a
model; player.py holds it with the view on it); for everyone, the server's status.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gumiho_core import DecodeConfig, StepRecord, TreeChoice, TreeConfig


@dataclass(frozen=True)
class Settings:
    """What the user asked for, validated. An "auto" request has no tree until the runner settles it."""

    prompt: str
    method: str
    decode: DecodeConfig
    tree: TreeConfig | None
    preset: str  # as shown: "paper", "custom", "auto", or "auto → small (CPU)" while this device is unmeasured
    tree_source: str = ""  # why this tree: the auto choice's summary, or the preset's name


@dataclass
class Run:
    """One decoding run as data: the request, every step, and the plain-decoding baseline it is compared with."""

    settings: Settings
    target: str  # model name
    device: str
    prompt_tokens: int
    notes: list[str] = field(default_factory=list)  # what the engine warned about (e.g. an untrained drafter)
    records: list[StepRecord] = field(default_factory=list)
    clock: list[float] = field(default_factory=list)  # compute seconds after each record; animation excluded
    baseline: list[tuple[int, float]] = field(default_factory=list)  # plain decoding: (tokens, seconds) per step
    baseline_ids: list[int] = field(default_factory=list)
    pieces: dict[int, str] = field(default_factory=dict)  # token id -> its text, for every token on screen
    special_ids: set[int] = field(default_factory=set)
    text: str = ""  # the answer as the tokenizer decodes it (what the CLI prints)
    dtype: str = ""  # the target's dtype ("float32", "bfloat16", ...); "" if not recorded (older run files)
    # The race (not saved in run files): every other drafting method on the same prompt and tree shape,
    # interleaved with this run step by step, and the device's measured verify cost (n -> seconds / plain step).
    rivals: dict[str, list[StepRecord]] = field(default_factory=dict)
    verify_ratios: dict[int, float] = field(default_factory=dict)

    @property
    def token_ids(self) -> list[int]:
        return [t for rec in self.records for t in rec.new_token_ids]

    @property
    def finished(self) -> bool:
        return bool(self.records) and self.records[-1].done

    def add(self, record: StepRecord) -> None:
        """Append a step; its compute_s (time inside step(), waits for other visitors excluded) is the clock."""
        self.records.append(record)
        self.clock.append(record.compute_s)

    def add_baseline(self, record: StepRecord) -> None:
        self.baseline.append((record.total_new_tokens, record.compute_s))
        self.baseline_ids += record.new_token_ids


@dataclass(frozen=True)
class ServerStatus:
    """What the server is doing, as the status lines show it: the models and the auto tree."""

    target_spec: str  # as the app was started (a name, a folder or a hub id)
    device: str
    load_error: str | None  # why the models could not be loaded (scrubbed), while they are not
    target_name: str | None  # None until the models are loaded
    drafter_origin: str | None  # where the drafter came from; None: no drafter
    drafter_trained: bool  # False for random heads (exact output, little speedup)
    drafter_error: str | None  # why there is no drafter
    measuring: str | None  # progress of the auto tree's measurement, while it runs
    choices: dict[str, TreeChoice]  # the measured auto tree per drafting mode
    auto_tree: TreeConfig  # what auto means for gumiho now
    auto_why: str  # ... and why: the measured choice's summary, or why the fallback
    settled: bool  # the auto tree is known, or known to stay the fallback

    @property
    def ready(self) -> bool:
        return self.target_name is not None

    @property
    def failed(self) -> bool:
        """The models could not be loaded (a Run tries again)."""
        return self.load_error is not None

    @property
    def final(self) -> bool:
        """Nothing here will change on its own any more (a measurement again, after a run, is news)."""
        return (self.settled and self.measuring is None) or self.failed

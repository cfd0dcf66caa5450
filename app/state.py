"""The data the page shows: per user, a recorded run (plain data, can be saved and replayed without a
model; player.py holds it with the view on it); for everyone, the server's status.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gumiho_core import DecodeConfig, StepRecord, TreeChoice, TreeConfig


@dataclass(frozen=True)
class Settings:
    """A run's settings, its tree resolved (gumiho_core.resolve_tree) for the method shown step by step."""

    prompt: str
    method: str
    decode: DecodeConfig
    tree: TreeConfig  # the method's tree (plain decoding: the request as Gumiho would draft it, for its rivals)
    preset: str  # as shown: "classroom", "paper", "custom", "auto", or "auto → small" while this device is unmeasured
    tree_source: str = ""  # why this tree: the measured choice's summary, or the preset's name


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
    baseline_done: bool = False  # plain decoding has ended (its last step is in `baseline`)
    pieces: dict[int, str] = field(default_factory=dict)  # token id -> its text, for every token on screen
    special_ids: set[int] = field(default_factory=set)
    text: str = ""  # the answer as the tokenizer decodes it (what the CLI prints)
    dtype: str = ""  # the target's dtype ("float32", "bfloat16", ...); "" if not recorded (older run files)
    # The race: the other drafting methods the visitor picked, on the same prompt and tree request (each its own
    # tree, in its own mode), interleaved with this run step by step; and the device's measured verify cost
    # (n -> seconds / plain step), not saved.
    rivals: dict[str, list[StepRecord]] = field(default_factory=dict)
    rival_trees: dict[str, TreeConfig] = field(default_factory=dict)
    verify_ratios: dict[int, float] = field(default_factory=dict)
    # Each drafting lane's heads: the optimizer steps they were trained for (0: untrained), where the heads say;
    # a race is a fair comparison of drafters only where these agree (docs/app.md, "The race").
    trained_steps: dict[str, int] = field(default_factory=dict)

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
        self.baseline_done = record.done


@dataclass(frozen=True)
class ServerStatus:
    """What the server is doing, as the status lines show it: the models, the drafters, the measurements."""

    target_spec: str  # as the app was started (a name, a folder or a hub id)
    device: str
    load_error: str | None  # why the models could not be loaded (scrubbed), while they are not
    target_name: str | None  # None until the models are loaded
    drafters: dict[str, tuple[str, bool, int | None]]  # member -> (where its heads came from, trained, steps trained)
    drafter_errors: dict[str, str]  # member -> why it has no heads
    not_trained: tuple[str, ...]  # members whose heads do not ship for this model yet
    methods: tuple[str, ...]  # the methods that can run (before the load: those that should)
    measuring: str | None  # progress of a measurement, while it runs
    again: bool  # ... which was asked for (Measure again), not the first
    choices: dict[str, TreeChoice]  # the measured trees per method
    gaps: dict[str, float]  # method -> a run's step cost this far off the prediction: perhaps out of date
    errors: dict[str, str]  # method (or "all") -> why measuring failed
    policy: str  # measure, cached, off
    verify_ratios: dict[int, float]  # n -> verifying n tokens here, in plain steps (measured)
    settled: bool  # the first measurement is known, or known not to come

    @property
    def ready(self) -> bool:
        return self.target_name is not None

    @property
    def failed(self) -> bool:
        """The models could not be loaded (a Run tries again)."""
        return self.load_error is not None

    @property
    def final(self) -> bool:
        """Nothing here will change on its own any more (a measurement asked for later is news)."""
        return (self.settled and self.measuring is None) or self.failed

"""Hardware-aware tree budget: the auto tree, chosen from what trees yield and cost on THIS device.

On an H200 verifying 64 tokens costs about what one does; on a 2-core CPU it costs about 4x, so
the best tree differs by device. Three measurements, taken once per (device, target, drafter):
  1. verify cost: seconds for one target forward over n tree tokens, n = 2..64 (costs.py);
  2. draft cost: seconds to draft a tree, per (top_k, depth) (costs.py);
  3. acceptance: real decoding of a few calibration prompts with a large tree (candidates.py reads what
     every smaller tree would have accepted off the target's verdicts).

The rule: in hybrid mode auto is the fastest tree that drafts deeper than the drafter's serial steps, so
that the MLP heads always take part (Gumiho's hybrid is the method; a depth-1 tree is a plain one-level
draft); in serial mode it is the fastest tree. The fastest tree of any depth is kept beside it (`fastest`), with its predicted tokens/s, so the
price of the rule is always stated. The measurement is cached; a run whose measured step costs are more
than REMEASURE_GAP off the prediction marks it stale (mark_stale), and the next auto request measures again.
"""
from __future__ import annotations

import hashlib
import json
import logging
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import HYBRID, DecodeConfig, DrafterConfig, TreeConfig
from ..cpu_kernels import half_weights_available, one_row_stock
from ..drafter import GumihoDrafter
from ..engine import SpeculativeDecoder, generate
from ..models import cache_dir
from ..target import Target
from ..text import encode_prompt
from ..timing import device_name
from ..tree import DraftTree
from .candidates import ALL, ranked
from .costs import BEAM, NODES_GRID, TOP_K_GRID, measure

log = logging.getLogger(__name__)
VERSION = 6  # bumped whenever what a measurement means changes (6: the drafter family; serial mode's auto is its
# fastest tree)
REMEASURE_GAP = 0.25  # a run's step cost this far (relative) from the prediction makes the measurement stale
MIN_STEPS_TO_JUDGE = 8  # fewer decoding steps say too little about a step's cost to doubt a measurement
# pool "all" drafts a superset of Gumiho's own pool: both pools' candidates can be read off it
CALIBRATION_TREE = TreeConfig(top_k=max(TOP_K_GRID), mlp_topk=BEAM, pruning=BEAM, total_tokens=max(NODES_GRID),
                              pool=ALL)
CALIBRATION_PROMPTS = (
    "Explain in a short paragraph why the sky looks blue during the day.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "Give me three tips for staying focused while studying, as a numbered list.",
    "Tell a short story about a robot who learns to bake bread.",
)


def _shape(tree: TreeConfig) -> str:
    pool = f", pool {tree.pool}" if tree.mode == HYBRID else ""
    return f"{tree.total_tokens} nodes, top_k {tree.top_k}, depth {tree.depth}{pool}"


@dataclass(frozen=True)
class TreeChoice:
    tree: TreeConfig  # auto: the fastest measured tree deeper than the serial steps (see the module's rule)
    tokens_per_step: float  # expected, bonus included
    step_s: float  # predicted seconds per decoding step
    ar_step_s: float  # measured seconds per plain decoding step
    verify_s: dict  # str(n) -> measured seconds to verify n tokens
    alternatives: list = field(default_factory=list)  # runner-up candidates of auto's kind, best first
    device: str = ""
    calibration_steps: int = 0
    serial_steps: int = DrafterConfig.serial_steps  # the drafter's: depths beyond it are the MLP heads'
    fastest: dict | None = None  # the fastest tree of any depth (as an alternative), when it is not `tree`
    deep_share: float = 0.0  # calibration steps in which a tree of this shape held a node deeper than serial_steps

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def speedup(self) -> float:
        """Predicted speedup over plain decoding on this device."""
        return self.tokens_per_s * self.ar_step_s

    @property
    def fastest_tree(self) -> TreeConfig:
        """The fastest tree of any depth (`--tree fastest`): `tree` itself unless the rule ruled it out."""
        return TreeConfig(**self.fastest["tree"]) if self.fastest else self.tree

    def predicted_step_s(self, tree: TreeConfig) -> float | None:
        """Predicted seconds per step of `tree` (the mode aside), if it is one of the measured choices."""
        shape = {**tree.to_dict(), "mode": self.tree.mode}
        if shape == self.tree.to_dict():
            return self.step_s
        known = [c for c in [self.fastest, *self.alternatives] if c and c["tree"] == shape]
        return known[0]["step_s"] if known else None

    def summary(self) -> str:
        t = self.tree
        ratio = self.verify_s[str(t.total_tokens)] / self.ar_step_s
        return (f"auto tree for {self.device}: {_shape(t)}. {self._rule_note()} Verifying {t.total_tokens} tokens "
                f"here costs {ratio:.1f}x one token, and this tree should yield {self.tokens_per_step:.2f} tokens "
                f"per step: predicted {self.speedup:.2f}x plain decoding ({self.tokens_per_s:.1f} tokens/s)."
                + self._fastest_note())

    def _rule_note(self) -> str:
        t, s = self.tree, self.serial_steps
        if t.mode != HYBRID or not s:
            return "It is the fastest tree measured here."
        if t.depth > s:
            return (f"It is the fastest tree measured here that drafts deeper than the {s} serial steps: the MLP "
                    f"heads reached into {100 * self.deep_share:.0f}% of its calibration trees.")
        return "It stops at the serial steps: this drafter has no deeper level to draft."

    def _fastest_note(self) -> str:
        if not self.fastest:
            return " It is also the fastest tree of any depth measured here."
        f = TreeConfig(**self.fastest["tree"])
        tps = self.fastest["tokens_per_s"]
        gap = tps - self.tokens_per_s
        return (f" The fastest tree of any depth ({_shape(f)}; `fastest`) would be predicted at "
                f"{tps * self.ar_step_s:.2f}x ({tps:.1f} tokens/s), {gap:+.1f} tokens/s "
                f"({100 * gap / self.tokens_per_s:+.0f}%) against this one.")

    def fastest_summary(self) -> str:
        """What `--tree fastest` means here, and what it gives up against auto."""
        if not self.fastest:
            return "fastest tree = the auto tree here. " + self.summary()
        f, tps = TreeConfig(**self.fastest["tree"]), self.fastest["tokens_per_s"]
        return (f"fastest tree for {self.device}: {_shape(f)}: {self.fastest['tokens_per_step']:.2f} tokens per step, "
                f"predicted {tps * self.ar_step_s:.2f}x plain decoding ({tps:.1f} tokens/s). The auto tree "
                f"({_shape(self.tree)}) drafts deeper, predicted at {self.tokens_per_s:.1f} tokens/s.")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tree"] = self.tree.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TreeChoice":
        return cls(**{**{k: v for k, v in d.items() if k != "stale"}, "tree": TreeConfig(**d["tree"])})


def best_choice(steps, mode: str, serial_steps: int, costs) -> TreeChoice:
    """The auto tree by the module's rule, with the fastest tree of any depth and five runners-up."""
    auto, fastest, rest = ranked(steps, mode, serial_steps, costs)
    return TreeChoice(tree=auto.tree(mode), tokens_per_step=auto.tokens_per_step, step_s=auto.step_s,
                      ar_step_s=costs.ar_step_s, verify_s=costs.verify_s,
                      alternatives=[c.to_dict(mode) for c in rest], device=costs.device,
                      calibration_steps=len(steps), serial_steps=serial_steps,
                      fastest=None if fastest is None else fastest.to_dict(mode), deep_share=auto.deep_share)


# -- the cache ---------------------------------------------------------------------------------
def _fingerprint(target: Target, drafter: GumihoDrafter, mode: str) -> str:
    w = drafter.weight.detach().float().flatten()[:4096].cpu().numpy().tobytes()
    raw = json.dumps([VERSION, device_name(target.device), target.name, str(target.dtype), mode,
                      hashlib.sha1(w).hexdigest(), drafter.draft_vocab_size,
                      target.packed_linears > 0, one_row_stock(), half_weights_available()])  # what drafting costs
    return hashlib.sha1(raw.encode()).hexdigest()[:16]


def _cache_path(target: Target, drafter: GumihoDrafter, mode: str) -> Path:
    return cache_dir() / "autotree" / f"{_fingerprint(target, drafter, mode)}.json"


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        log.warning("ignoring an unreadable auto-tree cache file %s", path)
        return None


def cached_tree_choice(target: Target, drafter: GumihoDrafter, mode: str = HYBRID) -> TreeChoice | None:
    """The choice measured earlier for this device, target, drafter and mode, or None (none, or marked stale)."""
    data = _read(_cache_path(target, drafter, mode))
    if data is None or data.get("stale"):
        return None
    try:
        return TreeChoice.from_dict(data)
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring an auto-tree cache file of another layout for %s", mode)
        return None


def prediction_gap(choice: TreeChoice, tree: TreeConfig, step_seconds, plain_seconds=()) -> float | None:
    """How far a run's measured step cost (the median of its decoding steps' seconds) is from the prediction for
    its tree: measured / predicted - 1 (0.3: 30% dearer than predicted). None when the tree was not one of the
    measured choices or the run has fewer than MIN_STEPS_TO_JUDGE steps. With plain steps measured alongside,
    the ratios to a plain step are compared, so a machine that is busier all over (where the same tree is still
    the best) is no reason to measure again."""
    predicted = choice.predicted_step_s(tree)
    if predicted is None or len(step_seconds) < MIN_STEPS_TO_JUDGE:
        return None
    step_s = statistics.median(step_seconds)
    if plain_seconds:
        return (step_s / statistics.median(plain_seconds)) / (predicted / choice.ar_step_s) - 1
    return step_s / predicted - 1


def mark_stale(target: Target, drafter: GumihoDrafter, mode: str = HYBRID) -> None:
    """Keep the measurement on disk but stop trusting it: the next auto request measures again."""
    path = _cache_path(target, drafter, mode)
    data = _read(path)
    if data is not None:
        path.write_text(json.dumps({**data, "stale": True}, indent=1))


# -- measuring ---------------------------------------------------------------------------------
def _calibrate(target: Target, drafter: GumihoDrafter, mode: str, prompts: list[list[int]], max_new_tokens: int,
               progress, lock) -> tuple[list[tuple[DraftTree, tuple[int, ...]]], float]:
    """Real decoding of the prompts with the large tree: each step's tree with the target's verdict on every
    node (its argmax after each node), and the median commit time."""
    steps, commit = [], []
    for i, ids in enumerate(prompts):
        progress(0.6 * i / len(prompts), "measuring acceptance with a large tree")
        run = generate(SpeculativeDecoder(target, drafter, ids, DecodeConfig(max_new_tokens=max_new_tokens),
                                          CALIBRATION_TREE.with_(mode=mode)), lock=lock)
        steps += [(rec.tree, rec.verdict.target_token) for rec in run.records[1:]]
        commit += [rec.commit_s for rec in run.records[1:]]
    return steps, statistics.median(commit or [0.0])


def choose_tree(target: Target, drafter: GumihoDrafter, mode: str = HYBRID, prompts: list[list[int]] | None = None,
                refresh: bool = False, progress=None, max_new_tokens: int = 32, lock=None) -> TreeChoice:
    """Measure (or read from the cache) and return the auto tree for this device. progress(frac, text); `lock`
    (a shared step lock) is held for each timed call and each calibration step, never longer."""
    progress = progress or (lambda frac, text: None)
    cached = None if refresh else cached_tree_choice(target, drafter, mode)
    if cached is not None:
        return cached
    prompts = prompts or [encode_prompt(target.tokenizer, p) for p in CALIBRATION_PROMPTS]
    steps, commit_s = _calibrate(target, drafter, mode, prompts, max_new_tokens, progress, lock)
    probe = SpeculativeDecoder(target, drafter, prompts[0], DecodeConfig(max_new_tokens=max_new_tokens),
                               CALIBRATION_TREE.with_(mode=mode))
    while not probe.done and len(probe.generated) < max_new_tokens // 2:  # a realistic context, caches consistent
        probe.step()
    choice = best_choice(steps, mode, drafter.cfg.serial_steps, measure(probe, mode, commit_s, progress, lock))
    path = _cache_path(target, drafter, mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(choice.to_dict(), indent=1))
    progress(1.0, "done")
    log.info("%s", choice.summary())
    return choice

"""Hardware-aware tree budget: pick the tree shape with the best expected tokens/s on THIS device.

On an H200 verifying 64 tokens costs about what one does; on a 2-core CPU it costs about 4x, so
the best tree differs by device. Three measurements, taken once per (device, target, drafter):
  1. verify cost: seconds for one target forward over n tree tokens, n = 1..64 (costs.py);
  2. draft cost: seconds to draft a tree, per (top_k, depth) (costs.py);
  3. acceptance: real decoding of a few calibration prompts with a large tree. Because each node's
     logits depend only on its own ancestors, the target's verdict on every node of that tree says
     exactly what any smaller tree drawn from it would have accepted.
Expected tokens/s of a candidate = (1 + expected accepted) / (draft + verify(n) + commit).
"""
from __future__ import annotations

import hashlib
import json
import logging
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import GUMIHO, SERIAL, DecodeConfig, DrafterConfig, TreeConfig
from ..drafter import GumihoDrafter
from ..engine import SpeculativeDecoder, generate
from ..models import cache_dir
from ..target import Target
from ..text import encode_prompt
from ..timing import device_name
from ..tree import DraftTree
from .costs import BEAM, NODES_GRID, TOP_K_GRID, Costs, measure

log = logging.getLogger(__name__)
VERSION = 2  # 2: the target's packed CPU layers change the costs
CALIBRATION_TREE = TreeConfig(top_k=max(TOP_K_GRID), mlp_topk=BEAM, pruning=BEAM, total_tokens=max(NODES_GRID))
CALIBRATION_PROMPTS = (
    "Explain in a short paragraph why the sky looks blue during the day.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "Give me three tips for staying focused while studying, as a numbered list.",
    "Tell a short story about a robot who learns to bake bread.",
)


@dataclass(frozen=True)
class TreeChoice:
    tree: TreeConfig
    tokens_per_step: float  # expected, bonus included
    step_s: float  # predicted seconds per decoding step
    ar_step_s: float  # measured seconds per plain decoding step
    verify_s: dict  # n -> measured seconds to verify n tokens
    alternatives: list = field(default_factory=list)  # runner-up candidates, best first
    device: str = ""
    calibration_steps: int = 0
    serial_steps: int = DrafterConfig.serial_steps  # the drafter's: depths beyond it are the MLP heads'

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def speedup(self) -> float:
        """Predicted speedup over plain decoding on this device."""
        return self.tokens_per_s * self.ar_step_s

    def summary(self) -> str:
        t = self.tree
        ratio = self.verify_s[str(t.total_tokens)] / self.ar_step_s
        return (f"auto tree for {self.device}: {t.total_tokens} nodes, top_k {t.top_k}, depth {t.depth}. "
                f"Verifying {t.total_tokens} tokens here costs {ratio:.1f}x one token, and this tree should "
                f"yield {self.tokens_per_step:.2f} tokens per step: predicted {self.speedup:.2f}x plain decoding."
                + self._depth_note())

    def _depth_note(self) -> str:
        t = self.tree
        if t.mode != GUMIHO or t.depth > self.serial_steps:
            return ""
        return (f" It stops at depth {t.depth}: with these heads, on this device, the deeper levels the MLP heads "
                "propose are accepted too rarely to pay for their drafting and verification. The paper tree shows "
                "them at work.")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tree"] = self.tree.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TreeChoice":
        return cls(**{**d, "tree": TreeConfig(**d["tree"])})


# -- acceptance of smaller trees, read off a large verified tree -------------------------------
def _sibling_rank(tree: DraftTree) -> list[int]:
    rank = [0] * len(tree)
    for kids in tree.children:  # children are sorted best-first
        for r, k in enumerate(kids):
            rank[k] = r
    return rank


def candidate_order(tree: DraftTree, mode: str, top_k: int, depth: int,
                    serial_steps: int = DrafterConfig.serial_steps) -> list[int]:
    """Nodes a (top_k, depth) drafter would propose, approximated inside a larger drafted tree, best first.

    A tree of n nodes keeps the root and the first n - 1 of them (an ancestor-closed set).
    """
    rank = _sibling_rank(tree)
    serial_levels = depth if mode == SERIAL else serial_steps
    valid = {0}
    for d in range(1, depth + 1):
        level = [i for i in range(len(tree)) if tree.depth[i] == d and tree.parents[i] in valid]
        if d <= serial_levels:
            level = [i for i in level if rank[i] < top_k]
        # only the best `expanded` nodes of the previous level have children
        prev = sorted((i for i in valid if tree.depth[i] == d - 1), key=lambda i: -tree.score[i])
        width = top_k if d - 1 <= serial_levels else BEAM
        expanded = set(prev[:width]) if d >= 2 else {0}
        valid |= {i for i in level if tree.parents[i] in expanded}
    return sorted(valid - {0}, key=lambda i: (-tree.score[i], tree.depth[i], i))


def accepted_in(tree: DraftTree, keep: set[int], target_token) -> int:
    node, accepted = 0, 0
    while True:
        nxt = next((c for c in tree.children[node] if c in keep and tree.tokens[c] == target_token[node]), None)
        if nxt is None:
            return accepted
        node, accepted = nxt, accepted + 1


# -- the choice --------------------------------------------------------------------------------
def _fingerprint(target: Target, drafter: GumihoDrafter, mode: str) -> str:
    w = drafter.fc.weight.detach().float().flatten()[:4096].cpu().numpy().tobytes()
    raw = json.dumps([VERSION, device_name(target.device), target.name, str(target.dtype), mode,
                      hashlib.sha1(w).hexdigest(), drafter.draft_vocab_size,
                      target.packed_linears > 0])
    return hashlib.sha1(raw.encode()).hexdigest()[:16]


def _cache_path(target: Target, drafter: GumihoDrafter, mode: str) -> Path:
    return cache_dir() / "autotree" / f"{_fingerprint(target, drafter, mode)}.json"


def cached_tree_choice(target: Target, drafter: GumihoDrafter, mode: str = GUMIHO) -> TreeChoice | None:
    """The choice measured earlier for this device, target, drafter and mode, or None (measures nothing)."""
    path = _cache_path(target, drafter, mode)
    if not path.is_file():
        return None
    try:
        return TreeChoice.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring an unreadable auto-tree cache file %s", path)
        return None


def _calibrate(target: Target, drafter: GumihoDrafter, mode: str, prompts: list[list[int]], max_new_tokens: int,
               progress) -> tuple[list[tuple[DraftTree, tuple[int, ...]]], float]:
    """Real decoding of the prompts with the large tree: each step's tree with the target's verdict on every
    node (its argmax after each node), and the mean commit time."""
    steps, commit = [], []
    for i, ids in enumerate(prompts):
        progress(0.6 * i / len(prompts), "measuring acceptance with a large tree")
        run = generate(SpeculativeDecoder(target, drafter, ids, DecodeConfig(max_new_tokens=max_new_tokens),
                                          CALIBRATION_TREE.with_(mode=mode)))
        steps += [(rec.tree, rec.verdict.target_token) for rec in run.records[1:]]
        commit += [rec.commit_s for rec in run.records[1:]]
    return steps, statistics.mean(commit or [0.0])


def choose_tree(target: Target, drafter: GumihoDrafter, mode: str = GUMIHO, prompts: list[list[int]] | None = None,
                refresh: bool = False, progress=None, max_new_tokens: int = 32) -> TreeChoice:
    """Measure (or read from the cache) and return the best tree for this device. progress(frac, text)."""
    progress = progress or (lambda frac, text: None)
    cached = None if refresh else cached_tree_choice(target, drafter, mode)
    if cached is not None:
        return cached
    prompts = prompts or [encode_prompt(target.tokenizer, p) for p in CALIBRATION_PROMPTS]
    steps, commit_s = _calibrate(target, drafter, mode, prompts, max_new_tokens, progress)
    probe = SpeculativeDecoder(target, drafter, prompts[0], DecodeConfig(max_new_tokens=max_new_tokens),
                               CALIBRATION_TREE.with_(mode=mode))
    while not probe.done and len(probe.generated) < max_new_tokens // 2:  # a realistic context, caches consistent
        probe.step()
    choice = best_choice(steps, mode, drafter.cfg.serial_steps, measure(probe, mode, commit_s, progress))
    path = _cache_path(target, drafter, mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(choice.to_dict(), indent=1))
    progress(1.0, "done")
    log.info("%s", choice.summary())
    return choice


@dataclass(frozen=True, order=True)
class Candidate:
    """A tree shape with what it should yield here; candidates sort by tokens/s (then by the other fields)."""

    tokens_per_s: float
    tokens_per_step: float  # expected, bonus included
    step_s: float  # predicted seconds per step
    top_k: int
    depth: int
    nodes: int

    def tree(self, mode: str) -> TreeConfig:
        return TreeConfig(mode=mode, top_k=self.top_k, mlp_topk=BEAM, pruning=BEAM, total_tokens=self.nodes,
                          depth=self.depth)

    def to_dict(self, mode: str) -> dict:
        return {"tree": self.tree(mode).to_dict(), "tokens_per_step": round(self.tokens_per_step, 3),
                "step_s": round(self.step_s, 5), "tokens_per_s": round(self.tokens_per_s, 2)}


def candidates(steps, mode: str, serial_steps: int, costs: Costs) -> list[Candidate]:
    """Every measured (top_k, depth) with every node count, best first. `steps`: (tree, target_token) pairs."""
    out = []
    for k, depth in costs.draft_s:
        orders = [candidate_order(t, mode, k, depth, serial_steps) for t, _ in steps]
        for n in NODES_GRID:
            per_step = 1 + statistics.mean(accepted_in(t, {0, *order[: n - 1]}, tt)
                                           for (t, tt), order in zip(steps, orders))
            step = costs.step_s(k, depth, n)
            out.append(Candidate(tokens_per_s=per_step / step, tokens_per_step=per_step, step_s=step, top_k=k,
                                 depth=depth, nodes=n))
    return sorted(out, reverse=True)


def best_choice(steps, mode: str, serial_steps: int, costs: Costs) -> TreeChoice:
    """The candidate with the best expected tokens/s, with the five runners-up."""
    best, *rest = candidates(steps, mode, serial_steps, costs)
    return TreeChoice(tree=best.tree(mode), tokens_per_step=best.tokens_per_step, step_s=best.step_s,
                      ar_step_s=costs.ar_step_s, verify_s=costs.verify_s,
                      alternatives=[c.to_dict(mode) for c in rest[:5]], device=costs.device,
                      calibration_steps=len(steps), serial_steps=serial_steps)

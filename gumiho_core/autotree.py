"""Hardware-aware tree budget: pick the tree shape with the best expected tokens/s on THIS device.

On an H200 verifying 64 tokens costs about what one does; on a 2-core CPU it costs about 4x, so
the best tree differs by device. Three measurements, taken once per (device, target, drafter):
  1. verify cost: seconds for one target forward over n tree tokens, n = 1..64;
  2. draft cost: seconds to draft a tree, per (top_k, depth);
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
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .config import GUMIHO, SERIAL, DecodeConfig, DrafterConfig, TreeConfig
from .drafter import GumihoDrafter
from .drafting import build_tree
from .engine import SpeculativeDecoder, generate
from .kv_cache import crop_cache
from .models import cache_dir
from .target import Target
from .timing import device_name, synchronize
from .tree import DraftTree

log = logging.getLogger(__name__)
VERSION = 2  # 2: the target's packed CPU layers change the costs
TOP_K_GRID = (1, 2, 3, 4, 6, 8, 10)
NODES_GRID = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
BEAM = 10  # mlp_topk and pruning of every candidate (and of the calibration tree)
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


# -- measurements ------------------------------------------------------------------------------
def _timed(fn, reps: int, device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _chain(root: int, n: int, vocab: int) -> DraftTree:
    toks = tuple((root + i) % vocab for i in range(n))
    return DraftTree(toks, tuple(range(-1, n - 1)), tuple(range(n)), ("root",) + ("serial1",) * (n - 1),
                     (0.0,) * n, (0.0,) * n)


@torch.inference_mode()
def measure_verify(session: SpeculativeDecoder, nodes=NODES_GRID, reps: int = 3) -> tuple[float, dict]:
    """(seconds per plain decoding step, {n: seconds to verify n tree tokens}) at the session's context."""
    target, cache = session.target, session.cache
    past, dev = cache.get_seq_length(), target.device

    def forward(tree: DraftTree | None):
        if tree is None:
            ids, pos, mask = torch.tensor([session.generated[-1]], device=dev), torch.tensor([past], device=dev), None
        else:
            ids = torch.tensor(tree.tokens, device=dev)
            pos, mask = tree.position_ids(past, dev)[0], tree.attention_mask(past, target.dtype, dev)
        target.logits(target.forward(ids, pos, mask, cache)).argmax(-1)
        crop_cache(cache, past)

    ar = _timed(lambda: forward(None), reps, dev)
    costs = {str(n): _timed(lambda n=n: forward(_chain(session.generated[-1], n, target.vocab_size)), reps, dev)
             for n in nodes}
    return ar, costs


@torch.inference_mode()
def measure_draft(session: SpeculativeDecoder, mode: str, reps: int = 3) -> dict:
    """{"top_k,depth": seconds to draft a tree} at the session's context."""
    out = {}
    for k in TOP_K_GRID:
        for depth in range(1, session.ctx.drafter.cfg.max_depth + 1):
            cfg = TreeConfig(mode=mode, top_k=k, mlp_topk=BEAM, pruning=BEAM, total_tokens=2, depth=depth)
            out[f"{k},{depth}"] = _timed(lambda cfg=cfg: build_tree(session.ctx, session.generated[-1], cfg), reps,
                                         session.target.device)
    return out


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
                      hashlib.sha1(w).hexdigest(), drafter.shared.lm_head.shape[0],
                      target.packed_linears > 0])
    return hashlib.sha1(raw.encode()).hexdigest()[:16]


def _cache_path(target: Target, drafter: GumihoDrafter, mode: str) -> Path:
    return cache_dir() / "autotree" / f"{_fingerprint(target, drafter, mode)}.json"


def cached_tree_choice(target: Target, drafter: GumihoDrafter, mode: str = "gumiho") -> TreeChoice | None:
    """The choice measured earlier for this device, target, drafter and mode, or None (measures nothing)."""
    path = _cache_path(target, drafter, mode)
    if not path.is_file():
        return None
    try:
        return TreeChoice.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring an unreadable auto-tree cache file %s", path)
        return None


def choose_tree(target: Target, drafter: GumihoDrafter, mode: str = "gumiho", prompts: list[list[int]] | None = None,
                refresh: bool = False, progress=None, max_new_tokens: int = 32) -> TreeChoice:
    """Measure (or read from the cache) and return the best tree for this device. progress(frac, text)."""
    progress = progress or (lambda frac, text: None)
    path = _cache_path(target, drafter, mode)
    cached = None if refresh else cached_tree_choice(target, drafter, mode)
    if cached is not None:
        return cached
    if prompts is None:
        from .text import encode_prompt

        prompts = [encode_prompt(target.tokenizer, p) for p in CALIBRATION_PROMPTS]
    steps, commit = [], []
    for i, ids in enumerate(prompts):
        progress(0.6 * i / len(prompts), "measuring acceptance with a large tree")
        session = SpeculativeDecoder(target, drafter, ids, DecodeConfig(max_new_tokens=max_new_tokens),
                                     CALIBRATION_TREE.with_(mode=mode))
        run = generate(session)
        for rec in run.records[1:]:
            steps.append((rec.tree, rec.verdict.target_token))
            commit.append(rec.commit_s)
    progress(0.6, "timing verification and drafting on this device")
    probe = SpeculativeDecoder(target, drafter, prompts[0], DecodeConfig(max_new_tokens=max_new_tokens),
                               CALIBRATION_TREE.with_(mode=mode))
    while not probe.done and len(probe.generated) < max_new_tokens // 2:  # a realistic context, caches consistent
        probe.step()
    ar_s, verify_s = measure_verify(probe)
    progress(0.8, "timing drafting")
    draft_s = measure_draft(probe, mode)
    choice = _best(steps, mode, drafter.cfg.serial_steps, verify_s, draft_s, statistics.mean(commit or [0.0]), ar_s,
                   device_name(target.device))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(choice.to_dict(), indent=1))
    progress(1.0, "done")
    log.info("%s", choice.summary())
    return choice


def _best(steps, mode, serial_steps, verify_s, draft_s, commit_s, ar_s, device) -> TreeChoice:
    scored = []
    for k, depth in sorted(tuple(int(x) for x in key.split(",")) for key in draft_s):  # measured (top_k, depth)
        orders = [candidate_order(t, mode, k, depth, serial_steps) for t, _ in steps]
        for n in NODES_GRID:
            acc = [accepted_in(t, {0, *order[: n - 1]}, tt) for (t, tt), order in zip(steps, orders)]
            per_step = 1 + statistics.mean(acc)
            step = draft_s[f"{k},{depth}"] + verify_s[str(n)] + commit_s
            scored.append((per_step / step, per_step, step, k, depth, n))
    scored.sort(reverse=True)
    best = scored[0]

    def cfg(row):
        return TreeConfig(mode=mode, top_k=row[3], mlp_topk=BEAM, pruning=BEAM, total_tokens=row[5], depth=row[4])

    alternatives = [{"tree": cfg(r).to_dict(), "tokens_per_step": round(r[1], 3), "step_s": round(r[2], 5),
                     "tokens_per_s": round(r[0], 2)} for r in scored[1:6]]
    return TreeChoice(cfg(best), best[1], best[2], ar_s, verify_s, alternatives, device, len(steps), serial_steps)

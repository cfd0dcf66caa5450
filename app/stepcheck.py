"""The steps of a run file, checked as the engine makes them, after the schema has checked every field: step 0
the prefill; then one speculative step per target pass (plain decoding: one autoregressive step), each
committing its accepted path and the bonus token, cut short only on the last step, which alone ends the run.

A tree's parents come before their children, each node one level below its parent, one proposer per depth;
the verdict's accepted path runs down the tree from the root. What the pictures rely on is checked here, so
rendering a checked step can neither fail nor cost more than its bounded size.
"""
from __future__ import annotations

from gumiho_core import (AR, AUTOREGRESSIVE, HYBRID, MAX_TREE_DEPTH, MLP_HEAD, PARALLEL, PREFILL, ROOT, SERIAL_STEP,
                         SPECULATIVE, DecodeConfig, StepFile, TreeConfig)

from . import checks as c

_SERIAL = {f"{SERIAL_STEP}{d}": d for d in range(1, MAX_TREE_DEPTH + 1)}
_MLP = {f"{MLP_HEAD}{m}": m for m in range(1, MAX_TREE_DEPTH + 1)}
_PER_STEP = "tokens per step: the accepted path and the bonus"


def check_steps(records: list[StepFile], method: str, decode: DecodeConfig, cfg: TreeConfig) -> None:
    if not records:
        c.refuse("the run file has no steps")
    total = 0
    for i, rec in enumerate(records):
        where = f"step {i}"
        if rec.index != i:
            c.refuse(f"step {i} of the run file says it is step {rec.index}: the steps are out of order")
        if rec.total_steps != i:
            c.refuse(f"{where}: total_steps must be {i} (the decoding steps so far)")
        kind = PREFILL if i == 0 else AUTOREGRESSIVE if method == AR else SPECULATIVE
        if rec.kind != kind:
            c.refuse(f"{where}: kind must be {kind}; found {c.kind(rec.kind)}")
        path = _speculative(rec, where, cfg) if kind == SPECULATIVE else _single(rec, where)
        new = list(rec.new_token_ids)
        c.at_most(len(new), len(path), "entries", f"{where}: new_token_ids", _PER_STEP)
        if path[0] is not None and new != path[: len(new)]:
            c.refuse(f"{where}: new_token_ids are not the accepted path's tokens and the bonus")
        _end(rec, where, i == len(records) - 1, cut=len(new) < len(path))
        total += len(new)
        if rec.total_new_tokens != total:
            c.refuse(f"{where}: total_new_tokens does not add up (the steps so far committed {total})")
        c.at_most(total, decode.max_new_tokens, "new tokens", f"{where}: the run", "its max_new_tokens")


def _end(rec: StepFile, where: str, last: bool, cut: bool) -> None:
    """Only the last step may end the run, and a step that ends it says why."""
    if rec.done != (rec.stop_reason is not None) or rec.done and not last:
        c.refuse(f"{where}: only the last step ends the run, and it gives a stop_reason")
    if cut and not rec.done:
        c.refuse(f"{where}: new_token_ids stop before the bonus token, yet the run goes on")


def _single(rec: StepFile, where: str) -> list:
    """The prefill and a plain decoding step: no draft, one token of the target's."""
    if rec.tree is not None or rec.verdict is not None or rec.phases:
        c.refuse(f"{where}: a {rec.kind} step has no tree, verdict or drafting phases")
    return [None]


def _speculative(rec: StepFile, where: str, cfg: TreeConfig) -> list[int]:
    """The tokens the step would commit uncut: the accepted path (root excluded) and the bonus."""
    if rec.tree is None or rec.verdict is None:
        c.refuse(f"{where}: a speculative step needs a tree and a verdict")
    t, v = rec.tree, rec.verdict
    _tree(t, f"{where}: tree", cfg)
    _phases(rec.phases, where, _proposers(t, f"{where}: tree", cfg.mode))
    _verdict(v, f"{where}: verdict", t.parents, max(t.depth))
    return [t.tokens[i] for i in v.accepted[1:]] + [v.bonus]


def _tree(t, where: str, cfg: TreeConfig) -> None:
    """Parallel arrays of one length; parents before children, each child one level below its parent."""
    n = len(t.tokens)
    c.at_most(n, cfg.total_tokens, "nodes", where, "the run's total_tokens")
    for key in ("parents", "depth", "proposer", "logprob", "score"):
        if len(getattr(t, key)) != n:
            c.refuse(f"{where}.{key} has {len(getattr(t, key))} entries for {n} nodes")
    parents, depth = t.parents, t.depth
    if parents[0] != -1 or not all(0 <= p < i for i, p in enumerate(parents) if i):
        c.refuse(f"{where}.parents must each name an earlier node (the root's: -1)")
    if depth[0] != 0 or not all(depth[i] == depth[parents[i]] + 1 for i in range(1, n)):
        c.refuse(f"{where}.depth must be 0 for the root and one more than the parent's for every other node")
    c.at_most(max(depth), cfg.depth, "levels", where, "the run's tree depth")


def _proposers(t, where: str, mode: str) -> set[str]:
    """One known proposer per depth: serial<depth>, or (hybrid mode) MLP head m at depth m or deeper (Medusa's
    head m drafts depth m; Gumiho's, depth m + its serial steps); the drafting phases the nodes came from."""
    by_depth = {0: ROOT}
    for i, (p, level) in enumerate(zip(t.proposer, t.depth)):
        ok = p == ROOT if i == 0 else _SERIAL.get(p) == level or mode == HYBRID and _MLP.get(p, level + 1) <= level
        if not ok:
            c.refuse(f"{where}.proposer[{i}] is {c.kind(p)}; a node at depth {level} is proposed by "
                     f"{SERIAL_STEP}{level}" + (f" or an MLP head ({MLP_HEAD}1…)" if mode == HYBRID and i else ""))
        if by_depth.setdefault(level, p) != p:
            c.refuse(f"{where}.proposer: the nodes at depth {level} name two proposers")
    return {PARALLEL if p in _MLP else p for level, p in by_depth.items() if level}


def _phases(phases, where: str, needed: set[str]) -> None:
    """The drafting phases, once each; every node's phase among them."""
    names = [p.name for p in phases]
    for j, name in enumerate(names):
        if name != PARALLEL and name not in _SERIAL:
            c.refuse(f"{where}: phases[{j}].name must be {PARALLEL} or {SERIAL_STEP}1…{SERIAL_STEP}{MAX_TREE_DEPTH}; "
                     f"found {c.kind(name)}")
    if len(set(names)) != len(names):
        c.refuse(f"{where}: phases name a phase twice")
    missing = needed - set(names)
    if missing:
        c.refuse(f"{where}: the tree has nodes of phase {min(missing)!r}, which its phases do not list")


def _verdict(v, where: str, parents: list, deepest: int) -> None:
    """The accepted path (root first, down the tree), and the target's view of every node."""
    n, accepted = len(parents), v.accepted
    c.at_most(len(accepted), deepest + 1, "entries", f"{where}.accepted", "nodes per path")
    if accepted[0] != 0 or max(accepted) >= n or any(parents[b] != a for a, b in zip(accepted, accepted[1:])):
        c.refuse(f"{where}: the accepted path is not a path of its tree")
    if len(v.target_token) != n or len(v.target_prob) not in (0, n):
        c.refuse(f"{where} does not cover every node of the tree")

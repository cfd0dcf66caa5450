"""The steps of a run file, checked as the engine makes them (gumiho_core's StepRecord.to_dict): step 0 the
prefill; then one speculative step per target pass (plain decoding: one autoregressive step), each committing
its accepted path and the bonus token, cut short only on the last step, which alone ends the run.

A tree's parents come before their children, each node one level below its parent, one proposer per depth;
the verdict's accepted path runs down the tree from the root. What the pictures rely on is checked here, so
rendering a checked step can neither fail nor cost more than its bounded size.
"""
from __future__ import annotations

from gumiho_core import (AR, AUTOREGRESSIVE, GUMIHO, PARALLEL, PREFILL, SPECULATIVE, STOP_REASONS, DecodeConfig,
                         TreeConfig)

from . import checks as c
from .limits import (MAX_COUNT, MAX_NEW_TOKENS, MAX_RECORDS, MAX_SECONDS, MAX_TOKEN_ID, MAX_TREE_DEPTH,
                     MAX_TREE_NODES, MIN_LOGPROB)

STEP_REQUIRED = ("index", "kind", "new_token_ids", "draft_s", "verify_s", "commit_s", "total_new_tokens",
                 "total_steps", "compute_s", "done")
STEP_OPTIONAL = ("tree", "phases", "verdict", "stop_reason")
TREE_KEYS = ("tokens", "parents", "depth", "proposer", "logprob", "score")
VERDICT_KEYS = ("accepted", "bonus", "target_token", "target_prob")
PHASE_KEYS = ("name", "depths", "candidates", "seconds")
ROOT, SERIAL_STEP, MLP_HEAD = "root", "serial", "mlp"  # proposers: the root, "serial<depth>", "mlp<head>"
_SERIAL = {f"{SERIAL_STEP}{d}": d for d in range(1, MAX_TREE_DEPTH + 1)}
_MLP = {f"{MLP_HEAD}{m}": m for m in range(1, MAX_TREE_DEPTH)}


def check_steps(records, method: str, decode: DecodeConfig, cfg: TreeConfig) -> list[dict]:
    c.listed(records, "field 'records'", MAX_RECORDS, "steps per run")
    if not records:
        c.refuse("the run file has no steps")
    total = 0
    for i, rec in enumerate(records):
        where = f"step {i}"
        c.fields(rec, where, STEP_REQUIRED, STEP_OPTIONAL)
        _numbers(rec, where, i)
        kind = PREFILL if i == 0 else AUTOREGRESSIVE if method == AR else SPECULATIVE
        c.one_of(rec["kind"], f"{where}: kind", (kind,))
        path = _speculative(rec, where, cfg) if kind == SPECULATIVE else _single(rec, where)
        new = c.wholes(rec["new_token_ids"], f"{where}: new_token_ids", 0, MAX_TOKEN_ID, len(path),
                       "tokens per step: the accepted path and the bonus", least=1)
        if path[0] is not None and new != path[: len(new)]:
            c.refuse(f"{where}: new_token_ids are not the accepted path's tokens and the bonus")
        _end(rec, where, i == len(records) - 1, cut=len(new) < len(path))
        total += len(new)
        if rec["total_new_tokens"] != total:
            c.refuse(f"{where}: total_new_tokens does not add up (the steps so far committed {total})")
        c.at_most(total, decode.max_new_tokens, "new tokens", f"{where}: the run", "its max_new_tokens")
    return records


def _numbers(rec: dict, where: str, i: int) -> None:
    if c.whole(rec["index"], f"{where}: index", 0, MAX_RECORDS) != i:
        c.refuse(f"step {i} of the run file says it is step {rec['index']}: the steps are out of order")
    if c.whole(rec["total_steps"], f"{where}: total_steps", 0, MAX_RECORDS) != i:
        c.refuse(f"{where}: total_steps must be {i} (the decoding steps so far)")
    c.whole(rec["total_new_tokens"], f"{where}: total_new_tokens", 1, MAX_NEW_TOKENS)
    for key in ("draft_s", "verify_s", "commit_s", "compute_s"):
        c.number(rec[key], f"{where}: {key}", 0.0, MAX_SECONDS)


def _end(rec: dict, where: str, last: bool, cut: bool) -> None:
    """Only the last step may end the run, and a step that ends it says why."""
    done, reason = c.flag(rec["done"], f"{where}: done"), rec.get("stop_reason")
    if reason is not None:
        c.one_of(reason, f"{where}: stop_reason", STOP_REASONS)
    if done != (reason is not None) or done and not last:
        c.refuse(f"{where}: only the last step ends the run, and it gives a stop_reason")
    if cut and not done:
        c.refuse(f"{where}: new_token_ids stop before the bonus token, yet the run goes on")


def _single(rec: dict, where: str) -> list:
    """The prefill and a plain decoding step: no draft, one token of the target's."""
    if rec.get("tree") is not None or rec.get("verdict") is not None or rec.get("phases", []) != []:
        c.refuse(f"{where}: a {rec['kind']} step has no tree, verdict or drafting phases")
    return [None]


def _speculative(rec: dict, where: str, cfg: TreeConfig) -> list[int]:
    """The tokens the step would commit uncut: the accepted path (root excluded) and the bonus."""
    if rec.get("tree") is None or rec.get("verdict") is None:
        c.refuse(f"{where}: a speculative step needs a tree and a verdict")
    tokens, parents, depth, phases = _tree(rec["tree"], f"{where}: tree", cfg)
    _phases(rec.get("phases", []), where, phases)
    accepted, bonus = _verdict(rec["verdict"], f"{where}: verdict", parents, max(depth))
    return [tokens[i] for i in accepted[1:]] + [bonus]


def _tree(d, where: str, cfg: TreeConfig) -> tuple[list, list, list, set]:
    """The tree's tokens, parents and depths, and the drafting phases its nodes came from."""
    c.fields(d, where, TREE_KEYS)
    tokens = c.wholes(d["tokens"], f"{where}.tokens", 0, MAX_TOKEN_ID, MAX_TREE_NODES, "nodes per tree", least=1)
    n = len(tokens)
    c.at_most(n, cfg.total_tokens, "nodes", where, "the run's total_tokens")
    for key in TREE_KEYS[1:]:
        if type(d[key]) is list and len(d[key]) != n:
            c.refuse(f"{where}.{key} has {len(d[key])} entries for {n} nodes")
    parents = c.wholes(d["parents"], f"{where}.parents", -1, n, n, "nodes per tree")
    if parents[0] != -1 or not all(0 <= p < i for i, p in enumerate(parents) if i):
        c.refuse(f"{where}.parents must each name an earlier node (the root's: -1)")
    depth = c.wholes(d["depth"], f"{where}.depth", 0, n, n, "nodes per tree")
    if depth[0] != 0 or not all(depth[i] == depth[parents[i]] + 1 for i in range(1, n)):
        c.refuse(f"{where}.depth must be 0 for the root and one more than the parent's for every other node")
    c.at_most(max(depth), cfg.depth, "levels", where, "the run's tree depth")
    c.numbers(d["logprob"], f"{where}.logprob", MIN_LOGPROB, 0.0, n, "nodes per tree")
    c.numbers(d["score"], f"{where}.score", MIN_LOGPROB, 0.0, n, "nodes per tree")
    return tokens, parents, depth, _proposers(c.listed(d["proposer"], f"{where}.proposer", n, ""), depth, where,
                                              cfg.mode)


def _proposers(proposer: list, depth: list, where: str, mode: str) -> set[str]:
    """One known proposer per depth: serial<depth>, or (Gumiho) MLP head m below the serial steps."""
    by_depth = {0: ROOT}
    for i, (p, level) in enumerate(zip(proposer, depth)):
        ok = p == ROOT if i == 0 else type(p) is str and (_SERIAL.get(p) == level or mode == GUMIHO
                                                          and _MLP.get(p, level) < level)
        if not ok:
            c.refuse(f"{where}.proposer[{i}] is {c.kind(p)}; a node at depth {level} is proposed by "
                     f"{SERIAL_STEP}{level}" + (f" or an MLP head ({MLP_HEAD}1…)" if mode == GUMIHO and i else ""))
        if by_depth.setdefault(level, p) != p:
            c.refuse(f"{where}.proposer: the nodes at depth {level} name two proposers")
    return {PARALLEL if p in _MLP else p for level, p in by_depth.items() if level}


def _phases(value, where: str, needed: set[str]) -> None:
    """The drafting phases, once each; every node's phase among them."""
    phases = c.listed(value, f"{where}: phases", MAX_TREE_DEPTH, "drafting phases per step")
    names = []
    for j, phase in enumerate(phases):
        at = f"{where}: phases[{j}]"
        c.fields(phase, at, PHASE_KEYS)
        if type(phase["name"]) is not str or phase["name"] != PARALLEL and phase["name"] not in _SERIAL:
            c.refuse(f"{at}.name must be {PARALLEL} or {SERIAL_STEP}1…{SERIAL_STEP}{MAX_TREE_DEPTH}; found "
                     f"{c.kind(phase['name'])}")
        names.append(phase["name"])
        c.wholes(phase["depths"], f"{at}.depths", 1, MAX_TREE_DEPTH, MAX_TREE_DEPTH, "tree depth", least=1)
        c.whole(phase["candidates"], f"{at}.candidates", 0, MAX_COUNT)
        c.number(phase["seconds"], f"{at}.seconds", 0.0, MAX_SECONDS)
    if len(set(names)) != len(names):
        c.refuse(f"{where}: phases name a phase twice")
    missing = needed - set(names)
    if missing:
        c.refuse(f"{where}: the tree has nodes of phase {min(missing)!r}, which its phases do not list")


def _verdict(d, where: str, parents: list, deepest: int) -> tuple[list, int]:
    """The accepted path (root first, down the tree), the bonus, and the target's view of every node."""
    n = len(parents)
    c.fields(d, where, VERDICT_KEYS)
    accepted = c.wholes(d["accepted"], f"{where}.accepted", 0, MAX_TREE_NODES, deepest + 1, "nodes per path",
                        least=1)
    if accepted[0] != 0 or max(accepted) >= n or any(parents[b] != a for a, b in zip(accepted, accepted[1:])):
        c.refuse(f"{where}: the accepted path is not a path of its tree")
    bonus = c.whole(d["bonus"], f"{where}.bonus", 0, MAX_TOKEN_ID)
    target = c.wholes(d["target_token"], f"{where}.target_token", 0, MAX_TOKEN_ID, n, "nodes per tree")
    probs = c.numbers(d["target_prob"], f"{where}.target_prob", 0.0, 1.0, n, "nodes per tree", nullable=True)
    if len(target) != n or len(probs) not in (0, n):
        c.refuse(f"{where} does not cover every node of the tree")
    return accepted, bonus

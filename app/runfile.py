"""A run saved as JSON, and read back with every field checked, so a replay needs no model.

A file from elsewhere is untrusted: it is size-limited, parsed as data only, and any fault is a
`RunFileError` whose message says which field is wrong.
"""
from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone

from gumiho_core import METHODS, SPECULATIVE, STEP_KINDS, DecodeConfig, GumihoError, StepRecord, TreeConfig

from .state import Run, Settings

FORMAT = "gumiho-visualiser-run"
VERSION = 1
MAX_BYTES = 5 * 1024 * 1024


class RunFileError(ValueError):
    """A run file that cannot be replayed; the message is for the user."""


def to_dict(run: Run) -> dict:
    s = run.settings
    return {
        "format": FORMAT, "version": VERSION, "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "prompt": s.prompt, "method": s.method, "preset": s.preset, "tree_source": s.tree_source,
        "decode": s.decode.to_dict(), "tree": s.tree.to_dict(),
        "target": run.target, "device": run.device, "prompt_tokens": run.prompt_tokens, "notes": run.notes,
        "text": run.text, "pieces": {str(k): v for k, v in sorted(run.pieces.items())},
        "special_ids": sorted(run.special_ids),
        "clock": [round(t, 6) for t in run.clock],
        "baseline": [[n, round(t, 6)] for n, t in run.baseline], "baseline_ids": run.baseline_ids,
        "records": [r.to_dict() for r in run.records],  # an unchecked node's probability is null, not NaN
    }


def dumps(run: Run) -> str:
    return json.dumps(to_dict(run), ensure_ascii=False, allow_nan=False)


def read(path: str) -> Run:
    """Load a run file from disk (the upload), refusing oversized ones before reading them."""
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise RunFileError(f"the run file is {size / 1e6:.1f} MB; at most {MAX_BYTES / 1e6:.0f} MB is accepted")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RunFileError("the run file is not UTF-8 text; export a run with the Export button") from None
    return loads(text)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def loads(text: str) -> Run:
    try:
        data = json.loads(text, parse_constant=_no_constants)  # plain JSON only: no NaN or Infinity
    except ValueError as e:  # json.JSONDecodeError, a NaN, or a number too large to parse
        raise RunFileError(f"the run file is not valid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RunFileError(f"this is not a run file of this app (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise RunFileError(f"run file version {data.get('version')!r} is not supported (this app reads {VERSION})")
    return _run(data)


def _get(data: dict, key: str, kind: type | tuple):
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RunFileError(f"field {key!r} must be a {names}; found {type(value).__name__}")
    return value


def _settings(data: dict) -> Settings:
    try:
        decode = DecodeConfig(**_get(data, "decode", dict))
        tree = TreeConfig(**_get(data, "tree", dict))
    except (GumihoError, TypeError) as e:
        raise RunFileError(f"the run file's settings are invalid: {e}") from None
    method = _get(data, "method", str)
    if method not in METHODS:
        raise RunFileError(f"field 'method' must be {', '.join(METHODS[:-1])} or {METHODS[-1]}; found {method!r}")
    source = data.get("tree_source", "")  # absent in files saved before the auto tree
    if not isinstance(source, str):
        raise RunFileError(f"field 'tree_source' must be a str; found {type(source).__name__}")
    return Settings(_get(data, "prompt", str), method, decode, tree, _get(data, "preset", str), source)


def _check_probs(record, i: int) -> None:
    """A verdict's probabilities are numbers in [0, 1], or null for a node the target never checked."""
    v = record.get("verdict") if isinstance(record, dict) else None
    probs = v.get("target_prob") if isinstance(v, dict) else None
    if isinstance(probs, list) and not all(p is None or isinstance(p, (int, float)) and not isinstance(p, bool)
                                           and 0 <= p <= 1 for p in probs):
        raise RunFileError(f"step {i} of the run file is malformed: target_prob must hold probabilities or null")


def _records(data: dict) -> list[StepRecord]:
    records = []
    for i, d in enumerate(_get(data, "records", list)):
        _check_probs(d, i)
        try:
            rec = StepRecord.from_dict(d)
        except (KeyError, TypeError, ValueError, AssertionError, AttributeError) as e:
            raise RunFileError(f"step {i} of the run file is malformed ({type(e).__name__}: {e})") from None
        if rec.index != i:
            raise RunFileError(f"step {i} of the run file says it is step {rec.index}: the steps are out of order")
        _check_record(rec, i, records[-1].total_new_tokens if records else 0)
        records.append(rec)
    if not records:
        raise RunFileError("the run file has no steps")
    return records


def _check_record(rec: StepRecord, i: int, tokens_before: int) -> None:
    """What the pictures rely on: a speculative step has a tree and a verdict whose path is in that tree."""
    def bad(why: str):
        raise RunFileError(f"step {i} of the run file is inconsistent: {why}")

    if rec.kind not in STEP_KINDS:
        bad(f"unknown kind {rec.kind!r}")
    if rec.total_new_tokens != tokens_before + len(rec.new_token_ids):
        bad("total_new_tokens does not add up")
    if rec.kind != SPECULATIVE:
        return
    tree, v = rec.tree, rec.verdict
    if tree is None or v is None:
        bad("a speculative step needs a tree and a verdict")
    n = len(tree)
    if v.accepted[:1] != (0,) or any(tree.parents[b] != a for a, b in zip(v.accepted, v.accepted[1:]) if b < n) \
            or max(v.accepted) >= n:
        bad("the accepted path is not a path of its tree")
    if len(v.target_token) != n or len(v.target_prob) not in (0, n):
        bad("the verdict does not cover every node of the tree")


def _times(values: list, name: str) -> list[float]:
    """Non-decreasing, finite, non-negative seconds."""
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t >= 0
               for t in values):
        raise RunFileError(f"field {name!r} must hold non-negative numbers of seconds")
    if any(b < a for a, b in zip(values, values[1:])):
        raise RunFileError(f"field {name!r} must not go back in time")
    return [float(t) for t in values]


def _int_list(values: list, name: str) -> list[int]:
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in values):
        raise RunFileError(f"field {name!r} must hold non-negative whole numbers")
    return list(values)


def _pieces(data: dict) -> dict[int, str]:
    raw = _get(data, "pieces", dict)
    if not all(k.isdigit() and isinstance(v, str) for k, v in raw.items()):
        raise RunFileError("field 'pieces' must map token ids to their text")
    return {int(k): v for k, v in raw.items()}


def _baseline(data: dict) -> list[tuple[int, float]]:
    pairs = _get(data, "baseline", list)
    if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise RunFileError("field 'baseline' must hold [tokens, seconds] pairs")
    tokens = _int_list([p[0] for p in pairs], "baseline")
    return list(zip(tokens, _times([p[1] for p in pairs], "baseline")))


def _run(data: dict) -> Run:
    records = _records(data)
    clock = _times(_get(data, "clock", list), "clock")
    if len(clock) != len(records):
        raise RunFileError(f"field 'clock' has {len(clock)} times for {len(records)} steps")
    return Run(
        settings=_settings(data), target=_get(data, "target", str), device=_get(data, "device", str),
        prompt_tokens=_get(data, "prompt_tokens", int),
        notes=[str(n) for n in _get(data, "notes", list)],
        records=records, clock=clock, baseline=_baseline(data),
        baseline_ids=_int_list(_get(data, "baseline_ids", list), "baseline_ids"),
        pieces=_pieces(data), special_ids=set(_int_list(_get(data, "special_ids", list), "special_ids")),
        text=_get(data, "text", str),
    )

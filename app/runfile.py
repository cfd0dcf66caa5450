"""A run saved as JSON, and read back with every field checked, so a replay needs no model: the whole race (every
lane) when the run raced other drafting methods (runschema.py: version 2), the run and plain decoding otherwise.

A file from elsewhere is untrusted: it is size-limited, its JSON bounded before it is parsed, parsed as data
only, and checked whole (runcheck.py: the schema runschema.AppRunFile, then how the steps fit together) before
anything is built from it; any fault is a `RunFileError` whose one-line message names the field and the limit.
"""
from __future__ import annotations

import gc
import json
import os
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone

from gumiho_core import MAX_NOTES, RUN_FILE_VERSION, check_method

from .checks import RunFileError
from .limits import MAX_BYTES
from .runcheck import FORMAT, VERSION, check_json_text, check_run
from .runschema import AppRunFile
from .state import Run, Settings

__all__ = ["FORMAT", "MAX_BYTES", "VERSION", "RunFileError", "dumps", "loads", "read", "to_dict"]


def _race(run: Run) -> dict:
    """The race's other lanes (version 2), or nothing (a run without them is written as version 1)."""
    lanes = [{"method": m, "tree": run.rival_trees[m], "records": records} for m, records in run.rivals.items()
             if records]
    steps = {"trained_steps": run.trained_steps} if run.trained_steps else {}
    return {"lanes": lanes, "baseline_done": run.baseline_done, **steps} if lanes else {}


def to_dict(run: Run) -> dict:
    """The run as its file holds it: the schema (runschema.AppRunFile) reads the values and writes them as
    declared (times rounded, an unchecked node's probability null, not NaN)."""
    s, race = run.settings, _race(run)
    fields = {
        "format": FORMAT, "version": VERSION if race else RUN_FILE_VERSION,
        "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "prompt": s.prompt, "method": s.method, "preset": s.preset, "tree_source": s.tree_source,
        "decode": s.decode, "tree": s.tree, "target": run.target, "device": run.device,
        "prompt_tokens": run.prompt_tokens, "notes": run.notes, "text": run.text,
        "pieces": {str(k): v for k, v in sorted(run.pieces.items())}, "special_ids": sorted(run.special_ids),
        "clock": run.clock, "baseline": run.baseline, "baseline_ids": run.baseline_ids, "records": run.records,
        **({"dtype": run.dtype} if run.dtype else {}),  # not recorded: left out, as in older files
        **race,
    }
    return AppRunFile.model_validate(fields, strict=False).model_dump(mode="json", exclude_unset=True)


def dumps(run: Run) -> str:
    """The run's file. A race too long for what a file may hold (MAX_BYTES, runcheck's JSON budget) is written
    without its other drafting lanes, with a note saying so: every file the page writes, it reads back."""
    text = json.dumps(to_dict(run), ensure_ascii=False, allow_nan=False)
    if run.rivals and not _within_limits(text):
        note = (f"The race's other lanes ({', '.join(run.rivals)}) were left out of this file: with them it would "
                f"exceed what a run file may hold ({MAX_BYTES / 1e6:.0f} MB, or the JSON budget).")
        alone = replace(run, rivals={}, rival_trees={}, notes=[*run.notes, note][:MAX_NOTES])
        text = json.dumps(to_dict(alone), ensure_ascii=False, allow_nan=False)
    return text


def _within_limits(text: str) -> bool:
    if len(text.encode("utf-8")) > MAX_BYTES:
        return False
    try:
        check_json_text(text)
    except RunFileError:
        return False
    return True


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
    del raw
    return loads(text)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


@contextmanager
def _cyclic_gc_paused():
    """Parsing and checking a file makes up to a million small acyclic objects, and meanwhile Python's cyclic
    collector would scan the whole heap again and again (80% of a 511-step file's check, measured); reference
    counting still frees everything. Process-wide, for well under a second."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def loads(text: str) -> Run:
    """The run in `text`, checked whole first: a RunFileError, or a Run that every picture can show."""
    check_json_text(text)
    with _cyclic_gc_paused():
        try:
            data = json.loads(text, parse_constant=_no_constants)  # plain JSON only: no NaN or Infinity
        except (ValueError, RecursionError) as e:  # json.JSONDecodeError, a NaN, or a number too long to parse
            raise RunFileError(f"the run file is not valid JSON ({str(e)[:200]})") from None
        return _run(check_run(data))


def _run(checked) -> Run:
    doc = checked.doc
    settings = Settings(doc.prompt, check_method(doc.method), checked.decode, checked.tree, doc.preset,
                        doc.tree_source)
    records = [r.build() for r in doc.records]
    done = doc.baseline_done if doc.baseline_done is not None else bool(records) and records[-1].done
    return Run(
        settings=settings, target=doc.target, device=doc.device, prompt_tokens=doc.prompt_tokens,
        notes=list(doc.notes), records=records, clock=list(doc.clock),
        baseline=[(n, float(t)) for n, t in doc.baseline], baseline_ids=list(doc.baseline_ids), baseline_done=done,
        pieces={int(k): v for k, v in doc.pieces.items()}, special_ids=set(doc.special_ids), text=doc.text,
        dtype=doc.dtype, rivals={lane.method: [r.build() for r in lane.records] for lane in doc.lanes},
        rival_trees=dict(checked.lane_trees), trained_steps=dict(doc.trained_steps),
    )

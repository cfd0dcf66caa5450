"""The one validator of a run file: it accepts only what the app itself writes (runfile.to_dict), and refuses
anything else with one line naming the field and the limit. Nothing is built or shown before it has passed.

Three passes. `check_json_text` bounds what parsing can cost (nesting, items, strings) on the raw text, before any
object is made. `check_run` checks every field against the run file's schema (runschema.AppRunFile, gumiho_core's RunFile and the race's lanes: types, ranges
and limits, declared once), then what no single field can say: the settings are valid settings, the steps fit
together the way the engine makes them (stepcheck.py), the clocks only go forward.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

from pydantic import ValidationError

from gumiho_core import (MAX_ANSWER_CHARS, MAX_NEW_TOKENS, MAX_TREE_DEPTH, RUN_FILE_FORMAT, DecodeConfig,
                         GumihoError, TreeConfig, check_method)

from . import checks as c
from .limits import MAX_JSON_CONTAINERS, MAX_JSON_ITEMS, MAX_JSON_NESTING, MAX_JSON_STRINGS
from .runschema import RACE_VERSION, VERSIONS, AppRunFile
from .stepcheck import check_steps

FORMAT, VERSION = RUN_FILE_FORMAT, RACE_VERSION

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def check_json_text(text: str) -> None:
    """Refuse JSON that would cost too much to parse: counted on the text with its strings blanked out."""
    bare, strings = _STRING.subn('""', text)
    c.at_most(strings, MAX_JSON_STRINGS, "strings", "the run file", "JSON strings per file")
    containers = bare.count("[") + bare.count("{")
    c.at_most(containers, MAX_JSON_CONTAINERS, "lists and objects", "the run file", "JSON containers per file")
    items = bare.count(",") + bare.count(":") + containers + 1  # every value but the first in each container
    c.at_most(items, MAX_JSON_ITEMS, "values", "the run file", "JSON values per file")
    nesting = max(accumulate(_DEPTH_STEP[b] for b in _NOT_BRACKETS.sub("", bare)), default=0)
    c.at_most(nesting, MAX_JSON_NESTING, "levels of nesting", "the run file", "JSON nesting")


@dataclass(frozen=True)
class Checked:
    """A checked run file: its fields as the schema read them, and its settings made from them."""

    doc: AppRunFile
    decode: DecodeConfig
    tree: TreeConfig
    lane_trees: dict[str, TreeConfig]  # the race's other lanes' trees, by method


def check_run(data) -> Checked:
    """Every field of a parsed run file, or a RunFileError naming the first that is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        c.refuse(f"this is not a run file of this app (no \"format\": \"{FORMAT}\")")
    if data.get("version") not in VERSIONS or type(data.get("version")) is not int:
        c.refuse(f"run file version {c.shown(data.get('version'))} is not supported (this app reads "
                 f"{' and '.join(map(str, VERSIONS))})")
    try:
        doc = AppRunFile.model_validate(data)
    except ValidationError as e:
        c.refuse(c.explain(e.errors(include_url=False)[0], AppRunFile))
    checked = Checked(doc, _config(doc.decode), _config(doc.tree), {lane.method: _config(lane.tree)
                                                                     for lane in doc.lanes})
    c.at_most(checked.decode.max_new_tokens, MAX_NEW_TOKENS, "tokens", "field 'decode.max_new_tokens'",
              "new tokens per run")
    c.at_most(checked.tree.depth, MAX_TREE_DEPTH, "levels", "field 'tree.depth'", "tree depth")
    check_steps(doc.records, doc.method, checked.decode, checked.tree)
    _lanes(checked)
    _answer(doc)
    if len(doc.clock) != len(doc.records):
        c.refuse(f"field 'clock' has {len(doc.clock)} times for {len(doc.records)} steps")
    c.in_order(doc.clock, "field 'clock'")
    c.in_order([n for n, _ in doc.baseline], "field 'baseline' (its token counts)", strictly=True)
    c.in_order([t for _, t in doc.baseline], "field 'baseline'")
    return checked


def _lanes(checked: Checked) -> None:
    """The race's other lanes: each another drafting method than the run's, once, with steps that fit together."""
    doc, seen = checked.doc, {check_method(checked.doc.method)}
    for lane in doc.lanes:
        if lane.method in seen:
            c.refuse(f"field 'lanes' has a second lane of method {lane.method!r} (the run's own, or one before)")
        seen.add(lane.method)
        try:
            check_steps(lane.records, lane.method, checked.decode, checked.lane_trees[lane.method])
        except c.RunFileError as e:
            c.refuse(f"lane {lane.method}: {e}")
        c.in_order([r.compute_s for r in lane.records], f"lane {lane.method}: its steps' compute_s")
    for method in doc.trained_steps:
        if method not in seen:
            c.refuse(f"field 'trained_steps' names method {method!r}, which is neither the run's nor a lane's")


def _config(fields):
    """A DecodeConfig or TreeConfig from checked fields; its own rules (temperature >= 0, ...) say the rest."""
    try:
        return fields.build()
    except GumihoError as e:
        c.refuse(f"the run file's settings are invalid: {e}")


def _answer(doc: AppRunFile) -> None:
    """The committed tokens' texts are the answer on screen: bounded like `text`."""
    chars = sum(len(doc.pieces.get(str(t), "")) for r in doc.records for t in r.new_token_ids)
    c.at_most(chars, MAX_ANSWER_CHARS, "characters in its committed tokens", "the run", "characters per answer")

"""The one validator of a run file: it accepts only what the app itself writes (runfile.to_dict), within the
limits of limits.py, and refuses anything else with one line naming the field and the limit. Nothing is built
or shown before it has passed.

Two passes. `check_json_text` bounds what parsing can cost (nesting, items, strings) on the raw text, before any
object is made. `check_run` checks every field of the parsed document: types, ranges and known names
(checks.py), then that the steps fit together the way the engine makes them (stepcheck.py).
"""
from __future__ import annotations

import re
import sys
from dataclasses import MISSING, dataclass, fields as config_fields
from itertools import accumulate

from gumiho_core import MAX_SEED, METHODS, DecodeConfig, GumihoError, TreeConfig

from . import checks as c
from .limits import (MAX_ANSWER_CHARS, MAX_JSON_CONTAINERS, MAX_JSON_ITEMS, MAX_JSON_NESTING, MAX_JSON_STRINGS,
                     MAX_NAME_CHARS, MAX_NEW_TOKENS, MAX_NOTE_CHARS, MAX_NOTES, MAX_PIECE_CHARS, MAX_PROMPT_CHARS,
                     MAX_SECONDS, MAX_SPECIAL_IDS, MAX_TOKEN_ID, MAX_TREE_DEPTH, lone_surrogate)
from .state import FULL_PRECISION, HALF_PRECISION
from .stepcheck import check_steps

FORMAT = "gumiho-visualiser-run"
VERSION = 1
REQUIRED = ("format", "version", "prompt", "method", "preset", "decode", "tree", "target", "device", "prompt_tokens",
            "notes", "text", "pieces", "special_ids", "clock", "baseline", "baseline_ids", "records")
OPTIONAL = ("saved", "tree_source", "dtype")  # absent in older files: tree_source before the auto tree, dtype
# before the exactness line told fp32 from half precision

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
# "7,12,": token ids as JSON keys, each at most as many digits as MAX_TOKEN_ID (all nines)
_TOKEN_KEYS = re.compile(rf"(?:(?:0|[1-9][0-9]{{0,{len(str(MAX_TOKEN_ID)) - 1}}}),)*")


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
    """The settings of a checked run file, made from checked values."""

    decode: DecodeConfig
    tree: TreeConfig


def check_run(data) -> Checked:
    """Every field of a parsed run file, or a RunFileError naming the first that is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        c.refuse(f"this is not a run file of this app (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION or type(data.get("version")) is not int:
        c.refuse(f"run file version {c.shown(data.get('version'))} is not supported (this app reads {VERSION})")
    c.fields(data, "the run file", REQUIRED, OPTIONAL)
    _texts(data)
    settings = Checked(_config(DecodeConfig, data["decode"], "decode"), _config(TreeConfig, data["tree"], "tree"))
    c.at_most(settings.decode.max_new_tokens, MAX_NEW_TOKENS, "tokens", "field 'decode.max_new_tokens'",
              "new tokens per run")
    c.at_most(settings.tree.depth, MAX_TREE_DEPTH, "levels", "field 'tree.depth'", "tree depth")
    c.one_of(data["method"], "field 'method'", METHODS)
    if "dtype" in data:
        c.one_of(data["dtype"], "field 'dtype'", FULL_PRECISION + HALF_PRECISION)
    c.whole(data["prompt_tokens"], "field 'prompt_tokens'", 1, MAX_SEED)
    _pieces(data["pieces"])
    records = check_steps(data["records"], data["method"], settings.decode, settings.tree)
    _answer(records, data["pieces"])
    _clock(data["clock"], len(records))
    _baseline(data)
    return settings


def _texts(data: dict) -> None:
    c.text(data["prompt"], "field 'prompt'", MAX_PROMPT_CHARS, "characters per prompt")
    c.text(data["text"], "field 'text'", MAX_ANSWER_CHARS, "characters per answer")
    for key in ("target", "device", "preset", "saved"):
        if key in data:
            c.text(data[key], f"field {key!r}", MAX_NAME_CHARS, "characters per name")
    if "tree_source" in data:
        c.text(data["tree_source"], "field 'tree_source'", MAX_NOTE_CHARS, "characters per note")
    for i, note in enumerate(c.listed(data["notes"], "field 'notes'", MAX_NOTES, "notes per run")):
        c.text(note, f"field 'notes'[{i}]", MAX_NOTE_CHARS, "characters per note")


def _config(cls, value, key: str):
    """A DecodeConfig or TreeConfig from its fields, each of its default's JSON type; absent ones default."""
    where = f"field {key!r}"
    known = {f.name: f.default for f in config_fields(cls) if f.default is not MISSING}
    c.fields(value, where, optional=tuple(known))
    for name, x in value.items():
        default, at = known[name], f"field '{key}.{name}'"
        if isinstance(default, bool):
            c.flag(x, at)
        elif isinstance(default, int):
            c.whole(x, at, -MAX_SEED, MAX_SEED)  # the config says which range (and shows it)
        elif isinstance(default, float):
            c.number(x, at, -sys.float_info.max, sys.float_info.max)
        else:
            c.text(x, at, MAX_NAME_CHARS, "characters per name")
    try:
        return cls(**value)
    except GumihoError as e:
        c.refuse(f"the run file's settings are invalid: {e}")


def _pieces(value) -> None:
    """Token id (as JSON writes an int key: plain digits) -> its text. Checked all at once first (a file may
    hold a hundred thousand), then one by one where that fails, to name the first bad one."""
    c.mapping(value, "field 'pieces'")
    keys, texts = ",".join(value) + ",", list(value.values())
    if (_TOKEN_KEYS.fullmatch(keys) and all(type(t) is str for t in texts)
            and max(map(len, texts), default=0) <= MAX_PIECE_CHARS and lone_surrogate("".join(texts)) is None):
        return
    for key, piece in value.items():
        if _TOKEN_KEYS.fullmatch(key + ",") is None:
            c.refuse(f"field 'pieces' maps token ids to their text; {c.shown(key)} is not a token id")
        c.text(piece, f"field 'pieces'[{key}]", MAX_PIECE_CHARS, "characters per token text")


def _answer(records: list[dict], pieces: dict[str, str]) -> None:
    """The committed tokens' texts are the answer on screen: bounded like `text`."""
    chars = sum(len(pieces.get(str(t), "")) for r in records for t in r["new_token_ids"])
    c.at_most(chars, MAX_ANSWER_CHARS, "characters in its committed tokens", "the run", "characters per answer")


def _clock(clock, steps: int) -> None:
    c.numbers(clock, "field 'clock'", 0.0, MAX_SECONDS, steps, "one time per step")
    if len(clock) != steps:
        c.refuse(f"field 'clock' has {len(clock)} times for {steps} steps")
    c.in_order(clock, "field 'clock'")


def _baseline(data: dict) -> None:
    """Plain decoding of the same prompt: (tokens, seconds) after each of its steps, and its tokens."""
    pairs = c.listed(data["baseline"], "field 'baseline'", MAX_NEW_TOKENS, "plain decoding steps")
    for i, pair in enumerate(pairs):
        c.listed(pair, f"field 'baseline'[{i}]", 2, "[tokens, seconds]", least=2)
        c.whole(pair[0], f"field 'baseline'[{i}][0]", 1, MAX_NEW_TOKENS)
        c.number(pair[1], f"field 'baseline'[{i}][1]", 0.0, MAX_SECONDS)
    c.in_order([p[0] for p in pairs], "field 'baseline' (its token counts)", strictly=True)
    c.in_order([p[1] for p in pairs], "field 'baseline'")
    c.wholes(data["baseline_ids"], "field 'baseline_ids'", 0, MAX_TOKEN_ID, MAX_NEW_TOKENS, "tokens per run")
    c.wholes(data["special_ids"], "field 'special_ids'", 0, MAX_TOKEN_ID, MAX_SPECIAL_IDS, "special tokens")

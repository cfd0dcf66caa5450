"""The words of a refusal. A run file's fields are checked by its schema (gumiho_core.RunFile, strict pydantic);
`explain` turns the first fault pydantic finds into one line that says where the value is, what it is and what
is allowed, naming the limit it broke from the schema's own declaration. The checks no single field can make
(runcheck.py, stepcheck.py) refuse through `refuse` in the same words."""
from __future__ import annotations

import types
import typing
from typing import Annotated, NoReturn

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .limits import lone_surrogate

_KINDS = {bool: "true/false", int: "a whole number", float: "a number", str: "text", list: "a list",
          dict: "an object", type(None): "null"}
_QUOTE_CHARS = 40  # a bad value quoted in a message
_MUST = {"int_type": "a whole number", "int_from_float": "a whole number", "bool_type": "true or false",
         "string_type": "text", "list_type": "a list", "tuple_type": "a list", "dict_type": "an object",
         "model_type": "an object", "model_attributes_type": "an object"}
_RANGE = ("finite_number", "greater_than_equal", "less_than_equal")


class RunFileError(ValueError):
    """A run file that cannot be replayed; the message (one line) is for the user."""


def refuse(message: str) -> NoReturn:
    raise RunFileError(message)


def shown(value) -> str:
    """`value` as a message quotes it: short, on one line, as JSON would write it."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (list, dict)):
        return f"{_KINDS[type(value)]} of {len(value)}"
    if isinstance(value, str):
        return repr(value[:_QUOTE_CHARS]) + (f"… ({len(value)} characters)" if len(value) > _QUOTE_CHARS else "")
    text = repr(value)
    return text if len(text) <= _QUOTE_CHARS else f"{text[:_QUOTE_CHARS]}… ({len(text)} digits)"


def kind(value) -> str:
    """What `value` is, in JSON's words, quoted when it is short: "text 'abc'", "a list of 3", "null"."""
    name = _KINDS.get(type(value), type(value).__name__)
    return shown(value) if value is None or isinstance(value, (bool, list, dict)) else f"{name} {shown(value)}"


def at_most(count: int, limit: int, what: str, where: str, name: str) -> None:
    if count > limit:
        refuse(f"{where} has {count} {what}; at most {limit} are accepted ({name})")


def in_order(values, where: str, strictly: bool = False) -> None:
    """Non-decreasing (increasing if `strictly`) values: clocks do not go back, counts only grow."""
    if any(b < a or strictly and b == a for a, b in zip(values, values[1:])):
        refuse(f"{where} must {'only grow' if strictly else 'not go back in time'}")


def place(loc: tuple) -> str:
    """Where a value of the file is, as a user reads it: "step 3: tree.tokens[1]", "field 'decode.seed'"."""
    if len(loc) >= 2 and loc[0] == "records" and isinstance(loc[1], int):
        rest = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in loc[2:]).lstrip(".")
        return f"step {loc[1]}" + (f": {rest}" if rest else "")
    if len(loc) >= 3 and loc[0] == "lanes" and isinstance(loc[1], int):  # the race's lane n: as its own run
        return f"lane {loc[1]}: " + place(loc[2:])
    if not loc:
        return "the run file"
    names = 1 if loc[0] == "pieces" else next((i for i, k in enumerate(loc) if not isinstance(k, str)), len(loc))
    return f"field '{'.'.join(loc[:names])}'" + "".join(f"[{k}]" for k in loc[names:])


def _unwrap(tp) -> tuple[object, list, bool]:
    """(type, its constraints and markers, whether null is allowed), Annotated layers and `| None` taken off."""
    meta, nullable = [], False
    while True:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Annotated:
            tp = args[0]
            for m in args[1:]:
                meta.extend(m.metadata if isinstance(m, FieldInfo) else [m])
        elif origin in (typing.Union, types.UnionType) and type(None) in args:
            tp, nullable = next(a for a in args if a is not type(None)), True
        else:
            return tp, meta, nullable


def _spec(model, loc: tuple) -> tuple[object, list, bool]:
    """The declared type of the value at `loc` in `model`."""
    tp, meta, nullable = model, [], False
    for key in loc:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(key)
            if field is None:
                return None, [], False
            tp = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        else:
            args = typing.get_args(tp)
            tp = args[key] if typing.get_origin(tp) is tuple else args[-1]  # a list's item, a dict's value
        tp, meta, nullable = _unwrap(tp)
    return tp, meta, nullable


def _found(meta: list, attr: str, default=None):
    """A declared constraint (Ge's ge, Le's le) or marker (Limit's name, Means' what)."""
    return next((getattr(m, attr) for m in meta if hasattr(m, attr)), default)


def explain(error: dict, model: type[BaseModel]) -> str:
    """One line for one of pydantic's errors (`ValidationError.errors()`) about a value of `model`."""
    loc, code, value = tuple(error["loc"]), error["type"], error.get("input")
    where, ctx = place(loc), error.get("ctx") or {}
    if "[key]" in loc:
        return f"{place(loc[:1])} maps token ids to their text; {shown(loc[1])} is not a token id"
    if code == "missing":
        return f"{place(loc[:-1])} lacks the field {loc[-1]!r}"
    if code == "extra_forbidden":
        return f"{place(loc[:-1])} has a field this app does not write: {shown(loc[-1])}"
    tp, meta, nullable = _spec(model, loc)
    limit, lo, hi = _found(meta, "name"), _found(meta, "ge"), _found(meta, "le")
    if code in _MUST:
        return f"{where} must be {_MUST[code]}; found {kind(value)}"
    if code in ("float_type", "float_parsing"):
        return f"{where} must be a number{' or null' if nullable else ''}; found {kind(value)}"
    if code in _RANGE and tp is int:
        return f"{where} is {shown(value)}; it must be in [{lo}, {hi}]"
    if code in _RANGE:
        return f"{where} is {shown(value)}; it must be a finite number in [{lo:g}, {hi:g}]"
    if code == "string_unicode":
        at = lone_surrogate(value) or 0
        return (f"{where} is not valid text: character {at} is a lone surrogate (U+{ord(value[at]):04X}), which "
                "UTF-8 cannot encode")
    if code in ("string_too_long", "too_long"):
        what = "characters" if code == "string_too_long" else "entries"
        return f"{where} has {len(value)} {what}; at most {ctx['max_length']} are accepted ({limit})"
    if code == "too_short":
        return f"{where} has {len(value)} entries; at least {ctx['min_length']} are needed"
    if code == "literal_error":
        return f"{where} must be one of {', '.join(map(str, typing.get_args(tp)))}; found {kind(value)}"
    if code == "string_pattern_mismatch":
        return f"{where} must be {_found(meta, 'what', 'text of another form')}; found {kind(value)}"
    return f"{where} is {kind(value)}: {error['msg'][:200]}"


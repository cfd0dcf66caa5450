"""The checks a value from an untrusted run file goes through: JSON types (ints that are ints, finite numbers,
valid text, known names), ranges and limits. Each refusal is a RunFileError of one line that says where the
value is, what it is and what is allowed (and names the limit it broke)."""
from __future__ import annotations

from typing import NoReturn

from .limits import lone_surrogate

_KINDS = {bool: "true/false", int: "a whole number", float: "a number", str: "text", list: "a list",
          dict: "an object", type(None): "null"}
_QUOTE_CHARS = 40  # a bad value quoted in a message


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


def whole(value, where: str, lo: int, hi: int) -> int:
    if type(value) is not int:
        refuse(f"{where} must be a whole number; found {kind(value)}")
    if not lo <= value <= hi:
        refuse(f"{where} is {shown(value)}; it must be in [{lo}, {hi}]")
    return value


def number(value, where: str, lo: float, hi: float) -> float:
    if type(value) not in (int, float):
        refuse(f"{where} must be a number; found {kind(value)}")
    if not lo <= value <= hi:  # NaN and infinities fail too
        refuse(f"{where} is {shown(value)}; it must be a finite number in [{lo:g}, {hi:g}]")
    return value


def flag(value, where: str) -> bool:
    if type(value) is not bool:
        refuse(f"{where} must be true or false; found {kind(value)}")
    return value


def text(value, where: str, limit: int, name: str) -> str:
    """A string of at most `limit` characters that is valid Unicode (no lone surrogates)."""
    if type(value) is not str:
        refuse(f"{where} must be text; found {kind(value)}")
    at_most(len(value), limit, "characters", where, name)
    at = lone_surrogate(value)
    if at is not None:
        refuse(f"{where} is not valid text: character {at} is a lone surrogate (U+{ord(value[at]):04X}), "
               "which UTF-8 cannot encode")
    return value


def one_of(value, where: str, choices) -> str:
    if type(value) is not str or value not in choices:
        refuse(f"{where} must be one of {', '.join(choices)}; found {kind(value)}")
    return value


def listed(value, where: str, limit: int, name: str, least: int = 0) -> list:
    if type(value) is not list:
        refuse(f"{where} must be a list; found {kind(value)}")
    at_most(len(value), limit, "entries", where, name)
    if len(value) < least:
        refuse(f"{where} has {len(value)} entries; at least {least} are needed")
    return value


def wholes(values, where: str, lo: int, hi: int, limit: int, name: str, least: int = 0) -> list[int]:
    """A list of whole numbers in [lo, hi] (checked at C speed first; the first bad one is named)."""
    listed(values, where, limit, name, least)
    if not all(type(x) is int for x in values) or values and (min(values) < lo or max(values) > hi):
        for i, x in enumerate(values):
            whole(x, f"{where}[{i}]", lo, hi)
    return values


def numbers(values, where: str, lo: float, hi: float, limit: int, name: str, nullable: bool = False) -> list:
    listed(values, where, limit, name)
    for i, x in enumerate(values):
        if not (nullable and x is None or type(x) in (int, float) and lo <= x <= hi):
            if nullable and type(x) not in (int, float):
                refuse(f"{where}[{i}] must be a number or null; found {kind(x)}")
            number(x, f"{where}[{i}]", lo, hi)
    return values


def mapping(value, where: str) -> dict:
    if type(value) is not dict:
        refuse(f"{where} must be an object; found {kind(value)}")
    return value


def fields(value, where: str, required=(), optional=()) -> dict:
    """An object with all the `required` keys and no key the app does not write."""
    mapping(value, where)
    unknown = [k for k in value if k not in required and k not in optional]
    if unknown:
        refuse(f"{where} has a field this app does not write: {shown(unknown[0])}")
    missing = [k for k in required if k not in value]
    if missing:
        refuse(f"{where} lacks the field {missing[0]!r}")
    return value


def in_order(values, where: str, strictly: bool = False) -> None:
    """Non-decreasing (increasing if `strictly`) values: clocks do not go back, counts only grow."""
    if any(b < a or strictly and b == a for a, b in zip(values, values[1:])):
        refuse(f"{where} must {'only grow' if strictly else 'not go back in time'}")

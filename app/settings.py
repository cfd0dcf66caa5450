"""The Run form as one value, checked and turned into a `Request`: what the visitor asked for. Which tree each lane
then gets is the engine's one tree resolution (gumiho_core.resolve_tree), given this device's measurement: the
backend resolves a Request into the run's Settings.

Every check here raises GumihoError with a message that can be shown as is; gumiho_core's own config classes do
the range checks, so the app and the CLI agree on what is allowed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from gumiho_core import (AR, AUTO, CLASSROOM, CUSTOM, EAGLE, FASTEST, GUMIHO, MAX_NEW_TOKENS, MAX_PROMPT_CHARS,
                         MAX_TREE_DEPTH, MEDUSA, METHODS, PAPER, SMALL, TREE_FIELDS, TREE_PRESETS,
                         TREE_REQUESTS, REGISTRY, DecodeConfig, GumihoError, TreeConfig, check_method, preset_of)

from .limits import lone_surrogate

DEFAULT_PRESET = CLASSROOM  # the page teaches: every head in every step (the CLI and the bench put speed first)
PRESET_MENU = (CLASSROOM, FASTEST, AUTO, PAPER, SMALL, CUSTOM)  # the page's tree menu, in order
OLD_PRESETS = {"small (CPU)": SMALL}  # the name it had before the engine named the presets (run files, API callers)
RACE_DEFAULT = (GUMIHO, EAGLE, MEDUSA, AR)  # the race's lanes on a new page, where their heads load
API_TREES = TREE_REQUESTS  # the endpoint's choices, as the CLI's --tree


@dataclass(frozen=True)
class Form:
    """The Run form: the values a handler gets, as the visitor left them (not yet checked).

    The layout builds the same dataclass with a component in each field, so the page's inputs, the
    handler's values and the "run" API's parameters share this one order (API callers send them by position:
    the race the visitor ticks is kept with the visitor, Player.race, not here).
    """

    prompt: str
    method: str
    max_new_tokens: float
    temperature: float
    top_p: float
    seed: float
    preset: str
    top_k: float
    mlp_topk: float
    pruning: float
    total_tokens: float
    depth: float
    delay: float  # seconds per animation picture
    fast: bool  # one picture per step

    @property
    def inputs(self) -> list:
        """The fields in order (the layout's components, as a handler's inputs)."""
        return [getattr(self, f.name) for f in fields(self)]

    @property
    def tree(self) -> list:
        """The tree fields, in TREE_FIELDS order."""
        return [getattr(self, k) for k in TREE_FIELDS]


@dataclass(frozen=True)
class Request:
    """A run as asked for: the method shown step by step, the methods racing it, and the tree request that every
    drafting lane resolves in its own mode (the same budget for all)."""

    prompt: str
    method: str
    decode: DecodeConfig
    tree: str  # a request of TREE_REQUESTS, or CUSTOM with `shape`
    shape: TreeConfig | None = None  # the tree fields, for CUSTOM
    race: tuple[str, ...] | None = None  # the other drafting methods racing it (None: RACE_DEFAULT's that load);
    # plain decoding always runs beside them


def member_label(member: str) -> str:
    """A drafter of the family as the page names it: the label of the first method that drafts with it
    ("Gumiho", "EAGLE-2 style", "Medusa style")."""
    return next(m.label for m in REGISTRY.values() if m.drafter == member)


def method_choices(methods) -> list[tuple[str, str]]:
    """The Method radio: each method that can run, by the name a newcomer understands."""
    return [(REGISTRY[m].label, m) for m in methods]


def race_choices(methods) -> list[tuple[str, str]]:
    """The race's choices: every drafting method that can run (plain decoding always races)."""
    return [(REGISTRY[m].label, m) for m in methods if m != AR]


def race_value(methods) -> list[str]:
    """What a new page ticks for the race: RACE_DEFAULT's drafting methods that can run."""
    return [m for m in RACE_DEFAULT if m in methods and m != AR]


def whole(value, name: str) -> int:
    """An integer from a form field (which may hand over a float like 24.0, or None when empty)."""
    if value is None or value == "":
        raise GumihoError(f"{name} is empty: give a whole number")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value):
        raise GumihoError(f"{name} must be a whole number; got {value!r}")
    return int(value)


def number(value, name: str) -> float:
    if value is None or value == "":
        raise GumihoError(f"{name} is empty: give a number")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GumihoError(f"{name} must be a number; got {value!r}")
    return float(value)


def decode_settings(max_new_tokens, temperature, top_p, seed) -> DecodeConfig:
    n = whole(max_new_tokens, "max new tokens")
    if n > MAX_NEW_TOKENS:
        raise GumihoError(f"max new tokens is {n}; this app decodes at most {MAX_NEW_TOKENS} tokens per run")
    return DecodeConfig(max_new_tokens=n, temperature=number(temperature, "temperature"),
                        top_p=number(top_p, "top_p"), seed=whole(seed, "seed"))


def tree_settings(values) -> TreeConfig:
    """The tree fields' values, in TREE_FIELDS order."""
    tree = TreeConfig(**{k: whole(v, k) for k, v in zip(TREE_FIELDS, values, strict=True)})
    if tree.depth > MAX_TREE_DEPTH:
        raise GumihoError(f"depth is {tree.depth}; this app drafts at most {MAX_TREE_DEPTH} levels")
    return tree


def preset_fields(name: str) -> TreeConfig | None:
    """The shape a fixed preset fills the tree fields with (an old name too); None for the measured ones and custom."""
    return TREE_PRESETS.get(OLD_PRESETS.get(name, name))


def preset_name(tree: TreeConfig) -> str:
    """The preset whose shape the tree fields hold, or "custom"."""
    return preset_of(tree)


def check_prompt(prompt) -> str:
    if not isinstance(prompt, str):
        raise GumihoError(f"the prompt must be text; got {type(prompt).__name__}")
    if not prompt.strip():
        raise GumihoError("the prompt is empty: type something for the model to answer")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise GumihoError(f"the prompt is {len(prompt)} characters long; this app takes at most {MAX_PROMPT_CHARS}")
    at = lone_surrogate(prompt)
    if at is not None:
        raise GumihoError(f"the prompt is not valid text: character {at} is a lone surrogate "
                          f"(U+{ord(prompt[at]):04X}), which UTF-8 cannot encode")
    return prompt


def check_race(method: str, race) -> tuple[str, ...] | None:
    """The drafting methods racing `method`, each once, in the registry's order (plain decoding always races);
    None stays None: the default race, of the methods that load."""
    if race is None:
        return None
    if isinstance(race, str) or not all(isinstance(m, str) for m in race):
        raise GumihoError(f"the race must be a list of method names; got {race!r}")
    names = {check_method(m) for m in race}
    return tuple(m for m in METHODS if m in names and m not in (method, AR))


def tree_request(preset, values) -> tuple[str, TreeConfig | None]:
    """The tree the form asks for: a request by name (an old name read as the new), or the fields (custom)."""
    name = OLD_PRESETS.get(preset, preset)
    if name in TREE_REQUESTS:
        return name, None
    if name != CUSTOM:
        raise GumihoError(f"tree preset must be one of {', '.join(PRESET_MENU)}; got {preset!r}")
    return CUSTOM, tree_settings(values)


def parse_request(form: Form, race=None) -> Request:
    """All the form's values and the race ticked (None: the default) at once; the first bad one raises. A named
    preset ignores the tree fields."""
    decode = decode_settings(form.max_new_tokens, form.temperature, form.top_p, form.seed)
    prompt, method = check_prompt(form.prompt), check_method(form.method)
    tree, shape = tree_request(form.preset, form.tree)
    return Request(prompt, method, decode, tree, shape, check_race(method, race))


def api_settings(prompt, method, max_new_tokens, temperature, seed, tree: str = AUTO) -> Request:
    """The endpoint's values; everything it does not take is the CLI's default (tree auto, top_p 1, no race)."""
    if tree not in API_TREES:
        raise GumihoError(f"tree must be one of {', '.join(API_TREES)}; got {tree!r}")
    decode = decode_settings(max_new_tokens, temperature, DecodeConfig.top_p, seed)
    return Request(check_prompt(prompt), check_method(method), decode, tree)


"""The Run form as one value, turned into validated gumiho_core settings; the named tree presets.

Every check here raises GumihoError with a message that can be shown as is; gumiho_core's own
config classes do the range checks, so the app and the CLI agree on what is allowed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from gumiho_core import (MAX_NEW_TOKENS, MAX_PROMPT_CHARS, MAX_TREE_DEPTH, TREE_FIELDS, DecodeConfig, GumihoError,
                         TreeConfig, check_method)

from .limits import lone_surrogate
from .state import Settings
# auto: the fastest tree measured on this device that uses the MLP heads; fastest: of any depth (TreeChoice), as
# the CLI's --tree auto and --tree fastest. Both are known only once the device is measured.
AUTO, FASTEST, CUSTOM = "auto", "fastest", "custom"
MEASURED = (AUTO, FASTEST)
API_TREES = ("auto", "fastest", "paper")  # the endpoint's choices, as the CLI's --tree


@dataclass(frozen=True)
class Form:
    """The Run form: the values a handler gets, as the visitor left them (not yet checked).

    The layout builds the same dataclass with a component in each field, so the page's inputs, the
    handler's values and the "run" API's parameters share this one order.
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


def tree_presets(device: str | None = None) -> dict[str, TreeConfig]:
    """Named tree shapes, in menu order. `device` is for presets that depend on the hardware."""
    return {
        "paper": TreeConfig(),  # the authors' 64-node tree
        "small (CPU)": TreeConfig(top_k=6, mlp_topk=6, pruning=8, total_tokens=16),  # verification is costly on a CPU
    }


def fallback_preset(device: str) -> str:
    """What "auto" uses until this device has been measured: the authors' tree on a GPU, a small one on a CPU."""
    return "paper" if device.startswith("cuda") else "small (CPU)"


def preset_choices(device: str | None = None) -> list[str]:
    """The preset menu: auto first (the default), fastest, the fixed shapes, then custom."""
    return [*MEASURED, *tree_presets(device), CUSTOM]


def tree_source(preset: str) -> str:
    """Where a fixed (not auto) tree came from, in the words the CLI's tree_source uses."""
    named = {"paper": "the authors' tree", "small (CPU)": "the small (CPU) preset"}
    return named.get(preset, "the tree fields (custom)")


def preset_name(tree: TreeConfig, device: str | None = None) -> str:
    """The preset whose shape equals `tree` (the mode aside), or "custom"."""
    shape = {k: getattr(tree, k) for k in TREE_FIELDS}
    for name, cfg in tree_presets(device).items():
        if shape == {k: getattr(cfg, k) for k in TREE_FIELDS}:
            return name
    return CUSTOM


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


def parse_settings(form: Form, device: str) -> Settings:
    """All the form's values at once; the first bad one raises. With preset "auto" or "fastest" the tree fields
    are ignored and the tree stays None until the runner settles it for this device."""
    decode = decode_settings(form.max_new_tokens, form.temperature, form.top_p, form.seed)
    prompt, method = check_prompt(form.prompt), check_method(form.method)
    if form.preset in MEASURED:
        return Settings(prompt, method, decode, None, form.preset)
    tree = tree_settings(form.tree)
    name = preset_name(tree, device)
    return Settings(prompt, method, decode, tree, name, tree_source(name))


def api_settings(prompt, method, max_new_tokens, temperature, seed, tree: str = AUTO) -> Settings:
    """The endpoint's values; everything it does not take is the CLI's default (tree auto, top_p 1)."""
    if tree not in API_TREES:
        raise GumihoError(f"tree must be one of {', '.join(API_TREES)}; got {tree!r}")
    decode = decode_settings(max_new_tokens, temperature, DecodeConfig.top_p, seed)
    fixed = None if tree in MEASURED else TreeConfig()
    return Settings(check_prompt(prompt), check_method(method), decode, fixed, tree,
                    "" if fixed is None else tree_source(tree))

"""The decoding methods, in one registry: every front end (CLI, bench, app, run files, export) reads it.

A speculative method is a trained drafter of the family (config.ARCHITECTURES) and a way of drafting with it
(config.TREE_MODES). docs/method.md, "The drafter family", says what each is and why it is here.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import ARCHITECTURES, HYBRID, SERIAL, DrafterConfig
from .errors import GumihoError

AR, GUMIHO, EAGLE, MEDUSA, GUMIHO_SERIAL = "ar", "gumiho", "eagle", "medusa", "gumiho-serial"


@dataclass(frozen=True)
class Method:
    name: str  # what --method, run files and the API say
    label: str  # a newcomer's name for it
    drafter: str | None  # the family member whose weights draft (config.ARCHITECTURES); None: no drafting
    mode: str | None  # how it drafts (TreeConfig.mode); None for plain decoding
    about: str  # one line: what it is

    @property
    def speculative(self) -> bool:
        return self.drafter is not None


_ALL = (
    Method(GUMIHO, "Gumiho", "gumiho", HYBRID,
           "a 2-layer transformer drafts tokens 1-2 one after the other, 5 MLP heads draft tokens 3-7 at once"),
    Method(EAGLE, "EAGLE-2 style", "eagle", SERIAL,
           "a 1-layer transformer drafts every token one after the other (the paper's main baseline)"),
    Method(MEDUSA, "Medusa style", "medusa", HYBRID,
           "7 MLP heads read the target's last hidden state and draft tokens 1-7 at once"),
    Method(GUMIHO_SERIAL, "Gumiho transformer at every depth", "gumiho", SERIAL,
           "Gumiho's own 2-layer transformer at every depth: an ablation, more accurate and slower to draft"),
    Method(AR, "Plain decoding", None, None, "the target alone, one token per forward pass"),
)
REGISTRY = {m.name: m for m in _ALL}  # display order
METHODS = tuple(REGISTRY)  # the names, in display order
DRAFTING_METHODS = tuple(m.name for m in _ALL if m.speculative)  # the speculative ones
ALIASES = {"serial": GUMIHO_SERIAL}  # the name gumiho-serial had before the family (old run files, old scripts)


def method(name: str) -> Method:
    """The registered method called `name` (an old alias too); else an error that lists the names."""
    name = ALIASES.get(name, name) if isinstance(name, str) else name
    if name not in REGISTRY:
        raise GumihoError(f"method must be one of {', '.join(METHODS)}; got {name!r}")
    return REGISTRY[name]


def check_method(name: str) -> str:
    """The canonical name of a method (an alias resolved); else the error of method()."""
    return method(name).name


def member_of(cfg: DrafterConfig) -> str | None:
    """The family member whose architecture `cfg` has (ARCHITECTURES), or None for a shape of one's own."""
    for name, arch in ARCHITECTURES.items():
        if all(getattr(cfg, k) == v for k, v in arch.items()):
            return name
    return None


def check_drafter(name: str, cfg: DrafterConfig) -> None:
    """A method drafts with its own family member: a drafter of another member's shape would race under a false
    name (a custom shape is the caller's business)."""
    m, member = method(name), member_of(cfg)
    if m.speculative and member is not None and member != m.drafter:
        raise GumihoError(f"method {m.name!r} drafts with {m.drafter} heads; these heads are {member} heads "
                          f"(use --method {', '.join(n for n in DRAFTING_METHODS if REGISTRY[n].drafter == member)})")


def methods_of(cfg: DrafterConfig) -> tuple[str, ...]:
    """The methods that draft with heads of this shape: its member's (Gumiho's heads: gumiho and gumiho-serial);
    for a shape of one's own, the modes it can draft in (hybrid when it has heads, serial when it has a stack)."""
    member = member_of(cfg)
    if member is not None:
        return tuple(m.name for m in _ALL if m.drafter == member)
    return tuple(m for m, ok in ((GUMIHO, cfg.mlp_heads > 0), (GUMIHO_SERIAL, cfg.has_stack)) if ok)


def drafters_for(names) -> tuple[str, ...]:
    """The family members the methods `names` need, each once, in registry order."""
    wanted = {method(n).drafter for n in names} - {None}
    return tuple(dict.fromkeys(m.drafter for m in _ALL if m.drafter in wanted))

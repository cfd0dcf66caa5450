"""The target and the drafters the app was started with: loaded once, on first use, and shared read-only by all
visitors. A failure is kept with its message (scrubbed for the page); a later Run tries again, at most every
RETRY_LOAD_S. Each family member's heads (gumiho, eagle, medusa: gumiho_core.ARCHITECTURES) load on their own:
one that cannot load takes its methods off the page, with the reason said there; plain decoding always works."""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field

from gumiho_core import (AR, ARCHITECTURES, DEFAULT_TARGET_NAME, METHODS, REGISTRY, GumihoDrafter, GumihoError, Target,
                         has_default_heads, load_drafter, load_target)

from ..messages import report
from ..settings import member_label

log = logging.getLogger(__name__)
RETRY_LOAD_S = 60.0  # after a failed load (e.g. the hub unreachable), a Run tries again at most this often
DEFAULT, UNTRAINED = "default", "untrained"  # drafter specs, as load_drafter takes them


def untrained_note(member: str) -> str:
    return (f"{member_label(member)}: untrained heads, so the output is exact but they rarely guess right: "
            "expect little speedup")


def drafter_specs(gumiho: str, others: dict[str, str] | None = None) -> dict[str, str]:
    """Each family member's drafter spec: `gumiho` for Gumiho's heads (--draft), `others` by member
    (--draft-for eagle=untrained), "default" for the rest."""
    others = dict(others or {})
    unknown = sorted(set(others) - set(ARCHITECTURES))
    if unknown:
        raise GumihoError(f"--draft-for names {unknown[0]!r}; the drafters are {', '.join(ARCHITECTURES)}")
    return {member: gumiho if member == "gumiho" and "gumiho" not in others else others.get(member, DEFAULT)
            for member in ARCHITECTURES}


def parse_draft_for(items) -> dict[str, str]:
    """`member=spec` items (the flag, repeated or comma-separated, or GUMIHO_DRAFT_FOR) as {member: spec}."""
    out = {}
    for item in (part.strip() for entry in items or () for part in entry.split(",")):
        if not item:
            continue
        member, sep, spec = item.partition("=")
        if not sep or not member.strip() or not spec.strip():
            raise GumihoError(f"--draft-for takes member=spec (e.g. eagle=untrained); got {item!r}")
        out[member.strip()] = spec.strip()
    return out


@dataclass(frozen=True)
class Loaded:
    target: Target
    drafters: dict[str, GumihoDrafter] = field(default_factory=dict)  # member -> its loaded heads
    drafter_errors: dict[str, str] = field(default_factory=dict)  # member -> why it has none, as shown to visitors
    notes: dict[str, str] = field(default_factory=dict)  # member -> what every run that uses it says (untrained)
    not_trained: tuple[str, ...] = ()  # members asked for by "default" whose heads do not ship for this target yet

    @property
    def drafter(self) -> GumihoDrafter | None:
        """Gumiho's heads (the page's main drafter), or None."""
        return self.drafters.get("gumiho")

    @property
    def drafter_error(self) -> str | None:
        return self.drafter_errors.get("gumiho")

    def methods(self) -> tuple[str, ...]:
        """The methods that can run: plain decoding, and each one whose drafter loaded (registry order)."""
        return tuple(m for m in METHODS if REGISTRY[m].drafter is None or REGISTRY[m].drafter in self.drafters)


def expected_methods(target_spec: str, specs: dict[str, str]) -> tuple[str, ...]:
    """Before the models load: the methods whose heads should load (the page offers them; once loaded, Loaded.methods
    says for sure). Default heads ship for the default target only; elsewhere "default" Gumiho heads are untrained."""
    ok = {member for member, spec in specs.items()
          if spec != DEFAULT or member == "gumiho" and target_spec != DEFAULT
          or target_spec == DEFAULT and has_default_heads(DEFAULT_TARGET_NAME, member)}
    return tuple(m for m in METHODS if m == AR or REGISTRY[m].drafter in ok)


class ModelLoader:
    def __init__(self, target: str, drafts: dict[str, str], device: str, **load_options):
        self.target_spec, self.drafts, self.device = target, drafts, device
        self.load_options = load_options  # dtype, device_map, trust_remote_code: as load_target takes them
        self._lock = threading.Lock()
        self._loaded: Loaded | None = None
        self.error: str | None = None  # why the models could not be loaded, as shown to visitors
        self._failed_at = -math.inf

    @property
    def draft_spec(self) -> str:
        return self.drafts["gumiho"]

    @property
    def ready(self) -> bool:
        return self._loaded is not None

    @property
    def loaded(self) -> Loaded | None:
        return self._loaded

    def get(self) -> Loaded:
        """The models, loaded on first use. A failure raises GumihoError with a message fit for the page."""
        with self._lock:
            if self._loaded is None:
                if self.error is not None and time.monotonic() - self._failed_at < RETRY_LOAD_S:
                    raise GumihoError(self.error)
                try:
                    self._loaded = self._load()
                    self.error = None
                except Exception as e:  # whatever the cause, the page says what to do and keeps serving run files
                    self.error = report(e, f"could not load the target {self.target_spec!r}")
                    self._failed_at = time.monotonic()
                    raise GumihoError(self.error) from None
            return self._loaded

    def _load(self) -> Loaded:
        t0 = time.perf_counter()
        target = load_target(self.target_spec, device=self.device, **self.load_options)
        drafters, errors, missing = {}, {}, []
        for member, spec in self.drafts.items():
            if spec == DEFAULT and member != "gumiho" and not has_default_heads(target, member):
                missing.append(member)
                continue
            try:
                drafters[member] = load_drafter(spec, target, member)
            except Exception as e:  # the target works without it: plain decoding and the other drafters stay
                errors[member] = report(e, f"could not load the {member} drafter {spec!r}")
        notes = {m: untrained_note(m) for m, d in drafters.items() if not d.trained}
        log.info("loaded %s (drafters: %s) on %s in %.1f s", target.name,
                 ", ".join(f"{m} {getattr(d, 'origin', '?')}" for m, d in drafters.items()) or "none",
                 self.device, time.perf_counter() - t0)
        return Loaded(target, drafters, errors, notes, tuple(missing))

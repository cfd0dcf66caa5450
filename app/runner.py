"""The bridge to gumiho_core: models loaded once and shared, runs started and advanced one step at a time.

Decoding steps of all visitors take turns on one lock: timings stay honest (no two steps share the
CPU or GPU) and memory stays bounded, while the animations between steps run side by side.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from gumiho_core import (GumihoError, decode_tokens, encode_prompt, generate, load_drafter, load_target, resolve_device,
                         start, token_pieces)

from .state import Run, Settings

log = logging.getLogger(__name__)
DEFAULT_MAX_PROMPT_TOKENS = 2048  # a longer prompt makes the first step slow on a CPU; --max-prompt-tokens raises it


@dataclass(frozen=True)
class Loaded:
    target: object  # gumiho_core.Target
    drafter: object  # gumiho_core.GumihoDrafter
    notes: tuple[str, ...]  # warnings the engine logged while loading, shown on the page


class _Collect(logging.Handler):
    """Keeps the engine's warnings while the models load, so the page can show them."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class Models:
    """The target and drafter named on the command line, loaded on first use and shared read-only."""

    def __init__(self, target: str = "default", draft: str = "default", device: str | None = None,
                 max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS):
        self.target_spec, self.draft_spec = target, draft
        self.device = str(resolve_device(device))
        self.max_prompt_tokens = max_prompt_tokens
        self.step_lock = threading.Lock()  # one decoding step at a time, across all visitors
        self._load_lock = threading.Lock()
        self._loaded: Loaded | None = None

    @property
    def ready(self) -> bool:
        return self._loaded is not None

    def get(self) -> Loaded:
        with self._load_lock:
            if self._loaded is None:
                self._loaded = self._load()
            return self._loaded

    def preload(self) -> None:
        """get() for a background thread: a failure is logged here and raised again on the first run."""
        try:
            self.get()
        except GumihoError as e:
            log.error("could not load the models: %s", e)

    def _load(self) -> Loaded:
        collect, engine_log = _Collect(), logging.getLogger("gumiho_core")
        engine_log.addHandler(collect)
        try:
            t0 = time.perf_counter()
            target = load_target(self.target_spec, device=self.device)
            drafter = load_drafter(self.draft_spec, target)
            log.info("loaded %s and its drafter on %s in %.1f s", target.name, self.device, time.perf_counter() - t0)
        finally:
            engine_log.removeHandler(collect)
        return Loaded(target, drafter, tuple(collect.messages))


@dataclass
class Live:
    """The decoders behind a run that can still go on: the chosen method and its plain-decoding baseline."""

    session: object
    baseline: object | None
    tokenizer: object


def prompt_ids(models: Models, loaded: Loaded, prompt: str) -> list[int]:
    ids = encode_prompt(loaded.target.tokenizer, prompt)
    limit = min(models.max_prompt_tokens, loaded.target.max_len - 1)
    if len(ids) > limit:
        raise GumihoError(f"the prompt is {len(ids)} tokens long (chat template included); this app takes at most "
                          f"{limit}. Shorten it, or start the app with a larger --max-prompt-tokens.")
    return ids


def start_run(models: Models, settings: Settings) -> tuple[Run, Live]:
    """A new run: both decoders are created (and the prompt checked) before any step is taken."""
    loaded = models.get()
    target, tok = loaded.target, loaded.target.tokenizer
    ids = prompt_ids(models, loaded, settings.prompt)
    drafter = None if settings.method == "ar" else loaded.drafter
    session = start(settings.method, target, ids, settings.decode, settings.tree, drafter)
    baseline = None if settings.method == "ar" else start("ar", target, ids, settings.decode)
    run = Run(settings, target.name, models.device, len(ids), notes=list(loaded.notes),
              special_ids=set(tok.all_special_ids))
    return run, Live(session, baseline, tok)


def _timed_step(models: Models, session) -> tuple[object, float]:
    with models.step_lock:
        t0 = time.perf_counter()
        record = session.step()  # the engine synchronises the GPU inside, so this wall time is honest
        return record, time.perf_counter() - t0


def _learn_pieces(run: Run, tokenizer, record) -> None:
    """Remember the text of every token this step can put on screen (tree nodes, verdicts, output)."""
    ids = set(record.new_token_ids)
    if record.tree is not None:
        ids.update(record.tree.tokens)
        ids.update(record.verdict.target_token)
        ids.add(record.verdict.bonus)
    new = sorted(ids - run.pieces.keys())
    run.pieces.update(zip(new, token_pieces(tokenizer, new)))


def advance(models: Models, run: Run, live: Live):
    """One step of the run, then plain decoding until it has as many tokens (interleaved, so both runs
    see the same machine load). Returns the step's record."""
    record, seconds = _timed_step(models, live.session)
    run.add(record, seconds)
    _learn_pieces(run, live.tokenizer, record)
    run.text = decode_tokens(live.tokenizer, run.token_ids)
    base = live.baseline
    while base is not None and not base.done and (not run.baseline or run.baseline[-1][0] < record.total_new_tokens):
        base_record, base_seconds = _timed_step(models, base)
        run.add_baseline(base_record, base_seconds)
    return record


def api_generate(models: Models, settings: Settings) -> dict:
    """The whole run in one go, as the CLI's --json prints it (RunResult.summary() plus text and settings)."""
    loaded = models.get()
    ids = prompt_ids(models, loaded, settings.prompt)
    drafter = None if settings.method == "ar" else loaded.drafter
    session = start(settings.method, loaded.target, ids, settings.decode, settings.tree, drafter)
    with models.step_lock:
        result = generate(session, settings.method, keep_records=False)
    out = result.summary()
    out["text"] = decode_tokens(loaded.target.tokenizer, result.token_ids)
    tree = settings.tree.with_(mode=settings.method) if drafter is not None else None
    out.update(target=loaded.target.name, prompt_tokens=len(ids), tree=tree.to_dict() if tree else None,
               tree_source="the authors' tree" if tree else None, decode=settings.decode.to_dict())
    return out

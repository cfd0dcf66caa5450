"""The bridge to gumiho_core: the models (loaded once, in the background, and shared), the auto tree, and
runs started and advanced one step at a time.

Decoding steps of all visitors take turns on one lock: timings stay honest (no two steps share the
CPU or GPU) and memory stays bounded, while the animations between steps run side by side. The lock
is held for one step only, so a visitor who stops or leaves frees it when that step ends.

Nothing here waits on the page: the models load, and the device is measured for the auto tree, in a
background thread; until the measurement is there, "auto" runs use the fallback preset and say so.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace

import torch

from gumiho_core import (
    GumihoError,
    RunResult,
    TreeChoice,
    TreeConfig,
    cached_tree_choice,
    choose_tree,
    decode_tokens,
    encode_prompt,
    load_drafter,
    load_target,
    resolve_device,
    start,
    token_pieces,
)

from .messages import report
from .settings import AUTO, fallback_preset, tree_presets
from .state import Run, Settings

log = logging.getLogger(__name__)
DEFAULT_MAX_PROMPT_TOKENS = 2048  # a longer prompt makes the first step slow on a CPU; --max-prompt-tokens raises it
AUTO_TREE_POLICIES = ("measure", "cached", "off")  # measure once if not cached / only read the cache / never
TREE_MODES = ("gumiho", "serial")
MAX_LIVE_RUNS = 16  # paused runs that keep their caches (a 7B target: 0.5 MB per token); older ones stop computing
RETRY_LOAD_S = 60.0  # after a failed load (e.g. the hub unreachable), a Run tries again at most this often
UNTRAINED_NOTE = "untrained drafter: the output is exact, but it rarely guesses right, so expect little speedup"


@dataclass(frozen=True)
class Loaded:
    target: object  # gumiho_core.Target
    drafter: object | None  # gumiho_core.GumihoDrafter; None when it could not be loaded (plain decoding still works)
    drafter_error: str | None  # why there is no drafter, as shown to visitors
    notes: tuple[str, ...]  # shown on the page with every run


class Models:
    """The target and drafter the app was started with: loaded once, shared read-only by all visitors."""

    def __init__(self, target: str = "default", draft: str = "default", device: str | None = None,
                 max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS, *, dtype: str | None = None,
                 device_map: str | None = None, trust_remote_code: bool = False, auto_tree: str = "measure",
                 whole_runs: bool = False):
        if auto_tree not in AUTO_TREE_POLICIES:
            raise GumihoError(f"auto tree policy must be one of {', '.join(AUTO_TREE_POLICIES)}; got {auto_tree!r}")
        self.target_spec, self.draft_spec = target, draft
        self.device = str(resolve_device(device))
        self.load_options = dict(dtype=dtype, device_map=device_map, trust_remote_code=trust_remote_code)
        self.max_prompt_tokens = max_prompt_tokens
        self.auto_policy = auto_tree
        self.whole_runs = whole_runs  # ZeroGPU: a run is computed in one GPU call, then animated from its records
        self.step_lock = threading.Lock()  # one decoding step at a time, across all visitors
        self._load_lock = threading.Lock()
        self._loaded: Loaded | None = None
        self.error: str | None = None  # why the models could not be loaded, as shown to visitors
        self._failed_at = -math.inf
        self.choices: dict[str, TreeChoice] = {}  # the auto tree per drafting mode, once known
        self.measuring: str | None = None  # progress of the auto-tree measurement, e.g. "gumiho 40%: timing drafting"
        self.auto_error: str | None = None
        self.settled = threading.Event()  # set once the auto tree is known, or known to stay the fallback
        self._background: threading.Thread | None = None
        self._live: OrderedDict[int, Live] = OrderedDict()
        self._live_lock = threading.RLock()  # an evicted run's release() calls forget() under it

    # -- loading -------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._loaded is not None

    @property
    def loaded(self) -> Loaded | None:
        return self._loaded

    def get(self) -> Loaded:
        """The models, loaded on first use. A failure raises GumihoError with a message fit for the page."""
        with self._load_lock:
            if self._loaded is None:
                if self.error is not None and time.monotonic() - self._failed_at < RETRY_LOAD_S:
                    raise GumihoError(self.error)
                try:
                    self._loaded = self._load()
                    self.error = None
                except Exception as e:  # whatever the cause, the page says what to do and keeps serving run files
                    self.error, self._failed_at = report(e, f"could not load the target {self.target_spec!r}"), \
                        time.monotonic()
                    raise GumihoError(self.error) from None
            return self._loaded

    def _load(self) -> Loaded:
        t0 = time.perf_counter()
        target = load_target(self.target_spec, device=self.device, **self.load_options)
        drafter, error = None, None
        try:
            drafter = load_drafter(self.draft_spec, target)
        except Exception as e:  # the target works without it: plain decoding stays available
            error = report(e, f"could not load the drafter {self.draft_spec!r}")
        notes = (UNTRAINED_NOTE,) if drafter is not None and not drafter.trained else ()
        log.info("loaded %s (drafter: %s) on %s in %.1f s", target.name, getattr(drafter, "origin", "none"),
                 self.device, time.perf_counter() - t0)
        return Loaded(target, drafter, error, notes)

    def start_background(self) -> None:
        """Load the models, then settle the auto tree, in a thread: the page is served meanwhile."""
        self._background = threading.Thread(target=self._prepare, name="gumiho-prepare", daemon=True)
        self._background.start()

    def _prepare(self) -> None:
        try:
            loaded = self.get()
        except GumihoError:
            self.settled.set()
            return
        self.settle_auto_tree(loaded)

    # -- the auto tree -------------------------------------------------------------------------
    def settle_auto_tree(self, loaded: Loaded) -> None:
        """Find the auto tree of each drafting mode: cached, else measured here once (policy "measure")."""
        try:
            if loaded.drafter is None or self.auto_policy == "off":
                return
            for mode in TREE_MODES:
                choice = cached_tree_choice(loaded.target, loaded.drafter, mode)
                if choice is None and self.auto_policy == "measure":
                    choice = self._measure(loaded, mode)
                if choice is not None:
                    self.choices[mode] = choice
        finally:
            self.measuring = None
            self.settled.set()

    def _measure(self, loaded: Loaded, mode: str) -> TreeChoice | None:
        def progress(frac: float, text: str) -> None:
            self.measuring = f"{mode} drafting, {100 * frac:.0f}%: {text}"

        progress(0.0, "starting")
        try:
            return choose_tree(loaded.target, loaded.drafter, mode, progress=progress)
        except Exception as e:  # auto keeps its fallback; the page says why
            self.auto_error = report(e, f"measuring the auto tree for {mode}")
            return None

    def _why_fallback(self) -> str:
        """Why there is no measured auto tree, said after "until this device is measured:"."""
        if self._loaded is None:
            return "the model is still loading"
        if self.measuring is not None:
            return f"measuring now ({self.measuring})"
        if self.auto_error is not None:
            return f"measuring failed ({self.auto_error})"
        if self.auto_policy == "off":
            return "this app was started with --auto-tree off, so it never is"
        if self.auto_policy == "cached":
            return "no measurement is cached, and this app was started with --auto-tree cached"
        return "the measurement has not started yet"

    def auto_tree(self, method: str) -> tuple[TreeConfig, str, str]:
        """(tree, preset label, why) that "auto" means for `method` right now: the measured choice, or the fallback."""
        mode = method if method in TREE_MODES else TREE_MODES[0]
        choice = self.choices.get(mode)
        if choice is not None:
            return choice.tree.with_(mode=mode), AUTO, choice.summary()
        name = fallback_preset(self.device)
        return (tree_presets(self.device)[name].with_(mode=mode), f"{AUTO} → {name}",
                f"the {name} tree until this device is measured: {self._why_fallback()}")

    def settle(self, settings: Settings, wait: bool = False) -> Settings:
        """`settings` with a tree: an auto request gets this device's tree. wait=True (the API, like the CLI)
        waits for a measurement in progress instead of taking the fallback."""
        if settings.tree is not None:
            return settings
        if wait and self._background is not None and self._background.is_alive():
            self.settled.wait()
        tree, label, why = self.auto_tree(settings.method)
        return replace(settings, tree=tree, preset=label, tree_source=why)

    # -- runs that can still compute -----------------------------------------------------------
    def keep_live(self, live: Live) -> None:
        """Track a run that can compute; beyond MAX_LIVE_RUNS the least recently used one stops computing."""
        with self._live_lock:
            self._live[id(live)] = live
            self._live.move_to_end(id(live))
            while len(self._live) > MAX_LIVE_RUNS:
                self._live.popitem(last=False)[1].release()

    def forget(self, live: Live) -> None:
        with self._live_lock:
            self._live.pop(id(live), None)

    @property
    def live_runs(self) -> int:
        return len(self._live)


@dataclass
class Live:
    """The decoders behind a run that can still go on: the chosen method and its plain-decoding baseline."""

    session: object | None
    baseline: object | None
    tokenizer: object
    models: Models | None = None

    @property
    def can_compute(self) -> bool:
        return self.session is not None and not self.session.done

    def release(self) -> None:
        """Drop the decoders (and with them their caches); the recorded run stays."""
        self.session = self.baseline = None
        if self.models is not None:
            self.models.forget(self)


def on_gpu(fn, device: str, seconds: int = 120):
    """`fn` as a ZeroGPU task where the `spaces` package is installed and the app runs on a GPU.

    On a ZeroGPU Space the task runs in a forked process that holds a GPU only for the call: its arguments
    and results travel pickled, so they must be plain CPU values (Settings in; a Run or a dict out; never a
    tensor, never a generator of pictures). spaces.GPU returns `fn` itself on any other machine.
    """
    if not device.startswith("cuda"):
        return fn
    try:
        import spaces
    except ImportError:
        return fn
    return spaces.GPU(duration=seconds)(fn)


def prompt_ids(models: Models, loaded: Loaded, prompt: str) -> list[int]:
    ids = encode_prompt(loaded.target.tokenizer, prompt)
    limit = min(models.max_prompt_tokens, loaded.target.max_len - 1)
    if len(ids) > limit:
        raise GumihoError(f"the prompt is {len(ids)} tokens long (chat template included); this app takes at most "
                          f"{limit}. Shorten it, or start the app with a larger --max-prompt-tokens.")
    return ids


def _drafter(loaded: Loaded, method: str):
    if method == "ar":
        return None
    if loaded.drafter is None:
        raise GumihoError(f"method {method} needs the drafter, which could not be loaded ({loaded.drafter_error}). "
                          "Plain decoding (method ar) still works.")
    return loaded.drafter


def start_run(models: Models, settings: Settings) -> tuple[Run, Live]:
    """A new run: the tree settled, both decoders created and the prompt checked before any step is taken."""
    loaded = models.get()
    settings = models.settle(settings)
    target, tok = loaded.target, loaded.target.tokenizer
    ids = prompt_ids(models, loaded, settings.prompt)
    session = start(settings.method, target, ids, settings.decode, settings.tree, _drafter(loaded, settings.method))
    baseline = None if settings.method == "ar" else start("ar", target, ids, settings.decode)
    run = Run(settings, target.name, models.device, len(ids), notes=list(loaded.notes),
              special_ids=set(tok.all_special_ids))
    live = Live(session, baseline, tok, models)
    models.keep_live(live)
    return run, live


def _step(models: Models, session):
    with models.step_lock:
        return session.step()


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
    session, base = live.session, live.baseline
    models.keep_live(live)  # recently used: the last to be evicted
    record = _step(models, session)
    run.add(record)
    _learn_pieces(run, live.tokenizer, record)
    run.text = decode_tokens(live.tokenizer, run.token_ids)
    while base is not None and not base.done and (not run.baseline or run.baseline[-1][0] < record.total_new_tokens):
        run.add_baseline(_step(models, base))
    if session.done:
        live.release()
    return record


def compute_run(models: Models, settings: Settings) -> Run:
    """A whole run at once, as plain data (no tensors): what a ZeroGPU Space computes in one GPU call."""
    run, live = start_run(models, settings)
    while live.can_compute:
        advance(models, run, live)
    live.release()
    return run


def api_generate(models: Models, settings: Settings) -> dict:
    """The whole run, as the CLI's --json prints it (RunResult.summary() plus text and settings).

    Its steps take turns with the page's visitors; wall_s is their compute time (compute_s), waits excluded.
    """
    loaded = models.get()
    settings = models.settle(settings, wait=True)
    ids = prompt_ids(models, loaded, settings.prompt)
    drafter = _drafter(loaded, settings.method)
    session = start(settings.method, loaded.target, ids, settings.decode, settings.tree, drafter)
    record = None
    while not session.done:
        record = _step(models, session)
    result = RunResult(settings.method, tuple(session.prompt_ids), tuple(session.generated), session.steps,
                       record.compute_s, session.stop_reason, ())
    out = result.summary()
    out["text"] = decode_tokens(loaded.target.tokenizer, result.token_ids)
    tree = settings.tree.with_(mode=settings.method) if drafter is not None else None
    out.update(target=loaded.target.name, prompt_tokens=len(ids), tree=tree.to_dict() if tree else None,
               tree_source=settings.tree_source if tree else None, decode=settings.decode.to_dict())
    return out


def set_threads(requested: int) -> int:
    """Leave a core to the browser and the web server. On the project's 2-core CPU, with one core busy
    elsewhere, decoding with 2 threads ran at 4.2 tokens/s and with 1 thread at 13.1: every parallel matmul
    waits for its slowest thread, and a thread that shares its core with the browser is always the slowest."""
    if requested < 0:
        raise GumihoError(f"--threads must be >= 0 (0 = all cores but one); got {requested}")
    if requested == 0 and os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()  # the user chose already
    torch.set_num_threads(requested or max(1, torch.get_num_threads() - 1))
    return torch.get_num_threads()

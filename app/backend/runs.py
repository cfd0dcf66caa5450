"""Runs: started with every decoder created and the prompt checked before any step, advanced one lane-step at a
time (each taking its turn on the Backend's lock) in the race's order (live.next_lane), plain decoding of the same
prompt and the other drafting methods interleaved with it; and the whole runs of whole-run mode (ZeroGPU) and of
the API."""
from __future__ import annotations

from gumiho_core import (AR, FULL_PRECISION, GUMIHO, GUMIHO_SERIAL, HALF_PRECISION, GumihoError, decode_tokens, encode_prompt,
                         generate, start, token_pieces)

from ..state import Run, Settings
from .backend import Backend
from .live import BASELINE, MAIN, Live, next_lane, progress
from .loader import Loaded


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


def prompt_ids(backend: Backend, loaded: Loaded, prompt: str) -> list[int]:
    ids = encode_prompt(loaded.target.tokenizer, prompt)
    limit = min(backend.max_prompt_tokens, loaded.target.max_len - 1)
    if len(ids) > limit:
        raise GumihoError(f"the prompt is {len(ids)} tokens long (chat template included); this app takes at most "
                          f"{limit}. Shorten it, or start the app with a larger --max-prompt-tokens.")
    return ids


def _drafter(loaded: Loaded, method: str):
    if method == AR:
        return None
    if loaded.drafter is None:
        raise GumihoError(f"method {method} needs the drafter, which could not be loaded ({loaded.drafter_error}). "
                          "Plain decoding (method ar) still works.")
    return loaded.drafter


def _rivals(loaded: Loaded, settings: Settings, ids: list[int]) -> dict:
    """The other drafting methods on the same prompt with the same tree shape (the same budget), for the race."""
    if loaded.drafter is None or settings.tree is None:
        return {}
    return {m: start(m, loaded.target, ids, settings.decode, settings.tree, loaded.drafter)
            for m in (GUMIHO, GUMIHO_SERIAL) if m != settings.method}


def _verify_ratios(backend: Backend) -> dict[int, float]:
    """This device's measured cost of verifying n tokens, in plain steps (any drafting mode's measurement)."""
    choice = next(iter(backend.auto.choices.values()), None)
    return {} if choice is None else {int(n): s / choice.ar_step_s for n, s in choice.verify_s.items()}


def start_run(backend: Backend, settings: Settings) -> tuple[Run, Live]:
    """A new run: the tree settled, every decoder created and the prompt checked before any step is taken (its
    owner keeps it among the live runs, backend.live)."""
    loaded = backend.get()
    settings = backend.settle(settings)
    target, tok = loaded.target, loaded.target.tokenizer
    ids = prompt_ids(backend, loaded, settings.prompt)
    session = start(settings.method, target, ids, settings.decode, settings.tree, _drafter(loaded, settings.method))
    baseline = None if settings.method == AR else start(AR, target, ids, settings.decode)
    dtype = str(target.dtype).removeprefix("torch.")
    rivals = _rivals(loaded, settings, ids)
    run = Run(settings, target.name, backend.device, len(ids), notes=list(loaded.notes),
              special_ids=set(tok.all_special_ids), dtype=dtype if dtype in FULL_PRECISION + HALF_PRECISION else "",
              rivals={m: [] for m in rivals}, verify_ratios=_verify_ratios(backend))
    return run, Live(session, baseline, tok, rivals)


def _step(backend: Backend, session):
    with backend.step_lock:
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


def step_lane(backend: Backend, run: Run, live: Live, lane: str) -> None:
    """One lane-step of the race (`lane` from next_lane), recorded in `run`: the run's own step (its record, the
    text of its tokens, and once it has ended the auto tree's judgement of it), a rival's, or plain decoding's."""
    session = live.lanes().get(lane)
    if session is None:  # let go of meanwhile (Stop, or evicted)
        return
    record = _step(backend, session)
    if lane == BASELINE:
        run.add_baseline(record)
    elif lane != MAIN:
        run.rivals[lane].append(record)
    else:
        run.add(record)
        _learn_pieces(run, live.tokenizer, record)
        run.text = decode_tokens(live.tokenizer, run.token_ids)
        note = backend.auto.judge(run, backend.loader.loaded) if session.done else None
        if note:
            run.notes.append(note)


def compute_run(backend: Backend, settings: Settings) -> Run:
    """A whole run at once, as plain data (no tensors): what a ZeroGPU Space computes in one GPU call. Its
    decoders are never kept: they go when this returns."""
    run, live = start_run(backend, settings)
    while (lane := next_lane(progress(live))) is not None:
        step_lane(backend, run, live, lane)
    return run


def api_generate(backend: Backend, settings: Settings) -> dict:
    """The whole run, as the CLI's --json prints it (the same RunResult.report()).

    Its steps take turns with the page's visitors on the step lock; wall_s is their compute time, waits excluded.
    """
    loaded = backend.get()
    settings = backend.settle(settings, wait=True)
    ids = prompt_ids(backend, loaded, settings.prompt)
    session = start(settings.method, loaded.target, ids, settings.decode, settings.tree,
                    _drafter(loaded, settings.method))
    result = generate(session, keep_records=False, lock=backend.step_lock)
    return result.report(decode_tokens(loaded.target.tokenizer, result.token_ids), loaded.target.name,
                         settings.tree_source)

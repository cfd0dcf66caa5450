"""Runs: started with both decoders and the prompt checked before any step, advanced one step at a time
(each step taking its turn on the Backend's lock), with plain decoding of the same prompt interleaved as
the baseline; and the whole runs of whole-run mode (ZeroGPU) and of the API."""
from __future__ import annotations

from gumiho_core import AR, GumihoError, decode_tokens, encode_prompt, generate, start, token_pieces

from ..state import FULL_PRECISION, HALF_PRECISION, Run, Settings
from .backend import Backend
from .live import Live
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


def start_run(backend: Backend, settings: Settings) -> tuple[Run, Live]:
    """A new run: the tree settled, both decoders created and the prompt checked before any step is taken."""
    loaded = backend.get()
    settings = backend.settle(settings)
    target, tok = loaded.target, loaded.target.tokenizer
    ids = prompt_ids(backend, loaded, settings.prompt)
    session = start(settings.method, target, ids, settings.decode, settings.tree, _drafter(loaded, settings.method))
    baseline = None if settings.method == AR else start(AR, target, ids, settings.decode)
    dtype = str(target.dtype).removeprefix("torch.")
    run = Run(settings, target.name, backend.device, len(ids), notes=list(loaded.notes),
              special_ids=set(tok.all_special_ids), dtype=dtype if dtype in FULL_PRECISION + HALF_PRECISION else "")
    live = Live(session, baseline, tok, backend.live)
    backend.live.keep(live)
    return run, live


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


def advance(backend: Backend, run: Run, live: Live):
    """One step of the run, then plain decoding until it has as many tokens (interleaved, so both runs
    see the same machine load). Returns the step's record."""
    session, base = live.session, live.baseline
    backend.live.keep(live)  # recently used: the last to be evicted
    record = _step(backend, session)
    run.add(record)
    _learn_pieces(run, live.tokenizer, record)
    run.text = decode_tokens(live.tokenizer, run.token_ids)
    while base is not None and not base.done and (not run.baseline or run.baseline[-1][0] < record.total_new_tokens):
        run.add_baseline(_step(backend, base))
    if session.done:
        live.release()
    return record


def compute_run(backend: Backend, settings: Settings) -> Run:
    """A whole run at once, as plain data (no tensors): what a ZeroGPU Space computes in one GPU call."""
    run, live = start_run(backend, settings)
    while live.can_compute:
        advance(backend, run, live)
    live.release()
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

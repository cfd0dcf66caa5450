"""Runs: started with every decoder created and the prompt checked before any step, advanced one lane-step at a
time (each taking its turn on the Backend's lock) in the race's order (live.next_lane): the method shown step by
step, the drafting methods the visitor picked to race it and plain decoding, all on the same prompt; and the whole
runs of whole-run mode (ZeroGPU) and of the API. Each drafting lane gets the same tree request, resolved in its own
mode (gumiho_core.resolve_tree): the same budget for all."""
from __future__ import annotations

from gumiho_core import (AR, DRAFTING_METHODS, FULL_PRECISION, GUMIHO, HALF_PRECISION, MEASURED, GumihoError,
                         decode_tokens, encode_prompt, generate, method as method_info, start,
                         token_pieces)

from ..settings import RACE_DEFAULT, Request
from ..state import Run, Settings
from .backend import Backend
from .live import BASELINE, MAIN, Live, next_lane, progress
from .loader import Loaded


def on_gpu(fn, device: str, seconds: int = 120):
    """`fn` as a ZeroGPU task where the `spaces` package is installed and the app runs on a GPU.

    On a ZeroGPU Space the task runs in a forked process that holds a GPU only for the call: its arguments
    and results travel pickled, so they must be plain CPU values (a Request in; a Run or a dict out; never a
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
        raise GumihoError(f"the prompt is {len(ids):,} tokens long (chat template included); this app takes at "
                          f"most {limit:,}: shorten it.")
    return ids


def drafter_of(loaded: Loaded, method: str):
    """The heads `method` drafts with (None for plain decoding), or why they are not there."""
    m = method_info(method)
    if m.drafter is None:
        return None
    if m.drafter in loaded.drafters:
        return loaded.drafters[m.drafter]
    if m.drafter in loaded.not_trained:
        raise GumihoError(f"{m.label} heads are not trained yet for this model; the methods offered on the page "
                          "still work.")
    raise GumihoError(f"method {m.name} needs the {m.drafter} drafter, which could not be loaded "
                      f"({loaded.drafter_errors.get(m.drafter)}). Plain decoding (method ar) still works.")


def race_of(loaded: Loaded, request: Request) -> tuple[str, ...]:
    """The drafting methods racing the request's: those asked for (each must load), or by default those of
    RACE_DEFAULT that load."""
    if request.race is not None:
        for m in request.race:
            drafter_of(loaded, m)
        return request.race
    return tuple(m for m in RACE_DEFAULT if m in DRAFTING_METHODS and m != request.method and m in loaded.methods())


def settle(backend: Backend, request: Request, wait: bool = False) -> Settings:
    """The request's settings, its tree resolved for its method (plain decoding: as Gumiho would draft it). wait=True
    (the API, like the CLI) waits for a measurement on its way instead of taking the fallback."""
    if wait and request.tree in MEASURED and backend.auto.expected:
        backend.auto.settled.wait()
    tree = backend.resolve(request.tree, GUMIHO if request.method == AR else request.method, request.shape)
    return Settings(request.prompt, request.method, request.decode, tree.tree, tree.preset, tree.source)


def _notes(loaded: Loaded, methods) -> list[str]:
    members = dict.fromkeys(method_info(m).drafter for m in methods)
    return [loaded.notes[m] for m in members if m in loaded.notes]


def start_run(backend: Backend, request: Request) -> tuple[Run, Live]:
    """A new run: every lane's tree resolved, every decoder created and the prompt checked before any step is taken
    (its owner keeps it among the live runs, backend.live)."""
    loaded = backend.get()
    settings = settle(backend, request)
    target, tok = loaded.target, loaded.target.tokenizer
    ids = prompt_ids(backend, loaded, settings.prompt)
    session = start(settings.method, target, ids, settings.decode, settings.tree, drafter_of(loaded, settings.method))
    race = race_of(loaded, request)
    trees = {m: backend.resolve(request.tree, m, request.shape).tree for m in race}
    rivals = {m: start(m, target, ids, settings.decode, trees[m], drafter_of(loaded, m)) for m in race}
    baseline = None if settings.method == AR else start(AR, target, ids, settings.decode)
    dtype = str(target.dtype).removeprefix("torch.")
    heads = {m: drafter_of(loaded, m) for m in (settings.method, *race) if m != AR}
    run = Run(settings, target.name, backend.device, len(ids), notes=_notes(loaded, (settings.method, *race)),
              special_ids=set(tok.all_special_ids), dtype=dtype if dtype in FULL_PRECISION + HALF_PRECISION else "",
              rivals={m: [] for m in race}, rival_trees=trees, verify_ratios=backend.auto.verify_ratios(),
              trained_steps={m: d.steps for m, d in heads.items() if d.steps is not None})
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
    text of its tokens, and once it has ended a note if its costs were far from the measurement), a rival's, or
    plain decoding's."""
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
        note = backend.auto.judge(run) if session.done else None
        if note:
            run.notes.append(note)


def compute_run(backend: Backend, request: Request) -> Run:
    """A whole run at once, as plain data (no tensors): what a ZeroGPU Space computes in one GPU call. Its
    decoders are never kept: they go when this returns."""
    run, live = start_run(backend, request)
    while (lane := next_lane(progress(live))) is not None:
        step_lane(backend, run, live, lane)
    return run


def api_generate(backend: Backend, request: Request) -> dict:
    """The whole run, as the CLI's --json prints it (the same RunResult.report()).

    Its steps take turns with the page's visitors on the step lock; wall_s is their compute time, waits excluded.
    """
    loaded = backend.get()
    settings = settle(backend, request, wait=True)
    ids = prompt_ids(backend, loaded, settings.prompt)
    session = start(settings.method, loaded.target, ids, settings.decode, settings.tree,
                    drafter_of(loaded, settings.method))
    result = generate(session, keep_records=False, lock=backend.step_lock)
    return result.report(decode_tokens(loaded.target.tokenizer, result.token_ids), loaded.target.name,
                         settings.tree_source)

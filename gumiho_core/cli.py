"""The command lines: what they share, and `python -m gumiho_core.generate` itself.

    python -m gumiho_core.generate --prompt "Write a haiku about the sea." --method gumiho --json

Shared by the CLIs (generate, bench, train): the model flags, the tree flags and how they become a tree,
quiet transformers, and one way to fail: a GumihoError prints one line and the exit code is 2.
The decoding CLI decodes one prompt with any method of the registry (methods.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from .config import POOLS, TREE_FIELDS, DecodeConfig, TreeConfig
from .engine import generate, start
from .errors import GumihoError
from .methods import GUMIHO, METHODS, REGISTRY, method
from .models import load_drafter, load_target
from .text import decode_tokens, encode_prompt
from .trees import AUTO, FASTEST, MEASURED, PRESETS, TREE_REQUESTS, ResolvedTree, resolve_tree

log = logging.getLogger(__name__)
BAD_INPUT = 2  # the exit code of every CLI for bad input, after a one-line message


# -- shared by the CLIs ------------------------------------------------------------------------------
def target_from_args(args):
    return load_target(args.target, device=args.device, dtype=args.dtype, device_map=args.device_map,
                       trust_remote_code=args.trust_remote_code)


def tree_args(parser: argparse.ArgumentParser) -> None:
    """Tree flags shared by the CLIs: a request (trees.py), or explicit shape flags (unset ones take the paper's)."""
    d = TreeConfig()
    g = parser.add_argument_group("draft tree")
    g.add_argument("--tree", default=AUTO, choices=TREE_REQUESTS,
                   help="auto: the fastest tree measured on this device (hybrid methods: one deep enough for the MLP "
                        "heads), or the small tree (CPU) / the paper's (GPU) while none is measured; nothing is "
                        "measured unless asked. fastest: the fastest measured tree of any depth, measured now if it "
                        f"is not yet (1-3 minutes on a CPU). {', '.join(PRESETS)}: fixed trees. Shape flags below "
                        "override them.")
    g.add_argument("--remeasure", action="store_true",
                   help="measure this device now (1-3 minutes on a CPU, with a progress bar) and keep the result "
                        "for auto and fastest")
    g.add_argument("--top-k", type=int, help=f"children per expanded node (paper: {d.top_k})")
    g.add_argument("--mlp-topk", type=int, help=f"tokens per MLP head (paper: {d.mlp_topk})")
    g.add_argument("--pruning", type=int, help=f"MLP beam width (paper: {d.pruning})")
    g.add_argument("--total-tokens", type=int, help=f"nodes verified per step, root included (paper: {d.total_tokens})")
    g.add_argument("--depth", type=int, help=f"deepest draft level (paper: {d.depth})")
    g.add_argument("--pool", choices=POOLS, help=f"which serial-level candidates may enter a hybrid tree (default "
                                                 f"{d.pool}: the authors' rule; all: EAGLE-2's)")


def explicit_tree(args) -> TreeConfig | None:
    """The tree the shape flags ask for (paper values for unset ones), or None when no flag was given."""
    given = {f: getattr(args, f, None) for f in (*TREE_FIELDS, "pool") if getattr(args, f, None) is not None}
    return TreeConfig(**given) if given else None


def measurement(args, method_name: str, target, drafter, request: str | None = None):
    """This device's TreeChoice for the method where the request (default --tree) wants one: the cached one, or
    measured now where --remeasure asks or `fastest` has none (with a progress bar on stderr). None where none is
    wanted or known."""
    from .measure.autotree import cached_tree_choice, choose_tree

    request, remeasure = request or args.tree, getattr(args, "remeasure", False)
    if not remeasure and (explicit_tree(args) is not None or request not in MEASURED):
        return None
    mode = method(method_name).mode
    choice = None if remeasure else cached_tree_choice(target, drafter, mode)
    if choice is None and (remeasure or request == FASTEST):
        with _MeasureBar(method_name) as bar:
            choice = choose_tree(target, drafter, mode, refresh=True, progress=bar.update)
    return choice


def tree_for(args, method_name: str, target, choice=None, request: str | None = None) -> ResolvedTree:
    """The tree a CLI run of a speculative method uses (trees.resolve_tree; request default --tree), and where it
    came from."""
    unmeasured = "measure it with --tree fastest or --remeasure, 1-3 minutes on a CPU"
    return resolve_tree(request or args.tree, method_name, str(target.device), choice, explicit_tree(args), unmeasured)


class _MeasureBar:
    """A progress bar on stderr for the device measurement, with tqdm's time estimate."""

    def __init__(self, method_name: str):
        self.method_name = method_name

    def __enter__(self):
        from tqdm import tqdm

        print(f"measuring which trees pay on this device for {self.method_name} (1-3 minutes on a CPU, once; "
              "cached for later runs)", file=sys.stderr)
        self.bar = tqdm(total=100, unit="%", file=sys.stderr, bar_format="{l_bar}{bar}| {n:.0f}% [{elapsed}<{remaining}]")
        return self

    def update(self, frac: float, text: str) -> None:
        self.bar.set_description(text[:40])
        self.bar.update(max(0.0, 100 * frac - self.bar.n))

    def __exit__(self, *exc):
        self.bar.close()


def model_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("models")
    g.add_argument("--target", default="default",
                   help="'default' (SmolLM2-135M-Instruct, offline), a folder or a hub id")
    g.add_argument("--draft", default="default", help="'default', 'untrained', a folder, a checkpoint file or a hub id")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    g.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16/fp16 on GPU), float32, bfloat16, float16")
    g.add_argument("--device-map", choices=["auto"], help="auto: spread a large target over all visible GPUs")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="allow a hub model to run its own code (off by default; only for repositories you trust)")


def quiet_transformers() -> None:
    """No weight-loading progress bars or advisory warnings on a CLI's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def bad_input(error: GumihoError) -> int:
    """Say what was wrong in one line (never a traceback) and give the exit code for it."""
    print(f"error: {error}", file=sys.stderr)
    return BAD_INPUT


# -- python -m gumiho_core.generate ----------------------------------------------------------------
GENERATE = """Decode one prompt with Gumiho, a comparison method, or plain decoding.

    python -m gumiho_core.generate --prompt "Write a haiku about the sea." --method gumiho --json
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho_core.generate", description=GENERATE,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", required=True, help="the user message")
    p.add_argument("--method", default=GUMIHO, choices=METHODS,
                   help="; ".join(f"{m.name}: {m.about}" for m in REGISTRY.values()))
    p.add_argument("--max-new-tokens", type=int, default=DecodeConfig.max_new_tokens)
    p.add_argument("--temperature", type=float, default=DecodeConfig.temperature, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=DecodeConfig.top_p)
    p.add_argument("--seed", type=int, default=DecodeConfig.seed)
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("-v", "--verbose", action="store_true")
    model_args(p)
    tree_args(p)
    return p


def run(args) -> dict:
    decode = DecodeConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                          seed=args.seed)
    explicit_tree(args)  # bad shape flags fail before any model loads
    if not args.prompt.strip():
        raise GumihoError("the prompt is empty: type something for the model to answer")
    target = target_from_args(args)
    drafter = tree = note = choice = None
    if method(args.method).speculative:
        drafter = load_drafter(args.draft, target, member=method(args.method).drafter)
        choice = measurement(args, args.method, target, drafter)
        resolved = tree_for(args, args.method, target, choice)
        tree, note = resolved.tree, resolved.source
        if not args.json:
            print(f"tree: {note}", file=sys.stderr)
    prompt_ids = encode_prompt(target.tokenizer, args.prompt, raw=args.raw)
    session = start(args.method, target, prompt_ids, decode, tree or TreeConfig(), drafter)
    steps = _StepTimes(None if args.json else _Streamer(target.tokenizer))
    result = generate(session, args.method, keep_records=False, on_step=steps)
    if choice is not None and args.tree in MEASURED and explicit_tree(args) is None:
        _check_prediction(choice, tree, steps, target, drafter)
    return result.report(decode_tokens(target.tokenizer, result.token_ids), target.name, note)


class _StepTimes:
    """Collects the decoding steps' seconds (the prefill aside), passing each record on to `then`."""

    def __init__(self, then=None):
        self.then, self.seconds = then, []

    def __call__(self, record):
        if record.tree is not None:
            self.seconds.append(record.seconds)
        if self.then is not None:
            self.then(record)


def _check_prediction(choice, tree: TreeConfig, steps: _StepTimes, target, drafter) -> None:
    """A run whose steps cost more than REMEASURE_GAP off the prediction marks the measurement stale."""
    from .measure.autotree import REMEASURE_GAP, mark_stale, prediction_gap

    gap = prediction_gap(choice, tree, steps.seconds)
    if gap is not None and abs(gap) > REMEASURE_GAP:
        mark_stale(target, drafter, tree.mode)
        print(f"note: this run's steps took {abs(100 * gap):.0f}% {'more' if gap > 0 else 'less'} time than the "
              "auto-tree measurement predicted; the next --tree auto run measures this device again", file=sys.stderr)


class _Streamer:
    """Prints the answer as it grows (whole words: re-decodes the full text, prints the new suffix)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.shown = tokenizer, [], ""

    def __call__(self, record):
        self.ids += record.new_token_ids
        text = decode_tokens(self.tokenizer, self.ids)
        sys.stdout.write(text[len(self.shown):] if text.startswith(self.shown) else "\n" + text)
        sys.stdout.flush()
        self.shown = text


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    quiet_transformers()
    try:
        out = run(args)
    except GumihoError as e:
        return bad_input(e)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"\n\n[{out['method']}] {out['new_tokens']} tokens in {out['steps']} steps, "
              f"mean accepted length {out['mean_accept_len']:.2f}, {out['wall_s']:.2f} s "
              f"({out['tokens_per_s']:.1f} tokens/s)", file=sys.stderr)
    return 0



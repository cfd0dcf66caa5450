"""Train Gumiho heads for a target: generate-data -> extract-features -> train -> evaluate.

    python -m gumiho_core.train all                  # the whole recipe for the default model
    python -m gumiho_core.train generate-data        # the target answers the training prompts
    python -m gumiho_core.train extract-features     # one target forward per conversation
    python -m gumiho_core.train train                # the paper's objective, resumable
    python -m gumiho_core.train evaluate             # acceptance on held-out prompts (gumiho and serial)
    python -m gumiho_core.train ship                 # copy the heads to assets/ with a model card
    python -m gumiho_core.train export --out DIR     # the heads in the authors' layout (their code, vLLM)

Every step reads and writes under --workdir (default ~/.cache/gumiho/train/<target>); the
defaults reproduce the heads shipped in assets/.
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from safetensors import safe_open
from tqdm import tqdm

from ..errors import GumihoError
from ..cli import model_args, quiet_transformers
from ..jsonl import read_jsonl
from ..models import ASSETS, cache_dir
from .distill import DistillConfig as DistillDefaults
from .objective import OBJECTIVES
from .trainer import TrainConfig as TrainDefaults

HELDOUT = ASSETS.parent / "prompts" / "heldout.jsonl"
DEFAULT_CORPUS = ASSETS.parent / "data" / "smollm2-135m-instruct"
TRAIN_PROMPTS_HAND = ASSETS.parent / "prompts" / "train.jsonl"
EVALUATION_PROMPTS = (HELDOUT, ASSETS.parent / "prompts" / "mtbench_style.jsonl")  # never training data

log = logging.getLogger(__name__)


def workdir_for(args) -> Path:
    if args.workdir:
        return Path(args.workdir).expanduser()
    name = "default" if args.target == "default" else Path(args.target).name.replace("/", "--")
    return cache_dir() / "train" / name


def corpus_dir_for(args) -> Path:
    """Where the answers (token ids) live: in the repository for the default target, so they are committed."""
    if args.corpus:
        return Path(args.corpus).expanduser()
    return DEFAULT_CORPUS if args.target == "default" else workdir_for(args) / "corpus"


def training_prompts(args) -> list[dict]:
    from .data import TRAIN_PROMPT_FILES

    files = [Path(f) for f in args.prompts.split(",")] if args.prompts else [f for f in TRAIN_PROMPT_FILES
                                                                            if f.is_file()]
    return [row for f in files for row in read_jsonl(f, required=("prompt",))]


def cmd_make_prompts(args, models) -> None:
    """Write prompts/train_generated.jsonl: template tasks over seed topics, and questions and passages the
    target writes; near-copies of each other, of prompts/train.jsonl and of the evaluation prompts are dropped."""
    import json

    from . import prompts as P
    from .data import PROMPTS_DIR, TRAIN_PROMPT_FILES

    topics = json.loads((PROMPTS_DIR / "seed_topics.json").read_text())
    target, rows = models.data_target(), args.rows
    candidates = (P.template_prompts(topics) + P.written_questions(target, topics, 2, args.seed, rows)
                  + P.passage_prompts(target, topics, 4, args.seed, rows))
    known = [r["prompt"] for r in read_jsonl(TRAIN_PROMPTS_HAND, required=("prompt",))]
    excluded = [r["prompt"] for f in EVALUATION_PROMPTS for r in read_jsonl(f, required=("prompt",))]
    kept = P.keep_new(candidates, known, excluded)
    out = TRAIN_PROMPT_FILES[1]
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
    log.info("%d candidates, %d new prompts kept in %s", len(candidates), len(kept), out)


def cmd_generate_data(args, models) -> None:
    from .distill import DistillConfig, generate_corpus, parse_modes

    workers = data_workers(args)
    if workers > 1 and args.worker is None:
        return run_workers(args, workers)
    worker = int(args.worker.split("/")[0]) if args.worker else 0
    cfg = DistillConfig(rows=args.rows, max_new_tokens=args.max_answer_tokens, seed=args.seed, worker=worker,
                        workers=workers)
    generate_corpus(models.data_target(), training_prompts(args), parse_modes(args.modes), corpus_dir_for(args),
                    workdir_for(args) / "features", cfg)


def data_workers(args) -> int:
    """Processes that make data side by side: one per CPU core (each with one thread), one on a GPU."""
    from ..models import resolve_device

    if args.worker:
        return int(args.worker.split("/")[1])
    if args.workers != "auto":
        return int(args.workers)
    return 1 if resolve_device(args.device).type == "cuda" else max(1, os.cpu_count() or 1)


def run_workers(args, workers: int) -> None:
    """One single-threaded process per worker: a busy core slows one of them, not every matmul of all of them.

    (With one process of n threads, each parallel matmul waits for its slowest thread: on a 2-core machine
    with another job running, 2 threads made data 7x slower than 1.)
    """
    from .corpus import read_corpus

    corpus = corpus_dir_for(args)
    before = sum(len(c.answer_ids) for c in read_corpus(corpus)) if corpus.is_dir() else 0
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    argv = [a for a in sys.argv[1:] if a != "all"] if args.command == "all" else sys.argv[1:]
    if args.command == "all":
        argv = ["generate-data"] + argv
    procs = [subprocess.Popen([sys.executable, "-m", "gumiho_core.train", *argv, "--worker", f"{k}/{workers}"],
                              env=env) for k in range(workers)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise GumihoError(f"a data worker failed (exit codes {codes}); run the command again to resume")
    made = sum(len(c.answer_ids) for c in read_corpus(corpus)) - before
    seconds = time.perf_counter() - t0
    log.info("%d workers made %d answer tokens in %.0f s: %.0f answer tokens/s", workers, made, seconds,
             made / max(seconds, 1e-9))


def cmd_extract_features(args, models) -> None:
    from .data import extract_features
    from .distill import extract_part_features

    if args.conversations:
        extract_features(models.target(), read_jsonl(args.conversations), workdir_for(args) / "features-own",
                         max_len=args.max_len)
        return
    made = extract_part_features(models.data_target(), corpus_dir_for(args), workdir_for(args) / "features")
    log.info("features made for %d corpus parts", made)


def training_sequences(args, target):
    """Your own conversations' features if --conversations, else the corpus (a --data-fraction of its prompts)."""
    from .data import load_corpus, load_features

    if args.conversations:
        return load_features(workdir_for(args) / "features-own", target.config.hidden_size)
    return load_corpus(corpus_dir_for(args), workdir_for(args) / "features", target.config.hidden_size,
                       args.data_fraction)


def run_dir(args) -> Path:
    return workdir_for(args) / args.run


def cmd_train(args, models) -> None:
    from .trainer import Trainer, TrainConfig, plot_history

    target = models.target()
    cfg = TrainConfig(epochs=args.epochs, lr=args.lr, tokens_per_step=args.tokens_per_step,
                      draft_vocab=args.draft_vocab, seed=args.seed, precision=args.precision, objective=args.objective)
    trainer = Trainer(target, training_sequences(args, target), cfg, run_dir(args))
    log.info("%d training / %d held-out conversations, %d steps per epoch", len(trainer.train_seqs),
             len(trainer.val_seqs), trainer.steps_per_epoch)
    trainer.run()
    png = plot_history(trainer.history, run_dir(args) / "loss.png")
    log.info("drafter in %s, loss curve %s", run_dir(args) / "drafter", png)


def cmd_evaluate(args, models) -> None:
    target = models.target()
    import json

    from ..acceptance import Acceptance
    from ..config import DecodeConfig, TreeConfig
    from .data import read_jsonl
    from ..engine import generate, start
    from ..models import load_drafter
    from ..text import encode_prompt

    draft = args.draft if args.draft != "default" or not (run_dir(args) / "drafter").is_dir() \
        else str(run_dir(args) / "drafter")
    drafter = load_drafter(draft, target)
    prompts = read_jsonl(args.eval_prompts, required=("prompt",))[: args.eval_n or None]
    report = {"draft": draft, "prompts": len(prompts), "max_new_tokens": args.eval_tokens}
    for method in ("gumiho", "serial"):
        acc = Acceptance()
        for row in tqdm(prompts, desc=f"evaluate {method}", unit="prompt"):
            ids = encode_prompt(target.tokenizer, row["prompt"])
            acc.add(generate(start(method, target, ids, DecodeConfig(max_new_tokens=args.eval_tokens),
                                   TreeConfig(), drafter)))
        report[method] = acc.to_dict()
        log.info("%s: mean accepted length %.3f, per depth %s", method, acc.mean_accept_len,
                 [round(x, 3) for x in acc.per_depth()])
    out = Path(args.eval_out) if args.eval_out else workdir_for(args) / "evaluation.json"
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


def cmd_ship(args, models) -> None:
    """Copy the trained heads into assets/ with a model card (data, steps, time, loss curve, acceptance)."""
    target = models.target()
    import json
    import shutil

    from ..models import DEFAULT_DRAFTER
    from .trainer import plot_history

    run = run_dir(args)
    if not (run / "drafter" / "model.safetensors").is_file():
        raise GumihoError(f"no trained drafter in {run}; run the train command first")
    dest = Path(args.ship_to) if args.ship_to else DEFAULT_DRAFTER
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(run / "drafter" / name, dest / name)
    history = json.loads((run / "history.json").read_text())
    plot_history(history, dest / "loss.png")
    evaluation = workdir_for(args) / "evaluation.json"
    report = json.loads(evaluation.read_text()) if evaluation.is_file() else None
    answers = workdir_for(args) / "answers.jsonl"
    features = json.loads((workdir_for(args) / "features" / "meta.json").read_text())
    with safe_open(dest / "model.safetensors", "pt") as f:  # the heads' own vocabulary, as shipped
        draft_vocab = f.get_slice("draft_vocab").get_shape()[0] if "draft_vocab" in f.keys() else target.vocab_size
    (dest / "README.md").write_text(model_card(target, json.loads((dest / "config.json").read_text()), history,
                                               report, answers, features["conversations"], args.recipe, draft_vocab))
    log.info("shipped to %s", dest)


def cmd_export(args, models) -> None:
    """Write the heads in the authors' published layout; reads the target's files, never loads the model."""
    from .export import export_official

    if not args.out:
        raise GumihoError("export needs --out, the folder to write the official layout into")
    draft = args.draft if args.draft != "default" else str(trained_heads(args))
    done = export_official(draft, args.target, args.out)
    log.info("exported %s to %s: %d tensors, %.1f MB", draft, done.folder, done.tensors, done.weights_bytes / 2**20)


def trained_heads(args) -> Path:
    """--draft default: the heads trained in --workdir, else the shipped ones (default target)."""
    from ..models import DEFAULT_DRAFTER

    run = run_dir(args) / "drafter"
    if run.is_dir():
        return run
    if args.target == "default":
        return DEFAULT_DRAFTER
    raise GumihoError(f"no trained heads in {run}; pass --draft")


def model_card(target, meta: dict, history: list[dict], report: dict | None, answers: Path,
               conversations: int, recipe: str, draft_vocab: int) -> str:
    from collections import Counter

    from .data import read_jsonl

    rows = (read_jsonl(answers) if answers.is_file() else [])[:conversations]  # the rows features were made of
    modes = Counter(r["mode"] for r in rows)
    tokens = sum(len(r["answer_ids"]) for r in rows)
    cfg = meta["train_config"]
    hours = sum(h["seconds"] for h in history) / 3600
    last = history[-1]
    lines = [
        f"# Gumiho heads for {target.name}", "",
        f"Trained with {recipe}. "
        "Architecture and objective: GUMIHO.md (2 serial LLaMA layers + 5 parallel MLP heads).", "",
        "## Data", "",
        f"Self-distillation: the target's own answers to the project's {len({r['id'] for r in rows})} training "
        f"prompts (`prompts/train.jsonl`), {len(rows)} answers "
        f"({', '.join(f'{n} {m}' for m, n in sorted(modes.items()))}), {tokens:,} answer tokens.", "",
        "## Training", "",
        f"{last['epoch']} epochs, {last['step']} optimizer steps of about {cfg['tokens_per_step']} tokens, "
        f"AdamW lr {cfg['lr']} (warm-up {cfg['warmup_steps']} steps, linear decay), grad clip {cfg['grad_clip']}, "
        f"{cfg['precision']} matmuls on {device_label(target)}; {hours:.2f} hours of training. Draft vocabulary: "
        f"{draft_vocab} tokens, the most frequent of the training data up to {cfg['draft_vocab']} (the target "
        f"still verifies over all {target.vocab_size}). Weights stored in fp16.", "",
        "![loss curve](loss.png)", "",
        "Held-out (5% of conversations), teacher-forced top-1 agreement with the target after the last epoch: "
        + ", ".join(f"{k[4:-5]} {last[k]:.3f}" for k in last if k.startswith("val_") and k.endswith("_top1")) + ".",
        "",
    ]
    if report:
        lines += ["## Acceptance (real decoding, temperature 0)", "",
                  f"{report['prompts']} held-out prompts (`prompts/heldout.jsonl`, not used in training), "
                  f"{report['max_new_tokens']} new tokens each, the authors' tree (top_k 14, 64 nodes):", "",
                  "| drafting | mean accepted length (tokens per target pass) | "
                  + " | ".join(f"depth {d}" for d in range(1, 8)) + " |",
                  "|---|---|" + "---|" * 7]
        for method in ("gumiho", "serial"):
            r = report[method]
            rates = ("-" if x != x else f"{x:.2f}" for x in r["per_depth"])  # nan: that depth was never reached
            lines.append(f"| {method} | {r['mean_accept_len']:.2f} | " + " | ".join(rates) + " |")
        lines += ["", "Depth d's rate is P(the accepted path reaches depth d | it reached depth d-1). Measure with "
                  "`python -m gumiho_core.train evaluate --draft assets/smollm2-135m-instruct-gumiho "
                  f"--eval-n {report['prompts']}` "
                  "(deterministic at temperature 0). The deepest rates rest on few steps.", ""]
    return "\n".join(lines)


def device_label(target) -> str:
    from ..timing import device_name

    return device_name(target.device).split(", ")[0]  # the thread count is the shipping process's, not training's


def add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", help="comma-separated JSONL files of {\"prompt\": ...} (default: the project's "
                   "training prompts, prompts/train*.jsonl)")
    p.add_argument("--modes", default="greedy,t0.7,t1.0", help="answers per prompt: greedy and/or t<temperature>")
    p.add_argument("--rows", type=int, default=DistillDefaults.rows, help="answers generated at once, per worker")
    p.add_argument("--workers", default="auto", help="processes making data side by side (auto: one per CPU core, "
                   "one on a GPU)")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # k/N: set by generate-data for its worker processes
    p.add_argument("--corpus", help="folder of answer parts (default: data/smollm2-135m-instruct for the default "
                   "target, <workdir>/corpus otherwise)")
    p.add_argument("--data-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="the target's precision for making data (auto: bf16 on CPUs with native bf16 or a GPU)")
    p.add_argument("--max-answer-tokens", type=int, default=320)
    p.add_argument("--conversations", help="your own JSONL of conversations instead of generated answers")
    p.add_argument("--max-len", type=int, default=1024, help="tokens kept per conversation")
    t = p.add_argument_group("train")
    t.add_argument("--epochs", type=int, default=TrainDefaults.epochs)
    t.add_argument("--run", default="run", help="folder under --workdir for this training run's checkpoints")
    t.add_argument("--data-fraction", type=float, default=1.0,
                   help="train on this share of the corpus's prompts (nested subsets, for a data-scaling curve)")
    t.add_argument("--lr", type=float, default=TrainDefaults.lr)
    t.add_argument("--tokens-per-step", type=int, default=TrainDefaults.tokens_per_step)
    t.add_argument("--draft-vocab", type=int, default=TrainDefaults.draft_vocab,
                   help="most frequent tokens the drafter proposes from (0 = the whole vocabulary)")
    t.add_argument("--precision", default=TrainDefaults.precision, choices=["bf16", "fp32"])
    t.add_argument("--objective", default=TrainDefaults.objective, choices=sorted(OBJECTIVES),
                   help="paper: GUMIHO.md's weights (CE 0.1, the MLP heads' CE from epoch 2); distill: the target's "
                        "distribution weighted as much as its features, for every head from the start")
    e = p.add_argument_group("evaluate")
    e.add_argument("--eval-prompts", default=str(HELDOUT), help="held-out prompts (JSONL, not used in training)")
    e.add_argument("--eval-n", type=int, default=0, help="use only the first N prompts (0 = all)")
    e.add_argument("--eval-tokens", type=int, default=128, help="new tokens per prompt")
    e.add_argument("--eval-out", help="where to write the JSON report (default: <workdir>/evaluation.json)")
    p.add_argument("--ship-to", help="ship: destination folder (default: assets/smollm2-135m-instruct-gumiho)")
    p.add_argument("--out", help="export: the folder to write the authors' layout into")
    p.add_argument("--recipe", default="`python -m gumiho_core.train all` (the defaults)",
                   help="ship: how the heads were trained, as the model card should say it")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho_core.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["make-prompts", "generate-data", "extract-features", "train", "evaluate", "ship", "export",
                                       "all"])
    p.add_argument("--workdir", help="where data, features and checkpoints go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-v", "--verbose", action="store_true")
    model_args(p)
    add_data_args(p)
    return p


class Models:
    """The target, loaded once per precision when a command first needs it."""

    def __init__(self, args):
        self.args, self._loaded = args, {}

    def target(self, dtype: str | None = None):
        from ..models import load_target

        dtype = dtype or ("float32" if self.args.dtype == "auto" else self.args.dtype)
        if dtype not in self._loaded:
            self._loaded[dtype] = load_target(self.args.target, device=self.args.device, dtype=dtype)
        return self._loaded[dtype]

    def data_target(self):
        """The target for making data: bf16 where matmuls have it natively (AMX/AVX512-BF16 or a GPU)."""
        from ..models import cpu_has_native_bf16, resolve_device

        choice = self.args.data_dtype
        if choice == "auto":
            fast = resolve_device(self.args.device).type == "cuda" or cpu_has_native_bf16()
            choice = "bfloat16" if fast else "float32"
        return self.target(choice)


COMMANDS = {"make-prompts": cmd_make_prompts, "generate-data": cmd_generate_data, "extract-features": cmd_extract_features, "train": cmd_train,
            "evaluate": cmd_evaluate, "ship": cmd_ship, "export": cmd_export}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    quiet_transformers()
    try:
        models = Models(args)
        steps = [c for c in COMMANDS if c not in ("make-prompts", "ship", "export")] if args.command == "all" \
            else [args.command]
        for name in steps:
            log.info("== %s", name)
            COMMANDS[name](args, models)
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Train Gumiho heads for a target: generate-data -> extract-features -> train -> evaluate.

    python -m gumiho_core.train all                  # the whole recipe for the default model
    python -m gumiho_core.train generate-data        # the target answers the training prompts
    python -m gumiho_core.train extract-features     # one target forward per conversation
    python -m gumiho_core.train train                # the paper's objective, resumable
    python -m gumiho_core.train evaluate             # acceptance on held-out prompts (gumiho and serial)
    python -m gumiho_core.train ship                 # copy the heads to assets/ with a model card

Every step reads and writes under --workdir (default ~/.cache/gumiho/train/<target>); the
defaults reproduce the heads shipped in assets/.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from safetensors import safe_open
from tqdm import tqdm

from ..errors import GumihoError
from ..cli import model_args, quiet_transformers
from ..models import ASSETS, cache_dir
from .trainer import TrainConfig as TrainDefaults

HELDOUT = ASSETS.parent / "prompts" / "heldout.jsonl"

log = logging.getLogger(__name__)


def workdir_for(args) -> Path:
    if args.workdir:
        return Path(args.workdir).expanduser()
    name = "default" if args.target == "default" else Path(args.target).name.replace("/", "--")
    return cache_dir() / "train" / name


def cmd_generate_data(args, target) -> None:
    from .data import TRAIN_PROMPTS, generate_answers, parse_modes, read_jsonl

    prompts = read_jsonl(args.prompts or TRAIN_PROMPTS, required=("prompt",))
    out = generate_answers(target, prompts, workdir_for(args) / "answers.jsonl", parse_modes(args.modes),
                           batch_size=args.batch_size, max_new_tokens=args.max_answer_tokens, seed=args.seed)
    log.info("answers in %s", out)


def cmd_extract_features(args, target) -> None:
    from .data import extract_features, read_jsonl

    src = Path(args.conversations) if args.conversations else workdir_for(args) / "answers.jsonl"
    rows = read_jsonl(src)
    extract_features(target, rows, workdir_for(args) / "features", max_len=args.max_len)


def cmd_train(args, target) -> None:
    from .data import load_features
    from .trainer import Trainer, TrainConfig, plot_history

    cfg = TrainConfig(epochs=args.epochs, lr=args.lr, tokens_per_step=args.tokens_per_step,
                      draft_vocab=args.draft_vocab, seed=args.seed, precision=args.precision)
    seqs = load_features(workdir_for(args) / "features", target.config.hidden_size)
    trainer = Trainer(target, seqs, cfg, workdir_for(args) / "run")
    log.info("%d training / %d held-out conversations, %d steps per epoch", len(trainer.train_seqs),
             len(trainer.val_seqs), trainer.steps_per_epoch)
    trainer.run()
    png = plot_history(trainer.history, workdir_for(args) / "run" / "loss.png")
    log.info("drafter in %s, loss curve %s", workdir_for(args) / "run" / "drafter", png)


def cmd_evaluate(args, target) -> None:
    import json

    from ..acceptance import Acceptance
    from ..config import DecodeConfig, TreeConfig
    from .data import read_jsonl
    from ..engine import generate, start
    from ..models import load_drafter
    from ..text import encode_prompt

    draft = args.draft if args.draft != "default" or not (workdir_for(args) / "run" / "drafter").is_dir() \
        else str(workdir_for(args) / "run" / "drafter")
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


def cmd_ship(args, target) -> None:
    """Copy the trained heads into assets/ with a model card (data, steps, time, loss curve, acceptance)."""
    import json
    import shutil

    from ..models import DEFAULT_DRAFTER
    from .trainer import plot_history

    run = workdir_for(args) / "run"
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
    p.add_argument("--prompts", help="JSONL of {\"prompt\": ...} (default: the project's training prompts)")
    p.add_argument("--modes", default="greedy", help="answers per prompt: greedy and/or t<temperature>")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-answer-tokens", type=int, default=320)
    p.add_argument("--conversations", help="your own JSONL of conversations instead of generated answers")
    p.add_argument("--max-len", type=int, default=1024, help="tokens kept per conversation")
    t = p.add_argument_group("train")
    t.add_argument("--epochs", type=int, default=TrainDefaults.epochs)
    t.add_argument("--lr", type=float, default=TrainDefaults.lr)
    t.add_argument("--tokens-per-step", type=int, default=TrainDefaults.tokens_per_step)
    t.add_argument("--draft-vocab", type=int, default=TrainDefaults.draft_vocab,
                   help="most frequent tokens the drafter proposes from (0 = the whole vocabulary)")
    t.add_argument("--precision", default=TrainDefaults.precision, choices=["bf16", "fp32"])
    e = p.add_argument_group("evaluate")
    e.add_argument("--eval-prompts", default=str(HELDOUT), help="held-out prompts (JSONL, not used in training)")
    e.add_argument("--eval-n", type=int, default=0, help="use only the first N prompts (0 = all)")
    e.add_argument("--eval-tokens", type=int, default=128, help="new tokens per prompt")
    e.add_argument("--eval-out", help="where to write the JSON report (default: <workdir>/evaluation.json)")
    p.add_argument("--ship-to", help="ship: destination folder (default: assets/smollm2-135m-instruct-gumiho)")
    p.add_argument("--recipe", default="`python -m gumiho_core.train all` (the defaults)",
                   help="ship: how the heads were trained, as the model card should say it")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho_core.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["generate-data", "extract-features", "train", "evaluate", "ship", "all"])
    p.add_argument("--workdir", help="where data, features and checkpoints go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-v", "--verbose", action="store_true")
    model_args(p)
    add_data_args(p)
    return p


COMMANDS = {"generate-data": cmd_generate_data, "extract-features": cmd_extract_features, "train": cmd_train,
            "evaluate": cmd_evaluate, "ship": cmd_ship}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    quiet_transformers()
    try:
        from ..models import load_target

        target = load_target(args.target, device=args.device, dtype="float32" if args.dtype == "auto" else args.dtype)
        steps = [c for c in COMMANDS if c != "ship"] if args.command == "all" else [args.command]
        for name in steps:
            log.info("== %s", name)
            COMMANDS[name](args, target)
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

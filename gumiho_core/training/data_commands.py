"""The data commands of `python -m gumiho_core.train`: make-prompts, generate-data, extract-features."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from ..errors import GumihoError
from ..jsonl import read_jsonl
from . import prompts as P
from .corpus import read_corpus
from .data import extract_features
from .distill import DistillConfig, extract_part_features, generate_corpus, parse_modes
from .workspace import (EVALUATION_PROMPTS, SEED_TOPICS, TRAIN_PROMPTS_HAND, TRAIN_PROMPTS_MADE, corpus_dir_for,
                        features_dir_for, training_prompt_files, training_prompts, workdir_for)

log = logging.getLogger(__name__)


def cmd_make_prompts(args, models) -> None:
    """Write --out (prompts/train_generated.jsonl): template tasks over the seed topics of --topics, and questions
    and passages the target writes; near-copies of each other, of the training prompts already kept (by hand and
    in the other make-prompts files) and of the evaluation prompts are dropped."""
    topics, out = seed_topics(Path(args.topics or SEED_TOPICS)), Path(args.out or TRAIN_PROMPTS_MADE)
    if out.resolve() in {f.resolve() for f in (*EVALUATION_PROMPTS, TRAIN_PROMPTS_HAND)}:
        raise GumihoError(f"--out {out}: make-prompts would overwrite prompts that are not its own; name a new "
                          "file (prompts/train_generated_<n>.jsonl is read as training prompts)")
    target, rows = models.data_target(), args.rows
    candidates = (P.template_prompts(topics) + P.written_questions(target, topics, 2, args.seed, rows)
                  + P.passage_prompts(target, topics, 4, args.seed, rows))
    known = [r["prompt"] for f in training_prompt_files() if f.resolve() != out.resolve()
             for r in read_jsonl(f, required=("prompt",))]
    excluded = [r["prompt"] for f in EVALUATION_PROMPTS for r in read_jsonl(f, required=("prompt",))]
    kept = P.keep_new(candidates, known, excluded)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
    log.info("%d candidates, %d new prompts kept in %s", len(candidates), len(kept), out)


def seed_topics(path: Path) -> dict[str, list[str]]:
    """The seed topics file (category -> topics), refused with its name where it is missing or malformed."""
    try:
        topics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GumihoError(f"--topics {path}: not a readable JSON file ({e})") from None
    if not isinstance(topics, dict) or not all(isinstance(v, list) and all(isinstance(t, str) for t in v)
                                               for v in topics.values()):
        raise GumihoError(f"--topics {path}: expected {{category: [topic, ...]}}, a list of strings per category")
    return topics


def cmd_generate_data(args, models) -> None:
    workers = data_workers(args)
    if workers > 1 and args.worker is None:
        return run_workers(args, workers)
    worker = int(args.worker.split("/")[0]) if args.worker else 0
    cfg = DistillConfig(rows=args.rows, max_new_tokens=args.max_answer_tokens, seed=args.seed, worker=worker,
                        workers=workers)
    generate_corpus(models.data_target(), training_prompts(args), parse_modes(args.modes), corpus_dir_for(args),
                    features_dir_for(args), cfg)


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
    corpus = corpus_dir_for(args)
    before = sum(len(c.answer_ids) for c in read_corpus(corpus)) if corpus.is_dir() else 0
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    argv = ["generate-data", *[a for a in sys.argv[1:] if a != "all"]] if args.command == "all" else sys.argv[1:]
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
    if args.conversations:
        extract_features(models.target(), read_jsonl(args.conversations), workdir_for(args) / "features-own",
                         max_len=args.max_len)
        return
    made = extract_part_features(models.data_target(), corpus_dir_for(args), features_dir_for(args))
    log.info("features made for %d corpus parts", made)

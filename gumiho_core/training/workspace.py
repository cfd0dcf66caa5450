"""Where the training recipe reads and writes: prompts and the corpus in the repository, the rest in a cache."""
from __future__ import annotations

from pathlib import Path

from ..errors import GumihoError
from ..jsonl import read_jsonl
from ..models import ASSETS, DEFAULT_DRAFTER, cache_dir

REPO = ASSETS.parent
PROMPTS_DIR = REPO / "prompts"
TRAIN_PROMPTS_HAND = PROMPTS_DIR / "train.jsonl"  # written by hand
TRAIN_PROMPTS_MADE = PROMPTS_DIR / "train_generated.jsonl"  # make-prompts: templates and the target's own
MADE_PATTERN = "train_generated*.jsonl"  # every make-prompts file (one per seed-topic file: --topics, --out)
SEED_TOPICS = PROMPTS_DIR / "seed_topics.json"
HELDOUT = PROMPTS_DIR / "heldout.jsonl"
EVALUATION_PROMPTS = (HELDOUT, PROMPTS_DIR / "mtbench_style.jsonl")  # never training data
DEFAULT_CORPUS = REPO / "data" / "smollm2-135m-instruct"


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


def features_dir_for(args) -> Path:
    return workdir_for(args) / "features"


def run_dir(args, run: str | None = None) -> Path:
    return workdir_for(args) / (run or args.run)


def training_prompts(args) -> list[dict]:
    files = [Path(f) for f in args.prompts.split(",")] if args.prompts else training_prompt_files()
    return [row for f in files for row in read_jsonl(f, required=("prompt",))]


def training_prompt_files() -> list[Path]:
    """The project's training prompts: those written by hand, then every make-prompts file."""
    return [f for f in (TRAIN_PROMPTS_HAND, *sorted(PROMPTS_DIR.glob(MADE_PATTERN))) if f.is_file()]


def trained_heads(args) -> Path:
    """--draft default: the heads trained in this run folder, else the shipped ones (default target)."""
    run = run_dir(args) / "drafter"
    if run.is_dir():
        return run
    if args.target == "default":
        return DEFAULT_DRAFTER
    raise GumihoError(f"no trained heads in {run}; pass --draft")

"""Train drafters for a target: make-prompts -> generate-data -> extract-features -> train -> evaluate.

    python -m gumiho_core.train all                  # generate-data, extract-features, train, evaluate
    python -m gumiho_core.train make-prompts         # more training prompts (templates, the target's own)
    python -m gumiho_core.train generate-data        # the target answers the training prompts (resumable)
    python -m gumiho_core.train extract-features     # remake features for a corpus brought from elsewhere
    python -m gumiho_core.train train                # one drafter (--architecture gumiho|eagle|medusa), resumable
    python -m gumiho_core.train evaluate             # acceptance on held-out prompts, every method of the heads
    python -m gumiho_core.train steps                # the step curve: the heads kept along a run, evaluated
    python -m gumiho_core.train scaling              # train and evaluate on 1/8 .. all of the data
    python -m gumiho_core.train ship                 # copy the heads to assets/ with a model card
    python -m gumiho_core.train ship-scaling         # the data curve into that card (no run folder needed)
    python -m gumiho_core.train ship-steps --run R   # a later run's step curve into that card, where R went on
                                                     # from the shipped heads and did not replace them
    python -m gumiho_core.train export --out DIR     # the heads in the authors' layout (their code, vLLM)
    python -m gumiho_core.train tune --steps N       # each member's learning rate, chosen on the validation split
    python -m gumiho_core.train family --steps N     # the comparison drafters, trained alike (runs <run>-<member>)
    python -m gumiho_core.train family-steps         # their step curves at the same steps, one plot
    python -m gumiho_core.train family-ship          # each into assets/, every card with the comparison

The corpus (the answers as token ids) lives in data/ for the default target; features and checkpoints
under --workdir (default ~/.cache/gumiho/train/<target>). The defaults reproduce the shipped heads.
"""
from __future__ import annotations

import argparse
import logging
import sys

from ..cli import model_args, quiet_transformers
from ..config import ARCHITECTURES
from ..errors import GumihoError
from .allocator import describe
from .checkpoint import Stopped
from .data_commands import cmd_extract_features, cmd_generate_data, cmd_make_prompts
from .family import cmd_family, cmd_family_ship, cmd_family_steps, cmd_tune
from .distill import DistillConfig as DistillDefaults
from .objective import OBJECTIVES
from .rollout import ROLLOUTS
from .run_commands import (cmd_evaluate, cmd_export, cmd_scaling, cmd_ship, cmd_ship_scaling, cmd_ship_steps,
                           cmd_steps, cmd_train)
from .trainer import TrainConfig as TrainDefaults
from .workspace import HELDOUT

log = logging.getLogger(__name__)
COMMANDS = {"make-prompts": cmd_make_prompts, "generate-data": cmd_generate_data,
            "extract-features": cmd_extract_features, "train": cmd_train, "evaluate": cmd_evaluate,
            "steps": cmd_steps, "scaling": cmd_scaling, "ship": cmd_ship,
            "ship-scaling": cmd_ship_scaling, "ship-steps": cmd_ship_steps, "export": cmd_export,
            "tune": cmd_tune, "family": cmd_family, "family-steps": cmd_family_steps, "family-ship": cmd_family_ship}
ALL = ("generate-data", "extract-features", "train", "evaluate")


def data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--prompts", help="comma-separated JSONL files of {\"prompt\": ...} (default: the project's "
                   "training prompts, prompts/train.jsonl and every prompts/train_generated*.jsonl)")
    g.add_argument("--topics", help="make-prompts: the seed topics, category -> topics (default: "
                   "prompts/seed_topics.json)")
    g.add_argument("--modes", default="greedy,t0.7,t1.0,t0.85", help="answers per prompt: greedy and/or "
                   "t<temperature>")
    g.add_argument("--rows", type=int, default=DistillDefaults.rows, help="answers generated at once, per worker")
    g.add_argument("--workers", default="auto", help="processes making data side by side (auto: one per CPU core, "
                   "one on a GPU)")
    g.add_argument("--worker", help=argparse.SUPPRESS)  # k/N: set by generate-data for its worker processes
    g.add_argument("--corpus", help="folder of answer parts (default: data/smollm2-135m-instruct for the default "
                   "target, <workdir>/corpus otherwise)")
    g.add_argument("--data-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="the target's precision for making data (auto: bf16 on a GPU, a CPU with AMX or an AMD "
                        "CPU with AVX512-BF16, else fp32)")
    g.add_argument("--max-answer-tokens", type=int, default=DistillDefaults.max_new_tokens)
    g.add_argument("--conversations", help="your own JSONL of conversations instead of generated answers")
    g.add_argument("--max-len", type=int, default=1024, help="tokens kept per conversation")


def family_args(p: argparse.ArgumentParser) -> None:
    f = p.add_argument_group("the drafter family")
    f.add_argument("--architecture", default=TrainDefaults.architecture, choices=sorted(ARCHITECTURES),
                   help="the drafter family's member to train: gumiho (2-layer transformer for 2 steps + 5 MLP heads), "
                        "eagle (EAGLE-2 style: 1 layer at every depth), medusa (Medusa style: 7 heads on the "
                        "target's last feature)")
    f.add_argument("--architectures", default=",".join(ARCHITECTURES),
                   help="tune, family, family-steps: the members, comma-separated (default: all three)")
    f.add_argument("--lrs", default="5e-4,1e-3,2e-3", help="tune: the learning rates each member tries")
    f.add_argument("--bench", help="family-ship: a bench --out JSON of every method, for the cards' comparison")


def train_args(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group("train")
    t.add_argument("--epochs", type=int, default=TrainDefaults.epochs)
    t.add_argument("--steps", type=int, default=TrainDefaults.steps,
                   help="optimizer steps in all, fixed in advance (the rate schedule's length; epochs then do not "
                        "matter); 0 = as many as --epochs make")
    t.add_argument("--checkpoint-minutes", type=float, default=TrainDefaults.checkpoint_minutes,
                   help="a resumable checkpoint at least this often, inside an epoch too")
    t.add_argument("--keep-steps", default="", help="comma-separated steps after which the heads are also kept "
                   "(<run>/drafter-step<N>/), for a step curve")
    t.add_argument("--init-from", default="", help="start from these trained heads (a drafter folder or file) "
                   "instead of random weights; the run has its own schedule and a fresh optimizer")
    t.add_argument("--run", default="run", help="folder under --workdir for this training run's checkpoints")
    t.add_argument("--data-fraction", type=float, default=1.0,
                   help="train on this share of the corpus's prompts (nested subsets)")
    t.add_argument("--fractions", default="0.125,0.25,0.5,1", help="scaling: the shares of the prompts")
    t.add_argument("--lr", type=float, default=TrainDefaults.lr)
    t.add_argument("--tokens-per-step", type=int, default=None,
                   help=f"at least this many answer tokens per optimizer step (default {TrainDefaults.tokens_per_step}; "
                        "family: the batch its learning-rate sweep ran at, from tune.json)")
    t.add_argument("--micro-tokens", type=int, default=0,
                   help="padded tokens per forward pass (gradients of several accumulate to --tokens-per-step); 0 "
                        f"(auto): {TrainDefaults.micro_tokens} on a CPU, twice --tokens-per-step on a GPU (one "
                        "micro-batch a step: about half the kernel launches)")
    t.add_argument("--draft-vocab", type=int, default=TrainDefaults.draft_vocab,
                   help="most frequent tokens the drafter proposes from (0 = the whole vocabulary)")
    t.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"],
                   help="auto: bf16 on a GPU, a CPU with AMX or an AMD CPU with AVX512-BF16, else fp32 (bf16 autocast "
                        "is several times slower on an AVX2 CPU, and slower on an Intel Xeon with AVX512-BF16 but no "
                        "AMX)")
    t.add_argument("--objective", default=TrainDefaults.objective, choices=sorted(OBJECTIVES),
                   help="paper: the paper's weights (CE 0.1, the MLP heads' CE from epoch 2); distill: the target's "
                        "distribution weighted as much as its features, for every head from the start")
    t.add_argument("--rollout", default=TrainDefaults.rollout, choices=ROLLOUTS,
                   help="teacher-forced: serial step 2 and the MLP heads read outputs computed from the target's "
                        "true features; as-drafted: they read the drafter's own step-1 and step-2 outputs, as "
                        "drafting does (train as you draft)")


def output_args(p: argparse.ArgumentParser) -> None:
    e = p.add_argument_group("evaluate, ship, export")
    e.add_argument("--eval-prompts", default=str(HELDOUT), help="held-out prompts (JSONL, not used in training)")
    e.add_argument("--eval-n", type=int, default=0, help="use N prompts evenly spread over the file (0 = all)")
    e.add_argument("--eval-tokens", type=int, default=128, help="new tokens per prompt")
    e.add_argument("--eval-out", help="where to write the JSON report (default: <run folder>/evaluation.json)")
    e.add_argument("--ship-to", help="ship: destination folder (default: assets/smollm2-135m-instruct-<the run's member>)")
    e.add_argument("--ship-step", type=int, default=0, help="ship: the heads the run kept after this many steps "
                   "(train --keep-steps) instead of its last, where the step curve peaked before the end")
    e.add_argument("--out", help="export: the folder to write the authors' layout into; make-prompts: the prompt "
                   "file to write (default: prompts/train_generated.jsonl; another prompts/train_generated*.jsonl "
                   "is read as training prompts too)")
    e.add_argument("--recipe", default="`python -m gumiho_core.train all` (the defaults)",
                   help="ship: how the heads were trained, as the model card should say it")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gumiho_core.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=[*COMMANDS, "all"])
    p.add_argument("--workdir", help="where features and checkpoints go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-v", "--verbose", action="store_true")
    model_args(p)
    for add in (data_args, family_args, train_args, output_args):
        add(p)
    return p


class Models:
    """The target, loaded once per precision when a command first needs it (export needs none)."""

    def __init__(self, args):
        self.args, self._loaded = args, {}

    def target(self, dtype: str | None = None):
        from ..models import load_target

        dtype = dtype or ("float32" if self.args.dtype == "auto" else self.args.dtype)
        if dtype not in self._loaded:
            self._loaded[dtype] = load_target(self.args.target, device=self.args.device, dtype=dtype)
        return self._loaded[dtype]

    def data_target(self):
        """The target for making data: bf16 where it runs faster (models.bf16_trains_faster), else fp32."""
        from ..models import bf16_trains_faster, resolve_device

        choice = self.args.data_dtype
        if choice == "auto":
            choice = "bfloat16" if bf16_trains_faster(resolve_device(self.args.device)) else "float32"
        return self.target(choice)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.tokens_per_step is None and args.command != "family":  # family takes its sweep's (family.run_batch)
        args.tokens_per_step = TrainDefaults.tokens_per_step
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    quiet_transformers()
    log.info(describe())  # every command runs under the allocator train.py chose (training/allocator.py)
    try:
        models = Models(args)
        for name in ALL if args.command == "all" else [args.command]:
            log.info("== %s", name)
            COMMANDS[name](args, models)
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Stopped as e:
        print(f"stopped: {e}", file=sys.stderr)
        return e.exit_code
    return 0

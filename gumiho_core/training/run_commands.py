"""The model commands of `python -m gumiho_core.train`: train, evaluate, steps, scaling, ship, export."""
from __future__ import annotations

import json
import logging
import shutil
import signal
from pathlib import Path

from safetensors import safe_open
from tqdm import tqdm

from ..acceptance import Acceptance, Calibration
from ..config import DecodeConfig, TreeConfig
from ..engine import generate, start
from ..errors import GumihoError
from ..jsonl import read_jsonl
from ..methods import methods_of
from ..models import load_drafter
from ..text import encode_prompt
from . import card, datacurve, stepcurve
from .data import load_corpus, load_features
from .export import export_official
from .card import plot_history
from .checkpoint import Stopped, stop_on_signals
from .schedule import micro_tokens_for
from .trainer import Trainer, TrainConfig
from .workspace import corpus_dir_for, features_dir_for, run_dir, trained_heads, workdir_for

log = logging.getLogger(__name__)
SCALING = "scaling.json"


def training_sequences(args, target):
    """Your own conversations' features if --conversations, else the whole corpus (a share of it is taken after
    the held-out split: Trainer's `share`)."""
    if args.conversations:
        return load_features(workdir_for(args) / "features-own", target.config.hidden_size)
    return load_corpus(corpus_dir_for(args), features_dir_for(args), target.config.hidden_size)


def steps_list(text: str) -> tuple[int, ...]:
    """--keep-steps "700,1400": the steps as integers, or a one-line error naming the bad one."""
    steps = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        if not part.isdigit() or int(part) < 1:
            raise GumihoError(f"--keep-steps takes comma-separated positive step numbers; got {part!r}")
        steps.append(int(part))
    return tuple(steps)


def train_precision(args) -> str:
    """--precision auto: bf16 where it trains faster (models.bf16_trains_faster), else fp32."""
    if args.precision != "auto":
        return args.precision
    from ..models import bf16_trains_faster, resolve_device

    return "bf16" if bf16_trains_faster(resolve_device(args.device)) else "fp32"


def train_micro_tokens(args) -> int:
    """--micro-tokens 0 (auto): schedule.micro_tokens_for this device."""
    from ..models import resolve_device

    return args.micro_tokens or micro_tokens_for(resolve_device(args.device), args.tokens_per_step)


def train_run(args, target, run: str, fraction: float | None = None) -> Trainer:
    keep = steps_list(args.keep_steps)
    cfg = TrainConfig(architecture=args.architecture, epochs=args.epochs, steps=args.steps, lr=args.lr, tokens_per_step=args.tokens_per_step,
                      micro_tokens=train_micro_tokens(args),
                      draft_vocab=args.draft_vocab, seed=args.seed, precision=train_precision(args),
                      objective=args.objective, rollout=args.rollout, checkpoint_minutes=args.checkpoint_minutes,
                      keep_steps=keep, init_from=args.init_from)
    share, folder = args.data_fraction if fraction is None else fraction, run_dir(args, run)
    trainer = Trainer(target, training_sequences(args, target), cfg, folder, share)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.json").write_text(json.dumps(
        {"fraction": share, "conversations": len(trainer.train_seqs), "answer_tokens": card.answer_tokens(trainer)}))
    log.info("%s: %d training / %d held-out conversations, %d steps per epoch", run, len(trainer.train_seqs),
             len(trainer.val_seqs), trainer.steps_per_epoch)
    with stop_on_signals() as stop:
        trainer.run(stop=stop)
    if stop.is_set():
        raise Stopped(f"{run}: stopped by {signal.Signals(stop.signum).name} after step {trainer.step} of "
                      f"{trainer.total_steps}, with a checkpoint there; the same command resumes it", stop.signum)
    plot_history(trainer.history, folder / "loss.png")
    return trainer


def cmd_train(args, models) -> None:
    train_run(args, models.target(), args.run)
    log.info("drafter in %s", run_dir(args) / "drafter")


def evaluate_heads(target, drafter, prompts: list[dict], max_new_tokens: int) -> dict:
    """Acceptance at temperature 0 with the authors' tree, for every method that drafts with these heads
    (Gumiho's heads: gumiho and gumiho-serial)."""
    report = {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "tree": TreeConfig().to_dict()}
    for method in methods_of(drafter.cfg):
        acc, calibration = Acceptance(), Calibration()
        for row in tqdm(prompts, desc=f"evaluate {method}", unit="prompt"):
            ids = encode_prompt(target.tokenizer, row["prompt"])
            run = generate(start(method, target, ids, DecodeConfig(max_new_tokens=max_new_tokens), TreeConfig(),
                                 drafter))
            acc.add(run)
            calibration.add(run)
        report[method] = {**acc.to_dict(), "calibration": calibration.to_dict()}
        log.info("%s: mean accepted length %.3f, per depth %s", method, acc.mean_accept_len,
                 [round(x, 3) for x in acc.per_depth()])
    return report


def spread(rows: list, n: int) -> list:
    """n rows evenly spread over the list (all if n is 0 or too large): the prompt files are sorted by category."""
    if not 0 < n < len(rows):
        return rows
    return [rows[i * len(rows) // n] for i in range(n)]


def evaluation_prompts(args) -> list[dict]:
    return spread(read_jsonl(args.eval_prompts, required=("prompt",)), args.eval_n)


def evaluate_draft(target, draft: str, prompts: list[dict], max_new_tokens: int) -> dict:
    """The report on one set of heads (a folder, file or hub id): evaluate_heads and where the heads came from."""
    return {"draft": draft, **evaluate_heads(target, load_drafter(draft, target), prompts, max_new_tokens)}


def evaluate_run(args, target, run: str) -> dict:
    """The heads of a run folder (or --draft) evaluated; the report is kept beside them."""
    draft = args.draft if args.draft != "default" else str(trained_heads(args) if run == args.run
                                                            else run_dir(args, run) / "drafter")
    report = evaluate_draft(target, draft, evaluation_prompts(args), args.eval_tokens)
    out = Path(args.eval_out) if args.eval_out else run_dir(args, run) / "evaluation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    return report


def cmd_evaluate(args, models) -> None:
    print(json.dumps(evaluate_run(args, models.target(), args.run)))


def kept_heads(run: Path) -> list[tuple[int, Path]]:
    """(step, folder) of the heads a run kept along the way and of its latest heads, by step; step 0 is the heads
    it started from (train --init-from), where that folder still holds them (`ship` may have put the run's own
    heads there since; `steps` then reads their evaluation kept in the run, if any)."""
    found, last = {}, card.read_json(run / "drafter" / "config.json") or {}
    start = Path((last.get("train_config") or {}).get("init_from") or "").expanduser()
    if start.name and card.read_json(start / "config.json") not in (None, last):  # last: `ship` put the run's there
        found[0] = start
    for folder in [*run.glob("drafter-step*"), run / "drafter"]:
        meta = card.read_json(folder / "config.json")
        if meta and "steps" in meta:
            found[int(meta["steps"])] = folder
    return sorted(found.items())


def step_report_file(run: Path, step: int, folder: Path | None = None) -> Path:
    """Where a step point's evaluation is kept: beside the heads of the run, in the run for the heads it began from
    (folder outside the run, or None once gone; never written into another folder, such as assets/)."""
    return folder / "evaluation.json" if folder and folder.parent == run else run / f"evaluation-step{step}.json"


def cmd_steps(args, models) -> None:
    """The step curve of one run: each kept checkpoint decoded on the held-out prompts (an evaluation.json beside
    each, reused when it used the same prompts and length), then steps.json and steps.png in the run folder."""
    run, target = run_dir(args), models.target()
    heads = kept_heads(run)
    if not heads:
        raise GumihoError(f"no heads in {run}; train with --keep-steps first")
    prompts = evaluation_prompts(args)

    def fits(r: dict | None, step: int) -> bool:
        """r evaluated these heads (<run>/drafter is rewritten as training goes on) on these prompts and length."""
        return bool(r) and (r["prompts"], r["max_new_tokens"], r.get("heads_step", step)) == \
            (len(prompts), args.eval_tokens, step)

    points = []
    for step, folder in heads:
        keep = step_report_file(run, step, folder)
        report = card.read_json(keep)
        if not fits(report, step):
            log.info("step %d: evaluating %s", step, folder)
            report = {**evaluate_draft(target, str(folder), prompts, args.eval_tokens), "heads_step": step}
            keep.write_text(json.dumps(report, indent=1))
        points.append(stepcurve.step_point(step, report))
    began = card.read_json(step_report_file(run, 0))  # kept, where `ship` has since replaced the heads it began from
    if heads[0][0] != 0 and fits(began, 0):
        points.insert(0, stepcurve.step_point(0, began))
    (run / stepcurve.STEPS).write_text(json.dumps(points, indent=1))
    history = card.read_json(run / "history.json") or []
    if history:
        stepcurve.plot_steps(points, history, run / "steps.png")
    log.info("step curve: %s", [(p["step"], {m: round(r["mean_accept_len"], 3) for m, r in p.items()
                                              if isinstance(r, dict)}) for p in points])


def cmd_scaling(args, models) -> None:
    """Train and evaluate on nested shares of the corpus's prompts: what more data brings, as numbers."""
    target, points = models.target(), []
    for fraction in sorted(float(f) for f in args.fractions.split(",")):
        run = args.run if fraction == 1 else f"scale-{fraction:g}"
        folder = run_dir(args, run)
        history = card.read_json(folder / "history.json") or []
        done = history and (history[-1]["step"] >= args.steps if args.steps else history[-1]["epoch"] >= args.epochs)
        if not done:  # a finished run is read back, not loaded again
            history = train_run(args, target, run, fraction).history
        report = card.read_json(folder / "evaluation.json") or evaluate_run(args, target, run)
        points.append(datacurve.scaling_point(fraction, card.read_json(folder / "data.json"), history, report))
        (workdir_for(args) / SCALING).write_text(json.dumps(points, indent=1))
    datacurve.plot_scaling(points, workdir_for(args) / "scaling.png")
    log.info("scaling curve in %s", workdir_for(args) / "scaling.png")


def shipped_heads(args) -> Path:
    """The heads `ship` copies: the run's last, or with --ship-step N those it kept after N steps (where the step
    curve peaked before the end); then the run's evaluation.json must be theirs, since the card reports it."""
    run = run_dir(args)
    if not args.ship_step:
        if not (run / "drafter" / "model.safetensors").is_file():
            raise GumihoError(f"no trained drafter in {run}; run the train command first")
        return run / "drafter"
    heads = run / f"drafter-step{args.ship_step}"
    if not (heads / "model.safetensors").is_file():
        kept = [str(step) for step, folder in kept_heads(run)
                if folder.parent == run and folder.name != "drafter" and (folder / "model.safetensors").is_file()]
        raise GumihoError(f"--ship-step {args.ship_step}: {run} holds no heads kept after that step (kept with "
                          f"weights: {', '.join(kept) or 'none'}; from a GPU, gpu_train.sh's best.tar brings the best)")
    report = card.read_json(run / "evaluation.json") or {}
    if Path(report.get("draft", "")).name != heads.name:
        raise GumihoError(f"{run / 'evaluation.json'} is not an evaluation of {heads} (it holds "
                          f"{report.get('draft', 'none')}'s); the card reports it, so evaluate them first: train "
                          f"evaluate --run {run.name} --draft {heads} --eval-n 16")
    return heads


def ship_dest(args) -> Path:
    """Where `ship` and `ship-scaling` write: --ship-to, else the run's member's folder under assets/."""
    return card.shipped_to(args)


def cmd_ship(args, models) -> None:
    """Copy the trained heads into assets/ with a model card (data, recipe, loss, acceptance, scaling)."""
    run, heads, dest = run_dir(args), shipped_heads(args), ship_dest(args)
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(heads / name, dest / name)
    history = json.loads((run / "history.json").read_text())
    plot_history(history, dest / "loss.png")
    scaling, steps = workdir_for(args) / SCALING, run / stepcurve.STEPS
    (dest / "scaling.png").unlink(missing_ok=True)  # earlier heads' plots would sit beside a card without them
    (dest / "steps.png").unlink(missing_ok=True)
    (dest / "continued.png").unlink(missing_ok=True)  # a later run's curve, about the heads this replaces
    if scaling.is_file():
        datacurve.plot_scaling(json.loads(scaling.read_text()), dest / "scaling.png")
    if steps.is_file():
        stepcurve.plot_steps(json.loads(steps.read_text()), history, dest / "steps.png")
    with safe_open(dest / "model.safetensors", "pt") as f:  # the heads' own vocabulary, as shipped
        draft_vocab = f.get_slice("draft_vocab").get_shape()[0] if "draft_vocab" in f.keys() else None
    facts = card.Facts.gather(args, models.target(), history, draft_vocab, heads)
    (dest / "README.md").write_text(card.model_card(facts))
    log.info("shipped to %s", dest)


def cmd_ship_scaling(args, models) -> None:
    """Put the data curve (`scaling`'s result) into the shipped card: its plot beside the heads, its section in place of
    an earlier one. The curve's runs are not the shipped heads' run, so this needs neither that run nor a model."""
    points, dest = card.read_json(workdir_for(args) / SCALING), ship_dest(args)
    if not points:
        raise GumihoError(f"no data curve in {workdir_for(args) / SCALING}; run the scaling command first")
    if not (dest / "README.md").is_file():
        raise GumihoError(f"no model card in {dest}; ship heads there first (the ship command)")
    datacurve.plot_scaling(points, dest / "scaling.png")
    (dest / "README.md").write_text(card.with_section((dest / "README.md").read_text(), datacurve.HEADING,
                                                      datacurve.scaling_section(points)))
    log.info("data curve of %d shares in %s", len(points), dest / "README.md")


def cmd_ship_steps(args, models) -> None:
    """Put the step curve of a later run that went on from the shipped heads, and did not replace them, into their
    card: where more steps took them. Reads the run's steps.json and history.json; needs no model."""
    run, dest = run_dir(args), ship_dest(args)
    points, history = card.read_json(run / stepcurve.STEPS), card.read_json(run / "history.json")
    if not points or not history:
        raise GumihoError(f"no step curve in {run}; train it with --keep-steps, then run: train steps --run {run.name}")
    shipped, last = card.read_json(dest / "config.json"), card.read_json(run / "drafter" / "config.json") or {}
    if not (dest / "README.md").is_file() or shipped is None:
        raise GumihoError(f"no shipped heads with a model card in {dest}; ship heads there first (the ship command)")
    start = (last.get("train_config") or {}).get("init_from") or ""
    if points[0]["step"] != 0 or not start or Path(start).resolve() != dest.resolve() or shipped == last:
        began = start or "random weights"
        raise GumihoError(f"{run.name} did not go on from the heads in {dest} (it started from {began}; its step "
                          "curve must begin at step 0, and the heads there must not be its own)")
    stepcurve.plot_steps(points, history, dest / "continued.png")
    section = stepcurve.continued_section(run.name, last["train_config"], points, history)
    (dest / "README.md").write_text(card.with_section((dest / "README.md").read_text(), stepcurve.CONTINUED, section))
    log.info("the step curve of %s (%d points) in %s", run.name, len(points), dest / "README.md")


def cmd_export(args, models) -> None:
    """Write the heads in the authors' published layout; reads the target's files, never loads the model."""
    if not args.out:
        raise GumihoError("export needs --out, the folder to write the official layout into")
    draft = args.draft if args.draft != "default" else str(trained_heads(args))
    done = export_official(draft, args.target, args.out)
    log.info("exported %s to %s: %d tensors, %.1f MB", draft, done.folder, done.tensors, done.weights_bytes / 2**20)

"""The training loop: AdamW with warm-up and linear decay, clipping, bf16 autocast, epoch checkpoints, resume."""
from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from tqdm import tqdm

from .data import Sequence, choose_draft_vocab, keep_share, split
from ..config import ARCHITECTURES
from ..drafter import DrafterConfig, GumihoDrafter, SharedWeights, check_draft_vocab, load_state, save_drafter
from ..errors import GumihoError
from .checkpoint import EpochProgress, load_checkpoint, random_state, restore_random_state, save_checkpoint
from .batch import collate, uniform_noise
from .objective import OBJECTIVES, LossWeights, Metrics, gumiho_loss, plan_for
from .rollout import AS_DRAFTED, ROLLOUTS
from .schedule import CPU_MICRO_TOKENS, lr_at, micro_batches, step_ends
from ..target import Target
from ..timing import device_name

log = logging.getLogger(__name__)
LOSS_SHOWN_EVERY = 10  # optimizer steps between the progress bar's loss readings


@dataclass(frozen=True)
class TrainConfig:
    architecture: str = "gumiho"  # the family member to train (config.ARCHITECTURES)
    epochs: int = 3  # over ~1.5M answer tokens (the shipped heads v4); small data needs more
    steps: int = 0  # optimizer steps in all, fixed in advance (the rate schedule's length); 0 = `epochs` decide
    lr: float = 1.5e-3  # the paper's 2e-4 is for 32-sequence steps over 68k conversations; we take small steps
    beta1: float = 0.9
    beta2: float = 0.95
    warmup_steps: int = 100
    grad_clip: float = 0.5
    tokens_per_step: int = 4096  # about 20 answers per optimizer step
    micro_tokens: int = CPU_MICRO_TOKENS  # padded tokens per forward; `train` on a GPU: schedule.micro_tokens_for
    noise: float = 0.2
    # The paper weighs CE 0.1 and starts the MLP heads' CE after 2 epochs ("paper"). With a CPU budget of a
    # few hundred steps the CE term is what drives acceptance: after 40 steps the MLP heads' top-10 agreement
    # with the target was 0.39 with CE 1.0 from the start ("distill") against 0.25 with the paper's schedule.
    objective: str = "distill"  # a key of objective.OBJECTIVES
    # How serial step 2 and the MLP heads get their inputs (rollout.ROLLOUTS). As drafted: on the same 3 corpus
    # parts, 40 steps each, held-out depth-2 top-1 as drafting runs it was 0.163 against 0.068 teacher-forced.
    rollout: str = AS_DRAFTED
    ce_fraction: float = 0.25  # CE on a random quarter of the positions each step (unbiased, 4x cheaper)
    draft_vocab: int = 8192  # 0 = the full vocabulary
    holdout: float = 0.05
    seed: int = 0
    precision: str = "bf16"  # autocast dtype for matmuls: bf16 or fp32
    init_std: float = 0.02
    checkpoint_minutes: float = 10.0  # a resumable checkpoint at least this often, inside an epoch too
    checkpoint_steps: int = 0  # ... and every this many optimizer steps (0: by time only)
    keep_steps: tuple[int, ...] = ()  # also keep the heads as they were after these steps: drafter-step<N>/
    # Heads to start from instead of random weights (a drafter folder or file, as `--draft` takes): a run that goes
    # on where shipped heads stopped, with its own schedule and a fresh optimizer. "" = random weights.
    init_from: str = ""

    def __post_init__(self):
        for name in ("epochs", "tokens_per_step", "micro_tokens"):
            if getattr(self, name) < 1:
                raise GumihoError(f"{name} must be >= 1; got {getattr(self, name)}")
        for name in ("steps", "checkpoint_steps"):
            if getattr(self, name) < 0:
                raise GumihoError(f"{name} must be >= 0; got {getattr(self, name)}")
        if self.objective not in OBJECTIVES:
            raise GumihoError(f"objective must be one of {', '.join(OBJECTIVES)}; got {self.objective!r}")
        if self.rollout not in ROLLOUTS:
            raise GumihoError(f"rollout must be one of {', '.join(ROLLOUTS)}; got {self.rollout!r}")
        if self.architecture not in ARCHITECTURES:
            raise GumihoError(f"architecture must be one of {', '.join(ARCHITECTURES)}; got {self.architecture!r}")
        if self.precision not in ("bf16", "fp32"):
            raise GumihoError(f"precision must be bf16 or fp32; got {self.precision!r}")
        if not 0 <= self.holdout < 1:
            raise GumihoError(f"holdout must be in [0, 1); got {self.holdout}")
        if not self.checkpoint_minutes > 0:
            raise GumihoError(f"checkpoint_minutes must be > 0; got {self.checkpoint_minutes}")
        object.__setattr__(self, "keep_steps", tuple(sorted(int(k) for k in self.keep_steps)))


# Settings a run may change when it resumes: they decide when to stop or save, not what a step computes.
RESUMABLE_CHANGES = ("epochs", "checkpoint_minutes", "checkpoint_steps", "keep_steps")


def new_drafter(target: Target, vocab_map: torch.Tensor | None, cfg: TrainConfig) -> GumihoDrafter:
    torch.manual_seed(cfg.seed)
    shared = target.shared_weights()
    lm_head = shared.lm_head if vocab_map is None else shared.lm_head[vocab_map.to(shared.lm_head.device)]
    if cfg.precision == "bf16":  # the frozen lm_head in bf16 once, instead of autocast casting it at every call
        lm_head = lm_head.to(torch.bfloat16)
    shared = SharedWeights(shared.embed, lm_head, vocab_map)
    drafter = GumihoDrafter(DrafterConfig.from_target(target.config, cfg.architecture), shared, origin="training")
    with torch.no_grad():
        for layer in drafter.layers:
            for p in layer.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, cfg.init_std)
    return drafter.to(target.device).float().train()  # the fresh layers are made on the CPU


def warm_drafter(target: Target, cfg: TrainConfig) -> GumihoDrafter:
    """A drafter to train from the trained heads at cfg.init_from: their weights as stored, their draft vocabulary."""
    from ..drafter_files import trained_steps
    from ..models import read_drafter

    heads_cfg, state, source = read_drafter(cfg.init_from, target)
    vocab = state.get("draft_vocab")
    vocab = None if vocab is None else check_draft_vocab(vocab, target.vocab_size, f"{source}: draft_vocab")
    drafter = new_drafter(target, vocab, cfg)
    if heads_cfg != drafter.cfg:
        raise GumihoError(f"{source}: heads of another shape ({heads_cfg}); this target's are {drafter.cfg}")
    load_state(drafter, state, source)  # copied into the fp32 parameters
    drafter.steps = trained_steps(source)
    log.info("starting from the heads in %s (draft vocabulary %d)", source, drafter.draft_vocab_size)
    return drafter


class Trainer:
    """One training run in a folder: resumes from its latest checkpoint (mid-epoch too) and stops at the end of
    its schedule, `cfg.steps` optimizer steps if set, else `cfg.epochs` epochs."""

    def __init__(self, target: Target, seqs: list[Sequence], cfg: TrainConfig, out_dir: str | Path,
                 share: float = 1.0):  # share: of the prompts trained on (keep_share); the held-out set is all's
        self.target, self.cfg, self.out = target, cfg, Path(out_dir)
        train, self.val_seqs = split(seqs, cfg.holdout, cfg.seed)
        self.train_seqs = keep_share(train, share)
        self.rng = random.Random(cfg.seed)
        self.history: list[dict] = []
        self.epoch, self.step = 0, 0
        self.progress = EpochProgress()
        self.steps_before: int | None = 0  # the heads' optimizer steps before this run (None: they do not say)
        if (self.out / "latest.pt").is_file():
            self._resume(self.out / "latest.pt")
        elif cfg.init_from:
            self.drafter = warm_drafter(target, cfg)
            self.steps_before = self.drafter.steps
            self.opt = self._optimizer()
        else:
            vocab = choose_draft_vocab(self.train_seqs, cfg.draft_vocab, target)
            self.drafter = new_drafter(target, vocab, cfg)
            self.opt = self._optimizer()
        self.steps_per_epoch = len(step_ends(micro_batches(self.train_seqs, cfg.micro_tokens, random.Random(0)),
                                             cfg.tokens_per_step))
        self.total_steps = cfg.steps or self.steps_per_epoch * cfg.epochs

    def _optimizer(self):
        params = [p for p in self.drafter.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.cfg.lr, betas=(self.cfg.beta1, self.cfg.beta2), weight_decay=0.0)

    def data_fingerprint(self) -> dict:
        return {"conversations": len(self.train_seqs), "tokens": sum(int(s.ids.shape[0]) for s in self.train_seqs)}

    def _resume(self, path: Path) -> None:
        state = load_checkpoint(path, self.cfg, self.data_fingerprint(), RESUMABLE_CHANGES)
        self.drafter = new_drafter(self.target, state.get("vocab_map"), self.cfg)
        self.drafter.load_state_dict(state["drafter"], strict=False)
        self.opt = self._optimizer()
        self.opt.load_state_dict(state["optimizer"])
        self.epoch, self.step, self.history = state["epoch"], state["step"], state["history"]
        self.rng.setstate(state["rng"])
        restore_random_state(self.target.device, state)
        self.progress = EpochProgress.from_state(state.get("progress"))
        self.steps_before = state.get("steps_before", None if self.cfg.init_from else 0)
        log.info("resumed from %s at epoch %d, step %d (micro-batch %d of the epoch)", path, self.epoch, self.step,
                 self.progress.micro)

    def _weights(self) -> LossWeights:
        return OBJECTIVES[self.cfg.objective].at_epoch(self.epoch, self.cfg.ce_fraction)

    def _autocast(self):
        dev = self.target.device.type
        return torch.autocast(dev, dtype=torch.bfloat16, enabled=self.cfg.precision == "bf16")

    def _on_device(self, micro: list[Sequence], weights: LossWeights, metrics: bool):
        """The micro-batch and its loss plan (made on the host, plan.py) on the device; noise for training."""
        host, device = collate(micro), self.target.device
        batch = type(host)(*(getattr(host, f.name).to(device, non_blocking=True) for f in fields(host)))
        noise = None if metrics else uniform_noise(batch, self.cfg.noise)
        plan = plan_for(self.drafter, host, weights, metrics=metrics, rollout=self.cfg.rollout)
        return batch, noise, plan.to(device)

    def finished(self) -> bool:
        return self.step >= self.cfg.steps if self.cfg.steps else self.epoch >= self.cfg.epochs

    def _epoch_plan(self) -> tuple[list[list[Sequence]], set[int]]:
        """This epoch's micro-batches and the ones that end a step; a resumed epoch draws the same ones again."""
        if self.progress.micro == 0:
            self.progress = EpochProgress(rng=self.rng.getstate())
        self.rng.setstate(self.progress.rng)
        batches = micro_batches(self.train_seqs, self.cfg.micro_tokens, self.rng)
        ends = step_ends(batches, self.cfg.tokens_per_step)
        if not self.cfg.steps:  # this epoch's steps counted exactly, the later ones estimated alike
            self.steps_per_epoch = len(ends)
            done = sum(e < self.progress.micro for e in ends)
            self.total_steps = self.step - done + self.steps_per_epoch * (self.cfg.epochs - self.epoch)
        return batches, set(ends)

    def _micro_step(self, micro: list[Sequence], weights: LossWeights) -> Metrics:
        """Forward and backward of one micro-batch; nothing is read back to the host (the metrics stay on the
        device, summed there until a checkpoint or the epoch's end reads them)."""
        batch, noise, plan = self._on_device(micro, weights, metrics=False)
        with self._autocast():
            loss, metrics = gumiho_loss(self.drafter, batch, weights, noise, metrics=False, rollout=self.cfg.rollout,
                                        plan=plan)
        (loss * plan.tokens / self.cfg.tokens_per_step).backward()
        self.progress.add(metrics, plan.tokens)
        return metrics

    def train_epoch(self, until: int | None = None, stop: threading.Event | None = None) -> dict | None:
        """Train to the end of the epoch (or of the schedule); None if stopped, with a checkpoint, at step `until`
        or after the step during which `stop` was set."""
        self.drafter.train()
        batches, ends = self._epoch_plan()
        weights, saved, t0 = self._weights(), time.time(), time.time() - self.progress.seconds
        bar = tqdm(range(self.progress.micro, len(batches)), desc=f"epoch {self.epoch + 1}", unit="batch",
                   leave=False)
        for i in bar:
            metrics = self._micro_step(batches[i], weights)
            if i not in ends:
                continue
            if self.step % LOSS_SHOWN_EVERY == 0:  # a read of the device, so not at every micro-batch
                bar.set_postfix(loss=f"{metrics.floats()['loss']:.3f}", step=self.step)
            self._optimizer_step()
            self.progress.micro, self.progress.seconds = i + 1, time.time() - t0
            if self.finished() and i + 1 < len(batches):
                break
            halt = self.step == until or (stop is not None and stop.is_set())
            if halt or self._checkpoint_due(saved):
                self._save()
                saved = time.time()
                if halt:
                    return None
        return self._end_epoch(self.progress.micro / len(batches))

    def _checkpoint_due(self, saved: float) -> bool:
        every = self.cfg.checkpoint_steps
        return bool(every and self.step % every == 0) or time.time() - saved >= 60 * self.cfg.checkpoint_minutes

    def _end_epoch(self, share: float) -> dict:
        """The history row of an epoch (or of the schedule's last, partial epoch), with validation; checkpointed."""
        done, full = self.progress, share >= 1
        self.epoch += full
        row = {"epoch": self.epoch if full else round(self.epoch + share, 3),
               "step": self.step, "seconds": done.seconds, **done.means("train_"), **self.validate()}
        self.progress = EpochProgress()
        self.history.append(row)
        self._save()
        return row

    def _optimizer_step(self) -> None:
        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.step, self.total_steps, self.cfg)
        torch.nn.utils.clip_grad_norm_(self.drafter.parameters(), self.cfg.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        if self.step in self.cfg.keep_steps:
            save_drafter(self.drafter, self.out / f"drafter-step{self.step}", dtype=torch.float16,
                         extra=self._drafter_meta())

    @torch.no_grad()
    def validate(self, seqs: list[Sequence] | None = None) -> dict:
        """Mean held-out metrics ("val_" names) of the run's held-out conversations, or of `seqs`."""
        seqs = self.val_seqs if seqs is None else seqs
        if not seqs:
            return {}
        self.drafter.eval()
        progress = EpochProgress()
        weights = OBJECTIVES[self.cfg.objective]
        for micro in micro_batches(seqs, self.cfg.micro_tokens, random.Random(0)):
            batch, _, plan = self._on_device(micro, weights, metrics=True)
            with self._autocast():
                _, metrics = gumiho_loss(self.drafter, batch, weights, rollout=self.cfg.rollout, plan=plan)
            progress.add(metrics, plan.tokens)
        self.drafter.train()
        return progress.means("val_")

    def _drafter_meta(self) -> dict:
        since = {} if self.steps_before is None else {"steps_from_scratch": self.steps_before + self.step}
        return {"target": self.target.name, "epoch": self.epoch, "steps": self.step, **since,
                "train_config": asdict(self.cfg),
                "device": device_name(self.target.device)}  # the card says where the heads were trained

    def _save(self) -> None:
        state = {"drafter": {k: v for k, v in self.drafter.state_dict().items() if not k.startswith("rotary.")},
                 "optimizer": self.opt.state_dict(), "epoch": self.epoch, "step": self.step,
                 "history": self.history, "train_config": asdict(self.cfg), "rng": self.rng.getstate(),
                 **random_state(self.target.device), "vocab_map": self.drafter.shared.vocab_map,
                 "progress": self.progress.to_state(), "data": self.data_fingerprint(),
                 "steps_before": self.steps_before}
        save_checkpoint(self.out / "latest.pt", state)
        save_drafter(self.drafter, self.out / "drafter", dtype=torch.float16, extra=self._drafter_meta())
        (self.out / "history.json").write_text(json.dumps(self.history, indent=1))

    def run(self, until: int | None = None, stop: threading.Event | None = None) -> GumihoDrafter:
        """Train to the end of the schedule; `until`: stop after that optimizer step with a checkpoint, as if
        interrupted there (a later Trainer on the same folder resumes); `stop`: likewise after the step during which
        it is set (checkpoint.stop_on_signals sets it)."""
        while not self.finished():
            row = self.train_epoch(until, stop)
            if row is None:
                break
            log.info("epoch %s: %s", row["epoch"], {k: round(v, 4) for k, v in row.items()
                                                     if k.endswith(("loss", "top1")) or k == "seconds"})
        return self.drafter.eval()

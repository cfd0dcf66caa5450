"""Self-distillation data: the target answers the training prompts, and its features are kept.

`generate_corpus` runs the continuous-batching sampler over every (prompt, mode) pair not yet in
the corpus and writes a corpus part (token ids, for git) and its features (for the cache) every
`part_size` answers. `extract_part_features` remakes a part's features from its token ids, for a
corpus brought to a fresh machine. The progress bar shows answer tokens per second.
"""
from __future__ import annotations

import logging
import random
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from ..errors import GumihoError
from ..target import Target
from ..text import encode_prompt
from .corpus import Conversation, next_part_path, parts, prompt_key, read_corpus, read_part, write_part
from .sampler import Answer, BatchSampler, Request

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AnswerMode:
    name: str  # "greedy" or "t0.7" ...
    temperature: float  # 0 = greedy


def parse_modes(spec: str) -> list[AnswerMode]:
    """"greedy,t0.7,t1.0" -> modes."""
    modes = []
    for part in spec.split(","):
        part = part.strip()
        if part == "greedy":
            modes.append(AnswerMode("greedy", 0.0))
        elif part.startswith("t"):
            try:
                modes.append(AnswerMode(part, float(part[1:])))
            except ValueError:
                raise GumihoError(f"answer mode {part!r}: use 'greedy' or t<temperature>, e.g. t0.7") from None
        else:
            raise GumihoError(f"answer mode {part!r}: use 'greedy' or t<temperature>, e.g. t0.7")
    return modes


@dataclass(frozen=True)
class DistillConfig:
    rows: int = 96  # conversations in flight at once
    max_new_tokens: int = 320
    max_prompt_tokens: int = 512  # longer prompts are skipped
    part_size: int = 256  # answers per corpus part (a part is the unit of resuming)
    seed: int = 0
    worker: int = 0  # this process makes the requests whose hash % workers == worker
    workers: int = 1

    def mine(self, key: str, mode: str) -> bool:
        return zlib.crc32(f"{key}/{mode}".encode()) % self.workers == self.worker


def pending_requests(target: Target, prompts: list[dict], modes: list[AnswerMode], done: set,
                     cfg: DistillConfig) -> list[Request]:
    """A request per (prompt, mode) not in `done`, in a seeded random order (lengths mix in the batch)."""
    reqs = []
    for row in prompts:
        key = prompt_key(row["prompt"])
        wanted = [m for m in modes if (key, m.name) not in done and cfg.mine(key, m.name)]
        if not wanted:
            continue
        ids = tuple(encode_prompt(target.tokenizer, row["prompt"]))
        if len(ids) > cfg.max_prompt_tokens:
            log.warning("skipping a prompt of %d tokens (limit %d): %.60s", len(ids), cfg.max_prompt_tokens,
                        row["prompt"])
            continue
        reqs += [Request((key, m.name), ids, m.temperature) for m in wanted]
    random.Random(cfg.seed).shuffle(reqs)
    return reqs


def generate_corpus(target: Target, prompts: list[dict], modes: list[AnswerMode], corpus_dir: Path,
                    features_dir: Path, cfg: DistillConfig = DistillConfig()) -> int:
    """Answer every missing (prompt, mode); returns how many answers were added."""
    corpus_dir, features_dir = Path(corpus_dir), Path(features_dir)
    corpus_dir.mkdir(parents=True, exist_ok=True)
    features_dir.mkdir(parents=True, exist_ok=True)
    done = {(c.prompt_key, c.mode) for c in read_corpus(corpus_dir)}
    reqs = pending_requests(target, prompts, modes, done, cfg)
    log.info("%d answers in the corpus, %d to make", len(done), len(reqs))
    if not reqs:
        return 0
    gen = torch.Generator(device=target.device).manual_seed(cfg.seed + 1000 * cfg.worker + len(done))
    sampler = BatchSampler(target, cfg.rows, cfg.max_new_tokens, max(len(r.prompt_ids) for r in reqs), gen)
    buffer, tokens, t0 = [], 0, time.perf_counter()
    desc = f"answers (worker {cfg.worker + 1}/{cfg.workers})" if cfg.workers > 1 else "answers"
    with tqdm(total=len(reqs), desc=desc, unit="answer", smoothing=0.05, position=cfg.worker) as bar:
        for ans in sampler.run(reqs):
            buffer.append(ans)
            tokens += len(ans.answer_ids)
            bar.update(1)
            bar.set_postfix_str(f"{tokens / (time.perf_counter() - t0):.0f} answer tokens/s")
            if len(buffer) >= cfg.part_size:
                _flush(buffer, corpus_dir, features_dir, target.name, cfg.worker)
                buffer = []
    if buffer:
        _flush(buffer, corpus_dir, features_dir, target.name, cfg.worker)
    log.info("%d answers, %d answer tokens in %.0f s (%.0f tokens/s)", len(reqs), tokens,
             time.perf_counter() - t0, tokens / (time.perf_counter() - t0))
    return len(reqs)


def _flush(answers: list[Answer], corpus_dir: Path, features_dir: Path, target_name: str, worker: int) -> None:
    rows = [Conversation(a.key[0], a.key[1], a.prompt_ids, a.answer_ids) for a in answers]
    path = next_part_path(corpus_dir, worker)
    _save_features(features_dir / f"{path.stem}.safetensors", [a.features for a in answers], path.stem)
    write_part(path, rows, target_name)


def _save_features(path: Path, feats: list[torch.Tensor], part: str) -> None:
    offsets = torch.tensor([0] + [f.shape[0] for f in feats]).cumsum(0)
    tmp = path.with_name(path.name + ".tmp")
    save_file({"hidden": torch.cat(feats).to(torch.float16), "offsets": offsets}, str(tmp),
              metadata={"part": part, "rows": str(len(feats)), "tokens": str(int(offsets[-1]))})
    tmp.rename(path)


def features_match(path: Path, rows: list[Conversation]) -> bool:
    """Whether `path` holds the features of exactly these conversations (same count and lengths)."""
    if not path.is_file():
        return False
    with safe_open(str(path), framework="pt") as f:
        offsets = f.get_tensor("offsets").tolist()
    return offsets == [0] + list(torch.tensor([len(r.ids) for r in rows]).cumsum(0).tolist())


@torch.inference_mode()
def extract_part_features(target: Target, corpus_dir: Path, features_dir: Path, max_batch_tokens: int = 4096) -> int:
    """Remake the features of every corpus part that lacks them; returns how many parts were made."""
    made = 0
    for part in tqdm(parts(corpus_dir), desc="feature parts", unit="part"):
        rows = read_part(part)
        out = Path(features_dir) / f"{part.stem}.safetensors"
        if features_match(out, rows):
            continue
        Path(features_dir).mkdir(parents=True, exist_ok=True)
        _save_features(out, batched_features(target, [r.ids for r in rows], max_batch_tokens), part.stem)
        made += 1
    return made


def batched_features(target: Target, seqs: list[list[int]], max_batch_tokens: int) -> list[torch.Tensor]:
    """The target's features of each sequence (one causal forward per length-sorted batch). -> [T_i, H] each"""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    out: list[torch.Tensor | None] = [None] * len(seqs)
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and len(seqs[order[j]]) * (j - i + 1) <= max_batch_tokens:
            j += 1
        batch = [order[k] for k in range(i, j)]
        for k, f in zip(batch, _forward_padded(target, [seqs[k] for k in batch])):
            out[k] = f
        i = j
    return out


def _forward_padded(target: Target, seqs: list[list[int]]) -> list[torch.Tensor]:
    """Right-padded batch, causal mask; padding never influences a real token."""
    B, L, dev = len(seqs), max(len(s) for s in seqs), target.device
    ids = torch.zeros(B, L, dtype=torch.long, device=dev)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s, device=dev)
    allowed = torch.ones(L, L, dtype=torch.bool, device=dev).tril()[None, None].expand(B, 1, L, L)
    positions = torch.arange(L, device=dev)[None].expand(B, L)
    feats = target.forward_batch(ids, positions, allowed, None)
    return [feats[b, :len(s)].to("cpu", torch.float16) for b, s in enumerate(seqs)]

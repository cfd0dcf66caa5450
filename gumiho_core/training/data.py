"""Training data for the drafter: the target's own answers (self-distillation) and its features.

1. `generate_answers`: the target answers each prompt under its chat template, in batches,
   greedily and by sampling; one JSON line per answer, appended as batches finish (resumable).
2. `extract_features`: one target forward over each conversation records the last layer's
   (post-norm) hidden states; shards of safetensors on disk (resumable).
A user can bring conversations instead: JSONL lines of {"messages": [{"role", "content"}, ...]}
or {"prompt", "answer"}.
"""
from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..errors import GumihoError
from ..jsonl import read_jsonl  # noqa: F401  (re-exported for the CLI)
from ..target import Target
from ..text import encode_prompt

log = logging.getLogger(__name__)
PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"
TRAIN_PROMPTS = PROMPTS_DIR / "train.jsonl"  # written by hand
TRAIN_PROMPT_FILES = (TRAIN_PROMPTS, PROMPTS_DIR / "train_generated.jsonl")  # the second: written by the target


# -- 1. answers --------------------------------------------------------------------------------
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


@torch.inference_mode()
def batch_generate(target: Target, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                   generator: torch.Generator) -> list[list[int]]:
    """Answers to a batch of tokenised prompts (left-padded), each up to and including its end token."""
    B, dev = len(prompts), target.device
    width = max(len(p) for p in prompts)
    ids = torch.zeros(B, width, dtype=torch.long, device=dev)
    attn = torch.zeros(B, width, dtype=torch.long, device=dev)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    cache = target.new_cache()
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    answers = [[] for _ in range(B)]
    alive = torch.ones(B, dtype=torch.bool, device=dev)
    eos = torch.tensor(sorted(target.eos_ids), device=dev)
    for _ in range(max_new_tokens):
        out = target.model(input_ids=ids, attention_mask=attn, position_ids=pos, cache=cache, use_cache=True,
                           logits_to_keep=1)
        logits = out.logits[:, -1].float()  # [B, V]
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
        for i in alive.nonzero()[:, 0].tolist():
            answers[i].append(int(nxt[i]))
        alive &= ~torch.isin(nxt, eos)
        if not alive.any():
            break
        ids, pos = nxt[:, None], pos[:, -1:] + 1
        attn = torch.cat([attn, torch.ones(B, 1, dtype=attn.dtype, device=dev)], dim=1)
    return answers


def generate_answers(target: Target, prompts: list[dict], out_path: str | Path, modes: list[AnswerMode],
                     batch_size: int = 16, max_new_tokens: int = 320, seed: int = 0) -> Path:
    """Append the target's answers to out_path, skipping (prompt, mode) pairs already there."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    resuming = out_path.is_file() and out_path.stat().st_size
    done = {(r["id"], r["mode"]) for r in read_jsonl(out_path)} if resuming else set()
    todo = [(i, m) for m in modes for i in range(len(prompts)) if (i, m.name) not in done]
    encoded = {i: encode_prompt(target.tokenizer, prompts[i]["prompt"]) for i, _ in todo}
    todo.sort(key=lambda im: (im[1].name, len(encoded[im[0]])))  # similar lengths share a batch
    gen = torch.Generator(device=target.device).manual_seed(seed)
    with open(out_path, "a", encoding="utf-8") as f, tqdm(total=len(todo), desc="answers", unit="answer") as bar:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            mode = chunk[0][1]
            chunk = [c for c in chunk if c[1] == mode]  # a batch never mixes modes
            answers = batch_generate(target, [encoded[i] for i, _ in chunk], max_new_tokens, mode.temperature, gen)
            for (i, m), ans in zip(chunk, answers):
                f.write(json.dumps({"id": i, "mode": m.name, "category": prompts[i].get("category", ""),
                                    "prompt": prompts[i]["prompt"], "prompt_ids": encoded[i],
                                    "answer_ids": ans}) + "\n")
            f.flush()
            bar.update(len(chunk))
    return out_path


# -- 2. features -------------------------------------------------------------------------------
def conversation_tokens(row: dict, tokenizer, max_len: int) -> tuple[list[int], list[int]]:
    """(token ids, loss mask: 1 on assistant tokens) of one conversation row."""
    if "prompt_ids" in row and "answer_ids" in row:
        ids, mask = list(row["prompt_ids"]), [0] * len(row["prompt_ids"])
        ids += row["answer_ids"]
        mask += [1] * len(row["answer_ids"])
    elif "messages" in row:
        ids, mask = _messages_tokens(row["messages"], tokenizer)
    elif "prompt" in row and "answer" in row:
        ids, mask = _messages_tokens([{"role": "user", "content": row["prompt"]},
                                      {"role": "assistant", "content": row["answer"]}], tokenizer)
    else:
        raise GumihoError("a conversation needs prompt_ids+answer_ids, messages, or prompt+answer")
    return ids[:max_len], mask[:max_len]


def _messages_tokens(messages: list[dict], tokenizer) -> tuple[list[int], list[int]]:
    def enc(msgs, gen_prompt):
        text = tokenizer.apply_chat_template(msgs, add_generation_prompt=gen_prompt, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    ids, mask = [], []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise GumihoError(f"message {i} needs 'role' and 'content'")
        if msg["role"] != "assistant":
            continue
        prefix, full = enc(messages[:i], True), enc(messages[: i + 1], False)
        if full[: len(ids)] != ids or full[: len(prefix)] != prefix:
            raise GumihoError("the chat template does not extend earlier turns token by token")
        mask += [0] * (len(prefix) - len(ids)) + [1] * (len(full) - len(prefix))
        ids = full
    if not any(mask):
        raise GumihoError("a conversation has no assistant message to learn from")
    return ids, mask


@torch.inference_mode()
def extract_features(target: Target, rows: list[dict], out_dir: str | Path, shard_size: int = 256,
                     max_len: int = 1024) -> Path:
    """Write shard_XXXX.safetensors files with hidden [N, H] fp16, ids [N], mask [N], offsets [n+1]."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shards = range(0, len(rows), shard_size)
    for k, start in enumerate(tqdm(shards, desc="feature shards", unit="shard")):
        path = out_dir / f"shard_{k:04d}.safetensors"
        chunk = rows[start:start + shard_size]
        if _shard_holds(path, start, len(chunk)):
            continue  # resumable: finished shards are kept (a shard cut short by fewer rows is redone)
        hidden, ids, mask, offsets = [], [], [], [0]
        for row in chunk:
            toks, m = conversation_tokens(row, target.tokenizer, max_len)
            t = torch.tensor(toks, device=target.device)
            feats = target.forward(t, torch.arange(len(toks), device=t.device), None, target.new_cache())
            hidden.append(feats.to("cpu", torch.float16))
            ids.append(torch.tensor(toks, dtype=torch.int32))
            mask.append(torch.tensor(m, dtype=torch.uint8))
            offsets.append(offsets[-1] + len(toks))
        tmp = path.with_suffix(".tmp")
        save_file({"hidden": torch.cat(hidden), "ids": torch.cat(ids), "mask": torch.cat(mask),
                   "offsets": torch.tensor(offsets, dtype=torch.int64)}, str(tmp),
                  metadata={"start": str(start), "count": str(len(chunk))})
        tmp.rename(path)
    (out_dir / "meta.json").write_text(json.dumps({"target": target.name, "hidden_size": target.config.hidden_size,
                                                   "vocab_size": target.vocab_size, "conversations": len(rows)}))
    return out_dir


def _shard_holds(path: Path, start: int, count: int) -> bool:
    from safetensors import safe_open

    if not path.is_file():
        return False
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    return meta.get("start") == str(start) and meta.get("count") == str(count)


@dataclass(frozen=True)
class Sequence:
    hidden: torch.Tensor  # [T, H] fp16
    ids: torch.Tensor  # [T]
    mask: torch.Tensor  # [T] 1 on assistant tokens


def load_features(folder: str | Path, target_hidden: int | None = None) -> list[Sequence]:
    from safetensors.torch import load_file

    folder = Path(folder)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise GumihoError(f"{folder} holds no extracted features (no meta.json); run extract-features first")
    meta = json.loads(meta_path.read_text())
    if target_hidden is not None and meta["hidden_size"] != target_hidden:
        raise GumihoError(f"features in {folder} were extracted from a model with hidden size "
                          f"{meta['hidden_size']}, this target has {target_hidden}")
    seqs = []
    for path in sorted(folder.glob("shard_*.safetensors")):
        d = load_file(str(path))
        off = d["offsets"].tolist()
        for a, b in zip(off, off[1:]):
            seqs.append(Sequence(d["hidden"][a:b], d["ids"][a:b].long(), d["mask"][a:b].bool()))
    if not seqs:
        raise GumihoError(f"{folder} holds no feature shards")
    return seqs


def split(seqs: list, holdout: float, seed: int) -> tuple[list, list]:
    order = list(range(len(seqs)))
    random.Random(seed).shuffle(order)
    n_val = max(1, int(len(seqs) * holdout)) if holdout > 0 else 0
    return [seqs[i] for i in order[n_val:]], [seqs[i] for i in order[:n_val]]

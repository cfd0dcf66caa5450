"""Training data for the drafter, as the trainer reads it: conversations with the target's features.

1. The target's own answers are made by `distill.generate_corpus` and stored as token ids (`corpus.py`);
   `load_corpus` joins them to their features (`distill.extract_part_features`).
2. `extract_features`: one target forward over each conversation records the last layer's
   (post-norm) hidden states; shards of safetensors on disk (resumable).
3. `split`, `keep_share`: the held-out conversations and the share trained on; `choose_draft_vocab`: the
   tokens the heads may draft, the most frequent of the training data.
A user can bring conversations instead: JSONL lines of {"messages": [{"role", "content"}, ...]}
or {"prompt", "answer"}.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..errors import GumihoError
from ..jsonl import read_jsonl  # noqa: F401  (re-exported for the CLI)
from ..target import Target
from .corpus import Conversation, parts, read_part
from .distill import features_match

log = logging.getLogger(__name__)


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
    group: str = ""  # conversations of one group (answers to one prompt) are held out together


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


def held_out_groups(groups, holdout: float, seed: int) -> set[str]:
    """The groups (prompt keys) a `holdout` share of which is held out. A group's side depends on its own name only
    (a hash), so answers added to the corpus later never move an old group between the sides."""
    def draw(group: str) -> float:
        digest = hashlib.sha256(f"{seed}:{group}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64

    val = {g for g in groups if draw(g) < holdout}
    if holdout > 0 and not val and groups:  # a tiny corpus still validates on something
        val = {min(groups, key=draw)}
    return val


def split(seqs: list[Sequence], holdout: float, seed: int) -> tuple[list, list]:
    """(train, held-out): a `holdout` share of the groups is held out (held_out_groups), every answer of a prompt
    together (else a prompt's greedy answer would be learned and its sampled answer 'held out')."""
    names = [s.group or str(i) for i, s in enumerate(seqs)]
    val = held_out_groups(names, holdout, seed)
    held = [g in val for g in names]
    return [s for s, h in zip(seqs, held) if not h], [s for s, h in zip(seqs, held) if h]


def load_corpus(corpus_dir: str | Path, features_dir: str | Path, hidden_size: int | None = None,
                fraction: float = 1.0) -> list[Sequence]:
    """The corpus's conversations with their features; `fraction` keeps that share of the prompts (nested:
    the prompts kept at 1/8 are among those kept at 1/4)."""
    from safetensors.torch import load_file

    seqs = []
    for part in parts(corpus_dir):
        rows, path = read_part(part), Path(features_dir) / f"{part.stem}.safetensors"
        if not features_match(path, rows):
            raise GumihoError(f"no features for corpus part {part.name} in {features_dir}; run extract-features")
        d = load_file(str(path))
        if hidden_size is not None and d["hidden"].shape[1] != hidden_size:
            raise GumihoError(f"features in {features_dir} have hidden size {d['hidden'].shape[1]}, this target "
                              f"{hidden_size}")
        off = d["offsets"].tolist()
        for r, a, b in zip(rows, off, off[1:]):
            if _in_fraction(r.prompt_key, fraction):
                seqs.append(conversation_sequence(r, d["hidden"][a:b]))
    if not seqs:
        raise GumihoError(f"the corpus in {corpus_dir} is empty; run generate-data first")
    return seqs


def conversation_sequence(row: Conversation, hidden: torch.Tensor) -> Sequence:
    """A corpus conversation with its features [T, H]: the loss counts the answer's tokens, grouped by prompt."""
    mask = torch.tensor([False] * len(row.prompt_ids) + [True] * len(row.answer_ids))
    return Sequence(hidden, torch.tensor(row.ids), mask, row.prompt_key)


def _in_fraction(key: str, fraction: float) -> bool:
    return int(key[:8], 16) / 16 ** 8 < fraction


def keep_share(seqs: list[Sequence], fraction: float) -> list[Sequence]:
    """The conversations of a `fraction` of the prompts (nested, as load_corpus keeps them). Applied to the
    training side after `split`, so every share of a data curve is measured on the same held-out conversations."""
    if fraction >= 1:
        return seqs
    if not all(s.group[:8] and set(s.group[:8]) <= set("0123456789abcdef") for s in seqs):
        raise GumihoError("--data-fraction takes a share of the corpus's prompts; these conversations have no "
                          "prompt keys (your own --conversations): train on all of them")
    return [s for s in seqs if _in_fraction(s.group, fraction)]


def choose_draft_vocab(seqs: list[Sequence], size: int, target: Target) -> torch.Tensor | None:
    """The `size` most frequent tokens of the training conversations (end tokens always in), sorted ids."""
    if size <= 0 or size >= target.vocab_size:
        return None
    counts = Counter()
    for s in seqs:
        counts.update(s.ids.tolist())
    keep = set(target.eos_ids)
    for tok, _ in counts.most_common():
        if len(keep) >= size:
            break
        keep.add(tok)
    covered = sum(c for t, c in counts.items() if t in keep) / max(1, sum(counts.values()))
    log.info("draft vocabulary: %d tokens cover %.2f%% of training tokens", len(keep), 100 * covered)
    return torch.tensor(sorted(keep), dtype=torch.long)

"""The distillation corpus: the target's own answers as token ids, in parts small enough to commit.

Making answers is the expensive part of training heads on a CPU, so it is kept: each part is an .npz
of uint16 token ids (prompt and answer of every conversation, concatenated), with which prompt
(`prompt_key`: a hash of its text) and which answer mode made each row. A later run, on a fresh
machine too, reads the parts and asks only for the (prompt, mode) pairs still missing. The target's
features of each part sit beside it in a cache folder (features.py), remade from the ids if lost.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import GumihoError

PART_GLOB = "answers-*.npz"


def prompt_key(text: str) -> str:
    """A stable name for a prompt: its text's hash (prompt files may grow and be reordered)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class Conversation:
    prompt_key: str
    mode: str  # "greedy", "t0.7", ...
    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]

    @property
    def ids(self) -> list[int]:
        return list(self.prompt_ids) + list(self.answer_ids)


def write_part(path: Path, rows: list[Conversation], target_name: str) -> Path:
    """One part file, written whole or not at all."""
    tokens = np.fromiter((t for r in rows for t in r.ids), dtype=np.int64)
    if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(np.uint16).max):
        raise GumihoError("token ids do not fit in uint16: this corpus format needs a vocabulary under 65,536")
    lengths = [len(r.prompt_ids) + len(r.answer_ids) for r in rows]
    modes = sorted({r.mode for r in rows})
    meta = {"target": target_name, "modes": modes, "rows": len(rows)}
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez_compressed(
            f, tokens=tokens.astype(np.uint16), offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            prompt_len=np.array([len(r.prompt_ids) for r in rows], dtype=np.int32),
            prompt_key=np.array([r.prompt_key for r in rows], dtype="<U12"),
            mode=np.array([modes.index(r.mode) for r in rows], dtype=np.int8), meta=np.array(json.dumps(meta)))
    tmp.rename(path)
    return path


def read_part(path: Path) -> list[Conversation]:
    try:
        with np.load(path, allow_pickle=False) as z:
            tokens, offsets, plen = z["tokens"].astype(np.int64), z["offsets"], z["prompt_len"]
            keys, modes = z["prompt_key"], json.loads(str(z["meta"]))["modes"]
            mode = z["mode"]
    except (OSError, KeyError, ValueError) as e:
        raise GumihoError(f"corpus part {path.name} is not readable ({type(e).__name__}); delete it to remake it") \
            from None
    rows = []
    for i in range(len(plen)):
        ids = tokens[offsets[i]:offsets[i + 1]].tolist()
        rows.append(Conversation(str(keys[i]), modes[mode[i]], tuple(ids[:plen[i]]), tuple(ids[plen[i]:])))
    return rows


def parts(folder: Path) -> list[Path]:
    return sorted(Path(folder).glob(PART_GLOB))


def read_corpus(folder: Path) -> list[Conversation]:
    return [row for p in parts(folder) for row in read_part(p)]


def next_part_path(folder: Path, worker: int = 0) -> Path:
    """answers-w<worker>-<n>.npz: workers running side by side never pick the same name."""
    n = len(list(Path(folder).glob(f"answers-w{worker}-*.npz")))
    while (path := Path(folder) / f"answers-w{worker}-{n:04d}.npz").exists():
        n += 1
    return path

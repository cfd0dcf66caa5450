"""JSON Lines files (prompt sets, conversations), read with errors that name the line."""
from __future__ import annotations

import json
from pathlib import Path

from .errors import GumihoError


def read_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> list[dict]:
    """Lines of a JSONL file; a malformed or empty file is a GumihoError naming the line."""
    path = Path(path)
    if not path.is_file():
        raise GumihoError(f"data file {str(path)!r} does not exist")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise GumihoError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict) or any(k not in row for k in required):
            raise GumihoError(f"{path}:{n}: expected an object with keys {list(required)}")
        rows.append(row)
    if not rows:
        raise GumihoError(f"data file {str(path)!r} is empty")
    return rows

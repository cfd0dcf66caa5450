"""Hostile run files, as an attacker would write them, and what loading each costs the server.

    python scripts/hostile_runs.py out/hostile            # write the files, measure each load in a fresh process
    python scripts/hostile_runs.py --measure FILE         # one load, as the first command runs it per file

Every file is just under the 5 MB upload limit. Some the checks refuse (too many nodes, values, strings or
levels of JSON; a token text of megabytes; a step that commits a million tokens); some are valid runs as large as
the limits allow (1024-node trees, 1,023 steps, 1024-character token texts), which must load and draw. A load is
the page's own: handlers.on_load with the page's components, measured from the upload to the last output (the
HTML of the tree, text and captions, and the charts' JSON), in wall and CPU seconds and in the growth of the
process's peak memory (ru_maxrss) over what it held before the load.

`synthetic_run` writes a valid run without a model; tests/test_app_hostile.py builds its cases from it.
"""
from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # app and gumiho_core sit beside scripts/
NEAR_LIMIT = 5 * 1024 * 1024 - 64 * 1024  # bytes: just under the upload limit


def _tree(shape: str, nodes: int, first: int) -> dict:
    """A star (every node a child of the root) or a chain (one path) of `nodes` nodes."""
    parents = [-1] + ([0] * (nodes - 1) if shape == "star" else list(range(nodes - 1)))
    depth = [0] + ([1] * (nodes - 1) if shape == "star" else list(range(1, nodes)))
    return {"tokens": [first + i for i in range(nodes)], "parents": parents, "depth": depth,
            "proposer": ["root"] + [f"serial{d}" for d in depth[1:]], "logprob": [0.0] + [-0.5] * (nodes - 1),
            "score": [-0.5 * d for d in depth]}


def _step(index: int, total: int, tree: dict, done: bool) -> dict:
    """A speculative step that accepts node 1 (a child of the root in both shapes) and the bonus."""
    n, deepest = len(tree["tokens"]), max(tree["depth"])
    bonus = tree["tokens"][0] + 1
    return {"index": index, "kind": "speculative", "tree": tree,
            "phases": [{"name": f"serial{d}", "depths": [d], "candidates": n, "seconds": 0.001}
                       for d in range(1, deepest + 1)],
            "verdict": {"accepted": [0, 1], "bonus": bonus, "target_token": [bonus] * n, "target_prob": [0.5] * n},
            "new_token_ids": [tree["tokens"][1], bonus], "draft_s": 0.001, "verify_s": 0.001, "commit_s": 0.0,
            "total_new_tokens": total, "total_steps": index, "compute_s": 0.01 * (index + 1), "done": done,
            "stop_reason": "max_new_tokens" if done else None}


def synthetic_run(steps: int, nodes: int = 64, shape: str = "star", piece_chars: int = 4) -> dict:
    """A run file the app would accept: the prefill and `steps` steps of `nodes`-node trees, each committing
    two tokens; every token's text `piece_chars` long (the committed ones short, so the answer stays short)."""
    records = [{"index": 0, "kind": "prefill", "tree": None, "phases": [], "verdict": None, "new_token_ids": [1],
                "draft_s": 0.0, "verify_s": 0.01, "commit_s": 0.0, "total_new_tokens": 1, "total_steps": 0,
                "compute_s": 0.01, "done": False, "stop_reason": None}]
    for i in range(1, steps + 1):
        records.append(_step(i, 1 + 2 * i, _tree(shape, nodes, first=10 * i), done=i == steps))
    committed = [t for r in records for t in r["new_token_ids"]]
    shown = {t for r in records[1:] for t in r["tree"]["tokens"]} | set(committed)
    pieces = {str(t): (f"w{t}" if t in committed else f"w{t}".ljust(piece_chars, "~")) for t in sorted(shown)}
    total, deepest = len(committed), max(max(r["tree"]["depth"]) for r in records[1:]) if steps else 1
    return {"format": "gumiho-visualiser-run", "version": 1, "saved": "2026-12-01T00:00:00+00:00",
            "prompt": "a hostile run", "method": "gumiho-serial", "preset": "custom", "tree_source": "",
            "decode": {"max_new_tokens": max(total, 1), "temperature": 0.0, "top_p": 1.0, "seed": 0,
                       "stop_on_eos": True},
            "tree": {"mode": "serial", "top_k": 8, "mlp_topk": 8, "pruning": 8, "total_tokens": max(nodes, 2),
                     "depth": max(deepest, 1), "pool": "paper"},
            "target": "tiny", "device": "cpu", "prompt_tokens": 5, "notes": [], "text": "".join(
                pieces[str(t)] for t in committed), "pieces": pieces, "special_ids": [0],
            "clock": [r["compute_s"] for r in records],
            "baseline": [[n, 0.02 * n] for n in range(1, total + 1)], "baseline_ids": committed, "records": records}


def _fill(make, size: int = NEAR_LIMIT) -> str:
    """The largest text make(k) for which len(text) <= size (k by bisection)."""
    lo, hi = 1, 1
    while len(make(hi)) <= size:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if len(make(mid)) <= size else (lo, mid)
    return make(lo)


def _with(doc: dict, **changes) -> str:
    """Compact JSON: the most values per byte (an attacker's choice)."""
    return json.dumps({**doc, **changes}, separators=(",", ":"))


def as_written(doc: dict) -> str:
    """JSON as the app's Export writes it (runfile.dumps)."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False)


def near_limit_files() -> dict[str, str]:
    """Name -> text of each hostile file, just under 5 MB."""
    head = '{"format":"gumiho-visualiser-run","version":1,"x":'
    small = synthetic_run(3)
    step = small["records"][1]
    return {
        "refused-120k-node-tree": _with(small, records=[small["records"][0], {**step, "tree": _tree(
            "star", 120_000, 10)}]),
        "refused-json-nested-5M-deep": _fill(lambda k: "[" * k + "]" * k),
        "refused-json-1.7M-empty-lists": _fill(lambda k: head + "[" + ",".join(["[]"] * k) + "]}"),
        "refused-json-2.5M-zeros": _fill(lambda k: head + "[" + ",".join(["0"] * k) + "]}"),
        "refused-json-1M-strings": _fill(lambda k: head + "[" + ",".join(['"ab"'] * k) + "]}"),
        "refused-one-5MB-token-text": _fill(lambda k: _with(small, pieces={**small["pieces"], "7": "A" * k})),
        "refused-step-of-900k-tokens": _with(small, records=[small["records"][0], {
            **step, "new_token_ids": [7] * 900_000}]),
        "refused-980k-floats": _with(small, records=[small["records"][0], {
            **step, "tree": {**step["tree"], "logprob": [-0.5] * 980_000}}]),
        "refused-980k-ints": _with(small, baseline_ids=[9999] * 980_000),
        "valid-145k-unused-token-texts": _with(small, pieces={str(1000 + i): "0123456789" for i in range(145_000)}),
        "valid-1024-node-trees": _fill(lambda k: as_written(synthetic_run(k, nodes=1024))),
        "valid-511-steps-32-deep-chains": as_written(synthetic_run(511, nodes=33, shape="chain")),
        "valid-1024-char-token-texts": _fill(lambda k: as_written(synthetic_run(k, nodes=64, piece_chars=1024))),
    }


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _html_bytes(out: dict) -> int:
    """What the load sends the browser: the HTML and text outputs, and the charts as plotly JSON."""
    total = 0
    for value in out.values():
        if isinstance(value, str):
            total += len(value.encode("utf-8", "surrogatepass"))
        elif hasattr(value, "to_json"):
            total += len(value.to_json())
    return total


def measure(path: str) -> dict:
    """One load through the page's handler, in this (fresh) process."""
    from app.backend import Backend
    from app.handlers import on_load
    from app.layout import build_view
    from app.player import Player

    demo, view = build_view(Backend("default", "default", "cpu", auto_tree="off"))
    warm = Path(path).with_name("warm-up.json")  # a small run first: plotly's first figure costs ~0.5 s, once
    warm.write_text(as_written(synthetic_run(3)), encoding="utf-8")
    user = Player()
    on_load(view, user, str(warm))
    before, wall, cpu = _rss_mb(), time.perf_counter(), time.process_time()
    out = on_load(view, user, path)
    note = re.sub("<[^>]+>", "", out.get(view.load_note, ""))  # what the page says under the Load button
    result = f"refused: {note}" if note.startswith("Refused") else "loaded"
    out = {} if note.startswith("Refused") else out
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"file": Path(path).name, "bytes": Path(path).stat().st_size, "result": result[:160],
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_growth_mb": round(peak - before, 1),
            "html_bytes": _html_bytes(out)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", nargs="?", default=str(ROOT / "out" / "hostile"))
    p.add_argument("--measure", metavar="FILE", help="load FILE once and print the cost as JSON")
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in near_limit_files().items():
        path = folder / f"{name}.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        done = subprocess.run([sys.executable, __file__, "--measure", str(path)], capture_output=True, text=True,
                              check=True)
        print(done.stdout.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

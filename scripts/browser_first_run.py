"""A new visitor's first run in the real app, measured in a real browser (Debian's chromium via playwright).

    .venv/bin/python scripts/browser_first_run.py [--fast] [--prompt TEXT] [--out out/first-run] [--no-wait]
        [--app-arg=--draft-for --app-arg=eagle=FOLDER ...]

Starts `python app.py` with its defaults on this machine, opens the page, waits until the model line says
this device is measured (the app measures it once in the background, in a process of its own), clicks Run (on the page's own
prefilled prompt unless --prompt is given) and prints: the time until the first step is on screen, the whole
run's time, the status line, the four big numbers, the race's lanes and notes, and how many MLP-head nodes
the trees on screen hold. Saves a screenshot mid-run, a full page at the end, and the tree, race,
time-per-step, what-if and why-early-tokens panels at 1280x800 and 1920x1080. Needs `./setup.sh --dev` and chromium.
--app-arg passes an option to app.py (other heads: --draft, --draft-for); --no-wait runs at once, without waiting
for the measurement (the default classroom tree needs none).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from app_server import running_app, wait_for_log  # noqa: E402

BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SIZES = ({"width": 1280, "height": 800}, {"width": 1920, "height": 1080})
PANELS = ("tree", "race", "timing", "whatif", "early")


def wait_for_measurement(page) -> None:
    t0 = time.monotonic()
    while "measured on this device" not in page.locator("#model-line").inner_text().lower():
        if time.monotonic() - t0 > 900:
            print("the auto tree was not measured within 15 minutes; running with the fallback")
            break
        time.sleep(2)
    print(f"model line after {time.monotonic() - t0:.0f} s: {page.locator('#model-line').inner_text()}")


def run_once(page, prompt: str | None, fast: bool, out: Path) -> None:
    from playwright.sync_api import expect

    if prompt:
        page.fill("#prompt textarea", prompt)
    print("prompt:", page.locator("#prompt textarea").input_value())
    if fast:
        page.check("#fast input[type=checkbox]")
    t0 = time.monotonic()
    page.click("#run")
    page.wait_for_selector("#tree svg")
    print(f"first step on screen {time.monotonic() - t0:.1f} s after clicking Run")
    page.wait_for_timeout(1200)
    page.screenshot(path=str(out / "running.png"))
    expect(page.locator("#status")).to_contain_text("the run has ended", timeout=900_000)
    print(f"run ended {time.monotonic() - t0:.1f} s after clicking Run")


def report(page, out: Path) -> None:
    print("status:", page.locator("#status").inner_text())
    print("numbers:", page.locator("#numbers").inner_text().replace("\n", " | "))
    race = page.evaluate("(() => document.querySelector('#race .js-plotly-plot').layout)()")
    print("race lanes (bottom first):", [t.replace("<br>", " ") for t in race["yaxis"]["ticktext"]])
    print("race finish lines (top first):", [a["text"] for a in race["annotations"] if a["text"].endswith(" s</b>")])
    print("race note:", page.locator("#race-note").inner_text())
    print("what-if note:", page.locator("#whatif-note").inner_text()[:600])
    mlp = page.locator("#tree svg g.gm-node title", has_text="MLP head").count()
    print(f"MLP-head nodes in the last step's tree: {mlp}")
    page.screenshot(path=str(out / "end.png"), full_page=True)
    for size in SIZES:
        page.set_viewport_size(size)
        page.wait_for_timeout(500)  # plotly redraws to the new width
        for panel in PANELS:
            page.locator(f"#{panel}").screenshot(path=str(out / f"{panel}-{size['width']}x{size['height']}.png"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", default=None, help="type this prompt (default: keep the one the page offers)")
    p.add_argument("--fast", action="store_true", help="tick Fast mode (no animation) before Run")
    p.add_argument("--out", default=str(ROOT / "out" / "first-run"), help="folder for the screenshots")
    p.add_argument("--app-arg", action="append", default=[], help="an option for app.py (repeat for each word)")
    p.add_argument("--no-wait", action="store_true", help="run without waiting for this device's measurement")
    args = p.parse_args(argv)
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("error: no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with running_app(out / "app.log", *args.app_arg) as (url, proc):
        wait_for_log(out / "app.log", "loaded ", proc)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
            page = browser.new_page(viewport=SIZES[0])
            page.set_default_timeout(60_000)
            page.goto(url)
            page.wait_for_selector("#prompt textarea")
            if not args.no_wait:
                wait_for_measurement(page)
            run_once(page, args.prompt, args.fast, out)
            report(page, out)
            browser.close()
    print(f"screenshots in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A new visitor's first run in the real app, measured in a real browser (Debian's chromium via playwright).

    .venv/bin/python scripts/browser_first_run.py [--fast] [--prompt TEXT] [--out out/first-run]

Starts `python app.py` with its defaults on this machine, opens the page, waits until the model line says
the auto tree is measured (the app measures it once in the background), clicks Run and prints: the time
until the first step is on screen, the whole run's time, the status line and the four big numbers the page
shows. Saves a screenshot mid-run and a full-page one at the end. Needs `./setup.sh --dev` and chromium.
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", default="Explain in three sentences why the sky is blue.")
    p.add_argument("--fast", action="store_true", help="tick Fast mode (no animation) before Run")
    p.add_argument("--out", default=str(ROOT / "out" / "first-run"), help="folder for the screenshots")
    args = p.parse_args(argv)
    from playwright.sync_api import expect, sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("error: no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "app.log"
    with running_app(log) as (url, proc):
        wait_for_log(log, "loaded ", proc)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(60_000)
            page.goto(url)
            page.wait_for_selector("#prompt textarea")
            t0 = time.monotonic()
            while "measured on this device" not in page.locator("#model-line").inner_text():
                if time.monotonic() - t0 > 600:
                    print("the auto tree was not measured within 10 minutes; running with the fallback")
                    break
                time.sleep(2)
            print(f"model line after {time.monotonic() - t0:.0f} s: {page.locator('#model-line').inner_text()}")
            page.fill("#prompt textarea", args.prompt)
            if args.fast:
                page.check("#fast input[type=checkbox]")
            t0 = time.monotonic()
            page.click("#run")
            page.wait_for_selector("#tree svg")
            print(f"first step on screen {time.monotonic() - t0:.1f} s after clicking Run")
            page.wait_for_timeout(1200)
            page.screenshot(path=str(out / "running.png"))
            expect(page.locator("#status")).to_contain_text("the run has ended", timeout=600_000)
            print(f"run ended {time.monotonic() - t0:.1f} s after clicking Run")
            print("status:", page.locator("#status").inner_text())
            print("numbers:", page.locator("#numbers").inner_text().replace("\n", " | "))
            page.screenshot(path=str(out / "end.png"), full_page=True)
            browser.close()
    print(f"screenshots in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

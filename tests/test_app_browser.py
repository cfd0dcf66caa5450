"""The running app in a real browser: Debian's chromium, driven by playwright, against `python app.py`.

The app is started here on a free port and always shut down. Screenshots go to $GUMIHO_SCREENSHOTS
(default out/screenshots). Skipped without chromium or playwright, unless GUMIHO_REQUIRE_BROWSER is set
(CI), where their absence fails.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("GUMIHO_SCREENSHOTS", ROOT / "out" / "screenshots"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PROMPT = "Write a haiku about the sea."
TOKENS = 24
PAPER_FLAGS = ["--top-k", "14", "--mlp-topk", "35", "--pruning", "35", "--total-tokens", "64", "--depth", "7"]
ENDED = "the run has ended"

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    sync_playwright = None

if os.environ.get("GUMIHO_REQUIRE_BROWSER"):
    assert CHROMIUM and sync_playwright, "GUMIHO_REQUIRE_BROWSER is set but chromium or playwright is missing"
pytestmark = pytest.mark.skipif(not CHROMIUM or sync_playwright is None,
                                reason="needs Debian's chromium and the playwright package")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"the app exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the app did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("app") / "app.log"
    env = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1",
               GRADIO_ANALYTICS_ENABLED="False")
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "app.py", "--device", "cpu"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for_http(url, proc, log)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the app and nothing else
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, app_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.goto(app_url)
    pg.wait_for_selector("#prompt textarea")
    yield pg
    context.close()


@pytest.fixture(scope="module")
def cli():
    """What `python -m gumiho_core.generate --json` prints for the same prompt and length."""
    out = subprocess.run([sys.executable, "-m", "gumiho_core.generate", "--prompt", PROMPT, "--max-new-tokens",
                          str(TOKENS), "--device", "cpu", "--json", *PAPER_FLAGS], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def shot(page, name: str, selector: str | None = None) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    target = page.locator(selector) if selector else page
    target.screenshot(path=str(SHOTS / f"{name}.png"), **({} if selector else {"full_page": True}))


def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Tab")  # Gradio takes a typed number on blur


def toasts(page) -> str:
    return " ".join(page.locator(".toast-body").all_inner_texts())


def test_a_run_end_to_end_shows_tree_text_and_charts_and_equals_the_cli(page, cli):
    page.fill("#prompt textarea", PROMPT)
    set_number(page, "max-new-tokens", TOKENS)
    page.check("#fast input[type=checkbox]")
    t0 = time.monotonic()
    page.click("#run")
    page.wait_for_selector("#tree svg")
    print(f"first step on screen {time.monotonic() - t0:.1f} s after clicking Run")
    expect(page.locator("#status")).to_contain_text(ENDED, timeout=240_000)
    shot(page, "run-end")
    shot(page, "run-end-tree", "#tree")
    assert page.locator("#tree svg g.gm-node").count() >= 2
    assert "drafted by" in page.locator("#tree svg g.gm-node title").nth(1).text_content()
    assert page.locator("#text .gm-t").count() == cli["new_tokens"]
    assert page.locator("#legend .gm-sw").count() >= 3
    for chart in ("speed", "speedup", "accept", "depth"):
        expect(page.locator(f"#{chart} .js-plotly-plot")).to_have_count(1)
    expect(page.locator("#numbers .gm-num")).to_have_count(4)
    assert page.locator("#answer textarea").input_value() == cli["text"]


def test_bad_input_keeps_the_page_and_what_was_typed(page):
    page.fill("#prompt textarea", "Keep this text.")
    page.get_by_text("Advanced: sampling and draft tree").click()
    set_number(page, "tree-top_k", 0)
    page.click("#run")
    expect(page.locator(".toast-body").first).to_contain_text("top_k must be an integer >= 1; got 0")
    assert page.locator("#prompt textarea").input_value() == "Keep this text."
    expect(page.locator("#run")).to_be_enabled()
    bad = SHOTS.parent / "not-a-run.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text('{"format": "gumiho-visualiser-run", "version": 1, "records": []}')
    page.set_input_files('input[data-testid="Load run file-upload-button"]', str(bad))
    expect(page.locator(".toast-body").last).to_contain_text("Could not load this run file")
    shot(page, "bad-input")


def test_animation_stop_pause_steps_replay_export_and_load(page, tmp_path):
    page.fill("#prompt textarea", PROMPT)
    set_number(page, "max-new-tokens", 10)
    page.click("#run")
    page.wait_for_selector("#tree svg")
    page.click("#stop")
    expect(page.locator("#status")).to_contain_text("Stopped: showing step")
    expect(page.locator("#run")).to_be_enabled()
    set_number(page, "delay", 0.1)
    page.click("#run")
    expect(page.locator("#caption")).to_contain_text("Step 2", timeout=60_000)
    shot(page, "animating", "#tree")
    page.click("#pause")
    expect(page.locator("#status")).to_contain_text("Paused at step")
    caption = page.locator("#caption").inner_text()
    page.click("#prev")
    expect(page.locator("#caption")).not_to_have_text(caption)
    page.click("#next")
    expect(page.locator("#status")).to_contain_text("Paused at step")
    page.click("#resume")
    expect(page.locator("#status")).to_contain_text(ENDED, timeout=180_000)
    page.click("#replay")
    expect(page.locator("#status")).to_contain_text("Replaying")
    expect(page.locator("#status")).to_contain_text(ENDED, timeout=60_000)
    with page.expect_download() as download:
        page.click("#export")
    saved = tmp_path / "run.json"
    download.value.save_as(saved)
    assert json.loads(saved.read_text())["prompt"] == PROMPT
    page.set_input_files('input[data-testid="Load run file-upload-button"]', str(saved))
    expect(page.locator("#status")).to_contain_text("Saved run loaded")
    shot(page, "loaded-run")


def test_the_generate_endpoint_returns_the_clis_values(app_url, cli):
    from gradio_client import Client

    result = Client(app_url, verbose=False).predict(PROMPT, "gumiho", TOKENS, 0.0, 0, api_name="/generate")
    for key in ("token_ids", "text", "steps", "new_tokens", "mean_accept_len"):
        assert result[key] == cli[key], key

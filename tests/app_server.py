"""`python app.py` on a free localhost port, for the tests that talk to the running app (browser, many clients).

The app runs in a session of its own and is always shut down, with nothing else touched.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def wait_for_log(log: Path, text: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    """Until the app's log says `text` (e.g. that the models have loaded)."""
    end = time.monotonic() + timeout
    while text not in log.read_text():
        if proc.poll() is not None or time.monotonic() > end:
            raise AssertionError(f"the app never logged {text!r}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


@contextlib.contextmanager
def running_app(log: Path, *args: str, env: dict | None = None):
    """Yields (url, process) of `python app.py --device cpu *args`; the app's output goes to `log`."""
    port = free_port()
    env = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1",
               GRADIO_ANALYTICS_ENABLED="False", **(env or {}))
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "app.py", "--device", "cpu", *args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for_http(url, proc, log)
        yield url, proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the app and nothing else
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

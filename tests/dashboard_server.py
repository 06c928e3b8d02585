"""A real `mmc dashboard` server for the browser tests: started in its own process group, waited for on
its health endpoint, and stopped (SIGTERM, then SIGKILL) afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"  # Debian's; never `playwright install`
# without the background-networking flags Chromium tries outside hosts this machine refuses
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    """A port no one listens on now. Fixed ports collided: two browser test files on two workers once shared
    one, and a test drove the other file's server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dashboard_server(port: int, log_path: Path, start_timeout: float = 60, env: dict | None = None):
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "dashboard", "--port", str(port)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.time() + start_timeout
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if "is not available" in Path(log_path).read_text(errors="replace"):
                raise RuntimeError(f"port {port} is taken by another server; see {log.name}")
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the dashboard did not start; see {log.name}")
            time.sleep(0.2)
        log.flush()
        if proc.poll() is not None or "is not available" in Path(log_path).read_text(errors="replace"):
            raise RuntimeError(f"port {port} answered, but not from this server; see {log.name}")
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass  # the server and its children have ended already
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def wait_run_done(page, timeout: int = 120_000):
    """After a click on Run: the previous run's summary ("Converged in ...") stays in the page, marked stale,
    until the click's rerun replaces it, and a fit that outlasts the first wait shows its live view (with a
    Stop button) before its own summary. Once seen in CI, the test read the stale summary and went on while
    the fit was still auditing. Wait for the rerun (no stale element) and for the fit to end (no Stop button)."""
    from playwright.sync_api import expect

    page.wait_for_timeout(1000)
    expect(page.locator('[data-stale="true"]')).to_have_count(0, timeout=timeout)
    expect(page.get_by_role("button", name="Stop")).to_have_count(0, timeout=timeout)
    expect(page.locator('[data-stale="true"]')).to_have_count(0, timeout=timeout)


def choose(page, label: str, option: str, attempts: int = 3) -> None:
    """Pick ``option`` in the selectbox labelled ``label`` (a react-aria combobox): type it, wait for the list to
    show it, Enter; checked, and tried again if another entry was taken. Enter after a fixed wait picked the
    list's first entry when a loaded machine had not filtered it yet ('educ' for 'region'). The option is not
    always drawn (a long list is virtualized; typing the current value filters nothing), so not seeing it is
    no error by itself: the value read back decides."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    combo = page.get_by_test_id("stSelectbox").filter(has_text=label).get_by_role("combobox").first
    for _ in range(attempts):
        combo.click()
        combo.fill(option)
        with contextlib.suppress(PlaywrightTimeout):  # read back below, and retried
            page.get_by_role("option", name=option, exact=True).first.wait_for(state="visible", timeout=10_000)
        page.keyboard.press("Enter")
        page.wait_for_timeout(1000)
        if combo.input_value() == option:
            return
    assert combo.input_value() == option

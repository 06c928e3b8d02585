"""Issue 11, Stop in a real browser: the stopped banner is visible at most 1 s after the click, once during the
in-app base-model fit and once during the descent, and it says what was kept.

This is the one test with a wall-clock assertion, because the criterion itself is a time seen by the analyst
("<= 1 s from click to the stopped state in the browser"). The time is taken inside the browser: a capturing
click listener stamps the click and a MutationObserver stamps the first alert holding "Stopped by you"
(``performance.now()`` on both, so neither Playwright's own round trips nor the test process count). The
Playwright wait on the banner has a 1000 ms timeout too; when it times out the test keeps waiting (up to a
minute) only to report the actual latency in the failure message. Both latencies are printed, with what the
page did meanwhile (websocket frames sent / received, alerts shown, main-thread tasks over 50 ms, in seconds
from the click): with MMC_DEBUG_TIMING=1 the server log (artifacts/dashboard-stop-server.log) has the server's
side in the same clock, so a slow case shows whether the server, the network or the page's rendering was late.

Data: the CPS-like table of the end-to-end test (250,000 rows, 60% of them for the base model, so its fit
lasts several seconds), one group, manual thresholds with alpha = 1e-5 and the paper's step, so the descent
runs until it is stopped.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.browser_pages import chips, cps_csv, goto, slider
from tests.dashboard_server import ARGS, CHROMIUM, SHOTS, choose, dashboard_server, free_port

PORT = free_port()  # a fixed port collided with another file's server on another worker
URL = f"http://127.0.0.1:{PORT}"
LIMIT_MS = 1000.0  # the criterion
N_ROWS = 250_000  # 60% of them for the base model: a fit of several seconds, long enough to press Stop in it

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian Chromium (/usr/bin/chromium) missing"),
]

# stamps the next click and the first alert that says "Stopped by you" (in the page's own clock)
ARM = """() => {
  window.__mmcClick = null; window.__mmcBanner = null;
  document.addEventListener('click', () => { if (window.__mmcClick === null) window.__mmcClick = performance.now(); },
                            {capture: true, once: true});
  const seen = () => Array.from(document.querySelectorAll('[data-testid="stAlert"], [role="alert"]'))
      .some(e => e.textContent.includes('Stopped by you'));
  window.__mmcAlerts = []; let last = '';
  const obs = new MutationObserver(() => {
    const now = Array.from(document.querySelectorAll('[data-testid="stAlert"]')).map(e => e.textContent.slice(0, 40)).join(' | ');
    if (now !== last) { window.__mmcAlerts.push([(performance.timeOrigin + performance.now()) / 1000, now]); last = now; }
    if (window.__mmcClick !== null && window.__mmcBanner === null && seen()) {
      window.__mmcBanner = performance.now();
    }
  });
  obs.observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


# every websocket frame the page sends or receives, in epoch seconds (when the page's main thread handles it)
WS_LOG = """(() => {
  window.__mmcWs = [];
  const stamp = () => (performance.timeOrigin + performance.now()) / 1000;
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (d) {
    window.__mmcWs.push(['send', stamp(), d.byteLength || d.length || 0]);
    if (!this.__mmcLogged) {
      this.__mmcLogged = true;
      this.addEventListener('message', (e) => window.__mmcWs.push(['recv', stamp(), e.data.byteLength || e.data.size || 0]));
    }
    return send.call(this, d);
  };
  window.__mmcLong = [];  // main-thread tasks over 50 ms (the page cannot handle a frame or a click meanwhile)
  new PerformanceObserver((l) => l.getEntries().forEach((e) => window.__mmcLong.push(
      [(performance.timeOrigin + e.startTime) / 1000, e.duration / 1000]))).observe({type: 'longtask', buffered: true});
})()"""


def _outside_fit_seconds(csv, features) -> dict:
    """The same base model fitted by plain scikit-learn in this process on the rows the app trained it on
    (benchmarks/bench_base_model.py's pipeline, default threads), for the printed in-app comparison."""
    import importlib.util

    import pandas as pd

    from app.services.pipeline import split_rows
    from app.services.specs import SplitSpec

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_base_model.py"
    spec = importlib.util.spec_from_file_location("bench_base_model", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    df = pd.read_csv(csv)
    rows = split_rows(len(df), SplitSpec(test=0.3, base=0.6, seed=0), True)["base"]  # the Data page's defaults
    t = time.perf_counter()
    model = bench.plain_sklearn(df.iloc[rows][features].reset_index(drop=True), df["lwage"].to_numpy()[rows], 0)
    fit = time.perf_counter() - t
    model.predict(df[features])
    return {"fit": fit, "fit_predict": time.perf_counter() - t}


@pytest.fixture(scope="module")
def server():
    SHOTS.mkdir(parents=True, exist_ok=True)
    # the server's timing notes (app.services.jobs.debug) go to its log, which a failure message quotes
    with dashboard_server(PORT, SHOTS.parent / "dashboard-stop-server.log", env={"MMC_DEBUG_TIMING": "1"}) as proc:
        yield proc


def _stop_and_time(page, name: str) -> dict:
    """Click Stop, wait (1000 ms) for the banner; the click-to-banner time measured in the browser."""
    from playwright.sync_api import TimeoutError as PwTimeout

    banner = page.get_by_test_id("stAlert").filter(has_text="Stopped by you").first
    assert page.get_by_test_id("stAlert").filter(has_text="Stopped by you").count() == 0  # no banner left over
    page.evaluate(ARM)
    t0 = time.perf_counter()
    page.get_by_role("button", name="Stop").click()
    in_time = True
    try:
        banner.wait_for(state="visible", timeout=LIMIT_MS)
    except PwTimeout:
        in_time = False
        banner.wait_for(state="visible", timeout=60_000)  # only to report how late it was
    wall = time.perf_counter() - t0
    click, seen, origin = page.evaluate("() => [window.__mmcClick, window.__mmcBanner, performance.timeOrigin]")
    frames = page.evaluate("() => window.__mmcWs || []")
    longs = page.evaluate("() => window.__mmcLong || []")
    alerts = page.evaluate("() => window.__mmcAlerts || []")
    page.screenshot(path=str(SHOTS / f"stop_{name}.png"), full_page=True, timeout=120_000)
    c0 = (origin + click) / 1000 if click is not None else 0.0
    c1 = (origin + seen) / 1000 if seen is not None else c0 + 60
    around = [f"{k} {t - c0:+.3f}" for k, t, _ in frames if c0 - 0.1 <= t <= c1 + 0.05]
    around += [f"alerts {t - c0:+.3f} [{a}]" for t, a in alerts if t <= c1 + 0.5]
    around += [f"busy {t - c0:+.3f} for {d:.3f}" for t, d in longs if c0 - 1.5 <= t <= c1 + 0.05]
    return {
        "frames": ", ".join(around),
        "browser_ms": (seen - click) if click is not None and seen is not None else float("nan"),
        "wall_s": wall,
        "in_time": in_time,
        "text": banner.inner_text(),
        # epoch seconds, to line up with the server's MMC_DEBUG_TIMING log
        "click_epoch": (origin + click) / 1000 if click is not None else float("nan"),
    }


def _visible_or_explain(page, pattern: str, timeout_ms: float, name: str):
    """Wait for text matching ``pattern``; when it does not come, fail with what the page showed instead (a
    screenshot, the alerts, the progress line, whether Run is enabled) and the server log's last notes, since a
    CI run keeps none of the artifacts."""
    from playwright.sync_api import TimeoutError as PwTimeout

    try:
        page.get_by_text(re.compile(pattern)).first.wait_for(state="visible", timeout=timeout_ms)
        return
    except PwTimeout:
        pass
    page.screenshot(path=str(SHOTS / f"stop_{name}_missing.png"), full_page=True, timeout=120_000)
    pytest.fail(f"no text matching {pattern!r} within {timeout_ms / 1000:.0f} s; " + _page_state(page))


def _page_state(page) -> str:
    alerts = [a.inner_text()[:300] for a in page.get_by_test_id("stAlert").all()]
    alerts += [a.inner_text()[:600] for a in page.get_by_test_id("stException").all()]
    bars = [b.inner_text()[:300] for b in page.get_by_test_id("stProgress").all()]
    run = page.get_by_role("button", name="Run", exact=True)
    run_state = "absent" if run.count() == 0 else ("disabled" if run.first.is_disabled() else "enabled")
    log = SHOTS.parent / "dashboard-stop-server.log"
    noise = ("fragment tick", "No runtime found")
    notes = [ln for ln in log.read_text().splitlines() if not any(n in ln for n in noise)] if log.exists() else []
    return (
        f"Run button {run_state}; alerts {alerts}; progress {bars}; stop buttons "
        f"{page.get_by_role('button', name='Stop').count()}; server log (last 40 lines, without ticks and cache warnings):\n"
        + "\n".join(notes[-40:])
    )


def _press_run(page):
    """Click Run and wait for the run to show (its Stop button). A click that started nothing within a minute is
    reported as a warning, with what the page showed, and clicked once more: this test measures Stop. (Once, in
    CI, no descent showed within 3 minutes of the second Run, and the page state was not recorded; 7 runs here,
    3 of them beside 6 busy loops, all passed. The next such case says what happened.)"""
    import warnings

    from playwright.sync_api import TimeoutError as PwTimeout

    run = page.get_by_role("button", name="Run", exact=True)
    run.click()
    try:
        page.get_by_role("button", name="Stop").first.wait_for(state="visible", timeout=60_000)
        return
    except PwTimeout:
        pass
    warnings.warn("Run was clicked but no run started within 60 s; clicked again. " + _page_state(page), stacklevel=2)
    run.click()


def test_stop_shows_the_banner_within_a_second(server, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    csv = cps_csv(tmp_path / "stop_table.csv", n=N_ROWS)
    load = os.getloadavg()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.add_init_script(WS_LOG)
        page.set_default_timeout(120_000)
        page.goto(URL)
        expect(page.get_by_text("An audit of").first).to_be_visible(timeout=60_000)
        page.get_by_text("Upload a file").click()
        page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(csv))
        expect(page.get_by_text(f"{N_ROWS:,}").first).to_be_visible(timeout=60_000)
        choose(page, "Label column", "lwage")
        page.get_by_text("fit a model here (scikit-learn)").first.click()  # (a rerun may show a stale copy)
        page.wait_for_timeout(800)
        slider(page, "Base-model training rows").press("End")  # 60% of the rows: a fit of several seconds
        page.wait_for_timeout(800)
        features = chips(page, "Feature columns")

        goto(page, "Run", "Run the audit")
        page.get_by_text("Automatic thresholds α, β (recommended)").click()
        page.wait_for_timeout(800)
        slider(page, "α: mean threshold").press("Home")
        page.wait_for_timeout(800)
        page.get_by_text(re.compile("^paper: move by alpha")).click()
        page.wait_for_timeout(800)

        # run 1: Stop during the base-model fit
        _press_run(page)
        _visible_or_explain(page, "fitting the base model", 120_000, "base_fit_phase")
        base = _stop_and_time(page, "in_base_fit")
        assert "nothing was fitted" in base["text"], base["text"]
        assert "base model" in base["text"], base["text"]

        # run 2: Stop during the descent (the base model is fitted again: nothing was kept of the first one)
        _press_run(page)
        _visible_or_explain(page, r"round \d+ · largest mean violation", 180_000, "descent_round")
        page.wait_for_timeout(500)
        descent = _stop_and_time(page, "in_descent")
        assert re.search(r"round \d+|\d+ rounds", descent["text"]) and "kept" in descent["text"], descent["text"]
        # the full page follows with the kept model's summary
        expect(
            page.get_by_text(
                # "Stopped by you: the model of round 4 (...; the descent ran 3,190 rounds) was kept" when early
                # stopping kept an earlier round (the round count is then said once)
                re.compile(r"Stopped by you(: the model| after [\d,]+ rounds?| before the first mean update)")
            ).first
        ).to_be_visible(timeout=60_000)
        page.screenshot(path=str(SHOTS / "stop_in_descent_summary.png"), full_page=True, timeout=120_000)
        caption = page.get_by_text(re.compile(r"base model fitted in [0-9.]+ s")).first.inner_text()
        in_app = float(re.search(r"base model fitted in ([0-9.]+) s", caption).group(1))
        browser.close()
    outside = _outside_fit_seconds(csv, features)
    report = (
        f"\nload average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}; click to banner: "
        f"base-model fit {base['browser_ms']:.0f} ms in the browser ({base['wall_s']:.2f} s in the test), "
        f"descent {descent['browser_ms']:.0f} ms ({descent['wall_s']:.2f} s); clicks at "
        f"{base['click_epoch']:.3f} and {descent['click_epoch']:.3f}; websocket frames from the click (s): "
        f"base-model fit [{base['frames']}], descent [{descent['frames']}]\n"
        f"in-app base model (fit and prediction of every row, as the Run page reports it) {in_app:.2f} s; "
        f"the same scikit-learn fit outside the app {outside['fit']:.2f} s, with the prediction of every row "
        f"{outside['fit_predict']:.2f} s (ratio {in_app / outside['fit_predict']:.2f}; not asserted)"
    )
    print(report)
    assert base["in_time"] and base["browser_ms"] <= LIMIT_MS, report
    assert descent["in_time"] and descent["browser_ms"] <= LIMIT_MS, report

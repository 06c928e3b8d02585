"""One real-browser run of the dashboard: `mmc dashboard` on a fixed loopback port, driven by Playwright with
Debian's Chromium (never `playwright install`). It runs the demo audit, checks that the convergence and result
charts render, uploads a CSV, downloads an export, and saves full-page screenshots to artifacts/screenshots/.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
import pytest

from tests.dashboard_server import ARGS, CHROMIUM, SHOTS, dashboard_server, free_port, wait_run_done

PORT = free_port()  # a fixed port collided with another file's server on another worker
URL = f"http://127.0.0.1:{PORT}"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian Chromium (/usr/bin/chromium) missing"),
]


@pytest.fixture(scope="module")
def server():
    SHOTS.mkdir(parents=True, exist_ok=True)
    with dashboard_server(PORT, SHOTS.parent / "dashboard-server.log") as proc:
        yield proc


def _full_shot(page, name: str):
    """Streamlit scrolls inside its main container: grow the viewport to the content, then screenshot."""
    h = page.evaluate(
        "() => { const b = document.querySelector('[data-testid=\"stMainBlockContainer\"]');"
        " return b ? b.getBoundingClientRect().height + 40 : 1000; }"
    )
    page.set_viewport_size({"width": 1400, "height": min(max(int(h) + 40, 900), 9000)})
    page.wait_for_timeout(1200)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, timeout=120_000)  # slow on a busy machine
    page.set_viewport_size({"width": 1400, "height": 1000})


def _goto(page, title: str, heading: str):
    from playwright.sync_api import expect

    page.get_by_test_id("stSidebarNav").get_by_text(title, exact=True).click()
    expect(page.get_by_role("heading", name=heading).first).to_be_visible(timeout=30_000)


def test_dashboard_in_a_real_browser(server, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    charts = '[data-testid="stPlotlyChart"] .main-svg'
    df = pd.DataFrame({"group": np.repeat(["A", "B", "C"], 400), "x": np.tile(np.arange(400), 3) % 17})
    rng = np.random.default_rng(0)
    df["pred"] = 10 + df["x"] * 0.5
    df["y"] = df["pred"] + rng.normal(0, np.where(df["group"] == "C", 4.0, 1.0))
    csv = tmp_path / "uploaded.csv"
    df.to_csv(csv, index=False)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        page.set_default_timeout(120_000)  # a shared, loaded machine: generous waits (nothing asserts times)
        t0 = time.time()
        page.goto(URL)
        # the first visit runs the demo audit
        expect(page.get_by_role("heading", name="Data")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("An audit of").first).to_be_visible(timeout=30_000)
        first_load = time.time() - t0
        _full_shot(page, "01_data_demo")

        # run it again from the Run page and watch the convergence chart
        _goto(page, "Run", "Run the audit")
        t1 = time.time()
        page.get_by_role("button", name="Run", exact=True).click()
        wait_run_done(page)
        expect(page.get_by_text("Converged in").first).to_be_visible(timeout=60_000)
        run_seconds = time.time() - t1
        expect(page.locator(charts).first).to_be_visible(timeout=30_000)
        _full_shot(page, "02_run")

        # results: every tab's charts render
        _goto(page, "Results", "Results")
        expect(page.locator(charts).first).to_be_visible(timeout=30_000)
        expect(page.get_by_text("What the audit found")).to_be_visible()
        _full_shot(page, "03_results_variance")
        for tab, name in (
            ("Coverage", "04_results_coverage"),
            ("Calibration", "05_results_calibration"),
            ("Row explorer", "06_results_row"),
        ):
            page.get_by_role("tab", name=tab).click()
            expect(page.locator(f'[role="tabpanel"]:visible {charts}').first).to_be_visible(timeout=30_000)
            _full_shot(page, name)
        assert page.locator(charts).count() >= 6

        # export: download the predictions
        _goto(page, "Export", "Export")
        with page.expect_download(timeout=60_000) as dl:
            page.get_by_role("button", name="Download predictions.csv").click()
        path = dl.value.path()
        head = open(path, encoding="utf-8").readline()
        assert "mmc_mean" in head and "mmc_lower_calibrated" in head
        _full_shot(page, "07_export")

        # groups and teaching pages render
        _goto(page, "Groups", "Groups")
        _full_shot(page, "08_groups")
        _goto(page, "Teaching mode", "Teaching mode: watch multicalibration happen")
        for _ in range(4):
            page.get_by_role("button", name="Step", exact=True).click()
            page.wait_for_timeout(400)
        expect(page.get_by_text("Audits (fresh samples)")).to_be_visible()
        expect(page.locator(charts).first).to_be_visible(timeout=30_000)
        _full_shot(page, "09_teaching")

        # upload a CSV and audit it
        _goto(page, "Data", "Data")
        page.get_by_text("Upload a file").click()
        page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(csv))
        expect(page.get_by_text("uploaded.csv").first).to_be_visible(timeout=30_000)
        expect(page.get_by_text("1,200").first).to_be_visible(timeout=30_000)
        _full_shot(page, "10_data_upload")
        _goto(page, "Run", "Run the audit")
        page.get_by_role("button", name="Run", exact=True).click()
        wait_run_done(page)
        expect(page.get_by_text("Converged in").first).to_be_visible(timeout=60_000)
        _goto(page, "Results", "Results")
        # the Results page keeps the tab last opened (Row explorer): its chart shows, then back to the first tab
        expect(page.locator(f'[role="tabpanel"]:visible {charts}').first).to_be_visible(timeout=30_000)
        page.get_by_role("tab", name="Variance disparities").click()
        expect(page.locator(f'[role="tabpanel"]:visible {charts}').first).to_be_visible(timeout=30_000)
        expect(page.get_by_text("label y").first).to_be_visible()
        _full_shot(page, "11_results_upload")
        browser.close()
    print(f"first load with demo audit {first_load:.1f} s; Run click to result {run_seconds:.1f} s")

"""Classifier audits in a real browser (Debian Chromium driven by Playwright, never `playwright install`):
load the bundled binary demo (loanapp), run it, open the Results, move the decision-threshold slider and see
the per-group rate table change (recomputed from the stored test-row probabilities, no refit)."""

from __future__ import annotations

import os
import re

import pytest

from tests.dashboard_server import ARGS, CHROMIUM, SHOTS, dashboard_server, free_port, wait_run_done

PORT = free_port()  # a fixed port collided with another file's server on another worker
URL = f"http://127.0.0.1:{PORT}"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian Chromium (/usr/bin/chromium) missing"),
]


def _goto(page, title: str, heading: str):
    from playwright.sync_api import expect

    page.get_by_test_id("stSidebarNav").get_by_text(title, exact=True).click()
    expect(page.get_by_role("heading", name=heading).first).to_be_visible(timeout=30_000)
    page.wait_for_timeout(600)


def _rate_table(page) -> str:
    return page.get_by_test_id("stTable").first.inner_text()


def test_binary_demo_threshold_slider_changes_the_rate_table():
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with dashboard_server(PORT, SHOTS.parent / "dashboard-binary-server.log"), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.set_default_timeout(120_000)  # a shared, loaded machine: generous waits (nothing asserts times)
        page.goto(URL)
        expect(page.get_by_text("An audit of").first).to_be_visible(timeout=120_000)  # the default demo's run

        # ---- data: the binary demo
        combo = page.get_by_test_id("stSelectbox").filter(has_text="Demo dataset").get_by_role("combobox").first
        combo.click()
        combo.fill("loanapp")
        page.wait_for_timeout(500)
        page.keyboard.press("Enter")
        expect(page.get_by_text("Binary label").first).to_be_visible(timeout=60_000)
        expect(page.get_by_text(re.compile(r"classifier audit")).first).to_be_visible()
        page.screenshot(path=str(SHOTS / "binary_01_data.png"), full_page=True, timeout=120_000)

        # ---- run it to the end
        _goto(page, "Run", "Run the audit")
        page.get_by_role("button", name="Run", exact=True).click()
        wait_run_done(page, timeout=300_000)
        expect(page.get_by_text(re.compile("Converged in|Not converged")).first).to_be_visible(timeout=300_000)
        _goto(page, "Results", "Results")
        expect(page.get_by_text("classifier audit").first).to_be_visible(timeout=60_000)
        expect(page.get_by_text(re.compile("Probability calibration by group")).first).to_be_visible()
        expect(page.get_by_text("label units")).to_have_count(0)
        expect(page.locator('[data-testid="stPlotlyChart"] .main-svg').first).to_be_visible(timeout=60_000)
        page.screenshot(path=str(SHOTS / "binary_02_results_calibration.png"), full_page=True, timeout=120_000)

        # ---- the rates: move the threshold slider, the table changes
        page.get_by_role("tab", name="Rates at a threshold").click()
        expect(page.get_by_text("Rates by group at threshold 0.50").first).to_be_visible(timeout=60_000)
        before = _rate_table(page)
        assert "black=1" in before and "selection rate" in before
        box = page.get_by_test_id("stSlider").filter(has_text="Decision threshold")
        slider = box.get_by_role("slider")

        def value() -> float:  # the number the slider's thumb shows
            return float(box.get_by_test_id("stSliderThumbValue").first.inner_text())

        # 0.50 -> 0.80 in steps of 0.05, one key press at a time: each press waits for the slider to report its
        # new value and for the page to redraw the table at it (a press sent during a rerun can be dropped on a
        # loaded machine; then the loop presses again instead of ending one step short)
        for _ in range(12):
            was = value()
            if was >= 0.8 - 1e-9:
                break
            slider.press("ArrowRight")
            for _ in range(40):
                page.wait_for_timeout(250)
                if value() != was:
                    break
            now = value()
            expect(page.get_by_text(f"Rates by group at threshold {now:.2f}").first).to_be_visible(timeout=60_000)
        expect(page.get_by_text("Rates by group at threshold 0.80").first).to_be_visible(timeout=60_000)
        expect(page.get_by_test_id("stTable").first).not_to_have_text(before, timeout=60_000)
        after = _rate_table(page)
        assert after != before and "black=1" in after
        page.screenshot(path=str(SHOTS / "binary_03_results_rates.png"), full_page=True, timeout=120_000)
        browser.close()

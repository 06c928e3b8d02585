"""Compare in a real browser (issue 37): the demo audit, a second fit without the base prediction, and the
Compare page names the groups that got worse first. Screenshots: artifacts/screenshots/compare_page.png,
compare_chart.png, compare_table.png, compare_one_run.png."""

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


def test_a_comparison_of_two_fits_names_the_groups_that_got_worse_first():
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with dashboard_server(PORT, SHOTS.parent / "dashboard-compare-server.log"), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.set_default_timeout(120_000)
        page.goto(URL)
        expect(page.get_by_text("An audit of").first).to_be_visible(timeout=60_000)  # the demo audit ran
        page.get_by_test_id("stSidebarNav").get_by_text("Compare", exact=True).click()
        expect(page.get_by_text(re.compile("no earlier run on this table")).first).to_be_visible(timeout=30_000)
        page.wait_for_timeout(800)
        page.screenshot(path=str(SHOTS / "compare_one_run.png"))
        page.get_by_test_id("stSidebarNav").get_by_text("Data", exact=True).click()
        page.get_by_text("none: start from the label mean").first.click()
        page.wait_for_timeout(1000)
        page.get_by_test_id("stSidebarNav").get_by_text("Run", exact=True).click()
        page.get_by_role("button", name="Run", exact=True).click()
        wait_run_done(page)
        page.get_by_test_id("stSidebarNav").get_by_text("Compare", exact=True).click()
        headline = page.get_by_text(re.compile("The current run is worse than Run 1 for")).first
        expect(headline).to_be_visible(timeout=60_000)
        first = page.locator("li").filter(has_text=re.compile(r"^The current run is (worse|better) than Run 1")).first
        expect(first).to_contain_text("is worse than Run 1")
        expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=30_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(SHOTS / "compare_page.png"), full_page=True)
        page.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
        page.wait_for_timeout(800)
        page.screenshot(path=str(SHOTS / "compare_chart.png"))
        expect(page.get_by_text("B worse (a finding)").first).to_be_attached()  # the chart's legend
        page.get_by_test_id("stDataFrame").first.scroll_into_view_if_needed()
        page.wait_for_timeout(800)
        page.screenshot(path=str(SHOTS / "compare_table.png"))
        with page.expect_download(timeout=120_000) as got:  # built on the click (a deferred download)
            page.get_by_role("button", name="Comparison report (PDF)").click()
        with open(got.value.path(), "rb") as fh:
            assert fh.read(5) == b"%PDF-"
        browser.close()

"""Helpers of the browser tests that drive the dashboard's pages: the CPS-like upload table and the sidebar,
multiselect and slider of a page."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.fake_cps import cps_features


def cps_csv(path: Path, n: int = 100_000, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    df = cps_features(rng, n)
    df["empty"] = np.nan
    logw = (
        0.5
        + 0.08 * df["educ"]
        + 0.01 * df["exper"]
        - 0.15 * df["female"]
        - 0.1 * df["black"]
        + 0.002 * df["hours"]
        + rng.normal(0, 0.45 + 0.1 * df["black"], n)
    )
    df["hrwage"] = np.exp(logw).round(3)  # leaks the label
    df["lwage"] = logw.round(5)
    df.to_csv(path, index=False)
    return path


def goto(page, title: str, heading: str, timeout: int = 30_000, settle: int = 600):
    """Open the page ``title`` from the sidebar and wait for its ``heading`` (ms: ``timeout``), then ``settle``."""
    from playwright.sync_api import expect

    page.get_by_test_id("stSidebarNav").get_by_text(title, exact=True).click()
    expect(page.get_by_role("heading", name=heading).first).to_be_visible(timeout=timeout)
    page.wait_for_timeout(settle)


def chips(page, label: str, timeout: int = 20_000) -> list:
    """The chips of the multiselect ``label``, once it is drawn (a page draws its widgets after its heading, and
    under load reading at once gave no chips at all)."""
    from playwright.sync_api import expect

    box = page.get_by_test_id("stMultiSelect").filter(has_text=label).first
    expect(box).to_be_visible(timeout=timeout)
    return box.locator("[data-tag]").evaluate_all("els => els.map(e => e.getAttribute('aria-label'))")


def slider(page, label: str):
    return page.get_by_test_id("stSlider").filter(has_text=label).get_by_role("slider")

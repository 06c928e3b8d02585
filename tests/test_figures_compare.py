"""The Compare page's pure parts (issue 37): the forest chart of each group's difference (app.figures.compare),
the headline and the per-group table (app.services.compare_service), on a world where B is worse for one group, better
for another and alike elsewhere."""

from __future__ import annotations

import numpy as np
import pandas as pd

from app.figures.compare import BETTER, NEUTRAL, WORSE, difference_figure, shown_groups
from app.services.compare_service import group_table, headline
from mmc_core import GroupSet
from mmc_core.comparison.compare_models import Side, compare


def _world(n=6000, k=40, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, k, n)
    df = pd.DataFrame({"g": np.asarray([f"k{i}" for i in range(k)], dtype=object)[g]})
    mu = rng.normal(size=n)
    y = mu + rng.normal(size=n)
    a = mu + 0.05 * rng.normal(size=n)
    b = a.copy()
    b[g == 1] += 1.0  # B is worse for g=1 ...
    a[g == 2] += 1.0  # ... and better for g=2 (A is off there)
    var = np.ones(n)
    res = compare(df, y, Side("A", a, var), Side("B", b, var), GroupSet.from_columns(df, ["g"]))
    return res, df


def test_headline_names_the_worse_and_the_better_groups():
    res, _ = _world()
    text = headline(res)
    assert text.startswith("B is worse than A for 1 group(s): g=k1")
    assert "better for 1 group(s): g=k2" in text
    assert res.findings[0]["direction"] == "worse"


def test_the_chart_shows_every_finding_marked_and_notes_the_groups_left_out():
    res, _ = _world()
    fig = difference_figure(res, "rmse", top=10)
    by_name = {t.name: t for t in fig.data}
    assert by_name["B worse (a finding)"].marker.color == WORSE
    assert by_name["B better (a finding)"].marker.color == BETTER
    assert by_name["no finding"].marker.color == NEUTRAL
    assert list(by_name["B worse (a finding)"].y) == ["g=k1"] and list(by_name["B better (a finding)"].y) == ["g=k2"]
    assert sum(len(t.y) for t in fig.data) == 10
    assert "Showing 10 of 41 groups" in fig.layout.title.text
    order = list(fig.layout.yaxis.categoryarray)  # bottom to top: the largest worsening on top
    assert order[-1] == "g=k1" and order[0] == "g=k2"
    assert len(shown_groups(res, "rmse", top=None)) == 41
    assert "Showing" not in difference_figure(res, "rmse", top=None).layout.title.text
    # top smaller than the findings: the findings are still all drawn
    assert {"g=k1", "g=k2"} <= {res.by_group.index[i] for i in shown_groups(res, "rmse", top=1)}


def test_the_table_runs_from_the_largest_worsening_to_the_largest_improvement():
    res, _ = _world()
    tab = group_table(res, "rmse")
    assert tab.index[0] == "g=k1" and tab.index[-1] == "g=k2"
    assert tab.loc["g=k1", "finding"] == "worse" and tab.loc["g=k2", "finding"] == "better"
    assert tab.loc["g=k3", "finding"] == ""
    assert list(tab.columns) == ["rows", "A", "B", "B - A", "95% low", "95% high", "detectable", "finding"]
    assert (tab.loc["g=k1", "95% low"] > 0) and np.isfinite(tab["detectable"]).all()


def test_names_are_text_in_the_chart():
    names = [f"<b>grp{i}</b>" if i != 1 else "<img src=x onerror=alert(1)>" for i in range(40)]
    rng = np.random.default_rng(1)
    n = 6000
    g = rng.integers(0, 40, n)
    df = pd.DataFrame({"g": np.asarray(names, dtype=object)[g]})
    mu = rng.normal(size=n)
    y = mu + rng.normal(size=n)
    b = mu.copy()
    b[g == 1] += 1.0
    res = compare(df, y, Side("<i>A</i>", mu, np.ones(n)), Side("B", b, np.ones(n)), GroupSet.from_columns(df, ["g"]))
    fig = difference_figure(res, "rmse")
    labels = [str(v) for t in fig.data for v in t.y]
    assert not any("<" in s for s in labels) and any("&lt;img" in s for s in labels)
    assert "<i>A</i>" not in fig.layout.title.text and "&lt;i&gt;A&lt;/i&gt;" in fig.layout.title.text


def test_the_period_chart_draws_the_changed_group_thick_and_apart():
    from app.figures.compare import period_figure
    from mmc_core.comparison.compare_models import compare_periods

    rng = np.random.default_rng(0)
    n = 8000
    df = pd.DataFrame({"g": np.array(list("ABCDE"), dtype=object)[rng.integers(0, 5, n)]})
    per = np.array(["2026Q1", "2026Q2", "2026Q3"])[rng.integers(0, 3, n)]
    mu, sd = rng.normal(size=n), np.ones(n)
    sd[(df["g"] == "D").to_numpy() & (per == "2026Q3")] = 2.0  # g=D far noisier in the last quarter
    y = mu + sd * rng.normal(size=n)
    res = compare_periods(df, y, Side("m", mu, np.ones(n)), GroupSet.from_columns(df, ["g"]), per)
    fig = period_figure(res, "spread", top=3)
    names = [t.name for t in fig.data]
    assert names[:2] == ["all (finding)", "g=D (finding)"] and len(names) == 3
    assert fig.data[1].line.width == 3 and fig.data[2].line.width == 1.5
    assert list(fig.layout.xaxis.ticktext) == ["2026Q1", "2026Q2", "2026Q3"]
    xs = [t.x[0] for t in fig.data]
    assert len(set(xs)) == 3 and max(xs) - min(xs) < 0.5  # side by side around the period's position
    assert "Showing 3 of 6 groups" in fig.layout.title.text


def test_coverage_is_shown_in_percent_and_points_in_the_table_chart_and_reports():
    """A share is said in percent (A, B) and percentage points (B - A, its interval, the detectable difference)
    on the page's table, the chart's axis and both reports' tables, as in the findings' sentences; the result's
    own table keeps the fractions."""
    from app.report.compare import table_text as pdf_table
    from app.report.html import build_compare_html

    rng = np.random.default_rng(3)
    n, k = 6000, 6
    g = rng.integers(0, k, n)
    df = pd.DataFrame({"g": np.asarray([f"k{i}" for i in range(k)], dtype=object)[g]})
    mu = rng.normal(size=n)
    y = mu + rng.normal(size=n)
    half_b = np.where(g == 1, 0.6, 1.96)  # B's intervals under-cover g=1
    a = Side("A", mu, np.ones(n), mu - 1.96, mu + 1.96)
    b = Side("B", mu, np.ones(n), mu - half_b, mu + half_b)
    res = compare(df, y, a, b, GroupSet.from_columns(df, ["g"]))
    assert "coverage" in res.params["compared"]
    tab = group_table(res, "coverage")
    assert list(tab.columns) == [
        "rows",
        "A (%)",
        "B (%)",
        "B - A (pts)",
        "95% low (pts)",
        "95% high (pts)",
        "detectable (pts)",
        "finding",
    ]
    raw = res.by_group.loc["g=k1"]
    assert np.isclose(tab.loc["g=k1", "B - A (pts)"], 100 * raw["coverage_diff"])
    assert np.isclose(tab.loc["g=k1", "A (%)"], 100 * raw["coverage_a"]) and 90 < tab.loc["g=k1", "A (%)"] < 100
    assert tab.loc["g=k1", "finding"] == "worse" and tab.index[0] == "g=k1"
    fig = difference_figure(res, "coverage")
    assert "percentage points" in fig.layout.xaxis.title.text
    xs = np.concatenate([np.asarray(t.x, float) for t in fig.data])
    assert np.isclose(np.max(np.abs(xs)), 100 * np.nanmax(np.abs(res.by_group["coverage_diff"])))
    pdf = pdf_table(res, "coverage")
    assert "B - A (pts) [95% CI]" in pdf.columns and pdf.iloc[0]["group"] == "g=k1"
    assert float(pdf.iloc[0]["A (%)"]) > 90
    html = build_compare_html(res, "t", "y").decode()
    assert "B - A (pts)" in html and "A (%)" in html
    # the other values keep their own units
    assert "B - A" in group_table(res, "rmse").columns

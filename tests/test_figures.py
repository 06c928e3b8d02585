"""app/figures/charts.py: every figure builder on a real (small) audit.

Checks the contract the dashboard and the PDF report rely on: trace types, titles and axis titles with the
label's units, one heatmap row per group, coverage colour scales centred on 1 - delta, groups below gamma
marked, long names shortened with the full name in the hover, partial convergence histories.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from app.figures import charts as F
from app.figures.figure_style import coverage_colorscale
from app.figures.heatmaps import bucket_counts
from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.auditing.metrics import AuditResult
from mmc_core.common.synthetic import demo_distribution

DELTA = 0.1
NAMES = {"label": "outcome", "units": "points"}  # what the caller states about the label (typed, no key-guessing)


@pytest.fixture(scope="module")
def fitted():
    from mmc_core.auditing.metrics import audit

    rng = np.random.default_rng(5)
    t = demo_distribution().sample_table(3000, rng)
    groups = GroupSet.from_columns(t, ["sex", "race", "age"], 2)
    est = MomentMulticalibrator(n_moments=4, label_range=(0, 100), calibration_fraction=0.25).fit(
        t, t["outcome"], groups, base_prediction=t["base_pred"], label_name="outcome", base_name="base_pred"
    )
    model = est.model_
    new = demo_distribution().sample_table(2000, np.random.default_rng(6))
    res = audit(
        model,
        new,
        np.asarray(new["outcome"], float),
        base=np.asarray(new["base_pred"], float),
        delta=DELTA,
        gamma=0.05,
        n_boot=40,
        seed=0,
    )
    return SimpleNamespace(model=model, audit=res)


def axis_titles(fig: go.Figure) -> list[str]:
    out = []
    for k in fig.layout:
        if k.startswith(("xaxis", "yaxis")) and fig.layout[k].title.text:
            out.append(fig.layout[k].title.text)
    return out


def title(fig: go.Figure) -> str:
    return fig.layout.title.text or ""


def units(audit) -> str:
    return NAMES["units"]


def view(audit: AuditResult, **tables) -> AuditResult:
    """The audit with some of its tables replaced (an AuditResult still)."""
    out = copy.copy(audit)
    for k, v in tables.items():
        setattr(out, k, v)
    return out


def below_gamma_names(audit) -> set:
    bg = audit.by_group
    return {str(g) for g in bg.index[~bg["large_enough"].astype(bool)]}


def serialisable(fig: go.Figure):
    json.loads(fig.to_json())  # what st.plotly_chart sends to the browser


# ---- convergence ----------------------------------------------------------------------------------
def test_convergence_full_history(fitted):
    m = fitted.model
    hist = m.info["history"]
    fig = F.convergence_figure(hist, m.params.alpha, m.params.beta, m.params.mean_update_bound())
    serialisable(fig)
    assert "Convergence" in title(fig)
    names = [tr.name for tr in fig.data]
    assert "mean: fitting rows" in names and "mean: held-out rows" in names
    assert "moment: fitting rows" in names and "moment: held-out rows" in names
    assert {type(tr).__name__ for tr in fig.data} >= {"Scatter", "Bar"}
    fit = next(tr for tr in fig.data if tr.name == "mean: fitting rows")
    assert len(fit.x) == len(hist)
    # thresholds alpha, beta and the update bound are drawn as horizontal lines
    ys = sorted(float(s.y0) for s in fig.layout.shapes)
    for v in (m.params.alpha, m.params.beta, m.params.mean_update_bound()):
        assert any(np.isclose(v, y) for y in ys)
    titles = " ".join(axis_titles(fig))
    assert "mass-weighted" in titles and "round" in titles and "count" in titles
    assert "[0, 1]" in fig.layout.title.text  # the unit of the violations is stated


def test_convergence_partial_single_and_empty_history(fitted):
    m = fitted.model
    hist = m.info["history"]
    for part in (hist[:1], hist[:2]):
        fig = F.convergence_figure(part, m.params.alpha, m.params.beta)
        fit = next(tr for tr in fig.data if tr.name == "mean: fitting rows")
        assert len(fit.x) == len(part)
        serialisable(fig)
    # a live run before the first round, and one without held-out rows
    empty = F.convergence_figure([], 0.001, 0.0001)
    assert len(empty.data) == 0 and "No rounds yet" in empty.layout.annotations[0].text
    no_holdout = [{k: v for k, v in r.items() if not k.startswith("holdout")} for r in hist[:3]]
    fig = F.convergence_figure(no_holdout, m.params.alpha, m.params.beta)
    assert not any("held-out" in (tr.name or "") for tr in fig.data)


def test_kept_round_is_named_in_the_legend_not_on_the_first_panel(fitted):
    """A label at the top of the kept round's line sat on the first panel's title when an early round was kept
    (a stopped run kept round 0): the line is named in the legend instead."""
    m = fitted.model
    hist = m.info["history"]
    assert len(hist) > 3
    fig = F.convergence_figure(hist, m.params.alpha, m.params.beta, kept_round=1)
    assert "kept round 1 (best on the held-out rows)" in [tr.name for tr in fig.data]
    assert not any("kept round" in (a.text or "") for a in fig.layout.annotations)
    assert sum(float(s.x0) == 1.0 and s.x0 == s.x1 for s in fig.layout.shapes) >= 3  # the line in every panel
    last = F.convergence_figure(hist, m.params.alpha, m.params.beta, kept_round=int(hist[-1]["round"]))
    assert not any("kept round" in (tr.name or "") for tr in last.data)  # the last round: nothing to mark


def test_the_moments_after_their_cells_are_marked_on_the_moment_panel(fitted):
    """With the moments left to the cell step the descent's moment line stays above the stated beta, which is the
    model's after the cells: the kept round's value after them is a diamond on the moment panel (and only there)."""
    m = fitted.model
    plain_hist = [{k: v for k, v in r.items() if k != "cells_max_moment_violation"} for r in m.info["history"]]
    hist = [dict(r) for r in plain_hist]
    hist[1]["cells_max_moment_violation"] = 0.5 * m.params.beta
    fig = F.convergence_figure(hist, m.params.alpha, m.params.beta, kept_round=1)
    mark = [tr for tr in fig.data if tr.name == "moment: after the shrunken cell corrections"]
    assert len(mark) == 1 and mark[0].marker.symbol == "diamond"
    assert list(mark[0].x) == [1] and list(mark[0].y) == [0.5 * m.params.beta] and mark[0].yaxis == "y2"
    serialisable(fig)
    plain = F.convergence_figure(plain_hist, m.params.alpha, m.params.beta, kept_round=1)
    assert not any(tr.name == "moment: after the shrunken cell corrections" for tr in plain.data)


def test_convergence_zero_violations_do_not_break_log_axes():
    rows = [
        {
            "round": 0,
            "max_mean_violation": 0.002,
            "violating_cells": 3,
            "max_moment_violation": 0.0,
            "moment_violation_before_fit": 0.0,
            "mean_updates": 0,
            "moment_updates": 0,
            "seconds": 0.0,
        },
        {
            "round": 1,
            "max_mean_violation": 0.0,
            "violating_cells": 0,
            "max_moment_violation": 0.0,
            "moment_violation_before_fit": 0.0,
            "mean_updates": 2,
            "moment_updates": 0,
            "seconds": 0.1,
        },
    ]
    fig = F.convergence_figure(rows, 0.001, 0.0001, 1e6 - 1)
    serialisable(fig)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.range is not None


# ---- variance --------------------------------------------------------------------------------------
def ratio_traces(fig):
    pred = next(tr for tr in fig.data if tr.name == "predicted" and tr.error_x.array is not None)
    obs = next(tr for tr in fig.data if tr.name == "observed" and tr.error_x.array is not None)
    return pred, obs


def test_variance_disparity_figure(fitted):
    a = fitted.audit
    fig = F.variance_disparity_figure(a, top=12, **NAMES)
    serialisable(fig)
    assert "Variance" in title(fig)
    assert all(isinstance(tr, go.Scatter) for tr in fig.data)
    titles = " ".join(axis_titles(fig))
    assert f"SD ({units(a)})" in titles and "ratio" in titles
    pred, obs = ratio_traces(fig)
    assert len(pred.y) == len(obs.y) == 12
    # sorted by the observed ratio (bottom to top)
    xs = np.asarray(obs.x, float)[np.argsort(np.asarray(obs.y, float))]
    assert list(xs) == sorted(xs)
    # an interval's ends are separated by ";" as every interval shown (issue 35)
    assert "[%{customdata[9]:.2f}; %{customdata[10]:.2f}]" in obs.hovertemplate
    # the plotted values are the audit's
    bg = a.by_group
    for name, x in zip(np.asarray(obs.customdata, dtype=object)[:, 0], obs.x):
        assert x == pytest.approx(bg.loc[name, "emp_var_ratio"])
    sd = next(tr for tr in fig.data if tr.name and tr.name.startswith("predicted (√"))
    for name, x in zip(np.asarray(sd.customdata, dtype=object)[:, 0], sd.x):
        assert x == pytest.approx(np.sqrt(bg.loc[name, "pred_var"]))
    # all groups when top=None; the figure grows with them
    full = F.variance_disparity_figure(a, top=None, **NAMES)
    assert len(ratio_traces(full)[1].y) == len(a.by_group)
    assert full.layout.height > fig.layout.height
    # the overall level (ratio 1) is marked by a vertical line
    assert any(s.type == "line" and s.x0 == s.x1 == 1.0 for s in full.layout.shapes)
    # groups below gamma carry the dagger on their axis label and are drawn hollow
    ticks = list(full.layout.yaxis.ticktext)
    assert len(ticks) == len(a.by_group)
    assert below_gamma_names(a), "the fixture must have groups below gamma, or the next checks are vacuous"
    assert sum(t.endswith(F.BELOW_GAMMA_MARK) for t in ticks) == len(below_gamma_names(a))
    # exactly the groups below gamma are hollow (open markers), the others filled
    obs = ratio_traces(full)[1]
    hollow = {
        str(n) for n, sym in zip(np.asarray(obs.customdata, dtype=object)[:, 0], obs.marker.symbol) if "open" in sym
    }
    assert hollow == below_gamma_names(a)


def test_variance_figure_mean_only_model_is_a_placeholder(fitted):
    a = fitted.audit
    bg = a.by_group.assign(pred_var=np.nan, var_ratio=np.nan, var_ratio_lo=np.nan, var_ratio_hi=np.nan)
    fig = F.variance_disparity_figure(view(a, by_group=bg), **NAMES)
    assert len(fig.data) == 0 and "mean only" in fig.layout.annotations[0].text


# ---- heatmaps --------------------------------------------------------------------------------------
@pytest.mark.parametrize("builder", ["coverage", "bucket"])
def test_coverage_heatmaps_centred_on_target(fitted, builder):
    a = fitted.audit
    fig = F.coverage_heatmap(a, DELTA) if builder == "coverage" else F.coverage_by_bucket_heatmap(a, DELTA, **NAMES)
    serialisable(fig)
    (hm,) = [tr for tr in fig.data if isinstance(tr, go.Heatmap)]
    table = a.coverage if builder == "coverage" else a.coverage_by_bucket
    assert len(hm.y) == len(table) == len(a.by_group)
    assert np.asarray(hm.z).shape[0] == len(a.by_group)
    target = 1 - DELTA
    assert hm.zmin < target < hm.zmax == 1.0
    assert hm.zmin <= np.nanmin(np.asarray(hm.z, float)) and hm.zmax >= np.nanmax(np.asarray(hm.z, float))
    # diverging RdBu (colour-blind safe) whose white centre sits exactly at 1 - delta
    centre = (target - hm.zmin) / (hm.zmax - hm.zmin)
    stops = {round(float(pos), 9): col.replace(" ", "") for pos, col in hm.colorscale}
    assert stops[round(centre, 9)] == "rgb(247,247,247)"
    # equal intensity per unit of coverage: the side farther from the target reaches the darkest colour
    if target - hm.zmin >= hm.zmax - target:
        assert stops[0.0] == "rgb(103,0,31)"  # deep red = worst under-coverage
    else:
        assert stops[1.0] == "rgb(5,48,97)"  # deep blue = most over-coverage
    # the values are printed in the cells (2 decimals) and match the audit
    assert hm.texttemplate == "%{text}"
    expected = _coloured(a, table.loc[:, table.notna().any(axis=0)], builder == "bucket")  # empty buckets dropped
    np.testing.assert_allclose(np.asarray(hm.z, float), expected)
    assert all(
        t == "" or (len(t) == 4 and t[1] == ".") for t in (x.split("<br>")[0] for x in np.asarray(hm.text).ravel())
    )
    assert "coverage" in title(fig).lower()
    # every non-empty cell prints and hovers its row count (issue 11: a 0.50 cell of 2 rows is not one of 2,000)
    text, custom = np.asarray(hm.text, dtype=object), np.asarray(hm.customdata, dtype=object)
    if builder == "coverage":
        counts = np.repeat(a.by_group["count"].to_numpy()[:, None], text.shape[1], axis=1)
    else:
        counts = bucket_counts(a, table.loc[:, table.notna().any(axis=0)])
    for (i, j), t in np.ndenumerate(text):
        if t:
            assert f"n={int(counts[i, j]):,}" in t and f"rows in this cell {int(counts[i, j]):,}" in custom[i, j]
    assert sum(str(y).endswith(F.BELOW_GAMMA_MARK) for y in hm.y) == len(below_gamma_names(a))
    if builder == "coverage":
        assert len(hm.x) == len(a.coverage.columns)
    else:
        assert units(a) in " ".join(axis_titles(fig))


def test_width_heatmap(fitted):
    a = fitted.audit
    fig = F.width_heatmap(a, **NAMES)
    serialisable(fig)
    (hm,) = fig.data
    assert isinstance(hm, go.Heatmap) and len(hm.y) == len(a.by_group) and len(hm.x) == len(a.width.columns)
    assert units(a) in hm.colorbar.title.text and "width" in title(fig).lower()
    np.testing.assert_allclose(np.asarray(hm.z, float), a.width.to_numpy(float))


def test_width_heatmap_unbounded_intervals_print_infinity(fitted):
    a = fitted.audit
    wd = a.width.copy()
    wd.iloc[2, 0] = np.inf
    (hm,) = F.width_heatmap(view(a, width=wd), **NAMES).data
    assert np.asarray(hm.text, dtype=object)[2, 0].split("<br>")[0] == "∞"
    assert np.isfinite(np.asarray(hm.z, float)).all()
    serialisable(go.Figure(hm))


@pytest.mark.parametrize("zmin,zmax,target", [(0.85, 1.0, 0.9), (0.2, 1.0, 0.9), (0.5, 1.0, 0.5), (0.9, 1.0, 0.95)])
def test_coverage_colorscale_white_at_target(zmin, zmax, target):
    cs = coverage_colorscale(zmin, zmax, target)
    pos = [p for p, _ in cs]
    assert pos[0] == 0 and pos[-1] == pytest.approx(1) and pos == sorted(pos)
    c = (target - zmin) / (zmax - zmin)
    assert dict((round(p, 9), col.replace(" ", "")) for p, col in cs)[round(c, 9)] == "rgb(247,247,247)"


def test_heatmap_height_grows_with_groups(fitted):
    a = fitted.audit
    few = view(a, coverage=a.coverage.iloc[:5])
    assert F.coverage_heatmap(few, DELTA).layout.height < F.coverage_heatmap(a, DELTA).layout.height


def test_long_group_names_are_shortened_with_full_name_in_hover(fitted):
    a = fitted.audit
    long = "a very long group name that goes on and on & age=55+ & race=D & sex=F"
    ren = {a.coverage.index[1]: long}
    bg = a.by_group.rename(index=ren)
    (hm,) = F.coverage_heatmap(view(a, by_group=bg, coverage=a.coverage.rename(index=ren)), DELTA).data
    shown = str(hm.y[1])
    assert len(shown) <= F.MAX_NAME + len(F.BELOW_GAMMA_MARK) and shown.startswith("a very long")
    assert long in str(np.asarray(hm.customdata)[1, 0])


# ---- calibration and moments -----------------------------------------------------------------------
def test_calibration_before_after(fitted):
    a = fitted.audit
    fig = F.calibration_before_after_figure(a, top=8, **NAMES)
    serialisable(fig)
    names = {tr.name for tr in fig.data}
    assert {"base model", "multicalibrated"} <= names
    after = next(tr for tr in fig.data if tr.name == "multicalibrated")
    assert len(after.y) == 8
    assert units(a) in fig.layout.xaxis.title.text
    # the values are the audit's worst-cell errors
    full = {str(n): v for n, v in zip(a.by_group.index, a.by_group["calib_error_worst"])}
    cd = np.asarray(after.customdata, dtype=object)
    for name, x in zip(cd[:, 0], after.x):
        assert x == pytest.approx(full[name])


def test_calibration_without_base(fitted):
    a = fitted.audit
    bg = a.by_group.drop(columns=[c for c in a.by_group.columns if c.endswith("_base")])
    fig = F.calibration_before_after_figure(view(a, by_group=bg), top=5, **NAMES)
    assert [tr.name for tr in fig.data] == ["multicalibrated"]


@pytest.mark.parametrize("moment", [2, 3, 4])
def test_moment_reliability(fitted, moment):
    a = fitted.audit
    fig = F.moment_reliability_figure(a, moment, **NAMES)
    serialisable(fig)
    cells = a.moment_cells[a.moment_cells["moment"] == moment]
    pts = [tr for tr in fig.data if tr.mode == "markers"]
    assert sum(len(tr.x) for tr in pts) == int(np.isfinite(cells["predicted"].astype(float)).sum())
    diag = next(tr for tr in fig.data if tr.mode == "lines")
    assert list(diag.x) == list(diag.y)  # the diagonal
    # in label units: the moment's a-th root (issue 35: no squared units), its points those of the audit's cells
    assert f"({units(a)})" in fig.layout.xaxis.title.text and f"({units(a)})" in fig.layout.yaxis.title.text
    xs = np.sort(np.concatenate([np.asarray(tr.x, dtype=float) for tr in pts]))
    ok = np.isfinite(cells["predicted"].astype(float))
    want = cells["predicted"].astype(float)[ok].to_numpy()
    assert xs == pytest.approx(np.sort(np.sign(want) * np.abs(want) ** (1 / moment)))
    # sized by mass: a cell of larger mass never gets a smaller marker (checked point by point, from the mass each
    # marker's hover carries, which must be the audit's)
    sizes = np.concatenate([np.atleast_1d(tr.marker.size) for tr in pts]).astype(float)
    masses = np.concatenate([np.asarray(tr.customdata, dtype=object)[:, -1] for tr in pts]).astype(float)
    assert sorted(masses) == pytest.approx(
        sorted(cells["mass"].astype(float)[np.isfinite(cells["predicted"].astype(float))])
    )
    order = np.argsort(masses, kind="stable")
    m_sorted, s_sorted = masses[order], sizes[order]
    assert np.all(np.diff(s_sorted) >= -1e-12)
    assert np.all(np.diff(s_sorted)[np.diff(m_sorted) > 0] > 0)


def test_missing_tables_give_placeholders():
    none = pd.DataFrame()
    empty = AuditResult(
        pd.Series(dtype=float), none, none, none, none, none, none, {"label": {"lo": 0.0, "hi": 1.0, "source": "x"}}
    )
    for fig in (
        F.variance_disparity_figure(empty, **NAMES),
        F.coverage_heatmap(empty, 0.1),
        F.coverage_by_bucket_heatmap(empty, 0.1, **NAMES),
        F.width_heatmap(empty, **NAMES),
        F.calibration_before_after_figure(empty, **NAMES),
        F.moment_reliability_figure(empty, **NAMES),
    ):
        assert isinstance(fig, go.Figure) and len(fig.data) == 0 and fig.layout.annotations


# The published Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"), written out here, not read
# from app.figures.charts: the figures must draw their coloured marks from it (greys, r = g = b, are neutral).
OKABE_ITO_PUBLISHED = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}


def _trace_colours(fig):
    out = []
    for tr in fig.data:
        for part in ("line", "marker"):
            c = getattr(getattr(tr, part, None), "color", None) if part in tr else None
            if isinstance(c, str):
                out.append((tr.name, c.upper()))
    return out


def _is_grey(c):
    return len(c) == 7 and c[1:3] == c[3:5] == c[5:7]


def test_figures_draw_in_the_okabe_ito_palette(fitted):
    """Colour-blind safe: every coloured mark of the line / scatter figures is an Okabe-Ito colour, and the
    fitting-row and held-out-row series of the convergence chart are told apart by colour (blue vs orange)."""
    m, a = fitted.model, fitted.audit
    conv = F.convergence_figure(m.info["history"], m.params.alpha, m.params.beta, m.params.mean_update_bound())
    colour = dict(_trace_colours(conv))
    assert colour["mean: fitting rows"] == "#0072B2" and colour["mean: held-out rows"] == "#E69F00"
    figs = [
        conv,
        F.variance_disparity_figure(a, top=12, **NAMES),
        F.calibration_before_after_figure(a, top=8, **NAMES),
        F.moment_reliability_figure(a, 2, **NAMES),
    ]
    seen = [(f.layout.title.text, name, c) for f in figs for name, c in _trace_colours(f)]
    assert len(seen) >= 10
    off = [x for x in seen if x[2] not in OKABE_ITO_PUBLISHED and not _is_grey(x[2])]
    assert not off, off


def test_bucket_heatmap_counts_follow_the_cells():
    cov = pd.DataFrame([[0.5, 0.9], [np.nan, 1.0]], index=["all", "tiny"], columns=[0, 1])
    cells = pd.DataFrame(
        {"group": ["all", "all", "tiny"], "bucket": [0, 1, 1], "count": [2, 2000, 7]}
    )  # the audit's mean-calibration cells: the same buckets
    bg = pd.DataFrame({"count": [2002, 7], "mass": [1.0, 0.003], "large_enough": [True, False]}, index=["all", "tiny"])
    params = {"gamma": 0.05, "mean_buckets": [0, 50, 100], "label": {"lo": 0.0, "hi": 100.0, "source": "declared"}}
    audit = AuditResult(pd.Series(dtype=float), bg, None, None, cells, None, cov, params)
    (hm,) = [t for t in F.coverage_by_bucket_heatmap(audit, 0.1, **NAMES).data if isinstance(t, go.Heatmap)]
    text = np.asarray(hm.text, dtype=object)
    assert "n=2<" in text[0, 0] and "n=2,000" in text[0, 1] and text[1, 0] == "" and "n=7" in text[1, 1]


def test_bucket_coverage_of_every_method_is_the_audits(fitted):
    """Issue 15: the Results page's method choice draws the audit's own coverage by bucket of that method (it
    used to recompute it on equal-width buckets, which disagree with the model's quantile mean buckets)."""
    a = fitted.audit
    assert set(a.coverage_by_bucket_of) == set(a.coverage.columns)
    pd.testing.assert_frame_equal(a.coverage_by_bucket_of[a.params["bucket_method"]], a.coverage_by_bucket)
    other = next(m for m in a.coverage.columns if m != a.params["bucket_method"])
    fig = F.coverage_by_bucket_heatmap(a, DELTA, other, **NAMES)
    (hm,) = [tr for tr in fig.data if isinstance(tr, go.Heatmap)]
    table = a.coverage_by_bucket_of[other]
    np.testing.assert_allclose(np.asarray(hm.z, float), _coloured(a, table.loc[:, table.notna().any(axis=0)]))
    assert F.METHOD_LABELS[other] in title(fig)


def _coloured(a, table, by_bucket: bool = True) -> np.ndarray:
    """The values a coverage heatmap colours: the audit's, blank where a cell has fewer rows than the audit tests
    (a 1-row cell at coverage 0 was painted the darkest red, a browser session)."""
    vals = table.to_numpy(float)
    n = (
        bucket_counts(a, table)
        if by_bucket
        else np.repeat(a.by_group["count"].to_numpy(float)[:, None], vals.shape[1], 1)
    )
    return np.where(np.asarray(n, float) < a.params["min_group_count"], np.nan, vals)


def test_small_coverage_cells_are_printed_but_not_coloured(fitted):
    a = fitted.audit
    fig = F.coverage_by_bucket_heatmap(a, DELTA, **NAMES)
    (hm,) = [tr for tr in fig.data if isinstance(tr, go.Heatmap)]
    z, text = np.asarray(hm.z, float), np.asarray(hm.text, dtype=object)
    n = bucket_counts(a, a.coverage_by_bucket.loc[:, a.coverage_by_bucket.notna().any(axis=0)])
    small = (
        (np.asarray(n, float) < a.params["min_group_count"])
        & np.isfinite(np.asarray(n, float))
        & (np.asarray(n, float) > 0)
    )
    assert small.any(), "the fixture must have small cells, or this test is vacuous"
    assert np.isnan(z[small]).all() and all(t != "" for t in text[small]) and hm.hoverongaps
    assert "uncoloured = fewer than" in title(fig)
    # the note only where some cell is that small: the by-group map of groups of 30+ rows has none
    cov = F.coverage_heatmap(view(a, coverage=a.coverage[a.by_group["count"] >= a.params["min_group_count"]]), DELTA)
    assert "uncoloured" not in title(cov)


def test_group_names_are_drawn_as_written_not_as_html(fitted):
    """Regression (found in a browser session): Plotly reads a little HTML in axis labels, so a group value
    "Zürich <b>x</b>" was drawn as a bold "Zürich x" in the dashboard and the PDF while the tables showed the
    literal text. Names go to the figures with their angle brackets neutralised (Plotly draws "&lt;" as "<")."""
    a = fitted.audit
    name = str(a.by_group.index[1])
    odd = "Zürich <b>x</b>"
    renamed = view(a, by_group=a.by_group.rename(index={name: odd}))
    fig = F.variance_disparity_figure(renamed, label="outcome")
    ticks = [t for k in fig.layout if k.startswith("yaxis") for t in (fig.layout[k].ticktext or ())]
    assert "Zürich &lt;b&gt;x&lt;/b&gt;" in ticks and odd not in ticks
    hover_names = {str(c[0]) for tr in fig.data if tr.customdata is not None for c in tr.customdata}
    assert "Zürich &lt;b&gt;x&lt;/b&gt;" in hover_names and odd not in hover_names


def test_convergence_figure_of_a_mean_only_model_has_no_moment_panel():
    """Found in an exploratory browser session: a classifier's run drew a 'Largest moment violation' panel with a
    β threshold the fit never used. beta=None draws the mean and count panels only."""
    hist = [
        {"round": 0, "max_mean_violation": 0.01, "violating_cells": 4, "mean_updates": 0, "moment_updates": 0},
        {"round": 1, "max_mean_violation": 0.002, "violating_cells": 0, "mean_updates": 3, "moment_updates": 0},
    ]
    fig = F.convergence_figure(hist, 0.004, None, 1 / 0.004**2 - 1, kept_round=0)
    titles = [a.text for a in fig.layout.annotations]
    assert "Largest moment violation" not in titles and "Violating cells and updates" in titles
    assert not any("β" in str(t) for t in titles) and not any("moment" in (tr.name or "") for tr in fig.data)
    with_moments = F.convergence_figure(hist, 0.004, 0.001)
    assert "Largest moment violation" in [a.text for a in with_moments.layout.annotations]


def test_variance_figure_keeps_the_group_farthest_from_the_overall_level(fitted):
    """A browser session: the chart (30 of 31 groups) left out the top variance disparity that the text above
    it named, because it chose groups by predicted/observed disagreement only. A group whose spread is far
    from the population's, and correctly predicted, is now kept."""
    a = fitted.audit
    bg = a.by_group.copy()
    big = [n for n in bg.index if n not in below_gamma_names(a)]
    name = big[len(big) // 2]
    bg.loc[name, ["emp_var_ratio", "var_ratio"]] = 9.0  # 9x the population's spread, and predicted so
    bg.loc[name, "pred_var"] = bg.loc[name, "emp_var"]
    fig = F.variance_disparity_figure(view(a, by_group=bg), top=len(big) - 1, **NAMES)
    shown = {str(n) for n in np.asarray(ratio_traces(fig)[1].customdata, dtype=object)[:, 0]}
    assert name in shown


def test_pdf_variance_table_lists_the_groups_with_a_variance_finding(fitted):
    """The PDF's "disagree most" table (top 8) put groups below gamma last, so a group that was a page-1
    variance finding could be missing from it (an exploratory session). Groups with a finding come first."""
    from app.report.tables import variance_table

    a = fitted.audit
    bg = a.by_group
    cand = [
        g
        for g in below_gamma_names(a)
        if bg.loc[g, "count"] >= 20 and np.isfinite(bg.loc[g, ["pred_var", "emp_var"]].astype(float)).all()
    ]
    assert cand, "the fixture must have a testable group below gamma, or this test is vacuous"
    g = cand[0]
    found = view(a, findings=[{"kind": "variance", "group": g, "text": "x"}])
    shown = [str(v).rstrip(F.BELOW_GAMMA_MARK) for v in variance_table(found, top=3)["group"]]
    assert any(g.startswith(s.rstrip("…")) for s in shown[:1]), (g, shown)


def test_log_ratio_ticks_are_written_in_full():
    """plotly's "D2" ticks on a log axis are labelled "2", "5": the PDF's variance page read "2 5 1 2" for
    0.2, 0.5, 1 and 2."""
    from app.figures.charts import _log_ticks

    t = _log_ticks(0.15, 2.6)
    assert t["ticktext"] == ["0.2", "0.5", "1", "2"] and t["tickvals"] == pytest.approx([0.2, 0.5, 1.0, 2.0])
    assert _log_ticks(0.05, 5.0)["ticktext"] == ["0.05", "0.1", "0.2", "0.5", "1", "2", "5"]
    assert _log_ticks(0.01, 100.0)["ticktext"] == ["0.01", "0.1", "1", "10", "100"]  # 1-2-5 would crowd it
    assert _log_ticks(0.9, 1.1) == {}  # no 1-2-5 value but 1 inside: plotly's own ticks


def test_variance_legend_markers_are_filled_when_small_groups_come_first(fitted):
    """Plotly draws a legend entry with its trace's first marker: with every group below γ (hollow) the legend
    showed hollow 'predicted' and 'observed' markers, which the footnote defines as 'group mass below γ'."""
    import copy

    a = copy.deepcopy(fitted.audit)
    a.by_group["large_enough"] = False
    fig = F.variance_disparity_figure(a, top=12, **NAMES)
    shown = [tr for tr in fig.data if tr.showlegend is not False and tr.mode == "markers"]
    assert {tr.name.split(" (")[0] for tr in shown} == {"predicted", "observed"}
    assert all(not str(np.atleast_1d(tr.marker.symbol)[0]).endswith("-open") for tr in shown)
    data = [tr for tr in fig.data if tr.mode == "markers" and tr.x is not None and len(tr.x) and tr.x[0] is not None]
    assert data and all(str(s).endswith("-open") for tr in data for s in np.atleast_1d(tr.marker.symbol))


def test_thousands_are_written_with_separators_not_exponents():
    """A PDF calibration table read "mean label 1.12e+03" (hours of work), the dashboard "2.233e+04" dollars:
    numbers from 1,000 to under a billion keep their significant digits with thousands separators (issue 35: no
    scientific notation below 1e9); tiny ones are written out."""
    from app.figures.figure_style import format_number

    assert (format_number(1120.4), format_number(999.6), format_number(-22978.6), format_number(4950)) == (
        "1,120",
        "1,000",
        "-23,000",
        "4,950",
    )
    assert (format_number(0.5), format_number(12.345, 2), format_number(2.5e6), format_number(0.1234, 1, "%")) == (
        "0.5",
        "12",
        "2,500,000",
        "12.3%",
    )
    assert (format_number(2.03e8), format_number(1.5e9), format_number(0.0000123)) == (
        "203,000,000",
        "1.5e+09",
        "0.0000123",
    )
    # the coverage-by-bucket axis read "[990, 1.98e+03)" (a browser re-check of mroz)
    from app.figures.figure_style import bucket_labels

    labels = bucket_labels([0, 1], {"lo": 0.0, "hi": 1980.0}, edges=[0.0, 990.0, 1980.0])
    assert labels == ["[0; 990)", "[990; 1,980]"]  # thousands separated; a semicolon between the ends


def test_no_squared_units_or_exponents_in_the_group_charts(fitted):
    """Issue 35: variances were stated in squared units ("2.03e+08 USD²") in the moment chart's axes, subtitle and
    hovers and in the variance chart's hovers; every number of these charts is now in label units, in plain digits."""
    import json
    import re

    a = fitted.audit
    figs = [F.moment_reliability_figure(a, m, label="salary", units="USD") for m in (2, 3, 4)]
    figs += [
        F.variance_disparity_figure(a, label="salary", units="USD"),
        F.calibration_before_after_figure(a, label="salary", units="USD"),
    ]
    for fig in figs:
        text = json.dumps(fig.to_plotly_json(), ensure_ascii=False, default=str)
        assert not re.search(r"USD[²³⁴^]|squared", text), fig.layout.title.text
        # hovers in d3's plain-digit format, not "g" (22330 with ".4g" is "2.233e+4" in the browser)
        hovers = re.findall(r"%\{[^}]*:([^}]*)\}", " ".join(str(tr.hovertemplate) for tr in fig.data))
        assert not [f for f in hovers if f.endswith("g")], hovers


def test_convergence_axes_in_plain_digits(fitted):
    """Issue 35, found on a new table's Run page: the violation axis read "2e−2" and the count axis "10³" (tick
    formats ".0e" and exponent "power"). Every log axis now prints plain digits."""
    m = fitted.model
    fig = F.convergence_figure(m.info["history"], m.params.alpha, m.params.beta, m.params.mean_update_bound())
    axes = [a for k, a in fig.layout.to_plotly_json().items() if k.startswith("yaxis")]
    logs = [a for a in axes if a.get("type") == "log"]
    assert logs
    for a in logs:
        assert "e" not in str(a.get("tickformat", "")) and a.get("exponentformat") == "none", a


def test_groups_with_findings_are_on_the_charts_that_show_a_few(fitted):
    """Issue 35, found in a browser on a new table of 50 groups: the variance chart (30 groups by misjudged spread)
    left out 'all' and 'band=small & rural=yes', both named by mean findings. Groups with findings now come first
    on the variance and the mean-calibration charts, whatever their own ranking."""
    a = fitted.audit
    top = 5

    def names_on(fig) -> set:
        out = [t for tr in fig.data if tr.y is not None for t in tr.y if isinstance(t, str)]
        lay = fig.layout.to_plotly_json()
        out += [t for k, ax in lay.items() if k.startswith("yaxis") for t in (ax.get("ticktext") or ())]
        return {str(t).replace(F.BELOW_GAMMA_MARK, "").strip() for t in out}

    shown = names_on(F.variance_disparity_figure(a, top=top, **NAMES))
    shown |= names_on(F.calibration_before_after_figure(a, top=top, **NAMES))
    left_out = [str(g) for g in a.by_group.index if str(g) not in shown][:2]
    assert len(left_out) == 2
    found = view(a, findings=[{"kind": "mean", "group": g, "text": "x"} for g in left_out])
    for fig in (
        F.variance_disparity_figure(found, top=top, **NAMES),
        F.calibration_before_after_figure(found, top=top, **NAMES),
    ):
        assert set(left_out) <= names_on(fig), (fig.layout.title.text, left_out)
        assert "groups with findings" in str(fig.layout.title.text).replace("<br>", " ")


def test_a_group_with_a_finding_but_no_large_bucket_keeps_its_calibration_row(fitted):
    """The same browser session: 'band=small & rural=yes' (a mean finding, 67 test rows in 5 quantile buckets) has
    no bucket of the minimum count, so no worst cell, and was dropped from the calibration chart. Its row stays,
    saying why it has no marker."""
    a = fitted.audit
    g = str(a.by_group.index[-1])
    bg = a.by_group.copy()
    for c in [c for c in bg.columns if c.startswith("calib_error_worst")]:
        bg.loc[g, c] = np.nan
    fig = F.calibration_before_after_figure(
        view(a, by_group=bg, findings=[{"kind": "mean", "group": g, "text": "x"}]), top=5, **NAMES
    )
    note = [tr for tr in fig.data if tr.mode == "text"]
    assert note and any(g in str(y) for y in note[0].y) and "no bucket of" in note[0].text[0]
    assert any(g in str(y) for y in fig.layout.yaxis.categoryarray)


def test_compared_numbers_share_their_decimals():
    """Issue 35: "RMSE 0.442 → 0.4402" (the base's 0.4420 lost its trailing zero): both sides of an arrow now show
    the same decimals, enough to tell two different numbers apart."""
    from app.figures.figure_style import format_pair

    assert format_pair(0.442, 0.4402) == ("0.4420", "0.4402")
    assert format_pair(4717.2, 4716.9) == ("4,717.2", "4,716.9")  # 4 digits would show both as 4,717
    assert format_pair(12345.0, 9876.0) == ("12,345", "9,876")
    assert format_pair(0.5, 0.5) == ("0.5000", "0.5000")
    assert format_pair(None, 0.5) == ("–", "0.5")


def test_interval_ends_are_thousands_separated():
    """Issue 35: heatmap buckets read "[16400, 119000)" and range notes "[717.6, 119000]": the ends are now
    thousands separated, with a semicolon between them that no separator can be confused with."""
    from app.figures.figure_style import bucket_labels, interval_text
    from app.services.specs import outside_range_note

    assert bucket_labels([0, 1], {"lo": None, "hi": None}, edges=[717.6, 16400.0, 119000.0]) == [
        "[718; 16,400)",
        "[16,400; 119,000]",
    ]
    assert interval_text(717.6, 119000.0, 6) == "[717.6; 119,000]"
    note = outside_range_note({"label_outside_range": 3, "n": 1200, "label": {"lo": 717.6, "hi": 119000.0}})
    assert "label range [717.6; 119,000]," in note

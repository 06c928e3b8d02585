"""Results page: everything the audit found on the test rows.

Why one module of ~510 lines: one Streamlit page whose tabs share the per-run cached computations at its top;
the figures it shows are built in :mod:`app.figures`, the classifier results in :mod:`app.ui.binary_results`.

Variance disparities (which groups the model is least certain about, and whether it knows), coverage and
width heatmaps of the interval methods, mean calibration before / after, moment calibration per cell, and a
row explorer. Figures come from ``app/figures.py`` (the PDF report uses the same ones) and are cached per run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.figure_style import coverage_tested, format_number, format_pair, interval_text, legend_line
from app.ui import state
from app.specs import count, interval_range_note, not_converged_note
from app.ui.common import all_findings, download, esc, scorecard_box, show_fit_notes, run_and_frame, tabbed

METHOD_LABELS = {
    "guaranteed": "guaranteed (paper, Section 5)",
    "plugin": "plug-in Chebyshev",
    "multimoment": "multi-moment cover (Appendix)",
    "calibrated": "calibrated per group",
    "split-conformal": "split conformal (marginal)",
    "mondrian": "Mondrian (per-group) conformal",
    "gaussian": "Gaussian (base ± z·sd)",
}


def _rule_note(model) -> str:
    """How alpha / beta were set, in a few words for the caption."""
    from app.specs import threshold_rules

    rules = set(threshold_rules(model).values())
    if "se" in rules:
        return " (achieved; per-cell standard-error rule)"
    if "auto" in rules:
        return " (auto: just above the sampling noise)"
    return ""


def _run_key(run) -> str:
    return f"{run.data_key}:{run.finished_at}"


# ---------------------------------------------------------------------------------------------------
# cached computations (keyed on the run; the run object itself is not hashed)
# ---------------------------------------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=64)
def _figure(kind: str, key: str, _run, arg=None, units: str = "", groups: tuple | None = None):
    """One figure of the run's audit (what ``audit()`` computed on the test rows; nothing recomputed here);
    ``groups``: the heatmaps' rows, when the Coverage tab shows a page of them."""
    from app import figures as F
    from app.report_tables import audit_subset

    audit, delta = _run.audit, _run.settings.delta
    if groups is not None:
        audit = audit_subset(audit, groups)
    names = {"label": _run.label.name, "units": units}
    if kind == "variance":
        return F.variance_disparity_figure(audit, top=arg, **names)
    if kind == "coverage":
        return F.coverage_heatmap(audit, delta)
    if kind == "bucket":
        return F.coverage_by_bucket_heatmap(audit, delta, arg, **names)
    if kind == "width":
        return F.width_heatmap(audit, **names)
    if kind == "calibration":
        return F.calibration_before_after_figure(audit, top=arg, **names)
    if kind == "moment":
        return F.moment_reliability_figure(audit, moment=arg, **names)
    raise ValueError(kind)


@st.cache_data(show_spinner=False, max_entries=16)
def _test_intervals(key: str, _run, _frame) -> dict:
    """Test-row predictions, intervals of every available method, and bucket of each row."""
    from mmc_core.intervals import interval_table

    rows = _run.split["test"]
    cols = sorted(_run.model.groups.columns())
    table = _frame.iloc[rows][cols].reset_index(drop=True)
    base = None if _run.base is None else _run.base[rows]
    preds = _run.model.predict(table, base)
    ints = interval_table(_run.model, table, base=base, delta=_run.settings.delta, gamma=_run.settings.gamma)
    memb = _run.model.groups.evaluate(table, len(rows))
    return {
        "mean": preds["mean"],
        "ints": {m: (np.asarray(lo), np.asarray(hi)) for m, (lo, hi) in ints.items()},
        "groups": [memb.group_rows(g) for g in range(len(_run.model.groups))],
        "names": list(_run.model.groups.names),
    }


# ---------------------------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------------------------
def headline(run):
    audit = run.audit
    info = run.model.info
    s = run.settings
    c = st.columns(5)
    c[0].metric(
        "Model",
        "converged" if run.converged else ("stopped" if run.stopped else "not converged"),
        help=f"{count(info.get('rounds'), 'round')}, {count(info.get('mean_updates'), 'mean update')} and "
        f"{count(info.get('moment_updates'), 'moment update')}",
    )
    c[1].metric(
        "Test rows", f"{run.split['test'].size:,}", help="All results on this page are on rows the fit never saw."
    )
    c[2].metric("Groups", f"{info.get('n_groups')}")
    cov = audit.coverage
    if "calibrated" in cov.columns:
        col = cov["calibrated"].astype(float)
        target = 1 - s.delta
        overall = float(col.iloc[0]) if len(col) else float("nan")
        c[3].metric(
            "Coverage, all rows",
            _pct(overall),
            delta=_pts(overall - target, target),
            delta_color=_coverage_delta_color(overall - target),
            help=f"Share of test rows inside their calibrated {target:.0%} interval (above the target: wider "
            "than needed, not better).",
        )
        tested = coverage_tested(audit, col.index)
        min_n = float((audit.params or {}).get("min_group_count") or 0)
        worst = float(col[tested].min()) if tested.any() else float("nan")
        c[4].metric(
            "Worst group (mass ≥ γ)",
            _pct(worst),
            delta=_pts(worst - target, target),
            delta_color=_coverage_delta_color(worst - target),
            help="The lowest coverage of the calibrated intervals among groups with at least γ of the rows and at "
            f"least {min_n:,.0f} test rows (the ones the coverage heatmap colours).",
        )


def rmse_line(run, frame):
    from app.pipeline import error_metrics

    bm = run.base_metrics or {}
    try:
        after = error_metrics(run.label.y[run.split["test"]], _test_intervals(_run_key(run), run, frame)["mean"])
    except Exception:  # noqa: BLE001 - a caption only
        return
    u = esc(state.units() or f"{run.label.name} units")
    if bm.get("base_test"):
        b = bm["base_test"]
        r0, r1 = format_pair(b["rmse"], after["rmse"], 4)
        q0, q1 = format_pair(b["r2"], after["r2"], 3)
        st.caption(f"Test rows: root mean squared error {r0} (base) → {r1} (multicalibrated) {u}; R² {q0} → {q1}.")
        if run.base is not None and (note := rmse_worse_note(run, frame)):
            st.caption(esc(note))
    else:
        st.caption(f"Test rows: root mean squared error {format_number(after['rmse'], 4)} {u}; R² {after['r2']:.3f}.")


def rmse_worse_note(run, frame) -> str | None:
    """app.pipeline.worse_note of the test rows' squared errors, base against multicalibrated."""
    from app.pipeline import worse_note

    test = run.split["test"]
    y = run.label.y[test]
    after = _test_intervals(_run_key(run), run, frame)["mean"]
    return worse_note("root mean squared error", (y - run.base[test]) ** 2, (y - after) ** 2)


def _pct(v):
    return format_number(v, 1, "%")


def _coverage_delta_color(diff: float) -> str:
    """Red below the target coverage, grey above it: over-coverage means intervals wider than needed, which
    the coverage tab shows in blue, so it must not read as a green gain here."""
    return "normal" if math.isfinite(diff) and diff < 0 else "off"


def _pts(diff: float, target: float) -> str | None:
    if not math.isfinite(diff):
        return None
    return f"{diff * 100:+.1f} pts vs {target:.0%}"


def _large_enough(audit, index) -> np.ndarray:
    from app.figure_style import below_gamma  # the one definition of "below gamma"

    return ~np.asarray(below_gamma(audit, index), dtype=bool)


KIND_TITLES = {
    "mean": "mean over/under-prediction",
    "variance": "predicted vs observed spread",
    "coverage": "interval coverage shortfall",
    "calibration": "bucket calibration",
}


def _finding_line(f) -> str:
    return f"- **{esc(KIND_TITLES.get(f['kind'], f['kind']))}:** {esc(f['text'])}"


def scorecard(run):
    """Every listed group in one searchable table (app.ui.common.scorecard_box)."""
    scorecard_box(run.audit, "the label's units")


def over_time(run, frame):
    """The model per period of a column the analyst picks (dates, quarters, batches): each group's values per period
    and the changes found beyond chance (mmc_core.compare.compare_periods on the test rows). A classifier's values
    are its rates at the rates tab's threshold (selection rate, TPR, FPR) and its calibration (mean error)."""
    from app import compare_service as cs

    binary = getattr(run.model, "task", "regression") == "binary"
    threshold = round(float(state.settings().res_threshold), 4) if binary else None
    changes = (
        "the changes of each group's selection rate, true and false positive rates (at the decision threshold of "
        "the rates tab) and calibration between consecutive periods"
        if binary
        else "the changes of each group's mean error, spread, coverage and RMSE between consecutive periods"
    )

    with st.expander("Over time: the model per period of a column", expanded=bool(st.session_state.get("res_period"))):
        options = [None] + cs.period_columns(frame, run)
        column = st.selectbox(
            "Period column",
            options,
            format_func=lambda c: "(none)" if c is None else str(c),
            key="res_period",
            help=f"A column whose values are periods or batches (2 to 200 values): the audit per period, and {changes}.",
        )
        if column is None:
            st.caption("Pick a column to see each group over time.")
            return
        key = ("periods", run.finished_at, column)  # as app.ui.common.chosen_periods looks it up
        memo = st.session_state.setdefault("_period_memo", {})
        if key not in memo or memo[key].params.get("threshold") != threshold:  # a classifier's rates: at the slider's
            memo.clear()
            memo[key] = cs.periods_of_run(frame, run, column, delta=run.settings.delta, threshold=threshold)
        res = memo[key]
        if res.findings:
            st.markdown("\n".join(f"- {esc(cs.sentence(f['text']))}" for f in res.findings[:10]))
        else:
            st.markdown(f"No group's values change between periods beyond chance ({res.n_tests} tests of change).")
        from app.figures_compare import PERIOD_TITLES, period_figure

        if binary:
            st.caption(f"Rates at the decision threshold {threshold:g} (set on the tab Rates at a threshold).")
        values = cs.period_values(res)
        if st.session_state.get("res_period_value") not in (None, *values):  # a value of another task's run
            del st.session_state["res_period_value"]
        value = st.radio("Value", values, format_func=PERIOD_TITLES.get, horizontal=True, key="res_period_value")
        st.plotly_chart(period_figure(res, value), width="stretch", key="fig_period")
        period_downloads(run, frame, column, res)


def period_downloads(run, frame, column: str, res) -> None:
    """The audit's HTML and PDF reports with this view as their section "Over time" (built on click, cached)."""
    from app.report import CHROMIUM_MESSAGE, chromium_available
    from app.ui.export_page import dropped_note, report_file_name

    stem = report_file_name(run.data_name).removesuffix(".pdf")
    stem += "_over_" + "".join(ch if ch.isalnum() else "_" for ch in str(column))[:40]
    # the key names the rates' threshold: a classifier's report at another slider threshold is another report
    args = (f"{_run_key(run)}:{res.params.get('threshold')}", str(column), state.units(), dropped_note(run))

    def build(fmt):
        return lambda: _period_report(fmt, *args, run, frame, res)

    c1, c2 = st.columns(2)
    download(
        "Report with Over time (HTML)",
        build("html"),
        f"{stem}.html",
        "res_period_html",
        mime="text/html",
        where=c1,
        help="the audit's report on the test rows, with this view's changes and charts; opens in any browser",
    )
    if chromium_available():
        download(
            "Report with Over time (PDF)",
            build("pdf"),
            f"{stem}.pdf",
            "res_period_pdf",
            mime="application/pdf",
            where=c2,
            help="the Export page's PDF report with the section Over time added; takes a few seconds to build",
        )
    else:
        c2.caption(f"PDF export is unavailable: {esc(CHROMIUM_MESSAGE)}.")


@st.cache_data(show_spinner=False, max_entries=4)
def _period_report(fmt: str, key: str, column: str, units: str, data_note: str, _run, _frame, _res) -> bytes:
    """The audit's report (``fmt`` "pdf" or "html") on the run's test rows, as the Export page builds its PDF,
    with the section "Over time" of ``column`` (``_res``: the period audit the view shows)."""
    from app.ui.export_page import build_pdf, report_inputs

    thr = _res.params.get("threshold")  # a classifier's: the slider's, as the Export page's PDF
    if fmt == "pdf":
        return build_pdf(_run, _frame, threshold=thr, periods=_res, period_column=column)
    from app.report_html import build_report_html

    table, y, common = report_inputs(_run, _frame)
    more = {} if thr is None else {"threshold": thr}
    return build_report_html(_run.model, table, y, **common, **more, periods=_res, period_column=column)


def findings(run):
    """The audit's findings (tested defects, each sentence with n, its selection-adjusted interval and adjusted p) and the
    descriptive variance disparities, from :func:`app.report.findings_summary` (the PDF says the same)."""
    from app.report import findings_summary

    s = findings_summary(run.audit)
    with st.container(border=True):
        st.markdown("**What the audit found** (test rows)")
        if s["failed"]:
            st.error(
                f"The findings could not be computed ({esc(s['failed'])}). The tables and figures below are "
                "unaffected.",
                icon=":material/error:",
            )
            return
        if s["shown"]:
            st.markdown("\n".join(_finding_line(f) for f in s["shown"]))
        elif s["untestable"]:
            st.warning(s["untestable"], icon=":material/warning:")
        else:
            st.markdown(
                "No group's mean, spread or interval coverage differs from the model's prediction beyond "
                f"sampling error (groups and cells with at least {s['min_count']} test rows)."
            )
        more = all_findings(run.audit.findings, s, _finding_line)
        st.caption(
            more + f"{s['n_tests']} tests of groups and cells with at least {s['min_count']} test rows, adjusted "
            f"together by {s['control']} at {s['level']:g}; smaller groups are never reported."
            + s.get("variance_note", "")
            + s.get("interval_note", "")
        )
    if s["disparities"]:
        with st.container(border=True):
            st.markdown(
                "**Variance disparities** (descriptive: groups the model is more or less certain about; "
                "not a defect of the model)"
            )
            st.markdown("\n".join(f"- {esc(d['text'])}" for d in s["disparities"]))


def variance_tab(run):
    ss = st.session_state
    st.markdown(
        "Which groups is the model **least certain** about, and does it *know* it? Each row compares the "
        "model's predicted spread (√ of the mean predicted variance) with the observed spread: the SD of the "
        "residual y − μ(x) within the group, around its mean residual, on the test rows (a group whose mean alone "
        "is off is the mean's finding, not the spread's). A ratio far from 1 means the stated uncertainty is "
        "wrong for that group."
    )
    n_groups = len(run.model.groups)
    top = None
    if n_groups > 10:
        c1, _ = st.columns([2, 3])
        c1.select_slider(
            "Groups shown (the most misjudged or farthest from the overall level first)",
            [10, 20, 30, 50, 100],
            **state.bind("res_top"),
        )
        top = int(ss["res_top"])
    st.plotly_chart(_figure("variance", _run_key(run), run, top, state.units()), width="stretch", key="fig_variance")
    bg = run.audit.by_group
    if "pred_var" in bg.columns:
        t = bg.copy()
        t["predicted SD"] = np.sqrt(np.clip(t["pred_var"].astype(float), 0, None))
        if "emp_var" in t.columns:
            t["observed SD"] = np.sqrt(np.clip(t["emp_var"].astype(float), 0, None))
        keep = [
            c
            for c in (
                "count",
                "mass",
                "predicted SD",
                "observed SD",
                "var_ratio",
                "var_ratio_lo",
                "var_ratio_hi",
                "emp_var_ratio",
                "emp_var_ratio_lo",
                "emp_var_ratio_hi",
            )
            if c in t.columns
        ]
        min_n = int(run.audit.params["min_group_count"])
        small = t["count"].astype(float) < min_n if "count" in t.columns else pd.Series(False, index=t.index)
        by, heading = spread_ranking(t[~small])
        top = t[~small].sort_values(by, ascending=False)[keep].head(8)
        below = ~_large_enough(run.audit, top.index)
        top.index = [f"{n} †" if b else str(n) for n, b in zip(top.index, below)]
        st.markdown(
            f"**{heading}** ({esc(state.units() or run.label.name + ' units')})"
            + ("; † = fewer than γ of the rows, estimates are noisy" if below.any() else "")
        )
        if small.any():
            st.caption(
                f"{int(small.sum())} group(s) with fewer than {min_n} test rows are left out of this table "
                "(their spread cannot be estimated)."
            )
        # SDs of 1 and more with thousands separators ("10,700 USD", not "10700": issue 35), rounded to 3 significant
        # digits first; smaller ones as before (the browser's separators would round 0.00123 to 0)
        sd_cols = [c for c in ("predicted SD", "observed SD") if c in top.columns]
        sd_fmt, sds = "%.3g", np.abs(top[sd_cols].to_numpy(float)).ravel()
        if np.isfinite(sds).any() and sds[np.isfinite(sds)].min() >= 1:
            top[sd_cols] = top[sd_cols].astype(float).apply(lambda col: col.map(lambda v: float(f"{v:.3g}")))
            sd_fmt = "localized"
        st.dataframe(
            top,
            width="stretch",
            column_config={
                "mass": st.column_config.NumberColumn(format="%.3f"),
                "predicted SD": st.column_config.NumberColumn(format=sd_fmt),
                "observed SD": st.column_config.NumberColumn(format=sd_fmt),
                # both ratios, as in the chart beside: predicted and observed variance relative to all rows'
                "var_ratio": st.column_config.NumberColumn("predicted var. / all rows", format="%.3f"),
                "var_ratio_lo": st.column_config.NumberColumn("predicted 95% low", format="%.3f"),
                "var_ratio_hi": st.column_config.NumberColumn("predicted 95% high", format="%.3f"),
                "emp_var_ratio": st.column_config.NumberColumn("observed var. / all rows", format="%.3f"),
                "emp_var_ratio_lo": st.column_config.NumberColumn("observed 95% low", format="%.3f"),
                "emp_var_ratio_hi": st.column_config.NumberColumn("observed 95% high", format="%.3f"),
            },
        )


def spread_ranking(t: pd.DataFrame) -> tuple[str, str]:
    """(column to rank the groups by, heading): by predicted SD, unless the model predicts one spread for every
    group (no moment update, or a mean-only fit's constant): a ranking of equal values would name "least
    certain" groups at random, so they are ranked by the observed SD and the heading says why."""
    sd = t["predicted SD"].astype(float).to_numpy() if "predicted SD" in t.columns else np.zeros(0)
    sd = sd[np.isfinite(sd)]
    if sd.size and "observed SD" in t.columns and np.ptp(sd) <= 1e-9 * max(float(np.max(np.abs(sd))), 1e-300):
        return "observed SD", (
            f"Groups by observed SD (the model predicts the same SD, {format_number(sd[0], 3)}, for every group: no group is "
            "less certain than another by its own account)"
        )
    return "predicted SD", "Least certain groups (largest predicted SD)"


def coverage_tab(run, frame):
    ss = st.session_state
    s = run.settings
    st.markdown(
        f"Do the prediction intervals contain the outcome **{1 - s.delta:.0%}** of the time **in every "
        "group**? White = on target, red = too few rows covered, blue = wider than needed. Groups marked † "
        f"hold less than γ = {s.gamma:g} of the rows."
    )
    groups = heatmap_groups(run.audit)
    st.plotly_chart(
        _figure("coverage", _run_key(run), run, None, state.units(), groups), width="stretch", key="fig_coverage"
    )
    if note := interval_range_note(run.audit.params, "declare it on the Data page (Label range: declared)"):
        st.info(esc(note), icon=":material/straighten:")
    methods = [m for m in run.audit.coverage.columns if m in run.audit.coverage_by_bucket_of]
    if methods:
        if ss.get("res_method") not in methods:
            state.put("res_method", "calibrated" if "calibrated" in methods else methods[0])
        st.selectbox(
            "Method for the coverage by predicted-mean bucket",
            methods,
            **state.bind("res_method"),
            format_func=lambda m: METHOD_LABELS.get(m, m),
        )
        st.plotly_chart(
            _figure("bucket", _run_key(run), run, ss["res_method"], state.units(), groups),
            width="stretch",
            key="fig_bucket",
        )
    st.plotly_chart(_figure("width", _run_key(run), run, None, state.units(), groups), width="stretch", key="fig_width")


HEATMAP_PAGE = 40  # groups per page of the Coverage tab's heatmaps (the PDF splits at 42)


def heatmap_groups(audit) -> tuple | None:
    """The groups the Coverage tab's heatmaps show (None: all of them). Past HEATMAP_PAGE groups, a name filter
    and pages of HEATMAP_PAGE, the groups with findings or flags first (app.report_tables.priority_groups), so
    no group is out of reach and none hides in a figure too tall to read."""
    from app.report_tables import even_chunks, priority_groups

    names = list(audit.coverage.index)
    if len(names) <= HEATMAP_PAGE:
        return None
    first = [g for g in priority_groups(audit) if g in set(names)]
    ordered = first + [g for g in names if g not in set(first)]
    a, b = st.columns([2, 1])
    text = a.text_input(
        f"Filter the {len(names)} groups by name",
        **state.bind("res_heat_filter"),
        placeholder="e.g. race=B",
        help="The heatmaps below show the groups whose name contains this text (any case).",
    )
    if text:
        ordered = [g for g in ordered if text.strip().lower() in str(g).lower()]
        if not ordered:
            st.warning(f"No group's name contains {esc(text)!r}.")
            return ()
    pages = even_chunks(ordered, HEATMAP_PAGE)
    labels = [
        f"groups {sum(map(len, pages[:i])) + 1}-{sum(map(len, pages[: i + 1]))} of {len(ordered)}"
        for i in range(len(pages))
    ]
    if len(pages) == 1:
        return tuple(pages[0])
    if st.session_state.get("res_heat_page") not in labels:
        state.put("res_heat_page", labels[0])
    pick = b.selectbox("Page", labels, **state.bind("res_heat_page"), help="Groups with findings or flags come first.")
    return tuple(pages[labels.index(pick)])


def calibration_tab(run):
    ss = st.session_state
    st.markdown(
        "**Mean calibration before and after.** For each group, the largest gap between the average "
        "prediction and the average outcome over its predicted-mean buckets, for the base model and for "
        "the multicalibrated model (test rows)."
    )
    st.plotly_chart(
        _figure("calibration", _run_key(run), run, 20, state.units()), width="stretch", key="fig_calibration"
    )
    st.caption(
        f"Worst cell over the group's buckets of at least {run.audit.params['min_cell_count']} test rows (the "
        "error of a cell of one or two rows is mostly noise); the Tables tab lists every cell."
    )
    moments = list(run.model.moments)
    if moments:
        st.markdown(
            "**Moment calibration per cell.** Each marker is one (group, mean bucket, variance bucket) cell: "
            "its predicted against its observed central moment. On the diagonal = calibrated."
        )
        if ss.get("res_moment") not in moments:
            state.put("res_moment", moments[0])
        st.selectbox(
            "Moment",
            moments,
            **state.bind("res_moment"),
            format_func=lambda a: {2: "2: variance", 3: "3: third absolute moment", 4: "4: fourth moment"}.get(
                a, str(a)
            ),
        )
        st.plotly_chart(
            _figure("moment", _run_key(run), run, int(ss["res_moment"]), state.units()),
            width="stretch",
            key="fig_moment",
        )
    mc = run.audit.moment_cells
    if len(mc):
        with st.expander(f"Moment cells table ({len(mc):,} cells)"):
            st.dataframe(mc.head(2000), width="stretch", hide_index=True)


def _interval_figure(details: dict, y: float, name: str, units: str) -> go.Figure:
    from app.figures import OKABE_ITO

    rows = [(m, v) for m, v in details["intervals"].items() if isinstance(v, tuple)]
    fig = go.Figure()
    labels = [METHOD_LABELS.get(m, m) for m, _ in rows]
    for lab, (_, (lo, hi)) in zip(labels, rows):
        inside = lo <= y <= hi
        fig.add_trace(
            go.Scatter(
                x=[lo, hi],
                y=[lab, lab],
                mode="lines+markers",
                showlegend=False,
                line=dict(color=OKABE_ITO["blue"] if inside else OKABE_ITO["vermillion"], width=6),
                marker=dict(symbol="line-ns", size=14, line=dict(width=2)),
                hovertemplate=f"{lab}: {interval_text(lo, hi, 4)}<extra></extra>",
            )
        )
    mu = details["pred"]["mean"]
    fig.add_vline(x=mu, line=dict(color="#555", dash="dot", width=2))
    fig.add_vline(x=y, line=dict(color=OKABE_ITO["orange"], width=3))
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="lines",
            line=dict(color="#555", dash="dot", width=2),
            name=f"predicted mean {format_number(mu, 4)}",
        )
    )
    fig.add_trace(legend_line(f"observed {name} {format_number(y, 4)}", dict(color=OKABE_ITO["orange"], width=3)))
    if any(not (lo <= y <= hi) for _, (lo, hi) in rows):
        miss = dict(color=OKABE_ITO["vermillion"], width=6)
        fig.add_trace(legend_line("interval misses the observed value", miss))
    fig.update_layout(
        height=120 + 38 * len(rows),
        margin=dict(l=10, r=20, t=40, b=50),
        template="plotly_white",
        font=dict(family="DejaVu Sans, Arial, sans-serif", size=13),
        title=dict(text="<b>This row's intervals</b>", x=0, font=dict(size=15)),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"),
    )
    fig.update_xaxes(title_text=f"{name} ({units})" if units else name)
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig


def explorer_tab(run, frame):
    from app.pipeline import row_details

    ss = st.session_state
    test = run.split["test"]
    st.markdown(
        "Pick a test row: its features, predicted mean and moments, every method's interval, and the "
        "groups it belongs to."
    )
    c1, c2 = st.columns([1, 3])
    if "res_row" not in ss or not 0 <= ss["res_row"] < test.size:
        ss["res_row"] = 0
    c1.number_input(
        f"Test row (0 – {test.size - 1:,})", min_value=0, max_value=int(test.size - 1), key="res_row", step=1
    )
    if c1.button("Random row", key="res_random"):
        ss["res_row_next"] = int(np.random.default_rng().integers(test.size))
        st.rerun()
    pos = int(ss["res_row"])
    row = int(test[pos])
    try:
        t = _test_intervals(_run_key(run), run, frame)
        ints = {m: (float(lo[pos]), float(hi[pos])) for m, (lo, hi) in t["ints"].items()}
        det = row_details(frame, run, row, ints)
    except Exception as e:  # noqa: BLE001 - shown, the page keeps working
        st.error(f"Cannot explain this row: {esc(e)}")
        return
    ss["row_details"] = det
    units = state.units()
    u = f" ({esc(units)})" if units else ""
    with c2:
        p = det["pred"]
        k = st.columns(4)
        k[0].metric(f"Observed {esc(run.label.name)}{u}", format_number(det["label"], 4))
        k[1].metric(
            f"Predicted mean{u}",
            format_number(p["mean"], 4),
            delta=None if det["base"] is None else f"{p['mean'] - det['base']:+.3g} vs base",
            delta_color="off",
        )
        if "moment_2" in p:
            k[2].metric(f"Predicted SD{u}", format_number(math.sqrt(max(p["moment_2"], 0)), 4))
        if det["base"] is not None:
            k[3].metric(f"Base prediction{u}", format_number(det["base"], 4))
    st.caption(
        f"{state.file_row(row + 1).capitalize()} (test row {pos:,}). Central moments: "
        + ", ".join(
            f"m{k.split('_')[1]} = {format_number(v, 4)}" for k, v in det["pred"].items() if k.startswith("moment_")
        )
    )
    a, b = st.columns([3, 2], gap="large")
    with a:
        st.plotly_chart(_interval_figure(det, det["label"], run.label.name, units), width="stretch", key="fig_row")
        rows = [
            (METHOD_LABELS.get(m, m), lo, hi, hi - lo, lo <= det["label"] <= hi)
            for m, v in det["intervals"].items()
            if isinstance(v, tuple)
            for lo, hi in [v]
        ]
        st.dataframe(
            pd.DataFrame(rows, columns=["method", "lower", "upper", "width", "contains the outcome"]),
            hide_index=True,
            width="stretch",
            column_config={c: st.column_config.NumberColumn(format="%.4g") for c in ("lower", "upper", "width")},
        )
    with b:
        st.markdown(f"**Groups of this row** ({len(det['groups'])})")
        st.markdown(" · ".join(esc(g) for g in det["groups"]))
        vals = {k: v for k, v in det["values"].items()}
        st.dataframe(
            pd.DataFrame({"column": list(vals), "value": [str(v) for v in vals.values()]}),
            hide_index=True,
            width="stretch",
            height=min(36 + 35 * len(vals), 320),
        )


def tables_tab(run):
    audit = run.audit
    for attr, title in (
        ("by_group", "Per group"),
        ("coverage", "Coverage (group × method)"),
        ("width", "Mean width (group × method)"),
        ("calibration_cells", "Mean calibration per cell"),
    ):
        t = getattr(audit, attr)
        if len(t):
            st.markdown(f"**{title}** ({len(t):,} rows)")
            st.dataframe(t.head(2000), width="stretch")


def render():
    ss = st.session_state
    if "res_row_next" in ss:
        ss["res_row"] = ss.pop("res_row_next")
    st.title("Results")
    shown = run_and_frame("The table changed since this audit ran: run it again on the Run page.")
    if shown is None:
        return
    run, frame = shown
    if getattr(run.audit, "task", "") == "binary" or run.model.task == "binary":
        from app.ui.binary_results import render_binary

        if run.audit is not None:
            render_binary(run, frame, over_time=lambda: over_time(run, frame))
            return
    st.caption(
        f"{esc(run.data_name)} · label **{esc(run.label.name)}** · {run.model.info.get('n_groups')} groups · "
        f"α = {format_number(run.alpha, 3)}"
        + (f", β = {format_number(run.beta, 3)}" if run.model.moments else "")
        + f"{_rule_note(run.model)}, "
        f"m = {run.settings.n_buckets}, "
        f"k = {run.settings.n_moments} · "
        + (
            f"audited on {run.split['test'].size:,} test rows"
            if run.audit is not None
            else ("not audited yet" if run.stopped else "audit failed")
        )
        + " · δ = "
        f"{run.settings.delta:g}, γ = {run.settings.gamma:g}"
    )
    if run.stopped or not run.converged:
        st.warning(not_converged_note(bool(run.model.moments)))
    if run.audit is None:
        if run.stopped:
            from app.ui.run_summary import audit_kept_model

            st.info("The run was stopped before its audit: the model fitted so far is kept.")
            st.button("Audit this model now", key="res_audit_kept", on_click=audit_kept_model)
            if st.session_state.get("run_before_stop") is not None:
                from app.ui.run_summary import bring_back_run_before_stop

                st.button(
                    "Bring back the previous complete run (audited)",
                    key="res_run_before_stop",
                    on_click=bring_back_run_before_stop,
                )
        else:
            st.error(f"The audit is not available: {esc(run.audit_error)}")
        return
    headline(run)
    rmse_line(run, frame)
    show_fit_notes(run.model)
    findings(run)
    scorecard(run)
    over_time(run, frame)
    from app.ui.discover_tab import results_section

    results_section(run)  # discovered groups (Discover / mmc fit --discover), marked as such
    tabbed(
        "results_tab",
        {
            "Variance disparities": lambda: variance_tab(run),
            "Coverage": lambda: coverage_tab(run, frame),
            "Calibration": lambda: calibration_tab(run),
            "Row explorer": lambda: explorer_tab(run, frame),
            "Tables": lambda: tables_tab(run),
        },
    )


if __name__ == "__main__":
    render()

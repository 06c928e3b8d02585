"""Results page: everything the audit found on the test rows.

One Streamlit page whose tabs share the per-run cached computations of :mod:`app.ui.results_data`; the section
"Over time" is in :mod:`app.ui.results_over_time`, the row explorer in :mod:`app.ui.results_explorer`, the figures
it shows are built in :mod:`app.figures.charts`, the classifier results in :mod:`app.ui.binary_results`.

Variance disparities (which groups the model is least certain about, and whether it knows), coverage and
width heatmaps of the interval methods, mean calibration before / after, moment calibration per cell, and a
row explorer. Figures come from ``app/figures/charts.py`` (the PDF report uses the same ones) and are cached per run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from app.figures.figure_style import coverage_tested, format_number, format_pair
from app.services.specs import count, interval_range_note, not_converged_note
from app.ui import state
from app.ui.common import all_findings, esc, run_and_frame, scorecard_box, show_fit_notes, tabbed
from app.ui.results_data import METHOD_LABELS, audit_figure, intervals_of_test_rows, run_key
from app.ui.results_explorer import explorer_tab
from app.ui.results_over_time import over_time


def _rule_note(model) -> str:
    """How alpha / beta were set, in a few words for the caption."""
    from app.services.specs import threshold_rules

    rules = set(threshold_rules(model).values())
    if "se" in rules:
        return " (achieved; per-cell standard-error rule)"
    if "auto" in rules:
        return " (auto: just above the sampling noise)"
    return ""


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
    from app.services.pipeline import error_metrics

    bm = run.base_metrics or {}
    try:
        after = error_metrics(run.label.y[run.split["test"]], intervals_of_test_rows(run_key(run), run, frame)["mean"])
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
    """app.services.pipeline.worse_note of the test rows' squared errors, base against multicalibrated."""
    from app.services.pipeline import worse_note

    test = run.split["test"]
    y = run.label.y[test]
    after = intervals_of_test_rows(run_key(run), run, frame)["mean"]
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
    from app.figures.figure_style import below_gamma  # the one definition of "below gamma"

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


def findings(run):
    """The audit's findings (tested defects, each sentence with n, its selection-adjusted interval and adjusted p) and the
    descriptive variance disparities, from :func:`app.report.pdf.findings_summary` (the PDF says the same)."""
    from app.report.pdf import findings_summary

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
    st.plotly_chart(
        audit_figure("variance", run_key(run), run, top, state.units()), width="stretch", key="fig_variance"
    )
    _spread_table(run)


def _spread_table(run):
    """The groups whose spread is most misjudged or farthest from all rows', with their SDs and variance ratios."""
    bg = run.audit.by_group
    if "pred_var" not in bg.columns:
        return
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
        audit_figure("coverage", run_key(run), run, None, state.units(), groups), width="stretch", key="fig_coverage"
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
            audit_figure("bucket", run_key(run), run, ss["res_method"], state.units(), groups),
            width="stretch",
            key="fig_bucket",
        )
    st.plotly_chart(
        audit_figure("width", run_key(run), run, None, state.units(), groups), width="stretch", key="fig_width"
    )


HEATMAP_PAGE = 40  # groups per page of the Coverage tab's heatmaps (the PDF splits at 42)


def heatmap_groups(audit) -> tuple | None:
    """The groups the Coverage tab's heatmaps show (None: all of them). Past HEATMAP_PAGE groups, a name filter
    and pages of HEATMAP_PAGE, the groups with findings or flags first (app.report.tables.priority_groups), so
    no group is out of reach and none hides in a figure too tall to read."""
    from app.report.tables import even_chunks, priority_groups

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
        audit_figure("calibration", run_key(run), run, 20, state.units()), width="stretch", key="fig_calibration"
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
            audit_figure("moment", run_key(run), run, int(ss["res_moment"]), state.units()),
            width="stretch",
            key="fig_moment",
        )
    mc = run.audit.moment_cells
    if len(mc):
        with st.expander(f"Moment cells table ({len(mc):,} cells)"):
            st.dataframe(mc.head(2000), width="stretch", hide_index=True)


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

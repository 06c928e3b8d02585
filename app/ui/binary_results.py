"""Results of a classifier audit (a binary label): per-group probability calibration before / after with
bootstrap intervals, reliability diagrams, and the rates at a decision threshold with a slider that recomputes
them from the stored test-row predictions (no refit). Figures and display tables come from ``app/figures/binary.py``
(the PDF report uses the same ones); every number is on the probability scale, never in label units."""

from __future__ import annotations

import math

import streamlit as st

from app.figures.figure_style import format_number
from app.services.specs import count, not_converged_note
from app.ui import state
from app.ui.common import esc, show_fit_notes, tabbed
from app.ui.common import scorecard_box as common_scorecard

RATE_TABLE_COLUMNS = ("group", "n", "selection rate", "true positive rate", "false positive rate", "precision")


def _run_key(run) -> str:
    return f"{run.data_key}:{run.finished_at}"


@st.cache_data(show_spinner=False, max_entries=64)
def rates_at(key: str, _run, _frame, threshold: float):
    """(rates, disparities) of the run's test rows at ``threshold`` (cached per run and threshold)."""
    from app.services.pipeline import classifier_rates

    return classifier_rates(_frame, _run, threshold)


@st.cache_data(show_spinner=False, max_entries=16)
def _reliability(key: str, _run):
    from app.figures import binary as F
    from app.report.tables import priority_groups

    a = _run.audit
    return F.reliability_figure(a.calibration_cells, a.by_group, first=priority_groups(a), always=F.finding_groups(a))


def _num(v, nd: int = 3) -> str:
    return format_number(v, nd, "f")


def headline(run, frame=None):
    bg = run.audit.by_group
    ov = bg.iloc[0]
    info = run.model.info
    c = st.columns(5)
    c[0].metric(
        "Model",
        "converged" if run.converged else ("stopped" if run.stopped else "not converged"),
        help=f"{count(info.get('rounds'), 'round')}, {count(info.get('mean_updates'), 'update')} of the probability",
    )
    c[1].metric(
        "Test rows", f"{run.split['test'].size:,}", help="All results on this page are on rows the fit never saw."
    )
    c[2].metric("Share of positives", _num(ov["base_rate"]), help="Observed share of the positive class, test rows.")

    def change(k):
        if f"{k}_base" not in bg.columns:
            return None
        d = float(ov[k] - ov[f"{k}_base"])
        return None if not math.isfinite(d) or abs(d) < 5e-4 else f"{d:+.3f} vs before"

    for col, key, name, text in (
        (
            c[3],
            "log_loss",
            "Log loss, all rows",
            "Mean negative log-likelihood of the test labels (lower is better); the change is against the base score.",
        ),
        (
            c[4],
            "ece",
            "ECE, all rows",
            "Expected calibration error: |observed − predicted| per probability tenth, weighted by rows.",
        ),
    ):
        col.metric(name, _num(ov[key]), delta=change(key), delta_color="inverse", help=text)
    if (
        frame is not None
        and (d := change("log_loss"))
        and d.startswith("+")
        and (note := log_loss_worse_note(run, frame))
    ):
        st.caption(esc(note))


def log_loss_worse_note(run, frame) -> str | None:
    """app.services.pipeline.worse_note of the test rows' log losses, base score against multicalibrated (None without a
    base score, or when the rows or the model cannot give them)."""
    import numpy as np

    from app.services.pipeline import model_table, worse_note

    if run.base is None:
        return None
    test = run.split["test"]
    table = model_table(frame, run, test)
    base = np.clip(np.asarray(run.base[test], dtype=float), 1e-12, 1 - 1e-12)
    after = np.clip(run.model.predict(table, run.base[test])["mean"], 1e-12, 1 - 1e-12)
    y = np.asarray(run.label.y[test], dtype=float)

    def loss(p):
        return -(y * np.log(p) + (1 - y) * np.log(1 - p))

    return worse_note("log loss", loss(base), loss(after))


def findings_box(run):
    from app.report.pdf import findings_summary

    s = findings_summary(run.audit)
    with st.container(border=True):
        st.markdown("**What the audit found** (test rows)")
        if s["failed"]:
            st.error(f"The findings could not be computed ({esc(s['failed'])}).", icon=":material/error:")
            return
        if s["shown"]:
            st.markdown("\n".join(f"- {esc(f['text'])}" for f in s["shown"]))
        elif s["untestable"]:
            st.warning(s["untestable"], icon=":material/warning:")
        else:
            st.markdown(
                "No group's (or probability bucket's) share of positives differs from the predicted "
                f"probability beyond sampling error (groups and cells with at least {s['min_count']} test "
                "rows)."
            )
        from app.ui.common import all_findings

        more = all_findings(run.audit.findings, s, lambda f: f"- {esc(f['text'])}")
        st.caption(
            more + f"{s['n_tests']} tests of the predicted probability per group and per group × probability "
            f"bucket, adjusted together by {s['control']} at {s['level']:g}. No variance or interval "
            "findings: for a 0/1 outcome the spread is p(1 − p) and intervals are not offered." + s["interval_note"]
        )


def scorecard_box(run):
    """The classifier audit's groups in the Results pages' one scorecard table (app.ui.common.scorecard_box): the
    classifier page had none, so a group was listed only when the calibration chart had room for it (issue 35)."""
    common_scorecard(run.audit, "", "difference")


def _n_boot(run) -> str:
    n = run.audit.params.get("n_boot")
    return f"{int(n):,}" if n is not None else "–"


def calibration_tab(run):
    from app.figures import binary as F

    bg = run.audit.by_group
    st.markdown(
        "**Probability calibration by group** (test rows; before = the base score, after = "
        "multicalibrated; brackets: 95% intervals)"
    )
    st.dataframe(F.classifier_calibration_table(bg), hide_index=True, width="stretch")
    st.caption(
        "worst bucket error: observed − predicted in the group's probability tenth with the largest gap "
        f"(tenths of ≥ {run.audit.params.get('min_cell_count', 20)} rows); ECE: the gaps weighted by rows; "
        "log loss and Brier: lower is better. Intervals: positive share, a Wilson score interval from the "
        f"group's counts; the other metrics, percentile bootstrap ({_n_boot(run)} replicates of the test rows)."
    )
    st.plotly_chart(_reliability(_run_key(run), run), width="stretch", key="bin_reliability")


def rates_tab(run, frame):
    from app.figures import binary as F

    st.slider(
        "Decision threshold (decision = predicted probability ≥ threshold)",
        0.05,
        0.95,
        step=0.05,
        **state.bind("res_threshold"),
    )
    thr = float(st.session_state.get("res_threshold", 0.5))
    try:
        rates, disp = rates_at(_run_key(run), run, frame, round(thr, 4))
    except Exception as e:  # noqa: BLE001 - shown, never a crash of the page
        st.error(f"Rates could not be computed: {esc(e)}")
        return
    # the groups' shares of positives (the same test rows at every threshold): the counts behind TPR and FPR
    share = run.audit.by_group["base_rate"]
    rates = F.wilson_rates(rates, share)
    table = F.classifier_rate_table(rates)
    st.markdown(f"**Rates by group at threshold {thr:.2f}** (after multicalibration; Wilson score 95% intervals)")
    st.table(table[[c for c in RATE_TABLE_COLUMNS if c in table.columns]].set_index("group"))
    st.caption(F.RATE_INTERVAL_NOTE)
    from app.report.tables import priority_groups

    fig = F.rate_figure(rates, thr, first=priority_groups(run.audit), always=F.finding_groups(run.audit))
    st.plotly_chart(fig, width="stretch", key="bin_rates")
    st.markdown(
        "**Disparities across the values of each column** (after multicalibration; as fairlearn's "
        "MetricFrame computes them)"
    )
    st.dataframe(F.classifier_disparity_table(disp), hide_index=True, width="stretch")
    st.caption(
        "DP: demographic parity (selection rates: largest − smallest, smallest / largest); EO: equalized "
        "odds (the larger gap of the true and false positive rates; the smaller ratio); four-fifths rule: "
        "groups selected at less than 4/5 of the column's highest selection rate. Point estimates from the "
        "rates above (no intervals): read them with the groups' intervals and sizes. Moving the threshold "
        "recomputes these from the stored test-row probabilities; nothing is refitted."
    )


def tables_tab(run):
    audit = run.audit
    st.markdown(
        f"**Per group** ({len(audit.by_group):,} rows; every metric, its `_base` (before) and its "
        "bootstrap `_lo` / `_hi`)"
    )
    st.dataframe(audit.by_group, width="stretch")
    st.markdown(f"**Reliability cells** ({len(audit.calibration_cells):,} rows)")
    st.dataframe(audit.calibration_cells, width="stretch", hide_index=True)


def run_page_note(d):
    """On the Run page: a binary label is a classifier audit; say which settings do not apply."""
    from app.services.specs import binary_values

    label = st.session_state.get("label_col")
    if d is None or binary_values(d["df"], label) is None:
        return
    st.info(
        f"**Binary label** {esc(label)}: a classifier audit. Only the mean (the probability of the positive "
        "class) is fitted, so k, the odd moments, δ and γ (intervals) are not used; the decision threshold is "
        "set on the Results page.",
        icon=":material/toggle_on:",
    )


def render_binary(run, frame, over_time=None):
    """The Results page of a binary (classifier) run. ``over_time()``: draws the Over time view (the Results page's,
    passed in so that this module imports no page back) under the findings."""
    params = run.audit.params
    classes = (params.get("label") or {}).get("classes") or ["0", "1"]
    st.caption(
        f"{esc(run.data_name)} · binary label **{esc(run.label.name)}** (positive class "
        f"**{esc(classes[1])}**) · classifier audit · {run.model.info.get('n_groups')} groups · "
        f"α = {format_number(run.alpha, 3)}, m = {run.settings.n_buckets} · audited on {run.split['test'].size:,} test rows"
    )
    if run.stopped or not run.converged:
        st.warning(not_converged_note(False))
    headline(run, frame)
    show_fit_notes(run.model)
    findings_box(run)
    scorecard_box(run)
    if over_time is not None:
        over_time()
    tabbed(
        "results_tab_binary",
        {
            "Calibration": lambda: calibration_tab(run),
            "Rates at a threshold": lambda: rates_tab(run, frame),
            "Tables": lambda: tables_tab(run),
        },
    )
    st.info(
        "No prediction intervals, coverage heatmaps or variance pages for a binary label: the outcome is 0 or "
        "1, so an interval is {0}, {1} or {0, 1}, and the variance p(1 − p) follows from the probability, "
        "which is what is calibrated here.",
        icon=":material/info:",
    )


__all__ = ["render_binary", "rates_at", "RATE_TABLE_COLUMNS"]

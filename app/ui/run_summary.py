"""The Run page's summary of the last run: how it ended (converged, not, or stopped, with what a stop kept and the
buttons to audit the kept model or bring back the run before it), the rows of the split, the thresholds used, the
convergence chart and each stage's held-out effect. The sentences are :mod:`app.ui.run_text`'s.
"""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from app.figures.convergence import convergence_figure
from app.services.specs import count, descent_thresholds, kept_model_text
from app.ui import state
from app.ui.common import esc, show_fit_notes
from app.ui.run_text import converged_text, thresholds_used_text


def bring_back_run_before_stop():
    """The Run page's button after a Stop: the last complete (audited) run back in place of the stopped one."""
    ss = st.session_state
    prev = ss.pop("run_before_stop", None)
    if prev is not None:
        ss["run"] = prev
        for k in ("export_pdf", "export_pdf_error", "export_csv", "export_model", "export_groups", "export_audit"):
            ss.pop(k, None)


def audit_kept_model():
    """Audit a stopped run's model (the Stop skipped the audit)."""
    from app.services.pipeline import audit_run

    ss = st.session_state
    run, d = ss.get("run"), state.data()
    if run is None or d is None or d["key"] != run.data_key:
        return
    audit_run(run, d["df"])
    units = state.units()
    if units and run.audit is not None and isinstance(getattr(run.audit, "params", None), dict):
        run.audit.params["label_units"] = units
    run.finished_at = time.time()  # new figures
    for k in ("export_pdf", "export_pdf_error", "export_csv", "export_audit"):
        ss.pop(k, None)


def show_run_summary(run):
    """The last run's summary under the Run page's settings (``run``: an :class:`app.services.pipeline.AuditRun`)."""
    ss = st.session_state
    info = run.model.info
    from app.ui.common import changed_since_note

    if run.data_key == (state.data() or {}).get("key"):
        changed_since_note(run)  # the label, groups or settings above are not this run's
    _how_it_ended(run)
    last = ss.get("last_job") or {}
    if last.get("stop_requested_at") and last.get("stop_seen_at"):
        st.caption(
            f"Stop pressed → the run saw it {last['stop_seen_at'] - last['stop_requested_at']:.2f} s later "
            f"and ended {max(last['ended_at'] - last['stop_requested_at'], 0):.2f} s after the click."
        )
    show_fit_notes(run.model)
    if run.audit_error and not run.stopped:
        st.warning(f"Audit not available: {esc(run.audit_error)}")
    _row_counts(run)
    kept = info.get("kept_round") if info.get("early_stopping") else None
    _thresholds_caption(run)
    alpha, beta = descent_thresholds(run.model)
    fig = convergence_figure(run.history, alpha, beta, 1 / alpha**2 - 1, kept_round=kept)
    st.plotly_chart(fig, width="stretch", key="final_chart")
    _stages_table(run.model)
    st.page_link("ui/results_page.py", label="See the results", icon=":material/insights:")


def _how_it_ended(run):
    """Converged, not converged (and why), or stopped by the user with what was kept."""
    info = run.model.info
    t = run.timings
    if run.stopped:
        _stopped_notice(run)
        return
    if run.converged:
        st.success(
            f"{converged_text(info)} Fit {t.get('fit', 0):.2f} s, audit "
            f"{t.get('audit', 0):.2f} s, total {t.get('total', 0):.2f} s.",
            icon=":material/check_circle:",
        )
    else:
        reason = "the round cap was reached" if run.settings.max_rounds else "it was not run to convergence"
        if info.get("early_stopping"):
            reason = f"early stopping kept round {info.get('kept_round')}"
        st.warning(
            f"Not converged: {reason}. ({count(info['rounds'], 'round')}, {count(info['mean_updates'], 'mean update')}.)"
        )


def _stopped_notice(run):
    """A stopped run: what was kept and that it misses the thresholds asked for; buttons to audit the kept model
    and to bring back the complete run it replaced."""
    ss = st.session_state
    info = run.model.info
    audited = run.audit is not None
    rounds = int(info["rounds"] or 0)
    # an early-stopped kept round already says how far the descent ran ("Stopped by you after 20590 rounds:
    # the model of round 432 (...; the descent ran 20590 rounds)")
    says_rounds = info.get("early_stopped") and info.get("kept_round") not in (None, rounds)
    head = (
        "Stopped by you before the first mean update"
        if not rounds
        else "Stopped by you"
        if says_rounds
        else f"Stopped by you after {rounds:,} round{'s' if rounds != 1 else ''}"
    )
    st.warning(
        f"{head}: {kept_model_text(info)} was kept"
        + (" and audited" if audited else " (not audited)")
        + f"; it does **not** reach the {'α, β' if run.model.moments else 'α'} the fit was asked for (its "
        "guarantees hold at the values it achieves, stated below).",
        icon=":material/stop_circle:",
    )
    if not audited:
        st.button(
            "Audit this model now",
            key="audit_kept",
            on_click=audit_kept_model,
            help="Computes the Results page for the stopped model on the test rows (may take a while).",
        )
    before = ss.get("run_before_stop")
    if before is not None:
        st.info(
            f"The previous complete run ({esc(before.data_name)}, "
            f"{sum(g.get('name') != 'all' for g in before.groups_json.get('groups') or [])} groups, audited) is "
            "set aside: the Results page now shows this stopped run.",
            icon=":material/history:",
        )
        st.button("Bring back the previous run", key="run_before_stop_btn", on_click=bring_back_run_before_stop)


def _row_counts(run):
    """The split's row counts as metrics, with the labels' and the base prediction's notes under them."""
    info = run.model.info
    t = run.timings
    cols = st.columns(4)
    sizes = {k: v.size for k, v in run.split.items()}
    cols[0].metric("Fitting rows", f"{sizes['fit']:,}", help="Rows the descent audited and updated on.")
    xfit = (run.model.extras.get("intervals") or {}).get("rows") == "cross-fit"
    cols[1].metric(
        "Held-out rows",
        f"{sizes['calibration']:,}",
        help="Held out of the descent: they choose the kept round (early stopping), judge the base map and the "
        "cell corrections after the descent (nothing is fitted on them but the variance's level and its "
        "whole-group shrinkage, whose penalty of thousands of rows leaves any one row a negligible say)"
        + (
            "; the intervals are calibrated on every fitting and held-out row, each with a model fitted without it "
            "(5-fold cross-fitting)."
            if xfit
            else " and calibrate the intervals."
        ),
    )
    cols[2].metric("Test rows (audit)", f"{sizes['test']:,}", help="Never used for fitting; every result is on these.")
    cols[3].metric(
        "Base-model rows",
        f"{sizes['base']:,}" if sizes["base"] else "—",
        help="Rows the in-app base model was trained on (not used again).",
    )
    base_t = (
        f"base model fitted in {t['base_model']:.2f} s" if run.base_spec.kind == "model" and "base_model" in t else ""
    )
    st.caption(
        esc(
            " · ".join(
                x
                for x in (run.label.note and f"Label {run.label.name}: {run.label.note}", info.get("base_note"), base_t)
                if x
            )
        )
    )


def _thresholds_caption(run):
    info = run.model.info
    th = run.thresholds
    mb = th.get("moment_betas") or {}
    if th.get("rule") == "se":
        st.caption(
            f"Thresholds: per-cell standard-error test, z = {th.get('z', 0):.2f}. The kept model achieves "
            f"α = {run.alpha:.3g}"
            + (f", β = {run.beta:.3g}" if run.model.moments else "")
            + ("".join(f", β{a} = {v:.3g}" for a, v in mb.items() if a != 2))
            + " on the fitting rows (every cell's mass-weighted error is below them)."
        )
    else:
        st.caption(thresholds_used_text(info, run.alpha, run.beta, mb, bool(th.get("auto"))))


def _stages_table(model) -> None:
    """The held-out effect of each stage (mmc_core.estimator.stages): the chart above shows the descent only."""
    from mmc_core.estimator import stage_rows

    rows = stage_rows(model.info.get("stages"))
    if not rows:
        return
    df = pd.DataFrame(rows).rename(
        columns={
            "stage": "Stage",
            "rmse": "Mean: RMSE",
            "mean_moved": "Mean moved (avg |change|)",
            "variance_error": "Variance: group error",
            "variance_moved": "Variance moved (avg |log change|)",
        }
    )
    with st.expander("What each stage changed (held-out rows)", expanded=True):
        st.dataframe(df, hide_index=True, width="stretch")
        st.caption(
            "Measured on the held-out rows, which none of the stages was fitted on but the variance's level and its "
            "whole-group shrinkage (they chose the kept round and judged the cell steps). RMSE in the label's "
            "units; the variance's group error is the mass-weighted |log(predicted / observed variance)| over "
            "groups with at least 2% of the rows (0.10: about 10% off)."
        )

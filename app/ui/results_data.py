"""The Results page's per-run cached computations (keyed on the run; the run object itself is not hashed): the
audit's figures and the test rows' predictions and intervals, and the interval methods' names, shared by the page
and its row explorer.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

METHOD_LABELS = {
    "guaranteed": "guaranteed (paper, Section 5)",
    "plugin": "plug-in Chebyshev",
    "multimoment": "multi-moment cover (Appendix)",
    "calibrated": "calibrated per group",
    "split-conformal": "split conformal (marginal)",
    "mondrian": "Mondrian (per-group) conformal",
    "gaussian": "Gaussian (base ± z·sd)",
}


def run_key(run) -> str:
    """The key the per-run caches are looked up by: the table and the moment the run finished."""
    return f"{run.data_key}:{run.finished_at}"


@st.cache_data(show_spinner=False, max_entries=64)
def audit_figure(kind: str, key: str, _run, arg=None, units: str = "", groups: tuple | None = None):
    """One figure of the run's audit (what ``audit()`` computed on the test rows; nothing recomputed here).

    Parameters
    ----------
    kind : "variance", "coverage", "bucket", "width", "calibration" or "moment"
    key : the run's cache key (:func:`run_key`); the run itself is not hashed
    _run : app.services.pipeline.AuditRun
    arg : the builder's one argument (``top`` groups, the bucket table's method, the moment)
    units : the label's units as printed
    groups : the heatmaps' rows, when the Coverage tab shows a page of them

    Returns
    -------
    plotly.graph_objects.Figure
    """
    from app.figures import charts as F
    from app.report.tables import audit_subset

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
def intervals_of_test_rows(key: str, _run, _frame) -> dict:
    """Test-row predictions, intervals of every available method, and bucket of each row.

    Parameters
    ----------
    key : the run's cache key (:func:`run_key`); the run and the table are not hashed
    _run : app.services.pipeline.AuditRun
    _frame : the run's table

    Returns
    -------
    dict with "mean" (predicted means), "ints" (method -> (lower, upper)), "groups" (each group's test rows) and
    "names" (the groups' names)
    """
    from app.services.run_tables import model_table
    from mmc_core.intervals import interval_table

    rows = _run.split["test"]
    table = model_table(_frame, _run, rows)
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

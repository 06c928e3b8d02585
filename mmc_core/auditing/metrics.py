"""The audit: one object with per-group tables for a fitted model on labelled rows (in the spirit of
fairlearn's MetricFrame).

The regression audit is one pass over shared state (the (group, row) membership pairs, the bucket grids, one
bootstrap): ``audit`` checks its options and runs the steps that build each table from that state
(:mod:`mmc_core.auditing.audit_tables`), then the findings (:mod:`mmc_core.auditing.audit_findings`). The classifier branch
(:func:`mmc_core.auditing.audit_binary.audit_binary_model`) builds on the classifier metrics of ``binary.py``.

``audit(model, table, y, base=None, delta=0.1, gamma=0.05, ...)`` returns an :class:`AuditResult`. Every
number is in the label's ORIGINAL units (means affinely, a-th moments times span**a). All per-group and
per-cell statistics are weighted ``bincount`` calls over the (group, row) membership pairs: no Python loop
over rows, groups or cells (the bootstrap loops over blocks of replicates only).

"Before / after": the ``*_base`` columns describe the base prediction the model started from (the one
passed as ``base``), bucketed by its own values; a model fitted without a base prediction started from a
constant (the fitting rows' label mean), and that constant is the "before" (``params["base"]`` says which).

Tables (pandas DataFrames)
--------------------------
``by_group`` (index: group name, in the model's order; "all" first), columns:
    count, mass (count / n), mean_label, mean_pred, mean_pred_base,
    calib_error_worst / calib_error_worst_base: the largest |mean prediction - mean label| over the group's
        mean buckets G(p, i) with at least ``min_cell_count`` rows (default ``min_group_count``, the smallest
        cell the findings test: a worst cell of a handful of rows is noise; NaN when no cell of the group is that
        large), calib_error_worst_se / calib_error_worst_se_base: the standard error of that cell's mean error,
    calib_error_worst_weighted / calib_error_worst_weighted_base: the largest (count(cell) / n) * |mean
        prediction - mean label| over the same cells (the paper's mass-weighted statistic, label units),
    pred_var: mean predicted variance m_2(x) (NaN for a mean-only model),
    emp_var: variance of the residual y - mu(x) within the group, around the group's mean residual (n - 1
        denominator): the variance m_2 should match (a mean error of the whole group is the mean's finding),
    label_var: variance of the label within the group (around the group's mean; includes the spread of mu),
    var_ratio, var_ratio_lo, var_ratio_hi: pred_var / pred_var(all) with a percentile bootstrap CI
        (rows resampled; level 95%) -- the "variance disparity",
    emp_var_ratio, emp_var_ratio_lo, emp_var_ratio_hi: the same for emp_var,
    large_enough: mass >= gamma (the size thm:ciguarantee needs of a cell),
    guarantee_share: share of the group's rows lying in a cell G(mu, m_a, i, j) of mass >= gamma
        (a = the moment the guaranteed interval uses; NaN without usable moments).
``coverage`` / ``width``: index group, one column per interval method computed: the share of the group's rows
    with lower <= y <= upper, and the mean width upper - lower (inf when some interval is unbounded).
``calibration_cells`` (long): group, bucket, bucket_lo, bucket_hi (label units), count, mass, mean_label,
    mean_pred, error (= mean_pred - mean_label) for the model's cells G(mu, i); count_base, mass_base,
    mean_label_base, mean_pred_base, error_base for the base's cells G(base, i). One row per (group, bucket)
    non-empty for either.
``moment_cells`` (long): group, moment, mean_bucket, moment_bucket, count, mass, predicted (mean predicted
    a-th moment over the cell), empirical (the cell's empirical central moment around its own label mean:
    mean (y - mean_y)^a, |.|^a for absolute odd moments), error = predicted - empirical. Non-empty cells only.
``coverage_by_bucket``: index group, columns the mean buckets 0..m-1: coverage of ``bucket_method`` within
    G(mu, i) (NaN for empty cells).
``overall``: a pandas Series: the "all" row of by_group plus ``coverage:<method>`` and ``width:<method>``.
``params``: dict: delta, gamma, n, label {lo, hi, source, name (the fitted label's name)}, methods (computed),
    methods_unavailable {method: reason}, bucket_method, base (what the "before" prediction is), n_boot, seed,
    bootstrap_level, interval_details {method: the moment chosen, grid delta used, uncovered rows, ...},
    mean_buckets (edges in label units), moments, odd_moments, label_outside_range (rows outside the range).

Views: ``difference(column)`` and ``ratio(column)`` (column of by_group, or "coverage:<method>" /
"width:<method>") against overall, like MetricFrame.

Findings (:mod:`mmc_core.auditing.findings`): ``findings`` is a list of dicts, one per model defect the rows show
beyond chance after Holm (or Benjamini-Hochberg) adjustment over every test the audit made: kind (mean |
calibration | variance | coverage), group, n, bucket (calibration only), method (coverage only), predicted,
observed, estimate, interval (selection-adjusted), p_value, p_adjusted, adjustment, z, harm (findings.harm: the
list's order, largest first), text; an understated variance also mean_findings_within (the groups with a mean
finding that cover part of it, when any). ``disparities`` lists the descriptive variance disparities (kind
"variance_disparity", group, n, estimate, interval, text).
``findings_status`` is "ok", "untestable: <reason>" when no group was large enough to test, or "failed: <reason>"
when the findings could not be computed (neither is ever reported as "no findings").

JSON (``to_json()``), strict (NaN and infinities become null)::

    {"format": "mmc-audit-audit", "version": 1,
     "overall": {column: value},
     "by_group" | "coverage" | "width" | "calibration_cells" | "moment_cells" | "coverage_by_bucket":
         DataFrame.to_dict(orient="split") -> {"index": [...], "columns": [...], "data": [[...], ...]},
     "params": {...}, "findings": [{...}, ...], "disparities": [{...}, ...], "findings_status": "ok"}

Read a table back with ``pd.DataFrame(**d["by_group"])``.

Binary (classifier) models (``model.task == "binary"``): ``audit`` returns the same object with
``task = "binary"``; ``by_group`` is :func:`mmc_core.auditing.binary.classifier_audit`'s table (count, mass, base_rate,
mean_score, calib_error, calib_error_worst, ece, brier, log_loss and, at ``threshold``, selection_rate, tpr,
fpr, precision; ``_base`` = before; ``_lo`` / ``_hi`` = bootstrap 95% ends), ``classifier`` the whole
:class:`~mmc_core.auditing.binary.ClassifierAudit` (``classifier.disparities``: demographic parity / equalized odds /
four-fifths per column), ``calibration_cells`` the reliability cells (:func:`mmc_core.auditing.binary.reliability_cells`)
and ``coverage``, ``width``, ``moment_cells``, ``coverage_by_bucket`` are empty (no intervals for a 0/1 outcome).
Findings are the mean and calibration tests only (on the probability scale), never variance or coverage.
JSON adds ``"task": "binary"``, ``"threshold"`` and ``"classifier"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from .. import intervals as iv
from ..common.errors import DataError, MMCError
from ..common.tables import to_label_array
from . import findings as fnd
from .audit_findings import (
    audit_rows,
    group_findings,
    residual_variance,  # noqa: F401 - the Dask engine imports it from here
)
from .audit_result import FORMAT, VERSION, AuditResult, json_clean
from .audit_tables import (
    calibration_cells_table,
    group_table,
    guarantee_share,
    interval_tables,
    moment_cells_table,
)
from .binary import binary_labels, check_threshold
from .findings import VARIANCE_TOLERANCE
from .scorecard import scorecard, with_percent

__all__ = ["audit", "AuditResult", "FORMAT", "VERSION", "check_threshold", "binary_labels", "json_clean"]


# ---- the audit -------------------------------------------------------------------------------------------
# labels farther than this many label ranges outside the model's range are refused: their residuals' powers (up
# to the 8th moment's squares) would overflow float64
FAR_OUTSIDE = 1e15


@dataclasses.dataclass(frozen=True)
class AuditOptions:
    """The options of :func:`audit` that its steps and its classifier branch
    (:func:`mmc_core.auditing.audit_binary.audit_binary_model`) read, built once by ``audit`` and checked by
    ``_check_options`` (``threshold`` and ``n_buckets`` are checked by the classifier branch: only a binary model's
    audit reads them; ``min_cell_count`` None becomes ``min_group_count``)."""

    n_boot: int
    seed: int
    min_cell_count: int | None  # None as given to ``audit``: resolved by ``_check_options``
    min_group_count: int
    error_control: str
    findings_level: float
    threshold: float
    n_buckets: int
    variance_tolerance: float = VARIANCE_TOLERANCE
    label_scale: str = "linear"


def audit(
    model,
    table,
    y,
    base=None,
    delta: float = 0.1,
    gamma: float = 0.05,
    methods=iv.METHODS,
    n_boot: int = 200,
    seed: int = 0,
    bucket_method: str | None = None,
    min_cell_count: int | None = None,
    min_group_count: int = 30,
    error_control: str = "holm",
    findings_level: float = 0.05,
    variance_tolerance: float = VARIANCE_TOLERANCE,
    threshold: float = 0.5,
    n_buckets: int = 10,
    progress: Callable[[str], None] | None = None,
    label_scale: str = "linear",
) -> AuditResult:
    """Audit ``model`` on the rows of ``table`` with labels ``y`` (original units).

    ``base``: the base prediction in label units (required if the model was fitted on one; optional
    otherwise, then used only as the "before" prediction). ``methods``: interval methods to evaluate (those the
    model cannot compute are listed in ``params["methods_unavailable"]``). ``bucket_method``: the method of
    ``coverage_by_bucket`` (default ``calibrated`` if available, else the first computed). ``progress``: called
    with a short description as each stage starts (the bootstrap once per block of replicates): a long audit
    (millions of rows) says what it is doing. ``label_scale``: "log" for a label that is a natural logarithm
    (log wage): mean errors are then also stated as percent differences of the original values, in the findings
    (``percent``, ``percent_interval``) and the scorecard (``mean_error_percent``); "linear" (default) otherwise.
    """
    given = AuditOptions(
        n_boot, seed, min_cell_count, min_group_count, error_control, findings_level, threshold, n_buckets
    )
    opts = _check_options(
        model, delta, gamma, replace(given, variance_tolerance=variance_tolerance, label_scale=label_scale)
    )
    if getattr(model, "task", "regression") == "binary":
        from .audit_binary import audit_binary_model

        return audit_binary_model(model, table, y, base, opts)
    return _audit_regression(model, table, y, base, delta, gamma, methods, bucket_method, opts, progress)


def _audit_regression(model, table, y, base, delta, gamma, methods, bucket_method, opts, progress) -> AuditResult:
    """``audit`` of a regression model, its options checked: the tables from one pass, then the findings."""
    rows, before_u, base_kind, pairs, names, yu = _audit_rows(model, table, y, base)
    mu, moms, n, scale = rows.mu, rows.moms, yu.size, model.scale
    grid = model.params.mean_grid  # the model's own mean buckets (quantile grids too)
    say = progress or (lambda what: None)
    bg, cells_model, cells_base, lo_p, hi_p, cnt = group_table(
        pairs,
        names,
        scale,
        n,
        yu,
        mu,
        before_u,
        moms,
        model.moments,
        grid,
        opts.min_cell_count,
        opts.n_boot,
        opts.seed,
        gamma,
        say,
    )
    bmu = grid.index(mu)
    it = interval_tables(
        rows, model, methods, delta, gamma, yu, pairs, cnt, bg.index, grid, bmu, cells_model[0], bucket_method, say
    )
    bg["guarantee_share"] = guarantee_share(model, it.details, pairs, moms, bmu, grid.m, n, gamma, cnt)
    edges = scale.mean_from_unit(grid.edges())
    cal = calibration_cells_table(names, scale, edges, n, cells_model, cells_base)
    moment_cells = moment_cells_table(model, names, pairs, yu, moms, bmu, grid.m, n)
    overall = bg.loc[names[0]].copy() if names else pd.Series(dtype=float)
    for meth in it.coverage.columns:
        overall[f"coverage:{meth}"] = it.coverage.iloc[0][meth]
        overall[f"width:{meth}"] = it.width.iloc[0][meth]
    overall.name = "overall"
    params = _audit_params(model, it, base_kind, edges, yu, delta, gamma, opts)
    say("findings")
    try:
        found, n_tests, all_tests = _findings(model, pairs, names, mu, yu, moms, grid, it, delta, opts)
        disp = fnd.variance_disparities(names, cnt, bg["var_ratio"].to_numpy(), lo_p, hi_p, opts.min_group_count)
        status = fnd.status_of(n_tests, opts.min_group_count)
        params["n_tests"] = n_tests
        card = scorecard(all_tests, names, cnt, n_tests, opts.findings_level, opts.min_group_count)
        if opts.label_scale == "log":
            found = [fnd.with_percent(t) for t in found]
            card = with_percent(card)
    except Exception as e:  # noqa: BLE001 - reported as a failure, never as "no findings"
        found, disp, status, card = [], [], f"failed: {type(e).__name__}: {e}", None
    cbc = it.coverage_by_bucket
    return AuditResult(
        overall,
        bg,
        it.coverage,
        it.width,
        cal,
        moment_cells,
        cbc,
        params,
        found,
        disp,
        status,
        coverage_by_bucket_of={
            meth: pd.DataFrame(v, index=bg.index, columns=cbc.columns) for meth, v in it.bucket_cols.items()
        },
        scorecard=card,
    )


def _audit_rows(model, table, y, base) -> tuple:
    """(rows, before_u, base_kind, pairs, names, yu): the audited rows' predictions and membership, the "before"
    prediction and the labels on the unit scale (refused when absurdly far outside the model's range)."""
    scale = model.scale
    y = to_label_array(y, f"label '{y.name}'" if isinstance(getattr(y, "name", None), str) and y.name else "label")
    rows, before_u, base_kind = audit_rows(model, table, y.size, base, "label mean of the fitting rows")
    yu = (y - scale.lo) / scale.span  # not clipped: labels outside the range stay honest
    far = float(np.max(np.abs(yu)))
    if far > FAR_OUTSIDE:  # powers of such residuals overflow: a unit error, never an audit
        raise DataError(
            f"labels reach {float(y[np.argmax(np.abs(yu))]):g}, more than {FAR_OUTSIDE:.0e} label ranges outside the "
            f"model's label range [{scale.lo:g}, {scale.hi:g}]: check the label's unit"
        )
    return rows, before_u, base_kind, rows.memb.sums(), list(rows.memb.names), yu


def _audit_params(model, it, base_kind: str, edges, yu, delta, gamma, opts: AuditOptions) -> dict:
    """The audit's ``params`` record: its options and what the rows and the interval methods gave."""
    min_cell_count = opts.min_cell_count
    assert min_cell_count is not None  # resolved by _check_options
    scale = model.scale
    return {
        "delta": float(delta),
        "gamma": float(gamma),
        "n": int(yu.size),
        "label": {
            "lo": scale.lo,
            "hi": scale.hi,
            "source": scale.source,
            "name": (model.info or {}).get("label") if isinstance(model.info, dict) else None,
        },
        "methods": list(it.coverage.columns),
        "methods_unavailable": it.unavailable,
        "bucket_method": it.bucket_method,
        "base": base_kind,
        "n_boot": int(opts.n_boot),
        "seed": int(opts.seed),
        "bootstrap_level": 0.95,
        "interval_details": it.details,
        "mean_buckets": [float(e) for e in edges],
        "moments": list(model.moments),
        "odd_moments": model.params.odd_moments,
        "label_outside_range": int(np.sum((yu < -1e-9) | (yu > 1 + 1e-9))),
        # {method: [share of lower ends below, share of upper ends above]} the observed label range
        "intervals_past_range": it.past_range,
        "min_group_count": int(opts.min_group_count),
        "min_cell_count": int(min_cell_count),  # the worst-cell errors' smallest cell (as the classifier audit)
        "error_control": opts.error_control,
        "findings_level": float(opts.findings_level),
        "variance_tolerance": float(opts.variance_tolerance),
        "label_scale": opts.label_scale,
    }


def _fitted_kurtosis(model) -> float | None:
    """The pooled kurtosis of the residuals on the model's fitting rows (``info["residual_kurtosis"]``,
    :func:`mmc_core.auditing.audit_findings.kurtosis_parts`), or None (a model file without it, a model without a
    variance)."""
    info = model.info if isinstance(getattr(model, "info", None), dict) else {}
    k = info.get("residual_kurtosis")
    return float(k) if isinstance(k, (int, float)) and not isinstance(k, bool) and np.isfinite(k) and k > 0 else None


def _findings(model, pairs, names, mu, yu, moms, grid, it, delta, opts: AuditOptions) -> tuple:
    """(findings, number of tests, every test): :func:`mmc_core.auditing.audit_findings.group_findings` over the rows,
    with the coverage of the bucket method's intervals."""
    all_tests: list = []
    inside_f = it.bucket_inside if it.bucket_method is not None else None
    found, n_tests = group_findings(
        pairs,
        names,
        model.scale,
        mu,
        yu,
        moms.get(2) if 2 in model.moments else None,
        grid,
        inside_f,
        it.bucket_method,
        1 - delta,
        opts.min_group_count,
        opts.error_control,
        opts.findings_level,
        opts.variance_tolerance,
        collect=all_tests,
        kurtosis_floor=_fitted_kurtosis(model),
    )
    return found, n_tests, all_tests


def _check_options(model, delta, gamma, opts: AuditOptions) -> AuditOptions:
    """Check ``audit``'s options (an MMCError naming the first bad one); returns them with ``min_cell_count``
    resolved."""
    n_boot, min_group_count, min_cell_count = opts.n_boot, opts.min_group_count, opts.min_cell_count
    error_control, findings_level, variance_tolerance = opts.error_control, opts.findings_level, opts.variance_tolerance
    label_scale = opts.label_scale
    iv.check_prob("delta", delta)
    iv.check_prob("gamma", gamma)
    if not isinstance(n_boot, int) or n_boot < 0:
        raise MMCError(f"n_boot must be a non-negative integer, got {n_boot!r}")
    if isinstance(min_group_count, bool) or not isinstance(min_group_count, (int, np.integer)) or min_group_count < 2:
        raise MMCError(f"min_group_count must be an integer >= 2, got {min_group_count!r}")
    if min_cell_count is None:  # the worst-cell errors over the cells the findings would test, no smaller ones
        min_cell_count = int(min_group_count)
    elif isinstance(min_cell_count, bool) or not isinstance(min_cell_count, (int, np.integer)) or min_cell_count < 1:
        raise MMCError(f"min_cell_count must be an integer >= 1, got {min_cell_count!r}")
    if error_control not in fnd.ADJUSTMENTS:
        raise MMCError(f"error_control must be one of {', '.join(fnd.ADJUSTMENTS)}, got {error_control!r}")
    if not (isinstance(findings_level, (int, float)) and 0 < findings_level < 1):
        raise MMCError(f"findings_level must be in (0, 1), got {findings_level!r}")
    if (
        isinstance(variance_tolerance, bool)
        or not isinstance(variance_tolerance, (int, float))
        or not (0 <= variance_tolerance < 1)
    ):
        raise MMCError(f"variance_tolerance must be a number in [0, 1), got {variance_tolerance!r}")
    if label_scale not in fnd.LABEL_SCALES:
        raise MMCError(f"label_scale must be one of {', '.join(fnd.LABEL_SCALES)}, got {label_scale!r}")
    if label_scale != "linear" and getattr(model, "task", "regression") == "binary":
        raise MMCError("label_scale='log' applies to a regression label; a classifier's label is 0/1")
    return replace(opts, min_cell_count=min_cell_count)

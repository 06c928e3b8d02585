"""The audit: one object with per-group tables for a fitted model on labelled rows (in the spirit of
fairlearn's MetricFrame).

Why one module of ~600 lines (80 of them this docstring): the regression audit is one pass over shared state (the
(group, row) membership pairs, the bucket grids, one bootstrap) that fills every table and the findings together,
and :class:`AuditResult` is its return type; splitting it would pass that state between modules. The classifier
branch (:func:`mmc_core.binary.audit_binary_model`) lives next to the classifier metrics in ``binary.py``.

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

Findings (:mod:`mmc_core.findings`): ``findings`` is a list of dicts, one per model defect the rows show
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
``task = "binary"``; ``by_group`` is :func:`mmc_core.binary.classifier_audit`'s table (count, mass, base_rate,
mean_score, calib_error, calib_error_worst, ece, brier, log_loss and, at ``threshold``, selection_rate, tpr,
fpr, precision; ``_base`` = before; ``_lo`` / ``_hi`` = bootstrap 95% ends), ``classifier`` the whole
:class:`~mmc_core.binary.ClassifierAudit` (``classifier.disparities``: demographic parity / equalized odds /
four-fifths per column), ``calibration_cells`` the reliability cells (:func:`mmc_core.binary.reliability_cells`)
and ``coverage``, ``width``, ``moment_cells``, ``coverage_by_bucket`` are empty (no intervals for a 0/1 outcome).
Findings are the mean and calibration tests only (on the probability scale), never variance or coverage.
JSON adds ``"task": "binary"``, ``"threshold"`` and ``"classifier"``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd

from . import findings as fnd
from .scorecard import scorecard, with_percent
from . import intervals as iv
from .errors import DataError, MMCError, ModelFormatError
from .findings import VARIANCE_TOLERANCE
from .binary import binary_labels, check_threshold
from .moments import MomentKind
from .sums import MembershipSums
from .tables import to_label_array
from .audit_result import FORMAT, VERSION, AuditResult, json_clean
from .audit_findings import audit_rows, div, group_findings, residual_variance

__all__ = ["audit", "AuditResult", "FORMAT", "VERSION", "check_threshold", "binary_labels", "json_clean"]


# ---- helpers ---------------------------------------------------------------------------------------------
def _bootstrap_ratios(
    sums: MembershipSums,
    values: dict,
    n_boot: int,
    seed: int,
    level: float = 0.95,
    block_elems: int = 4_000_000,
    centered: tuple = (),
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Percentile bootstrap CI of (group mean of v) / (overall mean of v) for each array v in ``values``; for
    the names in ``centered``, of (group variance of v) / (overall variance of v) (:func:`residual_variance`).

    Rows are resampled with replacement (n draws per replicate; each replicate's row weights are one
    bincount); the group sums of a block of replicates are one :meth:`MembershipSums.replicate_group_sums`
    per array. Returns {name: (lo, hi)} arrays of shape (G,); the whole population is group 0.
    """
    n, G = sums.n, sums.G
    out: dict[str, list] = {k: [] for k in values}
    if n_boot <= 0 or n == 0:
        return {k: (np.full(G, np.nan), np.full(G, np.nan)) for k in values}
    rng = np.random.default_rng(seed)
    block = max(1, min(n_boot, block_elems // max(sums.replicate_width(), 1)))
    done = 0
    while done < n_boot:
        b = min(block, n_boot - done)
        idx = rng.integers(0, n, size=(b, n))
        w = np.bincount((idx + (np.arange(b) * n)[:, None]).ravel(), minlength=b * n).reshape(b, n).astype(float)
        cnt = sums.replicate_group_sums(w)
        with np.errstate(divide="ignore", invalid="ignore"):
            for k, v in values.items():
                if k in centered:
                    s1 = sums.replicate_group_sums(w * v[None, :])
                    mean = residual_variance(s1, sums.replicate_group_sums(w * (v * v)[None, :]), cnt)
                else:
                    mean = sums.replicate_group_sums(w * v[None, :]) / cnt
                out[k].append(mean / mean[:, :1])
        done += b
        if progress is not None and done < n_boot:
            progress(f"bootstrap: {done} of {n_boot} replicates")
    res = {}
    a = (1 - level) / 2
    for k, chunks in out.items():
        r = np.vstack(chunks)
        r = np.where(np.isfinite(r), r, np.nan)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lo = np.nanquantile(r, a, axis=0)
            hi = np.nanquantile(r, 1 - a, axis=0)
        res[k] = (lo, hi)
    return res


def _worst_cells(pairs: MembershipSums, pred_u, y_u, grid, n: int, span: float, min_count: int = 20):
    """Per-group worst |mean pred - mean label| over the mean buckets of ``pred_u`` (unweighted over cells of at
    least ``min_count`` rows, with that cell's standard error, and mass-weighted over all cells), and the long
    table pieces of the cells."""
    m = grid.m
    b = grid.index(pred_u)
    cnt = pairs.cell_table(b, m)
    sp = pairs.cell_table(b, m, pred_u)
    sy = pairs.cell_table(b, m, y_u)
    srr = pairs.cell_table(b, m, (y_u - pred_u) ** 2)
    err = div(sp - sy, cnt) * span  # signed, label units
    absw = np.abs(sp - sy) / max(n, 1) * span
    with np.errstate(invalid="ignore", divide="ignore"):
        # the standard error of a cell's mean residual (n - 1 in the variance: a 2-row cell is not exact)
        se = np.sqrt(np.maximum(srr - (sy - sp) ** 2 / cnt, 0.0) / ((cnt - 1) * cnt)) * span
        big_cells = cnt >= max(min_count, 1)
        big = big_cells.any(axis=1)
        key = np.where(big_cells, np.abs(np.nan_to_num(err)), -np.inf)
        at = np.argmax(key, axis=1)
        rows = np.arange(key.shape[0])
        worst = np.where(big, key[rows, at], np.nan)
        worst_se = np.where(big & (cnt[rows, at] >= 2), se[rows, at], np.nan)
        worst_w = np.where(cnt.sum(1) > 0, np.max(np.where(cnt > 0, absw, -np.inf), axis=1), np.nan)
    return worst, worst_se, worst_w, cnt, sp, sy, err


# ---- the audit -------------------------------------------------------------------------------------------
# labels farther than this many label ranges outside the model's range are refused: their residuals' powers (up
# to the 8th moment's squares) would overflow float64
FAR_OUTSIDE = 1e15


@dataclasses.dataclass(frozen=True)
class AuditOptions:
    """The options of :func:`audit` that its classifier branch (:func:`mmc_core.binary.audit_binary_model`)
    reads, built once by ``audit`` after checking them (``threshold`` and ``n_buckets`` are checked by that
    branch: only a binary model's audit reads them)."""

    n_boot: int
    seed: int
    min_cell_count: int
    min_group_count: int
    error_control: str
    findings_level: float
    threshold: float
    n_buckets: int


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
    if getattr(model, "task", "regression") == "binary":
        from .binary import audit_binary_model

        opts = AuditOptions(
            n_boot, seed, min_cell_count, min_group_count, error_control, findings_level, threshold, n_buckets
        )
        return audit_binary_model(model, table, y, base, opts)
    scale = model.scale
    span = scale.span
    y = to_label_array(y, f"label '{y.name}'" if isinstance(getattr(y, "name", None), str) and y.name else "label")
    n = y.size
    ctx, before_u, base_kind = audit_rows(model, table, n, base, "label mean of the fitting rows")
    memb, mu, moms = ctx.memb, ctx.mu, ctx.moms
    pairs = memb.sums()
    G, names = memb.n_groups, list(memb.names)
    yu = (y - scale.lo) / span  # not clipped: labels outside the range stay honest
    far = float(np.max(np.abs(yu)))
    if far > FAR_OUTSIDE:  # powers of such residuals overflow: a unit error, never an audit
        raise DataError(
            f"labels reach {float(y[np.argmax(np.abs(yu))]):g}, more than {FAR_OUTSIDE:.0e} label ranges outside the "
            f"model's label range [{scale.lo:g}, {scale.hi:g}]: check the label's unit"
        )
    grid = model.params.mean_grid  # the model's own mean buckets (quantile grids too)
    m = grid.m

    cnt = pairs.group_sums()
    bg = pd.DataFrame(index=pd.Index(names, name="group"))
    bg["count"] = cnt.astype(np.int64)
    bg["mass"] = cnt / n
    bg["mean_label"] = scale.mean_from_unit(div(pairs.group_sums(yu), cnt))
    bg["mean_pred"] = scale.mean_from_unit(div(pairs.group_sums(mu), cnt))
    bg["mean_pred_base"] = scale.mean_from_unit(div(pairs.group_sums(before_u), cnt))
    w, w_se, ww, c_m, sp_m, sy_m, err_m = _worst_cells(pairs, mu, yu, grid, n, span, min_cell_count)
    wb, wb_se, wwb, c_b, sp_b, sy_b, err_b = _worst_cells(pairs, before_u, yu, grid, n, span, min_cell_count)
    bg["calib_error_worst"], bg["calib_error_worst_weighted"] = w, ww
    bg["calib_error_worst_base"], bg["calib_error_worst_weighted_base"] = wb, wwb
    bg["calib_error_worst_se"], bg["calib_error_worst_se_base"] = w_se, wb_se
    resid = yu - mu
    emp = residual_variance(pairs.group_sums(resid), pairs.group_sums(resid**2), cnt)
    ybar = div(pairs.group_sums(yu), cnt)
    label_var = div(pairs.group_sums(yu**2), cnt) - ybar**2
    boot_vals = {"emp": resid}
    if 2 in model.moments:
        pv = div(pairs.group_sums(moms[2]), cnt)
        boot_vals["pred"] = moms[2]
    else:
        pv = np.full(G, np.nan)
    say = progress or (lambda what: None)
    say(f"bootstrap intervals ({n_boot} replicates)")
    ci = _bootstrap_ratios(pairs, boot_vals, n_boot, seed, centered=("emp",), progress=say)
    bg["pred_var"] = scale.moment_from_unit(pv, 2)
    bg["emp_var"] = scale.moment_from_unit(emp, 2)
    bg["label_var"] = scale.moment_from_unit(np.maximum(label_var, 0.0), 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        bg["var_ratio"] = pv / pv[0]
        bg["emp_var_ratio"] = emp / emp[0]
    lo_p, hi_p = ci.get("pred", (np.full(G, np.nan), np.full(G, np.nan)))
    bg["var_ratio_lo"], bg["var_ratio_hi"] = lo_p, hi_p
    # no interval around a ratio that is undefined (a 1-row group has no variance; its bootstrap read [0, 0])
    undefined = ~np.isfinite(bg["emp_var_ratio"].to_numpy(dtype=float))
    bg["emp_var_ratio_lo"], bg["emp_var_ratio_hi"] = (np.where(undefined, np.nan, v) for v in ci["emp"])
    bg["large_enough"] = (cnt / n) >= gamma

    # ---- intervals ----
    methods = tuple(methods)
    avail = set(iv.available_methods(model))
    unavailable, cov_cols, wid_cols, details, bucket_cols = {}, {}, {}, {}, {}
    # the shares of interval ends beyond an observed label range (unit scale [0, 1]): not clipped, since new labels
    # may leave that range, but an analyst reading "-2,849 hours" is told (a declared range clips the ends)
    past_range = {}
    bmu = grid.index(mu)
    for meth in methods:
        if meth not in iv.METHODS:
            raise MMCError(f"unknown interval method {meth!r}; expected one of {', '.join(iv.METHODS)}")
        if meth not in avail:
            unavailable[meth] = _unavailable_reason(model, meth)
            continue
        say(f"{meth} intervals")
        try:
            lo_u, hi_u, info = iv.unit_interval(ctx, meth, delta, gamma)
        except ModelFormatError:
            raise  # a damaged model file is an error, not a missing method
        except MMCError as e:
            unavailable[meth] = str(e)
            continue
        inside = ((yu >= lo_u) & (yu <= hi_u)).astype(float)
        cov_cols[meth] = div(pairs.group_sums(inside), cnt)
        width = (hi_u - lo_u) * span
        fin = np.isfinite(width)
        wsum = pairs.group_sums(np.where(fin, width, 0.0))
        nonfin = pairs.group_sums((~fin).astype(float))
        wid_cols[meth] = np.where(nonfin > 0, np.inf, div(wsum, cnt))
        details[meth] = json_clean(info)
        if scale.source != "declared" and n:
            past_range[meth] = [float(np.mean(lo_u < 0.0)), float(np.mean(hi_u > 1.0))]
        bucket_cols[meth] = div(pairs.cell_table(bmu, m, inside), c_m)
        if meth == bucket_method or (bucket_method is None and meth == "calibrated"):
            bucket_inside = inside
    coverage = pd.DataFrame(cov_cols, index=bg.index)
    width_t = pd.DataFrame(wid_cols, index=bg.index)
    if bucket_method is None:
        bucket_method = "calibrated" if "calibrated" in cov_cols else (next(iter(cov_cols)) if cov_cols else None)
        if bucket_method is not None and bucket_method != "calibrated":
            lo_u, hi_u, _ = iv.unit_interval(ctx, bucket_method, delta, gamma)
            bucket_inside = ((yu >= lo_u) & (yu <= hi_u)).astype(float)
    elif bucket_method not in cov_cols:
        raise MMCError(f"bucket_method {bucket_method!r} is not among the computed methods ({', '.join(cov_cols)})")
    cb = bucket_cols[bucket_method] if bucket_method is not None else np.full((G, m), np.nan)
    coverage_by_bucket = pd.DataFrame(cb, index=bg.index, columns=list(range(m)))
    coverage_by_bucket.columns.name = "mean_bucket"

    # guarantee share: rows in cells G(mu, m_a, i, j) of mass >= gamma, a = the guaranteed method's moment
    use = iv.usable_moments(model)
    pg = pairs.pg  # an int64 copy on every access: taken once for the cells below
    if use:
        a_g = details.get("guaranteed", {}).get("moment") if "guaranteed" in details else None
        a_g = a_g if a_g in use else use[0]
        bm = model.params.grid(a_g).index(moms[a_g])
        cell = bmu * m + bm
        _, key = np.unique(pg * (m * m) + cell[pairs.pr], return_inverse=True)  # non-empty cells only
        key = key.ravel()
        cc = np.bincount(key)
        in_ok = ((cc / n) >= gamma * (1 - 1e-12))[key].astype(float)
        bg["guarantee_share"] = div(np.bincount(pg, weights=in_ok, minlength=G), cnt)
    else:
        bg["guarantee_share"] = np.nan

    # ---- calibration cells (long) ----
    edges = scale.mean_from_unit(grid.edges())
    gi, bi = np.nonzero((c_m > 0) | (c_b > 0))
    cal = pd.DataFrame(
        {
            "group": np.asarray(names, dtype=object)[gi],
            "bucket": bi,
            "bucket_lo": edges[bi],
            "bucket_hi": edges[bi + 1],
            "count": c_m[gi, bi].astype(np.int64),
            "mass": c_m[gi, bi] / n,
            "mean_label": scale.mean_from_unit(div(sy_m, c_m)[gi, bi]),
            "mean_pred": scale.mean_from_unit(div(sp_m, c_m)[gi, bi]),
            "error": err_m[gi, bi],
            "count_base": c_b[gi, bi].astype(np.int64),
            "mass_base": c_b[gi, bi] / n,
            "mean_label_base": scale.mean_from_unit(div(sy_b, c_b)[gi, bi]),
            "mean_pred_base": scale.mean_from_unit(div(sp_b, c_b)[gi, bi]),
            "error_base": err_b[gi, bi],
        }
    )

    # ---- moment cells (long): mean-conditioned empirical central moments ----
    mom_frames = []
    for a in model.moments:
        bm = model.params.grid(a).index(moms[a])
        cell = bmu * m + bm
        # non-empty (group, mean bucket, moment bucket) cells only, numbered in sorted order
        ids, key = np.unique(pg * (m * m) + cell[pairs.pr], return_inverse=True)
        key = key.ravel()
        c = np.bincount(key, minlength=ids.size).astype(float)
        ybar_c = np.bincount(key, weights=yu[pairs.pr], minlength=ids.size) / c
        d = yu[pairs.pr] - ybar_c[key]
        lab = np.abs(d) ** a if (a % 2 == 1 and model.params.odd_moments == MomentKind.ABSOLUTE) else d**a
        emp_c = np.bincount(key, weights=lab, minlength=ids.size) / c
        pred_c = np.bincount(key, weights=moms[a][pairs.pr], minlength=ids.size) / c
        g_, rem = np.divmod(ids, m * m)
        i_, j_ = np.divmod(rem, m)
        pred_o = scale.moment_from_unit(pred_c, a)
        emp_o = scale.moment_from_unit(emp_c, a)
        mom_frames.append(
            pd.DataFrame(
                {
                    "group": np.asarray(names, dtype=object)[g_],
                    "moment": a,
                    "mean_bucket": i_,
                    "moment_bucket": j_,
                    "count": c.astype(np.int64),
                    "mass": c / n,
                    "predicted": pred_o,
                    "empirical": emp_o,
                    "error": pred_o - emp_o,
                }
            )
        )
    moment_cells = (
        pd.concat(mom_frames, ignore_index=True)
        if mom_frames
        else pd.DataFrame(
            columns=[
                "group",
                "moment",
                "mean_bucket",
                "moment_bucket",
                "count",
                "mass",
                "predicted",
                "empirical",
                "error",
            ]
        )
    )

    # ---- overall ----
    overall = bg.loc[names[0]].copy() if names else pd.Series(dtype=float)
    for meth in coverage.columns:
        overall[f"coverage:{meth}"] = coverage.iloc[0][meth]
        overall[f"width:{meth}"] = width_t.iloc[0][meth]
    overall.name = "overall"

    params = {
        "delta": float(delta),
        "gamma": float(gamma),
        "n": int(n),
        "label": {
            "lo": scale.lo,
            "hi": scale.hi,
            "source": scale.source,
            "name": (model.info or {}).get("label") if isinstance(model.info, dict) else None,
        },
        "methods": list(coverage.columns),
        "methods_unavailable": unavailable,
        "bucket_method": bucket_method,
        "base": base_kind,
        "n_boot": int(n_boot),
        "seed": int(seed),
        "bootstrap_level": 0.95,
        "interval_details": details,
        "mean_buckets": [float(e) for e in edges],
        "moments": list(model.moments),
        "odd_moments": model.params.odd_moments,
        "label_outside_range": int(np.sum((yu < -1e-9) | (yu > 1 + 1e-9))),
        # {method: [share of lower ends below, share of upper ends above]} the observed label range
        "intervals_past_range": past_range,
    }
    params.update(
        {
            "min_group_count": int(min_group_count),
            "min_cell_count": int(min_cell_count),  # the worst-cell errors' smallest cell (as the classifier audit)
            "error_control": error_control,
            "findings_level": float(findings_level),
            "variance_tolerance": float(variance_tolerance),
            "label_scale": label_scale,
        }
    )
    all_tests: list = []
    say("findings")
    try:
        inside_f = bucket_inside if bucket_method is not None else None
        found, n_tests = group_findings(
            pairs,
            names,
            scale,
            mu,
            yu,
            moms.get(2) if 2 in model.moments else None,
            grid,
            inside_f,
            bucket_method,
            1 - delta,
            min_group_count,
            error_control,
            findings_level,
            variance_tolerance,
            collect=all_tests,
        )
        disp = fnd.variance_disparities(names, cnt, bg["var_ratio"].to_numpy(), lo_p, hi_p, min_group_count)
        status = fnd.status_of(n_tests, min_group_count)
        params["n_tests"] = n_tests
        card = scorecard(all_tests, names, cnt, n_tests, findings_level, min_group_count)
        if label_scale == "log":
            found = [fnd.with_percent(t) for t in found]
            card = with_percent(card)
    except Exception as e:  # noqa: BLE001 - reported as a failure, never as "no findings"
        found, disp, status, card = [], [], f"failed: {type(e).__name__}: {e}", None
    return AuditResult(
        overall,
        bg,
        coverage,
        width_t,
        cal,
        moment_cells,
        coverage_by_bucket,
        params,
        found,
        disp,
        status,
        coverage_by_bucket_of={
            meth: pd.DataFrame(v, index=bg.index, columns=coverage_by_bucket.columns) for meth, v in bucket_cols.items()
        },
        scorecard=card,
    )


def _unavailable_reason(model, method) -> str:
    if method in ("guaranteed", "plugin", "multimoment"):
        if not model.moments:
            return "the model fits the mean only (refit with --moments 2 or more)"
        return "the model has no even or absolute moments"
    return (
        "the model was fitted without held-out calibration rows (calibration fraction 0): refit with "
        "--calibration-fraction 0.25"
    )

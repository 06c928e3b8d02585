"""The regression audit's tables (:func:`mmc_core.auditing.metrics.audit`), each from the shared state of one pass: the
(group, row) membership pairs, the model's mean buckets and the unit-scale labels and predictions.

Per group (:func:`group_table`, with the bootstrap of :func:`bootstrap_ratios` and the worst cells of
:func:`worst_cells`), per interval method (:func:`interval_tables`), the guarantee share
(:func:`guarantee_share`), and the long tables of calibration cells (:func:`calibration_cells_table`) and moment
cells (:func:`moment_cells_table`). Apart from ``audit`` so that it reads as its steps.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import intervals as iv
from ..common.errors import MMCError, ModelFormatError
from ..groups.sums import MembershipSums
from ..paper.moments import MomentKind
from .audit_findings import div, residual_variance
from .audit_result import json_clean

__all__ = [
    "IntervalTables",
    "bootstrap_ratios",
    "calibration_cells_table",
    "group_table",
    "guarantee_share",
    "interval_tables",
    "moment_cells_table",
    "worst_cells",
]

MOMENT_CELL_COLUMNS = [
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


def bootstrap_ratios(
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


def worst_cells(pairs: MembershipSums, pred_u, y_u, grid, n: int, span: float, min_count: int = 20):
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


def group_table(
    pairs,
    names: list,
    scale,
    n: int,
    yu,
    mu,
    before_u,
    moms: dict,
    moments: tuple,
    grid,
    min_cell_count: int,
    n_boot: int,
    seed: int,
    gamma: float,
    say,
) -> tuple:
    """The audit's ``by_group`` table (without ``guarantee_share``) and what the later tables reuse.

    Parameters
    ----------
    pairs : MembershipSums
        The audited rows' (group, row) pairs.
    names : list of str
        The group names, the whole population first.
    scale : LabelScale
        The model's label scale.
    n : int
        Rows audited.
    yu, mu, before_u : ndarray of shape (n,)
        Labels, the model's mean and the "before" prediction, unit scale.
    moms : dict
        The model's moment predictions {a: (n,)}, unit scale.
    moments : tuple of int
        The model's moments.
    grid : BucketGrid
        The model's mean buckets.
    min_cell_count, n_boot, seed : int
        Smallest cell of the worst-cell errors; bootstrap replicates and seed.
    gamma : float
        The smallest group mass the guarantees are stated for.
    say : callable(str)
        Progress.

    Returns
    -------
    (DataFrame, tuple, tuple, ndarray, ndarray, ndarray)
        ``by_group``; the model's and the base's cell pieces (count, prediction sums, label sums, error) of
        shape (G, m); the predicted variance ratio's bootstrap ends; the group counts.
    """
    span = scale.span
    cnt = pairs.group_sums()
    bg = pd.DataFrame(index=pd.Index(names, name="group"))
    bg["count"] = cnt.astype(np.int64)
    bg["mass"] = cnt / n
    bg["mean_label"] = scale.mean_from_unit(div(pairs.group_sums(yu), cnt))
    bg["mean_pred"] = scale.mean_from_unit(div(pairs.group_sums(mu), cnt))
    bg["mean_pred_base"] = scale.mean_from_unit(div(pairs.group_sums(before_u), cnt))
    w, w_se, ww, c_m, sp_m, sy_m, err_m = worst_cells(pairs, mu, yu, grid, n, span, min_cell_count)
    wb, wb_se, wwb, c_b, sp_b, sy_b, err_b = worst_cells(pairs, before_u, yu, grid, n, span, min_cell_count)
    bg["calib_error_worst"], bg["calib_error_worst_weighted"] = w, ww
    bg["calib_error_worst_base"], bg["calib_error_worst_weighted_base"] = wb, wwb
    bg["calib_error_worst_se"], bg["calib_error_worst_se_base"] = w_se, wb_se
    lo_p, hi_p = _variance_columns(bg, pairs, scale, yu, mu, moms, moments, cnt, n_boot, seed, say)
    bg["large_enough"] = (cnt / n) >= gamma
    return bg, (c_m, sp_m, sy_m, err_m), (c_b, sp_b, sy_b, err_b), lo_p, hi_p, cnt


def _variance_columns(bg, pairs, scale, yu, mu, moms: dict, moments: tuple, cnt, n_boot: int, seed: int, say) -> tuple:
    """Adds ``by_group``'s variance columns with their bootstrap intervals; returns the predicted variance
    ratio's bootstrap ends."""
    G = cnt.size
    resid = yu - mu
    emp = residual_variance(pairs.group_sums(resid), pairs.group_sums(resid**2), cnt)
    ybar = div(pairs.group_sums(yu), cnt)
    label_var = div(pairs.group_sums(yu**2), cnt) - ybar**2
    boot_vals = {"emp": resid}
    if 2 in moments:
        pv = div(pairs.group_sums(moms[2]), cnt)
        boot_vals["pred"] = moms[2]
    else:
        pv = np.full(G, np.nan)
    say(f"bootstrap intervals ({n_boot} replicates)")
    ci = bootstrap_ratios(pairs, boot_vals, n_boot, seed, centered=("emp",), progress=say)
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
    return lo_p, hi_p


@dataclass
class IntervalTables:
    """The audit's interval tables: ``coverage`` / ``width`` per group and method, ``coverage_by_bucket`` of
    ``bucket_method`` (and ``bucket_cols`` of every method), with the methods' ``details``, the ``unavailable``
    ones and why, the shares of ends ``past_range``, and ``bucket_inside`` (the rows ``bucket_method`` covers)."""

    coverage: pd.DataFrame
    width: pd.DataFrame
    coverage_by_bucket: pd.DataFrame
    bucket_cols: dict
    details: dict
    unavailable: dict
    past_range: dict
    bucket_method: str | None
    bucket_inside: np.ndarray | None


def interval_tables(
    ctx, model, methods, delta: float, gamma: float, yu, pairs, cnt, index, grid, bmu, c_m, bucket_method, say
) -> IntervalTables:
    """Every interval method's per-group coverage and width, and the per-bucket coverage.

    Parameters
    ----------
    ctx : object
        The audited rows' predictions (:func:`mmc_core.auditing.audit_findings.audit_rows`); ``model`` the audited model.
    methods : iterable of str
        Interval methods to evaluate (those the model cannot compute are listed as unavailable).
    delta, gamma : float
        Miscoverage; the smallest group mass of the guaranteed intervals.
    yu, pairs, cnt, index : ndarray, MembershipSums, ndarray, pandas.Index
        Unit-scale labels, the (group, row) pairs, group counts and the groups (the tables' index).
    grid, bmu, c_m : BucketGrid, ndarray, ndarray
        The model's mean buckets, each row's bucket and the (group, bucket) counts.
    bucket_method : str or None
        The method of ``coverage_by_bucket`` (None: calibrated when computed, else the first).
    say : callable(str)
        Progress.

    Returns
    -------
    IntervalTables
    """
    scale, n, m, span = model.scale, yu.size, grid.m, model.scale.span
    avail = set(iv.available_methods(model))
    unavailable, cov_cols, wid_cols, details, bucket_cols = {}, {}, {}, {}, {}
    # the shares of interval ends beyond an observed label range (unit scale [0, 1]): not clipped, since new labels
    # may leave that range, but an analyst reading "-2,849 hours" is told (a declared range clips the ends)
    past_range = {}
    bucket_inside = None
    for meth in tuple(methods):
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
        inside, cov_cols[meth], wid_cols[meth] = _coverage_and_width(pairs, yu, lo_u, hi_u, span, cnt)
        details[meth] = json_clean(info)
        if scale.source != "declared" and n:
            past_range[meth] = [float(np.mean(lo_u < 0.0)), float(np.mean(hi_u > 1.0))]
        bucket_cols[meth] = div(pairs.cell_table(bmu, m, inside), c_m)
        if meth == bucket_method or (bucket_method is None and meth == "calibrated"):
            bucket_inside = inside
    coverage = pd.DataFrame(cov_cols, index=index)
    width_t = pd.DataFrame(wid_cols, index=index)
    if bucket_method is None:
        bucket_method = "calibrated" if "calibrated" in cov_cols else (next(iter(cov_cols)) if cov_cols else None)
        if bucket_method is not None and bucket_method != "calibrated":
            lo_u, hi_u, _ = iv.unit_interval(ctx, bucket_method, delta, gamma)
            bucket_inside = ((yu >= lo_u) & (yu <= hi_u)).astype(float)
    elif bucket_method not in cov_cols:
        raise MMCError(f"bucket_method {bucket_method!r} is not among the computed methods ({', '.join(cov_cols)})")
    cb = bucket_cols[bucket_method] if bucket_method is not None else np.full((len(index), m), np.nan)
    coverage_by_bucket = pd.DataFrame(cb, index=index, columns=list(range(m)))
    coverage_by_bucket.columns.name = "mean_bucket"
    return IntervalTables(
        coverage,
        width_t,
        coverage_by_bucket,
        bucket_cols,
        details,
        unavailable,
        past_range,
        bucket_method,
        bucket_inside,
    )


def _coverage_and_width(pairs, yu, lo_u, hi_u, span: float, cnt) -> tuple:
    """(inside, coverage, width): which rows an interval method covers, and per group its coverage and mean width
    (inf when some interval is unbounded)."""
    inside = ((yu >= lo_u) & (yu <= hi_u)).astype(float)
    width = (hi_u - lo_u) * span
    fin = np.isfinite(width)
    wsum = pairs.group_sums(np.where(fin, width, 0.0))
    nonfin = pairs.group_sums((~fin).astype(float))
    return inside, div(pairs.group_sums(inside), cnt), np.where(nonfin > 0, np.inf, div(wsum, cnt))


def guarantee_share(model, details: dict, pairs, moms: dict, bmu, m: int, n: int, gamma: float, cnt):
    """Each group's share of rows in cells G(mu, m_a, i, j) of mass >= gamma, a = the guaranteed method's moment
    (NaN without usable moments).

    Returns
    -------
    ndarray of shape (G,) or float
    """
    use = iv.usable_moments(model)
    if not use:
        return np.nan
    pg = pairs.pg  # an int64 copy on every access: taken once
    a_g = details.get("guaranteed", {}).get("moment") if "guaranteed" in details else None
    a_g = a_g if a_g in use else use[0]
    bm = model.params.grid(a_g).index(moms[a_g])
    cell = bmu * m + bm
    _, key = np.unique(pg * (m * m) + cell[pairs.pr], return_inverse=True)  # non-empty cells only
    key = key.ravel()
    cc = np.bincount(key)
    in_ok = ((cc / n) >= gamma * (1 - 1e-12))[key].astype(float)
    return div(np.bincount(pg, weights=in_ok, minlength=len(cnt)), cnt)


def calibration_cells_table(names: list, scale, edges, n: int, cells_model: tuple, cells_base: tuple) -> pd.DataFrame:
    """The long table of calibration cells: one row per (group, mean bucket) non-empty for the model or the base.

    Parameters
    ----------
    names : list of str
        The group names.
    scale : LabelScale
        The model's label scale.
    edges : ndarray
        The mean buckets' edges, label units.
    n : int
        Rows audited.
    cells_model, cells_base : tuple
        (count, prediction sums, label sums, error) of shape (G, m), from :func:`group_table`.

    Returns
    -------
    DataFrame
    """
    c_m, sp_m, sy_m, err_m = cells_model
    c_b, sp_b, sy_b, err_b = cells_base
    gi, bi = np.nonzero((c_m > 0) | (c_b > 0))
    return pd.DataFrame(
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


def moment_cells_table(model, names: list, pairs, yu, moms: dict, bmu, m: int, n: int) -> pd.DataFrame:
    """The long table of mean-conditioned moment cells: per moment, the non-empty (group, mean bucket, moment
    bucket) cells with the predicted and the empirical central moment (around the cell's own label mean).

    Returns
    -------
    DataFrame
    """
    scale = model.scale
    pg = pairs.pg
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
    return pd.concat(mom_frames, ignore_index=True) if mom_frames else pd.DataFrame(columns=MOMENT_CELL_COLUMNS)


def _unavailable_reason(model, method) -> str:
    if method in ("guaranteed", "plugin", "multimoment"):
        if not model.moments:
            return "the model fits the mean only (refit with --moments 2 or more)"
        return "the model has no even or absolute moments"
    return (
        "the model was fitted without held-out calibration rows (calibration fraction 0): refit with "
        "--calibration-fraction 0.25"
    )

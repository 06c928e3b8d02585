"""``MomentMulticalibrator.fit`` on a Dask DataFrame: the checks, the partitions loaded on the workers, the
descent through the engine's seam, the cell corrections and the interval calibration fitted on client-side
samples, and the fitted model's record."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.errors import DataError, GroupDefinitionError, MMCError
from .dask_base import is_dask_collection, require, resolve_client
from .dask_parts import DaskFitStats, Engine, Parts
from .dask_quantiles import exact_quantiles

__all__ = ["CAL_SAMPLE_CAP", "fit_dask"]


CAL_SAMPLE_CAP = 1_000_000  # held-out rows brought to the client for interval calibration (a seeded sample)


def _as_column(ddf, v, name):
    """A column name, or a Dask Series of the same frame added as a column: (frame, column name)."""
    if v is None:
        return ddf, None
    if isinstance(v, str):
        if v not in ddf.columns:
            raise DataError(f"{name} column '{v}' is not in the data")
        return ddf, v
    if is_dask_collection(v):
        col = f"__mmc_{name.replace(' ', '_')}__"
        return ddf.assign(**{col: v}), col
    raise MMCError(f"with a Dask DataFrame, {name} must be a column name or a Dask Series of the same frame")


def fit_dask(
    est, X, y, groups=None, base_prediction=None, callback=None, label_name=None, base_name=None, stop=None, client=None
):
    """``MomentMulticalibrator.fit`` on a Dask DataFrame (``y`` / ``base_prediction``: column names or Dask
    Series of the same frame). Same model JSON, same descent; see the module docstring for what differs."""
    from ..fit.parameters import check_parameters
    from ..groups.group_set import GroupSet

    require()
    check_parameters(est)
    # the group-linear map ("auto", the default) is fitted on a client-side sample, as the numpy engine fits it;
    # the affine map only in memory
    if est.base_recalibration in ("affine", "group-logistic"):
        raise MMCError(
            f"base_recalibration={est.base_recalibration!r} is not supported by the Dask engine yet"
            " (use the numpy engine, or base_recalibration='none')"
        )
    if getattr(est, "interval_calibration", "auto") == "cross-fit":
        raise MMCError(
            "interval_calibration='cross-fit' is not supported by the Dask engine (it calibrates the intervals on "
            "the held-out rows only): use interval_calibration='auto' or 'held-out', or the numpy engine"
        )
    client = resolve_client(client)
    if not is_dask_collection(X):  # engine="dask" on an in-memory table: label / base may be arrays
        import dask.dataframe as dd
        import pandas as pd

        X = X.copy() if isinstance(X, pd.DataFrame) else pd.DataFrame(X)
        if y is not None and not isinstance(y, str):
            X["__mmc_label__"], y = np.asarray(y, dtype=float), "__mmc_label__"
        if base_prediction is not None and not isinstance(base_prediction, str):
            X["__mmc_base__"], base_prediction = np.asarray(base_prediction, dtype=float), "__mmc_base__"
        X = dd.from_pandas(X, npartitions=max(2, len(client.scheduler_info().get("workers", {})) or 2))
    X, ycol = _as_column(X, y, "label")
    if ycol is None:
        raise MMCError("y (the label) is required")
    X, bcol = _as_column(X, base_prediction, "base prediction")
    label_name = label_name or (ycol if not ycol.startswith("__mmc_") else "label")
    if (
        bcol is not None
        and base_name is None
        and isinstance(base_prediction, str)
        and not base_prediction.startswith("__mmc_")
    ):
        base_name = base_prediction
    gset = GroupSet.coerce(groups)
    missing = sorted(c for c in gset.columns() if c not in X.columns)
    if missing:
        raise GroupDefinitionError(f"group column(s) not in the data: {', '.join(missing)}")
    frac = float(est.calibration_fraction)
    seed = est.random_state
    parts = Parts(client, X.to_delayed(), ycol, bcol, gset, frac, seed, [])
    try:
        return _fit_on_parts(est, parts, gset, bcol, label_name, base_name, callback, stop, frac, seed)
    finally:
        parts.close()


@dataclass(frozen=True)
class _Rows:
    """What the partitions' first pass says: row counts (all, fitting, held out; per partition too), whether the
    held-out rows stop early, the label scale, the fitting rows' mean label (unit scale) and the base
    predictions clipped to the label range."""

    n: int
    nf: int
    n_cal: int
    n_fit_parts: list
    n_cal_parts: list
    early: Any
    scale: Any
    mean_fit: float
    base_clipped: Any


def _fit_on_parts(est, parts, gset, bcol, label_name, base_name, callback, stop, frac, seed):
    from ..auditing.audit_findings import kurtosis_of_parts
    from ..fit.fit_steps import FitRows, fit_info, mark_after_cells, search_buckets
    from ..fit.model import FittedModel
    from ..fit.plan import base_map_of, plan_fit

    t_load = time.perf_counter()
    rows = _load_rows(est, parts, label_name, base_name, frac)
    within = _group_linear_map(est, parts, gset, bcol, rows)
    moments = tuple(range(2, int(est.n_moments) + 1))
    G = len(gset)
    stats = DaskFitStats(parts, moments, est.odd_moments, rows.nf, _mean_quantiles(parts, bcol))
    plan = plan_fit(
        est,
        n_fit=rows.nf,
        n_held_out=rows.n_cal,
        n_groups=G,
        moments=moments,
        task="regression",  # the Dask engine fits regression labels only
        stats=stats,
        early=rows.early,
        base_map=base_map_of(est, bcol is not None),
    )
    load_seconds = time.perf_counter() - t_load

    def start(m):
        params, init_moments = plan.descent(m)
        eng = Engine(parts, params, init_moments, rows.nf, rows.n_cal)
        return params, init_moments, eng.fit, eng.holdout

    search = search_buckets(est, plan, start, callback, stop)
    score, m, params, init_moments, res, kept_round = search.runs[search.best]
    init_mean = _init_mean(bcol, base_name, rows.mean_fit, within)
    log = res.log[: res.round_ends[kept_round]] if res.round_ends else res.log
    model = FittedModel(
        params, rows.scale, gset, init_mean, init_moments, list(log), list(res.round_ends[: kept_round + 1])
    )
    last_run = search.best == len(search.runs) - 1
    if not last_run:
        parts.gather("start", params, init_moments)  # the chosen m's initial state, then its kept log
    replay = not (last_run and kept_round == len(res.round_ends) - 1)
    parts.gather("kept_predictions", model, len(log), replay)
    cells_check = moment_cells_check = None
    if plan.has("mean cells") and not (res.stopped or (stop is not None and stop())):
        cells_check, moment_cells_check = _cells(parts, model, gset, rows)
    achieved, floors = _achieved(est, parts, model, params, rows.nf, len(log), (cells_check, moment_cells_check))
    mark_after_cells(res.history, kept_round, model, achieved)
    cal_rows = _calibrate_intervals(parts, model, bcol, rows.n_cal, seed)
    fit_rows = FitRows(rows.n, rows.nf, rows.n_cal, stats.sizes, rows.base_clipped, label_name)
    model.info = {
        **fit_info(est, model, search, fit_rows, achieved, floors),
        "engine": {
            "name": "dask",
            "partitions": parts.n_partitions,
            "workers": len(parts.actors),
            "load_seconds": float(load_seconds),
            "calibration_split": "per partition (seeded by seed and partition index)",
            "interval_calibration_rows": cal_rows,
        },
    }
    if cells_check is not None:
        model.info["shrunken_cells"] = cells_check
    if moment_cells_check:
        model.info["moment_cells"] = moment_cells_check
    if (k := kurtosis_of_parts(parts.map_reduce("kurtosis_parts"))) is not None:
        model.info["residual_kurtosis"] = k  # summed over the partitions: their signatures are cells of their own
    if within is not None:  # the out-of-sample check of the group-linear map, kept or not
        model.info["base_recalibration"] = {"method": "group-linear", "ridge": within["ridge"], **within["validation"]}
    est._set_fitted(model)
    est._clear_row_state()  # rows stay on the workers (per-partition split)
    est.plan_ = plan
    return est


def _load_rows(est, parts, label_name, base_name, frac) -> _Rows:
    """The partitions' row counts and label range, the label scale set on every partition and the initial mean
    (the fitting rows' mean label) set on them."""
    from ..fit.fit_steps import check_held_out
    from ..paper.moments import LabelScale

    summ = parts.gather("summary")
    n = sum(s["n"] for s in summ)
    nf = sum(s["nf"] for s in summ)
    n_cal = sum(s["nc"] for s in summ)
    if n < 2:
        raise DataError(f"need at least 2 rows to fit, got {n}")
    early = check_held_out(est, frac, n, nf, n_cal)
    _refuse_a_classifier_label(est, summ, label_name)
    if est.label_range is None:
        scale = LabelScale.from_observed(min(s["ymin"] for s in summ), max(s["ymax"] for s in summ))
    else:
        scale = LabelScale.declared(est.label_range)
    bname = f"base prediction '{base_name}'" if base_name else "base prediction"
    sc = parts.map_reduce("set_scale", scale, label_name, bname)
    mean_fit = sc["sum_yu_f"] / nf
    parts.gather("set_initial_mean", mean_fit)
    n_fit_parts, n_cal_parts = [s["nf"] for s in summ], [s["nc"] for s in summ]
    return _Rows(n, nf, n_cal, n_fit_parts, n_cal_parts, early, scale, mean_fit, sc["base_clipped"])


def _refuse_a_classifier_label(est, summ, label_name) -> None:
    """The Dask engine fits regressions only: a classifier asked for, or a label of two values under
    ``task="auto"`` (which the default engine fits as a classifier: the two engines would hand back models of
    different kinds for one table), is refused with what to do instead."""
    if est.task == "binary":
        raise DataError("classifier fits run in memory only (engine 'numpy'); the Dask engine fits regressions")
    values = {v for s in summ if s["n"] for v in (s["ymin"], s["ymax"])}
    if est.task == "auto" and len(values) == 2 and all(s["two_valued"] for s in summ):
        lo, hi = sorted(values)
        raise DataError(
            f"label '{label_name}' has two values ({lo:g} and {hi:g}): in memory it is fitted as a classifier, "
            "and the Dask engine fits regressions only; fit it in memory (drop --engine dask), or set "
            "task='regression' (--task regression) to fit it as a number on Dask"
        )


def _group_linear_map(est, parts, gset, bcol, rows: _Rows):
    """The group-linear map of the base ("auto", "group-linear"), fitted on the client on the numpy engine's own
    samples and applied on the workers when its out-of-sample check keeps it; None without a base or a map."""
    if bcol is None or est.base_recalibration not in ("auto", "group-linear"):
        return None
    from ..fit.recalibrate import fit_group_linear

    # the numpy engine's own samples (recalibrate.capped, seeds 0 and 7), drawn here over the rows in
    # partition order: on the same fitting rows the same map
    sums_s, y_s, b_s = _client_sample(parts, gset, "fit", rows.n_fit_parts, 0, "start")
    held = None
    if rows.n_cal:
        sums_h, y_h, b_h = _client_sample(parts, gset, "held", rows.n_cal_parts, 7, "start")
        held = (y_h, b_h, sums_h)
    within = fit_group_linear(y_s, b_s, sums_s, held)
    if within["validation"]["kept"]:
        parts.gather("apply_map", within)
    return within


def _mean_quantiles(parts, bcol):
    """The inner edges of m quantile buckets of the initial mean, exact over the partitions."""
    from ..paper.buckets import inner_edges

    def mean_quantiles(m):
        if bcol is None:
            return ()  # a constant initial mean: no quantile edges (as numpy's quantile_edges)
        qs = exact_quantiles(
            lambda: parts.gather("mu0_sketch"),
            lambda lo, hi: parts.gather("mu0_bracket", lo, hi),
            np.arange(1, m) / m,
            nonempty_range=True,
        )
        return () if qs is None else inner_edges(qs, 0.0, 1.0)

    return mean_quantiles


def _init_mean(bcol, base_name, mean_fit, within) -> dict:
    if bcol is None:
        return {"kind": "constant", "value": float(mean_fit)}
    if within is not None and within["validation"]["kept"]:
        return {"kind": "base-group-linear", "column": base_name, **within}
    return {"kind": "base", "column": base_name}


def _cells(parts, model, gset, rows: _Rows):
    """The shrunken cell corrections of the mean, then the moments' (:func:`_moment_cells`): their checks."""
    from ..fit.cells import gated_cells

    # as the numpy engine: fitted on a sample of the fitting rows (seed 11), the penalty and weight chosen on
    # one of the held-out rows (seed 13) with the kept model's predictions there
    parts.gather("held_predictions", model)
    sums_s, y_s, mu_s = _client_sample(parts, gset, "fit", rows.n_fit_parts, 11, "kept")
    sums_h, y_h, mu_h = _client_sample(parts, gset, "held", rows.n_cal_parts, 13, "held")
    cells, cells_check = gated_cells(y_s, mu_s, sums_s, (y_h, mu_h, sums_h))
    if cells is not None:
        model.cells = cells
        parts.gather("apply_cells", cells)
    return cells_check, _moment_cells(parts, model, gset, rows.n_fit_parts, rows.n_cal_parts)


def _achieved(est, parts, model, params, nf, n_log, checks):
    """The achieved (alpha, betas) of the model on the workers' rows and the thresholds' floors; the cell steps are
    dropped again when :func:`mmc_core.fit.fit_steps.cells_keep_given` says so."""
    import dataclasses

    from ..fit.fit_steps import cells_keep_given, state_achieved

    plain = dataclasses.replace(params, z=0.0, z_group=0.0, min_count=0)
    K = len(plain.moments)

    def up(v):
        return float(min(max(v * (1 + 1e-9) + 1e-15, 1e-7), 0.999))

    def achieved_now() -> dict:
        sums = parts.map_reduce("achieved_sums", plain)
        worst = max(float(np.abs(s).max(initial=0.0)) for s in sums[: 1 + K])
        return {
            "alpha": up(worst / max(nf, 1)),
            "betas": {
                a: up(float(np.abs(sums[1 + K + i]).max(initial=0.0)) / max(nf, 1)) for i, a in enumerate(plain.moments)
            },
        }

    achieved = achieved_now()
    if not cells_keep_given(est, model, params, achieved, *checks):
        parts.gather("kept_predictions", model, n_log, True)  # the kept log alone, without the cell steps
        achieved = achieved_now()
    _, floors = state_achieved(est, model, params, achieved)
    return achieved, floors


def _calibrate_intervals(parts, model, bcol, n_cal, seed) -> int:
    """The interval calibration on a seeded sample of at most CAL_SAMPLE_CAP held-out rows brought to the client
    (set in ``model.extras``): the rows used."""
    if not n_cal:
        return 0
    from .. import intervals

    rate = min(1.0, CAL_SAMPLE_CAP / n_cal)
    pieces = [p for p in parts.gather("calibration_sample", rate, seed) if p is not None]
    cols = pieces[0][0].keys()
    table = {c: np.concatenate([p[0][c] for p in pieces]) for c in cols}
    yu_c = np.concatenate([p[1] for p in pieces])
    base_c = None if bcol is None else np.concatenate([p[2] for p in pieces])
    model.extras["intervals"] = intervals.calibrate(model, table, yu_c, base_c)
    return int(yu_c.size)


def _moment_cells(parts, model, gset, n_fit_parts, n_cal_parts) -> dict | None:
    """The moments' cell corrections as the numpy engine fits them (``MomentMulticalibrator._moment_cells``): on a
    sample of the fitting rows (seed 17) around the final mean, judged on one of the held-out rows (seed 19) with
    the model's final predictions there; applied on the workers. Returns the checks per moment (or None)."""
    from ..fit.cells import gated_moment_cells
    from ..paper.moments import pseudo_label

    p = model.params
    if not p.moments or p.moment_step != "ratio":
        return None
    parts.gather("held_predictions", model)  # with the mean's cells, if kept
    checks = {}
    # the same seeded rows for every moment: the label and final mean once, each moment's prediction per moment
    sums_s, y_s, mu_s = _client_sample(parts, gset, "fit", n_fit_parts, 17, "kept")
    sums_h, y_h, mu_h = _client_sample(parts, gset, "held", n_cal_parts, 19, "held")
    for a in p.moments:
        _, _, v_s = _client_sample(parts, gset, "fit", n_fit_parts, 17, ("kept", a))
        _, _, v_h = _client_sample(parts, gset, "held", n_cal_parts, 19, ("held", a))
        s_s, s_h = pseudo_label(a, y_s - mu_s, p.odd_moments), pseudo_label(a, y_h - mu_h, p.odd_moments)
        cell, checks[str(a)] = gated_moment_cells(s_s, v_s, sums_s, (s_h, v_h, sums_h, mu_h), mu=mu_s)
        if cell is not None:
            model.moment_cells = {**(model.moment_cells or {}), a: cell}
            parts.gather("apply_moment_cells", a, cell, p.projection(a))
    return checks


def _client_sample(parts, gset, which, n_per_part, seed, what):
    """A sample of the fitting (``which`` "fit") or held-out rows brought to the client, as
    :func:`mmc_core.fit.recalibrate.capped` draws it from the rows in partition order (all of them up to
    ``CV_MAX_ROWS``; above, the rows ``rng(seed + 2).choice(n, CV_MAX_ROWS)`` in order): (its MembershipSums,
    the label, the prediction ``what``; unit scale). A few MB at most: the map and the cells have |G| + 7 and
    |G| x 10 coefficients, fitted as the numpy engine fits them."""
    from ..fit.recalibrate import CV_MAX_ROWS
    from ..groups.group_set import Membership
    from ..groups.sums import MembershipSums

    total = int(sum(n_per_part))
    if total > CV_MAX_ROWS:
        idx = np.sort(np.random.default_rng(seed + 2).choice(total, size=CV_MAX_ROWS, replace=False))
    else:
        idx = np.arange(total)
    offsets = np.concatenate([[0], np.cumsum(n_per_part)]).astype(np.int64)
    picks = {}
    for i in range(len(n_per_part)):
        lo, hi = np.searchsorted(idx, [offsets[i], offsets[i + 1]])
        if hi > lo:
            picks[i] = idx[lo:hi] - offsets[i]
    got = parts.gather("sample_rows", which, picks, what)
    counts = np.concatenate([g[0] for g in got]).astype(np.int64)
    groups = np.concatenate([g[1] for g in got]).astype(np.int64)
    y, x = np.concatenate([g[2] for g in got]), np.concatenate([g[3] for g in got])
    n = int(counts.size)
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    order = np.lexsort((row, groups))  # group-major, rows increasing within a group (Membership's layout)
    names = list(gset.names)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(groups, minlength=len(names)))]).astype(np.int64)
    rows = row[order].astype(np.int32 if n < 2**31 else np.int64)
    return MembershipSums(Membership(n, names, indptr, rows)), y, x

"""The numpy engine's fit: the descent over the fitting rows in memory, then the steps after it.

:func:`fit_in_memory` runs, in order: the fitting rows (:mod:`mmc_core.estimator.fit_rows`), the search over bucket counts
with early stopping on the held-out rows (:func:`mmc_core.fit.fit_steps.search_buckets`), the kept model, the
shrunken cell corrections of the mean (:func:`shrunken_cells`) and of the moments (:func:`moment_cells`), the
thresholds achieved, the interval calibration and the fit record. The Dask engine runs the same steps by
reductions (:mod:`mmc_core.engines.dask_engine`). Apart from the estimator so that the front end (parameters,
predict, save and load) stays readable.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..auditing.audit_findings import kurtosis_of_parts, kurtosis_parts
from ..auditing.binary import TASK_BINARY
from ..common.tables import take_rows
from ..fit.cells import apply_cells, apply_moment_cells, gated_cells, gated_moment_cells
from ..fit.fit_steps import (
    FitRows,
    FitStats,
    achieved_thresholds,
    cells_keep_given,
    fit_info,
    mark_after_cells,
    search_buckets,
    state_achieved,
)
from ..fit.logistic_map import KEEP_Z, mapped_base
from ..fit.model import FittedModel, variance_start
from ..fit.plan import FitPlan, base_map_of, plan_fit
from ..fit.recalibrate import affine_base, capped
from ..paper.cell_state import CellState
from ..paper.moments import pseudo_label
from .crossfit import CROSS_FIT_FOLDS, check_interval_calibration, out_of_fold_predictions
from .fit_rows import FittingRows, fitting_rows

__all__ = ["InMemoryFit", "fit_in_memory", "moment_cells", "plan_of_rows", "shrunken_cells"]


@dataclass
class InMemoryFit:
    """A finished in-memory fit: the model and the row-level state the estimator keeps (not saved with it)."""

    model: FittedModel
    plan: FitPlan
    fit_index: np.ndarray
    calibration_index: np.ndarray
    fit_mean_unit: np.ndarray
    fit_moments_unit: dict
    oof_predictions_unit: dict | None


def fit_in_memory(
    est, X, y, groups, base_prediction, callback, label_name, base_name, stop, calibrate_intervals: bool = True
) -> InMemoryFit:
    """The numpy engine's fit (see ``MomentMulticalibrator.fit``).

    Parameters
    ----------
    est : MomentMulticalibrator
        Its parameters say what to fit; it is not changed here.
    X, y, groups, base_prediction, callback, label_name, base_name, stop
        As ``MomentMulticalibrator.fit`` passes them on.
    calibrate_intervals : bool
        False for the folds of a cross-fit, whose models need no interval record of their own.

    Returns
    -------
    InMemoryFit
    """
    d = fitting_rows(est, X, y, groups, base_prediction, label_name, base_name)
    if est.base_recalibration == "auto" and _logistic_kept(d) and not d.n_cal:
        # no held-out rows to check the whole fit with the map on: the default does not use it
        d = _dropped(d, without_logistic(d), {"no_held_out": True})
    run = _run_stages(est, d, plan_of_rows(est, d, calibrate_intervals), callback, stop, base_name)
    if est.base_recalibration == "auto" and _logistic_kept(d) and not _stopped(run.res, stop):
        # the per-group logistic map is kept only when the whole fit with it predicts the held-out rows better
        # than the whole fit without it (by KEEP_Z standard errors): the map takes up part of what the descent and the cells would
        # correct, and they then pass their held-out gates less often (benchmarks/README.md, "The per-group
        # logistic map, built"); the second fit is not shown live
        d_without = without_logistic(d)
        other = _run_stages(est, d_without, plan_of_rows(est, d_without, calibrate_intervals), None, stop, base_name)
        d, run = _choose_logistic(d, run, d_without, other)
    model, res = run.model, run.res
    oof = None
    if run.plan.has("intervals"):
        oof = _calibrate_intervals(est, d, model, res, stop)
    rows = FitRows(d.n, d.fit_idx.size, d.n_cal, d.memb.sizes, d.base_clipped, label_name)
    model.info = {"task": d.task, **fit_info(est, model, run.search, rows, run.achieved, run.floors)}
    _record_checks(d, model, run.memb_h, run.cells_check, run.moment_cells_check)
    if 2 in run.fit_moms and (
        k := kurtosis_of_parts(kurtosis_parts(d.memb.sums(), d.yu_f - run.fit_mu, run.fit_moms[2]))
    ):
        model.info["residual_kurtosis"] = k  # the audit's variance tests allow for at least this tail
    if d.task == TASK_BINARY:  # probabilities never exactly 0 or 1 (see mmc_core.fit.model.binary_clip)
        assert d.binary_info is not None
        d.binary_info["floor"] = 0.5 / (d.fit_idx.size + 1)
    return InMemoryFit(model, run.plan, d.fit_idx, d.cal_idx, run.fit_mu, run.fit_moms, oof)


@dataclass
class _StagesRun:
    """One pass of the stages over prepared fitting rows: the kept model and what the fit record needs."""

    plan: FitPlan
    search: Any
    res: Any
    model: FittedModel
    memb_h: Any
    fit_mu: np.ndarray
    fit_moms: dict
    achieved: dict
    floors: Any
    cells_check: dict | None
    moment_cells_check: dict | None


def _stopped(res, stop) -> bool:
    return bool(res.stopped or (stop is not None and stop()))


def _run_stages(est, d: FittingRows, plan: FitPlan, callback, stop, base_name) -> _StagesRun:
    """The search over bucket counts with early stopping, the kept model, the cell corrections of the mean and
    moments and the thresholds achieved, on the fitting rows ``d``."""
    memb_h, mu_h = _held_out_start(d)

    def start(m):
        params, init_moments = plan.descent(m)
        state = CellState(params, d.memb, d.yu_f, d.mu0, _start_moments(d, params, init_moments, d.fit_idx))
        holdout = None
        if d.n_cal:
            assert memb_h is not None and mu_h is not None  # both exist whenever n_cal > 0
            moms_h = _start_moments(d, params, init_moments, d.cal_idx)
            holdout = CellState(params, memb_h, d.yu[d.cal_idx], mu_h, moms_h)
        return params, init_moments, state, holdout

    search = search_buckets(est, plan, start, callback, stop)
    _, _, params, init_moments, res, kept_round = search.runs[search.best]
    d.resid = None  # the descents are done: free it
    model = _kept_model(d, params, init_moments, res, kept_round, base_name)
    fit_mu, fit_moms = _kept_predictions(d, model, res, kept_round)
    cells_check = moment_cells_check = None
    before_cells = (fit_mu, fit_moms)
    if plan.has("mean cells") and not _stopped(res, stop):
        assert memb_h is not None
        y_h = d.yu[d.cal_idx]
        var_h = None if d.bvar_u is None else d.bvar_u[d.cal_idx]
        fit_mu, cells_check = shrunken_cells(
            model, d.memb, d.yu_f, fit_mu, memb_h, y_h, d.base_u, d.cal_idx, var_h=var_h
        )
        fit_moms, moment_cells_check = moment_cells(
            model, d.memb, d.yu_f, fit_mu, fit_moms, memb_h, y_h, d.base_u, d.cal_idx, var_h=var_h
        )
    achieved = achieved_thresholds(params, d.memb, d.yu_f, fit_mu, fit_moms)
    if not cells_keep_given(est, model, params, achieved, cells_check, moment_cells_check):
        fit_mu, fit_moms = before_cells
        achieved = achieved_thresholds(params, d.memb, d.yu_f, fit_mu, fit_moms)
    _, floors = state_achieved(est, model, params, achieved)
    mark_after_cells(res.history, kept_round, model, achieved)
    return _StagesRun(
        plan, search, res, model, memb_h, fit_mu, fit_moms, achieved, floors, cells_check, moment_cells_check
    )


def _logistic_kept(d: FittingRows) -> bool:
    return d.logistic is not None and bool(d.logistic["validation"]["kept"])


def _dropped(d: FittingRows, d_without: FittingRows, why: dict) -> FittingRows:
    """``d_without`` with the map's record saying it was fitted, and why it is not used (``why`` in its check)."""
    assert d.logistic is not None
    record = dict(d.logistic)
    record["validation"] = {**d.logistic["validation"], "kept": False, **why}
    d_without.logistic = record
    return d_without


def without_logistic(d: FittingRows) -> FittingRows:
    """The fitting rows ``d`` as the group-linear map alone prepared them (the per-group logistic map undone)."""
    assert d.within is not None and d.mu0_before_logistic is not None
    within = {k: v for k, v in d.within.items() if k != "logistic"}
    mu0 = d.mu0_before_logistic
    return dataclasses.replace(d, within=within, mu0=mu0, resid=d.yu_f - mu0, mu0_before_logistic=None)


def _held_out_log_loss(d: FittingRows, model: FittedModel, memb_h) -> np.ndarray:
    """Each held-out row's log loss under the final model (probabilities kept off 0 and 1 as predict keeps them)."""
    var_h = None if d.bvar_u is None else d.bvar_u[d.cal_idx]
    base_h = None if d.base_u is None else d.base_u[d.cal_idx]
    mu, moms = model.initial(memb_h.n, base_h, memb_h, var_h)
    mu, _ = model.replay(memb_h, mu, moms)
    floor = 0.5 / (d.fit_idx.size + 1)
    p = np.clip(mu, floor, 1.0 - floor)
    y = d.yu[d.cal_idx]
    return -(y * np.log(p) + (1.0 - y) * np.log(1.0 - p))


def _choose_logistic(d: FittingRows, run: _StagesRun, d_without: FittingRows, other: _StagesRun) -> tuple:
    """(rows, run) of the fit with the logistic map when its held-out log loss is lower by at least ``KEEP_Z``
    standard errors of the rows' paired differences, else of the fit without it; the map's record says which
    and by how much."""
    with_map = _held_out_log_loss(d, run.model, run.memb_h)
    without = _held_out_log_loss(d_without, other.model, other.memb_h)
    diff = with_map - without
    se = float(np.std(diff, ddof=1) / np.sqrt(diff.size)) if diff.size > 1 else 0.0
    final = {"with": float(np.mean(with_map)), "without": float(np.mean(without)), "se": se}
    assert d.logistic is not None
    if final["without"] - final["with"] >= KEEP_Z * se and final["with"] < final["without"]:
        d.logistic["validation"]["final"] = {**final, "kept": True}
        return d, run
    return _dropped(d, d_without, {"final": {**final, "kept": False}}), other


def plan_of_rows(est, d: FittingRows, calibrate_intervals: bool = True) -> FitPlan:
    """The plan of a fit on the fitting rows ``d`` (the fit's and the threshold preview's one source)."""
    return plan_fit(
        est,
        n_fit=d.nf,
        n_held_out=d.n_cal,
        n_groups=d.G,
        moments=d.moments,
        task=d.task,
        stats=FitStats.from_arrays(d.resid, d.mu0, d.memb, d.moments, est.odd_moments),
        early=d.early,
        base_map=base_map_of(est, d.base_u is not None),
        intervals=calibrate_intervals,
    )


def variance_factor(d: FittingRows, init_moments: dict) -> float | None:
    """The factor on the base variance (``variance_column``) that gives the fitting rows the constant start's
    level (the mean squared residual), or None without a base variance."""
    if d.bvar_u is None or 2 not in init_moments:
        return None
    fit = d.bvar_u[d.fit_idx] if d.n_cal else d.bvar_u
    return float(init_moments[2]) / float(np.mean(fit**d.bvar_power))


def _start_moments(d: FittingRows, params, init_moments: dict, rows: np.ndarray) -> dict:
    """The moments' starting values on ``rows`` (fitting or held-out rows): the constants, and for the variance
    the base variance times its factor when the fit has one."""
    n = rows.size if d.n_cal else d.nf
    moms = {a: np.full(n, v) for a, v in init_moments.items()}
    factor = variance_factor(d, init_moments)
    if factor is not None:
        assert d.bvar_u is not None
        v = d.bvar_u[rows] if d.n_cal else d.bvar_u
        moms[2] = variance_start(v, factor, params.projection(2), n, d.bvar_power)
    return moms


def _held_out_start(d: FittingRows) -> tuple:
    """(memb_h, mu_h): the held-out rows' membership and initial mean (None, None without held-out rows)."""
    memb_h = d.memb_h
    if memb_h is None and d.n_cal:
        memb_h = d.gset.evaluate(take_rows(d.X, d.cal_idx), d.n_cal)
    mu_h = None
    if d.n_cal:
        mu_h = d.base_u[d.cal_idx] if d.base_u is not None else np.full(d.n_cal, float(np.mean(d.yu_f)))
        if d.affine is not None:
            mu_h = affine_base(mu_h, *d.affine)
        elif d.within is not None:
            assert memb_h is not None
            mu_h = mapped_base(mu_h, memb_h.sums(), d.within)
    return memb_h, mu_h


def _kept_model(d: FittingRows, params, init_moments, res, kept_round: int, base_name) -> FittedModel:
    """The model of the kept round: its initial mean (as the base was mapped) and the updates up to that round."""
    if d.base_u is None:
        init_mean = {"kind": "constant", "value": float(np.mean(d.yu_f))}
    elif d.affine is not None:
        init_mean = {"kind": "base-affine", "column": base_name, "intercept": d.affine[0], "slope": d.affine[1]}
    elif d.within is not None and (d.within["validation"]["kept"] or d.within.get("logistic")):
        init_mean = {"kind": "base-group-linear", "column": base_name, **d.within}
    else:
        init_mean = {"kind": "base", "column": base_name}
    log = res.log[: res.round_ends[kept_round]] if res.round_ends else res.log
    factor = variance_factor(d, init_moments)
    init_variance = None
    if factor is not None:
        init_variance = {"column": d.variance_name, "factor": factor, "power": d.bvar_power}
    return FittedModel(
        params,
        d.scale,
        d.gset,
        init_mean,
        init_moments,
        list(log),
        list(res.round_ends[: kept_round + 1]),
        task=d.task,
        binary=d.binary_info,
        init_variance=init_variance,
    )


def _kept_predictions(d: FittingRows, model: FittedModel, res, kept_round: int) -> tuple:
    """The fitting rows' mean and moment predictions of the kept round: the descent's own arrays when it kept
    the last round or a snapshot of it, else the model's predictions."""
    snap = res.extra.get("best")
    if kept_round == len(res.round_ends) - 1:
        st = res.state
        assert isinstance(st, CellState)  # the in-memory engine (the Dask engine has its own fit path)
        return st.mu.copy(), {a: v.copy() for a, v in st.mom.items()}
    if snap is not None and snap["index"] == kept_round:
        return snap["mu"], snap["mom"]
    base_f = None if d.base_u is None else (d.base_u[d.fit_idx] if d.n_cal else d.base_u)  # as given: predict maps it
    return model.predict_unit(d.Xf, base_f, d.fit_idx.size)


def _calibrate_intervals(est, d: FittingRows, model: FittedModel, res, stop) -> dict | None:
    """Sets ``model.extras["intervals"]``; returns every row's out-of-fold predictions when cross-fitted."""
    from .. import intervals

    oof = None
    interval_rows = check_interval_calibration(est.interval_calibration, n=d.n)
    if interval_rows == "cross-fit" and not (res.stopped or (stop is not None and stop())):
        # Every row, with the predictions of a model fitted without its fold (mmc_core.estimator.crossfit).
        oof = out_of_fold_predictions(est, d.X, d.yu, d.base_u, d.gset, d.task, stop=stop)
        if stop is not None and stop():  # stopped during the fold fits: their models are partial
            oof = None
    if oof is not None:
        model.extras["intervals"] = intervals.calibrate(
            model,
            d.X,
            d.yu,
            d.base_u,
            predictions=(oof["mean"], oof["moments"]),
            rows="cross-fit",
            folds=CROSS_FIT_FOLDS,
            # the configuration measured for cross-fitting (mmc_core.intervals, 1'.-3'.)
            options={"combine": "sum", "margin": intervals.CC_MARGIN_CROSS_FIT},
        )
    else:
        # Only the held-out rows (never the rows the moments were fitted on); also a stopped fit's
        # (the fold models would be as partial as it is, and the user is waiting).
        model.extras["intervals"] = intervals.calibrate(
            model, take_rows(d.X, d.cal_idx), d.yu[d.cal_idx], None if d.base_u is None else d.base_u[d.cal_idx]
        )
    return oof


def _record_checks(d: FittingRows, model: FittedModel, memb_h, cells_check, moment_cells_check) -> None:
    """The held-out checks of the steps after the descent, in ``model.info``."""
    if cells_check is not None:
        model.info["shrunken_cells"] = cells_check
    if moment_cells_check:
        model.info["moment_cells"] = moment_cells_check
    if d.bvar_scores is not None:  # how far the base variance was trusted, and the log scores that chose it
        model.info["base_variance"] = {"column": d.variance_name, "power": d.bvar_power, "log_scores": d.bvar_scores}
    if d.n_cal:
        from .stages import stage_effects

        assert memb_h is not None
        base_h = None if d.base_u is None else d.base_u[d.cal_idx]
        var_h = None if d.bvar_u is None else d.bvar_u[d.cal_idx]
        model.info["stages"] = stage_effects(model, memb_h, d.yu[d.cal_idx], base_h, var_h)
    if d.within is not None:  # the out-of-sample check of the group-linear map, kept or not
        model.info["base_recalibration"] = {
            "method": "group-linear",
            "ridge": d.within["ridge"],
            **d.within["validation"],
        }
        if d.logistic is not None:  # its out-of-sample check too, kept or not
            model.info["base_recalibration"]["logistic"] = {"lam": d.logistic["lam"], **d.logistic["validation"]}


def shrunken_cells(model, memb, y_f, fit_mu, memb_h, y_h, base_u, cal_idx, var_h=None) -> tuple:
    """The shrunken cell corrections of the mean after the descent (:mod:`mmc_core.fit.cells`).

    Fitted on the fitting rows (a seeded sample of ``CV_MAX_ROWS`` on a larger table: the cells' means are then
    precise anyway), their penalty and weight chosen on the held-out rows with the kept model's predictions
    there. Sets ``model.cells`` when kept.

    Returns
    -------
    (ndarray, dict)
        The fitting rows' final mean prediction and the check for ``info``.
    """
    mu_h, moms_h = model.initial(memb_h.n, None if base_u is None else base_u[cal_idx], memb_h, var_h)
    mu_h, _ = model.replay(memb_h, mu_h, moms_h)
    sums = memb.sums()
    sums_s, y_s, mu_s = capped(sums, y_f, fit_mu, 11)
    s_h, yy, mm = capped(memb_h.sums(), y_h, mu_h, 13)
    cells, check = gated_cells(y_s, mu_s, sums_s, (yy, mm, s_h))
    if cells is None:
        return fit_mu, check
    model.cells = cells
    return apply_cells(fit_mu, sums, cells), check


def moment_cells(model, memb, y_f, fit_mu, fit_moms, memb_h, y_h, base_u, cal_idx, var_h=None) -> tuple:
    """The log-scale cell corrections of each positive moment (:func:`mmc_core.fit.cells.gated_moment_cells`).

    After the mean's: fitted on the fitting rows' pseudo-labels around the final mean (a seeded sample of
    ``CV_MAX_ROWS`` on a larger table), judged on the held-out rows with the model's final predictions there.
    Sets ``model.moment_cells`` when some are kept.

    Returns
    -------
    (dict, dict or None)
        The fitting rows' moment predictions and the checks per moment for ``info`` (None when no moment is
        positive on the log scale).
    """
    p = model.params
    if not p.moments or p.moment_step != "ratio":  # signed or additive moments: no log scale to work on
        return fit_moms, None
    mu_h, moms_h = model.initial(memb_h.n, None if base_u is None else base_u[cal_idx], memb_h, var_h)
    mu_h, moms_h = model.replay(memb_h, mu_h, moms_h)  # with the mean's cells, if kept
    sums, sums_h = memb.sums(), memb_h.sums()
    cells, checks = {}, {}
    for a in p.moments:
        s_f = pseudo_label(a, y_f - fit_mu, p.odd_moments)
        s_h = pseudo_label(a, y_h - mu_h, p.odd_moments)
        sums_s, s_s, v_s, mu_s = capped(sums, s_f, fit_moms[a], 17, also=(fit_mu,))
        sh, ss_h, vv_h, mu_hs = capped(sums_h, s_h, moms_h[a], 19, also=(mu_h,))
        cell, checks[str(a)] = gated_moment_cells(s_s, v_s, sums_s, (ss_h, vv_h, sh, mu_hs), mu=mu_s)
        if cell is not None:
            cells[a] = cell
    if not cells:
        return fit_moms, checks
    model.moment_cells = cells
    out = dict(fit_moms)
    for a, cell in cells.items():
        out[a] = apply_moment_cells(fit_moms[a], sums, cell, p.projection(a), fit_mu)
    return out, checks

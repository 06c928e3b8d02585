"""The rows an in-memory fit works on: the checks of the parameters and inputs, the label scale, the base
prediction on it, the calibration split and the fitting rows' initial mean and residuals.

One function, :func:`fitting_rows`, used by the fit and by ``planned_thresholds`` so that the preview cannot
drift from the fit; apart from the estimator so that what a fit decides before the descent reads in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..auditing.binary import TASK_BINARY, resolve_task
from ..common.errors import DataError, MMCError
from ..common.tables import as_table, count_rows, take_rows, to_label_array, variance_column
from ..fit.fit_steps import check_held_out
from ..fit.logistic_map import fit_group_logistic, group_logistic_base
from ..fit.parameters import check_parameters
from ..fit.recalibrate import affine_base, fit_affine, fit_group_linear, group_linear_base
from ..groups.group_set import GroupSet
from ..groups.membership import Membership
from ..paper.moments import LabelScale

__all__ = ["FittingRows", "fitting_rows"]


@dataclass
class FittingRows:
    """What a fit decides before the descent (all label values on the unit scale).

    ``X`` the whole table, ``n`` its rows; ``task`` / ``binary_info`` the resolved task; ``scale`` the label
    scale; ``yu`` every row's label; ``base_u`` every row's clipped base prediction (None without one) and
    ``base_clipped`` how many were clipped; ``gset`` the groups; ``n_cal`` / ``cal_idx`` the held-out rows,
    ``fit_idx`` / ``Xf`` / ``yu_f`` / ``memb`` the fitting rows, ``early`` whether early stopping is on;
    ``mu0`` the fitting rows' initial mean, after the ``affine`` or group-linear (``within``) map of the base;
    ``memb_h`` the held-out rows' membership when the map needed it; ``moments`` the central moments fitted;
    ``G`` groups, ``nf`` fitting rows, ``resid`` their residuals from ``mu0``; ``bvar_u`` every row's base
    variance (``variance_column``) on the unit scale, or None; ``logistic`` the per-group logistic map's record
    under ``base_recalibration="group-logistic"``, or "auto" with a 0/1 label (kept or not; when kept its coefficients are also
    ``within["logistic"]`` and ``mu0`` has been through it, after the group-linear map; ``mu0_before_logistic``
    is then ``mu0`` without it), else None.
    """

    X: Any
    n: int
    task: str
    binary_info: dict | None
    scale: LabelScale
    yu: np.ndarray
    yu_f: np.ndarray
    base_u: np.ndarray | None
    base_clipped: int
    gset: GroupSet
    n_cal: int
    early: bool
    cal_idx: np.ndarray
    fit_idx: np.ndarray
    Xf: Any
    memb: Membership
    mu0: np.ndarray
    affine: tuple | None
    within: dict | None
    memb_h: Membership | None
    moments: tuple
    G: int
    nf: int
    resid: np.ndarray | None  # None once the descents are done (memory)
    bvar_u: np.ndarray | None = None
    variance_name: str | None = None
    bvar_power: float = 1.0
    bvar_scores: dict | None = None
    logistic: dict | None = None
    mu0_before_logistic: np.ndarray | None = None


def fitting_rows(est, X, y, groups, base_prediction, label_name: str, base_name) -> FittingRows:
    """Checks, label scale, calibration split and the fitting rows' residuals: everything ``fit`` decides
    before the descent.

    Parameters
    ----------
    est : MomentMulticalibrator
        The estimator about to fit (its parameters are checked here).
    X : table
        The rows (anything :func:`mmc_core.common.tables.as_table` takes).
    y : array of shape (n,)
        Labels in their own units.
    groups : GroupSet, group definitions or None
        The groups to calibrate on.
    base_prediction : array of shape (n,) or None
        A base model's mean prediction in label units.
    label_name, base_name : str
        What errors call the label and the base prediction.

    Returns
    -------
    FittingRows
    """
    check_parameters(est)
    X = as_table(X)
    n = count_rows(X)
    if n < 2:
        raise DataError(f"need at least 2 rows to fit, got n_samples={n}")
    task, binary_info, k, scale, yu = _labels(est, y, n, label_name)
    if est.base_recalibration == "group-logistic" and task != TASK_BINARY:
        raise MMCError(
            "base_recalibration='group-logistic' maps a classifier's probabilities: it needs a 0/1 label (task "
            f"'binary'); {label_name} was fitted as task {task!r} (use 'auto' or 'group-linear')"
        )
    base_u, base_clipped = _base_on_scale(base_prediction, base_name, scale, n)
    gset = GroupSet.coerce(groups)

    n_cal, early, cal_idx, fit_idx = _split(est, n)
    bvar_u = _base_variance(est, X, n, k, scale, fit_idx)
    # without held-out rows the fitting rows are all the rows: the arrays are used as they are, not copied
    Xf = take_rows(X, fit_idx) if n_cal else X
    yu_f = yu[fit_idx] if n_cal else yu
    memb = gset.evaluate(Xf, fit_idx.size)
    affine = within = memb_h = logistic = mu0_before = None
    if base_u is not None:
        mu0 = base_u[fit_idx] if n_cal else base_u
        if est.base_recalibration == "affine":
            affine = fit_affine(yu_f, mu0)
            mu0 = affine_base(mu0, *affine)
        elif est.base_recalibration in ("group-linear", "auto", "group-logistic"):
            memb_h = gset.evaluate(take_rows(X, cal_idx), n_cal) if n_cal else None
            held = (yu[cal_idx], base_u[cal_idx], memb_h.sums()) if memb_h is not None else None
            within = fit_group_linear(yu_f, mu0, memb.sums(), held)
            mu0 = group_linear_base(mu0, memb.sums(), within)
            if est.base_recalibration == "group-logistic" or (task == TASK_BINARY and est.base_recalibration == "auto"):
                # a 0/1 label: then the per-group logistic map (mmc_core.fit.logistic_map), fitted and judged
                # on what the group-linear map gives, so that it is applied only for what it adds to that
                if held is not None:
                    held = (held[0], group_linear_base(held[1], held[2], within), held[2])
                logistic = fit_group_logistic(yu_f, mu0, memb.sums(), held)
                if logistic["validation"]["kept"]:
                    mu0_before = mu0
                    mu0 = group_logistic_base(mu0, memb.sums(), logistic)
                    within["logistic"] = {k: v for k, v in logistic.items() if k != "validation"}
    else:
        mu0 = np.full(fit_idx.size, float(np.mean(yu_f)))
    return FittingRows(
        X=X,
        n=n,
        task=task,
        binary_info=binary_info,
        scale=scale,
        yu=yu,
        yu_f=yu_f,
        base_u=base_u,
        base_clipped=base_clipped,
        gset=gset,
        n_cal=n_cal,
        early=early,
        cal_idx=cal_idx,
        fit_idx=fit_idx,
        Xf=Xf,
        memb=memb,
        mu0=mu0,
        affine=affine,
        within=within,
        memb_h=memb_h,
        moments=tuple(range(2, k + 1)),
        G=len(gset),
        nf=fit_idx.size,
        resid=yu_f - mu0,
        bvar_u=bvar_u,
        variance_name=est.variance_column,
        logistic=logistic,
        mu0_before_logistic=mu0_before,
        **_variance_power(bvar_u, fit_idx if n_cal else None, yu_f - mu0),
    )


# the powers of the base variance tried: 0 is the constant start, 1 the base variance as given
VARIANCE_POWERS = (0.0, 0.25, 0.5, 0.75, 1.0)
# a power above 0 must beat the constant start by this many standard errors of the rows' paired log-score
# differences (the moment cells' gate, mmc_core.fit.cells.MOMENT_GATE_Z): a base variance that only looks better
# by chance would otherwise move groups it knows nothing about
VARIANCE_POWER_Z = 2.25


def _variance_power(bvar_u, fit_idx, resid) -> dict:
    """{"bvar_power", "bvar_scores"}: the power p of the base variance whose start k x base ** p (k: the fitting
    rows' level) has the best Gaussian log score on the fitting rows' residuals from the starting mean, among the
    powers that beat the constant start (p = 0) by ``VARIANCE_POWER_Z`` standard errors; 0 when none does.

    A variance model's values are confidently wrong on some rows more often than not (measured on 19 real tables,
    benchmarks/README.md: as given, the log score was worse on 11), and the later stages correct groups and
    levels, not single rows: p says how far to trust it. The base variance was fitted on other rows, so the
    fitting rows judge it out of sample.
    """
    if bvar_u is None:
        return {}
    v = bvar_u[fit_idx] if fit_idx is not None else bvar_u
    r2 = resid**2
    level = float(r2.mean())
    rows = {}
    for p in VARIANCE_POWERS:
        s = v**p
        start = np.maximum(s * (level / float(s.mean())), 1e-9 * level)
        rows[p] = 0.5 * np.log(start) + r2 / (2.0 * start)
    scores = {p: float(r.mean()) for p, r in rows.items()}
    n = r2.size
    best = 0.0
    for p in VARIANCE_POWERS[1:]:
        d = rows[p] - rows[0.0]
        se = float(d.std(ddof=1)) / np.sqrt(n) if n > 1 else np.inf
        if scores[p] < scores[best] and (se > 0 and float(d.mean()) / se <= -VARIANCE_POWER_Z):
            best = p
    return {"bvar_power": best, "bvar_scores": {str(p): s for p, s in scores.items()}}


def _base_variance(est, X, n: int, k: int, scale: LabelScale, fit_idx) -> np.ndarray | None:
    """Every row's base variance on the unit scale (``variance_column``), or None without one."""
    if est.variance_column is None:
        return None
    if k < 2:
        raise MMCError(
            f"variance_column={est.variance_column!r} gives the variance a starting point, but this fit has no "
            "variance (n_moments=1, or a binary label): leave variance_column unset"
        )
    v = variance_column(X, est.variance_column, n) / scale.span**2
    if not (v[fit_idx] > 0).any():
        raise DataError(f"base variance '{est.variance_column}' (variance_column) is 0 on every fitting row")
    return v


def _split(est, n: int) -> tuple:
    """(n_cal, early, cal_idx, fit_idx): the seeded calibration split and whether early stopping is on."""
    rng = np.random.default_rng(est.random_state)
    n_cal = int(round(est.calibration_fraction * n))
    early = check_held_out(est, est.calibration_fraction, n, n - n_cal, n_cal)
    perm = rng.permutation(n)
    cal_idx = np.sort(perm[:n_cal])
    fit_idx = np.sort(perm[n_cal:]) if n_cal else np.arange(n)
    return n_cal, early, cal_idx, fit_idx


def _labels(est, y, n: int, label_name: str) -> tuple:
    """(task, binary_info, k, scale, yu): the task, the moments fitted (k), the label scale and the unit labels."""
    task, y, binary_info = resolve_task(y, est.task, est.positive_label, label_name)
    k = int(est.n_moments)
    if task == TASK_BINARY:
        if est.n_moments not in (1, 2):
            raise MMCError(
                f"moments={est.n_moments!r}: a binary label is fitted for the mean only (its "
                "variance is p(1 - p) once the probability p is right); use moments=1"
            )
        if est.label_range is not None and tuple(float(v) for v in est.label_range) != (0.0, 1.0):
            raise MMCError(
                f"label range {est.label_range!r}: a binary label is a probability on [0, 1] (leave label_range unset)"
            )
        k = 1
    y = to_label_array(y, f"label '{label_name}'", n)
    if task == TASK_BINARY:
        scale = LabelScale(0.0, 1.0, "binary")
    elif est.label_range is None:
        scale = LabelScale.observed(y)
    else:
        scale = LabelScale.declared(est.label_range)
    return task, binary_info, k, scale, scale.to_unit(y, f"label '{label_name}'")


def _base_on_scale(base_prediction, base_name, scale: LabelScale, n: int) -> tuple:
    """(base_u, base_clipped): the base prediction clipped to the label range, on the unit scale."""
    if base_prediction is None:
        return None, 0
    bname = f"base prediction '{base_name}'" if base_name else "base prediction"
    base = to_label_array(base_prediction, bname, n)
    # A base model may overshoot the label range a little; the mean predictor lives in the range
    # (the paper projects onto it), so such values are clipped and the count is reported.
    outside = (base < scale.lo) | (base > scale.hi)
    return scale.to_unit(np.clip(base, scale.lo, scale.hi), bname), int(outside.sum())

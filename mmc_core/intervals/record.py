"""The calibration record: computed by :func:`calibrate` (called by ``MomentMulticalibrator.fit``) on held-out
rows or on every row with out-of-fold predictions (cross-fit), validated on use."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np

from ..common.errors import MMCError, ModelFormatError
from ._common import (
    APPROACHES,
    DEFAULT_APPROACH,
    DELTA_GRID,
    FLOOR_FRACTION,
    N_MOMENT_QUANTILES,
    RECORD_FORMAT,
    RECORD_VERSION,
    from_json_list,
    grid_delta,
    group_conformal,
    to_json_list,
    usable_moments,
)
from .conditional import (
    CC_COMBINE,
    CC_DEFAULT_COMBINE,
    CC_OPTIONS,
    fit_conditional,
    fit_group_max,
)


# ---- calibration (called by MomentMulticalibrator.fit: held-out rows, or every row cross-fitted) -----------
def predict_on(model, table, base_unit, n):
    memb = model.groups.evaluate(table, n)
    mu, moms = model.initial(memb.n, base_unit, memb, model.variance_unit(table, memb.n))
    mu, moms = model.replay(memb, mu, moms)
    return memb, mu, moms


def calibrate(
    model,
    table_cal,
    y_cal_unit,
    base_cal_unit,
    *,
    approach: str = DEFAULT_APPROACH,
    options: dict | None = None,
    fitter: Callable | None = None,
    predictions: tuple | None = None,
    rows: str = "held-out",
    folds: int | None = None,
) -> dict:
    """Everything the data-driven intervals need, computed on the calibration rows.

    ``model`` is final (its log is the kept one); ``y_cal_unit`` are the labels on the unit scale,
    ``base_cal_unit`` the base prediction on the unit scale (or None). Returns the JSON-serialisable record
    described in the module docstring. ``approach`` / ``options`` select the thresholds of the ``calibrated``
    method: mmc_core fits ``cc`` (options ``combine`` "max" (default, :func:`fit_group_max`) or "sum"
    (:func:`fit_conditional`), ``margin``, ``two_sided``, and ``sweeps`` for "sum").

    ``fitter`` fits any other approach (the benchmarks pass ``benchmarks.interval_fitters.fit_approach``):
    ``fitter(approach, memb, u, deltas, **options) -> (theta, theta_lower, combine, unconverged)`` with ``memb``
    the calibration rows' group membership, ``u`` their standardized signed scores, ``deltas`` the grid,
    ``theta`` and ``theta_lower`` (len(deltas), G) per-group coefficients of the upper and lower threshold
    (``theta_lower`` None: one symmetric threshold on |u|), ``combine`` "sum" or "max" (how a row's groups'
    coefficients make its threshold) and ``unconverged`` the deltas whose fit did not converge.

    ``predictions`` = (mean, {a: moment}) on the unit scale, one value per calibration row: the per-row
    predictions every model-based field is computed from (default: ``model``'s own predictions on these rows,
    right for held-out rows). Cross-fitted calibration passes every row of the table with its out-of-fold
    predictions (``rows="cross-fit"``, ``folds`` = the number of folds; both are recorded). Either way the
    record is computed by the same code from (labels, base, predictions).
    """
    y = np.asarray(y_cal_unit, dtype=float)
    n = int(y.size)
    if n == 0:
        raise MMCError("interval calibration needs at least one calibration row")
    base_unit = None if base_cal_unit is None else np.clip(np.asarray(base_cal_unit, dtype=float), 0.0, 1.0)
    if rows not in ("held-out", "cross-fit"):
        raise MMCError(f"calibrate: rows must be 'held-out' or 'cross-fit', got {rows!r}")
    if predictions is None:
        memb, mu, moms = predict_on(model, table_cal, base_unit, n)
    else:
        memb = model.groups.evaluate(table_cal, n)
        mu, moms = _given_predictions(model, predictions, n)
    deltas = np.asarray(DELTA_GRID)
    if base_unit is not None:
        center, center_kind = base_unit, "base"
    else:
        center, center_kind = np.full(n, initial_constant(model)), "constant"
    r_base = np.abs(y - center)
    rec = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "n": n,
        "deltas": [float(d) for d in deltas],
        "center": center_kind,
        "rows": rows,
    }
    if folds is not None:
        rec["folds"] = int(folds)
    rec.update(_moment_fields(model, y, mu, moms, deltas))
    rec.update(_baselines(memb, r_base, deltas))
    rec["calibrated"] = _calibrated(model, memb, y, mu, moms, deltas, approach, options, fitter)
    return rec


def _moment_fields(model, y, mu, moms: dict, deltas) -> dict:
    """The moments' predictions' distribution (for choosing a) and their plug-in coverage on these rows."""
    qs = np.linspace(0, 1, N_MOMENT_QUANTILES)
    quantiles = {str(a): to_json_list(np.quantile(moms[a], qs)) for a in model.moments}
    cover = {}
    for a in usable_moments(model):
        dev = np.abs(y - mu) ** a
        cov = np.mean(dev[:, None] <= np.maximum(moms[a], 0.0)[:, None] / deltas[None, :], axis=0)
        cover[str(a)] = to_json_list(cov)
    return {"moment_quantiles": quantiles, "plugin_coverage": cover}


def _baselines(memb, r_base, deltas) -> dict:
    """The baselines' thresholds: split conformal, Mondrian (per group) and Gaussian."""
    n = r_base.size
    srt = np.sort(r_base)
    k = np.ceil((n + 1) * (1 - deltas) - 1e-12).astype(np.int64)
    mq = group_conformal(memb, r_base, deltas)
    return {
        "split_conformal": to_json_list(np.where(k <= n, srt[np.clip(k, 1, n) - 1], np.inf)),
        "mondrian": {"n": [int(v) for v in memb.sizes], "q": [to_json_list(row) for row in mq]},
        "gaussian": {"sd": float(np.sqrt(np.mean(r_base**2)))},
    }


def _calibrated(model, memb, y, mu, moms: dict, deltas, approach: str, options, fitter) -> dict:
    """The multicalibrated threshold on the standardized score, fitted by ``approach``."""
    opts = dict(options or {})
    floor_fraction = float(opts.pop("floor_fraction", FLOOR_FRACTION))
    if 2 in model.moments:
        floor = float(floor_fraction * max(float(np.mean(moms[2])), 1e-12))
        u = (y - mu) / np.sqrt(np.maximum(moms[2], floor))
        scale_kind = "m2"
    else:
        floor, scale_kind = 0.0, "none"
        u = y - mu
    if approach == "cc":
        unknown = sorted(set(opts) - set(CC_OPTIONS))
        if unknown:
            raise MMCError(f"cc: unknown option(s) {', '.join(unknown)}; expected {', '.join(CC_OPTIONS)}")
        up, lo, combine = _fit_cc(memb, u, deltas, opts)
        unconverged = []  # the fits always finish
    elif fitter is not None:
        up, lo, combine, unconverged = fitter(approach, memb, u, deltas, **opts)
    else:
        raise MMCError(
            f"unknown threshold approach {approach!r}; mmc_core offers {', '.join(APPROACHES)} (the benchmark-only "
            "approaches need calibrate(..., fitter=benchmarks.interval_fitters.fit_approach))"
        )
    extra = {} if lo is None else {"theta_lower": [to_json_list(row) for row in lo]}
    return {
        "approach": approach,
        "options": _json_options(opts),
        "floor_fraction": floor_fraction,
        "scale": scale_kind,
        "floor": floor,
        "combine": combine,
        "n": [int(v) for v in memb.sizes],
        "theta": [to_json_list(row) for row in up],
        **extra,
        "unconverged_deltas": sorted(unconverged),
    }


def _fit_cc(memb, u, deltas, opts: dict):
    """The thresholds of approach ``cc``, by the rule ``combine`` (default CC_DEFAULT_COMBINE = "max"):

    - "max": :func:`fit_group_max` (a row's threshold is the largest of its groups' own conformal quantiles of
      the standardized score; defaults margin = CC_MAX_MARGIN = 0, two_sided = CC_MAX_TWO_SIDED = False);
    - "sum": :func:`fit_conditional` (conditional conformal, additive over the groups; defaults margin =
      CC_MARGIN, two_sided = True).

    Returns (up, lo, combine)."""
    opts = dict(opts)
    mode = opts.pop("combine", CC_DEFAULT_COMBINE)
    if mode not in CC_COMBINE:
        raise MMCError(f"cc: combine must be one of {', '.join(map(repr, CC_COMBINE))}, got {mode!r}")
    if mode == "sum":
        up, lo = fit_conditional(memb, u, deltas, **opts)
        return up, lo, mode
    if "sweeps" in opts:
        raise MMCError("cc: sweeps applies to combine='sum' only")
    up, lo = fit_group_max(memb, u, deltas, **opts)
    return up, lo, mode


def _given_predictions(model, predictions, n: int) -> tuple:
    try:
        mu, moms = predictions
    except (TypeError, ValueError):
        raise MMCError("calibrate: predictions must be a pair (mean, {moment: values})") from None
    mu = np.asarray(mu, dtype=float)
    if mu.shape != (n,) or not isinstance(moms, dict) or set(moms) != set(model.moments):
        raise MMCError(f"calibrate: predictions must hold {n} means and the moments {list(model.moments)}")
    moms = {a: np.asarray(moms[a], dtype=float) for a in model.moments}
    if any(v.shape != (n,) for v in moms.values()):
        raise MMCError(f"calibrate: every moment prediction must have {n} values")
    return mu, moms


def _json_options(opts: dict) -> dict:
    out: dict = {}
    for k, v in opts.items():
        if isinstance(v, (bool, str)) or v is None:
            out[k] = v
        elif isinstance(v, numbers.Real):
            out[k] = float(v)
        else:
            out[k] = [float(x) for x in np.ravel(v)]
    return out


def initial_constant(model) -> float:
    if model.init_mean.get("kind") == "constant":
        return float(model.init_mean["value"])
    return 0.5


# ---- validation of the stored record ----------------------------------------------------------------------
def stored_record(model, method: str) -> dict:
    rec = model.extras.get("intervals") if isinstance(model.extras, dict) else None
    if not rec:
        raise MMCError(
            f"the '{method}' interval needs held-out calibration rows, but this model was fitted without them "
            "(calibration fraction 0): refit with --calibration-fraction 0.25 (or calibration_fraction=0.25)"
        )
    if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT:
        raise ModelFormatError("model extras: 'intervals' is not an mmc-intervals calibration record")
    if rec.get("version") != RECORD_VERSION:
        raise ModelFormatError(
            f"model extras: intervals version {rec.get('version')!r} is not supported "
            f"(this mmc-audit reads version {RECORD_VERSION})"
        )
    return rec


def _record_deltas(rec) -> np.ndarray:
    d = from_json_list(rec.get("deltas"), "deltas", allow_null=False)
    if d.size == 0 or np.any(d <= 0) or np.any(d >= 1) or np.any(np.diff(d) <= 0):
        raise ModelFormatError("model extras: intervals.deltas must be increasing numbers in (0, 1)")
    return d


def record_at(model, method: str, delta: float) -> tuple[dict, np.ndarray, int]:
    """The record ``method`` reads, its delta grid, and the index of the grid delta that serves ``delta``."""
    rec = stored_record(model, method)
    deltas = _record_deltas(rec)
    return rec, deltas, grid_delta(delta, deltas)


def record_object(rec: dict, key: str) -> dict:
    part = rec.get(key)
    if not isinstance(part, dict):
        raise ModelFormatError(f"model extras: intervals.{key} must be an object")
    return part


def record_matrix(rec_part, key, where, n_rows, n_cols, nonneg=True) -> np.ndarray:
    rows = rec_part.get(key) if isinstance(rec_part, dict) else None
    if not isinstance(rows, list) or len(rows) != n_rows:
        raise ModelFormatError(f"model extras: intervals.{where}.{key} must be a list of {n_rows} lists")
    out = (
        np.vstack([from_json_list(r, f"{where}.{key}[{i}]", n_cols) for i, r in enumerate(rows)])
        if n_rows
        else np.zeros((0, n_cols))
    )
    if nonneg and np.any(out < 0):
        raise ModelFormatError(f"model extras: intervals.{where}.{key} has negative values")
    return out


def finite_nonneg(v, where):
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise ModelFormatError(f"model extras: intervals.{where} = {v!r} must be a non-negative number")
    return float(v)

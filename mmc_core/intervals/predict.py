"""Prediction: every method's interval through one code path (:func:`interval_table`)."""

from __future__ import annotations

import numpy as np

from ..common.errors import MMCError, ModelFormatError
from ._common import (
    METHODS,
    check_prob,
    from_json_list,
    membership_pairs,
    need_moments,
    normal_ppf,
    row_max,
    threshold_rows,
    usable_moments,
)
from .paper import greedy_cover, guaranteed_halfwidth, plugin_halfwidth
from .record import (
    finite_nonneg,
    initial_constant,
    predict_on,
    record_at,
    record_matrix,
    record_object,
    stored_record,
)


# ---- prediction -------------------------------------------------------------------------------------------
def _n_rows(table) -> int:
    if hasattr(table, "shape"):
        return int(table.shape[0])
    try:
        return len(next(iter(table.values())))
    except StopIteration:
        raise MMCError("the table has no columns") from None


class IntervalContext:
    """Predictions shared by all methods for one table."""

    def __init__(self, model, table, base=None):
        self.model = model
        scale = model.scale
        n = _n_rows(table)
        self.base_unit = None
        if base is not None:
            b = np.asarray(base, dtype=float)
            if b.ndim != 1 or not np.all(np.isfinite(b)):
                raise MMCError("the base prediction must be one column of finite numbers")
            if b.size != n:
                raise MMCError(f"the base prediction has {b.size} values for {n} rows")
            self.base_unit = np.clip((b - scale.lo) / scale.span, 0.0, 1.0)
        elif model.uses_base:
            col = model.init_mean.get("column")
            raise MMCError(
                f"this model was fitted on a base prediction{f' ({col})' if col else ''}: pass it "
                "(base=..., or --pred COL)"
            )
        self.memb, self.mu, self.moms = predict_on(model, table, self.base_unit if model.uses_base else None, n)
        self.n = self.memb.n

    def center(self, rec) -> np.ndarray:
        kind = rec.get("center")
        if kind == "base":
            if self.base_unit is None:
                raise MMCError("this model's baselines were calibrated on a base prediction: pass it")
            return self.base_unit
        if kind == "constant":
            return np.full(self.n, initial_constant(self.model))
        raise ModelFormatError(f"model extras: intervals.center = {kind!r} must be 'base' or 'constant'")


def _reference_moments(ctx, a):
    """m_a values of the calibration rows (stored quantiles) or, lacking them, of the predicted rows."""
    rec = ctx.model.extras.get("intervals") if isinstance(ctx.model.extras, dict) else None
    if rec:
        mq = rec.get("moment_quantiles")
        if isinstance(mq, dict) and str(a) in mq:
            v = from_json_list(mq[str(a)], f"moment_quantiles.{a}", allow_null=False)
            if np.any(v < 0):
                raise ModelFormatError(f"model extras: intervals.moment_quantiles.{a} has negative values")
            return v
    return ctx.moms[a]


def _choose_guaranteed(ctx, delta, gamma, moment=None):
    use = need_moments(ctx.model, "guaranteed")
    if moment is not None:
        if moment not in use:
            raise MMCError(f"moment {moment} is not usable for intervals; usable: {list(use)}")
        return moment
    widths = {
        a: float(np.mean(guaranteed_halfwidth(ctx.model, _reference_moments(ctx, a), a, delta, gamma))) for a in use
    }
    return min(widths, key=widths.get)


def _choose_plugin(ctx, delta, moment=None):
    use = need_moments(ctx.model, "plugin")
    if moment is not None:
        if moment not in use:
            raise MMCError(f"moment {moment} is not usable for intervals; usable: {list(use)}")
        return moment, None
    rec = ctx.model.extras.get("intervals") if isinstance(ctx.model.extras, dict) else None
    widths = {a: float(np.mean(plugin_halfwidth(_reference_moments(ctx, a), a, delta))) for a in use}
    if not rec:
        return min(widths, key=widths.get), None
    rec, deltas, k = record_at(ctx.model, "plugin", delta)
    pc = record_object(rec, "plugin_coverage")
    cov = {}
    for a in use:
        if str(a) not in pc:
            raise ModelFormatError(f"model extras: intervals.plugin_coverage lacks moment {a}")
        c = from_json_list(pc[str(a)], f"plugin_coverage.{a}", deltas.size, allow_null=False)
        if np.any((c < 0) | (c > 1)):
            raise ModelFormatError(f"model extras: intervals.plugin_coverage.{a} must lie in [0, 1]")
        cov[a] = float(c[k])
    ok = [a for a in use if cov[a] >= 1 - delta]
    best = min(ok, key=widths.get) if ok else max(use, key=cov.get)
    return best, cov[best]


def _half_guaranteed(ctx, delta, gamma, moment=None):
    check_prob("gamma", gamma)
    a = _choose_guaranteed(ctx, delta, gamma, moment)
    return ctx.mu, guaranteed_halfwidth(ctx.model, ctx.moms[a], a, delta, gamma), {"moment": a}


def _half_plugin(ctx, delta, gamma, moment=None):
    a, cov = _choose_plugin(ctx, delta, moment)
    return ctx.mu, plugin_halfwidth(ctx.moms[a], a, delta), {"moment": a, "holdout_coverage": cov}


def _multimoment_cells(ctx, delta, gamma):
    """Incidence pairs (row, cell) over all usable moments, each cell's mass, and the widths."""
    model = ctx.model
    use = need_moments(model, "multimoment")
    p = model.params
    m, G = p.m, ctx.memb.n_groups
    pr, pg = membership_pairs(ctx.memb)
    bmu = p.mean_grid.index(ctx.mu)
    rows, sets, widths = [], [], []
    per_a = G * m * m
    for k, a in enumerate(use):
        bm = p.grid(a).index(ctx.moms[a])
        cell = k * per_a + pg * (m * m) + bmu[pr] * m + bm[pr]
        wa = guaranteed_halfwidth(model, ctx.moms[a], a, delta, gamma)
        rows.append(pr)
        sets.append(cell)
        widths.append(wa[pr])
    pr_all, pw_all = np.concatenate(rows), np.concatenate(widths)
    # number the non-empty cells 0..K-1 (order kept): moments x groups x m^2 can be far too many to index
    _, ps_all = np.unique(np.concatenate(sets), return_inverse=True)
    ps_all = ps_all.ravel()
    n_sets = int(ps_all.max()) + 1 if ps_all.size else 0
    mass = np.bincount(ps_all, minlength=n_sets) / max(ctx.n, 1)
    return pr_all, ps_all, pw_all, n_sets, mass, use


def _half_multimoment(ctx, delta, gamma, moment=None):
    check_prob("gamma", gamma)
    pr, ps, pw, n_sets, mass, use = _multimoment_cells(ctx, delta, gamma)
    eligible = np.flatnonzero(mass >= gamma * (1 - 1e-12))
    chosen, cur, covered = greedy_cover(pr, ps, pw, ctx.n, n_sets, eligible)
    half = np.where(covered, cur, np.nan)
    info = {"sets_chosen": len(chosen), "uncovered_rows": int((~covered).sum()), "moments": list(use)}
    return ctx.mu, half, info


def half_calibrated(ctx, delta, gamma, moment=None):
    rec, deltas, k = record_at(ctx.model, "calibrated", delta)
    part = record_object(rec, "calibrated")
    G = ctx.memb.n_groups
    rows_up = part.get("theta")
    if not isinstance(rows_up, list) or len(rows_up) != deltas.size:
        raise ModelFormatError(f"model extras: intervals.calibrated.theta must be a list of {deltas.size} lists")
    theta = from_json_list(rows_up[k], f"calibrated.theta[{k}]", G)
    floor = finite_nonneg(part.get("floor"), "calibrated.floor")
    scale_kind = part.get("scale")
    if scale_kind == "m2":
        if 2 not in ctx.model.moments:
            raise ModelFormatError("model extras: intervals.calibrated.scale is 'm2' but the model has no m_2")
        scale = np.sqrt(np.maximum(ctx.moms[2], floor))
    elif scale_kind == "none":
        scale = np.ones(ctx.n)
    else:
        raise ModelFormatError(f"model extras: intervals.calibrated.scale = {scale_kind!r} must be 'm2' or 'none'")
    q = threshold_rows(ctx.memb, theta, part.get("combine"))
    info = {"grid_delta": float(deltas[k]), "approach": part.get("approach")}
    if "theta_lower" not in part:
        return ctx.mu, np.maximum(q, 0.0) * scale, info
    # Two-sided thresholds (cc; older ridge-cqr records too): [mu - max(q_lo, 0) sd, mu + max(q_up, 0) sd]
    # (max(., 0) keeps mu inside), made nested in delta: each end goes at least as far as at every larger grid
    # delta (the hull of those intervals). The two sides are fitted per delta, so without this an end could move inward as delta
    # decreases; widening never lowers a coverage.
    rows = part.get("theta_lower")
    combine = part.get("combine")
    if not isinstance(rows, list) or len(rows) != deltas.size:
        raise ModelFormatError(f"model extras: intervals.calibrated.theta_lower must be a list of {deltas.size} lists")
    q_up, q_lo = np.maximum(q, 0.0), np.zeros(ctx.n)
    for j in range(k, deltas.size):
        th_lo = from_json_list(rows[j], f"calibrated.theta_lower[{j}]", G)
        q_lo = np.maximum(q_lo, threshold_rows(ctx.memb, th_lo, combine))
        if j > k:
            th_up = from_json_list(rows_up[j], f"calibrated.theta[{j}]", G)
            q_up = np.maximum(q_up, threshold_rows(ctx.memb, th_up, combine))
    return ctx.mu, (q_lo * scale, q_up * scale), info


def _half_split(ctx, delta, gamma, moment=None):
    rec, deltas, k = record_at(ctx.model, "split-conformal", delta)
    q = from_json_list(rec.get("split_conformal"), "split_conformal", deltas.size)
    if np.any(q < 0):
        raise ModelFormatError("model extras: intervals.split_conformal has negative values")
    return ctx.center(rec), np.full(ctx.n, q[k]), {"grid_delta": float(deltas[k])}


def _half_mondrian(ctx, delta, gamma, moment=None):
    rec, deltas, k = record_at(ctx.model, "mondrian", delta)
    G = ctx.memb.n_groups
    qm = record_matrix(rec.get("mondrian"), "q", "mondrian", G, deltas.size)
    half = row_max(ctx.memb, qm[:, k])
    skipped = int(np.sum(~np.isfinite(qm[:, k])))
    return ctx.center(rec), half, {"grid_delta": float(deltas[k]), "groups_skipped": skipped}


def _half_gaussian(ctx, delta, gamma, moment=None):
    rec = stored_record(ctx.model, "gaussian")
    g = rec.get("gaussian")
    sd = finite_nonneg(g.get("sd") if isinstance(g, dict) else None, "gaussian.sd")
    z = normal_ppf(1 - delta / 2)
    return ctx.center(rec), np.full(ctx.n, z * sd), {"z": z}


_HALF = {
    "guaranteed": _half_guaranteed,
    "plugin": _half_plugin,
    "multimoment": _half_multimoment,
    "calibrated": half_calibrated,
    "split-conformal": _half_split,
    "mondrian": _half_mondrian,
    "gaussian": _half_gaussian,
}


BINARY_NO_INTERVALS = (
    "this is a classifier model (binary label): prediction intervals are not offered for a 0/1 "
    "outcome (an interval would be {0}, {1} or {0, 1}); use the probability (the mean) and the "
    "classifier audit instead"
)


def unit_interval(ctx, method, delta, gamma, moment=None, clip=True):
    if getattr(ctx.model, "task", "regression") == "binary":
        raise MMCError(BINARY_NO_INTERVALS)
    if method not in _HALF:
        raise MMCError(f"unknown interval method {method!r}; expected one of {', '.join(METHODS)}")
    check_prob("delta", delta)
    check_prob("gamma", gamma)
    center, half, info = _HALF[method](ctx, delta, gamma, moment)
    half_lo, half_hi = half if isinstance(half, tuple) else (half, half)  # two-sided: (below, above) the centre
    lo, hi = center - half_lo, center + half_hi
    if method == "multimoment":  # uncovered rows: no valid interval, the whole label range
        bad = np.isnan(half_hi)
        lo, hi = np.where(bad, 0.0, lo), np.where(bad, 1.0, hi)
    if clip and ctx.model.scale.source == "declared":
        # Every label lies in a declared range, so clipping the ends to it leaves coverage unchanged and makes
        # widths meaningful (a guaranteed interval wider than the range reads as "the whole range"). An
        # observed range is not clipped: new labels may fall outside it.
        lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
    return lo, hi, info


def _to_original(model, lo, hi):
    s = model.scale
    return s.lo + s.span * lo, s.lo + s.span * hi


def predict_intervals(
    model,
    table,
    base=None,
    method: str = "calibrated",
    delta: float = 0.1,
    gamma: float = 0.05,
    *,
    moment: int | None = None,
):
    """``(lower, upper)`` numpy arrays in the label's original units for the rows of ``table``.

    ``base`` is the base prediction in label units (required when the model was fitted on one). ``moment``
    fixes the moment of ``guaranteed`` / ``plugin`` (default: chosen as described in the module docstring).
    """
    if getattr(model, "task", "regression") == "binary":
        raise MMCError(BINARY_NO_INTERVALS)
    from ..common.threads import one_blas_thread

    with one_blas_thread():  # results independent of the machine's BLAS threads (mmc_core.common.threads)
        ctx = IntervalContext(model, table, base)
        lo, hi, _ = unit_interval(ctx, method, delta, gamma, moment)
    return _to_original(model, lo, hi)


def available_methods(model) -> tuple:
    """The methods this model can compute (the rest raise MMCError saying why)."""
    out = []
    if getattr(model, "task", "regression") == "binary":
        return ()
    has_rec = bool(isinstance(model.extras, dict) and model.extras.get("intervals"))
    for m in METHODS:
        if m in ("guaranteed", "plugin", "multimoment") and not usable_moments(model):
            continue
        if m in ("calibrated", "split-conformal", "mondrian", "gaussian") and not has_rec:
            continue
        out.append(m)
    return tuple(out)


def interval_table(
    model,
    table,
    base=None,
    delta: float = 0.1,
    gamma: float = 0.05,
    methods=None,
    skip_unavailable: bool = True,
    with_info: bool = False,
):
    """{method: (lower, upper)} in original units, the model's predictions computed once for all methods.

    ``methods`` defaults to every method; with ``skip_unavailable`` the ones the model cannot compute (see
    :func:`available_methods`, or a delta below the calibration grid) are left out instead of raising (a
    damaged calibration record still raises ModelFormatError). ``with_info`` also returns
    {method: details} (the moment chosen, the grid delta used, uncovered rows, ...).
    """
    check_prob("delta", delta)
    check_prob("gamma", gamma)
    ctx = IntervalContext(model, table, base)
    methods = METHODS if methods is None else tuple(methods)
    avail = set(available_methods(model))
    out, info = {}, {}
    for m in methods:
        if m not in _HALF:
            raise MMCError(f"unknown interval method {m!r}; expected one of {', '.join(METHODS)}")
        if skip_unavailable and m not in avail:
            continue
        try:
            lo, hi, inf = unit_interval(ctx, m, delta, gamma)
        except ModelFormatError:
            raise
        except MMCError as e:  # e.g. a delta below the calibration grid
            if not skip_unavailable:
                raise
            info[m] = {"unavailable": str(e)}
            continue
        out[m] = _to_original(model, lo, hi)
        info[m] = inf
    return (out, info) if with_info else out


def interval_info(model, table, base=None, delta: float = 0.1, gamma: float = 0.05) -> dict:
    """Per method, the details of how its intervals were formed on these rows (see :func:`interval_table`)."""
    return interval_table(model, table, base, delta, gamma, with_info=True)[1]

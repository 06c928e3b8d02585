"""Prediction intervals from a fitted model (Section 5 of the paper, its Appendix, and beyond).

Seven methods, all computed by the same code path (:func:`interval_table`) so they can be compared fairly.
Every method returns ``(lower, upper)`` in the label's ORIGINAL units; internally everything runs on the
unit scale and interval ends map back affinely (``lo + span * u``). Interval ends are clipped to the label range
only when that range was declared (every label lies in it, so coverage is unchanged); an observed range is not
clipped (new labels may fall outside it).

``guaranteed``  (thm:ciguarantee). For a usable moment a (even; odd only when the model fits absolute
    central moments, the footnote of Section 5) and the guarantees the descent achieves, alpha' = alpha,
    beta' = beta_a + a alpha (beta_a = the moment's own threshold, the model's beta unless the "auto" rule
    set one per moment), eps = a / m (lem:fine-consist-mean-conditioned-moment-cal), the half-width is

        alpha/gamma + eps + w_mu + ((M_a(x) + eps + beta'/gamma) / delta)^(1/a),   w_mu = 1/m,

    with M_a(x) = m_a(x) + w_a (w_a = the moment grid's bucket width) as in the paper, except in the top
    moment bucket: moment predictions are projected onto [0, 1] but bucketed over [0, r_a], so a cell of
    the top bucket can hold predictions up to 1.0 and its average prediction is only bounded by 1.0; there
    M_a(x) = max(m_a(x) + w_a, 1.0). The numerator is then capped at r_a (the largest a-th absolute central
    moment any [0, 1] label can have, so the true cell moment never exceeds it): a valid and never looser
    bound. The interval covers with probability >= 1 - delta on every cell G(mu, m_a, i, j) of mass >= gamma
    of the distribution the model is multicalibrated on (exactly: the fitting rows; out of sample: up to the
    finite-sample slack of Section 4). These intervals are honest and usually very wide. ``a`` is the usable
    moment with the smallest mean width on the calibration rows (on the predicted rows if the model has none);
    pass ``moment=a`` to fix it.
``plugin``  mu(x) +- (m_a(x) / delta)^(1/a): what exact calibration would give. ``a`` is chosen on the
    held-out calibration rows: the narrowest (mean width) among the moments whose held-out coverage reaches
    1 - delta, else the one with the highest held-out coverage.
``multimoment``  the Appendix's submodular cover: cells G(mu, m_a, i, j) (all usable a, all groups) of mass
    >= gamma are added greedily, each time the one with the smallest increase of the mass-weighted width
    per newly covered mass, until every row is covered; a row's half-width is the largest guaranteed
    half-width among the chosen cells containing it. The population is the rows passed in (the Appendix
    assumes P_X known; the rows at hand stand in for it, so pass the whole table, not a handful of rows).
    Rows that no cell of mass >= gamma contains get the label range [lo, hi]: there is no valid interval
    for them (assumption 3 of the Appendix); :func:`greedy_cover` reports how many.
``calibrated``  beyond the paper, on held-out calibration rows (never the rows the moments were fitted on).
    The signed standardized residual u = (y - mu(x)) / sd(x), sd(x) = sqrt(max(m_2(x), floor)) (``floor`` =
    FLOOR_FRACTION x the calibration rows' mean m_2; a mean-only model uses sd = 1), gets two thresholds, each a
    sum of per-group coefficients over x's groups, and the interval is [mu - max(q_lo(x), 0) sd(x),
    mu + max(q_up(x), 0) sd(x)] (the mean always inside; asymmetric when the residuals are skewed), each end
    taken at least as far as at every larger grid delta (nested in delta).
    Default approach ``ridge-cqr`` (:func:`fit_two_sided`): per side a ridge-penalized group-additive quantile
    regression (groups borrow strength from the pooled fit), a weak penalty for the groups whose cross-fitted
    miss rate is significantly too high, a conformal shift from the cross-fitted scores (CQR) at the level
    1 - delta + MARGIN_Z sqrt(delta (1 - delta) / n), and a final patch after which every group's coverage on
    the calibration rows is at least that level minus Z_UNDER binomial standard errors. The symmetric
    approaches of :func:`fit_threshold` (``gcp``, the previous default: a multicalibrated threshold on |u| by
    significance-gated coordinate steps; ``gcp-cv``; ``mondrian-std``; ``mondrian-relaxed``) stay selectable
    (``calibrate(..., approach=...)``; records without ``theta_lower`` predict exactly as before). Measured on
    the issue-4 protocol (benchmarks/coverage_protocol.py, 50 fresh splits, seeds 1000-1049; see its notes),
    share of splits meeting the whole goal (no under-covered group, average group coverage in [0.89, 0.93],
    width <= 0.95 x Mondrian), ridge-cqr vs gcp: wage 0.28 vs 0.14 (no base) and 0.36 vs 0.08 (boosted base),
    NELS 0.68 vs 0.46 and 0.56 vs 0.56, synthetic 0.74 vs 0.62 and 0.50 vs 0.48; average coverage 0.915-0.930
    (gcp 0.923-0.941) at 0.61-0.93 of the Mondrian width. gcp has fewer under-covered groups (0.04-0.66 per
    split against 0.22-0.62) because it over-covers: average coverage above 0.93 on 16-80% of the splits.
    Per-group validity at 2% group size needs more calibration rows than 25% of a few thousand: a group that
    size has 9-22 of them, and the calibration noise of the global level alone (sd ~0.014 at 450 rows) keeps
    the wage table below about one split in two.
``split-conformal``  marginal split conformal on |y - base| (the conformal rank ceil((n + 1)(1 - delta))).
``mondrian``  per-group split conformal on |y - base|; a row gets the widest interval among its groups.
    Groups with fewer than ceil(1/delta) - 1 calibration rows have an infinite conformal quantile and are
    skipped (otherwise every row in them would get an infinite interval); their coverage is not guaranteed.
``gaussian``  base +- z_{1 - delta/2} * sd, sd^2 the pooled mean squared residual of the base on the
    calibration rows.

The three baselines are centred on the base prediction when the model was fitted on one, otherwise on the
model's initial constant mean (the fitting rows' label mean): the record says which (``center``).

Calibration record (``model.extras["intervals"]``, written by :func:`calibrate`, validated on use)::

    {"format": "mmc-intervals", "version": 1,
     "n": n_cal,                             # calibration rows
     "deltas": [...],                        # DELTA_GRID: the deltas the data-driven methods are fitted for
     "center": "base" | "constant",
     "moment_quantiles": {"a": [201 quantiles of m_a(x) on the calibration rows, unit scale]},
     "plugin_coverage": {"a": [held-out coverage of the plug-in interval, per delta]},
     "split_conformal": [q or null per delta],            # unit scale; null = infinite
     "mondrian": {"n": [rows per group], "q": [[q or null per delta] per group]},
     "gaussian": {"sd": sd},
     "calibrated": {"approach": str, "options": {...}, "floor_fraction": f0, "scale": "m2" | "none",
                    "floor": f,                # variance floor, unit scale
                    "combine": "sum" | "max", "n": [rows per group],
                    "theta": [[theta_g or null per group] per delta],        # the upper (or symmetric) one
                    "theta_lower": [[theta_g or null per group] per delta],  # two-sided approaches only
                    "unconverged_deltas": [...]}}

Any delta works at predict time. The data-driven methods are fitted for every delta of ``DELTA_GRID``
(exact there: 0.1, 0.05, 0.2, 0.01, ...); any other delta uses the largest grid delta below it (more
coverage, never less), and a delta below the grid's smallest value is refused. Storing the thresholds on
a grid keeps the model file small (about 3 x groups x 27 numbers) whatever the number of calibration rows.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .errors import MMCError, ModelFormatError
from .moments import MomentKind, max_central_moment

__all__ = [
    "METHODS", "DELTA_GRID", "APPROACHES", "DEFAULT_APPROACH", "calibrate", "predict_intervals",
    "interval_table", "available_methods", "interval_info", "guaranteed_halfwidth", "plugin_halfwidth",
    "greedy_cover", "fit_threshold", "fit_two_sided", "normal_ppf", "conformal_quantile", "grid_delta",
    "usable_moments",
]

METHODS = ("guaranteed", "plugin", "multimoment", "calibrated", "split-conformal", "mondrian", "gaussian")
DELTA_GRID = (0.005, 0.01, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.07, 0.075, 0.08, 0.09, 0.1, 0.11, 0.12,
              0.125, 0.13, 0.14, 0.15, 0.175, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)
APPROACHES = ("cc", "ridge-cqr", "gcp", "gcp-cv", "mondrian-std", "mondrian-relaxed")
DEFAULT_APPROACH = "cc"
RECORD_FORMAT = "mmc-intervals"
RECORD_VERSION = 1
N_MOMENT_QUANTILES = 201
# Variance floor of the standardized score, as a fraction of the calibration rows' mean m_2 (an sd floor of half
# the root-mean predicted sd): a cell whose variance prediction collapsed towards 0 (a small cell fitted exactly
# on the fitting rows) would otherwise get a near-zero-width interval and an exploding score. Measured on the
# protocol: floors between 0.25 and 0.5 make the score's per-group quantiles the most homogeneous on the wage
# table (and do not matter on the others); 0.01 left them 3x more dispersed.
FLOOR_FRACTION = 0.25


# ---- small numerical helpers ---------------------------------------------------------------------------
def normal_ppf(p: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, one Halley step: ~1e-15)."""
    p = float(p)
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {p}")
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2 * math.log(p))
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    elif p <= 1 - lo:
        q = p - 0.5
        r = q * q
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    else:
        q = math.sqrt(-2 * math.log1p(-p))
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    e = 0.5 * math.erfc(-x / math.sqrt(2)) - p
    u = e * math.sqrt(2 * math.pi) * math.exp(x * x / 2)
    return x - u / (1 + x * u / 2)


def conformal_quantile(scores, delta: float) -> float:
    """The split-conformal quantile: the ceil((n + 1)(1 - delta))-th smallest score (inf if that exceeds n)."""
    s = np.sort(np.asarray(scores, dtype=float))
    k = math.ceil((s.size + 1) * (1 - delta) - 1e-12)
    return float(s[k - 1]) if 1 <= k <= s.size else (math.inf if k > s.size else -math.inf)


def _check_prob(name: str, v):
    if not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(v) or not 0 < v < 1:
        raise MMCError(f"{name} must be a number strictly between 0 and 1, got {v!r}")


def grid_delta(delta: float, deltas=DELTA_GRID) -> int:
    """Index of the largest grid delta <= ``delta`` (conservative); MMCError below the grid."""
    _check_prob("delta", delta)
    arr = np.asarray(deltas, dtype=float)
    ok = np.flatnonzero(arr <= delta * (1 + 1e-9))
    if ok.size == 0:
        raise MMCError(f"delta={delta} is below {arr[0]}, the smallest miscoverage the data-driven intervals "
                       "are calibrated for")
    return int(ok[-1])


def _group_sorted(memb, values: np.ndarray):
    """Per-group sorted values: (sorted values aligned with memb's (group, row) pairs, group starts)."""
    pg = memb.pair_groups()
    v = values[memb.rows]
    order = np.lexsort((v, pg))
    return v[order], memb.indptr[:-1]


def _group_conformal(memb, scores: np.ndarray, deltas) -> np.ndarray:
    """(G, D) conformal quantile of ``scores`` within each group for each delta (inf when too few rows)."""
    sv, starts = _group_sorted(memb, scores)
    n_g = memb.sizes.astype(float)[:, None]
    d = np.asarray(deltas, dtype=float)[None, :]
    k = np.ceil((n_g + 1) * (1 - d) - 1e-12).astype(np.int64)
    ok = (k >= 1) & (k <= n_g)
    idx = np.where(ok, starts[:, None] + k - 1, 0)
    out = np.where(ok, sv[idx] if sv.size else 0.0, np.inf)
    return out


def _to_json_list(arr) -> list:
    return [None if not math.isfinite(float(v)) else float(v) for v in np.ravel(arr)]


def _from_json_list(lst, where: str, length: int | None = None, allow_null: bool = True) -> np.ndarray:
    if not isinstance(lst, list) or (length is not None and len(lst) != length):
        raise ModelFormatError(f"model extras: intervals.{where} must be a list"
                               + (f" of {length} numbers" if length is not None else ""))
    out = np.empty(len(lst))
    for i, v in enumerate(lst):
        if v is None and allow_null:
            out[i] = np.inf
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[i] = float(v)
        else:
            raise ModelFormatError(f"model extras: intervals.{where}[{i}] = {v!r} is not a number")
    return out


# ---- moments usable for intervals ------------------------------------------------------------------------
def usable_moments(model) -> tuple:
    """Moments usable in tail bounds: even a always; odd a only when they are absolute central moments."""
    return tuple(a for a in model.moments if a % 2 == 0 or model.params.odd_moments == MomentKind.ABSOLUTE)


def _need_moments(model, method: str) -> tuple:
    use = usable_moments(model)
    if not model.moments:
        raise MMCError(f"the '{method}' interval needs moment predictors, but this model fits the mean only "
                       "(refit with --moments 2 or more)")
    if not use:
        raise MMCError(f"the '{method}' interval needs an even moment or absolute odd moments; this model has "
                       f"signed moments {list(model.moments)} only")
    return use


def guaranteed_halfwidth(model, mom_a: np.ndarray, a: int, delta: float, gamma: float) -> np.ndarray:
    """thm:ciguarantee half-width (unit scale) for moment ``a`` with the guarantees the descent achieves.

    alpha/gamma + eps + w_mu + (min(r_a, M_a(x) + eps + beta'/gamma) / delta)^(1/a), eps = a/m,
    beta' = beta_a + a alpha (beta_a: the moment's own threshold), w_mu = 1/m, M_a(x) = m_a(x) + w_a (top moment bucket: max(m_a(x) + w_a, 1.0),
    since predictions there may reach the projection's upper end 1.0). See the module docstring.
    """
    p = model.params
    eps = a / p.m
    beta_p = _beta(p, a) + a * p.alpha
    grid = p.grid(a)
    mom_a = np.asarray(mom_a, dtype=float)
    upper = mom_a + grid.width
    top = grid.index(mom_a) == p.m - 1
    upper = np.where(top, np.maximum(upper, p.projection(a)[1]), upper)
    num = np.minimum(max_central_moment(a), upper + eps + beta_p / gamma)
    return p.alpha / gamma + eps + 1.0 / p.m + (num / delta) ** (1.0 / a)


def _beta(p, a: int) -> float:
    """The moment-a threshold the descent used (per-moment when the model has them, else the common beta)."""
    return float(p.beta_for(a)) if hasattr(p, "beta_for") else float(p.beta)


def plugin_halfwidth(mom_a: np.ndarray, a: int, delta: float) -> np.ndarray:
    """(m_a(x) / delta)^(1/a), unit scale."""
    return (np.maximum(np.asarray(mom_a, dtype=float), 0.0) / delta) ** (1.0 / a)


# ---- the multicalibrated threshold -----------------------------------------------------------------------
def _pairs(memb):
    return memb.rows, memb.pair_groups()


def _row_sum(memb, theta: np.ndarray) -> np.ndarray:
    pr, pg = _pairs(memb)
    return np.bincount(pr, weights=theta[pg], minlength=memb.n)


def _row_max(memb, theta: np.ndarray) -> np.ndarray:
    """max over the groups containing each row of theta (inf entries skipped; rows with none: inf)."""
    pr, pg = _pairs(memb)
    t = theta[pg]
    fin = np.isfinite(t)
    out = np.full(memb.n, -np.inf)
    np.maximum.at(out, pr[fin], t[fin])
    out[out == -np.inf] = np.inf
    return out


# Defaults of the ``gcp`` threshold (MARGIN_Z and Z_UNDER are also ridge-cqr's level margin and final patch
# tolerance), chosen with benchmarks/coverage_protocol.py (see its notes): the global
# finite-sample margin MARGIN_Z * sqrt(delta (1 - delta) / n) (a PAC-style, training-conditional correction: with
# probability about 93% over the calibration draw the population coverage reaches 1 - delta), patches only
# for group deviations beyond Z_UNDER (too little coverage) / Z_OVER (too much) binomial standard errors.
MARGIN_Z = 1.5
Z_UNDER = 2.0
Z_OVER = 3.0


def fit_threshold(memb, s: np.ndarray, delta: float, approach: str = "gcp", *,
                  z_under: float = Z_UNDER, z_over: float = Z_OVER, margin_z: float = MARGIN_Z,
                  margin: float = 0.0, group_margin=0.0, correction: str = "conformal",
                  max_iter: int | None = None, return_info: bool = False, cv_folds: int = 5,
                  cv_z: float = 2.33, seed: int = 0):
    """A threshold q(x) on the score ``s`` multicalibrated over the groups, for miscoverage ``delta``.

    Returns ``(theta, combine)`` (and a dict of details with ``return_info``): q(x) = the sum of theta_g over
    the groups containing x (``combine="sum"``) or their max (``combine="max"``).

    ``gcp`` (group-conditional quantile fitting, as in batch multivalid conformal prediction / BatchGCP):
    q(x) = sum_g theta_g 1[x in g], fitted by exact coordinate steps of the pinball loss. Start from the
    whole population's target quantile; then, while some group's coverage on the calibration rows is more
    than ``z_under`` binomial standard errors below its target level (or ``z_over`` above it), shift that
    group's theta so that its coverage is exactly its target (the group's target quantile of s - q; the most
    significant deviation first). At the fixed point every group's calibration coverage lies within
    [target - z_under se, target + z_over se]. Requiring significance keeps small groups from being fitted to
    noise (they borrow strength from the larger groups that contain them): with exact patching of every
    deviation the held-out coverage was measurably worse. Finite-sample correction: group g's target is
    ceil((n_g + 1) * level) / n_g (the split-conformal rank within the group) with
    level = 1 - delta + margin + margin_z * sqrt(delta (1 - delta) / n) + group_margin * se_g.

    ``gcp-cv``: ``gcp`` with the global ``margin`` chosen by ``cv_folds``-fold cross-validation on the
    calibration rows: the smallest margin in 0, 0.005, ..., 0.05 whose out-of-fold coverage is not below
    1 - delta overall nor significantly below it (one-sided z > ``cv_z``) in any group (``margin_z`` is 0 then).

    ``mondrian-std``: theta_g = the split-conformal quantile of s within g; q(x) = max over x's groups.
    Valid for every group with at least ceil(1/delta) - 1 calibration rows, by construction; conservative.

    ``mondrian-relaxed``: ``mondrian-std`` at a common relaxed miscoverage delta' >= delta, the largest (by
    bisection) for which every group's calibration coverage under the max-combined thresholds stays within
    ``z_under`` standard errors of the same targets as ``gcp``, and the whole population reaches its level.
    """
    n, G = memb.n, memb.n_groups
    s = np.asarray(s, dtype=float)
    n_g = memb.sizes.astype(float)
    info = {"iterations": 0, "converged": True}
    if approach == "mondrian-std":
        out = (_group_conformal(memb, s, [delta])[:, 0], "max")
        return (*out, info) if return_info else out
    se = np.sqrt(delta * (1 - delta) / np.maximum(n_g, 1.0))
    if approach == "mondrian-relaxed":
        level = 1.0 - delta + margin + margin_z * math.sqrt(delta * (1 - delta) / max(n, 1))
        target = np.minimum(1.0, np.ceil((n_g + 1) * level - 1e-12) / np.maximum(n_g, 1.0))
        pr, pg = _pairs(memb)

        def relaxed(d):
            th = _group_conformal(memb, s, [d])[:, 0]
            cov_row = s <= _row_max(memb, th)
            cov = np.bincount(pg, weights=cov_row[pr].astype(float), minlength=G) / np.maximum(n_g, 1.0)
            ok = bool(np.all((cov >= target - z_under * se)[n_g > 0]) and cov_row.mean() >= min(level, 1.0))
            return ok, th

        lo, hi = delta, max(delta, 0.6)
        for _ in range(25):
            mid = 0.5 * (lo + hi)
            if relaxed(mid)[0]:
                lo = mid
            else:
                hi = mid
        info["relaxed_delta"] = lo
        out = (relaxed(lo)[1], "max")
        return (*out, info) if return_info else out
    if approach == "gcp-cv":
        margin = cv_margin(memb, s, delta, folds=cv_folds, z_crit=cv_z, seed=seed, z_under=z_under,
                           z_over=z_over, correction=correction, group_margin=group_margin)
        margin_z = 0.0
        info["margin"] = margin
    elif approach in ("ridge-cqr", "cc"):
        raise MMCError(f"the '{approach}' thresholds are two-sided: use "
                       + ("fit_two_sided" if approach == "ridge-cqr" else "fit_conditional"))
    elif approach != "gcp":
        raise MMCError(f"unknown threshold approach {approach!r}; expected one of {', '.join(APPROACHES)}")
    level = np.minimum(1.0, 1.0 - delta + margin + margin_z * math.sqrt(delta * (1 - delta) / max(n, 1))
                       + np.asarray(group_margin, dtype=float) * se)
    if correction == "conformal":
        target = np.minimum(1.0, np.ceil((n_g + 1) * level - 1e-12) / np.maximum(n_g, 1.0))
    elif correction == "none":
        target = np.broadcast_to(level, (G,)).astype(float)
    else:
        raise MMCError(f"unknown correction {correction!r}; expected 'conformal' or 'none'")
    theta = np.zeros(G)
    if n == 0 or G == 0 or math.ceil((n + 1) * float(np.ravel(level)[0]) - 1e-12) > n:
        # too few calibration rows for the whole population's conformal rank: an infinite threshold (honest)
        theta[0] = np.inf
        info["too_few_rows"] = True
        return (theta, "sum", info) if return_info else (theta, "sum")
    theta[0] = _level_quantile(s, target[0])  # group 0 is the whole population
    pr, pg = _pairs(memb)
    q = np.full(n, theta[0])
    covered = s <= q
    cnt = np.bincount(pg, weights=covered[pr].astype(float), minlength=G)
    max_iter = 20 * G + 100 if max_iter is None else max_iter
    it = 0
    while True:
        zscore = np.where(n_g > 0, (cnt / np.maximum(n_g, 1.0) - target) / se, 0.0)
        excess = np.maximum(-zscore - z_under, 0.0) + np.maximum(zscore - z_over, 0.0)
        k = int(np.argmax(excess))
        if excess[k] <= 0:
            break
        if it >= max_iter:
            info["converged"] = False
            break
        it += 1
        rows = memb.group_rows(k)
        step = _level_quantile(s[rows] - q[rows], target[k])
        theta[k] += step
        q[rows] += step
        new = s[rows] <= q[rows]
        changed = rows[new != covered[rows]]
        if changed.size:
            loc, gids = memb.pairs_for_rows(changed)
            sign = np.where(new[np.searchsorted(rows, changed)], 1.0, -1.0)
            cnt += np.bincount(gids, weights=sign[loc], minlength=G)
            covered[changed] = ~covered[changed]
    info["iterations"] = it
    return (theta, "sum", info) if return_info else (theta, "sum")


def _subset_membership(memb, rows: np.ndarray):
    """The membership of a subset of rows (renumbered 0..len(rows)-1, order kept)."""
    from .groups import Membership

    inside = np.zeros(memb.n, dtype=bool)
    inside[rows] = True
    pos = np.full(memb.n, -1, dtype=np.int64)
    pos[rows] = np.arange(rows.size)
    keep = inside[memb.rows]
    pg = memb.pair_groups()[keep]
    new_rows = pos[memb.rows[keep]]
    counts = np.bincount(pg, minlength=memb.n_groups)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Membership(int(rows.size), list(memb.names), indptr, new_rows)


def cv_margin(memb, s: np.ndarray, delta: float, margins=None, folds: int = 5, z_crit: float = 2.33,
              seed: int = 0, **kw) -> float:
    """The smallest global margin (coverage units) whose K-fold out-of-fold coverage passes a one-sided
    binomial (normal) test of coverage >= 1 - delta at ``z_crit`` in every group, and >= 1 - delta overall."""
    margins = np.arange(0.0, 0.0501, 0.005) if margins is None else np.asarray(margins, dtype=float)
    n = memb.n
    fold = np.random.default_rng(seed).permutation(n) % folds
    n_g = memb.sizes.astype(float)
    se = np.sqrt(delta * (1 - delta) / np.maximum(n_g, 1.0))
    pr, pg = _pairs(memb)
    for mg in margins:
        covered = np.zeros(n, dtype=bool)
        for k in range(folds):
            tr, te = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            mt = _subset_membership(memb, tr)
            theta, combine = fit_threshold(mt, s[tr], delta, "gcp", margin=mg, margin_z=0.0, **kw)
            me = _subset_membership(memb, te)
            q = _threshold_rows(me, theta, combine)
            covered[te] = s[te] <= q
        cov = np.bincount(pg, weights=covered[pr].astype(float), minlength=memb.n_groups) / np.maximum(n_g, 1.0)
        z = (cov - (1 - delta)) / se
        if covered.mean() >= 1 - delta and np.all(z[n_g > 0] >= -z_crit):
            return float(mg)
    return float(margins[-1])


def _level_quantile(r: np.ndarray, level: float) -> float:
    """The smallest value c with mean(r <= c) >= level (the ceil(level * n)-th smallest)."""
    r = np.sort(r)
    k = min(max(math.ceil(level * r.size - 1e-9), 1), r.size)
    return float(r[k - 1])


# ---- the two-sided ridge-penalized group quantile regression (approach "ridge-cqr") -----------------------
# Defaults chosen with benchmarks/coverage_protocol.py on tuning seeds 0-99 (see its notes): the ridge weight of
# a group's coefficient (in units of the pooled-standardized score: a group of n_g calibration rows keeps about
# n_g f / (n_g f + 2 lambda) of its effect, f the score's density at the quantile), the weaker weight of the
# groups whose out-of-fold miss rate is significantly too high, the significance of that test, and the folds.
RIDGE_LAMBDA = 40.0
RIDGE_LAMBDA_FLAGGED = 2.0
FLAG_Z = 2.0
CV_FOLDS = 5
MIN_RIDGE_ROWS = 100  # fewer calibration rows: the pooled symmetric score (split conformal), then the patch


class _Design:
    """The 0/1 design of a membership (row x group), with the few operations the quantile regression needs.

    Rows with the same set of groups share a signature; when the (signature, group) pairs are few (at most
    DENSE_PER_PAIR x the (row, group) pairs' worth of a dense (signatures x groups) matrix) the sums run over
    those pairs and the rows are gathered from their signature, else over the (row, group) pairs. Every sum is
    a bincount (a fixed summation order): a BLAS product would make the fitted thresholds, and so the saved
    model, depend in the last bits on the BLAS thread count."""

    DENSE_PER_PAIR = 16

    def __init__(self, memb):
        self.memb = memb
        self.n, self.G = memb.n, memb.n_groups
        self.pr, self.pg = _pairs(memb)
        self.A = None
        self.sig, self.n_sig = np.zeros(self.n, dtype=np.int64), 1
        if self.n and self.G:
            self.sig, self.n_sig = memb.signatures()
            if self.n_sig * self.G <= self.DENSE_PER_PAIR * max(self.pr.size, 1):
                self.A = memb.signature_matrix(self.sig, self.n_sig)
                self.sr, self.sg = np.nonzero(self.A)  # (signature, group) pairs, row-major

    def fit(self, theta: np.ndarray) -> np.ndarray:
        if self.A is not None:
            return np.bincount(self.sr, weights=theta[self.sg], minlength=self.n_sig)[self.sig]
        return np.bincount(self.pr, weights=theta[self.pg], minlength=self.n)

    def gsum(self, v: np.ndarray) -> np.ndarray:
        if self.A is not None:
            vs = np.bincount(self.sig, weights=v, minlength=self.n_sig)
            return np.bincount(self.sg, weights=vs[self.sr], minlength=self.G)
        return np.bincount(self.pg, weights=v[self.pr], minlength=self.G)

    def band(self, rows: np.ndarray):
        """The distinct group patterns of the given rows: (0/1 matrix (patterns, G), rows per pattern)."""
        if rows.size == 0:
            return np.zeros((0, self.G)), np.zeros(0)
        _, first, counts = np.unique(self.sig[rows], return_index=True, return_counts=True)
        return self.dense_rows(rows[first]), counts.astype(float)

    def dense_rows(self, rows: np.ndarray) -> np.ndarray:
        """0/1 matrix (len(rows), G) of the groups of the given distinct rows."""
        if self.A is not None:
            return self.A[self.sig[rows]]
        out = np.zeros((rows.size, self.G))
        if rows.size:
            loc, gid = self.memb.pairs_for_rows(rows)
            out[loc, gid] = 1.0
        return out


def _smooth_pinball(r: np.ndarray, tau: float, h: float) -> np.ndarray:
    """The pinball loss of level tau with its kink rounded to a parabola on [-h, h] (C^1, convex)."""
    quad = (r + h) ** 2 / (4 * h) + (tau - 1) * r
    return np.where(r < -h, (tau - 1) * r, np.where(r > h, tau * r, quad))


def _newton_direction(B: np.ndarray, w, d: np.ndarray, d0: float, g: np.ndarray) -> np.ndarray:
    """Solve (B' diag(w) B + diag(d) + d0 e0 e0') x = g, with d[0] = 0 and d[1:] > 0 (w a scalar or one weight
    per row of B). With b rows and G groups: O(b^2 G + b^3) by Woodbury on the penalized groups and a Schur
    complement for the unpenalized population group 0 when b < G, a dense G x G solve otherwise."""
    w = np.broadcast_to(np.asarray(w, dtype=float), (B.shape[0],))
    if B.shape[0] >= B.shape[1]:
        H = (B.T * w) @ B + np.diag(d)
        H[0, 0] += d0
        return np.linalg.solve(H, g)
    b0, Br = B[:, 0], B[:, 1:]
    dr = d[1:]
    a = float(w @ (b0 * b0)) + d0
    c = Br.T @ (w * b0)
    rhs = np.stack([g[1:], c], axis=1) / dr[:, None]          # D^-1 [g_r, c]
    act = np.flatnonzero(Br.any(axis=0))                       # groups holding none of the b rows: M = D there
    if act.size:
        Ba, da = Br[:, act], dr[act]
        K = np.diag(1.0 / w) + (Ba / da[None, :]) @ Ba.T
        rhs[act] -= (Ba.T @ np.linalg.solve(K, Ba @ rhs[act])) / da[:, None]
    y1, y2 = rhs[:, 0], rhs[:, 1]                              # M^-1 g_r, M^-1 c
    x0 = (g[0] - c @ y1) / (a - c @ y2)
    return np.concatenate([[x0], y1 - y2 * x0])


def _qr_ridge(des: _Design, s: np.ndarray, tau: float, lam: np.ndarray, h: float, theta0: np.ndarray,
              max_iter: int = 50, xtol: float = 1e-3):
    """min_theta sum_i rho_tau,h(s_i - sum_{g ni i} theta_g) + sum_g lam_g theta_g^2 (lam_0 = 0): group-additive
    quantile regression with a ridge penalty, by damped Newton steps (curvature 1 / (2h) from the rows inside the
    rounded kink, 2 lam_g from the penalty, plus one row's worth for the population group so that a step is
    bounded when no row is inside the kink; Armijo backtracking). Returns (theta, iterations, converged)."""
    w = 1.0 / (2 * h)
    d = 2 * lam.astype(float)
    d[0] = 0.0
    theta = theta0.astype(float).copy()
    fit = des.fit(theta)

    def objective(th, ft):
        return float(_smooth_pinball(s - ft, tau, h).sum() + np.sum(lam * th * th))

    f_old = objective(theta, fit)
    for it in range(1, max_iter + 1):
        r = s - fit
        psi = np.clip((r + h) * w, 0.0, 1.0) + (tau - 1.0)
        grad = -des.gsum(psi) + 2 * lam * theta
        B, counts = des.band(np.flatnonzero(np.abs(r) <= h))  # rows sharing a group pattern are merged
        step = _newton_direction(B, w * counts, d, w, grad)
        slope = float(grad @ step)
        dfit = des.fit(step)
        t = 1.0
        while True:
            cand, cfit = theta - t * step, fit - t * dfit
            f_new = objective(cand, cfit)
            if f_new <= f_old - 1e-4 * t * slope or t < 1e-8:
                break
            t *= 0.5
        if f_new > f_old:
            return theta, it, True  # no descent left at machine precision
        theta, fit, f_old = cand, cfit, f_new
        if t * float(np.max(np.abs(step))) < xtol:
            return theta, it, True
    return theta, max_iter, False


def _band_halfwidth(s: np.ndarray, tau: float) -> float:
    """Half-width h of the rounded kink: half the spread of the pooled quantiles tau -+ w, w = 2% of the mass
    (between 10 and 60 rows' worth), so that about 2 w n rows lie inside it."""
    n = s.size
    wm = max(min(0.02, 60.0 / n), 10.0 / n)
    lo, hi = np.quantile(s, [max(tau - wm, 0.0), min(tau + wm, 1.0)])
    return float(max((hi - lo) / 2, 1e-9 * (float(np.std(s)) + 1.0)))


def _conformal_rank_value(e: np.ndarray, level: float) -> float:
    """The ceil((n + 1) level)-th smallest value (inf when that rank exceeds n)."""
    k = math.ceil((e.size + 1) * level - 1e-12)
    if k > e.size:
        return math.inf
    return float(np.sort(e)[max(k, 1) - 1])


def _patch_up(des: _Design, e: np.ndarray, t: float, level: float, delta: float, z: float):
    """Additive per-group raises of the threshold t on the score e until no group's coverage of e <= t + raises
    is more than z binomial standard errors sqrt(delta (1 - delta) / n_g) below level: each step lifts the most
    deficient group to level (its smallest raise reaching it). Thresholds only grow, so a lifted group stays
    lifted and the loop ends after at most G steps. Returns (raises, steps)."""
    n_g = des.memb.sizes.astype(float)
    se = np.sqrt(delta * (1 - delta) / np.maximum(n_g, 1.0))
    extra = np.zeros(des.G)
    q = np.full(des.n, t)
    steps = 0
    for steps in range(des.G + 1):
        cov = des.gsum((e <= q).astype(float)) / np.maximum(n_g, 1.0)
        zs = np.where(n_g > 0, (cov - level) / se, 0.0)
        k = int(np.argmin(zs))
        if zs[k] >= -z:
            break
        rows = des.memb.group_rows(k)
        step = _level_quantile(e[rows] - q[rows], level)
        extra[k] += step
        q[rows] += step
    return extra, steps


def _fit_two_sided(memb, u: np.ndarray, deltas, *, lam: float = RIDGE_LAMBDA,
                  lam_flagged: float = RIDGE_LAMBDA_FLAGGED, flag_z: float = FLAG_Z, margin_z: float = MARGIN_Z,
                  z_patch: float = Z_UNDER, folds: int = CV_FOLDS, seed: int = 0, return_info: bool = False):
    """Lower and upper thresholds on the signed score ``u`` (interval u in [-q_lo(x), q_hi(x)]) for every delta.

    ``ridge-cqr``: conformalized quantile regression over the groups, asymmetric, with shrinkage.

    1. For each side (s = u for the upper end, s = -u for the lower one) a group-additive quantile regression
       q_side(x) = sum_g theta_g [x in g] at level p = 1 - (1 - level) / 2, level = 1 - delta + margin_z
       sqrt(delta (1 - delta) / n), penalized by lam theta_g^2 for every group but the population (scores divided
       by their standard deviation first, so lam means the same on every scale): groups borrow strength from
       the pooled fit instead of being fitted to noise (:func:`_qr_ridge`).
    2. Groups whose out-of-fold (``folds``-fold cross-fitted) two-sided miss rate is significantly above
       1 - level (one-sided z > ``flag_z``, continuity corrected) get the weak weight ``lam_flagged`` and both
       sides are refitted: a real group effect is then fitted almost fully while the rest stay shrunk.
    3. Conformal shift (CQR): t = the conformal-rank quantile, at ``level``, of the out-of-fold scores
       E = max(s_up - q_up^(-k)(x), s_lo - q_lo^(-k)(x)); both sides move out by t.
    4. Patch (:func:`_patch_up`): every group's coverage of the final thresholds on the calibration rows is
       at least level - z_patch sqrt(delta (1 - delta) / n_g) (the fixed point; usually already true).

    With fewer than ``MIN_RIDGE_ROWS`` rows steps 1-2 are skipped (q_side = 0, so E = |u|: split conformal on the
    score, then the patch). Returns (theta_up, theta_lo), arrays (len(deltas), G) in the units of ``u`` with
    inf where the conformal rank exceeds n (and a dict of details with ``return_info``).
    """
    for name, v in (("lam", lam), ("lam_flagged", lam_flagged)):
        if not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
            raise MMCError(f"ridge-cqr: {name} must be a positive number, got {v!r}")
    if isinstance(folds, bool) or not isinstance(folds, numbers.Real) or folds != int(folds) or folds < 2:
        raise MMCError(f"ridge-cqr: folds must be an integer >= 2, got {folds!r}")
    folds = int(folds)
    u = np.asarray(u, dtype=float)
    deltas = np.asarray(deltas, dtype=float)
    n, G, D = memb.n, memb.n_groups, deltas.size
    up, lo = np.zeros((D, G)), np.zeros((D, G))
    info = {"flagged": [], "patched": [], "unconverged": []}
    if n == 0 or G == 0:
        up[:, :1] = lo[:, :1] = np.inf
        return (up, lo, info) if return_info else (up, lo)
    su = float(np.std(u))
    su = su if math.isfinite(su) and su > 0 else 1.0
    x = u / su
    des = _Design(memb)
    n_g = memb.sizes.astype(float)
    use_qr = n >= MIN_RIDGE_ROWS
    if use_qr:
        fold = np.random.default_rng(seed).permutation(n) % folds
        parts = []
        for k in range(folds):
            tr, te = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            parts.append((tr, te, _Design(_subset_membership(memb, tr)), _Design(_subset_membership(memb, te))))
        warm = {}
    base_lam = np.full(G, float(lam))
    base_lam[0] = 0.0
    for j in np.argsort(-deltas):  # decreasing delta: increasing levels, each fit warm-started from the last
        delta = float(deltas[j])
        level = min(1.0, 1.0 - delta + margin_z * math.sqrt(delta * (1 - delta) / n))
        if math.ceil((n + 1) * level - 1e-12) > n:  # too few rows for the conformal rank: unbounded (honest)
            up[j, 0] = lo[j, 0] = np.inf
            continue
        if use_qr:
            p = min(max(1.0 - (1.0 - level) / 2, 0.5), 1.0 - 0.5 / n)
            sides = (x, -x)
            hs = [_band_halfwidth(s, p) for s in sides]

            def fit_sides(lams, start):
                # start[(side, fold)]: warm starts (fold -1 = all rows); returns [(theta, out-of-fold fit)] per side
                out, fits = [], {}
                for i, s in enumerate(sides):
                    th0 = start.get((i, -1))
                    if th0 is None:
                        th0 = np.zeros(G)
                        th0[0] = np.quantile(s, p)
                    th, _, ok = _qr_ridge(des, s, p, lams[i], hs[i], th0)
                    if not ok and delta not in info["unconverged"]:
                        info["unconverged"].append(delta)
                    fits[(i, -1)] = th
                    oof = np.empty(n)
                    for k, (tr, te, dtr, dte) in enumerate(parts):
                        thk, _, _ = _qr_ridge(dtr, s[tr], p, lams[i], hs[i], start.get((i, k), th))
                        fits[(i, k)] = thk
                        oof[te] = dte.fit(thk)
                    out.append((th, oof))
                return out, fits

            res, base_fits = fit_sides((base_lam, base_lam), warm)
            warm = base_fits
            miss = ((x > res[0][1]) | (-x > res[1][1])).astype(float)
            m = 1.0 - level
            zs = (des.gsum(miss) - 0.5 - n_g * m) / np.sqrt(np.maximum(n_g * m * (1 - m), 1e-12))
            flags = (zs > flag_z) & (n_g > 0)
            flags[0] = False
            if flags.any():
                lam_j = np.where(flags, float(lam_flagged), base_lam)
                res, _ = fit_sides((lam_j, lam_j), base_fits)
                info["flagged"].append((delta, int(flags.sum())))
            (th_up, oof_up), (th_lo, oof_lo) = res
            e_oof = np.maximum(x - oof_up, -x - oof_lo)
            e_in = np.maximum(x - des.fit(th_up), -x - des.fit(th_lo))
        else:
            th_up, th_lo = np.zeros(G), np.zeros(G)
            e_oof = e_in = np.abs(x)
        t = _conformal_rank_value(e_oof, level)
        extra, steps = _patch_up(des, e_in, t, level, delta, z_patch)
        if steps:
            info["patched"].append((delta, int(steps)))
        up[j] = su * (th_up + extra)
        lo[j] = su * (th_lo + extra)
        up[j, 0] += su * t
        lo[j, 0] += su * t
    return (up, lo, info) if return_info else (up, lo)


def _blas_single_thread():
    """A context in which BLAS/LAPACK run on one thread (threadpoolctl, installed with scikit-learn), so that the
    Newton solves of ridge-cqr give the same bits whatever OPENBLAS_NUM_THREADS says (a multi-threaded dgemm or
    dgetrf splits its sums differently); a no-op when threadpoolctl is missing."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn (a dependency) installs it
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def fit_two_sided(memb, u: np.ndarray, deltas, **kw):
    with _blas_single_thread():
        return _fit_two_sided(memb, u, deltas, **kw)


fit_two_sided.__doc__ = _fit_two_sided.__doc__


# ---- conditional conformal over the group indicators (approach "cc", the default) --------------------------
# Margin of the per-group level in binomial standard errors of the group's calibration count (see
# fit_conditional), the sweeps of exact block coordinate steps before the final upward pass.
CC_MARGIN = 0.75
CC_SWEEPS = 1
_CC_OPTIONS = ("margin", "sweeps", "two_sided")


def _disjoint_layers(memb) -> list:
    """The groups with calibration rows split into layers of pairwise disjoint groups (first fit, largest groups
    first): a coordinate step on every group of a layer at once is then exact (the groups share no row).
    Returns [(group ids, their rows concatenated, local group index per row)] per layer."""
    sizes = memb.sizes
    order = np.argsort(-sizes, kind="stable")
    layers, used = [], []
    for g in order:
        if sizes[g] == 0:
            continue
        rows = memb.group_rows(int(g))
        for li, mask in enumerate(used):
            if not mask[rows].any():
                mask[rows] = True
                layers[li].append(int(g))
                break
        else:
            mask = np.zeros(memb.n, dtype=bool)
            mask[rows] = True
            used.append(mask)
            layers.append([int(g)])
    out = []
    for gs in layers:
        gs = np.asarray(gs, dtype=np.int64)
        rows = np.concatenate([memb.group_rows(int(g)) for g in gs])
        loc = np.repeat(np.arange(gs.size), sizes[gs])
        out.append((gs, rows, loc))
    return out


def _layer_step(s, q, rows, loc, n_loc, k):
    """Per (delta, group of the layer): the k-th smallest of s - q over the group's rows ((D, n_loc) steps).
    ``s`` and ``q`` are (D, n), ``k`` (D, n_loc) ranks in 1..n_g. One float sort per delta: the values of group j
    are shifted by j x span (span > their range), so the groups come out in blocks, each sorted; the k-th value
    is read back from its block (exact up to a rounding of ~1e-16 x n_loc x span, far below the cushion that
    fit_conditional adds at the end)."""
    v = s[:, rows] - q[:, rows]                                # (D, P)
    vmin = v.min(axis=1, keepdims=True)
    span = float(np.max(v.max(axis=1, keepdims=True) - vmin)) * 2.0 + 1.0
    off = np.arange(n_loc) * span
    srt = np.sort(off[loc][None, :] + (v - vmin), axis=1)
    counts = np.bincount(loc, minlength=n_loc)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    kth = np.take_along_axis(srt, starts[None, :] + k - 1, axis=1)
    return kth - off[None, :] + vmin


def fit_conditional(memb, u: np.ndarray, deltas, *, margin: float = CC_MARGIN, sweeps: int = CC_SWEEPS,
                    two_sided: bool = True, return_info: bool = False):
    """Conditional conformal thresholds over the group indicators (Gibbs, Cherian & Candes) on the score ``u``.

    Score: s = max(u / a_up, -u / a_lo) with the pooled side scales a_up = the (1 - delta/2)-quantile of u and
    a_lo that of -u on the calibration rows (``two_sided=False``: s = |u|, a_up = a_lo = 1), so that one
    threshold t(x) gives the asymmetric interval u in [-t(x) a_lo, t(x) a_up].

    Threshold: t(x) = sum_g theta_g [x in g], the group-indicator quantile regression with every group's
    quantile condition taken at the conformal rank of the augmented sample: group g (n_g calibration rows) must
    have at least

        k_g = min(n_g, ceil((n_g + 1) tau_g)),   tau_g = 1 - delta + margin sqrt(delta (1 - delta) / n_g)

    of its calibration rows covered (the test point counted in the group as a miss: the augmentation of
    conditional conformal, plus ``margin`` binomial standard errors of the group's own count). Solved by
    ``sweeps`` sweeps of exact block coordinate steps of the tilted pinball loss (the groups are split into
    layers of disjoint groups; a step sets each group of the layer to exactly k_g covered rows), then one
    upward-only pass over the layers: after it EVERY group has at least k_g covered calibration rows (a raise
    only adds coverage to the groups already passed). All deltas at once, vectorized.

    Returns (theta_up, theta_lo): (len(deltas), G) in the units of ``u`` (interval u in [-sum theta_lo,
    sum theta_up]), inf for a delta whose pooled conformal rank exceeds n (and details with ``return_info``).
    """
    if not isinstance(margin, numbers.Real) or isinstance(margin, bool) or not math.isfinite(margin) or margin < 0:
        raise MMCError(f"cc: margin must be a non-negative number, got {margin!r}")
    if isinstance(sweeps, bool) or not isinstance(sweeps, numbers.Real) or sweeps != int(sweeps) or sweeps < 0:
        raise MMCError(f"cc: sweeps must be a non-negative integer, got {sweeps!r}")
    u = np.asarray(u, dtype=float)
    deltas = np.asarray(deltas, dtype=float)
    n, G, D = memb.n, memb.n_groups, deltas.size
    up, lo = np.zeros((D, G)), np.zeros((D, G))
    info = {"side_scales": [], "too_few_rows": []}
    if n == 0 or G == 0:
        up[:, :1] = lo[:, :1] = np.inf
        return (up, lo, info) if return_info else (up, lo)
    if two_sided:
        a_up = np.quantile(u, 1 - deltas / 2)
        a_lo = np.quantile(-u, 1 - deltas / 2)
        fb = max(float(np.quantile(np.abs(u), 0.5)), 1e-12)
        a_up = np.where(a_up > 0, a_up, fb)
        a_lo = np.where(a_lo > 0, a_lo, fb)
    else:
        a_up = a_lo = np.ones(D)
    s = np.maximum(u[None, :] / a_up[:, None], -u[None, :] / a_lo[:, None])   # (D, n)
    n_g = memb.sizes.astype(float)
    se = np.sqrt(deltas[:, None] * (1 - deltas[:, None]) / np.maximum(n_g, 1.0)[None, :])
    tau = 1 - deltas[:, None] + float(margin) * se
    k = np.minimum(np.ceil((n_g[None, :] + 1) * tau - 1e-9), n_g[None, :]).astype(np.int64)
    k = np.maximum(k, 1)
    ok_d = np.ceil((n + 1) * (1 - deltas) - 1e-12) <= n       # the pooled conformal rank exists
    theta = np.zeros((D, G))
    q = np.zeros((D, n))
    layers = _disjoint_layers(memb)
    for rnd in range(int(sweeps) + 1):
        upward = rnd == int(sweeps)
        for gs, rows, loc in layers:
            step = _layer_step(s, q, rows, loc, gs.size, k[:, gs])
            if upward:
                step = np.maximum(step, 0.0)
            theta[:, gs] += step
            q[:, rows] += step[:, loc]
    # a cushion far below any meaningful width against rounding (thresholds are re-summed in another order)
    theta[:, 0] += 1e-9 * (1.0 + np.max(np.abs(q), axis=1))
    info["side_scales"] = [(float(a), float(b)) for a, b in zip(a_up, a_lo)]
    info["too_few_rows"] = [float(d) for d in deltas[~ok_d]]
    up = theta * a_up[:, None]
    lo = theta * a_lo[:, None]
    up[~ok_d, 0] = lo[~ok_d, 0] = np.inf
    return (up, lo, info) if return_info else (up, lo)


# ---- calibration (called by MomentMulticalibrator.fit on the held-out rows) -----------------------------
def _predict_on(model, table, base_unit, n):
    memb = model.groups.evaluate(table, n)
    mu, moms = model.initial(memb.n, base_unit)
    mu, moms = model.replay(memb, mu, moms)
    return memb, mu, moms


def _std_scale(model, moms: dict, floor: float | None):
    if 2 not in model.moments:
        return None
    return np.sqrt(np.maximum(moms[2], floor))


def calibrate(model, table_cal, y_cal_unit, base_cal_unit, *, approach: str = DEFAULT_APPROACH,
              options: dict | None = None) -> dict:
    """Everything the data-driven intervals need, computed on held-out calibration rows.

    ``model`` is final (its log is the kept one); ``y_cal_unit`` are the labels on the unit scale,
    ``base_cal_unit`` the base prediction on the unit scale (or None). Returns the JSON-serialisable record
    described in the module docstring. ``approach`` / ``options`` select the thresholds of the ``calibrated``
    method (``ridge-cqr``: :func:`fit_two_sided`; the symmetric ones: :func:`fit_threshold`).
    """
    y = np.asarray(y_cal_unit, dtype=float)
    n = int(y.size)
    if n == 0:
        raise MMCError("interval calibration needs at least one held-out row")
    base_unit = None if base_cal_unit is None else np.clip(np.asarray(base_cal_unit, dtype=float), 0.0, 1.0)
    memb, mu, moms = _predict_on(model, table_cal, base_unit, n)
    deltas = np.asarray(DELTA_GRID)
    if base_unit is not None:
        center, center_kind = base_unit, "base"
    else:
        center, center_kind = np.full(n, _initial_constant(model)), "constant"
    r_base = np.abs(y - center)
    rec = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "n": n, "deltas": [float(d) for d in deltas],
           "center": center_kind}
    # moments: distribution of the predictions (for choosing a) and held-out plug-in coverage
    qs = np.linspace(0, 1, N_MOMENT_QUANTILES)
    rec["moment_quantiles"] = {str(a): _to_json_list(np.quantile(moms[a], qs)) for a in model.moments}
    cover = {}
    for a in usable_moments(model):
        dev = np.abs(y - mu) ** a
        cov = np.mean(dev[:, None] <= np.maximum(moms[a], 0.0)[:, None] / deltas[None, :], axis=0)
        cover[str(a)] = _to_json_list(cov)
    rec["plugin_coverage"] = cover
    # baselines
    srt = np.sort(r_base)
    k = np.ceil((n + 1) * (1 - deltas) - 1e-12).astype(np.int64)
    rec["split_conformal"] = _to_json_list(np.where(k <= n, srt[np.clip(k, 1, n) - 1], np.inf))
    mq = _group_conformal(memb, r_base, deltas)
    rec["mondrian"] = {"n": [int(v) for v in memb.sizes], "q": [_to_json_list(row) for row in mq]}
    rec["gaussian"] = {"sd": float(np.sqrt(np.mean(r_base**2)))}
    # the multicalibrated threshold on the standardized score
    opts = dict(options or {})
    floor_fraction = float(opts.pop("floor_fraction", FLOOR_FRACTION))
    if approach not in APPROACHES:
        raise MMCError(f"unknown threshold approach {approach!r}; expected one of {', '.join(APPROACHES)}")
    if 2 in model.moments:
        floor = float(floor_fraction * max(float(np.mean(moms[2])), 1e-12))
        u = (y - mu) / np.sqrt(np.maximum(moms[2], floor))
        scale_kind = "m2"
    else:
        floor, scale_kind = 0.0, "none"
        u = y - mu
    thetas, combine, unconverged, extra = [], "sum", [], {}
    if approach in ("ridge-cqr", "cc"):
        fitter = fit_two_sided if approach == "ridge-cqr" else fit_conditional
        unknown = sorted(set(opts) - set(_CC_OPTIONS)) if approach == "cc" else []
        if unknown:
            raise MMCError(f"cc: unknown option(s) {', '.join(unknown)}; expected {', '.join(_CC_OPTIONS)}")
        up, lo, info = fitter(memb, u, deltas, return_info=True, **opts)
        thetas = [_to_json_list(row) for row in up]
        extra["theta_lower"] = [_to_json_list(row) for row in lo]
        unconverged = sorted(info.get("unconverged", []))
    else:
        s = np.abs(u)
        for d in deltas:
            th, combine, info = fit_threshold(memb, s, float(d), approach, return_info=True, **opts)
            thetas.append(_to_json_list(th))
            if not info["converged"]:
                unconverged.append(float(d))
    rec["calibrated"] = {"approach": approach, "options": _json_options(opts), "floor_fraction": floor_fraction,
                         "scale": scale_kind, "floor": floor, "combine": combine,
                         "n": [int(v) for v in memb.sizes], "theta": thetas, **extra,
                         "unconverged_deltas": unconverged}
    return rec


def _json_options(opts: dict) -> dict:
    out = {}
    for k, v in opts.items():
        if isinstance(v, (bool, str)) or v is None:
            out[k] = v
        elif isinstance(v, numbers.Real):
            out[k] = float(v)
        else:
            out[k] = [float(x) for x in np.ravel(v)]
    return out


def _initial_constant(model) -> float:
    if model.init_mean.get("kind") == "constant":
        return float(model.init_mean["value"])
    return 0.5


# ---- validation of the stored record ----------------------------------------------------------------------
def _record(model, method: str) -> dict:
    rec = model.extras.get("intervals") if isinstance(model.extras, dict) else None
    if not rec:
        raise MMCError(
            f"the '{method}' interval needs held-out calibration rows, but this model was fitted without them "
            "(calibration fraction 0): refit with --calibration-fraction 0.25 (or calibration_fraction=0.25)")
    if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT:
        raise ModelFormatError("model extras: 'intervals' is not an mmc-intervals calibration record")
    if rec.get("version") != RECORD_VERSION:
        raise ModelFormatError(f"model extras: intervals version {rec.get('version')!r} is not supported "
                               f"(this mmc-audit reads version {RECORD_VERSION})")
    return rec


def _record_deltas(rec) -> np.ndarray:
    d = _from_json_list(rec.get("deltas"), "deltas", allow_null=False)
    if d.size == 0 or np.any(d <= 0) or np.any(d >= 1) or np.any(np.diff(d) <= 0):
        raise ModelFormatError("model extras: intervals.deltas must be increasing numbers in (0, 1)")
    return d


def _record_matrix(rec_part, key, where, n_rows, n_cols, nonneg=True) -> np.ndarray:
    rows = rec_part.get(key) if isinstance(rec_part, dict) else None
    if not isinstance(rows, list) or len(rows) != n_rows:
        raise ModelFormatError(f"model extras: intervals.{where}.{key} must be a list of {n_rows} lists")
    out = np.vstack([_from_json_list(r, f"{where}.{key}[{i}]", n_cols) for i, r in enumerate(rows)]) \
        if n_rows else np.zeros((0, n_cols))
    if nonneg and np.any(out < 0):
        raise ModelFormatError(f"model extras: intervals.{where}.{key} has negative values")
    return out


def _finite_nonneg(v, where):
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise ModelFormatError(f"model extras: intervals.{where} = {v!r} must be a non-negative number")
    return float(v)


# ---- prediction -------------------------------------------------------------------------------------------
def _n_rows(table) -> int:
    if hasattr(table, "shape"):
        return int(table.shape[0])
    try:
        return len(next(iter(table.values())))
    except StopIteration:
        raise MMCError("the table has no columns") from None


class _Context:
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
            raise MMCError(f"this model was fitted on a base prediction{f' ({col})' if col else ''}: pass it "
                           "(base=..., or --pred COL)")
        self.memb, self.mu, self.moms = _predict_on(model, table, self.base_unit if model.uses_base else None, n)
        self.n = self.memb.n

    def center(self, rec) -> np.ndarray:
        kind = rec.get("center")
        if kind == "base":
            if self.base_unit is None:
                raise MMCError("this model's baselines were calibrated on a base prediction: pass it")
            return self.base_unit
        if kind == "constant":
            return np.full(self.n, _initial_constant(self.model))
        raise ModelFormatError(f"model extras: intervals.center = {kind!r} must be 'base' or 'constant'")


def _reference_moments(ctx, a):
    """m_a values of the calibration rows (stored quantiles) or, lacking them, of the predicted rows."""
    rec = ctx.model.extras.get("intervals") if isinstance(ctx.model.extras, dict) else None
    if rec:
        mq = rec.get("moment_quantiles")
        if isinstance(mq, dict) and str(a) in mq:
            v = _from_json_list(mq[str(a)], f"moment_quantiles.{a}", allow_null=False)
            if np.any(v < 0):
                raise ModelFormatError(f"model extras: intervals.moment_quantiles.{a} has negative values")
            return v
    return ctx.moms[a]


def _choose_guaranteed(ctx, delta, gamma, moment=None):
    use = _need_moments(ctx.model, "guaranteed")
    if moment is not None:
        if moment not in use:
            raise MMCError(f"moment {moment} is not usable for intervals; usable: {list(use)}")
        return moment
    widths = {a: float(np.mean(guaranteed_halfwidth(ctx.model, _reference_moments(ctx, a), a, delta, gamma)))
              for a in use}
    return min(widths, key=widths.get)


def _choose_plugin(ctx, delta, moment=None):
    use = _need_moments(ctx.model, "plugin")
    if moment is not None:
        if moment not in use:
            raise MMCError(f"moment {moment} is not usable for intervals; usable: {list(use)}")
        return moment, None
    rec = ctx.model.extras.get("intervals") if isinstance(ctx.model.extras, dict) else None
    widths = {a: float(np.mean(plugin_halfwidth(_reference_moments(ctx, a), a, delta))) for a in use}
    if not rec:
        return min(widths, key=widths.get), None
    rec = _record(ctx.model, "plugin")
    deltas = _record_deltas(rec)
    k = grid_delta(delta, deltas)
    pc = rec.get("plugin_coverage")
    if not isinstance(pc, dict):
        raise ModelFormatError("model extras: intervals.plugin_coverage must be an object")
    cov = {}
    for a in use:
        if str(a) not in pc:
            raise ModelFormatError(f"model extras: intervals.plugin_coverage lacks moment {a}")
        c = _from_json_list(pc[str(a)], f"plugin_coverage.{a}", deltas.size, allow_null=False)
        if np.any((c < 0) | (c > 1)):
            raise ModelFormatError(f"model extras: intervals.plugin_coverage.{a} must lie in [0, 1]")
        cov[a] = float(c[k])
    ok = [a for a in use if cov[a] >= 1 - delta]
    best = min(ok, key=widths.get) if ok else max(use, key=cov.get)
    return best, cov[best]


def _half_guaranteed(ctx, delta, gamma, moment=None):
    _check_prob("gamma", gamma)
    a = _choose_guaranteed(ctx, delta, gamma, moment)
    return ctx.mu, guaranteed_halfwidth(ctx.model, ctx.moms[a], a, delta, gamma), {"moment": a}


def _half_plugin(ctx, delta, gamma, moment=None):
    a, cov = _choose_plugin(ctx, delta, moment)
    return ctx.mu, plugin_halfwidth(ctx.moms[a], a, delta), {"moment": a, "holdout_coverage": cov}


def greedy_cover(pair_rows: np.ndarray, pair_sets: np.ndarray, pair_width: np.ndarray, n_rows: int,
                 n_sets: int, eligible: np.ndarray, row_mass: np.ndarray | None = None):
    """The greedy algorithm for the Appendix's submodular-cost submodular cover.

    Sets and rows are given as incidence pairs: row ``pair_rows[k]`` lies in set ``pair_sets[k]``, where
    its width is ``pair_width[k]``. Only ``eligible`` sets may be chosen. Cost of a collection C:
    f(C) = sum_x P(x) max_{S in C, x in S} width(S, x); coverage g(C) = mass of the rows in some S of C.
    Each step adds the eligible set with the smallest (f(C + S) - f(C)) / (g(C + S) - g(C)) among the sets
    that cover new mass, until no eligible set covers anything new.

    Returns ``(chosen sets in order, per-row width (0 where uncovered), covered mask)``.
    """
    pair_rows = np.asarray(pair_rows, dtype=np.int64)
    pair_sets = np.asarray(pair_sets, dtype=np.int64)
    pair_width = np.asarray(pair_width, dtype=float)
    w = np.full(n_rows, 1.0 / max(n_rows, 1)) if row_mass is None else np.asarray(row_mass, dtype=float)
    elig = np.zeros(n_sets, dtype=bool)
    elig[np.asarray(eligible, dtype=np.int64)] = True
    keep = elig[pair_sets]
    pr, ps, pw = pair_rows[keep], pair_sets[keep], pair_width[keep]
    cur = np.zeros(n_rows)
    covered = np.zeros(n_rows, dtype=bool)
    chosen_mask = np.zeros(n_sets, dtype=bool)
    chosen = []
    while True:
        new_mass = np.bincount(ps, weights=w[pr] * ~covered[pr], minlength=n_sets)
        cand = (new_mass > 0) & ~chosen_mask
        if not cand.any():
            break
        inc = np.bincount(ps, weights=w[pr] * np.maximum(pw - cur[pr], 0.0), minlength=n_sets)
        ratio = np.where(cand, inc / np.where(cand, new_mass, 1.0), np.inf)
        best = int(np.argmin(ratio))
        chosen.append(best)
        chosen_mask[best] = True
        sel = ps == best
        r = pr[sel]
        cur[r] = np.maximum(cur[r], pw[sel])
        covered[r] = True
    return chosen, cur, covered


def _multimoment_cells(ctx, delta, gamma):
    """Incidence pairs (row, cell) over all usable moments, each cell's mass, and the widths."""
    model = ctx.model
    use = _need_moments(model, "multimoment")
    p = model.params
    m, G = p.m, ctx.memb.n_groups
    pr, pg = _pairs(ctx.memb)
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
    _check_prob("gamma", gamma)
    pr, ps, pw, n_sets, mass, use = _multimoment_cells(ctx, delta, gamma)
    eligible = np.flatnonzero(mass >= gamma * (1 - 1e-12))
    chosen, cur, covered = greedy_cover(pr, ps, pw, ctx.n, n_sets, eligible)
    half = np.where(covered, cur, np.nan)
    info = {"sets_chosen": len(chosen), "uncovered_rows": int((~covered).sum()), "moments": list(use)}
    return ctx.mu, half, info


def _threshold_rows(memb, theta: np.ndarray, combine: str) -> np.ndarray:
    if combine == "sum":  # an infinite theta (too few calibration rows) makes its rows' intervals unbounded
        return _row_sum(memb, theta)
    if combine == "max":
        return _row_max(memb, theta)
    raise ModelFormatError(f"model extras: intervals.calibrated.combine = {combine!r} must be 'sum' or 'max'")


def _half_calibrated(ctx, delta, gamma, moment=None):
    rec = _record(ctx.model, "calibrated")
    deltas = _record_deltas(rec)
    k = grid_delta(delta, deltas)
    part = rec.get("calibrated")
    if not isinstance(part, dict):
        raise ModelFormatError("model extras: intervals.calibrated must be an object")
    G = ctx.memb.n_groups
    rows_up = part.get("theta")
    if not isinstance(rows_up, list) or len(rows_up) != deltas.size:
        raise ModelFormatError(f"model extras: intervals.calibrated.theta must be a list of {deltas.size} lists")
    theta = _from_json_list(rows_up[k], f"calibrated.theta[{k}]", G)
    floor = _finite_nonneg(part.get("floor"), "calibrated.floor")
    scale_kind = part.get("scale")
    if scale_kind == "m2":
        if 2 not in ctx.model.moments:
            raise ModelFormatError("model extras: intervals.calibrated.scale is 'm2' but the model has no m_2")
        scale = np.sqrt(np.maximum(ctx.moms[2], floor))
    elif scale_kind == "none":
        scale = np.ones(ctx.n)
    else:
        raise ModelFormatError(f"model extras: intervals.calibrated.scale = {scale_kind!r} must be 'm2' or 'none'")
    q = _threshold_rows(ctx.memb, theta, part.get("combine"))
    info = {"grid_delta": float(deltas[k]), "approach": part.get("approach")}
    if "theta_lower" not in part:
        return ctx.mu, np.maximum(q, 0.0) * scale, info
    # Two-sided thresholds (ridge-cqr): [mu - max(q_lo, 0) sd, mu + max(q_up, 0) sd] (max(., 0) keeps mu inside),
    # made nested in delta: each end goes at least as far as at every larger grid delta (the hull of those
    # intervals). The two sides are fitted per delta, so without this an end could move inward as delta
    # decreases; widening never lowers a coverage.
    rows = part.get("theta_lower")
    if part.get("combine") != "sum":
        raise ModelFormatError("model extras: intervals.calibrated.theta_lower needs combine 'sum'")
    if not isinstance(rows, list) or len(rows) != deltas.size:
        raise ModelFormatError(f"model extras: intervals.calibrated.theta_lower must be a list of {deltas.size} lists")
    q_up, q_lo = np.maximum(q, 0.0), np.zeros(ctx.n)
    for j in range(k, deltas.size):
        q_lo = np.maximum(q_lo, _row_sum(ctx.memb, _from_json_list(rows[j], f"calibrated.theta_lower[{j}]", G)))
        if j > k:
            q_up = np.maximum(q_up, _row_sum(ctx.memb, _from_json_list(rows_up[j], f"calibrated.theta[{j}]", G)))
    return ctx.mu, (q_lo * scale, q_up * scale), info


def _half_split(ctx, delta, gamma, moment=None):
    rec = _record(ctx.model, "split-conformal")
    deltas = _record_deltas(rec)
    k = grid_delta(delta, deltas)
    q = _from_json_list(rec.get("split_conformal"), "split_conformal", deltas.size)
    if np.any(q < 0):
        raise ModelFormatError("model extras: intervals.split_conformal has negative values")
    return ctx.center(rec), np.full(ctx.n, q[k]), {"grid_delta": float(deltas[k])}


def _half_mondrian(ctx, delta, gamma, moment=None):
    rec = _record(ctx.model, "mondrian")
    deltas = _record_deltas(rec)
    k = grid_delta(delta, deltas)
    G = ctx.memb.n_groups
    qm = _record_matrix(rec.get("mondrian"), "q", "mondrian", G, deltas.size)
    half = _row_max(ctx.memb, qm[:, k])
    skipped = int(np.sum(~np.isfinite(qm[:, k])))
    return ctx.center(rec), half, {"grid_delta": float(deltas[k]), "groups_skipped": skipped}


def _half_gaussian(ctx, delta, gamma, moment=None):
    rec = _record(ctx.model, "gaussian")
    g = rec.get("gaussian")
    sd = _finite_nonneg(g.get("sd") if isinstance(g, dict) else None, "gaussian.sd")
    z = normal_ppf(1 - delta / 2)
    return ctx.center(rec), np.full(ctx.n, z * sd), {"z": z}


_HALF = {"guaranteed": _half_guaranteed, "plugin": _half_plugin, "multimoment": _half_multimoment,
         "calibrated": _half_calibrated, "split-conformal": _half_split, "mondrian": _half_mondrian,
         "gaussian": _half_gaussian}


def _unit_interval(ctx, method, delta, gamma, moment=None, clip=True):
    if method not in _HALF:
        raise MMCError(f"unknown interval method {method!r}; expected one of {', '.join(METHODS)}")
    _check_prob("delta", delta)
    _check_prob("gamma", gamma)
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


def predict_intervals(model, table, base=None, method: str = "calibrated", delta: float = 0.1,
                      gamma: float = 0.05, *, moment: int | None = None):
    """``(lower, upper)`` numpy arrays in the label's original units for the rows of ``table``.

    ``base`` is the base prediction in label units (required when the model was fitted on one). ``moment``
    fixes the moment of ``guaranteed`` / ``plugin`` (default: chosen as described in the module docstring).
    """
    ctx = _Context(model, table, base)
    lo, hi, _ = _unit_interval(ctx, method, delta, gamma, moment)
    return _to_original(model, lo, hi)


def available_methods(model) -> tuple:
    """The methods this model can compute (the rest raise MMCError saying why)."""
    out = []
    has_rec = bool(isinstance(model.extras, dict) and model.extras.get("intervals"))
    for m in METHODS:
        if m in ("guaranteed", "plugin", "multimoment") and not usable_moments(model):
            continue
        if m in ("calibrated", "split-conformal", "mondrian", "gaussian") and not has_rec:
            continue
        out.append(m)
    return tuple(out)


def interval_table(model, table, base=None, delta: float = 0.1, gamma: float = 0.05, methods=None,
                   skip_unavailable: bool = True, with_info: bool = False):
    """{method: (lower, upper)} in original units, the model's predictions computed once for all methods.

    ``methods`` defaults to every method; with ``skip_unavailable`` the ones the model cannot compute (see
    :func:`available_methods`, or a delta below the calibration grid) are left out instead of raising (a
    damaged calibration record still raises ModelFormatError). ``with_info`` also returns
    {method: details} (the moment chosen, the grid delta used, uncovered rows, ...).
    """
    _check_prob("delta", delta)
    _check_prob("gamma", gamma)
    ctx = _Context(model, table, base)
    methods = METHODS if methods is None else tuple(methods)
    avail = set(available_methods(model))
    out, info = {}, {}
    for m in methods:
        if m not in _HALF:
            raise MMCError(f"unknown interval method {m!r}; expected one of {', '.join(METHODS)}")
        if skip_unavailable and m not in avail:
            continue
        try:
            lo, hi, inf = _unit_interval(ctx, m, delta, gamma)
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

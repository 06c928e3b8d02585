"""Findings: statistical tests of the model's claims on labelled rows, with error control across all of them.

A *finding* is a model defect that the audit rows show beyond chance: for one group (or one group x mean
bucket cell), the predicted mean disagrees with the observed mean (``mean``, ``calibration``), the predicted
variance disagrees with the observed spread of the residuals (``variance``), or the prediction intervals cover
less than promised (``coverage``). Every test the audit makes enters one family; its p-values are adjusted
by Holm (family-wise error, the default) or Benjamini-Hochberg (false discovery rate), and a test becomes a
finding only when its *adjusted* p-value is below ``level``. Groups and cells with fewer than
``min_count`` rows are not tested at all (a 1-row group can neither be judged nor flagged).

The tests (r = y - mu(x), v = the predicted variance m_2(x), all on the audit rows):

- mean / calibration: H0 E[r] = 0 over the group (cell); two-sided t test of the mean of r with its
  sample standard error (n >= ``min_count`` rows; Student's t, not the normal: after a multiplicity
  adjustment the test runs at |t| ~ 3.5-4, where the normal tail is several times too small for 30-100 rows).
- variance: with u = r - mean(r over the group) (each group's residuals around their own mean, scaled by
  n / (n - 1)): H0 E[u^2] / E[v] within [1 / (1 + tol), 1 + tol] (``VARIANCE_TOLERANCE``, a materiality
  margin; tol = 0 is H0 E[u^2 - v] = 0): the one-sided skewness-corrected t test of the mean of
  u^2 - (1 + tol) v (understated) and of u^2 - v / (1 + tol) (overstated), the smaller p doubled. The
  estimate is the ratio observed / predicted = mean(u^2) / mean(v); a finding's interval is the ratios r0 the
  same test of u^2 - r0 v does not reject (:func:`ratio_test_interval`). The variance of u^2 - r0 v is at least
  (kappa - 1) R r0 mean(v^2), kappa the residuals' kurtosis pooled over the audit's rows and R the group's
  estimate (:func:`ratio_stat`): a group's own spread of u^2 understates a skewed tail when no large residual
  was drawn, exactly when its variance looks low.
  Centering keeps a group whose mean alone is off (the mean test's finding) from being reported as
  understating its uncertainty as well; its intervals' shortfall is the coverage test's.
- coverage: H0 coverage >= 1 - delta; the exact binomial test of the rows covered (lower tail, doubled); a
  finding's interval is its inversion, Clopper-Pearson's (:func:`clopper_pearson`).

A finding's interval is not the marginal 95% one above: a test is reported *because* its estimate is far from
0, so that estimate overshoots the truth (on the demo world the reported calibration findings' estimates were
1.56x the true difference in the median, and their 95% intervals covered it 70% of the time). Each finding's
interval is the same formula at confidence 1 - R level / m for R findings out of m tests (:func:`fcr_miss`,
Benjamini and Yekutieli 2005), which keeps the expected share of findings whose interval misses the truth at
most ``level`` (98-100% of them covered the truth there), and each inverts the finding's own test at that
level, so that it never reaches the no-effect value (issue 34). Findings are ranked by :func:`harm`.

*Disparities* are descriptive, not defects: a group whose predicted variance differs from the overall
level (bootstrap CI excluding 1) is *more uncertain*, which is what the model should say when it is true.
They are listed apart and never adjusted as tests.

Everything here is numpy: the normal and binomial tails (:mod:`mmc_core.auditing.distributions`) are computed with
``math.erfc`` and a continued fraction for the regularized incomplete beta function, checked against scipy in
the tests. How findings are written is :mod:`mmc_core.auditing.finding_text`.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from ..common.errors import MMCError
from .distributions import (  # the audit's callers and the tests read these as findings.X
    Z95,
    binom_cdf,
    norm_sf,
    normal_isf2,
    t_isf2,
    t_sf2,
    wilson_interval,
)
from .finding_text import P_FLOOR, describe, log_percent, p_words, percent, with_percent  # the app reads them here

__all__ = [
    "ADJUSTMENTS",
    "adjust_pvalues",
    "binom_cdf",
    "fcr_miss",
    "hall_interval",
    "normal_isf2",
    "ratio_interval",
    "t_isf2",
    "norm_sf",
    "wilson_interval",
    "group_tests",
    "select_findings",
    "status_of",
    "variance_disparities",
    "LABEL_SCALES",
    "log_percent",
    "with_percent",
    "Z95",
    # the words of findings (mmc_core.auditing.finding_text), read here by the app and the tests
    "P_FLOOR",
    "describe",
    "p_words",
    "percent",
]

ADJUSTMENTS = ("holm", "bh")
# A variance finding claims the model misstates a group's variance by more than this factor (1 + tol) beyond
# chance, not merely that the ratio is != 1. A 10% variance error is a 5% error in the interval width,
# below what an analyst acts on, and below what the fit can promise on a ~200-row group: its moments come
# from ~150 fitting rows, whose sample variance alone is off by 10-20%. Measured in the null world of
# benchmarks/null_world.py (base = the true mean, spread differs by group, 4000 fitting + 4000 audit rows),
# seeds 200-239 (not the seeds looked at while building it): 15/40 audits had a finding with tol = 0 (22
# variance findings, all of groups whose fitted variance is truly off by 1.2-1.4x), 3/40 with 0.1, 0.2 or
# 0.25 (none of them a variance finding).
VARIANCE_TOLERANCE = 0.1
# a variance disparity is listed only when the group's predicted variance differs from the overall level by at
# least this share: below it the "disparity" is rounding (an unfitted model's equal variances gave "1.0000
# times (95% CI 1.0000-1.0000): the model is more certain about this group")
DISPARITY_MIN = 0.01
# "log": the label is a natural logarithm (log wage, log price); mean errors are then also stated as percent
# differences of the original values, which is how an analyst reads them (0.05 log points is about 5.1%)
LABEL_SCALES = ("linear", "log")


def ratio_interval(est: float, se: float, n: int, z: float) -> tuple[float, float]:
    """The interval of a variance ratio ``est`` with delta-method standard error ``se`` over ``n`` rows at
    critical value ``z``: on the log scale in the form of Bonett's (2006) interval for a variance, centred at
    log(c R) and widened by c = n / (n - z) (a variance ratio is right-skewed: the symmetric interval covered
    the truth 84% of the time for groups under 150 rows with t5 noise; this one 89%, Laplace 90%, normal
    93.9%); a ratio of 0 (no spread observed at all) gets the symmetric one, floored at 0."""
    if est > 0 and math.isfinite(se) and n > z:
        c = n / (n - z)
        half = z * se / est * c
        return c * est * math.exp(-half), c * est * math.exp(half)
    return max(est - z * se, 0.0), est + z * se


def fcr_miss(n_found: int, n_tests: int, level: float) -> float:
    """The two-sided miss probability of each finding's interval: R level / m for R findings selected out of m
    tests (Benjamini and Yekutieli 2005). The marginal 1 - level interval of a finding is optimistic: it was
    selected *because* its estimate was far from 0, so the estimate overshoots (on the demo world the reported
    calibration findings' 95% intervals covered the truth 70% of the time, the estimates 1.56x the true
    difference in the median). Intervals at 1 - R level / m keep the expected share of findings whose interval
    misses the truth (the false coverage-statement rate) at most ``level`` for any selection rule when the
    estimates are independent (Benjamini and Yekutieli's theorem); the audit's groups overlap and its cells nest
    in groups, so here it is checked on worlds with a known truth instead (tests/test_findings.py: 0.01). With
    Holm's or Benjamini-Hochberg's selection a finding's raw p is at most R level / m (Holm's i-th has p <=
    level / (m - i + 1)), so an interval that inverts the finding's own test (the mean and calibration tests,
    :func:`hall_interval`; a 0/1 rate's score test) excludes 0; the variance and coverage intervals are of
    other forms (Bonett's, Wilson's) and may reach the test's boundary."""
    if n_tests <= 0 or n_found <= 0:
        return float(level)
    return float(min(level, n_found * level / n_tests))


# ---- multiplicity ----------------------------------------------------------------------------------------
def adjust_pvalues(p, method: str = "holm") -> np.ndarray:
    """Adjusted p-values of one family of tests (Holm's step-down or Benjamini-Hochberg's step-up).

    Identical to ``statsmodels.stats.multitest.multipletests(p, method="holm" | "fdr_bh")[1]``.
    """
    if method not in ADJUSTMENTS:
        raise MMCError(f"error control must be one of {', '.join(ADJUSTMENTS)}, got {method!r}")
    p = np.asarray(p, dtype=float)
    if p.ndim != 1 or np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise MMCError("p-values must be one array of numbers in [0, 1]")
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    ps = p[order]
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ps))
    else:
        adj = np.minimum.accumulate(np.minimum(1.0, m / np.arange(1, m + 1) * ps)[::-1])[::-1]
    out = np.empty(m)
    out[order] = adj
    return out


# ---- the tests -------------------------------------------------------------------------------------------
# the mean and calibration tests correct for skewness only from this many rows: the sample skewness of fewer
# is so noisy that the correction can hide a gross error (a 10-row group 5 sd off got p = 0.002, not 4e-8)
HALL_MIN_ROWS = 30


def _t_test(s1, s2, cnt, s3=None, hall_min: float = 0.0, with_skew: bool = False, var_floor=0.0):
    """Two-sided t test of a zero mean from sums s1 = sum x, s2 = sum x^2 (and s3 = sum x^3) over cnt rows.

    With ``s3`` the statistic is Hall's (1992) skewness-corrected transform of the studentized mean,
    T = sqrt(n) (S + g S^2 / 3 + g^2 S^3 / 27 + g / (6 n)), S = mean / sd, g = the sample skewness; it removes
    the first-order skewness term that makes the plain t test of a skewed quantity (squared residuals)
    several times too liberal in the far tail where a multiplicity-adjusted test decides. Entries with fewer
    than ``hall_min`` rows keep the plain statistic. Returns (mean, se, p), and with ``with_skew`` also the
    skewness g each entry's statistic used (0 where the plain one), to invert the test (:func:`hall_interval`).
    ``var_floor``: a lower bound on the quantity's variance per row (per entry or one number).
    """
    mean, se, z, used = _hall_z(s1, s2, cnt, s3, hall_min, var_floor)
    p = t_sf2(z, np.maximum(cnt - 1, 1))
    return (mean, se, p, used) if with_skew else (mean, se, p)


def _hall_z(s1, s2, cnt, s3=None, hall_min: float = 0.0, var_floor=0.0):
    """The statistic of :func:`_t_test` (plain t, or Hall's where ``s3`` is given and cnt >= ``hall_min``):
    (mean, se, statistic, skewness used). ``var_floor``: a lower bound on the quantity's variance per row."""
    used = np.zeros(np.shape(cnt))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mean = s1 / cnt
        m2 = np.maximum(s2 / cnt - mean * mean, 0.0)
        var = np.maximum(m2 * cnt / np.maximum(cnt - 1, 1), var_floor)
        se = np.sqrt(var / cnt)
        z = np.where(se > 0, mean / np.where(se > 0, se, 1.0), np.where(mean == 0, 0.0, np.inf))
        if s3 is not None:
            m3 = s3 / cnt - 3 * mean * s2 / cnt + 2 * mean**3
            sd = np.sqrt(var)
            g = np.where(sd > 0, m3 / np.where(sd > 0, sd, 1.0) ** 3, 0.0)
            S = np.where(sd > 0, mean / np.where(sd > 0, sd, 1.0), z)
            zh = np.sqrt(cnt) * (S + g * S**2 / 3 + g**2 * S**3 / 27 + g / (6 * cnt))
            hall = (sd > 0) & (cnt >= hall_min)
            z = np.where(hall, zh, z)
            used = np.where(hall, g, 0.0)
    return mean, se, z, used


def hall_interval(mean: float, se: float, n: float, g: float, q: float) -> tuple[float, float]:
    """The means mu0 that :func:`_t_test` does not reject at critical value |T| = ``q`` (the test of the
    quantity minus mu0: its sd and skewness g do not move with mu0): mean -+ q se for the plain statistic
    (g = 0); Hall's transform inverted in closed form otherwise, since S + g S^2 / 3 + g^2 S^3 / 27 =
    ((1 + g S / 3)^3 - 1) / g is increasing in S: S(T) = 3 / g (cbrt(1 + g (T / sqrt(n) - g / (6 n))) - 1) and
    mu0 in [mean - S(q) sd, mean - S(-q) sd]. Asymmetric, as the test is for a skewed quantity; it excludes 0
    exactly when the test rejects at q."""
    if not (se > 0 and math.isfinite(se)) or g == 0 or not math.isfinite(g):
        return mean - q * se, mean + q * se
    sd, rn = se * math.sqrt(n), math.sqrt(n)

    def s_of(t: float) -> float:
        return 3.0 / g * (float(np.cbrt(1.0 + g * (t / rn - g / (6.0 * n)))) - 1.0)

    return mean - s_of(q) * sd, mean - s_of(-q) * sd


# ---- the variance test as a function of its null ratio -------------------------------------------------------
# The variance test of H0 "E[u2] / E[v] = r0" is Hall's t test of the mean of d = u2 - r0 v (:func:`_t_test`).
# Its sums are polynomials in r0, so from nine sums per group over a = u2 and b = v (in this order: a, b, aa,
# ab, bb, aaa, aab, abb, bbb) the statistic is known at every r0: the p-value at the tolerance band's ends and
# the finding's interval (the r0 the same test does not reject) come from one function. A tenth entry, the
# residuals' kurtosis pooled over the audit's rows (NaN: none), floors the variance of d at
# (kurtosis - 1) R r0 mean(v^2), R = a / b the group's estimate: a group's own sample variance of u2 understates a
# skewed or heavy tail exactly when no large residual was drawn, which is when its spread looks low. R r0 is the
# delta method on the log scale (log R's standard error does not depend on R): r0^2 (the variance under H0) cost
# a third of the findings with normal noise, R^2 kept the misses of a low estimate (benchmarks/README.md, "The
# variance test floored by the kurtosis pooled over signatures").
RATIO_SUMS = ("a", "b", "aa", "ab", "bb", "aaa", "aab", "abb", "bbb", "kurtosis")


def ratio_stat(sums, cnt, r0) -> np.ndarray:
    """Hall's statistic of the mean of u2 - r0 v per group (``sums``: shape (10, groups), :data:`RATIO_SUMS`;
    without the tenth row, no floor)."""
    S = np.asarray(sums, dtype=float)
    a, b, aa, ab, bb, aaa, aab, abb, bbb = S[:9]
    cnt = np.asarray(cnt, dtype=float)
    s1 = a - r0 * b
    s2 = aa - 2 * r0 * ab + r0 * r0 * bb
    s3 = aaa - 3 * r0 * aab + 3 * r0 * r0 * abb - r0**3 * bbb
    floor: float | np.ndarray = 0.0
    if S.shape[0] > 9:
        kappa = S[9]
        with np.errstate(divide="ignore", invalid="ignore"):
            est = a / b
            ok = np.isfinite(kappa) & (cnt > 0) & np.isfinite(est)
            floor = np.where(ok, np.fmax(kappa - 1.0, 0.0) * np.fmax(est, 0.0) * r0 * bb / cnt, 0.0)
    return _hall_z(s1, s2, cnt, s3, var_floor=floor)[2]


def ratio_side_p(sums, cnt, r0, side: str) -> np.ndarray:
    """One-sided p of the variance test at ratio ``r0``: ``side`` "hi" tests H0 ratio <= r0 (small when the
    observed spread is above r0 times the predicted), "lo" H0 ratio >= r0."""
    t = ratio_stat(sums, cnt, r0)
    p2 = t_sf2(t, np.maximum(np.asarray(cnt, dtype=float) - 1, 1))
    up = t > 0 if side == "hi" else t < 0
    return np.where(up, p2 / 2, 1 - p2 / 2)


def ratio_test_interval(sums, n: float, est: float, q: float, bounds=()) -> tuple[float, float]:
    """The ratios r0 that the variance test (:func:`ratio_stat`, one group: ``sums`` of shape (9,)) does not
    reject two-sided at critical value ``q`` (|T(r0)| <= q), searched outward from the estimate ``est``:
    geometric steps of 1.25 (and the points ``bounds``, the tolerance band's ends, so that a band end the test
    rejects is never inside the interval), then bisection to the crossing; each end is returned on its
    accepted side. The lower end is 0 when even r0 = 0 is not rejected, the upper one inf when no r0 up to
    est x 1e19 is (a group whose predicted variance varies so much that its spread alone cannot rule out any
    ratio). T(r0) is decreasing near the estimate (d T / d r0 < 0 where T = 0), so the set is an interval
    around it; the ends are the test's own boundaries, so a finding rejected at a band end has an interval
    clear of the whole band."""
    S = np.asarray(sums, dtype=float).reshape(-1, 1)
    c = np.array([float(n)])

    def t_of(r0: float) -> float:
        return float(ratio_stat(S, c, r0)[0])

    if not (math.isfinite(est) and est >= 0 and math.isfinite(q)):
        return float("nan"), float("nan")
    if abs(t_of(est)) > q:  # not reachable in practice: T(est) = g / (6 sqrt n) is below 1 / 6
        return est, est

    def end(upward: bool) -> float:
        def rejected(r0: float) -> bool:
            t = t_of(r0)
            return t < -q if upward else t > q

        steps = [est * 1.25**k if upward else est / 1.25**k for k in range(1, 201)]
        pts = sorted({x for x in (*steps, *bounds) if (x > est if upward else 0 <= x < est)}, reverse=not upward)
        if not upward:
            pts.append(0.0)
        good = est
        for x in pts:
            if rejected(x):
                bad = x
                break
            good = x
        else:
            return float("inf") if upward else 0.0
        for _ in range(200):
            mid = (good + bad) / 2
            if mid in (good, bad):
                break
            if rejected(mid):
                bad = mid
            else:
                good = mid
        return good

    return end(False), end(True)


def clopper_pearson(k: float, n: float, miss: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a proportion k / n missing with probability ``miss`` (``miss``
    / 2 each side): the inversion of the exact binomial test, by bisection on :func:`binom_cdf`. Its upper end
    is the p at which P(X <= k; p) = miss / 2, so it lies below any p whose lower-tail probability is at most
    miss / 2."""
    k, n = float(round(k)), float(n)

    def bisect(f) -> float:  # f increasing from False to True on [0, 1]
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if f(mid) else (mid, hi)
        return (lo + hi) / 2

    half = miss / 2
    # lower end: P(X >= k; p) = 1 - P(X <= k - 1; p) rises with p; 0 for k = 0
    lo = 0.0 if k <= 0 else bisect(lambda p: 1.0 - float(binom_cdf(k - 1, n, p)) > half)
    # upper end: P(X <= k; p) falls with p; 1 for k = n
    hi = 1.0 if k >= n else bisect(lambda p: float(binom_cdf(k, n, p)) < half)
    return lo, hi


def harm(rec: dict) -> float:
    """How much a finding matters, for ranking: rows affected x the smallest size of the defect the finding's
    interval allows, in the label's units. The interval's end nearest no effect carries the evidence (a
    finding barely beyond chance has that end near no effect) and the rows carry the reach (a defect of a
    3,000-row group touches more people than one of a 40-row cell).

    - mean / calibration: n x |the interval's end nearest 0| (the mean misprediction per row);
    - variance: n x sd x |sqrt(end nearest 1) - sqrt(the tolerance band's end)|, sd = the predicted standard
      deviation (the misstatement of the standard deviation per row that every interval's width carries, beyond
      the immaterial 1.1x the test allows);
    - coverage: n x (target - upper end) / (2 phi(z)) x the residual sd, z the normal quantile of the target
      (the widening, in sd, that would recover the shortfall of a normal interval: d coverage / d z = 2 phi(z)).

    0 when the interval reaches no effect (never for a finding of this audit) or a number is missing."""
    lo, hi = rec["interval"]
    n, kind = float(rec["n"]), rec["kind"]
    if kind in ("mean", "calibration"):
        size = min(abs(lo), abs(hi)) if lo * hi > 0 else 0.0
    elif kind == "variance":
        up = rec["estimate"] > 1
        near, band = (lo if up else hi), 1.0 + float(rec.get("tolerance") or 0.0)
        edge = band if up else 1 / band
        pred = rec.get("predicted")
        if not (isinstance(pred, (int, float)) and pred > 0 and near >= 0 and (near > edge) == up):
            return 0.0
        size = math.sqrt(pred) * abs(math.sqrt(near) - math.sqrt(edge))
    elif kind == "coverage":
        target, sd = float(rec["target"]), rec.get("residual_sd")
        if not (isinstance(sd, (int, float)) and math.isfinite(sd)) or hi >= target:
            return 0.0
        z = NormalDist().inv_cdf((1 + target) / 2)
        size = (target - hi) / (2 * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)) * sd
    else:
        return 0.0
    out = n * size
    return float(out) if math.isfinite(out) else 0.0


def binary_tests(kind: str, names, cnt, s_y, s_p, s_v, min_count: int, **extra) -> list:
    """Tests that a group's (or cell's) rate of a 0/1 outcome equals its mean predicted probability.

    ``s_y``, ``s_p``, ``s_v``: sums of the outcome, of the predicted probability p and of p (1 - p). The
    score test with the variance the predictions themselves imply (sum p (1 - p), a Poisson-binomial count)
    and a continuity correction, z = (|s_y - s_p| - 1/2) / sqrt(s_v): the t test of the residuals y - p
    estimates that variance from the outcomes, which fails for rare events (a group with no positive gets
    residuals -p that barely vary, and a standard error near 0: "observed 0 vs predicted 0.012, p = 1e-45"
    for a group whose every prediction was right). The interval is Wilson's for the observed rate, minus the
    mean prediction. Records as :func:`group_tests` (``statistic_mean`` = rate - mean prediction,
    ``statistic_se`` = the score test's standard error), plus ``interval`` (label units = probability)."""
    cnt = np.asarray(cnt, dtype=float)
    s_y, s_p, s_v = (np.asarray(v, dtype=float) for v in (s_y, s_p, s_v))
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = s_y - s_p
        sd = np.sqrt(np.maximum(s_v, 0.0))
        excess = np.maximum(np.abs(diff) - 0.5, 0.0)
        # predictions of exactly 0 or 1 (a model file without the probability floor) imply no variance: any
        # outcome they did not predict is then certain evidence against them
        z = np.where(sd > 0, excess / np.where(sd > 0, sd, 1.0), np.where(excess > 0, np.inf, 0.0))
        mean = diff / cnt
        se = sd / cnt
        pbar = s_p / cnt
    p = np.minimum(1.0, 2 * norm_sf(z))
    lo, hi = wilson_interval(s_y, cnt)
    return _records(
        kind,
        names,
        cnt,
        mean,
        se,
        p,
        min_count,
        extra,
        lambda i: {
            "interval": [float(lo[i] - pbar[i]), float(hi[i] - pbar[i])],
            "z": float(np.sign(diff[i]) * z[i]),
        },
    )


def _records(kind, names, cnt, mean, se, p, min_count, extra, more=None) -> list:
    """One record per group (or cell) with at least ``min_count`` rows (a handful of hundreds, not per row)."""
    out = []
    for i in np.nonzero(cnt >= max(min_count, 1))[0]:
        rec = {
            "kind": kind,
            "group": names[i],
            "n": int(cnt[i]),
            "statistic_mean": float(mean[i]),
            "statistic_se": float(se[i]),
            "p_value": float(p[i]),
            **(more(i) if more is not None else {}),
        }
        for k, v in extra.items():
            rec[k] = v[i].item() if isinstance(v[i], np.generic) else v[i]
        out.append(rec)
    return out


def group_tests(
    kind: str, names, cnt, s1, s2, min_count: int, s3=None, hall_min: float = 0.0, var_floor=0.0, **extra
) -> list:
    """Tests of a zero mean for each group (or cell) with at least ``min_count`` rows.

    ``s1``, ``s2`` (``s3``): sums of the tested quantity, of its square (and cube: skewness-corrected test,
    see :func:`_t_test`); ``var_floor``: the least variance per row of the quantity, per entry (the test, its
    standard error and the skewness it corrects for all use the floored one); ``extra``: per-entry arrays
    carried into each record (e.g. predicted and observed means). Returns one dict per tested entry.
    """
    cnt = np.asarray(cnt, dtype=float)
    mean, se, p, skew = _t_test(
        np.asarray(s1, float),
        np.asarray(s2, float),
        cnt,
        None if s3 is None else np.asarray(s3, float),
        hall_min,
        with_skew=True,
        var_floor=var_floor,
    )
    return _records(kind, names, cnt, mean, se, p, min_count, {**extra, "statistic_skew": skew})


def status_of(n_tests: int, min_count: int) -> str:
    """An audit's ``findings_status`` once its tests ran: "ok", or "untestable: ..." when there was nothing to test
    (no group with ``min_count`` rows), which must never read as a clean result."""
    if n_tests > 0:
        return "ok"
    return f"untestable: no group has {min_count} or more labelled rows, so nothing could be tested"


def select_findings(tests: list, method: str = "holm", level: float = 0.05) -> list:
    """Adjust the p-values of all ``tests`` as one family; return the findings (adjusted p < ``level``),
    most significant first (ties: larger standardized effect first). Every test dict gets ``p_adjusted``
    and ``adjustment``."""
    if not (0 < level < 1):
        raise MMCError(f"the findings level must be in (0, 1), got {level!r}")
    if not tests:
        return []
    adj = adjust_pvalues(np.array([t["p_value"] for t in tests]), method)
    for t, a in zip(tests, adj):
        t["p_adjusted"] = float(a)
        t["adjustment"] = method
    found = [t for t in tests if t["p_adjusted"] < level]
    found.sort(key=lambda t: (t["p_adjusted"], -abs(t.get("z", 0.0))))
    return found


def variance_disparities(names, cnt, ratio, lo, hi, min_count: int, skip_first: bool = True) -> list:
    """Groups whose predicted variance differs from the overall level (bootstrap CI excluding 1), largest
    |log ratio| first, leaving out an intersection ("a & b") when one of its parts is listed with a ratio
    within a factor 1.25. Descriptive: these say where the model is more or less certain, not that it is
    wrong."""
    out = []
    for i, g in enumerate(names):
        if (skip_first and i == 0) or cnt[i] < min_count:
            continue
        r, a, b = float(ratio[i]), float(lo[i]), float(hi[i])
        if not (np.isfinite(r) and np.isfinite(a) and np.isfinite(b)) or r <= 0 or a <= 1 <= b:
            continue
        if abs(r - 1) < DISPARITY_MIN:  # a model that predicts one variance for all: 0.99999999 (CI 1.0000-1.0000)
            continue
        more = r >= 1
        # the ratio and its interval at a precision that shows the interval's width: "1.3 times (95% CI
        # 1.34-1.34)" read as a contradiction (a tight interval of a large group: 1.3401-1.3449)
        d = next((k for k in (2, 3, 4) if f"{a:.{k}f}" != f"{b:.{k}f}"), 4)
        txt = f"{r:.{d}f} times" if more else f"{r:.{d}f} times (about 1/{1 / r:.2f} of)"
        out.append(
            {
                "kind": "variance_disparity",
                "group": g,
                "n": int(cnt[i]),
                "estimate": r,
                "interval": [a, b],
                "text": f"The model's predicted variance for group {g} (n={int(cnt[i])}) is {txt} the overall "
                f"level (95% CI {a:.{d}f}-{b:.{d}f}): the model is {'less' if more else 'more'} certain "
                "about this group.",
            }
        )
    # an intersection whose listed parent shows about the same ratio says nothing new
    ratio_of = {d["group"]: d["estimate"] for d in out}

    def redundant(d):
        parts = str(d["group"]).split(" & ")
        if len(parts) < 2:
            return False
        for p in parts:
            r_parent = ratio_of.get(p)
            if r_parent is not None and 0.8 < d["estimate"] / r_parent < 1.25:
                return True
        return False

    out = [d for d in out if not redundant(d)]
    out.sort(key=lambda d: -abs(math.log(d["estimate"])))
    return out

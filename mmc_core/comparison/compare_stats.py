"""The statistics of a comparison: the delta-method standard error of a compared value, its t tests and
intervals, the selection of findings with their selection-adjusted intervals (:func:`select_findings`), the
smallest detectable difference (:func:`detectable`), the checks both comparisons share, and how a difference
of shares is written in percentage points (:func:`points_text`).
"""

from __future__ import annotations

import numpy as np

from ..auditing import findings as fnd
from ..common.errors import MMCError
from ..common.tables import as_table, to_label_array
from ..groups.group_set import GroupSet

__all__ = [
    "POINTS",
    "check_inputs",
    "delta_se",
    "detectable",
    "plain_value",
    "points_text",
    "select_findings",
    "t_interval",
    "t_tests",
]


def delta_se(grad, S, cnt):
    """Standard error of a smooth function of cell means with gradient ``grad`` (C, K): sqrt(g' S g / n)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.einsum("ck,ckj,cj->c", grad, np.nan_to_num(S), grad) / cnt
    return np.sqrt(np.maximum(v, 0.0))


def t_tests(est, se, cnt, ok, scale):
    """Two-sided t p-values (df n - 1). Differences within rounding of ``scale`` (the size of the values
    compared) are no difference (p = 1: two sides that agree on every row differ by 1e-16, with a standard error
    of 1e-17); a real difference with no spread at all gets p = 0."""
    p = np.ones_like(est)
    tiny = 1e-9 * np.maximum(np.abs(scale), 1e-300)
    real = ok & (np.abs(est) > tiny)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = est / se
    pos = real & (se > tiny * 1e-3)
    p[pos] = fnd.t_sf2(t[pos], cnt[pos] - 1)
    p[real & ~pos] = 0.0
    return p


def _t_quantile(miss: float, df: np.ndarray) -> np.ndarray:
    """The two-sided ``miss`` quantile of Student's t per degrees of freedom: the Cornish-Fisher series in 1/df
    (Abramowitz and Stegun 26.7.5; from 20 degrees of freedom its error is < 1e-6 at miss = 0.05 and
    < 1e-3 at miss = 1e-5), the exact inversion below that
    (once per distinct df). The tables need one quantile per group; bisection per group would dominate."""
    df = np.asarray(df, dtype=float)
    z = fnd.normal_isf2(miss)
    g = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    nu = np.maximum(df, 1.0)
    q = z + g[0] / nu + g[1] / nu**2 + g[2] / nu**3 + g[3] / nu**4
    small = nu < 20
    if small.any():
        u, inv = np.unique(nu[small], return_inverse=True)
        q[small] = fnd.t_isf2(miss, u)[inv]
    return q


def t_interval(est, se, cnt, miss):
    df = np.broadcast_to(np.maximum(np.asarray(cnt, float) - 1, 1), np.shape(est))
    q = _t_quantile(miss, df).reshape(np.shape(est))
    return est - q * se, est + q * se


POWER = 0.8


def detectable(se, n_tests: int, level: float, power: float = POWER):
    """The smallest difference a test with standard error ``se`` finds with probability ``power`` among
    ``n_tests`` tests at family-wise ``level``: (z_{level / (2 n_tests)} + z_{power}) x se, the first step of
    Holm's procedure (Benjamini-Hochberg with one real difference alike). Smaller differences may exist unseen:
    "too small to tell" is said by this number, not by the absence of a finding."""
    if n_tests < 1:
        return np.full(np.shape(se), np.nan)
    from statistics import NormalDist

    z = fnd.normal_isf2(level / n_tests) + NormalDist().inv_cdf(power)
    return z * np.asarray(se, dtype=float)


def select_findings(tests: list, error_control: str, level: float) -> list:
    """The tests whose adjusted p-value is below ``level``, each with its selection-adjusted interval."""
    if not tests:
        return []
    p_adj = fnd.adjust_pvalues(np.array([t["p_value"] for t in tests]), error_control)
    found = []
    for t, pa in zip(tests, p_adj):
        t["p_adjusted"] = float(pa)
        if pa <= level:
            found.append(t)
    miss = fnd.fcr_miss(len(found), len(tests), level)
    for f in found:
        q = float(_t_quantile(miss, np.array([max(f["n"] - 1, 1)]))[0])
        f["interval"] = [f["estimate"] - q * f["se"], f["estimate"] + q * f["se"]]
        f["interval_miss"] = miss
    return found


def check_inputs(y, table, groups, min_group_count, error_control, level, delta):
    table = as_table(table)
    y = to_label_array(y, "label")
    if not isinstance(groups, GroupSet):
        raise MMCError(f"groups must be a GroupSet, got {type(groups).__name__}")
    if isinstance(min_group_count, bool) or not isinstance(min_group_count, (int, np.integer)) or min_group_count < 2:
        raise MMCError(f"min_group_count must be an integer >= 2, got {min_group_count!r}")
    if error_control not in fnd.ADJUSTMENTS:
        raise MMCError(f"error_control must be one of {', '.join(fnd.ADJUSTMENTS)}, got {error_control!r}")
    if not 0 < level < 1:
        raise MMCError(f"level must be in (0, 1), got {level!r}")
    if not 0 < delta < 1:
        raise MMCError(f"delta must be in (0, 1), got {delta!r}")
    memb = groups.evaluate(table, y.size)
    return table, y, memb


def plain_value(v):
    return v.item() if isinstance(v, np.generic) else v


# values that are shares of rows (probabilities): their changes and differences are said in percentage points
POINTS = ("coverage", "selection_rate", "tpr", "fpr")


def points_text(estimate: float, lo: float, hi: float) -> tuple[str, str, str]:
    """A difference of two shares (fractions) and its interval ends in percentage points, signed: one decimal
    (+34.3), more where the difference is under 0.1 points so it does not read +0.0; the three with the same
    decimals. The numbers stay fractions everywhere else (JSON, tables' data): x 100 here only."""
    est, lo, hi = 100 * estimate, 100 * lo, 100 * hi
    dec = 1
    if 0 < abs(est) < 0.095:  # two significant digits: 0.042 -> +0.042 (the ends to the same place)
        dec = min(6, 1 - int(np.floor(np.log10(abs(est)))))
    return f"{est:+.{dec}f}", f"{lo:+.{dec}f}", f"{hi:+.{dec}f}"

"""The distributions the audit's tests and intervals need, in numpy alone (no scipy): the normal and Student t
tails and their inverses, the regularized incomplete beta function and the binomial distribution, and Wilson's
interval of a share.

Apart from the tests (:mod:`mmc_core.auditing.findings`) so that these functions, each checked against scipy in the
tests, read on their own.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = ["Z95", "betainc", "binom_cdf", "norm_sf", "normal_isf2", "t_isf2", "t_sf2", "wilson_interval"]

Z95 = 1.959963984540054  # the standard normal 97.5% quantile: two-sided 95% intervals
_erfc = np.frompyfunc(math.erfc, 1, 1)
_lgamma = np.frompyfunc(math.lgamma, 1, 1)


def norm_sf(z) -> np.ndarray:
    """Upper tail P(Z > z) of the standard normal, elementwise (NaN stays NaN)."""
    z = np.asarray(z, dtype=float)
    out = np.full(z.shape, np.nan)
    ok = ~np.isnan(z)
    out[ok] = 0.5 * _erfc(z[ok] / math.sqrt(2.0)).astype(float)
    return out


def t_sf2(t, df) -> np.ndarray:
    """Two-sided tail P(|T| > |t|) of Student's t with ``df`` degrees of freedom, elementwise (the normal tail
    beyond 1e7 degrees of freedom, where the continued fraction would need too many terms; there the two
    differ by a factor 1 + t^4 / (4 df), under 1e-3 up to |t| = 12)."""
    t = np.abs(np.asarray(t, dtype=float))
    df = np.broadcast_to(np.asarray(df, dtype=float), t.shape)
    out = np.full(t.shape, np.nan)
    ok = ~np.isnan(t) & (df > 0)
    big = ok & (df > 1e7)
    out[big] = 2 * norm_sf(t[big])
    small = ok & ~big
    if small.any():
        tt, nu = t[small], df[small]
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.where(np.isinf(tt), 0.0, nu / (nu + tt * tt))
        out[small] = betainc(nu / 2, np.full(nu.shape, 0.5), x)
    return np.minimum(out, 1.0)


def _betacf(a, b, x, iters: int = 3000, eps: float = 1e-15):
    """Continued fraction of the incomplete beta function (modified Lentz), elementwise; x < (a+1)/(a+b+2)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = np.where(np.abs(d) < tiny, tiny, d)
    d = 1.0 / d
    h = d.copy()
    active = np.ones(x.shape, dtype=bool)
    for m in range(1, iters + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1.0 / d
        h = np.where(active, h * d * c, h)
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1.0 / d
        delta = d * c
        h = np.where(active, h * delta, h)
        active &= np.abs(delta - 1.0) > eps
        if not active.any():
            break
    return h


def betainc(a, b, x) -> np.ndarray:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1, elementwise."""
    a, b, x = np.broadcast_arrays(np.asarray(a, float), np.asarray(b, float), np.asarray(x, float))
    out = np.where(x <= 0, 0.0, 1.0)
    inner = (x > 0) & (x < 1)
    if not inner.any():
        return out
    a_, b_, x_ = a[inner], b[inner], x[inner]
    lbt = (_lgamma(a_ + b_) - _lgamma(a_) - _lgamma(b_)).astype(float) + a_ * np.log(x_) + b_ * np.log1p(-x_)
    front = np.exp(lbt)
    direct = x_ < (a_ + 1.0) / (a_ + b_ + 2.0)
    res = np.empty_like(x_)
    if direct.any():
        res[direct] = front[direct] * _betacf(a_[direct], b_[direct], x_[direct]) / a_[direct]
    flip = ~direct
    if flip.any():
        res[flip] = 1.0 - front[flip] * _betacf(b_[flip], a_[flip], 1.0 - x_[flip]) / b_[flip]
    out[inner] = np.clip(res, 0.0, 1.0)
    return out


def binom_cdf(k, n, p) -> np.ndarray:
    """P(X <= k) for X ~ Binomial(n, p), elementwise, exact (incomplete beta), k and n integer arrays."""
    k = np.floor(np.asarray(k, dtype=float))
    n = np.asarray(n, dtype=float)
    k, n = np.broadcast_arrays(k, n)
    out = np.where(k < 0, 0.0, 1.0)
    mid = (k >= 0) & (k < n)
    if mid.any():
        out = out.astype(float)
        out[mid] = betainc(n[mid] - k[mid], k[mid] + 1.0, np.full(int(mid.sum()), 1.0 - float(p)))
    return out


def wilson_interval(k, n, z: float = Z95):
    """Wilson score interval of a proportion k / n, elementwise."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        phat = k / n
        den = 1 + z * z / n
        centre = (phat + z * z / (2 * n)) / den
        half = z * np.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / den
    return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)


def normal_isf2(p) -> float:
    """The z whose two-sided normal tail P(|Z| > z) is ``p``."""
    return NormalDist().inv_cdf(1.0 - float(p) / 2.0)


def t_isf2(p, df) -> np.ndarray:
    """The |t| whose two-sided tail under Student's t with ``df`` degrees of freedom is ``p`` (the inverse of
    :func:`t_sf2`), elementwise, by bisection: used for the few findings' intervals, not per row."""
    df = np.atleast_1d(np.asarray(df, dtype=float))
    p = np.broadcast_to(np.asarray(p, dtype=float), df.shape)
    lo, hi = np.zeros(df.shape), np.full(df.shape, 4.0)
    for _ in range(80):  # bracket: t_sf2 falls below p (df = 1, p = 1e-9 needs |t| ~ 6e8)
        short = t_sf2(hi, df) > p
        if not short.any():
            break
        hi = np.where(short, hi * 4.0, hi)
    for _ in range(100):
        mid = (lo + hi) / 2.0
        above = t_sf2(mid, df) > p
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    return (lo + hi) / 2.0

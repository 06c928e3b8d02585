"""A per-group logistic map of a classifier's base prediction (Platt scaling by group), for 0/1 labels.

For a 0/1 label the base's errors follow the logistic curve: a base that is right on average can still be too
sure in one group and not sure enough in another, and a correction that is one number per (group, bucket) cell
on the probability scale needs many cells to describe one slope on the logit scale. This map is a ridge-penalized
logistic regression of the label with logit(base) as an offset:

    logit p = logit(b) + a0 + a1 z + a2 h + sum_g m_g (c_g + d_g z + e_g h),   z = logit(b), h = max(z - k, 0)

(m_g the row's membership of group g, k the median of z on the fitting rows): an overall intercept, slope and
bend, unpenalized, and per listed group an intercept, a slope and a bend, penalized by ``lam / 2`` times their
squares (``lam`` in units of rows' curvature: a group with far fewer than ``lam / (p (1 - p))`` rows keeps
coefficients near 0). ``lam`` is chosen from ``LAMBDA_GRID`` by 5-fold cross-validated log loss on the
fitting rows. The map is then applied at the share the out-of-sample rows (the held-out rows and the fitting
rows' out-of-fold predictions at the chosen ``lam``) bear out: the one-member stacking weight of
:func:`logit_stack` (:func:`mmc_core.fit.recalibrate.stack_gate`'s rule on the logit scale), its coefficients
multiplied by it; and it
is not used when it leaves some group significantly more biased out of sample than the base did
(:func:`mmc_core.fit.recalibrate.harmed_groups`).

It is fitted on what the group-linear map gives and judged against it, so it is applied only for what it
adds. Measured (benchmarks/README.md, "The per-group logistic map, built"): on ``mplsstops`` (44k rows) it
brought the fit's log loss from 0.00087 above MCGrad's defaults to within noise of them; on ``401ksubs`` (2,000
fitting rows) the fit ended worse with it (the map takes part of what the descent and the cells would correct,
and they then pass their tests less often). So under ``base_recalibration="auto"`` the estimator keeps it only
when the whole fit with it predicts the held-out rows better (``KEEP_Z``; mmc_core.estimator.fit_memory);
``"group-logistic"`` applies it on its own gate.

Each fit is Newton's method with the Newton direction solved by conjugate gradients over the membership sums
(no dense design matrix: one pass over the (row, group) pairs per product), on at most ``CV_MAX_ROWS`` rows.
"""

from __future__ import annotations

import math

import numpy as np

from ..groups.sums import MembershipSums
from .recalibrate import (
    CV_FOLDS,
    GATE_MIN_ROWS,
    HARM_LEVEL,
    MIN_GAIN_Z,
    capped,
    group_linear_base,
    harmed_groups,
)

__all__ = ["KEEP_Z", "LAMBDA_GRID", "fit_group_logistic", "group_logistic_base", "logit_stack", "mapped_base"]

# the ridge of the per-group coefficients, in rows' curvature units (a group's intercept is halfway shrunk at
# about lam / (p (1 - p)) rows); the benchmark's scikit-learn C of 0.003-0.1 is lam = 1 / C = 10-333
LAMBDA_GRID = (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
# probabilities are clipped to [EPS, 1 - EPS] before the logit: a base of exactly 0 or 1 has no logit
EPS = 1e-4
# under base_recalibration="auto" the map is kept only when the whole fit with it predicts the held-out rows
# better than the whole fit without it by at least this many standard errors of the rows' paired log-loss
# differences (mmc_core.estimator.fit_memory). Chosen among 0, 0.5, 1, 1.5 and 2 on six classifier tables x 8-10
# splits (benchmarks/README.md, "The per-group logistic map, built"): at 0 a 2,000-row table (401ksubs) ended
# +0.00045 (se 0.00031) worse in test log loss than without the map; at 0.5 and 1 no table was worse and the
# gains stayed (mplsstops -0.00041, tv16 -0.00028 at 1); at 2 most of them went
KEEP_Z = 1.0
MIN_ROWS = 200  # fewer fitting rows: the map is not fitted (5 folds of 40 rows cannot choose a penalty)
_NEWTON_MAX = 25
_NEWTON_TOL = 1e-7
_CG_TOL = 1e-8
_CG_MAX = 300


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(np.asarray(p, dtype=float), EPS, 1.0 - EPS)
    return np.log(q / (1.0 - q))


def _sigmoid(t: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * t))


class _Design:
    """The map's design over some rows without materializing it: coefficient vector theta = (a0, a1, a2, c, d,
    e), c, d, e of length G."""

    def __init__(self, base: np.ndarray, sums: MembershipSums, knot: float):
        self.z = _logit(base)
        self.h = np.maximum(self.z - knot, 0.0)
        self.sums = sums
        self.G = sums.G

    def eta(self, theta: np.ndarray) -> np.ndarray:
        """X theta, shape (n,)."""
        G, rs = self.G, self.sums.row_sums
        a0, a1, a2 = theta[:3]
        c, d, e = theta[3 : 3 + G], theta[3 + G : 3 + 2 * G], theta[3 + 2 * G :]
        return a0 + a1 * self.z + a2 * self.h + rs(c) + self.z * rs(d) + self.h * rs(e)

    def xt(self, r: np.ndarray) -> np.ndarray:
        """X' r, shape (3 + 3G,)."""
        gs = self.sums.group_sums
        rz, rh = r * self.z, r * self.h
        return np.concatenate([[r.sum(), rz.sum(), rh.sum()], gs(r), gs(rz), gs(rh)])

    def diag(self, w: np.ndarray) -> np.ndarray:
        """The diagonal of X' diag(w) X."""
        gs = self.sums.group_sums
        wz2, wh2 = w * self.z**2, w * self.h**2
        return np.concatenate([[w.sum(), wz2.sum(), wh2.sum()], gs(w), gs(wz2), gs(wh2)])


def _penalty(G: int, lam: float) -> np.ndarray:
    """Per coefficient: the ridge (tiny on the three overall terms, which only keeps a constant base solvable)."""
    return np.concatenate([np.full(3, 1e-6), np.full(3 * G, float(lam))])


def _fit(X: _Design, y: np.ndarray, w: np.ndarray, lam: float, theta: np.ndarray) -> np.ndarray:
    """Ridge logistic regression with offset z over the rows of weight 1 in ``w``, from ``theta`` (Newton, each
    direction by Jacobi-preconditioned conjugate gradients, step halving on the penalized loss)."""
    pen = _penalty(X.G, lam)

    def loss(t: np.ndarray, eta: np.ndarray) -> float:
        f = X.z + eta
        return float(np.sum(w * (np.logaddexp(0.0, f) - y * f))) + 0.5 * float(np.sum(pen * t * t))

    eta = X.eta(theta)
    cur = loss(theta, eta)
    for _ in range(_NEWTON_MAX):
        p = _sigmoid(X.z + eta)
        grad = X.xt(w * (p - y)) + pen * theta
        curv = w * p * (1.0 - p)
        dia = X.diag(curv) + pen
        step = _cg(lambda v: X.xt(curv * X.eta(v)) + pen * v, -grad, dia)
        dec = -float(grad @ step)
        if not dec > 0:
            break
        t = 1.0
        while t > 1e-4:
            new = theta + t * step
            eta_new = X.eta(new)
            val = loss(new, eta_new)
            if val <= cur - 1e-4 * t * dec:
                break
            t *= 0.5
        else:
            break
        theta, eta, prev, cur = new, eta_new, cur, val
        if prev - cur <= _NEWTON_TOL * max(abs(cur), 1.0):
            break
    return theta


def _cg(matvec, b: np.ndarray, dia: np.ndarray) -> np.ndarray:
    """Solves A x = b (A symmetric positive definite, given by ``matvec``) with a Jacobi preconditioner."""
    x = np.zeros_like(b)
    r = b.copy()
    zz = r / dia
    p = zz.copy()
    rz = float(r @ zz)
    norm_b = math.sqrt(float(b @ b)) or 1.0
    for _ in range(_CG_MAX):
        if math.sqrt(float(r @ r)) <= _CG_TOL * norm_b:
            break
        q = matvec(p)
        pq = float(p @ q)
        if pq <= 0:
            break
        a = rz / pq
        x += a * p
        r -= a * q
        zz = r / dia
        rz_new = float(r @ zz)
        p = zz + (rz_new / rz) * p
        rz = rz_new
    return x


def logit_stack(y: np.ndarray, offset: np.ndarray, change: np.ndarray, paired: np.ndarray) -> tuple:
    """(scale, z, weight) of a change of the logit judged on out-of-sample rows: scale = the maximum-likelihood
    s of the logistic model logit p = offset + s x change (the share of the change the labels bear out: 1 for a
    right change, 0 for noise), z = s in robust standard errors (sandwich; the cross-fitted rows' terms,
    ``paired``, counted twice as in :func:`mmc_core.fit.recalibrate.stack_gate`), weight = min(1, max(s, 0)) x
    min(1, max(z, 0) / ``MIN_GAIN_Z``).

    Why on the logit scale: the least-squares stacking of the probability-scale change (the group-linear map's
    gate) weighs every row alike where a 0/1 label's noise is p (1 - p); on ``mplsstops`` it bore out 48-70%
    of a map whose full change lowered the test log loss more than the share did (seed 2: 0.30819 in full,
    0.30935 at the share)."""
    if y.size < 2 or not np.any(change):
        return 0.0, 0.0, 0.0
    s = 0.0
    for _ in range(50):
        p = _sigmoid(offset + s * change)
        g = float(change @ (y - p))
        h = float((change * change) @ (p * (1 - p)))
        if not h > 0:
            return 0.0, 0.0, 0.0
        step = g / h
        s += step
        if abs(step) < 1e-10:
            break
    p = _sigmoid(offset + s * change)
    h = float((change * change) @ (p * (1 - p)))
    meat = float(np.sum((change * (y - p)) ** 2 * np.where(paired, 2.0, 1.0)))
    se = math.sqrt(meat) / h if h > 0 else 0.0
    z = s / se if se > 0 else 0.0
    return float(s), float(z), min(max(s, 0.0), 1.0) * min(max(z / MIN_GAIN_Z, 0.0), 1.0)


def _log_loss(p: np.ndarray, y: np.ndarray) -> float:
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.sum(y * np.log(q) + (1 - y) * np.log(1 - q)))


def _coefficients(theta: np.ndarray, G: int) -> dict:
    return {
        "intercept": float(theta[0]),
        "slope": float(theta[1]),
        "bend": float(theta[2]),
        "groups": [float(v) for v in theta[3 : 3 + G]],
        "group_slopes": [float(v) for v in theta[3 + G : 3 + 2 * G]],
        "group_bends": [float(v) for v in theta[3 + 2 * G :]],
    }


def _theta(m: dict) -> np.ndarray:
    return np.concatenate(
        [[m["intercept"], m["slope"], m["bend"]], m["groups"], m["group_slopes"], m["group_bends"]]
    ).astype(float)


def group_logistic_base(base_unit: np.ndarray, sums: MembershipSums, m: dict) -> np.ndarray:
    """The per-group logistic map ``m`` applied to a base probability (unit scale), shape (n,), in [EPS, 1 - EPS]
    (a map with every coefficient 0 returns the base as given)."""
    base = np.clip(np.asarray(base_unit, dtype=float), 0.0, 1.0)
    theta = _theta(m)
    if not np.any(theta):
        return base
    X = _Design(base, sums, float(m["knot"]))
    # kept off 0 and 1 as its input is: a mapped probability of exactly 0 or 1 would make one wrong label's
    # log loss infinite
    return np.clip(_sigmoid(X.z + X.eta(theta)), EPS, 1.0 - EPS)


def mapped_base(base_unit: np.ndarray, sums: MembershipSums, m: dict) -> np.ndarray:
    """A base prediction (unit scale) through a "base-group-linear" ``init.mean`` ``m``: the group-linear map,
    then the per-group logistic map when it has one (``m["logistic"]``, 0/1 labels)."""
    out = group_linear_base(base_unit, sums, m)
    return group_logistic_base(out, sums, m["logistic"]) if m.get("logistic") else out


def fit_group_logistic(
    y: np.ndarray, base: np.ndarray, sums: MembershipSums, held_out: tuple | None = None, seed: int = 0
) -> dict:
    """The per-group logistic map fitted on the fitting rows (0/1 labels ``y``, base probabilities ``base``)
    and validated out of sample.

    Parameters
    ----------
    y, base : arrays of shape (n,)
        The fitting rows' labels (0 or 1) and base probabilities.
    sums : MembershipSums
        The fitting rows' groups.
    held_out : (y_h, base_h, sums_h) or None
        The held-out rows, if any.
    seed : int
        Seeds the folds and, above ``CV_MAX_ROWS`` rows, the sample the map is fitted on.

    Returns
    -------
    dict
        ``{"knot", "lam", "intercept", "slope", "bend", "groups", "group_slopes", "group_bends",
        "validation"}``: the coefficients already multiplied by the weight the out-of-sample rows support
        (all 0 when the map is not used); ``validation`` = {"rows", "gain", "scale", "z", "weight", "kept",
        "harmed", "cv_log_loss"} (gain: out-of-sample log-loss reduction per row of the weighted map), with
        "too_few": True when the map was not fitted: fewer than ``MIN_ROWS`` rows, or fewer rows of the rarer
        label than the map has coefficients (3 + 3 x groups).
    """
    y = np.asarray(y, dtype=float)
    base = np.clip(np.asarray(base, dtype=float), 0.0, 1.0)
    sums, y, base = capped(sums, y, base, seed)
    G, n = sums.G, base.size
    knot = float(np.median(_logit(base))) if n else 0.0
    empty = {"knot": knot, "lam": 0.0, **_coefficients(np.zeros(3 + 3 * G), G)}
    record = {"rows": 0, "gain": 0.0, "scale": 0.0, "z": 0.0, "weight": 0.0, "kept": False, "harmed": []}
    # at least as many rows of the rarer label as the map has coefficients: below that the fit is the penalty's
    # more than the labels' (loanapp's classifier null worlds, ~440 fitting rows of which ~50 of the rarer
    # label for 3 + 3 x 33 coefficients: the whole fit's divergence from the truth +0.00077 (se 0.00034))
    rarer = float(min(y.sum(), n - y.sum())) if n else 0.0
    if n < MIN_ROWS or rarer < 3 + 3 * G:
        return {**empty, "validation": {**record, "too_few": True, "cv_log_loss": {}}}
    X = _Design(base, sums, knot)
    fold = np.random.default_rng([seed, 17]).permutation(n) % CV_FOLDS
    cv = np.zeros(len(LAMBDA_GRID))
    oof = np.zeros((len(LAMBDA_GRID), n))
    for k in range(CV_FOLDS):
        w = (fold != k).astype(float)
        out = fold == k
        theta = np.zeros(3 + 3 * G)
        for j in range(len(LAMBDA_GRID) - 1, -1, -1):  # from the strongest penalty down, warm-started
            theta = _fit(X, y, w, LAMBDA_GRID[j], theta)
            oof[j, out] = _sigmoid(X.z + X.eta(theta))[out]
            cv[j] += _log_loss(oof[j, out], y[out])
    best = int(np.argmin(cv))
    lam = LAMBDA_GRID[best]
    theta = _fit(X, y, np.ones(n), lam, np.zeros(3 + 3 * G))
    # out-of-sample rows: the fitting rows' out-of-fold predictions (their terms counted twice by the gate,
    # see stack_gate) and the held-out rows with the full fit; on each, the map's change of the logit
    z0 = [X.z]
    d_eta = [_logit(oof[best]) - X.z]
    yy, paired = [y], [np.ones(n, dtype=bool)]
    sets_h = None
    if held_out is not None and np.asarray(held_out[0]).size:
        s_h, y_h, b_h = capped(held_out[2], np.asarray(held_out[0], float), np.clip(held_out[1], 0.0, 1.0), seed + 7)
        X_h = _Design(b_h, s_h, knot)
        z0.append(X_h.z)
        d_eta.append(X_h.eta(theta))
        yy.append(y_h)
        paired.append(np.zeros(y_h.size, dtype=bool))
        sets_h = (y_h, b_h, s_h, X_h)
    zc, dc, yc, pc = (np.concatenate(v) for v in (z0, d_eta, yy, paired))
    rows = int(yc.size)
    scale, z, weight = logit_stack(yc, zc, dc, pc) if rows >= GATE_MIN_ROWS else (0.0, 0.0, 0.0)
    harmed: list = []
    if weight > 0 and HARM_LEVEL > 0:
        chk = [(y, base, sums, _sigmoid(X.z + weight * d_eta[0]) - base)]
        if sets_h is not None:
            chk.append((sets_h[0], sets_h[1], sets_h[2], _sigmoid(z0[1] + weight * d_eta[1]) - sets_h[1]))
        harmed = harmed_groups(chk, HARM_LEVEL)
        if harmed:
            weight = 0.0
    # the out-of-sample log-loss gain per row of the map as applied (its logit change times the weight)
    gain = (_log_loss(_sigmoid(zc), yc) - _log_loss(_sigmoid(zc + weight * dc), yc)) / max(rows, 1)
    names = sums.memb.names
    return {
        "knot": knot,
        "lam": float(lam),
        **_coefficients(theta * weight, G),
        "validation": {
            "rows": rows,
            "gain": float(gain),
            "scale": float(scale),
            "z": float(z),
            "weight": float(weight),
            "kept": bool(weight > 0),
            "harmed": [names[g] for g in harmed],
            "cv_log_loss": {str(g): float(v) / n for g, v in zip(LAMBDA_GRID, cv)},
        },
    }

"""The two-sided ridge-penalized group quantile regression with a cross-fitted conformal shift (approach
``ridge-cqr``, mmc_core's default before ``cc``): benchmark-only, compared with ``cc`` by
benchmarks/coverage_protocol.py."""

from __future__ import annotations

import math
import numbers

import numpy as np

from mmc_core.common.errors import MMCError
from mmc_core.intervals._common import membership_pairs

from .symmetric import MARGIN_Z, Z_UNDER, _level_quantile, _subset_membership

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
        self.pr, self.pg = membership_pairs(memb)
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
    rhs = np.stack([g[1:], c], axis=1) / dr[:, None]  # D^-1 [g_r, c]
    act = np.flatnonzero(Br.any(axis=0))  # groups holding none of the b rows: M = D there
    if act.size:
        Ba, da = Br[:, act], dr[act]
        K = np.diag(1.0 / w) + (Ba / da[None, :]) @ Ba.T
        rhs[act] -= (Ba.T @ np.linalg.solve(K, Ba @ rhs[act])) / da[:, None]
    y1, y2 = rhs[:, 0], rhs[:, 1]  # M^-1 g_r, M^-1 c
    x0 = (g[0] - c @ y1) / (a - c @ y2)
    return np.concatenate([[x0], y1 - y2 * x0])


def _qr_ridge(
    des: _Design,
    s: np.ndarray,
    tau: float,
    lam: np.ndarray,
    h: float,
    theta0: np.ndarray,
    max_iter: int = 50,
    xtol: float = 1e-3,
):
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
    for steps in range(des.G + 1):  # noqa: B007 - the count of steps taken is returned
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


def _fit_two_sided(
    memb,
    u: np.ndarray,
    deltas,
    *,
    lam: float = RIDGE_LAMBDA,
    lam_flagged: float = RIDGE_LAMBDA_FLAGGED,
    flag_z: float = FLAG_Z,
    margin_z: float = MARGIN_Z,
    z_patch: float = Z_UNDER,
    folds: int = CV_FOLDS,
    seed: int = 0,
    return_info: bool = False,
):
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

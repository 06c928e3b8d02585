"""Symmetric multicalibrated thresholds on |u| (approaches ``gcp``, ``gcp-cv``, ``mondrian-std``,
``mondrian-relaxed``): benchmark-only, compared with mmc_core's ``cc`` by benchmarks/coverage_protocol.py."""

from __future__ import annotations

import math

import numpy as np

from mmc_core.common.errors import MMCError
from mmc_core.groups.membership import Membership
from mmc_core.intervals._common import group_conformal, membership_pairs, row_max, threshold_rows

SYMMETRIC_APPROACHES = ("gcp", "gcp-cv", "mondrian-std", "mondrian-relaxed")


# Defaults of the ``gcp`` threshold (MARGIN_Z and Z_UNDER are also ridge-cqr's level margin and final patch
# tolerance), chosen with benchmarks/coverage_protocol.py (see its notes): the global
# finite-sample margin MARGIN_Z * sqrt(delta (1 - delta) / n) (a PAC-style, training-conditional correction: with
# probability about 93% over the calibration draw the population coverage reaches 1 - delta), patches only
# for group deviations beyond Z_UNDER (too little coverage) / Z_OVER (too much) binomial standard errors.
MARGIN_Z = 1.5
Z_UNDER = 2.0
Z_OVER = 3.0


def fit_threshold(
    memb,
    s: np.ndarray,
    delta: float,
    approach: str = "gcp",
    *,
    z_under: float = Z_UNDER,
    z_over: float = Z_OVER,
    margin_z: float = MARGIN_Z,
    margin: float = 0.0,
    group_margin=0.0,
    correction: str = "conformal",
    max_iter: int | None = None,
    return_info: bool = False,
    cv_folds: int = 5,
    cv_z: float = 2.33,
    seed: int = 0,
):
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
    info: dict = {"iterations": 0, "converged": True}
    if approach == "mondrian-std":
        out = (group_conformal(memb, s, [delta])[:, 0], "max")
        return (*out, info) if return_info else out
    se = np.sqrt(delta * (1 - delta) / np.maximum(n_g, 1.0))
    if approach == "mondrian-relaxed":
        level = 1.0 - delta + margin + margin_z * math.sqrt(delta * (1 - delta) / max(n, 1))
        target = np.minimum(1.0, np.ceil((n_g + 1) * level - 1e-12) / np.maximum(n_g, 1.0))
        pr, pg = membership_pairs(memb)

        def relaxed(d):
            th = group_conformal(memb, s, [d])[:, 0]
            cov_row = s <= row_max(memb, th)
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
        margin = cv_margin(
            memb,
            s,
            delta,
            folds=cv_folds,
            z_crit=cv_z,
            seed=seed,
            z_under=z_under,
            z_over=z_over,
            correction=correction,
            group_margin=group_margin,
        )
        margin_z = 0.0
        info["margin"] = margin
    elif approach in ("ridge-cqr", "cc"):
        raise MMCError(
            f"the '{approach}' thresholds are two-sided: use "
            + ("fit_two_sided" if approach == "ridge-cqr" else "fit_conditional")
        )
    elif approach != "gcp":
        raise MMCError(f"unknown threshold approach {approach!r}; expected one of {', '.join(SYMMETRIC_APPROACHES)}")
    level = np.minimum(
        1.0,
        1.0
        - delta
        + margin
        + margin_z * math.sqrt(delta * (1 - delta) / max(n, 1))
        + np.asarray(group_margin, dtype=float) * se,
    )
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
    pr, pg = membership_pairs(memb)
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


def cv_margin(
    memb, s: np.ndarray, delta: float, margins=None, folds: int = 5, z_crit: float = 2.33, seed: int = 0, **kw
) -> float:
    """The smallest global margin (coverage units) whose K-fold out-of-fold coverage passes a one-sided
    binomial (normal) test of coverage >= 1 - delta at ``z_crit`` in every group, and >= 1 - delta overall."""
    margins = np.arange(0.0, 0.0501, 0.005) if margins is None else np.asarray(margins, dtype=float)
    n = memb.n
    fold = np.random.default_rng(seed).permutation(n) % folds
    n_g = memb.sizes.astype(float)
    se = np.sqrt(delta * (1 - delta) / np.maximum(n_g, 1.0))
    pr, pg = membership_pairs(memb)
    for mg in margins:
        covered = np.zeros(n, dtype=bool)
        for k in range(folds):
            tr, te = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            mt = _subset_membership(memb, tr)
            theta, combine = fit_threshold(mt, s[tr], delta, "gcp", margin=mg, margin_z=0.0, **kw)
            me = _subset_membership(memb, te)
            q = threshold_rows(me, theta, combine)
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

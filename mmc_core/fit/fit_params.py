"""The descent's thresholds, grids and floors, chosen from the fitting rows before the descent starts.

Both engines call :func:`build_params`: the numpy engine with the fitting rows' arrays, the Dask engine (through
the estimator) with the same figures computed by reductions. Apart from the estimator so that the rules that set
the thresholds read as one piece, away from the table handling and the fit loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..paper.buckets import fill_edges, geometric_edges
from ..paper.descent_params import DescentParams
from ..paper.moments import MomentKind, max_central_moment
from .fit_steps import FitStats
from .thresholds import (
    FLOOR_MASS,
    GROUP_Z_RULES,
    MOMENT_VAR_FLOOR_SHARE,
    NO_GROUP_MOMENT_Z,
    SE_GROUP_LEVEL,
    SE_GROUP_MOMENT_Z,
    SE_LEVEL,
    SE_MIN_COUNT,
    SE_MOMENT_SHRINK,
    auto_threshold,
    bonferroni_z,
)

__all__ = ["build_params", "descent_params"]


@dataclass(frozen=True)
class _SeTest:
    """The per-cell standard-error test of the exact step: on or off, its critical values and row floor."""

    on: bool
    z: float
    z_group: float
    z_group_moment: float
    min_count: int


def descent_params(
    est, alpha: float, beta: float, moments: tuple, moment_betas: tuple = (), m: int | None = None, **extra
) -> DescentParams:
    """The :class:`~mmc_core.paper.descent.DescentParams` of estimator ``est`` with these thresholds.

    Parameters
    ----------
    est : MomentMulticalibrator
        Supplies the step rule, the odd moments' kind, ``max_rounds`` and (when ``m`` is None) ``n_buckets``.
    alpha, beta : float
        The mean's and the second moment's mass-weighted thresholds.
    moments : tuple of int
        The central moments fitted (2..K).
    moment_betas : tuple of (int, float)
        The thresholds of the moments above the second.
    m : int, optional
        The bucket count (default ``est.n_buckets``).
    **extra
        Further fields of ``DescentParams`` (the standard-error test, grids, floors).

    Returns
    -------
    DescentParams
    """
    return DescentParams(
        float(alpha),
        float(beta),
        int(est.n_buckets if m is None else m),
        tuple(moments),
        est.step,
        est.odd_moments,
        None if est.max_rounds is None else int(est.max_rounds),
        moment_betas,
        **extra,
    )


def build_params(
    est, m: int, G: int, nf: int, moments: tuple, resid, mu0, memb, stats=None, moment_cells_follow: bool = False
) -> tuple:
    """Thresholds, grids and floors for m buckets, all chosen from the fitting rows before the descent.

    * alpha / beta "auto" (exact step): a cell is corrected only when its residual is at least z of *its
      own* standard errors from 0, z = the Bonferroni critical value at level 0.1 over all audited cells,
      and it has >= 20 rows; alpha_ / beta_a are then the mass-weighted floor such a cell must also pass.
      With the paper step (or given numbers), the plain mass-weighted thresholds of format 1.
    * mean_buckets "quantile": mean buckets at the quantiles of the initial mean prediction.
    * moment_buckets "data": moment buckets evenly spaced on a log scale over the range of the groups'
      average pseudo-moments (widened 1.5x each side), and moment predictions kept >= a floor > 0.

    Parameters
    ----------
    est : MomentMulticalibrator
        The estimator whose parameters (rules, step, bucket kinds) are resolved.
    m, G, nf : int
        Buckets per predictor, groups, fitting rows.
    moments : tuple of int
        The central moments fitted.
    resid, mu0 : ndarray or None
        The fitting rows' residuals and initial mean (unit scale); None when ``stats`` is given.
    memb : Membership or None
        The fitting rows' group membership; None when ``stats`` is given.
    stats : FitStats, optional
        The figures the choices are made from (the Dask engine's, by reductions); default: from the arrays.
    moment_cells_follow : bool
        Whether the moments' cell step follows the descent (enough held-out rows to judge it): with the "se"
        rule for beta the descent then leaves the moments to it (``z_moment``).

    Returns
    -------
    (DescentParams, dict)
        The parameters and the initial moment predictions {moment: value}.
    """
    K = len(moments)
    if stats is None:  # the numpy engine; the Dask engine passes the same figures computed by reductions
        stats = FitStats.from_arrays(resid, mu0, memb, moments, est.odd_moments)
    se = _se_test(est, G, m, K)
    alpha, beta, moment_betas = _thresholds(est, se, stats, moments, G, m, nf)
    extra: dict = {"z": se.z, "z_group": se.z_group, "min_count": se.min_count}
    extra.update(_se_options(est, se, stats, moments))
    if est.moment_buckets == "data" and est.step == "exact" and not (est.odd_moments == MomentKind.SIGNED and K >= 2):
        extra["moment_step"] = "ratio"  # positive moments on their own (log) scale
        if moment_cells_follow and se.on and moments and est.alpha == "se" and est.beta == "se":
            # The descent's moment cells are (group, mean bucket, moment bucket) cells corrected each to its own
            # fitting-row moment: noise the cell step after it cannot see (it is fitted on the same rows), which
            # kept the known-truth worlds' worst group 10-20% off. The cell step, shrunk by each cell's
            # evidence, nested groups more, and judged on held-out rows, then fits them alone
            # (benchmarks/README.md, "Moments left to the cell step"). Not when a threshold is given: the cell
            # steps are dropped when they break it (the moments' re-bucket the joint mean cells), and the
            # descent's moments are then all the model has.
            extra["z_moment"] = NO_GROUP_MOMENT_Z
    if est.mean_buckets == "quantile" and m >= 2:
        q = stats.mean_quantile_edges(m)
        extra["mean_edges"] = fill_edges(q, m, 0.0, 1.0) if q else ()
    if est.moment_buckets == "data":
        extra["moment_edges"], extra["moment_floors"] = _moment_grids(
            est, stats, moments, m, nf, se.min_count, beta, moment_betas
        )
    params = descent_params(est, alpha, beta, moments, moment_betas, m, **extra)
    init_moments = {a: float(np.clip(stats.label_mean(a), *params.projection(a))) for a in moments}
    return params, init_moments


def _se_test(est, G: int, m: int, K: int) -> _SeTest:
    se = est.step == "exact" and (est.alpha == "se" or est.beta == "se")
    # finer cells: family-wise level 0.1 (Bonferroni) over every audited cell; whole groups of the mean:
    # family-wise level 0.1 too. (A per-family error rate of 1 was tried: in the null world -- the base IS
    # the true mean -- it shifted a correct base by 0.2-0.45 label points in 3 of 10 seeds, each shift
    # then found by the audit on fresh rows.) Whole groups of a moment: see z_group_moment below.
    z = bonferroni_z(G * m * (1 + 2 * K * m), SE_LEVEL) if se else 0.0
    z_group = bonferroni_z(G * (1 + K), SE_GROUP_LEVEL) if se else 0.0
    z_group_moment = min(SE_GROUP_MOMENT_Z, z_group)
    if est.shrunken_cells and est.calibration_fraction > 0:
        # the moments' cell step (after the descent, judged on held-out rows) takes whole groups' moments
        # with shrinkage; the descent's own whole-group test is a t test on skewed pseudo-labels, whose lower
        # tail is heavy: in a world of equal spread (10,000 rows) it moved a small group's variance down by
        # 20-30% in 3 of 10 fits (worst group up to 45% off; 8% at most without it). On islp_wage's held-out
        # rows it had caught real group spread the cell step shrinks more (benchmarks/README.md, "Moment cells")
        z_group_moment = NO_GROUP_MOMENT_Z
    mgz = est.mean_group_z  # checked with the other parameters (mmc_core.fit.parameters)
    if se and mgz not in GROUP_Z_RULES:
        # Whole groups of the mean at a fixed critical value (issue 10, held-out tables): a significant
        # bucket cell corrected on its own moves the means of the groups holding it by the part of their
        # residual the other, not significant, buckets used to cancel; at the Bonferroni z_group that
        # induced group-level bias (often 2-3 se) is left in place. Moments keep their own z_group_moment.
        z_group = float(mgz)
    return _SeTest(se, z, z_group, z_group_moment, SE_MIN_COUNT if se else 0)


def _thresholds(est, se: _SeTest, stats, moments: tuple, G: int, m: int, nf: int) -> tuple:
    """(alpha, beta, moment_betas): the descent's thresholds from the rules or numbers given."""

    def thr(rule, spread, n_cells):
        if rule == "se" and se.on:
            # the floor: the mass-weighted residual of a min_count-row cell at z standard errors
            return float(np.clip(se.z * spread * np.sqrt(se.min_count) / max(nf, 1), 1e-7, 0.05))
        return auto_threshold(spread, n_cells, nf)

    K = len(moments)
    alpha = thr(est.alpha, stats.resid_std, G * m * (1 + K * m)) if isinstance(est.alpha, str) else float(est.alpha)
    moment_betas: tuple = ()
    if not isinstance(est.beta, str):
        beta = float(est.beta)
    elif not moments:
        beta = 0.01  # unused: no moments are fitted
    else:
        # each moment on its own scale: a fourth moment's errors are far smaller than a variance's
        per = {a: thr(est.beta, stats.label_std(a), G * m * m) for a in moments}
        beta = per[2]
        moment_betas = tuple((a, b) for a, b in per.items() if a != 2)
    return alpha, beta, moment_betas


def _se_options(est, se: _SeTest, stats, moments: tuple) -> dict:
    """The fields of ``DescentParams`` that say which families the standard-error test gates and how."""
    extra: dict = {}
    if se.on and not (est.alpha == "se" and est.beta == "se"):
        # the per-cell test gates only the family whose threshold is "se": the other one is the paper's plain
        # test, which the descent then meets on the fitting rows
        extra["se_scope"] = "mean" if est.alpha == "se" else "moments"
    if se.on and moments and est.beta == "se":
        extra["moment_var_floors"] = tuple(
            (a, float(stats.label_std(a)) ** 2 * MOMENT_VAR_FLOOR_SHARE) for a in moments
        )
        # A moment's whole group is corrected from |t| >= z_group_moment (the Bonferroni z_group), part-way:
        # the share max(1/2, 1 - 1 / t^2) of the gap to its own fitting-row moment (James-Stein with a floor
        # of 1/2; DescentParams.moment_shrink). Smaller gaps are left to the moments' cell step after the
        # descent, which shrinks each by its evidence and is judged on held-out rows (SE_GROUP_MOMENT_Z).
        extra["z_group_moment"] = se.z_group_moment
        extra["moment_shrink"] = SE_MOMENT_SHRINK
    return extra


def _moment_grids(est, stats, moments: tuple, m: int, nf: int, min_count: int, beta, moment_betas) -> tuple:
    """moment_buckets "data": (edges, floors) of each positive moment, from the range of the big groups'
    average pseudo-moments."""
    edges, floors = [], []
    sizes = stats.sizes.astype(float)
    big = sizes >= max(FLOOR_MASS * nf, min_count, 1)
    for a in moments:
        if a % 2 == 1 and est.odd_moments == MomentKind.SIGNED:
            continue  # signed odd moments take both signs: keep the symmetric range grid
        r = max_central_moment(a)
        pooled = stats.label_mean(a)
        gsum = stats.group_label_sums(a)
        gm = gsum[big] / sizes[big] if big.any() else np.array([pooled])
        gm = gm[gm > 0]
        low, high = (float(gm.min()), float(gm.max())) if gm.size else (0.0, 0.0)
        if not (low > 0 and high > low * 1.01):
            low, high = pooled / 3.0, pooled * 3.0
        low, high = low / 1.5, min(high * 1.5, 0.9 * r)
        b_a = beta if a == 2 else dict(moment_betas).get(a, beta)
        floor = min(0.5 * b_a, 1e-3 * low) if low > 0 else 0.5 * b_a
        floors.append((a, float(max(floor, 1e-15))))
        if m >= 2 and 0 < low < high:
            edges.append((a, geometric_edges(low, high, m)))
    return tuple(edges), tuple(floors)

"""Recalibration of a base prediction before the descent (``base_recalibration``).

An over-fitted base model spreads its predictions too far: on new rows the label moves by only b < 1 per unit
of prediction. The descent's bucketed corrections remove that only at bucket resolution and only where a
single cell passes its test, so a line fitted over all fitting rows removes it better. Two maps:

* ``"affine"``: base -> a + b base (least squares). It also shrinks every group's mean toward the overall
  mean, so it moves the groups' biases (issue 10 measured it raising the group-level bias).
* ``"group-linear"``: base -> base + s (base - p) + u (p - center) + a, where p = P base is the least-squares
  projection of the base prediction on a constant and the listed groups' indicators (ridge-penalized, the
  penalty chosen by 5-fold cross-validation; fitted on the base, a function of the features, not on the
  labels), so base - p is the part of the base the groups do not explain. s is the slope *within* the groups
  and u the slope *between* them, fitted by least squares of y - base on (base - p, p - center, 1): a base
  that over-spreads its within-group signal but has the groups' means right gets s < 0 and u ~ 0, so the
  groups' means are left alone (the affine map would shrink them with everything else). The map may bend:
  hinges max(base - knot, 0) at the quartiles of the fitting rows' base (``KNOT_QUANTILES``) with their own
  slopes, for a base miscalibrated unevenly along its range (a booster over-fitted at its extremes, or a
  probability whose errors follow a logistic curve). Each step is applied at the share of it that rows it was
  not fitted on bear out (:func:`stack_gate`, one-member stacking): on the out-of-sample rows (the held-out
  rows and the fitting rows' 5-fold out-of-fold predictions) the residual is regressed on the step's change,
  and the step is applied at weight = that scale (in [0, 1]) x min(1, z / ``MIN_GAIN_Z``), z = the scale in
  robust standard errors. The bend is judged against the straight map (residuals after it, change = bent
  minus straight), the blended map against the base. A map that leaves some group significantly more biased
  out of sample than the base did (Bonferroni over the groups at ``HARM_LEVEL``) is refitted without the
  between-group slope, and dropped if that one does too: one group's error fitted by the between slope moves
  every group by its projected mean. So a calibrated base (scale about 0, z a standard normal's: the
  cross-fitted rows' terms are counted twice, see :func:`stack_gate`) is left as given or moved a little,
  and with fewer than ``GATE_MIN_ROWS`` out-of-sample rows it is used as given. On a
  larger table the map is fitted and checked on a seeded sample of ``CV_MAX_ROWS`` (50,000) fitting and
  held-out rows (it has only |G| + 3 + len(KNOT_QUANTILES) coefficients) and applied to every row.

The group-linear map then gives up its group part (:func:`_remove_group_part`): the ridge projection of its
change on the group indicators, which would move the groups' means, is subtracted (``init.mean.group_part``;
model files version 6). The groups' means are the descent's and the cell step's to correct, each on its own
test; carried along by the map's within-group evidence they moved on noise where the base had them right.

Both maps are fitted on the unit scale and stored in the model (``init.mean``); every base prediction passed
to ``predict`` goes through the same map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..groups.membership import Membership
from ..groups.sums import MembershipSums

__all__ = [
    "BASE_RECALIBRATIONS",
    "MIN_GAIN_Z",
    "affine_base",
    "fit_affine",
    "fit_group_linear",
    "group_linear_base",
    "within_slopes",
]

# "auto": group-linear (both engines), then for a 0/1 label the per-group logistic map (mmc_core.fit.logistic_map;
# numpy engine) when the whole fit with it is better on the held-out rows; "group-logistic": the logistic map on
# its own gate only
BASE_RECALIBRATIONS = ("auto", "none", "affine", "group-linear", "group-logistic")
# the group-linear map (and its bend) is applied at the full scale the out-of-sample rows support when that
# scale is this many robust standard errors above 0 (one-sided: about 2.3% of fits of a map that does not
# help), at z / MIN_GAIN_Z of it below that and not at all for z <= 0; benchmarks/README.md ("the soft gate",
# "Stacked weights")
MIN_GAIN_Z = 2.0
RIDGE_GRID = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
CV_FOLDS = 5
CV_MAX_ROWS = 50_000  # the map is fitted and cross-validated on at most this many rows (a seeded sample)
# hinges max(base - knot, 0) at these quantiles of the fitting rows' base prediction: a piecewise-linear bend
# of the map, for a base that is miscalibrated unevenly along its range (an over-fitted booster's extremes);
# gated on the share of it over the straight map that out-of-sample rows bear out (benchmarks/README.md, "The
# bent map", "Stacked weights")
KNOT_QUANTILES = (0.25, 0.5, 0.75)
# the bend is considered only with at least this many out-of-sample rows, cross-fitted ones included: with
# fewer, its weight and the map's own gate would be decided on a handful of rows (the same ones twice; a
# 12-row table got a full bend fitted on 9 rows that made fresh predictions 3.7x worse than the base)
BEND_MIN_ROWS = 100
# the map itself is applied only with at least this many out-of-sample rows: its z is a normal approximation,
# and on 3 held-out rows (a 12-row table, base = the truth, noise sd 10) the map got weight in about half the
# fits and left fresh predictions 7.9 label units squared off the truth on average (4.9 with the leverage
# correction; the squared-error gate: 3.0; now 0)
GATE_MIN_ROWS = 30
# family-wise level of the check that the map leaves no group significantly more biased out of sample than
# the base did (Bonferroni over the groups; 0 turns the check off)
HARM_LEVEL = 0.1
# the summary calls the within-group slope indistinguishable from 1 (the base right within the groups) when the
# fitted slope is less than this many robust standard errors from it on the fitting rows: where the listed
# groups explain the base almost fully, base - P base is a sliver whose fitted slope is noise (the demo table
# with 136 groups: stated slopes from -12 to +24). Only the statement changes: leaving such slopes out of the
# map (at |z| < 2) raised the test cell error on 7 of 14 held-out tables and lowered it on none (labsup +0.015
# +- 0.008; benchmarks/README.md, "The within slope"), as a pre-test estimator does
WITHIN_NOISE_Z = 2.0
_CG_TOL = 1e-10
_CG_MAX_ITER = 500


def affine_base(base_unit: np.ndarray, intercept: float, slope: float) -> np.ndarray:
    """A base prediction (unit scale) through the fitted line a + b x base, kept in the label range [0, 1]."""
    return np.clip(float(intercept) + float(slope) * np.asarray(base_unit, dtype=float), 0.0, 1.0)


def fit_affine(y: np.ndarray, base: np.ndarray) -> tuple[float, float]:
    """(a, b) of the least-squares line y ~ a + b base (unit scale); a constant base gets slope 1 and the mean
    residual as intercept."""
    mb, my = float(np.mean(base)), float(np.mean(y))
    db = base - mb
    var = float(np.dot(db, db))
    b = float(np.dot(db, y - my)) / var if var > 0 else 1.0
    return my - b * mb, b


def _group_projection(
    base: np.ndarray, sums: MembershipSums, ridge: float, weights: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """(c0, c) minimizing sum_i w_i (base_i - c0 - (M c)_i)^2 + ridge ||c||^2 (M: the rows' group
    indicators, w: 0/1 row weights, all 1 by default), by conjugate gradients on the normal equations with a
    Jacobi preconditioner. Only group sums and per-row sums of group values are needed (the membership
    primitive), so an iteration costs one pass over the (row, group) pairs or the signatures. The ridge is
    in rows: a group with far fewer rows than ``ridge`` keeps a coefficient near 0 (its rows are explained
    by their other groups); overlapping indicators that sum to the whole table make the unpenalized system
    singular, which any ridge > 0 resolves."""
    n, G = sums.n, sums.G
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    ridge = max(float(ridge), 1e-9 * max(n, 1))

    def matvec(v0: float, v: np.ndarray) -> tuple[float, np.ndarray]:
        rowvec = w * (v0 + sums.row_sums(v))
        return float(rowvec.sum()), sums.group_sums(rowvec) + ridge * v

    wb = w * base
    b0, b = float(wb.sum()), sums.group_sums(wb)
    d0, d = max(float(w.sum()), 1.0), sums.group_sums(w) + ridge
    x0, x = 0.0, np.zeros(G)
    r0, r = b0, b.copy()
    z0, z = r0 / d0, r / d
    p0, p = z0, z.copy()
    rz = r0 * z0 + float(r @ z)
    norm_b = math.sqrt(b0 * b0 + float(b @ b)) or 1.0
    for _ in range(_CG_MAX_ITER):
        if math.sqrt(r0 * r0 + float(r @ r)) <= _CG_TOL * norm_b:
            break
        q0, q = matvec(p0, p)
        pq = p0 * q0 + float(p @ q)
        if pq <= 0:
            break
        step = rz / pq
        x0, x = x0 + step * p0, x + step * p
        r0, r = r0 - step * q0, r - step * q
        z0, z = r0 / d0, r / d
        rz_new = r0 * z0 + float(r @ z)
        p0, p = z0 + (rz_new / rz) * p0, z + (rz_new / rz) * p
        rz = rz_new
    return x0, x


def _choose_ridge(base: np.ndarray, sums: MembershipSums, seed: int = 0) -> float:
    """The ridge (in rows) whose projection predicts the base best on rows it was not fitted on (5-fold
    cross-validation over RIDGE_GRID): what matters is that the groups' means of r = base - P base stay near
    0 on new rows, which an unpenalized projection of a few hundred rows on dozens of overlapping groups does
    not achieve (measured: the groups' means moved by 12-25 on a 210-row table). Above CV_MAX_ROWS rows the
    groups are large enough that the smallest ridge is used (fit_group_linear samples down to it first)."""
    n = sums.n
    if n > CV_MAX_ROWS:
        return RIDGE_GRID[0]
    fold = np.random.default_rng(seed).permutation(n) % CV_FOLDS
    err = np.zeros(len(RIDGE_GRID))
    for k in range(CV_FOLDS):
        w = (fold != k).astype(float)
        for j, lam in enumerate(RIDGE_GRID):
            c0, c = _group_projection(base, sums, lam, w)
            r = (base - (c0 + sums.row_sums(c)))[fold == k]
            err[j] += float(r @ r)
    return RIDGE_GRID[int(np.argmin(err))]


def _hinges(base: np.ndarray, knots) -> np.ndarray:
    """(n, len(knots)): max(base - knot, 0) for each knot (for the least-squares fits, on at most CV_MAX_ROWS)."""
    return np.maximum(np.asarray(base, dtype=float)[:, None] - np.asarray(knots, dtype=float)[None, :], 0.0)


def _bend(base: np.ndarray, knots, bends) -> np.ndarray:
    """sum_k bend_k max(base - knot_k, 0), one knot at a time (no (n, k) temporary on every row)."""
    out = np.zeros(base.shape)
    for knot, bend in zip(knots, bends):
        if bend:
            out += float(bend) * np.maximum(base - float(knot), 0.0)
    return out


def within_slopes(m: dict) -> list:
    """The map's slope along the base within a group (1 + slope, then + each bend past its knot): one value
    per segment of the base's range, for the summary sentence."""
    out = [1.0 + float(m["slope"])]
    for bend in m.get("bends") or []:
        out.append(out[-1] + float(bend))
    return out


def group_linear_base(base_unit: np.ndarray, sums: MembershipSums, m: dict) -> np.ndarray:
    """The ``"group-linear"`` map ``m`` applied to a base prediction (unit scale), kept in [0, 1]:
    base + slope (base - p) + between (p - center) + shift + sum_k bend_k max(base - knot_k, 0),
    p = offset + the row's groups' coefficients (a map saved before the hinges has no ``knots``)."""
    base = np.asarray(base_unit, dtype=float)
    slope, between, shift = float(m["slope"]), float(m["between"]), float(m["shift"])
    bends = np.asarray(m.get("bends") or [], dtype=float)
    if slope == 0.0 and between == 0.0 and shift == 0.0 and not np.any(bends):
        return np.clip(base, 0.0, 1.0)
    proj = float(m["offset"]) + sums.row_sums(np.asarray(m["groups"], dtype=float))
    out = base + slope * (base - proj) + between * (proj - float(m["center"])) + shift
    if np.any(bends):
        out += _bend(base, m["knots"], bends)
    part = m.get("group_part")
    if part:
        out -= float(part["offset"]) + sums.row_sums(np.asarray(part["groups"], dtype=float))
    return np.clip(out, 0.0, 1.0)


def _coefficients(
    y: np.ndarray, base: np.ndarray, proj: np.ndarray, w: np.ndarray | None = None, knots=(), between: bool = True
) -> np.ndarray:
    """(slope, between, shift, center, bend_1, ...): least squares of y - base on (base - proj,
    proj - center, 1, the hinges at ``knots``) over the rows with weight 1 (all rows without ``w``); without
    ``between`` the (proj - center) term is left out (its coefficient 0)."""
    sel = slice(None) if w is None else w > 0
    b, p, e = base[sel], proj[sel], (y - base)[sel]
    center = float(np.mean(p)) if p.size else 0.0
    cols = [b - p, p - center, np.ones_like(b), _hinges(b, knots)]
    if not between:
        cols[1] = np.zeros_like(b)
    X = np.column_stack(cols)
    k = X.shape[1]
    coef = np.linalg.lstsq(X, e, rcond=None)[0] if e.size > k else np.zeros(k)
    if not between:
        coef[1] = 0.0
    return np.concatenate([coef[:3], [center], coef[3:]])


def _within_z(y: np.ndarray, base: np.ndarray, proj: np.ndarray) -> float | None:
    """The within slope of the straight map in robust (HC1) standard errors: least squares of y - base on
    (base - proj, proj - center, 1). When the listed groups explain the base almost fully, base - proj is a
    sliver and its slope is whatever the noise makes it (on the demo table with 136 groups the summary stated
    within slopes from -12 to +24, at |z| = 0.3-2.1). None when it cannot be estimated (too few rows, or no
    within-group variation of the base at all)."""
    e = y - base
    X = np.column_stack([base - proj, proj - float(np.mean(proj)) if proj.size else proj, np.ones_like(base)])
    n, k = X.shape
    if n <= k + 1 or not np.any(X[:, 0]):
        return None
    xtx_inv = np.linalg.pinv(X.T @ X)
    coef = xtx_inv @ (X.T @ e)
    u = e - X @ coef
    meat = (X * (u * u)[:, None]).T @ X * (n / (n - k))
    var = float((xtx_inv @ meat @ xtx_inv)[0, 0])
    if not var > 0:
        return None
    return float(coef[0]) / math.sqrt(var)


def _change(base: np.ndarray, proj: np.ndarray, coef: np.ndarray, knots=()) -> np.ndarray:
    """The map's change of the base (before clipping)."""
    out = coef[0] * (base - proj) + coef[1] * (proj - coef[3]) + coef[2]
    if len(knots):
        out = out + _bend(base, knots, coef[4:])
    return out


def harmed_groups(sets, level: float = 0.1, min_rows: int = 30) -> list:
    """Groups a map leaves significantly more biased on out-of-sample rows than the base left them.

    ``sets``: (y, base, sums, change) per set of out-of-sample rows; see :func:`harmed_by`."""
    return harmed_by([(sm, yy - b, yy - np.clip(b + ch, 0.0, 1.0)) for yy, b, sm, ch in sets], level, min_rows)


def harmed_by(sets, level: float = 0.1, min_rows: int = 30, sd_floor: np.ndarray | None = None) -> list:
    """Groups whose mean out-of-sample residual grows beyond chance under a change.

    ``sets``: (sums, residual before, residual after) per set of out-of-sample rows. A group is harmed when the
    size of its mean residual after exceeds the size before by more than the two-sided Bonferroni critical value
    over the groups (family-wise ``level``) in standard errors of that mean. Returns the indices of such groups
    (with at least ``min_rows`` out-of-sample rows). ``sd_floor`` (|G|,): the least standard deviation of a
    row's residual after, per group (a group's few rows can understate it when the residuals have heavy
    tails)."""
    from .thresholds import bonferroni_z

    if not sets:
        return []
    G = sets[0][0].G
    cnt, before, after, after2 = (np.zeros(G) for _ in range(4))
    for sm, e0, e1 in sets:
        cnt += sm.group_sums()
        before += sm.group_sums(e0)
        after += sm.group_sums(e1)
        after2 += sm.group_sums(e1 * e1)
    with np.errstate(divide="ignore", invalid="ignore"):
        m0, m1 = before / cnt, after / cnt
        var = np.maximum(after2 / cnt - m1 * m1, 0.0) * cnt / np.maximum(cnt - 1, 1)
        if sd_floor is not None:
            var = np.maximum(var, np.asarray(sd_floor, dtype=float) ** 2)
        se = np.sqrt(var / cnt)
        zc = bonferroni_z(int(np.sum(cnt >= min_rows)), level)
        bad = (cnt >= min_rows) & (np.abs(m1) - np.abs(m0) > zc * se)
    return [int(g) for g in np.flatnonzero(bad)]


def stack_gate(e: np.ndarray, change: np.ndarray, paired: np.ndarray | None = None) -> tuple[float, float, float]:
    """(scale, z, weight) of a change judged on out-of-sample rows: scale = the least-squares coefficient of
    the residuals ``e`` on the rows' out-of-sample ``change`` (the share of the change that the labels bear
    out: 1 for a change that is right, 0 for one that is noise; Breiman's stacked regression with one
    member), z = scale in standard errors, weight = min(1, max(scale, 0)) x min(1, max(z, 0) /
    ``MIN_GAIN_Z``): the scale the rows support, applied in proportion to the evidence for it.

    The standard error is the robust one with each row's leverage divided out (HC3: a handful of
    out-of-sample rows, each carrying much of the fit, cannot pass for evidence), with the terms of the
    cross-fitted rows (``paired``: True for them) counted twice: fold k's residuals shape the maps that judge
    fold j and fold j's the map that judges fold k, so under a calibrated base each pair of folds enters the
    sum twice and its variance is twice what rows taken as independent give (measured on calibrated bases:
    sd of z 1.31-1.40 and z >= 2 in 5-7% before, in two worlds of 60-200 bases; 0.98 and 2% after, 200 bases;
    benchmarks/README.md, "Stacked weights")."""
    sxx = float(change @ change)
    if e.size < 2 or not sxx > 0:
        return 0.0, 0.0, 0.0
    scale = float(change @ e) / sxx
    u = e - scale * change
    lev = change * change / sxx
    if np.any(lev >= 1 - 1e-12):  # one row carries the whole change: no evidence
        return scale, 0.0, 0.0
    terms = (change * u / (1 - lev)) ** 2
    if paired is not None:
        terms = terms * np.where(paired, 2.0, 1.0)
    se = math.sqrt(float(terms.sum())) / sxx
    z = scale / se if se > 0 else (1e9 if scale > 0 else 0.0)
    return scale, z, min(max(scale, 0.0), 1.0) * min(max(z / MIN_GAIN_Z, 0.0), 1.0)


def _subsample(sums: MembershipSums, y: np.ndarray, base: np.ndarray, size: int, seed: int, also=()):
    """A seeded sample of ``size`` rows (kept in row order) with their own membership: the map has only
    |G| + 3 + len(KNOT_QUANTILES) coefficients, and fitting them by conjugate gradients on tens of millions of rows would cost
    minutes (one pass over the (row, group) pairs per iteration)."""
    memb = sums.memb
    idx = np.sort(np.random.default_rng(seed + 2).choice(memb.n, size=size, replace=False))
    keep = np.zeros(memb.n, dtype=bool)
    keep[idx] = True
    pos = np.cumsum(keep) - 1
    in_sample = keep[memb.rows]
    group_of_pair = np.repeat(np.arange(memb.n_groups), memb.sizes)
    counts = np.bincount(group_of_pair[in_sample], minlength=memb.n_groups)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(memb.indptr.dtype)
    sub = Membership(size, list(memb.names), indptr, pos[memb.rows[in_sample]].astype(memb.rows.dtype))
    return (MembershipSums(sub), y[idx], base[idx], *(np.asarray(a)[idx] for a in also))


def capped(sums: MembershipSums, y, x, seed: int, also=()) -> tuple:
    """(sums, y, x, *also) as given, or for more than ``CV_MAX_ROWS`` rows a seeded sample of that many
    (:func:`_subsample`; ``also``: more per-row arrays, taken at the same rows): what is fitted or checked on a
    sample and then applied to every row."""
    if np.asarray(x).size > CV_MAX_ROWS:
        return _subsample(sums, np.asarray(y), np.asarray(x), CV_MAX_ROWS, seed, also)
    return (sums, y, x, *also)


def fit_group_linear(
    y: np.ndarray,
    base: np.ndarray,
    sums: MembershipSums,
    held_out: tuple | None = None,
    seed: int = 0,
) -> dict:
    """The ``"group-linear"`` map fitted on the fitting rows and validated out of sample (unit scale).

    ``held_out`` = (y_h, base_h, sums_h): the held-out rows, if any. Above ``CV_MAX_ROWS`` rows (fitting or
    held-out) a seeded sample of that many is used. The out-of-sample rows are the held-out rows and the
    fitting rows' out-of-fold predictions (5 folds: the map refitted without the fold, projection included).
    The map is applied at weight min(1, max(scale, 0)) x min(1, z / ``MIN_GAIN_Z``) (:func:`stack_gate`; its
    coefficients but the projection multiplied by it; 0 for z <= 0: the base as given): scale = the
    least-squares coefficient of the out-of-sample residuals y - base on the map's out-of-sample change, z =
    scale in robust standard errors. Until 2026-11-27 the weight was min(1, z_gain / 2) with z_gain the
    out-of-sample squared-error gain in standard errors: for a right change that gain has half the z of the
    change's scale, so a right map was applied at about half its weight until its evidence was twice as
    strong, and the scale was never estimated (a map half right was applied in full). On 25 held-out tables
    the stacked weight lowered the cell error on 20 (benchmarks/README.md, "Stacked weights").

    The bend (hinges at ``KNOT_QUANTILES`` of the base, those strictly inside its range; only with at least
    ``BEND_MIN_ROWS`` out-of-sample rows) is decided first, on the same out-of-sample rows and by the same rule:
    the residuals after the straight map regressed on the bent map's change over it give the bend's scale,
    z_bend and weight; the map checked against the base is the straight one plus that share of the bent one's
    difference (on a calibrated base, and on one whose straight map is right, both weights stay as rare as
    the straight map's alone: tests/test_core_base_recalibration.py).

    Returns ``{"offset", "groups", "slope", "between", "shift", "center", "knots", "bends", "ridge",
    "validation"}``; ``validation`` = {"rows", "gain", "scale", "z", "weight", "bend_scale", "bend_z",
    "bend_weight", "kept", ...} (gain: out-of-sample mean squared-error reduction per row of the full blended
    map, unit scale; kept: weight > 0)."""
    rows = _map_rows(y, base, sums, held_out, seed)
    # A map that leaves some group more biased on the out-of-sample rows than the base left it, by more than the
    # Bonferroni z in standard errors (harmed_groups), is refitted without the between-group slope (which moves
    # every group by its projected mean: one group's error fixed by a slope drags the others along); if that one
    # harms a group too, the base is used as given.
    cand = _candidate(rows, True)
    dropped, map_harm = None, []
    if cand["harmed"]:
        dropped = cand["harmed"]
        cand = _candidate(rows, False)
        if cand["harmed"]:
            map_harm = cand["harmed"]
            cand["coef"] = np.concatenate([np.zeros(3), cand["coef"][3:4], np.zeros(rows.knots.size)])
            cand["weight"], cand["bend_w"] = 0.0, 0.0
    return _map_record(rows, cand, dropped, map_harm)


@dataclass
class _MapRows:
    """What every candidate map is fitted and judged on: the fitting rows (a sample above ``CV_MAX_ROWS``), their
    ridge projection on the groups (``c0`` + ``c``, ``proj``), the knots, the held-out rows and the folds of the
    cross-fit (each fold's projection fitted without it)."""

    y: np.ndarray
    base: np.ndarray
    sums: MembershipSums
    held_out: tuple | None
    ridge: float
    c0: float
    c: np.ndarray
    proj: np.ndarray
    within_z: float | None
    knots: np.ndarray
    cross_fit: bool
    fold: np.ndarray
    fold_proj: list


def _map_rows(y, base, sums: MembershipSums, held_out, seed: int) -> _MapRows:
    y = np.asarray(y, dtype=float)
    base = np.asarray(base, dtype=float)
    sums, y, base = capped(sums, y, base, seed)  # fitted and cross-validated on a sample; applied to every row
    if held_out is not None:
        sums_h, y_h, base_h = capped(held_out[2], held_out[0], held_out[1], seed + 7)
        held_out = (y_h, base_h, sums_h)
    n = base.size
    ridge = _choose_ridge(base, sums, seed)
    c0, c = _group_projection(base, sums, ridge)
    proj = c0 + sums.row_sums(c)
    within_z = _within_z(y, base, proj)
    # knots at quantiles of the fitting rows' base (a function of the features, not of the labels), the distinct
    # ones strictly inside its range: a knot at the minimum makes its hinge the straight map's own term (base
    # tied there, e.g. probabilities clipped at 0), and least squares would then split the slope between
    # them arbitrarily; none without enough out-of-sample rows to check a bend on
    cross_fit = 2 * CV_FOLDS <= n <= CV_MAX_ROWS
    n_out = (held_out[0].size if held_out is not None else 0) + (n if cross_fit else 0)
    knots = np.zeros(0)
    if n and n_out >= BEND_MIN_ROWS:
        knots = np.unique(np.quantile(base, KNOT_QUANTILES))
        knots = knots[(knots > base.min()) & (knots < base.max())]
    fold = np.random.default_rng(seed + 1).permutation(n) % CV_FOLDS
    fold_proj = []  # each fold's projection, fitted without it (the same for both candidates)
    if cross_fit:
        for k in range(CV_FOLDS):
            k0, kc = _group_projection(base, sums, ridge, (fold != k).astype(float))
            fold_proj.append(k0 + sums.row_sums(kc))
    if held_out is not None and held_out[0].size:
        y_h, base_h, sums_h = held_out
        held_out = (np.asarray(y_h, dtype=float), np.asarray(base_h, dtype=float), sums_h)
    return _MapRows(y, base, sums, held_out, ridge, c0, c, proj, within_z, knots, cross_fit, fold, fold_proj)


def _out_of_sample_sets(r: _MapRows, lin: np.ndarray, full: np.ndarray | None, between: bool) -> list:
    """[(y, base, sums, change of the straight map, change of the bent map)]: the held-out rows with the full
    fit's changes, and the fitting rows with the 5-fold cross-fit's."""
    sets = []
    if r.held_out is not None and r.held_out[0].size:
        y_h, base_h, sums_h = r.held_out
        p_h = r.c0 + sums_h.row_sums(r.c)
        chf = None if full is None else _change(base_h, p_h, full, r.knots)
        sets.append((y_h, base_h, sums_h, _change(base_h, p_h, lin), chf))
    if r.cross_fit:
        n = r.base.size
        dl, df = np.zeros(n), np.zeros(n)
        for k, p_k in enumerate(r.fold_proj):
            w = (r.fold != k).astype(float)
            out = r.fold == k
            dl[out] = _change(r.base, p_k, _coefficients(r.y, r.base, p_k, w, between=between))[out]
            if full is not None:
                df[out] = _change(r.base, p_k, _coefficients(r.y, r.base, p_k, w, r.knots, between), r.knots)[out]
        sets.append((r.y, r.base, r.sums, dl, None if full is None else df))
    return sets


def _candidate(r: _MapRows, between: bool) -> dict:
    """The map fitted, its out-of-sample changes (held-out rows from the full fit, fitting rows from 5-fold
    cross-fitting) and both gates: the bend against the straight map, then the blend against the base."""
    lin = _coefficients(r.y, r.base, r.proj, between=between)
    full = _coefficients(r.y, r.base, r.proj, knots=r.knots, between=between) if r.knots.size else None
    sets = _out_of_sample_sets(r, lin, full, between)
    # the bend first: the residuals after the straight map against the bent map's change over it (on every
    # out-of-sample row), blended in at its own weight; then the residuals against the blended map's change,
    # applied at its weight (the soft gate on the stacked scale)
    # the cross-fitted rows (the last set when cross-fitting) are judged by maps fitted on each other's folds
    paired = np.concatenate(
        [np.full(st[0].size, r.cross_fit and k == len(sets) - 1) for k, st in enumerate(sets)]
        or [np.zeros(0, dtype=bool)]
    )
    bend_scale, bend_z, bend_w = 0.0, 0.0, 0.0
    if full is not None and sets:
        after = [np.clip(b + ch, 0.0, 1.0) for _, b, _, ch, _ in sets]
        bend_scale, bend_z, bend_w = stack_gate(
            np.concatenate([yy - a for (yy, *_), a in zip(sets, after)]),
            np.concatenate([np.clip(b + chf, 0.0, 1.0) - a for (_, b, _, _, chf), a in zip(sets, after)]),
            paired,
        )
    pad = np.concatenate([lin[:4], np.zeros(r.knots.size)])
    blend = pad if full is None else pad + bend_w * (full - pad)
    changes = [ch if chf is None else ch + bend_w * (chf - ch) for _, _, _, ch, chf in sets]
    d = np.concatenate(
        [(b - yy) ** 2 - (np.clip(b + ch, 0.0, 1.0) - yy) ** 2 for (yy, b, *_), ch in zip(sets, changes)] or [[]]
    )
    gain = float(np.mean(d)) if d.size else 0.0
    scale, z, weight = (
        (0.0, 0.0, 0.0)
        if d.size < GATE_MIN_ROWS
        else stack_gate(
            np.concatenate([yy - b for (yy, b, *_) in sets] or [[]]),
            np.concatenate([np.clip(b + ch, 0.0, 1.0) - b for (_, b, *_), ch in zip(sets, changes)] or [[]]),
            paired,
        )
    )
    coef = np.concatenate([blend[:3] * weight, [lin[3]], blend[4:] * weight])
    harmed = (
        harmed_groups([(yy, b, sm, weight * ch) for (yy, b, sm, *_), ch in zip(sets, changes)], HARM_LEVEL)
        if HARM_LEVEL > 0 and weight > 0
        else []
    )
    return {
        "coef": coef,
        "gain": gain,
        "scale": scale,
        "z": z,
        "weight": weight,
        "bend_scale": bend_scale,
        "bend_z": bend_z,
        "bend_w": bend_w,
        "rows": int(d.size),
        "harmed": harmed,
    }


def _map_record(r: _MapRows, cand: dict, dropped, map_harm: list) -> dict:
    """The kept map's coefficients (its group part removed when it is applied) and its validation record."""
    coef, weight = cand["coef"], cand["weight"]
    kept = weight > 0
    m = {
        "offset": float(r.c0),
        "groups": [float(v) for v in r.c],
        "slope": float(coef[0]),
        "between": float(coef[1]),
        "shift": float(coef[2]),
        "center": float(coef[3]),
        "knots": [float(v) for v in r.knots],
        "bends": [float(v) for v in coef[4:]],
        "ridge": float(r.ridge),
    }
    removed = _remove_group_part(m, r.base, r.sums) if kept else None
    names = r.sums.memb.names
    return {
        **m,
        "validation": {
            "rows": cand["rows"],
            "gain": cand["gain"],
            "scale": cand["scale"],
            "z": cand["z"],
            "weight": weight,
            "bend_scale": cand["bend_scale"],
            "bend_z": cand["bend_z"],
            "bend_weight": cand["bend_w"],
            "kept": kept,
            # the straight map's within slope in robust standard errors on the fitting rows (for the summary)
            "within_z": r.within_z,
            "between_dropped_for": [names[g] for g in dropped] if dropped else [],
            # the groups the map without the between slope harmed too (it was then not used at all)
            "map_dropped_for": [names[g] for g in map_harm],
            # the size (root mean square over the fitting rows, unit scale) of the part of the map's change that
            # moved the groups' means, removed (:func:`_remove_group_part`); None: nothing removed
            "group_part_removed": removed,
        },
    }


def _remove_group_part(m: dict, base: np.ndarray, sums: MembershipSums) -> float:
    """Takes out of the map ``m`` (in place) the part of its change that moves the listed groups' means: the
    ridge projection (``m["ridge"]``, as for the base) of the change on the fitting rows onto a constant and
    the group indicators, d0 + M d, stored as ``m["group_part"]`` = {"offset": d0, "groups": d} and
    subtracted wherever the map is applied (:func:`group_linear_base`). Returns its root mean square over the
    fitting rows (unit scale).

    Why: the groups' means are the descent's and the cells' to correct, each on its own test. Left in the map
    they rode on its within-group evidence: where the base was already right (null worlds built from 25
    tables' own residuals), the map raised the test rows' group-level bias by 3% on average and the whole fit
    by 4%, against 1.6% without this part, while the cell error on the real tables was no higher (seeds
    0-29 and 500-529; benchmarks/README.md, "The base map without its group part")."""
    b = np.asarray(base, dtype=float)
    change = group_linear_base(b, sums, m) - b
    d0, d = _group_projection(change, sums, float(m["ridge"]))
    m["group_part"] = {"offset": float(d0), "groups": [float(v) for v in d]}
    part = d0 + sums.row_sums(d)
    return float(np.sqrt(np.mean(part * part))) if part.size else 0.0

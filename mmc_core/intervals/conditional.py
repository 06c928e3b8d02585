"""Conditional conformal prediction over the group indicators (approach ``cc``, the default ``calibrated``
method): see the package docstring for what it guarantees."""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..common.errors import MMCError

# ---- conditional conformal over the group indicators (approach "cc", the default) --------------------------
# Margin of the per-group level in binomial standard errors of the group's calibration count (see
# fit_conditional), the sweeps of exact block coordinate steps before the final upward pass.
CC_MARGIN = 0.9
# The margin of a cross-fitted record (interval_calibration "cross-fit", an option): out-of-fold scores
# are only approximately exchangeable with the final model's (mmc_core.intervals, 2'.), and with every row calibrating
# (4x the held-out rows) a margin of 1.25 se costs 0.625 held-out se. Measured on the coverage protocol
# (benchmarks/README.md, issue 9, 30 splits): 0.9 flagged 0.61% of the groups, 1.25 0.37% (held-out at 0.9: 0.41%).
CC_MARGIN_CROSS_FIT = 1.25
CC_SWEEPS = 1
CC_OPTIONS = ("margin", "sweeps", "two_sided", "combine")
# How a row's group thresholds combine: "max" (fit_group_max, the default) or "sum" (fit_conditional).
CC_COMBINE = ("max", "sum")
CC_DEFAULT_COMBINE = "max"
# The max rule's defaults: no margin and the symmetric score |u|. Its per-group guarantee in expectation is then
# exactly split conformal's within the group, and taking the largest of a row's group thresholds is itself a
# margin. Measured on issue 9's two CPS tables (28k / 61k rows, 10 splits x 2 bases, benchmarks/README.md):
# flagged 0.03% of the judged groups against the sum rule's 0.89% (margin 0.9), at the same or smaller widths;
# with a margin of 0.5 it flagged 0 at 2-3% more width, and on small tables (3-6k rows) 10-25% more.
CC_MAX_MARGIN = 0.0
CC_MAX_TWO_SIDED = False


def _disjoint_layers(memb) -> list:
    """The groups with calibration rows split into layers of pairwise disjoint groups (first fit, largest groups
    first): a coordinate step on every group of a layer at once is then exact (the groups share no row).
    Returns [(group ids, their rows concatenated, local group index per row, each group's first position)]."""
    sizes = memb.sizes
    order = np.argsort(-sizes, kind="stable")
    layers: list[list[int]] = []
    used: list[np.ndarray] = []
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
    for layer in layers:
        gs = np.asarray(layer, dtype=np.int64)
        rows = np.concatenate([memb.group_rows(int(g)) for g in gs])
        loc = np.repeat(np.arange(gs.size), sizes[gs])
        starts = np.concatenate([[0], np.cumsum(sizes[gs])[:-1]]).astype(np.int64)
        out.append((gs, rows, loc, starts))
    return out


def _layer_step(s, q, rows, loc, starts, k, bound):
    """Per (delta, group of the layer): the k-th smallest of s - q over the group's rows ((D, groups) steps).
    ``s`` and ``q`` are (D, n) (``q`` None: zero), ``k`` (D, groups) ranks in 1..n_g, ``bound`` >= max |s - q|.
    One float sort per delta: the values of group j are shifted by j x span (span = 2 bound + 1 exceeds their range), so the groups
    come out in blocks, each sorted; the k-th value is read back from its block (exact up to a rounding of
    ~1e-16 x groups x span, far below the cushion that fit_conditional adds at the end)."""
    P = rows.size
    span = 2.0 * bound + 1.0
    off = np.arange(starts.size) * span
    vals = s[:, rows] if q is None else s[:, rows] - q[:, rows]  # q None: no thresholds yet (the max rule)
    srt = np.sort(vals + (off[loc] + bound)[None, :], axis=1)
    # one row of values for every delta (the symmetric score |u| and no thresholds yet: the max rule): one
    # sort, read at each delta's ranks; else one sorted row per delta
    row = (np.arange(srt.shape[0]) * P)[:, None] if srt.shape[0] > 1 else 0
    kth = srt.ravel()[row + starts[None, :] + k - 1]
    return kth - (off + bound)[None, :]


def _scores_and_ranks(memb, u, deltas, margin, sweeps, two_sided):
    """What both threshold rules share: the two-sided score s (D, n; one row, |u|, when not ``two_sided``), the
    pooled side scales a_up, a_lo (D,),
    the per-group ranks k (D, G) and the deltas whose pooled conformal rank exists; None without rows/groups."""
    if not isinstance(margin, numbers.Real) or isinstance(margin, bool) or not math.isfinite(margin) or margin < 0:
        raise MMCError(f"cc: margin must be a non-negative number, got {margin!r}")
    if isinstance(sweeps, bool) or not isinstance(sweeps, numbers.Real) or sweeps != int(sweeps) or sweeps < 0:
        raise MMCError(f"cc: sweeps must be a non-negative integer, got {sweeps!r}")
    u = np.asarray(u, dtype=float)
    deltas = np.asarray(deltas, dtype=float)
    n = memb.n
    if n == 0 or memb.n_groups == 0:
        return None
    if two_sided:
        a_up = np.quantile(u, 1 - deltas / 2)
        a_lo = np.quantile(-u, 1 - deltas / 2)
        fb = max(float(np.quantile(np.abs(u), 0.5)), 1e-12)
        a_up = np.where(a_up > 0, a_up, fb)
        a_lo = np.where(a_lo > 0, a_lo, fb)
        s = np.maximum(u[None, :] / a_up[:, None], -u[None, :] / a_lo[:, None])  # (D, n)
    else:
        a_up = a_lo = np.ones(deltas.size)
        s = np.abs(u)[None, :]  # (1, n): the same score for every delta
    n_g = memb.sizes.astype(float)
    se = np.sqrt(deltas[:, None] * (1 - deltas[:, None]) / np.maximum(n_g, 1.0)[None, :])
    tau = 1 - deltas[:, None] + float(margin) * se
    k = np.minimum(np.ceil((n_g[None, :] + 1) * tau - 1e-9), n_g[None, :]).astype(np.int64)
    k = np.maximum(k, 1)
    ok_d = np.ceil((n + 1) * (1 - deltas) - 1e-12) <= n  # the pooled conformal rank exists
    return s, a_up, a_lo, k, ok_d, deltas


def fit_conditional(
    memb,
    u: np.ndarray,
    deltas,
    *,
    margin: float = CC_MARGIN,
    sweeps: int = CC_SWEEPS,
    two_sided: bool = True,
    return_info: bool = False,
):
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
    prep = _scores_and_ranks(memb, u, deltas, margin, sweeps, two_sided)
    if prep is None:
        up, lo = np.zeros((len(deltas), memb.n_groups)), np.zeros((len(deltas), memb.n_groups))
        up[:, :1] = lo[:, :1] = np.inf
        info: dict = {"side_scales": [], "too_few_rows": []}
        return (up, lo, info) if return_info else (up, lo)
    s, a_up, a_lo, k, ok_d, deltas = prep
    n, G, D = memb.n, memb.n_groups, deltas.size
    info = {
        "side_scales": [(float(a), float(b)) for a, b in zip(a_up, a_lo)],
        "too_few_rows": [float(d) for d in deltas[~ok_d]],
    }
    theta = np.zeros((D, G))
    q = np.zeros((D, n))
    layers = _disjoint_layers(memb)
    s_max, q_max = float(np.max(np.abs(s))), 0.0
    for rnd in range(int(sweeps) + 1):
        upward = rnd == int(sweeps)
        for gs, rows, loc, starts in layers:
            step = _layer_step(s, q, rows, loc, starts, k[:, gs], s_max + q_max)
            if upward:
                step = np.maximum(step, 0.0)
            theta[:, gs] += step
            q[:, rows] += step[:, loc]
            q_max += float(np.max(np.abs(step)))  # a bound on max |q|, kept without a pass over q
    # a cushion far below any meaningful width against rounding (thresholds are re-summed in another order)
    theta[:, 0] += 1e-9 * (1.0 + np.max(np.abs(q), axis=1))
    up = theta * a_up[:, None]
    lo = theta * a_lo[:, None]
    up[~ok_d, 0] = lo[~ok_d, 0] = np.inf
    return (up, lo, info) if return_info else (up, lo)


def fit_group_max(
    memb,
    u: np.ndarray,
    deltas,
    *,
    margin: float = CC_MAX_MARGIN,
    two_sided: bool = CC_MAX_TWO_SIDED,
):
    """The max rule (``combine`` "max", the default): Mondrian conformal prediction on the standardized score.

    theta_g = the k_g-th smallest score s among group g's calibration rows, with the score and the ranks of
    :func:`fit_conditional` (by default s = |u| and k_g = min(n_g, ceil((n_g + 1) (1 - delta))): no margin),
    and a row's threshold is the LARGEST theta_g over its groups. Every group has at least k_g calibration rows
    covered (its rows' thresholds are at least its own theta_g), and for the symmetric score a group's
    population coverage is at least that of its own split-conformal threshold: exact in expectation for every
    group with n_g >= ceil(1/delta) - 1. (``two_sided=True`` divides by the pooled side scales of
    :func:`fit_conditional`, which are estimated from all calibration rows: then approximately.) A group
    without calibration rows gets inf, which the row maximum skips.

    Returns (theta_up, theta_lo): (len(deltas), G), the row's interval is u in [-max theta_lo, max theta_up];
    every group inf for a delta whose pooled conformal rank exceeds n (the row maximum is then inf too).
    """
    prep = _scores_and_ranks(memb, u, deltas, margin, 0, two_sided)
    D = len(np.atleast_1d(deltas))
    if prep is None:
        return np.full((D, memb.n_groups), np.inf), np.full((D, memb.n_groups), np.inf)
    s, a_up, a_lo, k, ok_d, deltas = prep
    theta = np.zeros((deltas.size, memb.n_groups))
    bound = float(np.max(np.abs(s)))
    # with s = |u| (one row for every delta) the groups' scores are sorted once, not once per delta
    for gs, rows, loc, starts in _disjoint_layers(memb):
        theta[:, gs] = _layer_step(s, None, rows, loc, starts, k[:, gs], bound)
    theta = np.maximum(theta, 0.0) + 1e-9 * (1.0 + bound)  # the mean always inside; the same rounding cushion
    # a group without calibration rows says nothing: inf is skipped by the row maximum (a row none of whose
    # groups has calibration rows gets no finite threshold, an unbounded interval, as with Mondrian)
    theta[:, memb.sizes == 0] = np.inf
    up, lo = theta * a_up[:, None], theta * a_lo[:, None]
    up[~ok_d, :] = lo[~ok_d, :] = np.inf
    return up, lo

"""The audit's findings on a regression label, shared by the regression audit (:mod:`mmc_core.auditing.metrics`) and the
classifier audit (:mod:`mmc_core.auditing.binary`): the rows both start from (:func:`audit_rows`), the tests of every group
and cell with their error control and selection-adjusted intervals (:func:`group_findings`; the statistics in
:mod:`mmc_core.auditing.findings`), and the residual variance they use."""

from __future__ import annotations

import math

import numpy as np

from .. import intervals as iv
from ..common.errors import DataError
from ..common.tables import as_table, count_rows, to_label_array
from ..groups.sums import MembershipSums
from . import findings as fnd

__all__ = ["audit_rows", "group_findings", "residual_variance", "div"]


def div(a, b):
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)


def residual_variance(s1, s2, cnt):
    """Variance of a residual within each group, around the group's own mean residual (n - 1 denominator),
    from its group sums ``s1`` = sum r, ``s2`` = sum r^2 and the counts; NaN below 2 rows. A group whose
    predicted mean is off by a constant has the variance of its spread, not spread + bias^2: the bias is the
    mean test's finding (the paper's moment consistency is around the set's own mean too)."""
    s1, s2, cnt = (np.asarray(a, dtype=float) for a in (s1, s2, cnt))
    return np.maximum(div(s2 - s1 * div(s1, cnt), cnt - 1), 0.0)


def audit_rows(model, table, n: int, base, constant: str):
    """What the regression and the binary audit both start from: the base prediction (label units, or None)
    checked against the ``n`` labels, one prediction context of the table's rows (predictions and memberships
    computed once for every method), and the "before" prediction on the unit scale with its description: the
    base clipped to the label range, else the model's initial constant (``constant`` says what it is)."""
    if n == 0:
        raise DataError("the audit needs at least one labelled row")
    n_table = count_rows(as_table(table))
    if n_table != n:  # before the base: a label column one short is not the base prediction's fault
        raise DataError(f"the table has {n_table} rows but there are {n} labels")
    base_arr = None if base is None else to_label_array(base, "the base prediction", n)
    ctx = iv.IntervalContext(model, table, base_arr)
    if ctx.n != n:
        raise DataError(f"the table has {ctx.n} rows but there are {n} labels")
    if base_arr is None:
        return ctx, np.full(n, iv.initial_constant(model)), f"initial constant ({constant})"
    scale = model.scale
    return ctx, np.clip((base_arr - scale.lo) / scale.span, 0.0, 1.0), "base prediction"


def group_findings(
    pairs: MembershipSums,
    names,
    scale,
    mu,
    yu,
    var_pred,
    grid,
    inside,
    method,
    target,
    min_count,
    control,
    level,
    var_tol: float = 0.0,
    binary: bool = False,
    collect: list | None = None,
    kurtosis_floor: float | None = None,
):
    """Every test of the model's claims on these rows (mean per group and per mean-bucket cell, variance,
    coverage of ``method``), adjusted as one family. Returns (findings, number of tests). ``binary``: the
    label is a 0/1 outcome and ``mu`` a probability (mean tests: :func:`findings.binary_tests`).
    ``kurtosis_floor``: the least kurtosis of the standardized residual the variance tests allow for (the
    model's own fitting rows', ``info["residual_kurtosis"]``; None: the audit rows' alone)."""
    span = scale.span
    cnt = pairs.group_sums()
    r = yu - mu
    tests = _mean_tests(pairs, names, cnt, scale, mu, yu, r, grid, min_count, binary, var_pred)
    if var_pred is not None:
        tests += _variance_tests(pairs, names, cnt, r, var_pred, scale, min_count, var_tol, kurtosis_floor)
    if inside is not None:
        tests += _coverage_tests(pairs, names, cnt, r, inside, method, target, min_count, span)
    found = fnd.select_findings(tests, control, level)
    _selection_adjusted_intervals(found, len(tests), level, span, binary)
    _link_mean_findings(found, pairs, names, cnt)
    # ranked by harm (rows x the smallest defect the interval allows, label units: :func:`findings.harm`), not by
    # p: the tiny p of a big group's marginal variance misstatement put it above a real mean misprediction
    for t in found:
        t["harm"] = fnd.harm(t)
    found.sort(key=lambda t: (-t["harm"], t["p_adjusted"], -abs(t.get("z", 0.0))))
    if collect is not None:  # every test with its standard error, for the scorecard (before the pops below)
        collect.extend(dict(t) for t in tests)
    for t in found:
        for key in _WORKING_KEYS:
            t.pop(key, None)
        t.setdefault("method", None)
        t["text"] = fnd.describe(t)
    return found, len(tests)


# a test's working figures, kept for the scorecard and dropped from the findings
_WORKING_KEYS = (
    "statistic_mean",
    "statistic_se",
    "statistic_se_label",
    "statistic_skew",
    "ratio_se",
    "ratio_sums",
    "residual_sd",
)


def _mean_tests(pairs, names, cnt, scale, mu, yu, r, grid, min_count, binary: bool, var_pred=None) -> list:
    """The mean tests per group and per (group, mean bucket) cell, with their estimates and intervals in label
    units (a cell holding its whole group is left to the group's test). With the model's variance ``var_pred``
    (unit scale), a group's or cell's residual variance counts as at least :func:`_mean_var_floor`."""
    span = scale.span
    m = grid.m
    b = grid.index(mu)
    edges = scale.mean_from_unit(grid.edges())
    cc = pairs.cell_table(b, m).ravel()
    cell_names = [(g, i) for g in names for i in range(m)]
    pred_g = scale.mean_from_unit(div(pairs.group_sums(mu), cnt))
    obs_g = scale.mean_from_unit(div(pairs.group_sums(yu), cnt))
    pred_c = scale.mean_from_unit(div(pairs.cell_table(b, m, mu).ravel(), cc))
    obs_c = scale.mean_from_unit(div(pairs.cell_table(b, m, yu).ravel(), cc))
    if binary:
        pq = mu * (1.0 - mu)
        tests = fnd.binary_tests(
            "mean",
            names,
            cnt,
            pairs.group_sums(yu),
            pairs.group_sums(mu),
            pairs.group_sums(pq),
            min_count,
            predicted=pred_g,
            observed=obs_g,
        )
        cal = fnd.binary_tests(
            "calibration",
            cell_names,
            cc,
            pairs.cell_table(b, m, yu).ravel(),
            pairs.cell_table(b, m, mu).ravel(),
            pairs.cell_table(b, m, pq).ravel(),
            min_count,
            predicted=pred_c,
            observed=obs_c,
        )
    else:
        # Hall's skewness correction (the variance test uses it at every size): the plain t test of skewed residuals (a
        # log-normal label) rejected 13-27x as often as its level in the far tail where Holm decides; from
        # HALL_MIN_ROWS rows (below, the sample skewness is too noisy to correct with)
        r3 = r * r * r
        hall = fnd.HALL_MIN_ROWS
        floor_g, floor_c = _mean_var_floor(pairs, cnt, r, var_pred, b, m, cc)
        tests = fnd.group_tests(
            "mean",
            names,
            cnt,
            pairs.group_sums(r),
            pairs.group_sums(r * r),
            min_count,
            s3=pairs.group_sums(r3),
            hall_min=hall,
            var_floor=floor_g,
            predicted=pred_g,
            observed=obs_g,
        )
        cal = fnd.group_tests(
            "calibration",
            cell_names,
            cc,
            pairs.cell_table(b, m, r).ravel(),
            pairs.cell_table(b, m, r * r).ravel(),
            min_count,
            s3=pairs.cell_table(b, m, r3).ravel(),
            hall_min=hall,
            var_floor=floor_c,
            predicted=pred_c,
            observed=obs_c,
        )
    # a cell holding the whole group (every prediction of the group in one bucket) is the mean test again: one
    # finding reported twice, and one test too many in the family
    whole = {(names[g], i) for g, i in zip(*np.nonzero(cc.reshape(-1, m) == cnt[:, None]))}
    cal = [t for t in cal if tuple(t["group"]) not in whole]
    for t in cal:
        g, i = t["group"]
        t["group"], t["bucket"] = g, [float(edges[i]), float(edges[i + 1])]
    tests += cal
    _in_label_units(tests, span)
    return tests


# a group's residual variance in the mean tests is not trusted below the model's by more than this many
# standard errors of a light-tailed (Gaussian) sample variance of its size
MEAN_FLOOR_Z = 2.0


def _mean_var_floor(pairs, cnt, r, var_pred, b, m: int, cc) -> tuple:
    """The least residual variance per row the mean tests use, per group and per (group, bucket) cell of n
    rows: the model's predicted variance of their rows (scaled so that over all audited rows it sums to the
    squared residuals: a level the audit rows show, not the model's) times max(0, 1 - ``MEAN_FLOOR_Z``
    sqrt(2 / (n - 1))), what a Gaussian sample of n rows falls below at most about 2% of the time (0.47 at 30
    rows, 0.72 at 100, 0.91 at 1,000). A group's own sample variance of a skewed or heavy-tailed residual is low
    exactly when it drew none of the rare large residuals, which is when its mean looks far off: on null worlds
    from real tables (the base the true mean) such small groups (30-140 rows) carried most of the false mean
    findings (benchmarks/README.md, "False findings on table-derived null worlds"). (0, 0) without a variance
    prediction."""
    if var_pred is None:
        return 0.0, 0.0
    v = np.asarray(var_pred, dtype=float)
    total = float(v.sum())
    level = float(np.sum(r * r)) / total if total > 0 else 0.0
    if not (math.isfinite(level) and level > 0):
        return 0.0, 0.0
    out = []
    for vs, n in ((pairs.group_sums(v), cnt), (pairs.cell_table(b, m, v).ravel(), cc)):
        n = np.asarray(n, dtype=float)
        share = np.clip(1.0 - MEAN_FLOOR_Z * np.sqrt(div(2.0, n - 1.0)), 0.0, 1.0)
        out.append(np.nan_to_num(level * div(vs, n) * share))  # an empty or one-row cell: untested
    return out[0], out[1]


def _in_label_units(tests: list, span: float) -> None:
    """Each mean test's estimate and 95% interval in label units, and its z."""
    for t in tests:
        t["estimate"] = t["statistic_mean"] * span  # observed - predicted, label units
        t["statistic_se_label"] = t["statistic_se"] * span
        if "interval" in t:  # binary_tests: Wilson's interval of the rate, and the score test's z
            t["interval"] = [v * span for v in t["interval"]]
            continue
        t["interval"] = [
            t["estimate"] - fnd.Z95 * t["statistic_se"] * span,
            t["estimate"] + fnd.Z95 * t["statistic_se"] * span,
        ]
        t["z"] = t["statistic_mean"] / t["statistic_se"] if t["statistic_se"] > 0 else 0.0


def _coverage_tests(pairs, names, cnt, r, inside, method, target, min_count, span: float) -> list:
    """The coverage test of ``method``'s intervals per group."""
    k = pairs.group_sums(inside)
    # the exact lower-tail test, doubled: the equal-tailed exact test, whose inversion is the Clopper-Pearson
    # interval the finding states (the one-sided p beside a Wilson interval let a finding's interval reach
    # the target it was found below)
    p = np.minimum(1.0, 2 * fnd.binom_cdf(np.round(k), cnt, target))
    lo, hi = fnd.wilson_interval(k, cnt)
    resid_sd = np.sqrt(np.maximum(residual_variance(pairs.group_sums(r), pairs.group_sums(r * r), cnt), 0.0))
    tests = []
    for i in np.nonzero(cnt >= min_count)[0]:
        tests.append(
            {
                "kind": "coverage",
                "group": names[i],
                "n": int(cnt[i]),
                "method": method,
                "target": float(target),
                "estimate": float(k[i] / cnt[i]),
                "predicted": float(target),
                "observed": float(k[i] / cnt[i]),
                "interval": [float(lo[i]), float(hi[i])],
                "p_value": float(p[i]),
                "z": float((k[i] - target * cnt[i]) / math.sqrt(cnt[i] * target * (1 - target))),
                "residual_sd": float(resid_sd[i] * span),  # for the harm score only (popped below)
            }
        )
    return tests


def _selection_adjusted_intervals(found: list, n_tests: int, level: float, span: float, binary: bool) -> None:
    """Each finding's interval at confidence 1 - R level / m (R findings out of m tests; :func:`findings.fcr_miss`)
    in place of its marginal one, each the inversion of the finding's own test at that level: the means (Hall's
    skewness-corrected t where it was used, Student's t with n - 1 degrees of freedom: :func:`findings.hall_interval`;
    a 0/1 outcome's score test), the variance ratios the variance test does not reject (the same Hall t of
    u2 - r0 v, the group's own standard error: :func:`findings.ratio_test_interval`), a coverage's exact
    Clopper-Pearson interval (the doubled exact binomial test). With Holm's or Benjamini-Hochberg's selection a
    finding's raw p is below R level / m, so its interval excludes the no-effect value: 0, the whole tolerance
    band of a variance ratio, the target coverage (tests/test_findings_agree.py). The variance interval used to
    be a delta-method one whose standard error was floored by the kurtosis pooled over the groups, while the test
    used the group's own: "overstates its uncertainty, adjusted p < 1e-6, CI 0.00 to 94.95" (issue 34). The
    record keeps ``interval_fcr`` (the false coverage-statement rate the intervals keep, = level) and
    ``interval_miss`` (each interval's own two-sided miss probability)."""
    miss = fnd.fcr_miss(len(found), n_tests, level)
    z = fnd.normal_isf2(miss)
    t_tests = [t for t in found if t["kind"] in ("mean", "calibration", "variance") and not binary]
    tq: np.ndarray | list = fnd.t_isf2(miss, [max(t["n"] - 1, 1) for t in t_tests]) if t_tests else []
    t_crit = {id(t): float(q) for t, q in zip(t_tests, tq)}
    for t in found:
        n = t["n"]
        if t["kind"] == "coverage":
            lo, hi = fnd.clopper_pearson(t["estimate"] * n, n, miss)
            t["interval"] = [float(lo), float(hi)]
        elif t["kind"] == "variance":
            band = 1.0 + float(t.get("tolerance") or 0.0)
            lo, hi = fnd.ratio_test_interval(t["ratio_sums"], n, t["estimate"], t_crit[id(t)], (1 / band, band))
            t["interval"] = [float(lo), float(hi)]
        elif binary:
            # the score test inverted (|sum y - sum p - n d| - 1/2 <= z sqrt(sum p (1 - p))): Wilson's interval
            # uses the binomial variance at the observed rate, far larger than the predictions' own where they
            # vary, and contained 0 for every finding of a classifier audit
            half = (z * t["statistic_se"] + 0.5 / n) * span
            # a rate lies in [0, 1]: its difference from the mean prediction in [-predicted, 1 - predicted]
            p_bar = t["predicted"]
            t["interval"] = [max(t["estimate"] - half, -p_bar), min(t["estimate"] + half, 1.0 - p_bar)]
        else:  # the t test inverted, Hall's skewness-corrected one where it was used
            lo, hi = fnd.hall_interval(
                t["statistic_mean"], t["statistic_se"], n, t.get("statistic_skew", 0.0), t_crit[id(t)]
            )
            t["interval"] = [lo * span, hi * span]
        t["interval_fcr"] = float(level)
        t["interval_miss"] = miss


def _link_mean_findings(found: list, pairs, names, cnt) -> None:
    """A variance finding (understated) on a group that a group with a mean finding covers in part gets the
    names of those groups (``mean_findings_within``): a group's residuals are centered at its own mean
    residual, but a mean error on part of its rows still spreads them (the whole population "understated its
    uncertainty" 1.48x when one group's mean alone was off by 1.5 SD). Said, not hidden: the spread is real,
    its cause may be the mean."""
    mean_groups = [t["group"] for t in found if t["kind"] == "mean"]
    if not mean_groups or not any(t["kind"] == "variance" for t in found):
        return
    idx = {g: i for i, g in enumerate(names)}
    pr, pg = pairs.pr, pairs.pg
    inside = {}
    for b in mean_groups:
        ind = np.zeros(pairs.n)
        ind[pr[pg == idx[b]]] = 1.0
        inside[b] = pairs.group_sums(ind)  # rows of b in every group
    for t in found:
        if t["kind"] != "variance" or t["estimate"] <= 1:
            continue
        a = idx[t["group"]]
        # a group covering part of this one (all of it would shift it as a whole: centering takes that out)
        within = [b for b in mean_groups if 0 < inside[b][a] < cnt[a]]
        if within:
            t["mean_findings_within"] = within


# rows in a signature of fewer are left out of the pooled kurtosis (its centring at the signature's mean
# residual correlates their squared residuals); below half of the rows in such signatures, the groups pool it
SIGNATURE_KURTOSIS_MIN_ROWS = 10


def _pooled_kurtosis(pairs, r, var_pred, u2, v, pg, cnt, ratio, min_count) -> float:
    """:func:`_kurtosis_parts` as one number (NaN: nothing to pool)."""
    num, den = _kurtosis_parts(pairs, r, var_pred, u2, v, pg, cnt, ratio, min_count)
    return num / den if den > 0 else float("nan")


def kurtosis_parts(pairs, r, var_pred, min_count: int = 30) -> tuple[float, float]:
    """(numerator, denominator) of the pooled kurtosis of the residuals ``r`` (unit scale) around the predicted
    variance ``var_pred`` on the rows of ``pairs`` (:func:`_kurtosis_parts`): the audit's own estimate, which a
    fit records on its fitting rows (``info["residual_kurtosis"]``, the variance tests' floor). The parts of
    disjoint row sets (a Dask fit's partitions) add up."""
    cnt = pairs.group_sums()
    r, var_pred = np.asarray(r, dtype=float), np.asarray(var_pred, dtype=float)
    u2, v = _centred_pairs(pairs, cnt, r, var_pred)
    ratio = div(
        np.bincount(pairs.pg, weights=u2, minlength=cnt.size), np.bincount(pairs.pg, weights=v, minlength=cnt.size)
    )
    return _kurtosis_parts(pairs, r, var_pred, u2, v, pairs.pg, cnt, ratio, min_count)


def _centred_pairs(pairs, cnt, r, var_pred) -> tuple[np.ndarray, np.ndarray]:
    """Per (row, group) pair: u2, the squared residual around the group's mean residual times n / (n - 1) (the
    group's unbiased variance is the mean of u2), and v, the row's predicted variance."""
    u = r[pairs.pr] - div(pairs.group_sums(r), cnt)[pairs.pg]
    return u * u * div(cnt, cnt - 1)[pairs.pg], var_pred[pairs.pr]


def kurtosis_of_parts(parts) -> float | None:
    """The kurtosis from (numerator, denominator) parts (:func:`kurtosis_parts`, summed over row sets), None when
    there was nothing to pool."""
    if parts is None:
        return None
    num, den = (float(x) for x in parts)
    k = num / den if den > 0 else math.nan
    return k if math.isfinite(k) and k > 0 else None


def _kurtosis_parts(pairs, r, var_pred, u2, v, pg, cnt, ratio, min_count) -> tuple[float, float]:
    """The kurtosis E e^4 of the standardized residual e (u2 = R v e^2, E e^2 = 1) pooled over the audit's rows,
    the floor of the variance test (:func:`findings.ratio_stat`): sum of u2^2 over sum of R^2 v^2 with each
    cell's R^2 divided out by its unbiased cross-product estimate (sum over pairs i != j of u2_i u2_j over that
    of v_i v_j), so that cells whose variance is misstated by different factors do not pass for a heavier tail
    and a small cell's own large residual does not set its R. The cells are the membership signatures (rows
    with the same groups: a misstatement that differs between groups is constant on them) of at least
    :data:`SIGNATURE_KURTOSIS_MIN_ROWS` rows. Pooled over the groups' (row, group) pairs instead, as
    :func:`_group_kurtosis` does, the kurtosis took in every misstatement that varies within a group and the
    floor cost most of the tests' power (benchmarks/README.md, "Variance findings with skewed noise"). When
    such signatures hold under half of the rows, the tested groups are the cells. (0, 0): nothing to pool."""
    sig, n_sig = pairs.signatures()
    n_s = np.bincount(sig, minlength=n_sig).astype(float)
    keep_s = n_s >= SIGNATURE_KURTOSIS_MIN_ROWS
    if sig.size and keep_s[sig].mean() >= 0.5:
        m_s = div(np.bincount(sig, weights=r, minlength=n_sig), n_s)
        u = r - m_s[sig]
        cell, cu2, cv, keep = sig, u * u * div(n_s, n_s - 1)[sig], np.asarray(var_pred, dtype=float), keep_s
    else:
        cell, cu2, cv, keep = pg, u2, v, (cnt >= max(min_count, 2)) & (ratio > 0) & np.isfinite(ratio)

    def cs(x):
        return np.bincount(cell, weights=x, minlength=keep.size)

    a1, a2, b1, b2 = cs(cu2), cs(cu2 * cu2), cs(cv), cs(cv * cv)
    cross_v = b1 * b1 - b2
    keep = keep & (cross_v > 0)
    den = float(np.sum((div(a1 * a1 - a2, cross_v) * b2)[keep]))
    if not (den > 0 and math.isfinite(den)):
        return 0.0, 0.0
    return float(np.sum(a2[keep])), den


def _group_kurtosis(u2, v, pg, cnt, ratio, min_count) -> float:
    """The kurtosis of the residuals relative to the predicted variance pooled over every tested group: the
    mean of w^2 over the (row, group) pairs, w = u2 / (R_g v), each group's own ratio R_g divided out. NaN when
    no group is tested. Larger than :func:`_pooled_kurtosis` where a misstatement varies within groups; the
    marginal intervals take the larger of the two (with centred exponential noise and the variance right, 93.7%
    of intervals of 30-150-row groups covered with this one, 92.2% with the signatures' alone)."""
    tested = (cnt >= max(min_count, 2)) & (ratio > 0) & np.isfinite(ratio)
    keep = tested[pg] & (v > 0)
    if not keep.any():
        return float("nan")
    w = u2[keep] / (ratio[pg[keep]] * v[keep])
    return float(np.mean(w * w))


def _pooled_sd(kappa: float, s_vv, cnt, c) -> np.ndarray:
    """Per group, the standard deviation of u2 - c v when u2 = c v e^2 with E e^2 = 1 and E e^4 = ``kappa``:
    c sqrt((kappa - 1) mean(v^2)) (0 where ``kappa`` is NaN): the floor of the scorecard's marginal interval at
    c = the group's estimate (the test's, :func:`findings.ratio_stat`, is at R r0)."""
    if not np.isfinite(kappa):
        return np.zeros(len(cnt))
    return c * np.sqrt(max(kappa - 1.0, 0.0) * np.maximum(div(s_vv, cnt), 0.0))


def _ratio_sums(pairs, cnt, r, var_pred, min_count, kurtosis_floor=None):
    """The variance test's sums per group (:data:`findings.RATIO_SUMS`, shape (10, groups)) over the (row, group)
    pairs: a = u2, the squared residual around the group's mean residual times n / (n - 1), b = v, the predicted
    variance, and the kurtosis pooled over the rows (:func:`_pooled_kurtosis`, the same in every column), at
    least ``kurtosis_floor`` (the model's fitting rows': audit rows that drew none of a heavy tail's largest
    residuals cannot show the tail they lack). Returns (sums, (u2, v, gs)), gs summing a pair-level array per
    group."""
    pg = pairs.pg
    G = len(cnt)

    def gs(x):
        return np.bincount(pg, weights=x, minlength=G).astype(float)

    u2, v = _centred_pairs(pairs, cnt, r, var_pred)
    a2, av, v2 = u2 * u2, u2 * v, v * v
    sums = np.array([gs(u2), gs(v), gs(a2), gs(av), gs(v2), gs(a2 * u2), gs(a2 * v), gs(av * v), gs(v2 * v)])
    kappa = _pooled_kurtosis(pairs, r, var_pred, u2, v, pg, cnt, div(sums[0], sums[1]), min_count)
    if kurtosis_floor is not None and math.isfinite(kurtosis_floor):
        kappa = float(np.fmax(kappa, kurtosis_floor))
    return np.vstack([sums, np.full((1, G), kappa)]), (u2, v, gs)


def _variance_tests(pairs, names, cnt, r, var_pred, scale, min_count, var_tol, kurtosis_floor=None) -> list:
    """The variance test of every group: the residual's variance around the group's own mean residual
    (:func:`residual_variance`) against the mean predicted variance, H0 their ratio within [1 / (1 + tol),
    1 + tol]. Computed over the (row, group) pairs, each centered at its group's mean: a group whose mean
    alone is off (the mean test's finding) is not also reported as understating its uncertainty."""
    pg = pairs.pg
    sums, (u2, v, gs) = _ratio_sums(pairs, cnt, r, var_pred, min_count, kurtosis_floor)
    s_u2, s_v = sums[0], sums[1]
    ratio = div(s_u2, s_v)
    # delta method for mean(u2) / mean(v): the residuals z = u2 - R v
    s_zz = gs((u2 - ratio[pg] * v) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        se_ratio = np.sqrt(np.maximum(s_zz, 0.0) / np.maximum(cnt - 1, 1)) / np.sqrt(cnt) / (s_v / cnt)
    kappa = np.fmax(sums[9, 0] if sums.shape[1] else np.nan, _group_kurtosis(u2, v, pg, cnt, ratio, min_count))
    s_vv = sums[4]
    with np.errstate(divide="ignore", invalid="ignore"):
        se_pooled = np.where(ratio > 0, _pooled_sd(kappa, s_vv, cnt, ratio) / np.sqrt(cnt) / (s_v / cnt), 0.0)
    se_ratio = np.fmax(se_ratio, se_pooled)  # the marginal 95% interval (the scorecard's), not a finding's
    # H0: the ratio E[u2] / E[v] lies within [1 / (1 + tol), 1 + tol]; each side's one-sided test at its
    # boundary, the smaller p doubled (= the ordinary two-sided test when tol = 0). The test's variance is at
    # least (kappa - 1) R r0 mean(v^2) with the pooled kurtosis (findings.ratio_stat), and a finding's interval
    # inverts this same test (findings.ratio_side_p, findings.ratio_test_interval).
    tol = 1.0 + float(var_tol)
    p_side = {}
    for side, r0 in (("hi", tol), ("lo", 1 / tol)):
        p_side[side] = fnd.ratio_side_p(sums, cnt, r0, side)
    p_var = np.minimum(1.0, 2 * np.minimum(p_side["hi"], p_side["lo"]))
    d = u2 - v
    var_t = fnd.group_tests(
        "variance",
        names,
        cnt,
        gs(d),
        gs(d * d),
        min_count,
        s3=gs(d**3),
        predicted=scale.moment_from_unit(div(s_v, cnt), 2),
        observed=scale.moment_from_unit(div(s_u2, cnt), 2),
        ratio=ratio,
        se_ratio=se_ratio,
        p_tol=p_var,
        ratio_sums=[list(map(float, sums[:, i])) for i in range(len(names))],
    )
    for t in var_t:
        t["p_value"] = t.pop("p_tol")
        t["tolerance"] = float(var_tol)
        t["estimate"] = t.pop("ratio")
        se = t.pop("se_ratio")
        t["interval"] = list(fnd.ratio_interval(t["estimate"], se, t["n"], fnd.Z95))
        t["z"] = t["statistic_mean"] / t["statistic_se"] if t["statistic_se"] > 0 else 0.0
    return var_t

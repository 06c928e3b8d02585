"""Compare two models on the same labelled rows, or one model across periods, group by group, with error control.

**Paired comparison** (:func:`compare`). Two sides, A and B, predict the same rows: fitted models (their mean,
variance and prediction intervals) or plain prediction columns. Per group, each side's

* ``rmse``        root mean squared error, sqrt(mean (y - mu)^2);
* ``mean_error``  the group's mean residual mean(y - mu), compared by its size |mean(y - mu)|;
* ``spread``      the spread ratio R = var(y - mu) / mean(v), observed over predicted variance, compared by
  |log R| (how far from right, whichever way);
* ``coverage``    the share of labels inside the side's intervals, compared by its distance from the target
  1 - delta;
* ``width``       the mean interval width (descriptive: a wider interval is a choice, not a defect),

and the difference B - A of each compared value, with a confidence interval. Every value is a smooth function of
the group's means of a few per-row quantities (residuals, their squares, predicted variances, coverage
indicators, widths) of BOTH sides, so one delta-method variance per group covers both sides and their
correlation: the rows are shared, so the comparison is paired (two models that err alike on the same rows
differ far less than two independent audits would suggest). Where a compared value is an absolute value (|mean
error|, |log R|, |coverage - target|), the gradient is taken at the observed sign; near zero this overstates
the variance (the test is conservative there), away from zero it is the usual delta method.

Every (group, value) difference of groups with at least ``min_group_count`` rows is one test (two-sided t with
n - 1 degrees of freedom); the p-values are adjusted together (Holm or Benjamini-Hochberg, as the audit), and
a finding is a difference whose adjusted p-value is below ``level``: "B is worse than A for group G: ...".
Its interval allows for its selection (Benjamini and Yekutieli's false-coverage-rate intervals).

**Periods** (:func:`compare_periods`): one model, rows split by a period column. Per (group, period) the same
values, and tests of each group's change between consecutive periods (or against the first) of its mean error,
spread (log R), coverage and RMSE, and for a classifier of its rates at the decision threshold (selection rate,
TPR, FPR): unpaired, the periods hold different rows. A rate is tested where it is a mean over at least
``min_group_count`` rows in both periods (TPR over the group's positives, FPR over its negatives).

A finding's sentence says a difference or change of a share (coverage, selection rate, TPR, FPR) in percentage
points ("+34.3 points, CI +30.0 to +38.7"), as the tables and reports do; its numeric fields stay fractions.

Everything is a sum over (group, cell) through :class:`mmc_core.groups.sums.MembershipSums`: no loop over rows,
groups or periods. The sides and those sums are :mod:`mmc_core.comparison.sides`; the tests, intervals and the selection
of findings :mod:`mmc_core.comparison.compare_stats`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from ..auditing import findings as fnd
from ..common.errors import DataError, MMCError
from ..common.tables import to_label_array
from ..groups.group_set import GroupSet
from .compare_stats import (
    POINTS,
    check_inputs,
    delta_se,
    detectable,
    plain_value,
    points_text,
    select_findings,
    t_interval,
    t_tests,
)
from .sides import Layout, Side, cell_moments, cell_sums, side

__all__ = [
    "Side",
    "side",
    "compare",
    "compare_periods",
    "compare_from_sums",
    "periods_from_sums",
    "cell_sums",
    "Layout",
    "detectable",
    "points_text",
    "ComparisonResult",
    "PeriodResult",
    "VALUES",
]

# the compared values, in the order of the tables; "width" is descriptive (never a finding)
VALUES = ("rmse", "mean_error", "spread", "coverage", "width", "selection_rate", "tpr", "fpr")
_TESTED = ("rmse", "mean_error", "spread", "coverage")
# changes between periods: those and a classifier's rates at its threshold (a change of a rate either way is a
# change; between two models a higher rate is neither better nor worse, so the comparison shows rates untested)
_PERIOD_TESTED = _TESTED + ("selection_rate", "tpr", "fpr")
_RATE_BASE = {"tpr": "positives", "fpr": "negatives"}  # the rows a rate is a mean over, when not every row
_WORDS = {
    "rmse": "root mean squared error",
    "mean_error": "mean error (size)",
    "spread": "spread ratio (distance from 1)",
    "coverage": "interval coverage (distance from target)",
    "width": "mean interval width",
    "selection_rate": "share of rows decided positive",
    "tpr": "true positive rate",
    "fpr": "false positive rate",
}


@dataclasses.dataclass
class ComparisonResult:
    """Per-group comparison of side B against side A (see the module docstring).

    ``by_group``: one row per group: n, and for each value v of :data:`VALUES` the sides' values ``v_a``,
    ``v_b``, the difference ``v_diff`` (B - A of the compared form) and its 95% interval ``v_lo``, ``v_hi``.
    ``overall``: the row of the group of all rows. ``findings``: the significant differences, B's worsenings
    first. ``n_tests``: how many differences were tested together.

    Units: coverage and a classifier's rates (selection_rate, tpr, fpr) are fractions (0 to 1) in every numeric
    field, their differences differences of fractions; a finding's ``text`` says a difference of coverage in
    percentage points (the ``estimate`` x 100).
    """

    names: tuple
    by_group: Any
    findings: list
    n_tests: int
    params: dict

    @property
    def overall(self) -> pd.Series:
        return self.by_group.iloc[0]

    def worse(self) -> list:
        """The findings where B is worse than A."""
        return [f for f in self.findings if f["direction"] == "worse"]

    def better(self) -> list:
        return [f for f in self.findings if f["direction"] == "better"]

    def to_json(self) -> dict:
        from ..auditing.metrics import json_clean

        return {
            "format": "mmc-audit-comparison",
            "version": 1,
            "names": list(self.names),
            "by_group": json_clean(self.by_group.reset_index().to_dict(orient="list")),
            "findings": json_clean(self.findings),
            "n_tests": int(self.n_tests),
            "params": json_clean(self.params),
        }


def compare(
    table,
    y,
    a: Side,
    b: Side,
    groups: GroupSet,
    *,
    delta: float = 0.1,
    min_group_count: int = 30,
    error_control: str = "holm",
    level: float = 0.05,
) -> ComparisonResult:
    """Compare side ``b`` with side ``a`` on the same labelled rows, per group of ``groups``.

    Parameters
    ----------
    table : DataFrame or dict of columns, n rows (the columns ``groups`` reads)
    y : array (n,), the labels (label units)
    a, b : :class:`Side` (see :func:`side`), predictions for the same n rows
    groups : GroupSet; its first group is all rows
    delta : the intervals' miscoverage (coverage is compared by its distance from 1 - delta)
    min_group_count : groups with fewer rows are shown but not tested
    error_control, level : "holm" (family-wise) or "bh" (false discovery rate) over every test, at ``level``

    Returns
    -------
    ComparisonResult
    """
    table, y, memb = check_inputs(y, table, groups, min_group_count, error_control, level, delta)
    for s in (a, b):
        if not isinstance(s, Side):
            raise MMCError(
                f"sides must be Side objects (mmc_core.comparison.compare_models.side), got {type(s).__name__}"
            )
        for what in ("mean", "variance", "lower", "upper", "decision"):
            arr = getattr(s, what)
            if arr is not None:
                to_label_array(arr, f"side {s.name!r}: {what}", y.size)  # finite, one value per label
        if s.variance is not None and (np.asarray(s.variance) < 0).any():
            raise DataError(f"side {s.name!r}: variance has negative values")
        if (s.lower is None) != (s.upper is None):
            raise MMCError(f"side {s.name!r}: interval ends come in pairs: give both lower and upper")
    if a.name == b.name:
        raise MMCError(f"the two sides need different names, both are {a.name!r}")
    if (a.decision is not None or b.decision is not None) and not np.isin(y, (0.0, 1.0)).all():
        raise DataError("rates at a decision threshold need 0/1 labels; this label has other values")
    lay = Layout.of((a, b), 1 - delta)
    Q = lay.rows((a, b), y)
    shift = Q.mean(axis=1)
    cnt, S1, S2 = cell_sums(memb.sums(), Q, None, 1, shift)
    return compare_from_sums(
        cnt, S1, S2, shift, lay, list(memb.names), (a.name, b.name), delta, min_group_count, error_control, level
    )


def compare_from_sums(cnt, S1, S2, shift, lay, names, side_names, delta, min_group_count, error_control, level):
    """:func:`compare` from per-group sums (:func:`cell_sums`) added over any blocks of rows: the Dask engine's
    way in. Returns a ComparisonResult."""
    M, S = cell_moments(cnt, S1, S2, shift)
    a_name, b_name = side_names
    cols: dict = {"n": cnt.astype(np.int64)}
    tests: list = []
    ses: dict = {}
    testable = cnt >= min_group_count
    for what in VALUES:
        va, ga = lay.value(M, 0, what, compared=False)
        vb, gb = lay.value(M, 1, what, compared=False)
        ca, gca = lay.value(M, 0, what, compared=True)
        cb, gcb = lay.value(M, 1, what, compared=True)
        scale = np.abs(ca) + np.abs(cb) + (what == "spread")
        with np.errstate(invalid="ignore"):
            # sides that agree on every row of a group differ by rounding (1e-16): no difference, no spread
            same = np.abs(cb - ca) <= 1e-9 * np.maximum(scale, 1e-300)
        est = np.where(same, 0.0, cb - ca)
        se = np.where(same, 0.0, delta_se(gcb - gca, S, cnt))
        lo, hi = t_interval(est, se, cnt, 0.05)
        cols.update({f"{what}_a": va, f"{what}_b": vb, f"{what}_diff": est, f"{what}_lo": lo, f"{what}_hi": hi})
        if what not in _TESTED:
            continue
        ok = testable & np.isfinite(est) & np.isfinite(se)
        ses[what] = np.where(ok, se, np.nan)
        p = t_tests(est, se, cnt, ok, scale)
        for g in np.flatnonzero(ok):
            tests.append(
                {
                    "kind": what,
                    "group": names[g],
                    "n": int(cnt[g]),
                    "a": float(va[g]),
                    "b": float(vb[g]),
                    "estimate": float(est[g]),
                    "se": float(se[g]),
                    "p_value": float(p[g]),
                    "direction": "worse" if est[g] > 0 else "better",
                }
            )
    found = select_findings(tests, error_control, level)
    for f in found:
        f["text"] = _finding_text(f, a_name, b_name, 1 - delta)
    found.sort(key=lambda f: (f["direction"] != "worse", f["p_adjusted"], -f["n"]))
    for what, se in ses.items():
        cols[f"{what}_detectable"] = detectable(se, len(tests), level)
    by_group = pd.DataFrame(cols, index=pd.Index(names, name="group"))
    params = {
        "delta": float(delta),
        "min_group_count": int(min_group_count),
        "error_control": error_control,
        "level": float(level),
        "n": int(cnt[0]),
        "compared": [w for w in _TESTED if np.isfinite(by_group[f"{w}_diff"].iloc[0])],
    }
    return ComparisonResult((a_name, b_name), by_group, found, len(tests), params)


def _finding_text(f: dict, a: str, b: str, target: float) -> str:
    lo, hi = f["interval"]
    g, n = f["group"], f["n"]
    verb = "worse" if f["direction"] == "worse" else "better"
    if f["kind"] == "rmse":
        core = f"root mean squared error {f['b']:.4g} against {f['a']:.4g} ({f['estimate']:+.3g}, CI {lo:+.3g} to {hi:+.3g})"
    elif f["kind"] == "mean_error":
        core = f"mean error {f['b']:+.4g} against {f['a']:+.4g} (size {f['estimate']:+.3g}, CI {lo:+.3g} to {hi:+.3g})"
    elif f["kind"] == "spread":
        core = (
            f"observed / predicted spread {f['b']:.3g} against {f['a']:.3g} (|log ratio| {f['estimate']:+.3g}, "
            f"CI {lo:+.3g} to {hi:+.3g})"
        )
    else:
        core = (
            f"interval coverage {100 * f['b']:.1f}% against {100 * f['a']:.1f}% (target {100 * target:.0f}%; distance "
            "{} points, CI {} to {})".format(*points_text(f["estimate"], lo, hi))
        )
    return f"{b} is {verb} than {a} for {g} (n = {n:,}): {core}, adjusted {fnd.p_words(f['p_adjusted'])}"


# ---- periods ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class PeriodResult:
    """One side's values per (group, period) and the tested changes between periods.

    ``by_period``: one row per (group, period): n and each value of :data:`VALUES` the side has (mean_error
    signed, spread as the ratio R) with a 95% interval (``v_lo``, ``v_hi``). ``changes``: per (group, period) the
    change from the reference period (``v_change`` and its interval). ``findings``: significant changes.

    Units: the coverage and a classifier's rates (selection_rate, tpr, fpr) are fractions (0 to 1) in every
    numeric field, their changes differences of fractions (``before``, ``after``, ``estimate`` and ``interval``
    of a finding too); a finding's ``text`` says such a change in percentage points (the field x 100: "+34.3
    points, CI +30.0 to +38.7"). The spread's change is of log R.
    """

    periods: list
    by_period: Any
    changes: Any
    findings: list
    n_tests: int
    params: dict

    def to_json(self) -> dict:
        from ..auditing.metrics import json_clean

        return {
            "format": "mmc-audit-periods",
            "version": 1,
            "periods": [str(p) for p in self.periods],
            "by_period": json_clean(self.by_period.to_dict(orient="list")),
            "changes": json_clean(self.changes.to_dict(orient="list")),
            "findings": json_clean(self.findings),
            "n_tests": int(self.n_tests),
            "params": json_clean(self.params),
        }


MAX_PERIODS = 200


def compare_periods(
    table,
    y,
    s: Side,
    groups: GroupSet,
    period,
    *,
    reference: str = "previous",
    delta: float = 0.1,
    min_group_count: int = 30,
    error_control: str = "holm",
    level: float = 0.05,
) -> PeriodResult:
    """Audit one side's predictions per (group, period) and test each group's changes between periods.

    ``period`` : array (n,) of period labels (sortable: dates, quarters, batch numbers); periods are taken in
    sorted order. ``reference``: "previous" tests each period against the one before it, "first" against the
    first. The changes tested (signed, later minus reference) are of the mean error, the log spread ratio, the
    coverage and the RMSE, for every group with at least ``min_group_count`` rows in both periods, and, when the
    side has decisions (a classifier: :func:`side` with a threshold; labels 0/1), of the selection rate, TPR and
    FPR (TPR where the group has ``min_group_count`` positives in both periods, FPR negatives); unpaired
    (different rows), so the variance of a change is the sum of the two periods' delta-method variances. All
    changes are adjusted together (``error_control`` at ``level``).
    """
    table, y, memb = check_inputs(y, table, groups, min_group_count, error_control, level, delta)
    if reference not in ("previous", "first"):
        raise MMCError(f"reference must be 'previous' or 'first', got {reference!r}")
    if not isinstance(s, Side):
        raise MMCError(f"the side must be a Side (mmc_core.comparison.compare_models.side), got {type(s).__name__}")
    if s.decision is not None and not np.isin(y, (0.0, 1.0)).all():
        raise DataError("rates at a decision threshold need 0/1 labels; this label has other values")
    per = np.asarray(period)
    if per.shape != y.shape:
        raise DataError(f"period has {per.size} values for {y.size} labels")
    if pd.isna(per).any():
        raise DataError(f"period has {int(pd.isna(per).sum())} missing value(s): drop those rows or fill them")
    labels, code = np.unique(per, return_inverse=True)
    check_periods(labels)
    P = labels.size
    lay = Layout.of((s,), 1 - delta)
    Q = lay.rows((s,), y)
    shift = Q.mean(axis=1)
    cnt, S1, S2 = cell_sums(memb.sums(), Q, code.astype(np.int64), P, shift)
    return periods_from_sums(
        cnt,
        S1,
        S2,
        shift,
        lay,
        list(memb.names),
        labels,
        s.name,
        reference,
        min_group_count,
        error_control,
        level,
        delta,
    )


def check_periods(labels) -> None:
    """The distinct periods (sorted) are 2 to MAX_PERIODS."""
    if len(labels) < 2:
        raise DataError("the period column has one value: there is nothing to compare")
    if len(labels) > MAX_PERIODS:
        raise DataError(
            f"the period column has {len(labels):,} distinct values; at most {MAX_PERIODS} periods are compared"
        )


def periods_from_sums(
    cnt, S1, S2, shift, lay, names, labels, name, reference, min_group_count, error_control, level, delta
) -> PeriodResult:
    """:func:`compare_periods` from per-(group, period) sums (:func:`cell_sums` with the period as the cell),
    added over any blocks of rows: the Dask engine's way in."""
    M, S = cell_moments(cnt, S1, S2, shift)
    labels = np.asarray(labels)
    G, P = len(names), labels.size
    g_idx, p_idx = np.divmod(np.arange(G * P), P)
    rows: dict = {"group": np.asarray(names, dtype=object)[g_idx], "period": labels[p_idx], "n": cnt.astype(np.int64)}
    # each (group, period) cell's reference cell: the group's previous (or first) period; none for the first
    ref = np.where(p_idx == 0, -1, np.arange(G * P) - 1 if reference == "previous" else g_idx * P)
    plain = np.empty(P + 1, dtype=object)
    plain[:P] = [plain_value(v) for v in labels]  # one per period; the last (None) for cells without a reference
    ref_label = plain[np.where(ref >= 0, p_idx[ref], P)]
    ch: dict = {"group": rows["group"], "period": rows["period"], "reference": ref_label}
    tests: list = []
    ses: dict = {}
    for what in VALUES:
        v, gr = lay.value(M, 0, what, compared=False)
        if not np.isfinite(v).any():
            continue
        se = delta_se(gr, S, cnt)
        lo, hi = t_interval(v, se, cnt, 0.05)
        rows.update({what: v, f"{what}_lo": lo, f"{what}_hi": hi})
        if what not in _PERIOD_TESTED:  # widths: shown per period, not tested for change
            continue
        # changes of the mean error, log R (spread), coverage, RMSE and a classifier's rates
        vt, se_t = _on_test_scale(what, v, gr, se, S, cnt)
        has = ref >= 0
        r = np.where(has, ref, 0)
        est = np.where(has, vt - vt[r], np.nan)
        se_c = np.where(has, np.sqrt(se_t**2 + se_t[r] ** 2), np.nan)
        base_n = _rows_behind(what, cnt, M, lay)
        df = np.where(has, np.minimum(base_n, base_n[r]), np.inf)  # no reference: NaN change, no quantile needed
        clo, chi = t_interval(est, se_c, df, 0.05)
        ch.update({f"{what}_change": est, f"{what}_change_lo": clo, f"{what}_change_hi": chi})
        ok = has & (np.minimum(base_n, base_n[r]) >= min_group_count) & np.isfinite(est) & np.isfinite(se_c)
        ses[what] = np.where(ok, se_c, np.nan)
        p = t_tests(est, se_c, df, ok, np.abs(vt) + np.abs(np.where(has, vt[r], 0)) + (what == "spread"))
        for c in np.flatnonzero(ok):
            tests.append(
                {
                    "kind": what,
                    "group": names[g_idx[c]],
                    "period": plain_value(labels[p_idx[c]]),
                    "reference": plain_value(labels[p_idx[r[c]]]),
                    "n": int(df[c]),
                    "n_period": int(cnt[c]),
                    "n_reference": int(cnt[r[c]]),
                    "before": float(v[r[c]]),
                    "after": float(v[c]),
                    "estimate": float(est[c]),
                    "se": float(se_c[c]),
                    "p_value": float(p[c]),
                }
            )
    for what, se_c in ses.items():
        ch[f"{what}_change_detectable"] = detectable(se_c, len(tests), level)
    found = select_findings(tests, error_control, level)
    for f in found:
        f["text"] = _change_text(f, name)
    found.sort(key=lambda f: (f["p_adjusted"], -f["n"]))
    params = {
        "delta": float(delta),
        "min_group_count": int(min_group_count),
        "error_control": error_control,
        "level": float(level),
        "reference": reference,
        "n": int(cnt[:P].sum()),  # the first group is every row
    }
    return PeriodResult(
        [plain_value(v) for v in labels], pd.DataFrame(rows), pd.DataFrame(ch), found, len(tests), params
    )


def _on_test_scale(what: str, v, gr, se, S, cnt) -> tuple:
    """(value, se) on the scale a change is tested on: log R for the spread, the value itself otherwise."""
    if what != "spread":
        return v, se
    with np.errstate(invalid="ignore", divide="ignore"):
        vt, gt = np.log(v), gr / v[:, None]
    gt = np.nan_to_num(gt, nan=0.0, posinf=0.0, neginf=0.0)
    return vt, delta_se(gt, S, cnt)


def _rows_behind(what: str, cnt, M, lay) -> np.ndarray:
    """The rows each value is a mean over: the cell's rows, a TPR's positives, an FPR's negatives."""
    if what not in _RATE_BASE:
        return cnt
    with np.errstate(invalid="ignore"):
        pos = np.rint(cnt * M[:, lay.at[0]["y"]])
    return np.nan_to_num(pos if what == "tpr" else cnt - pos, nan=0.0)


def _change_text(f: dict, name: str) -> str:
    lo, hi = f["interval"]
    word, fmt = {
        "rmse": ("root mean squared error", "{:.4g}"),
        "mean_error": ("mean error", "{:+.4g}"),
        "spread": ("observed / predicted spread", "{:.3g}"),
        "coverage": ("interval coverage", "{:.1%}"),
        "selection_rate": ("selection rate", "{:.1%}"),
        "tpr": ("true positive rate", "{:.1%}"),
        "fpr": ("false positive rate", "{:.1%}"),
    }[f["kind"]]
    if f["kind"] == "spread":
        change = f"log ratio {f['estimate']:+.3g}, CI {lo:+.3g} to {hi:+.3g}"
    elif f["kind"] in POINTS:  # a change of a share: in percentage points, as the tables and reports say it
        est, lo_, hi_ = points_text(f["estimate"], lo, hi)
        change = f"{est} points, CI {lo_} to {hi_}"
    else:
        change = f"{f['estimate']:+.3g}, CI {lo:+.3g} to {hi:+.3g}"
    return (
        f"{name}'s {word} for {f['group']} changed from {fmt.format(f['before'])} ({f['reference']}) to "
        f"{fmt.format(f['after'])} ({f['period']}) ({change}), adjusted {fnd.p_words(f['p_adjusted'])}"
    )

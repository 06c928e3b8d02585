"""Classifier audits: a 0/1 outcome and a score in [0, 1], per group, before and after multicalibration.

The task resolution, the classifier metrics and their bootstrap and the reliability cells are read off the same
(group x score bucket) sums; the binary branch of ``audit()`` that assembles them is
:mod:`mmc_core.auditing.audit_binary`.

For a binary outcome the conditional variance is p(1 - p) once the mean is right, so mean multicalibration
is the whole story; what an auditor asks is whether the score is calibrated on every group and bucket, and
what happens to each group at a decision threshold. :func:`as_binary` recognises binary labels;
:func:`classifier_audit` returns a :class:`ClassifierAudit` (in the spirit of fairlearn's MetricFrame):

``by_group`` (index: group, "all" first), for the score ("after") and, when given, the base score
("before", columns suffixed ``_base``):
    count, base_rate (share of positives), mean_score, calib_error (base_rate - mean_score: observed minus
    predicted), calib_error_worst (the signed observed - predicted of the score bucket with the largest
    |error| among buckets with >= ``min_cell_count`` rows), ece (expected calibration error: sum over the
    group's score buckets of |observed - predicted| weighted by the bucket's share of the group), brier, log_loss
    (scores clipped to [1e-15, 1 - 1e-15]); at ``threshold`` (decision = score >= threshold): selection_rate,
    tpr, fpr, precision (NaN where undefined). Every metric has a percentile bootstrap 95% interval in
    ``<metric>_lo`` / ``<metric>_hi`` (Poisson row weights, ``n_boot`` replicates).
``difference(metric, reference)`` / ``ratio(metric, reference)``: each group against a reference group.
``disparities``: per feature column whose one-condition groups split the rows (as ``sensitive_features`` in
    fairlearn): demographic parity difference / ratio, equalized odds difference / ratio, and the groups whose
    selection rate is below four fifths of the column's highest (the four-fifths rule).

All sums are bincounts over membership signatures (rows with the same set of groups), spread to the groups
with one more bincount: no Python loop over rows, groups or buckets, and no dependence on BLAS threads.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..common.errors import DataError, MMCError
from ..fit.parameters import TASKS


def _factorize(values):
    """``pd.factorize``, without pandas < 2.1's FutureWarning about inferring the uniques' dtype from object
    values: the callers compare each unique with the class values (``==`` or the same text), which works for
    either dtype."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return pd.factorize(values)


__all__ = [
    "as_binary",
    "is_binary",
    "classifier_audit",
    "ClassifierAudit",
    "METRICS",
    "RATE_METRICS",
    "reliability_cells",
    "threshold_rates",
]

METRICS = (
    "base_rate",
    "mean_score",
    "calib_error",
    "calib_error_worst",
    "ece",
    "brier",
    "log_loss",
    "selection_rate",
    "tpr",
    "fpr",
    "precision",
)
RATE_METRICS = ("selection_rate", "tpr", "fpr", "precision")  # the metrics that depend on the threshold
_EPS = 1e-15
_TRUE = ("1", "1.0", "true", "yes", "y", "t")


def _distinct(y, name: str = "the label") -> list:
    s = pd.Series(np.asarray(y, dtype=object))
    if s.isna().any():
        raise DataError(f"{name} has {int(s.isna().sum())} missing value(s): drop those rows first")
    return sorted(pd.unique(s).tolist(), key=str)


def is_binary(y) -> bool:
    """True when ``y`` holds exactly two distinct (non-missing) values."""
    s = pd.Series(np.asarray(y, dtype=object)).dropna()
    return s.nunique() == 2


def as_binary(y, positive=None, name: str = "label") -> tuple[np.ndarray, dict]:
    """The label as 0/1 floats, and {"classes": [negative, positive], "positive": positive}.

    Numbers 0/1 and booleans need no ``positive``; any other pair of values (strings such as "yes"/"no",
    numbers such as 1/2) must name the positive class.
    """
    vals = _distinct(y, name)
    if len(vals) > 2 or len(vals) < 1:
        raise DataError(f"{name} is not binary: it has {len(vals)} distinct values")
    arr = np.asarray(y, dtype=object)
    if positive is None:
        numeric = all(isinstance(v, (bool, np.bool_, int, float, np.integer, np.floating)) for v in vals)
        if not numeric or not {float(v) for v in vals} <= {0.0, 1.0}:
            shown = ", ".join(repr(v) for v in vals)
            raise DataError(
                f"{name} has the two values {shown}: say which one is the positive class "
                f"(positive_label=... in Python, --positive on the command line), or that it is a number to "
                f"predict (task='regression', --task regression)"
            )
        y01 = np.asarray(arr.astype(float))
        return y01, {"classes": [0, 1], "positive": 1}
    match = [v for v in vals if v == positive or str(v) == str(positive)]
    if not match:
        shown = ", ".join(repr(v) for v in vals)
        raise DataError(f"positive class {positive!r} is not a value of {name} (values: {shown})")
    pos = match[0]
    codes, uniq = _factorize(pd.Series(arr))
    lookup = np.array([1.0 if (v == pos or str(v) == str(pos)) else 0.0 for v in uniq])
    y01 = lookup[codes]
    neg = [v for v in vals if not (v == pos or str(v) == str(pos))]
    return y01, {"classes": [neg[0] if neg else None, pos], "positive": pos}


def _check_scores(s, n: int, name: str) -> np.ndarray:
    s = np.asarray(s, dtype=float)
    if s.shape != (n,):
        raise DataError(f"{name} must be {n} numbers, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise DataError(f"{name} has {int((~np.isfinite(s)).sum())} missing or infinite value(s)")
    if (s < 0).any() or (s > 1).any():
        raise DataError(f"{name} must be probabilities in [0, 1] (found {s.min():.4g} to {s.max():.4g})")
    return s


# ---- sums over (group, bucket) cells ------------------------------------------------------------------------
class _CellSums:
    """Weighted sums of row values over (group, score bucket) cells."""

    def __init__(self, memb, bucket: np.ndarray, m: int):
        self.G, self.m, self.n = memb.n_groups, m, memb.n
        self.sums, self.bucket = memb.sums(), bucket

    def sums_of(self, values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """values (V, n), weights (B, n) or None -> sums (B, V, G, m)."""
        V = values.shape[0]
        w = np.ones((1, self.n)) if weights is None else weights
        B = w.shape[0]
        wv = (w[:, None, :] * values[None, :, :]).reshape(B * V, self.n)
        return self.sums.replicate_cell_sums(wv, self.bucket, self.m).reshape(B, V, self.G, self.m)


def _metrics(S: np.ndarray, min_cell: int) -> dict:
    """Metrics from cell sums S (B, 9, G, m) of [1, y, s, (s-y)^2, logloss, d, d*y, d*(1-y), 1-y]."""
    cnt_c, y_c, s_c = S[:, 0], S[:, 1], S[:, 2]
    tot = S.sum(axis=3)
    cnt, ys, ss, br, ll, d, dy, dn, neg = (tot[:, i] for i in range(9))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {"count": cnt, "base_rate": ys / cnt, "mean_score": ss / cnt}
        out["calib_error"] = out["base_rate"] - out["mean_score"]
        out["ece"] = np.abs(y_c - s_c).sum(axis=2) / cnt
        err_c = np.where(cnt_c >= max(min_cell, 1), (y_c - s_c) / cnt_c, np.nan)
        absc = np.where(np.isnan(err_c), -1.0, np.abs(err_c))
        pick = np.argmax(absc, axis=2)
        worst = np.take_along_axis(err_c, pick[..., None], axis=2)[..., 0]
        out["calib_error_worst"] = np.where(absc.max(axis=2) >= 0, worst, np.nan)
        out["brier"] = br / cnt
        out["log_loss"] = ll / cnt
        out["selection_rate"] = d / cnt
        out["tpr"] = dy / ys
        out["fpr"] = dn / neg
        out["precision"] = dy / d
    return out


def _score_table(cells: _CellSums, s, y, threshold, min_cell, n_boot, seed, suffix=""):
    d = (s >= threshold).astype(float)
    sc = np.clip(s, _EPS, 1 - _EPS)
    ll = -(y * np.log(sc) + (1 - y) * np.log1p(-sc))
    vals = np.vstack([np.ones_like(y), y, s, (s - y) ** 2, ll, d, d * y, d * (1 - y), 1 - y])
    point = _metrics(cells.sums_of(vals), min_cell)
    cols = {"count" + suffix: point["count"][0]} if suffix == "" else {}
    for k in METRICS:
        cols[k + suffix] = point[k][0]
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        reps: dict[str, list] = {k: [] for k in METRICS}
        block = max(1, min(n_boot, 2_000_000 // max(cells.n * 9, 1)))
        done = 0
        while done < n_boot:
            b = min(block, n_boot - done)
            w = rng.poisson(1.0, size=(b, cells.n)).astype(float)
            mb = _metrics(cells.sums_of(vals, w), min_cell)
            for k in METRICS:
                reps[k].append(mb[k])
            done += b
        import warnings

        for k in METRICS:
            r = np.vstack(reps[k])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                cols[k + suffix + "_lo"] = np.nanquantile(r, 0.025, axis=0)
                cols[k + suffix + "_hi"] = np.nanquantile(r, 0.975, axis=0)
    return cols


class ClassifierAudit:
    """Per-group classifier metrics of one score (and optionally a base score) on labelled rows."""

    def __init__(self, by_group: pd.DataFrame, disparities: pd.DataFrame, params: dict):
        self.by_group = by_group
        self.disparities = disparities
        self.params = params

    @property
    def overall(self) -> pd.Series:
        return self.by_group.iloc[0]

    def _col(self, metric):
        if metric not in self.by_group.columns:
            raise MMCError(f"unknown metric {metric!r}; by_group has {', '.join(self.by_group.columns)}")
        return self.by_group[metric].astype(float)

    def difference(self, metric: str, reference: str = "all") -> pd.Series:
        """Each group's ``metric`` minus the reference group's."""
        s = self._col(metric)
        if reference not in s.index:
            raise MMCError(f"unknown reference group {reference!r}")
        return (s - s[reference]).rename(f"{metric} - {reference}")

    def ratio(self, metric: str, reference: str = "all") -> pd.Series:
        """Each group's ``metric`` divided by the reference group's (NaN when that is 0)."""
        s = self._col(metric)
        if reference not in s.index:
            raise MMCError(f"unknown reference group {reference!r}")
        ref = s[reference]
        return (s / ref if ref != 0 else s * np.nan).rename(f"{metric} / {reference}")

    def to_json(self) -> dict:
        from .audit_result import json_clean

        return {
            "format": "mmc-audit-classifier-audit",
            "version": 1,
            "by_group": json_clean(self.by_group.to_dict(orient="split")),
            "disparities": json_clean(self.disparities.to_dict(orient="split")),
            "params": json_clean(self.params),
        }


def _families(groups) -> dict:
    """column -> indices of the one-condition groups on that column that split the rows between them."""
    fam: dict = {}
    for i, g in enumerate(groups.groups):
        if len(g.where) == 1 and not g.any:
            fam.setdefault(g.where[0].column, []).append(i)
    return {c: ix for c, ix in fam.items() if len(ix) >= 2}


def _disparities(bg: pd.DataFrame, memb, fam: dict, suffix: str = "") -> pd.DataFrame:
    rows = []
    dense_sizes = memb.sizes
    for col, ix in fam.items():
        sub = bg.iloc[ix]
        sel, tpr, fpr = (sub[k + suffix].astype(float) for k in ("selection_rate", "tpr", "fpr"))
        with np.errstate(divide="ignore", invalid="ignore"):
            top = sel.max()
            four_fifths = [str(g) for g, v in sel.items() if top > 0 and v / top < 0.8]
            rows.append(
                {
                    "column": col,
                    "groups": len(ix),
                    "rows_covered": int(dense_sizes[ix].sum()),
                    "demographic_parity_difference": sel.max() - sel.min(),
                    "demographic_parity_ratio": sel.min() / sel.max() if sel.max() > 0 else np.nan,
                    "equalized_odds_difference": max(tpr.max() - tpr.min(), fpr.max() - fpr.min()),
                    "equalized_odds_ratio": min(
                        tpr.min() / tpr.max() if tpr.max() > 0 else np.nan,
                        fpr.min() / fpr.max() if fpr.max() > 0 else np.nan,
                    ),
                    "four_fifths_flagged": four_fifths,
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "column",
            "groups",
            "rows_covered",
            "demographic_parity_difference",
            "demographic_parity_ratio",
            "equalized_odds_difference",
            "equalized_odds_ratio",
            "four_fifths_flagged",
        ],
    ).set_index("column")


def classifier_audit(
    score,
    y,
    groups,
    table,
    base=None,
    threshold: float = 0.5,
    n_buckets: int = 10,
    min_cell_count: int = 20,
    n_boot: int = 200,
    seed: int = 0,
) -> ClassifierAudit:
    """Audit a probability ``score`` (n,) against a 0/1 label ``y`` (n,) on every group of ``groups`` (a
    GroupSet evaluated on ``table``). ``base``: the score before multicalibration (the "before" columns).
    Scores are bucketed into ``n_buckets`` equal-width bins of [0, 1] for the calibration errors."""
    y = np.asarray(y, dtype=float)
    n = y.size
    if y.ndim != 1 or n == 0 or not np.isin(y, (0.0, 1.0)).all():
        raise DataError("the label must be one column of 0/1 values (see as_binary)")
    s = _check_scores(score, n, "the score")
    b = None if base is None else _check_scores(base, n, "the base score")
    if not (isinstance(threshold, (int, float)) and 0 <= threshold <= 1):
        raise MMCError(f"threshold must be in [0, 1], got {threshold!r}")
    if not isinstance(n_buckets, int) or n_buckets < 1:
        raise MMCError(f"n_buckets must be a positive integer, got {n_buckets!r}")
    if not isinstance(n_boot, int) or n_boot < 0:
        raise MMCError(f"n_boot must be a non-negative integer, got {n_boot!r}")
    memb = groups.evaluate(table, n)
    cols = {}
    for sc, suffix in ((s, ""), (b, "_base")):
        if sc is None:
            continue
        bucket = np.clip(np.floor(sc * n_buckets), 0, n_buckets - 1).astype(np.int64)
        cells = _CellSums(memb, bucket, n_buckets)
        cols.update(_score_table(cells, sc, y, threshold, min_cell_count, n_boot, seed, suffix))
    bg = pd.DataFrame(cols, index=pd.Index(list(memb.names), name="group"))
    bg["count"] = bg["count"].astype(np.int64)
    bg.insert(1, "mass", bg["count"] / n)
    fam = _families(groups)
    disp = _disparities(bg, memb, fam)
    params = {
        "threshold": float(threshold),
        "n_buckets": n_buckets,
        "min_cell_count": min_cell_count,
        "n_boot": n_boot,
        "seed": seed,
        "n": int(n),
        "base": b is not None,
        "bootstrap_level": 0.95,
        "log_loss_clip": _EPS,
    }
    return ClassifierAudit(bg, disp, params)


def reliability_cells(score, y, groups, table, n_buckets: int = 10, base=None) -> pd.DataFrame:
    """Reliability-diagram cells, long: one row per (score, group, bucket) with rows: score ("after", or
    "before" for ``base``), group, bucket, bucket_lo, bucket_hi, count, mean_score (predicted), observed (share of
    positives) and its Wilson 95% interval observed_lo / observed_hi. Buckets: ``n_buckets`` equal bins of [0, 1]."""
    from .findings import wilson_interval

    y = np.asarray(y, dtype=float)
    n = y.size
    memb = groups.evaluate(table, n)
    sums = memb.sums()
    m = int(n_buckets)
    names = np.asarray(list(memb.names), dtype=object)
    frames = []
    for which, sc in (("after", score), ("before", base)):
        if sc is None:
            continue
        sc = _check_scores(sc, n, "the score" if which == "after" else "the base score")
        b = np.clip(np.floor(sc * m), 0, m - 1).astype(np.int64)
        cnt, sy, ss = (sums.cell_sums(b, m, w) for w in (None, y, sc))
        nz = np.flatnonzero(cnt > 0)
        lo, hi = wilson_interval(sy[nz], cnt[nz])
        g_, i_ = np.divmod(nz, m)
        frames.append(
            pd.DataFrame(
                {
                    "score": which,
                    "group": names[g_],
                    "bucket": i_,
                    "bucket_lo": i_ / m,
                    "bucket_hi": (i_ + 1) / m,
                    "count": cnt[nz].astype(np.int64),
                    "mean_score": ss[nz] / cnt[nz],
                    "observed": sy[nz] / cnt[nz],
                    "observed_lo": lo,
                    "observed_hi": hi,
                }
            )
        )
    cols = [
        "score",
        "group",
        "bucket",
        "bucket_lo",
        "bucket_hi",
        "count",
        "mean_score",
        "observed",
        "observed_lo",
        "observed_hi",
    ]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def threshold_rates(
    score, y, groups, table, threshold: float, base=None, n_boot: int = 200, seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The threshold-dependent part of :func:`classifier_audit` at a new ``threshold``: (rates, disparities),
    rates = by_group's count, mass and :data:`RATE_METRICS` columns (with ``_base`` and the bootstrap ends).
    Cheap (bincounts over the rows; no refit): the dashboard's threshold slider calls it on every move."""
    r = classifier_audit(score, y, groups, table, base=base, threshold=threshold, n_boot=n_boot, seed=seed)
    keep = ["count", "mass"] + [
        c for c in r.by_group.columns if any(c == k or c.startswith(k + "_") for k in RATE_METRICS)
    ]
    return r.by_group[keep], r.disparities


# ---------------------------------------------------------------------------------------------------
# the classifier branch of mmc_core.auditing.metrics.audit
# ---------------------------------------------------------------------------------------------------
def check_threshold(threshold, name: str = "threshold") -> float:
    """A decision threshold strictly between 0 and 1, or MMCError naming it."""
    import numbers

    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, numbers.Real)
        or not np.isfinite(float(threshold))
        or not 0 < float(threshold) < 1
    ):
        raise MMCError(f"{name} must be a number strictly between 0 and 1, got {threshold!r}")
    return float(threshold)


def _positive_is_one(pos) -> bool:
    """Whether a model's positive class is the usual 1 / True (None: a model that recorded none)."""
    if pos is None or isinstance(pos, (bool, np.bool_)):
        return pos is None or bool(pos)
    if isinstance(pos, (int, float, np.integer, np.floating)):
        return float(pos) == 1.0
    return str(pos).strip().lower() in ("1", "1.0", "true")


def binary_labels(model, y, name: str = "the labels") -> np.ndarray:
    """The audit rows' labels as 0/1 floats, 1 = the model's positive class: 0/1 (or True/False) as they are
    when that class is 1 / True, otherwise each value matched to the model's own two classes (a model fitted
    with positive class 0 predicts P(y = 0): its labels must be flipped, not read as they are). A value that is
    neither class is refused (a column coded 1/2 is not a 0/1 column), and a set holding one class only is
    fine (a slice with no events)."""
    arr = y.to_numpy() if hasattr(y, "to_numpy") else np.asarray(y)
    info = getattr(model, "binary", None) or {}
    pos = info.get("positive")
    classes = list(info.get("classes") or [])
    plain = _positive_is_one(pos) and set(map(str, classes)) <= {"0", "1", "False", "True"}
    if _positive_is_one(pos) and arr.dtype.kind in "iufb":
        a = arr.astype(float)
        if a.ndim == 1 and np.all(np.isin(a, (0.0, 1.0))):
            return a
    if pos is None or plain:
        raise DataError(f"{name} must be 0/1 for this classifier model (found values other than 0 and 1)")
    neg = classes[0] if len(classes) == 2 else None
    s = pd.Series(np.asarray(arr, dtype=object).ravel())
    if s.isna().any():
        raise DataError(f"{name} has {int(s.isna().sum())} missing value(s): drop those rows first")

    def same(v, c) -> bool:
        return c is not None and (v == c or str(v) == str(c))

    codes, uniq = _factorize(s)
    is_pos = np.array([same(v, pos) for v in uniq], dtype=bool)
    is_neg = np.array([same(v, neg) for v in uniq], dtype=bool)
    bad = [v for v, p_, n_ in zip(uniq, is_pos, is_neg) if not (p_ or n_)]
    if bad:
        shown = ", ".join(repr(v) for v in bad[:3])
        raise DataError(
            f"{name} has value(s) {shown} that are not the model's classes ({neg!r} negative, {pos!r} positive)"
        )
    return is_pos.astype(float)[codes]


# ---- the task of a label (used by the estimator) -------------------------------------------------------
TASK_BINARY = "binary"


def resolve_task(y, task="auto", positive_label=None, label_name: str = "label"):
    """(task, y, binary_info): the task a label is fitted as, the label (0/1 floats for "binary", unchanged
    otherwise) and, for "binary", {"classes": [negative, positive], "positive": positive} (JSON-safe)."""
    if task not in TASKS:
        raise MMCError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    name = f"label '{label_name}'"
    if task == "regression":
        if positive_label is not None:
            raise MMCError("positive_label is only used with a binary label (task 'binary' or 'auto')")
        return task, y, None
    arr = y.to_numpy() if hasattr(y, "to_numpy") else np.asarray(y)
    if task == "auto":
        if arr.dtype.kind in "iuf":  # numbers: an O(n) check (a regression label must stay cheap to look at)
            v = arr.ravel()
            v = v[~np.isnan(v)] if arr.dtype.kind == "f" else v
            rest = v[v != v[0]] if v.size else v
            binary = rest.size > 0 and bool(np.all(rest == rest[0]))
        else:
            try:
                binary = is_binary(arr)
            except TypeError:
                binary = False
        if not binary:
            if positive_label is not None:
                raise DataError(
                    f"positive_label={positive_label!r} was given but {name} is not binary "
                    "(it does not have exactly two distinct values)"
                )
            return "regression", y, None
    y01, info = as_binary(arr, positive_label, name)
    return TASK_BINARY, y01, {"classes": [_plain(v) for v in info["classes"]], "positive": _plain(info["positive"])}


def _plain(v):
    """A JSON-safe scalar (numpy scalars to Python ones)."""
    if isinstance(v, np.generic):
        return v.item()
    return v

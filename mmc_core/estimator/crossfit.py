"""Cross-fitted interval calibration (``MomentMulticalibrator(interval_calibration="cross-fit")``, issue 9).

The rows are split into ``CROSS_FIT_FOLDS`` seeded folds; for each fold a model is fitted with the estimator's
own parameters (its own held-out rows for early stopping, the same ``random_state``; interval calibration
off) on the other folds, and the fold's rows get that model's predictions (mean and moments on the unit
scale): every row has an out-of-fold prediction, and :func:`mmc_core.intervals.calibrate` fits the interval
record on all of them. The final model is fitted exactly as with ``"held-out"``; see the package docstring of
:mod:`mmc_core.intervals` for what the cross-fitted record guarantees (approximately) and what it does not.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..common.errors import MMCError
from ..common.tables import take_rows
from ..fit.parameters import check_value

# "held-out" is the default; "auto": "cross-fit" with the in-memory (numpy) engine up to CROSS_FIT_MAX_ROWS rows,
# "held-out" above that and with the Dask engine
CROSS_FIT_FOLDS = 5
# Above this many rows "auto" calibrates on the held-out rows: a group holding 1% of 200k rows already has
# 500 of them (its margin costs ~1.3 points of coverage), while cross-fitting costs 5 more fits of a table
# that large (at 10M rows minutes, and a copy of 80% of the table per fold).
CROSS_FIT_MAX_ROWS = 200_000
_FOLD_SEED_TAG = 0x78666974  # "xfit": the folds' stream is independent of the calibration split's


def check_interval_calibration(value, engine: str = "numpy", n: int | None = None) -> str:
    """The rows the intervals are calibrated on for ``engine`` and a table of ``n`` rows: "held-out" or
    "cross-fit" ("auto" resolved); MMCError naming the parameter for any other value."""
    check_value("interval_calibration", value)
    if value == "auto":
        return "held-out" if engine == "dask" or (n is not None and n > CROSS_FIT_MAX_ROWS) else "cross-fit"
    return value


def fold_ids(n: int, random_state, folds: int = CROSS_FIT_FOLDS) -> np.ndarray:
    """A fold id in 0..folds-1 per row: a seeded permutation cut into ``folds`` nearly equal parts."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        rng = np.random.default_rng([_FOLD_SEED_TAG, int(random_state)])
    else:
        rng = np.random.default_rng(random_state)
    out = np.empty(n, dtype=np.int64)
    out[rng.permutation(n)] = np.arange(n) * folds // max(n, 1)
    return out


def _rows(X, idx) -> dict:
    """Rows ``idx`` of the table; a table without columns (only the whole population) gets a row-number column
    so the fold's fit still knows its row count."""
    return take_rows(X, idx) or {"__mmc_row__": np.asarray(idx)}


def out_of_fold_predictions(est, X, yu, base_u, gset, task: str, stop=None, folds: int = CROSS_FIT_FOLDS) -> dict:
    """Out-of-fold predictions of every row of ``X`` on the unit scale: ``{"fold": (n,), "mean": (n,),
    "moments": {a: (n,)}}``. ``yu`` / ``base_u`` are the final fit's unit-scale labels and (clipped) base, so
    each fold's model is fitted on the final model's unit scale (declared range [0, 1]) and its predictions
    are directly comparable with the final model's."""
    n = int(yu.size)
    if n < 2 * folds:
        raise MMCError(f"interval_calibration='cross-fit' needs at least {2 * folds} rows, got {n}")
    fold = fold_ids(n, est.random_state, folds)
    params = est.get_params(deep=False)
    params.update(label_range=(0.0, 1.0), task=task, positive_label=None, interval_calibration="held-out")
    params.update(base_column=None, groups=None)  # the fold's groups and base are passed to its fit
    mu = np.empty(n)
    moms: dict = {}
    for k in range(folds):
        test, train = np.flatnonzero(fold == k), np.flatnonzero(fold != k)
        sub = type(est)(**params)
        sub._calibrate_intervals = False  # the fold's model needs no interval record of its own
        sub.fit(_rows(X, train), yu[train], gset, None if base_u is None else base_u[train], stop=stop)
        m_k, mo_k = sub.model_.predict_unit(_rows(X, test), None if base_u is None else base_u[test], test.size)
        mu[test] = m_k
        for a, v in mo_k.items():
            moms.setdefault(a, np.empty(n))[test] = v
    return {"fold": fold, "mean": mu, "moments": moms}

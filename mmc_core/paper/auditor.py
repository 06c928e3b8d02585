"""Audit statistics: mass-weighted residuals of every (group, cell), and the finite-sample auditors.

For a predictor p and label function l, the audit statistic of a set S on a sample of n rows is
v(S) = (1/n) * sum_{x in S} (p(x) - l(x, y)); S is alpha-violated when |v(S)| >= alpha (the paper's
|p(S) - l(S)| >= alpha / P(S)). All cells of all groups are summed in one ``bincount`` over the
(row, group) pairs: no loop over groups or cells.
"""

from __future__ import annotations

import math

import numpy as np

from .buckets import BucketGrid

__all__ = ["cell_index", "chernoff_auditor", "consistency_auditor", "chernoff_slack"]


def cell_index(bmu: np.ndarray, bmom: np.ndarray | None, m: int) -> np.ndarray:
    """Cell of each row within its group: the mean bucket i, or i * m + j for the joint (mean, moment) cells."""
    return bmu if bmom is None else bmu * m + bmom


def chernoff_slack(count, delta: float) -> np.ndarray:
    """sqrt(ln(2/delta) / (2 count)): the Chernoff deviation of a mean of ``count`` [0, 1] values."""
    return np.sqrt(math.log(2.0 / delta) / (2.0 * np.maximum(np.asarray(count, dtype=float), 1.0)))


def chernoff_auditor(diff_sum: np.ndarray, count: np.ndarray, n: int, alpha: float, delta: float):
    """The paper's single-set Auditor (alg:auditor-single-set), vectorised over sets.

    Flags S when n' > 0 and |mean difference over S| - 2 sqrt(ln(2/delta) / (2 n'))
    >= alpha / (n'/n - sqrt(ln(2/delta) / (2 n))). ``diff_sum`` is sum_{x in S} (p(x) - l(x, y)).
    Returns (flagged mask, margin of the test, sign lambda).
    """
    count = np.asarray(count, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        emp = np.where(count > 0, diff_sum / np.maximum(count, 1.0), 0.0)
        denom = count / n - chernoff_slack(n, delta)
        lhs = np.abs(emp) - 2.0 * chernoff_slack(count, delta)
        rhs = np.where(denom > 0, alpha / np.where(denom > 0, denom, 1.0), np.inf)
    margin = lhs - rhs
    flagged = (count > 0) & (denom > 0) & (margin >= 0)
    return flagged, margin, np.sign(emp)


def consistency_auditor(diff_sum: np.ndarray, count: np.ndarray, n: int, alpha: float, delta: float):
    """alg:consistency-auditor over a collection of sets given as arrays (any shape).

    The paper returns the first flagged set in enumeration order; any flagged set is a true violation
    with high probability, so we return the one with the largest margin (a best response).
    Returns None or (flat index, lambda).
    """
    flagged, margin, sign = chernoff_auditor(diff_sum, count, n, alpha, delta)
    if not flagged.any():
        return None
    margin = np.where(flagged, margin, -np.inf).ravel()
    k = int(np.argmax(margin))
    return k, float(sign.ravel()[k])


def mean_bucket_index(grid: BucketGrid, values: np.ndarray) -> np.ndarray:
    return grid.index(values)

"""Constants and small helpers shared by the interval methods (grid of deltas, conformal ranks, JSON lists,
row sums of per-group coefficients)."""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..common.errors import MMCError, ModelFormatError
from ..paper.moments import MomentKind

METHODS = ("guaranteed", "plugin", "multimoment", "calibrated", "split-conformal", "mondrian", "gaussian")
DELTA_GRID = (
    0.005,
    0.01,
    0.02,
    0.025,
    0.03,
    0.04,
    0.05,
    0.06,
    0.07,
    0.075,
    0.08,
    0.09,
    0.1,
    0.11,
    0.12,
    0.125,
    0.13,
    0.14,
    0.15,
    0.175,
    0.2,
    0.25,
    0.3,
    0.35,
    0.4,
    0.45,
    0.5,
)
# The threshold approaches mmc_core fits; others (benchmarks/interval_fitters) plug in through calibrate's fitter.
APPROACHES = ("cc",)
DEFAULT_APPROACH = "cc"
RECORD_FORMAT = "mmc-intervals"
RECORD_VERSION = 1
N_MOMENT_QUANTILES = 201
# Variance floor of the standardized score, as a fraction of the calibration rows' mean m_2 (an sd floor of half
# the root-mean predicted sd): a cell whose variance prediction collapsed towards 0 (a small cell fitted exactly
# on the fitting rows) would otherwise get a near-zero-width interval and an exploding score. Measured on the
# protocol: floors between 0.25 and 0.5 make the score's per-group quantiles the most homogeneous on the wage
# table (and do not matter on the others); 0.01 left them 3x more dispersed.
FLOOR_FRACTION = 0.25


# ---- small numerical helpers ---------------------------------------------------------------------------
def normal_ppf(p: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, one Halley step: ~1e-15)."""
    p = float(p)
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {p}")
    a = (
        -3.969683028665376e01,
        2.209460984245205e02,
        -2.759285104469687e02,
        1.383577518672690e02,
        -3.066479806614716e01,
        2.506628277459239e00,
    )
    b = (
        -5.447609879822406e01,
        1.615858368580409e02,
        -1.556989798598866e02,
        6.680131188771972e01,
        -1.328068155288572e01,
    )
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2 * math.log(p))
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
        )
    elif p <= 1 - lo:
        q = p - 0.5
        r = q * q
        x = (
            (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
            * q
            / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
        )
    else:
        q = math.sqrt(-2 * math.log1p(-p))
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
        )
    e = 0.5 * math.erfc(-x / math.sqrt(2)) - p
    u = e * math.sqrt(2 * math.pi) * math.exp(x * x / 2)
    return x - u / (1 + x * u / 2)


def conformal_quantile(scores, delta: float) -> float:
    """The split-conformal quantile: the ceil((n + 1)(1 - delta))-th smallest score (inf if that exceeds n)."""
    s = np.sort(np.asarray(scores, dtype=float))
    k = math.ceil((s.size + 1) * (1 - delta) - 1e-12)
    return float(s[k - 1]) if 1 <= k <= s.size else (math.inf if k > s.size else -math.inf)


def check_prob(name: str, v):
    if not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(v) or not 0 < float(v) < 1:
        raise MMCError(f"{name} must be a number strictly between 0 and 1, got {v!r}")


def grid_delta(delta: float, deltas=DELTA_GRID) -> int:
    """Index of the largest grid delta <= ``delta`` (conservative); MMCError outside the grid (above its
    largest delta the intervals would silently be that delta's, e.g. 50% intervals for a request of 10%)."""
    check_prob("delta", delta)
    arr = np.asarray(deltas, dtype=float)
    ok = np.flatnonzero(arr <= delta * (1 + 1e-9))
    if ok.size == 0:
        raise MMCError(
            f"delta={delta} is below {arr[0]}, the smallest miscoverage the data-driven intervals are calibrated for"
        )
    if delta > arr[-1] * (1 + 1e-9):
        raise MMCError(
            f"delta={delta} is above {arr[-1]:g}, the largest miscoverage the data-driven intervals are calibrated "
            f"for (coverage 1 - delta below {1 - arr[-1]:g}); use delta <= {arr[-1]:g}, or the gaussian method"
        )
    return int(ok[-1])


def _group_sorted(memb, values: np.ndarray):
    """Per-group sorted values: (sorted values aligned with memb's (group, row) pairs, group starts)."""
    pg = memb.pair_groups()
    v = values[memb.rows]
    order = np.lexsort((v, pg))
    return v[order], memb.indptr[:-1]


def group_conformal(memb, scores: np.ndarray, deltas) -> np.ndarray:
    """(G, D) conformal quantile of ``scores`` within each group for each delta (inf when too few rows)."""
    sv, starts = _group_sorted(memb, scores)
    n_g = memb.sizes.astype(float)[:, None]
    d = np.asarray(deltas, dtype=float)[None, :]
    k = np.ceil((n_g + 1) * (1 - d) - 1e-12).astype(np.int64)
    ok = (k >= 1) & (k <= n_g)
    idx = np.where(ok, starts[:, None] + k - 1, 0)
    out = np.where(ok, sv[idx] if sv.size else 0.0, np.inf)
    return out


def to_json_list(arr) -> list:
    return [v if math.isfinite(v) else None for v in np.ravel(np.asarray(arr, dtype=float)).tolist()]


def from_json_list(lst, where: str, length: int | None = None, allow_null: bool = True) -> np.ndarray:
    if not isinstance(lst, list) or (length is not None and len(lst) != length):
        raise ModelFormatError(
            f"model extras: intervals.{where} must be a list" + (f" of {length} numbers" if length is not None else "")
        )
    out = np.empty(len(lst))
    for i, v in enumerate(lst):
        if v is None and allow_null:
            out[i] = np.inf
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[i] = float(v)
        else:
            raise ModelFormatError(f"model extras: intervals.{where}[{i}] = {v!r} is not a number")
    return out


# ---- moments usable for intervals ------------------------------------------------------------------------
def usable_moments(model) -> tuple:
    """Moments usable in tail bounds: even a always; odd a only when they are absolute central moments."""
    return tuple(a for a in model.moments if a % 2 == 0 or model.params.odd_moments == MomentKind.ABSOLUTE)


def need_moments(model, method: str) -> tuple:
    use = usable_moments(model)
    if not model.moments:
        raise MMCError(
            f"the '{method}' interval needs moment predictors, but this model fits the mean only "
            "(refit with --moments 2 or more)"
        )
    if not use:
        raise MMCError(
            f"the '{method}' interval needs an even moment or absolute odd moments; this model has "
            f"signed moments {list(model.moments)} only"
        )
    return use


# ---- the multicalibrated threshold -----------------------------------------------------------------------
def membership_pairs(memb):
    sums = memb.sums()
    return sums.pr, sums.pg


def row_sum(memb, theta: np.ndarray) -> np.ndarray:
    return memb.sums().row_sums(theta)


def row_max(memb, theta: np.ndarray) -> np.ndarray:
    """max over the groups containing each row of theta (inf entries skipped; rows with none: inf)."""
    theta = np.asarray(theta, dtype=float)
    t = np.where(np.isfinite(theta), theta, -np.inf)
    sums = memb.sums()
    if sums.by_signature:  # rows with the same groups share their maximum: one per signature
        out_sig = np.full(sums.ns, -np.inf)
        np.maximum.at(out_sig, sums.sig_of_pair, t[sums.pair_group])
        out = out_sig[sums.sig]
    else:
        out = np.full(memb.n, -np.inf)
        np.maximum.at(out, sums.pr, t[sums.pg])
    out[out == -np.inf] = np.inf
    return out


def threshold_rows(memb, theta: np.ndarray, combine: str) -> np.ndarray:
    if combine == "sum":  # an infinite theta (too few calibration rows) makes its rows' intervals unbounded
        return row_sum(memb, theta)
    if combine == "max":
        return row_max(memb, theta)
    raise ModelFormatError(f"model extras: intervals.calibrated.combine = {combine!r} must be 'sum' or 'max'")

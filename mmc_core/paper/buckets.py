"""Level sets ("buckets") of a predictor's range.

A *uniform* grid on [lo, hi] with m buckets has bucket i = [lo + i w, lo + (i+1) w), the last one closed.
A grid with explicit interior edges e_1 < ... < e_{m-1} (``inner``) has buckets [lo, e_1), [e_1, e_2), ...,
[e_{m-1}, hi]; such grids are chosen *from the data* before the descent starts (quantiles of the initial
mean prediction; a geometric grid spanning the moment values the data actually show) and are then fixed,
stored in the model and reused verbatim, so a cell is the same set of rows during fitting, replay and
audits. Values outside [lo, hi] (possible for moment predictions, whose projection range is wider than the
bucketed range) fall into the first or last bucket.

The guarantees of the descent hold for *any* fixed partition of the predictor's range: they are statements
about every cell of the partition. Only the bucket width enters the derived bounds (the eps = a w_mu of the
mean-conditioned moment lemma and the w_a of the interval theorem); ``width`` and ``max_width`` give the
right (conservative) value for a non-uniform grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .moments import MomentKind, max_central_moment

__all__ = [
    "BucketGrid",
    "mean_grid",
    "moment_grid",
    "moment_projection",
    "quantile_edges",
    "geometric_edges",
    "fill_edges",
]


@dataclass(frozen=True)
class BucketGrid:
    lo: float
    hi: float
    m: int
    inner: tuple = ()  # interior edges (m - 1 increasing values) of a non-uniform grid; () = uniform

    def __post_init__(self):
        if self.inner:
            e = np.asarray(self.inner, dtype=float)
            if e.size != self.m - 1 or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
                raise ValueError(f"a grid with {self.m} buckets needs {self.m - 1} increasing interior edges")

    @property
    def uniform(self) -> bool:
        return not self.inner

    @property
    def width(self) -> float:
        """Bucket width. Non-uniform grids: the largest width of buckets 0..m-2 (the top bucket is open
        upwards to the projection range and is bounded separately wherever a width is used)."""
        if not self.inner:
            return (self.hi - self.lo) / self.m
        d = np.diff(self.edges())
        return float(d[:-1].max()) if d.size > 1 else float(d[0])

    @property
    def max_width(self) -> float:
        """The largest width of any bucket (the top one included)."""
        if not self.inner:
            return (self.hi - self.lo) / self.m
        return float(np.diff(self.edges()).max())

    def index(self, values: np.ndarray) -> np.ndarray:
        """Bucket index (int64) of each value: clip(floor((v - lo) * m / (hi - lo)), 0, m - 1) on a uniform
        grid; the number of interior edges <= v on a non-uniform one."""
        if self.inner:
            return np.searchsorted(
                np.asarray(self.inner, dtype=float), np.asarray(values, dtype=float), side="right"
            ).astype(np.int64)
        idx = np.floor((np.asarray(values, dtype=float) - self.lo) * (self.m / (self.hi - self.lo)))
        return np.clip(idx, 0, self.m - 1).astype(np.int64)

    def edges(self) -> np.ndarray:
        if self.inner:
            return np.concatenate([[self.lo], np.asarray(self.inner, dtype=float), [self.hi]])
        return self.lo + self.width * np.arange(self.m + 1)

    def centers(self) -> np.ndarray:
        if self.inner:
            e = self.edges()
            return 0.5 * (e[:-1] + e[1:])
        return self.lo + self.width * (np.arange(self.m) + 0.5)


def mean_grid(m: int, inner: tuple = ()) -> BucketGrid:
    return BucketGrid(0.0, 1.0, m, tuple(inner))


def moment_grid(a: int, m: int, odd_moments: str, inner: tuple = ()) -> BucketGrid:
    """Buckets over the attainable range of the a-th central moment of a [0, 1] label (uniform), or with
    the given interior edges (data-scale grids, see :func:`geometric_edges`).

    Bucketing [0, 1] instead would put every variance (at most 1/4) into the first few buckets.
    """
    r = max_central_moment(a)
    if a % 2 == 1 and odd_moments == MomentKind.SIGNED:
        return BucketGrid(-r, r, m, tuple(inner))
    return BucketGrid(0.0, r, m, tuple(inner))


def inner_edges(edges, lo: float, hi: float) -> tuple:
    """The distinct edges strictly inside (lo, hi), sorted: a grid's interior edges."""
    e = np.unique(np.asarray(edges, dtype=float))
    e = e[(e > lo) & (e < hi)]
    return tuple(float(x) for x in e)


def quantile_edges(values: np.ndarray, m: int, lo: float = 0.0, hi: float = 1.0) -> tuple:
    """Interior edges at the 1/m, ..., (m-1)/m quantiles of ``values`` (ties merged, so fewer buckets may
    result: the caller uses ``len(edges) + 1`` buckets). Empty when the values are (nearly) constant."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or m < 2 or not np.ptp(v) > 0:
        return ()
    return inner_edges(np.quantile(v, np.arange(1, m) / m), lo, hi)


def geometric_edges(low: float, high: float, m: int) -> tuple:
    """m - 1 interior edges spaced evenly on a log scale from ``low`` to ``high`` (0 < low < high): buckets
    of equal *relative* width, the variance-stabilizing choice for a scale parameter such as a variance."""
    if m < 2:
        return ()
    if m == 2:
        return (float(np.sqrt(low * high)),)
    return tuple(float(x) for x in np.exp(np.linspace(np.log(low), np.log(high), m - 1)))


def moment_projection(a: int, odd_moments: str) -> tuple[float, float]:
    """Range the a-th moment predictor is projected onto after each update.

    This is the range of the pseudo-labels (y - mu(x))^a, not the attainable range of a true moment:
    around a not-yet-calibrated mean the pseudo-labels exceed r_a, and projecting onto [0, r_a] would
    leave such cells violated forever (the descent's potential argument needs the targets inside the
    projection set).
    """
    if a % 2 == 1 and odd_moments == MomentKind.SIGNED:
        return (-1.0, 1.0)
    return (0.0, 1.0)


def fill_edges(edges: tuple, m: int, lo: float, hi: float) -> tuple:
    """Complete ``edges`` to exactly m - 1 interior edges of [lo, hi] by halving the widest bucket until
    there are enough (quantile edges merge when predictions have ties)."""
    e = sorted(set(float(x) for x in edges if lo < x < hi))
    while len(e) < m - 1:
        full = [lo] + e + [hi]
        w = np.diff(full)
        k = int(np.argmax(w))
        mid = 0.5 * (full[k] + full[k + 1])
        if not full[k] < mid < full[k + 1]:
            break
        e.insert(k, mid)
        e.sort()
    return tuple(e[: m - 1])

"""Level sets ("buckets") of a predictor's range.

Bucket i of a grid on [lo, hi] with m buckets is [lo + i w, lo + (i+1) w), the last one closed; values
outside [lo, hi] (possible for moment predictions, whose projection range is wider than the bucketed
attainable range) fall into the first or last bucket. The index is computed by one formula everywhere
(fitting, replay on new rows, audits, tests) so that the cells are the same sets wherever they are used.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .moments import MomentKind, max_central_moment

__all__ = ["BucketGrid", "mean_grid", "moment_grid", "moment_projection"]


@dataclass(frozen=True)
class BucketGrid:
    lo: float
    hi: float
    m: int

    @property
    def width(self) -> float:
        return (self.hi - self.lo) / self.m

    def index(self, values: np.ndarray) -> np.ndarray:
        """Bucket index (int64) of each value: clip(floor((v - lo) * m / (hi - lo)), 0, m - 1)."""
        idx = np.floor((np.asarray(values, dtype=float) - self.lo) * (self.m / (self.hi - self.lo)))
        return np.clip(idx, 0, self.m - 1).astype(np.int64)

    def edges(self) -> np.ndarray:
        return self.lo + self.width * np.arange(self.m + 1)

    def centers(self) -> np.ndarray:
        return self.lo + self.width * (np.arange(self.m) + 0.5)


def mean_grid(m: int) -> BucketGrid:
    return BucketGrid(0.0, 1.0, m)


def moment_grid(a: int, m: int, odd_moments: str) -> BucketGrid:
    """Buckets over the attainable range of the a-th central moment of a [0, 1] label.

    Bucketing [0, 1] instead would put every variance (at most 1/4) into the first few buckets.
    """
    r = max_central_moment(a)
    if a % 2 == 1 and odd_moments == MomentKind.SIGNED:
        return BucketGrid(-r, r, m)
    return BucketGrid(0.0, r, m)


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

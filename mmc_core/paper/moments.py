"""Label scaling and the ranges central moments can take.

The theory works with labels in [0, 1]. A user's label (wages, scores) is mapped there by an affine map
fixed by a label range; means map back affinely and the a-th central moment maps back by range**a.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..common.errors import DataError, MMCError

__all__ = ["LabelScale", "max_central_moment", "MomentKind", "pseudo_label"]


@cache
def max_central_moment(a: int) -> float:
    """Largest E|y - E y|^a over all distributions of y on [0, 1] (r_2 = 1/4, r_4 = 1/12).

    |y - mu|^a is convex in y for a >= 1, so for a fixed mean the maximum puts all mass on {0, 1};
    it remains to maximise p(1-p)^a + (1-p)p^a over p, which is symmetric about 1/2. Solved by a dense
    grid and golden-section refinement to ~1e-15. For even a this is the largest signed moment too; for odd
    a it bounds |E(y - E y)^a|.
    """
    if a < 1:
        raise ValueError(f"moment order must be >= 1, got {a}")

    def f(p: float) -> float:
        return p * (1 - p) ** a + (1 - p) * p**a

    grid = np.linspace(0.0, 0.5, 5001)
    vals = grid * (1 - grid) ** a + (1 - grid) * grid**a
    i = int(np.argmax(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    g = (np.sqrt(5) - 1) / 2
    for _ in range(200):
        c, d = hi - g * (hi - lo), lo + g * (hi - lo)
        if f(c) > f(d):
            hi = d
        else:
            lo = c
    return float(max(f(0.5 * (lo + hi)), vals.max()))


class MomentKind:
    """How odd moments are defined: ``absolute`` E|y - mu|^a (the paper's footnote; usable for intervals)
    or ``signed`` E(y - mu)^a. Even moments are the same either way."""

    ABSOLUTE = "absolute"
    SIGNED = "signed"
    ALL = (ABSOLUTE, SIGNED)


def pseudo_label(a: int, residual: np.ndarray, odd_moments: str) -> np.ndarray:
    """(y - mu)^a, or |y - mu|^a for odd a with absolute moments."""
    base = (
        np.abs(residual) if (a % 2 == 1 and odd_moments == MomentKind.ABSOLUTE) else np.asarray(residual, dtype=float)
    )
    out = base * base
    for _ in range(a - 2):  # repeated products: several times faster than a general float power
        np.multiply(out, base, out=out)  # in place: the same products, one row-length buffer
    return out if a >= 2 else base


SPAN_LIMITS = (1e-30, 1e30)  # a label range's span (and values) must lie within these: span ** 8 stays finite


@dataclass(frozen=True)
class LabelScale:
    """The affine map between a label's own units and [0, 1]."""

    lo: float
    hi: float
    source: str = "declared"  # or "observed"

    def __post_init__(self):
        if not (np.isfinite(self.lo) and np.isfinite(self.hi)):
            raise DataError(f"label range must be finite, got [{self.lo}, {self.hi}]")
        if not self.hi > self.lo:
            raise DataError(f"label range needs LO < HI, got [{self.lo}, {self.hi}]")
        if not (SPAN_LIMITS[0] <= self.span <= SPAN_LIMITS[1] and max(abs(self.lo), abs(self.hi)) <= SPAN_LIMITS[1]):
            # moments up to the 8th are stored on the unit scale and mapped back with span ** a: beyond these
            # limits that power overflows (or underflows to 0) in float64
            raise DataError(
                f"label range [{self.lo:g}, {self.hi:g}] is outside what the moments can represent (span and "
                f"values between {SPAN_LIMITS[0]:g} and {SPAN_LIMITS[1]:g}): rescale the label (express it in a "
                "unit in which its range spans between those) or declare a label range within them"
            )

    @property
    def span(self) -> float:
        return self.hi - self.lo

    @classmethod
    def observed(cls, y: np.ndarray) -> LabelScale:
        return cls.from_observed(float(np.min(y)), float(np.max(y)))

    @classmethod
    def from_observed(cls, lo, hi) -> LabelScale:
        """The scale of the label's observed extremes (the Dask engine has them from its partitions' summaries)."""
        if not hi > lo:
            raise DataError(f"the label is constant ({lo}); there is nothing to calibrate")
        return cls(lo, hi, "observed")

    @classmethod
    def declared(cls, label_range) -> LabelScale:
        """The scale of a label range the user gave (``label_range``: LO, HI)."""
        try:
            lo, hi = (float(v) for v in label_range)
        except (TypeError, ValueError):
            raise MMCError(f"label range must be two numbers LO,HI, got {label_range!r}") from None
        return cls(lo, hi, "declared")

    def to_unit(self, y: np.ndarray, what: str = "label", tol: float = 1e-9) -> np.ndarray:
        """Map into [0, 1]; values outside the range by more than ``tol`` (relative) are an error."""
        u = (np.asarray(y, dtype=float) - self.lo) / self.span
        bad = (u < -tol) | (u > 1 + tol)
        if np.any(bad):
            k = int(bad.sum())
            vals = np.asarray(y, dtype=float)[bad]
            raise DataError(
                f"{k} {what} value(s) lie outside the label range [{self.lo:g}, {self.hi:g}] "
                f"(min {vals.min():g}, max {vals.max():g}); widen --label-range or fix the data"
            )
        return np.clip(u, 0.0, 1.0)

    def mean_from_unit(self, u: np.ndarray) -> np.ndarray:
        return self.lo + self.span * np.asarray(u, dtype=float)

    def moment_from_unit(self, u: np.ndarray, a: int) -> np.ndarray:
        return np.asarray(u, dtype=float) * self.span**a

    def moment_to_unit(self, v: np.ndarray, a: int) -> np.ndarray:
        return np.asarray(v, dtype=float) / self.span**a

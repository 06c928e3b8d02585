"""Teaching mode's words: one paragraph on what the last step of a :class:`app.ui.teaching_figs.Lesson` did (the
figures of the same step are in :mod:`app.ui.teaching_figs`). No Streamlit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from app.ui.teaching_figs import Lesson

__all__ = ["describe"]


def describe(ev: dict | None, lesson: Lesson, units: str = "points") -> str:
    """One paragraph, in words, of what the last step did."""
    if ev is None:
        return (
            "Nothing has happened yet. Each **Step** draws a fresh sample of "
            f"{lesson.config.n:,} rows and asks the auditor whether some cell is miscalibrated."
        )
    c = lesson.config
    m = c.m
    width = 100 / m
    kind = ev["kind"]
    if kind == "converged":
        # β bounds a cell's variance error times its mass, on the [0, 1] scale: at teaching sizes that is about
        # as large as the variances themselves, so "converged" can leave them off by a factor of 3-4 (a browser
        # session); say so, in the page's units
        v_true = float(np.sum(lesson.prob * lesson.true_var)) * 100**2
        return (
            "**Converged.** On a fresh sample no cell of any group fails the auditor's test: the mean is "
            f"α = {c.alpha:g}-multicalibrated and the variance β-calibrated within every (group, mean bucket, "
            "variance bucket) cell, up to the finite-sample slack of Section 4. Both are *mass-weighted* bounds "
            f"on the [0, 1] scale: β = {c.beta:g} allows a variance error of {c.beta * 100**2:,.0f} {units}² in a "
            f"cell holding all rows, and more in smaller cells, while the true variances average "
            f"{v_true:,.0f} {units}². So the predicted variances may still be far from their targets: lower β "
            "to make them match (the paper's bound on the number of steps grows as 1/β²)."
        )
    if kind == "moment_pass":
        return (
            f"**Variance passes.** On {c.n:,} fresh rows no (mean bucket, variance bucket) cell of any group "
            f"fails the β = {c.beta:g} test for the variance: back to auditing the mean."
        )
    cells = ev["cells"]
    d = ev["deltas"]
    if kind == "mean_update":
        where = ", ".join(
            f"μ ∈ [{i * width:.0f}; {(i + 1) * width:.0f})" + ("" if j is None else f" × m₂ bucket {j}")
            for i, j in cells
        )
        direction = "down" if d[0] > 0 else "up"
        return (
            f"**Mean update.** The auditor flagged group **{ev['group']}** on {len(cells)} cell(s) ({where}): "
            f"there the predicted mean is off by more than α = {c.alpha:g} (mass-weighted, on a fresh sample of "
            f"{c.n:,} rows). The update moves μ {direction} by α·100 = {abs(d[0]) * 100:g} {units} on those rows "
            "(the paper's step). The variance is then re-fitted."
        )
    where = ", ".join(f"(μ bucket {i}, m₂ bucket {j})" for i, j in cells)
    direction = "down" if d[0] > 0 else "up"
    return (
        f"**Variance update.** In group **{ev['group']}**, cell(s) {where} fail the β = {c.beta:g} test for the "
        f"pseudo-variance (y − μ(x))². The update moves m₂ {direction} by β·100² = {abs(d[0]) * 1e4:g} {units}² there."
    )

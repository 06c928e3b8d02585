"""Threshold fitters of the ``calibrated`` interval that mmc_core does not offer: the benchmarks compare them
with mmc_core's ``cc`` (benchmarks/coverage_protocol.py ``--approaches``, benchmarks/calibration_time.py).

``ridge-cqr`` (:func:`fit_two_sided`, mmc_core's default before ``cc``): per side a ridge-penalized
group-additive quantile regression (groups borrow strength from the pooled fit), a weak penalty for the groups
whose cross-fitted miss rate is significantly too high, a conformal shift from the cross-fitted scores (CQR) at
the level 1 - delta + MARGIN_Z sqrt(delta (1 - delta) / n), and a final patch after which every group's coverage
on the calibration rows is at least that level minus Z_UNDER binomial standard errors. Narrower than ``cc`` and
with an average coverage nearer 1 - delta, but no per-group margin: more groups under-covered
(benchmarks/README.md).

The symmetric approaches of :func:`fit_threshold` (thresholds on |u|): ``gcp``, a multicalibrated threshold by
significance-gated coordinate steps; ``gcp-cv``, ``gcp`` with a cross-validated margin; ``mondrian-std``;
``mondrian-relaxed``.

Use them through the ``fitter`` hook of :func:`mmc_core.intervals.calibrate`::

    from benchmarks.interval_fitters import fit_approach
    model.extras["intervals"] = iv.calibrate(model, table_cal, y_cal, base_cal, approach="gcp", fitter=fit_approach)

The records they write keep the format mmc_core predicts from (``combine`` "sum" or "max", ``theta_lower``
for ridge-cqr), so a model calibrated here, or saved by an older mmc-audit that offered these approaches,
loads and predicts with mmc_core alone.
"""

from __future__ import annotations

import numpy as np

from mmc_core.common.errors import MMCError

from .ridge_cqr import fit_two_sided
from .symmetric import SYMMETRIC_APPROACHES, fit_threshold

APPROACHES = ("ridge-cqr", *SYMMETRIC_APPROACHES)

__all__ = ["APPROACHES", "fit_approach", "fit_threshold", "fit_two_sided"]


def fit_approach(approach: str, memb, u: np.ndarray, deltas, **options):
    """The ``fitter`` of :func:`mmc_core.intervals.calibrate` for the approaches of this package.

    ``approach``: one of ``APPROACHES``; ``memb``: the calibration rows' group membership; ``u``: their
    standardized signed scores; ``deltas``: the grid of miscoverages; ``options``: the approach's keyword
    options. Returns ``(theta, theta_lower, combine, unconverged)``: (len(deltas), G) per-group coefficients,
    the lower side's (None for the symmetric approaches, whose interval is u in [-q(x), q(x)]), "sum" or
    "max", and the deltas whose fit did not converge.
    """
    if approach == "ridge-cqr":
        up, lo, info = fit_two_sided(memb, u, deltas, return_info=True, **options)
        return up, lo, "sum", info["unconverged"]
    if approach not in SYMMETRIC_APPROACHES:
        raise MMCError(f"unknown threshold approach {approach!r}; expected cc or one of {', '.join(APPROACHES)}")
    s = np.abs(u)
    thetas, combine, unconverged = [], "sum", []
    for d in deltas:
        th, combine, info = fit_threshold(memb, s, float(d), approach, return_info=True, **options)
        thetas.append(th)
        if not info["converged"]:
            unconverged.append(float(d))
    return np.vstack(thetas), None, combine, unconverged

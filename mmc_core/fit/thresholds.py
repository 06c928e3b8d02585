"""The threshold rules ("auto": just above the sampling noise of a 5%-mass cell; "se": the per-cell standard-error
test and its Bonferroni critical values) and the rule names the parameters take, used by the estimator, the
discovery auditor and the dashboard's threshold preview. The parameters themselves are checked in
:mod:`mmc_core.fit.parameters`."""

from __future__ import annotations

import numbers

import numpy as np

from ..common.errors import MMCError

MEAN_BUCKET_RULES = ("quantile", "uniform")
MOMENT_BUCKET_RULES = ("data", "range")
AUTO_BUCKETS = (5, 10, 20)  # n_buckets="auto": candidates, chosen on the held-out rows
SE_MIN_COUNT = 20  # the "se" rule never corrects a cell of fewer fitting rows
SE_GROUP_LEVEL = 0.1  # "se" rule, whole-group mean cells: family-wise level (Bonferroni over the groups)
# "se" rule, whole-group cells of a moment: the critical value, capped at the mean's Bonferroni z_group (so
# z_group), when no moments' cell step follows the descent (no held-out rows, or shrunken_cells=False); with
# one, NO_GROUP_MOMENT_Z: whole groups' moments are the cell step's (mmc_core.fit.cells.gated_moment_cells). At
# |t| >= 1 (until 2026-12-05) the descent followed each group's noisy sample moment: in a world where every
# group has the same spread it put the worst group 7.6% off (the pooled constant: 0.1%) (benchmarks/README.md,
# "Moment cells")
SE_GROUP_MOMENT_Z = 10.0
NO_GROUP_MOMENT_Z = 100.0  # |t| >= 100: no whole-group moment step in the descent
# "se" rule, moment cells: the per-row variance of a cell's moment residual is taken as at least this share of
# the pooled variance of the moment's pseudo-labels (DescentParams.moment_var_floors)
MOMENT_VAR_FLOOR_SHARE = 1.0
SE_MOMENT_SHRINK = 1.0  # "se" rule: a whole group's moment step is shrunk by 1 - this / t^2 (DescentParams)
GROUP_Z_RULES = ("bonferroni",)  # mean_group_z: the rule names; a number >= 1 is also accepted
SE_LEVEL = 0.1  # "se" rule, finer cells: family-wise level (Bonferroni over every audited cell)
THRESHOLD_RULES = ("se", "auto")
FLOOR_MASS = 0.01  # groups of at least this share of the fitting rows set the span of the moment grid


def check_unit_interval(name: str, v, open_right: bool = True):
    if not isinstance(v, numbers.Real) or isinstance(v, bool) or not np.isfinite(float(v)) or not 0 < float(v) < 1:
        raise MMCError(f"{name} must be a number strictly between 0 and 1, got {v!r}")


def effective_rule(rule, step: str) -> str:
    """The threshold rule a fit actually applies for a parameter given as ``rule`` (alpha or beta): "se" is the
    per-cell test of the exact step, so with the paper's step it falls back to the "auto" noise rule; a number
    is "given". What the model's info, the summaries and the report name."""
    if not isinstance(rule, str):
        return "given"
    return "auto" if rule == "se" and step != "exact" else rule


def check_seed(seed, name: str = "random_state"):
    """A seed numpy's ``default_rng`` takes: None, a non-negative integer, or a numpy Generator / SeedSequence /
    BitGenerator; anything else (a negative number, a bool, text) is an MMCError naming ``name``."""
    if seed is None or isinstance(seed, (np.random.Generator, np.random.SeedSequence, np.random.BitGenerator)):
        return seed
    if isinstance(seed, numbers.Integral) and not isinstance(seed, (bool, np.bool_)) and int(seed) >= 0:
        return seed
    raise MMCError(f"{name} must be a non-negative integer (or None), got {seed!r}")


AUTO_REFERENCE_MASS = 0.05
AUTO_LEVEL = 0.1


def auto_threshold(spread: float, n_cells: int, n: int) -> float:
    """The "auto" alpha / beta: the smallest threshold at which a cell holding 5% of the rows, with no real
    error, would still not be flagged by sampling noise alone (Gaussian tail with a Bonferroni correction
    over all audited cells at level 0.1). Reusing one sample for every audit overfits when alpha is below
    this noise level (measured on the wage demo data: held-out squared error +37% at alpha = 0.001)."""
    z = np.sqrt(2.0 * np.log(2.0 * max(n_cells, 1) / AUTO_LEVEL))
    return float(np.clip(z * spread * np.sqrt(AUTO_REFERENCE_MASS / max(n, 1)), 1e-5, 0.05))


def bonferroni_z(n_tests: int, level: float = AUTO_LEVEL) -> float:
    """z with P(|N(0,1)| >= z) = level / n_tests: the two-sided Bonferroni critical value."""
    from statistics import NormalDist

    return float(NormalDist().inv_cdf(1.0 - level / (2.0 * max(int(n_tests), 1))))

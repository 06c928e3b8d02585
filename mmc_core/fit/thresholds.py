"""The estimator's parameter rules: validation of its settings, and the threshold rules ("auto": just above the
sampling noise of a 5%-mass cell; "se": the per-cell standard-error test and its Bonferroni critical values).
One place for both, used by the estimator, the discovery auditor and the dashboard's threshold preview."""

from __future__ import annotations

import numbers

import numpy as np

from ..common.errors import MMCError
from ..paper.descent_params import STEP_RULES
from ..paper.moments import MomentKind

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


# the estimator's parameters validate_params checks, in its order of arguments
VALIDATED_PARAMS = (
    "alpha",
    "beta",
    "n_buckets",
    "n_moments",
    "step",
    "odd_moments",
    "calibration_fraction",
    "max_rounds",
    "mean_buckets",
    "moment_buckets",
    "early_stopping",
)


def validate_estimator_params(est) -> None:
    """:func:`validate_params` on an estimator's own values (the in-memory fit, the Dask fit and the command line
    check the same parameters, in one place): an MMCError naming the first bad one."""
    validate_params(*(getattr(est, k) for k in VALIDATED_PARAMS))


def validate_params(
    alpha,
    beta,
    n_buckets,
    n_moments,
    step,
    odd_moments,
    calibration_fraction,
    max_rounds,
    mean_buckets,
    moment_buckets,
    early_stopping,
):
    """Check the estimator's parameters; raise MMCError naming the parameter as Python spells it (the command
    line names its flags instead: ``app.cli.common.estimator_from_args``). No defaults: the estimator's are the only
    ones."""
    for name, v in (("alpha", alpha), ("beta", beta)):
        if isinstance(v, str):
            if v not in THRESHOLD_RULES:
                raise MMCError(f"{name} must be a number in (0, 1), 'se' or 'auto', got {v!r}")
        else:
            check_unit_interval(name, v)
    if not (isinstance(n_buckets, str) and n_buckets == "auto") and (
        not isinstance(n_buckets, numbers.Integral) or isinstance(n_buckets, bool) or not 1 <= n_buckets <= 1000
    ):
        raise MMCError(f"n_buckets must be an integer from 1 to 1000 or 'auto', got {n_buckets!r}")
    if mean_buckets not in MEAN_BUCKET_RULES:
        raise MMCError(f"mean_buckets must be one of {', '.join(MEAN_BUCKET_RULES)}, got {mean_buckets!r}")
    if moment_buckets not in MOMENT_BUCKET_RULES:
        raise MMCError(f"moment_buckets must be one of {', '.join(MOMENT_BUCKET_RULES)}, got {moment_buckets!r}")
    if not (isinstance(early_stopping, bool) or (isinstance(early_stopping, str) and early_stopping == "auto")):
        raise MMCError(f"early_stopping must be True, False or 'auto', got {early_stopping!r}")
    if not isinstance(n_moments, numbers.Integral) or isinstance(n_moments, bool) or not 1 <= n_moments <= 8:
        raise MMCError(f"n_moments must be an integer from 1 (mean only) to 8, got {n_moments!r}")
    if step not in STEP_RULES:
        raise MMCError(f"step must be one of {', '.join(STEP_RULES)}, got {step!r}")
    if odd_moments not in MomentKind.ALL:
        raise MMCError(f"odd_moments must be one of {', '.join(MomentKind.ALL)}, got {odd_moments!r}")
    if not isinstance(calibration_fraction, numbers.Real) or not 0 <= calibration_fraction < 1:
        raise MMCError(f"calibration_fraction must be in [0, 1), got {calibration_fraction!r}")
    if max_rounds is not None and (not isinstance(max_rounds, numbers.Integral) or max_rounds < 0):
        raise MMCError(f"max_rounds must be a non-negative integer or None, got {max_rounds!r}")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not isinstance(v, str) and v < 1e-6:
            raise MMCError(f"{name} must be at least 1e-6, got {v!r}")

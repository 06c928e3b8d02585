"""The public estimator: scikit-learn style fit / predict over tables, labels and groups."""
from __future__ import annotations

import dataclasses
import numbers
import time

import inspect

import numpy as np

from .buckets import fill_edges, geometric_edges, quantile_edges
from .descent import STEP_RULES, CellState, DescentParams, descend
from .errors import DataError, MMCError
from .groups import GroupSet
from .model import FittedModel
from .moments import LabelScale, MomentKind, pseudo_label

__all__ = ["MomentMulticalibrator", "validate_params", "to_label_array", "auto_threshold", "bonferroni_z",
           "MEAN_BUCKET_RULES", "MOMENT_BUCKET_RULES", "AUTO_BUCKETS"]

MEAN_BUCKET_RULES = ("quantile", "uniform")
MOMENT_BUCKET_RULES = ("data", "range")
AUTO_BUCKETS = (5, 10, 20)  # n_buckets="auto": candidates, chosen on the held-out rows
SE_MIN_COUNT = 20  # the "se" rule never corrects a cell of fewer fitting rows
SE_GROUP_LEVEL = 0.1  # "se" rule, whole-group mean cells: family-wise level (Bonferroni over the groups)
SE_GROUP_MOMENT_Z = 2.0  # "se" rule, whole-group cells of a moment: see _build_params
GROUP_Z_RULES = ("bonferroni",)  # mean_group_z: the rule names; a number >= 1 is also accepted
SE_LEVEL = 0.1  # "se" rule, finer cells: family-wise level (Bonferroni over every audited cell)
THRESHOLD_RULES = ("se", "auto")
FLOOR_MASS = 0.01  # groups of at least this share of the fitting rows set the span of the moment grid


def _check_unit_interval(name: str, v, open_right: bool = True):
    if not isinstance(v, numbers.Real) or isinstance(v, bool) or not np.isfinite(v) or not 0 < v < 1:
        raise MMCError(f"{name} must be a number strictly between 0 and 1, got {v!r}")


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


def validate_params(alpha, beta, n_buckets, n_moments, step, odd_moments, calibration_fraction, max_rounds=None,
                    mean_buckets="quantile", moment_buckets="data", early_stopping="auto"):
    """Check the estimator's parameters; raise MMCError naming the parameter."""
    for name, v in (("alpha", alpha), ("beta", beta)):
        if isinstance(v, str):
            if v not in THRESHOLD_RULES:
                raise MMCError(f"{name} must be a number in (0, 1), 'se' or 'auto', got {v!r}")
        else:
            _check_unit_interval(name, v)
    if not (isinstance(n_buckets, str) and n_buckets == "auto") and (
            not isinstance(n_buckets, numbers.Integral) or isinstance(n_buckets, bool) or not 1 <= n_buckets <= 1000):
        raise MMCError(f"buckets must be an integer from 1 to 1000 or 'auto', got {n_buckets!r}")
    if mean_buckets not in MEAN_BUCKET_RULES:
        raise MMCError(f"mean_buckets must be one of {', '.join(MEAN_BUCKET_RULES)}, got {mean_buckets!r}")
    if moment_buckets not in MOMENT_BUCKET_RULES:
        raise MMCError(f"moment_buckets must be one of {', '.join(MOMENT_BUCKET_RULES)}, got {moment_buckets!r}")
    if not (isinstance(early_stopping, bool) or (isinstance(early_stopping, str) and early_stopping == "auto")):
        raise MMCError(f"early_stopping must be True, False or 'auto', got {early_stopping!r}")
    if not isinstance(n_moments, numbers.Integral) or isinstance(n_moments, bool) or not 1 <= n_moments <= 8:
        raise MMCError(f"moments must be an integer from 1 (mean only) to 8, got {n_moments!r}")
    if step not in STEP_RULES:
        raise MMCError(f"step must be one of {', '.join(STEP_RULES)}, got {step!r}")
    if odd_moments not in MomentKind.ALL:
        raise MMCError(f"odd_moments must be one of {', '.join(MomentKind.ALL)}, got {odd_moments!r}")
    if not isinstance(calibration_fraction, numbers.Real) or not 0 <= calibration_fraction < 1:
        raise MMCError(f"calibration fraction must be in [0, 1), got {calibration_fraction!r}")
    if max_rounds is not None and (not isinstance(max_rounds, numbers.Integral) or max_rounds < 0):
        raise MMCError(f"max_rounds must be a non-negative integer or None, got {max_rounds!r}")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not isinstance(v, str) and v < 1e-6:
            raise MMCError(f"{name} must be at least 1e-6, got {v!r}")


def to_label_array(values, name: str, n: int | None = None) -> np.ndarray:
    """A finite float vector, or a DataError naming ``name``."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise DataError(f"{name} must be numeric (found non-numeric values)") from None
    if arr.ndim != 1:
        raise DataError(f"{name} must be one column, got shape {arr.shape}")
    if n is not None and arr.size != n:
        raise DataError(f"{name} has {arr.size} values for {n} rows")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise DataError(f"{name} has {int(bad.sum())} missing or infinite value(s) (first at row {int(np.flatnonzero(bad)[0])})")
    return arr


def as_table(X):
    """A table the estimator reads by column name: DataFrames (anything with ``columns``) and dicts of columns
    pass unchanged; a 2-D numpy array becomes columns ``x0``, ``x1``, ... (so groups can name them)."""
    if hasattr(X, "columns") or isinstance(X, dict):
        return X
    if isinstance(X, np.ndarray):
        if X.ndim != 2:
            raise DataError(f"X must be a table (DataFrame, dict of columns or 2-D array), got a {X.ndim}-D array")
        return {f"x{j}": X[:, j] for j in range(X.shape[1])}
    raise DataError(f"X must be a pandas DataFrame, a dict of columns or a 2-D numpy array, got {type(X).__name__}")


def _n_rows(X) -> int:
    if hasattr(X, "shape"):
        return int(X.shape[0])
    if not X:
        raise DataError("X has no columns: pass the table with at least the columns the groups refer to")
    return len(next(iter(X.values())))


def _take(X, idx):
    """Rows ``idx`` of a DataFrame or a dict of columns, as a dict of numpy columns."""
    if hasattr(X, "iloc"):
        return {c: X[c].to_numpy()[idx] for c in X.columns}
    return {c: np.asarray(v)[idx] for c, v in X.items()}


class SklearnParams:
    """scikit-learn's parameter protocol without importing scikit-learn (mmc_core stays numpy-only):
    ``get_params`` / ``set_params`` read the constructor's signature, so ``sklearn.base.clone``, grid searches
    and pipelines treat the estimator as one of theirs; the repr lists the parameters that differ from the
    defaults, as scikit-learn's does."""

    @classmethod
    def _param_names(cls) -> list:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind == p.POSITIONAL_OR_KEYWORD]

    def get_params(self, deep: bool = True) -> dict:
        """Constructor parameters, exactly as given (``deep`` is accepted for scikit-learn; nothing is nested)."""
        return {k: getattr(self, k) for k in self._param_names()}

    def set_params(self, **params):
        """Set constructor parameters; an unknown name is an MMCError naming the valid ones."""
        valid = self._param_names()
        for k in params:
            if k not in valid:
                raise MMCError(f"unknown parameter {k!r}; valid: {', '.join(valid)}")
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def __sklearn_tags__(self):
        """scikit-learn >= 1.6 asks every estimator for its tags; only scikit-learn calls this, so the import is
        free here: a regressor-like post-processor that takes a 2-D table with missing values and strings."""
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(estimator_type="regressor", target_tags=TargetTags(required=True), transformer_tags=None,
                    classifier_tags=None, regressor_tags=RegressorTags(),
                    input_tags=InputTags(two_d_array=True, allow_nan=True, string=True, categorical=True,
                                         dict=True))

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__)
        changed = []
        for k, v in self.get_params().items():
            d = sig.parameters[k].default
            same = v is d or (type(v) is type(d) and v == d)
            if not same:
                changed.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


def _json_params(params: dict) -> dict:
    """Constructor parameters as JSON values (tuples as lists, numpy scalars as numbers); a value JSON cannot
    hold (e.g. a numpy Generator as random_state) is left out, and loading then uses the default."""
    out = {}
    for k, v in params.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, tuple):
            v = [x.item() if isinstance(x, np.generic) else x for x in v]
        if v is None or isinstance(v, (bool, int, float, str)) or (
                isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)):
            out[k] = v
    return out


def _achieved(params: DescentParams, memb, y, mu, moms) -> dict:
    """The smallest (alpha, beta_a) the predictions satisfy on these rows: just above the largest mass-weighted
    |residual| over the paper's cells G(mu, i), G(mu, m_a, i, j) (mean) and G(mu, m_a, i, j) (moment a)."""
    plain = dataclasses.replace(params, z=0.0, z_group=0.0, min_count=0)
    st = CellState(plain, memb, y, mu, moms)
    n = max(st.n, 1)

    def up(v):
        return float(min(max(v * (1 + 1e-9) + 1e-15, 1e-7), 0.999))

    worst = max([np.abs(st.S0).max(initial=0.0)] + [np.abs(st.SA[a]).max(initial=0.0) for a in params.moments])
    return {"alpha": up(worst / n), "betas": {a: up(np.abs(st.TA[a]).max(initial=0.0) / n) for a in params.moments}}


TASKS = ("auto", "regression", "binary")
TASK_BINARY = "binary"


def resolve_task(y, task="auto", positive_label=None, label_name: str = "label"):
    """(task, y, binary_info): the task a label is fitted as, the label (0/1 floats for "binary", unchanged
    otherwise) and, for "binary", {"classes": [negative, positive], "positive": positive} (JSON-safe)."""
    from .binary import as_binary, is_binary

    if task not in TASKS:
        raise MMCError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    name = f"label '{label_name}'"
    if task == "regression":
        if positive_label is not None:
            raise MMCError("positive_label is only used with a binary label (task 'binary' or 'auto')")
        return task, y, None
    arr = y.to_numpy() if hasattr(y, "to_numpy") else np.asarray(y)
    if task == "auto":
        if arr.dtype.kind in "iuf":  # numbers: an O(n) check (a regression label must stay cheap to look at)
            v = arr.ravel()
            v = v[~np.isnan(v)] if arr.dtype.kind == "f" else v
            rest = v[v != v[0]] if v.size else v
            binary = rest.size > 0 and bool(np.all(rest == rest[0]))
        else:
            try:
                binary = is_binary(arr)
            except TypeError:
                binary = False
        if not binary:
            if positive_label is not None:
                raise DataError(f"positive_label={positive_label!r} was given but {name} is not binary "
                                "(it does not have exactly two distinct values)")
            return "regression", y, None
    y01, info = as_binary(arr, positive_label, name)
    return TASK_BINARY, y01, {"classes": [_plain(v) for v in info["classes"]], "positive": _plain(info["positive"])}


def _plain(v):
    """A JSON-safe scalar (numpy scalars to Python ones)."""
    if isinstance(v, np.generic):
        return v.item()
    return v


class FitStats:
    """The figures the thresholds, grids and floors are chosen from (see ``_build_params``), from in-memory
    arrays. The Dask engine computes the same figures by reductions over partitions."""

    def __init__(self, resid, mu0, memb, moments, odd_moments):
        self.resid, self.mu0, self.memb, self.odd = resid, mu0, memb, odd_moments
        self.resid_std = float(np.std(resid))
        self.sizes = memb.sizes
        self._labels = {}

    @classmethod
    def from_arrays(cls, resid, mu0, memb, moments, odd_moments) -> "FitStats":
        return cls(resid, mu0, memb, moments, odd_moments)

    def _label(self, a):
        if a not in self._labels:
            self._labels[a] = pseudo_label(a, self.resid, self.odd)
        return self._labels[a]

    def label_std(self, a) -> float:
        return float(np.std(self._label(a)))

    def label_mean(self, a) -> float:
        return float(np.mean(self._label(a)))

    def group_label_sums(self, a) -> np.ndarray:
        return np.bincount(self.memb.pair_groups(), weights=self._label(a)[self.memb.rows],
                           minlength=self.memb.n_groups)

    def mean_quantile_edges(self, m) -> tuple:
        return quantile_edges(self.mu0, m)


def _best_round(history: list) -> int:
    """The round with the lowest held-out squared error of the mean (the earliest on ties)."""
    return int(np.argmin([h.get("holdout_mse", np.inf) for h in history])) if history else 0


class MomentMulticalibrator(SklearnParams):
    """Mean and higher-central-moment predictors that are multicalibrated on every group.

    Implements AlternatingGradientDescent of Jung, Lee, Pai, Roth, Vohra, "Moment Multicalibration for
    Uncertainty Estimation", on a (practical-mode) sample: at termination the mean predictor is
    alpha-multicalibrated and each (mean, a-th moment) pair is (alpha, beta + a alpha, a/m)
    mean-conditioned moment multicalibrated on the fitting rows.

    Parameters
    ----------
    alpha, beta : float in (0, 1), "se" or "auto"
        Mass-weighted violation thresholds: a cell S is violated when P(S) |mean residual over S| >= alpha
        (mean) or >= beta (pseudo-moment). The guarantee on S is an error of at most alpha / P(S).

        * "se" (the default, exact step): a cell is corrected only when, besides passing a small
          mass-weighted floor, its residual is at least z of *its own* standard errors from 0 and it has
          >= 20 fitting rows; z is the two-sided Bonferroni critical value at family-wise level 0.1 over every
          audited cell (about 4 for a few hundred groups). Whole groups are audited too: for the mean at
          family-wise level 0.1 over the groups (``mean_group_z``), for every moment at z = 2 (a ratio step to
          the group's own moment moves a correct group by only about one standard error). After fitting, ``alpha_`` /
          ``beta_`` (and the saved params) are the values the kept model *achieves* on the fitting rows:
          every cell of the paper's partitions has mass-weighted |residual| below them, so the paper's
          theorems (and the guaranteed intervals) hold with them exactly on the fitting rows. The thresholds
          the descent used are in ``model_.info["thresholds_used"]`` and ``z_``.
        * "auto": one threshold per predictor just above the sampling-noise level of a 5%-mass cell (see
          :func:`auto_threshold`; the rule of model format 1).
        * a number: the paper's fixed threshold.
    n_buckets : int or "auto"
        m, the number of level sets of each predictor. "auto" fits with 5, 10 and 20 and keeps the one with
        the lowest held-out squared error (needs calibration_fraction > 0).
    n_moments : int
        k: central moments 2..k are fitted; 1 fits the mean only (plain multicalibration).
    step : {"exact", "paper"}
        "paper": eta = alpha (beta) as in the paper; "exact": shift each violating cell by its mean residual.
    odd_moments : {"absolute", "signed"}
        Odd moments as E|y - mu|^a (usable for intervals) or E(y - mu)^a.
    label_range : (lo, hi) or None
        The label's range; None uses the observed min / max of the fitting labels (recorded as "observed").
    calibration_fraction : float in [0, 1)
        Share of rows held out of the descent (seeded; default 0.25, as ``mmc fit``). They track held-out
        violations during fitting, choose the kept round (early stopping) and m ("auto"), and calibrate the
        data-driven intervals (``mmc_core.intervals``); 0 fits on every row and leaves those intervals
        unavailable.
    early_stopping : bool or "auto"
        Keep the round with the lowest held-out squared error of the mean instead of the last one; "auto"
        (default): on whenever calibration_fraction > 0. The model records the kept round (``info``:
        ``kept_round``, ``early_stopped``); ``converged_`` says whether the descent itself ran to the end.
    max_rounds : int or None
        Optional cap on mean rounds; a capped run reports ``converged_ = False``.
    random_state : int
        Seed of the calibration split.
    mean_buckets : {"uniform", "quantile"}
        "uniform" (default): m equal buckets of [0, 1]. "quantile": bucket edges at the quantiles of the
        initial (base) mean prediction on the fitting rows, fixed before the descent and stored in the model
        (finer where the predictions are dense). The guarantees hold for any fixed partition; the eps = a w
        of the mean-conditioned moment lemma then uses the widest bucket, ``params.mean_grid.max_width``.
    task : {"auto", "regression", "binary"}
        "auto" (default): a label with exactly two distinct values (0/1, True/False, or two other values with
        ``positive_label`` naming the positive class) is fitted as a classifier ("binary"), anything else as a
        regression. "binary": the label is a 0/1 outcome and the mean is a probability: the scale is [0, 1],
        only the mean is fitted (the conditional variance of a 0/1 outcome is p (1 - p) once p is right, so
        ``n_moments`` must be 1 or its default 2, which is then treated as 1), predictions lie in [0, 1], a
        base prediction is a probability score, and no prediction intervals are offered (an interval for a
        0/1 outcome is {0}, {1} or {0, 1}; the per-group classifier audit of ``mmc_core.metrics.audit``
        replaces them). "regression": never switch (a 0/1 label is then an ordinary number).
    positive_label : optional
        The positive class of a binary label whose values are not 0/1 or True/False (e.g. "yes").
    moment_buckets : {"data", "range"}
        "data" (default): moment buckets evenly spaced on a log scale over the range of the groups' average
        pseudo-moments on the fitting rows (widened 1.5x), moment predictions kept at or above a floor > 0
        and, with the exact step, moment updates multiplicative (each violated cell's predictions scaled by
        mean target / mean prediction: the cell's residual becomes 0 as with the additive exact step, and
        predictions stay positive). "range": equal buckets over the moment's attainable range, additive
        steps, projection onto [0, hi] (format 1).
    mean_group_z : "bonferroni" or float >= 1
        With the "se" rule: the critical value for whole groups of the mean. "bonferroni" (default): family-wise
        level 0.1 over the whole-group cells (about 3-3.5). A number (e.g. 2): that z, so a group-level bias the
        fit's own bucket corrections create (issue 10) is corrected once it is that many standard errors from 0.
    """

    def __init__(self, alpha="se", beta="se", n_buckets=5, n_moments=2, step="exact",
                 odd_moments="absolute", label_range=None, calibration_fraction=0.25,
                 early_stopping="auto", max_rounds=None, random_state=0, mean_buckets="uniform",
                 moment_buckets="data", mean_group_z="bonferroni", task="auto", positive_label=None):
        self.alpha = alpha
        self.beta = beta
        self.n_buckets = n_buckets
        self.n_moments = n_moments
        self.step = step
        self.odd_moments = odd_moments
        self.label_range = label_range
        self.calibration_fraction = calibration_fraction
        self.early_stopping = early_stopping
        self.max_rounds = max_rounds
        self.random_state = random_state
        self.mean_buckets = mean_buckets
        self.moment_buckets = moment_buckets
        self.mean_group_z = mean_group_z
        self.task = task
        self.positive_label = positive_label


    # ------------------------------------------------------------------------------------------
    def _params(self, alpha: float, beta: float, moments: tuple, moment_betas: tuple = (), m: int | None = None,
                **extra) -> DescentParams:
        return DescentParams(float(alpha), float(beta), int(self.n_buckets if m is None else m), tuple(moments),
                             self.step, self.odd_moments, None if self.max_rounds is None else int(self.max_rounds),
                             moment_betas, **extra)

    def _build_params(self, m: int, G: int, nf: int, moments: tuple, resid: np.ndarray, mu0: np.ndarray, memb,
                      stats=None):
        """Thresholds, grids and floors for m buckets, all chosen from the fitting rows before the descent.

        * alpha / beta "auto" (exact step): a cell is corrected only when its residual is at least z of *its
          own* standard errors from 0, z = the Bonferroni critical value at level 0.1 over all audited cells,
          and it has >= 20 rows; alpha_ / beta_a are then the mass-weighted floor such a cell must also pass.
          With the paper step (or given numbers), the plain mass-weighted thresholds of format 1.
        * mean_buckets "quantile": mean buckets at the quantiles of the initial mean prediction.
        * moment_buckets "data": moment buckets evenly spaced on a log scale over the range of the groups'
          average pseudo-moments (widened 1.5x each side), and moment predictions kept >= a floor > 0.
        """
        K = len(moments)
        if stats is None:  # the numpy engine; the Dask engine passes the same figures computed by reductions
            stats = FitStats.from_arrays(resid, mu0, memb, moments, self.odd_moments)
        se = self.step == "exact" and (self.alpha == "se" or self.beta == "se")
        # finer cells: family-wise level 0.1 (Bonferroni) over every audited cell; whole groups of the mean:
        # family-wise level 0.1 too. (A per-family error rate of 1 was tried: in the null world -- the base IS
        # the true mean -- it shifted a correct base by 0.2-0.45 label points in 3 of 10 seeds, each shift
        # then found by the audit on fresh rows.) Whole groups of a moment: see z_group_moment below.
        z = bonferroni_z(G * m * (1 + 2 * K * m), SE_LEVEL) if se else 0.0
        z_group = bonferroni_z(G * (1 + K), SE_GROUP_LEVEL) if se else 0.0
        z_group_moment = min(SE_GROUP_MOMENT_Z, z_group)
        mgz = getattr(self, "mean_group_z", "bonferroni")
        if not (mgz in GROUP_Z_RULES or (isinstance(mgz, numbers.Real) and not isinstance(mgz, bool)
                                          and 1.0 <= float(mgz) <= 10.0)):
            raise MMCError(f"mean_group_z must be 'bonferroni' or a number from 1 to 10, got {mgz!r}")
        if se and mgz not in GROUP_Z_RULES:
            # Whole groups of the mean at a fixed critical value (issue 10, held-out tables): a significant
            # bucket cell corrected on its own moves the means of the groups holding it by the part of their
            # residual the other, not significant, buckets used to cancel; at the Bonferroni z_group that
            # induced group-level bias (often 2-3 se) is left in place. Moments keep their own z_group_moment.
            z_group = float(mgz)
        min_count = SE_MIN_COUNT if se else 0

        def thr(rule, spread, n_cells):
            if rule == "se" and se:
                # the floor: the mass-weighted residual of a min_count-row cell at z standard errors
                return float(np.clip(z * spread * np.sqrt(min_count) / max(nf, 1), 1e-7, 0.05))
            return auto_threshold(spread, n_cells, nf)

        alpha = thr(self.alpha, stats.resid_std, G * m * (1 + K * m)) if isinstance(self.alpha, str) \
            else float(self.alpha)
        moment_betas = ()
        if not isinstance(self.beta, str):
            beta = float(self.beta)
        elif not moments:
            beta = 0.01  # unused: no moments are fitted
        else:
            # each moment on its own scale: a fourth moment's errors are far smaller than a variance's
            per = {a: thr(self.beta, stats.label_std(a), G * m * m) for a in moments}
            beta = per[2]
            moment_betas = tuple((a, b) for a, b in per.items() if a != 2)
        extra = {"z": z, "z_group": z_group, "min_count": min_count}
        if se and moments:
            # A moment's whole-group correction is an exact (ratio) step to the group's own fitting-row moment:
            # when the group was right it only moves the prediction by about one standard error, which no audit
            # can tell from noise; when it was wrong by less than the Bonferroni z_group, leaving it (up to
            # ~30% on a 200-row group) is a defect an audit of fresh rows does find. Hence a per-group z.
            extra["z_group_moment"] = z_group_moment
        if self.moment_buckets == "data" and self.step == "exact" and not (
                self.odd_moments == MomentKind.SIGNED and K >= 2):
            extra["moment_step"] = "ratio"  # positive moments on their own (log) scale
        if self.mean_buckets == "quantile" and m >= 2:
            q = stats.mean_quantile_edges(m)
            extra["mean_edges"] = fill_edges(q, m, 0.0, 1.0) if q else ()
        if self.moment_buckets == "data":
            edges, floors = [], []
            sizes = stats.sizes.astype(float)
            big = sizes >= max(FLOOR_MASS * nf, min_count, 1)
            for a in moments:
                if a % 2 == 1 and self.odd_moments == MomentKind.SIGNED:
                    continue  # signed odd moments take both signs: keep the symmetric range grid
                from .moments import max_central_moment

                r = max_central_moment(a)
                pooled = stats.label_mean(a)
                gsum = stats.group_label_sums(a)
                gm = gsum[big] / sizes[big] if big.any() else np.array([pooled])
                gm = gm[gm > 0]
                low, high = (float(gm.min()), float(gm.max())) if gm.size else (0.0, 0.0)
                if not (low > 0 and high > low * 1.01):
                    low, high = pooled / 3.0, pooled * 3.0
                low, high = low / 1.5, min(high * 1.5, 0.9 * r)
                b_a = beta if a == 2 else dict(moment_betas).get(a, beta)
                floor = min(0.5 * b_a, 1e-3 * low) if low > 0 else 0.5 * b_a
                floors.append((a, float(max(floor, 1e-15))))
                if m >= 2 and 0 < low < high:
                    edges.append((a, geometric_edges(low, high, m)))
            extra["moment_edges"] = tuple(edges)
            extra["moment_floors"] = tuple(floors)
        params = self._params(alpha, beta, moments, moment_betas, m, **extra)
        init_moments = {a: float(np.clip(stats.label_mean(a), *params.projection(a))) for a in moments}
        return params, init_moments

    def fit(self, X, y, groups=None, base_prediction=None, callback=None, label_name: str = "label",
            base_name: str | None = None, stop=None, engine: str | None = None, client=None):
        """Fit on a table.

        Parameters
        ----------
        X : pandas.DataFrame or dict of column -> array, n rows
            Must contain every column the groups refer to.
        y : array of shape (n,)
            Labels in their own units.
        groups : GroupSet, list of group dicts, or None
            The groups to calibrate on (the whole population is always added).
        base_prediction : array of shape (n,) or None
            A base model's mean prediction in label units, used as the initial mean predictor.
        callback : callable(dict) -> bool, optional
            Called after every round with its history row; return True to stop (the model is then marked
            not converged).
        stop : callable() -> bool, optional
            Polled before every single update (moment passes included); True stops at once.
        engine : {"numpy", "dask"} or None
            Where the descent runs. None: "dask" when X is a Dask DataFrame (then ``y`` and
            ``base_prediction`` are column names or Dask Series of it), else "numpy" (in memory). See
            :mod:`mmc_core.engines.dask_engine` for what runs where.
        client : distributed.Client, optional
            The Dask engine's client (default: the current one).

        Returns
        -------
        self
        """
        if engine is not None and engine not in ("numpy", "dask"):
            raise MMCError(f"engine must be 'numpy' or 'dask', got {engine!r}")
        if engine == "dask" or (engine is None and type(X).__module__.split(".")[0] in ("dask", "dask_expr")):
            from .engines.dask_engine import fit_dask  # lazily: importing mmc_core never imports dask

            return fit_dask(self, X, y, groups, base_prediction, callback=callback, label_name=label_name
                            if label_name != "label" else None, base_name=base_name, stop=stop, client=client)
        validate_params(self.alpha, self.beta, self.n_buckets, self.n_moments, self.step,
                        self.odd_moments, self.calibration_fraction, self.max_rounds, self.mean_buckets,
                        self.moment_buckets, self.early_stopping)
        X = as_table(X)
        n = _n_rows(X)
        if n < 2:
            raise DataError(f"need at least 2 rows to fit, got {n}")
        task, y, binary_info = resolve_task(y, self.task, self.positive_label, label_name)
        k = int(self.n_moments)
        if task == TASK_BINARY:
            if self.n_moments not in (1, 2):
                raise MMCError(f"moments={self.n_moments!r}: a binary label is fitted for the mean only (its "
                               "variance is p(1 - p) once the probability p is right); use moments=1")
            if self.label_range is not None and tuple(float(v) for v in self.label_range) != (0.0, 1.0):
                raise MMCError(f"label range {self.label_range!r}: a binary label is a probability on [0, 1] "
                               "(leave label_range unset)")
            k = 1
        y = to_label_array(y, f"label '{label_name}'", n)
        if task == TASK_BINARY:
            scale = LabelScale(0.0, 1.0, "binary")
        elif self.label_range is None:
            scale = LabelScale.observed(y)
        else:
            try:
                lo, hi = (float(v) for v in self.label_range)
            except (TypeError, ValueError):
                raise MMCError(f"label range must be two numbers LO,HI, got {self.label_range!r}") from None
            scale = LabelScale(lo, hi, "declared")
        yu = scale.to_unit(y, f"label '{label_name}'")
        base_u = None
        base_clipped = 0
        if base_prediction is not None:
            bname = f"base prediction '{base_name}'" if base_name else "base prediction"
            base = to_label_array(base_prediction, bname, n)
            # A base model may overshoot the label range a little; the mean predictor lives in the range
            # (the paper projects onto it), so such values are clipped and the count is reported.
            outside = (base < scale.lo) | (base > scale.hi)
            base_clipped = int(outside.sum())
            base_u = scale.to_unit(np.clip(base, scale.lo, scale.hi), bname)
        gset = GroupSet.coerce(groups)

        rng = np.random.default_rng(self.random_state)
        n_cal = int(round(self.calibration_fraction * n))
        if self.calibration_fraction > 0 and (n_cal < 1 or n - n_cal < 2):
            raise DataError(f"calibration fraction {self.calibration_fraction} leaves too few rows (n={n})")
        if self.early_stopping is True and not n_cal:
            raise MMCError("early_stopping needs calibration_fraction > 0 (held-out rows to stop on)")
        early = bool(n_cal) if self.early_stopping == "auto" else bool(self.early_stopping)
        if self.n_buckets == "auto" and not n_cal:
            raise MMCError("buckets 'auto' needs calibration_fraction > 0 (held-out rows to choose on)")
        perm = rng.permutation(n)
        cal_idx = np.sort(perm[:n_cal])
        fit_idx = np.sort(perm[n_cal:]) if n_cal else np.arange(n)
        Xf = _take(X, fit_idx)
        memb = gset.evaluate(Xf, fit_idx.size)
        mu0 = base_u[fit_idx] if base_u is not None else np.full(fit_idx.size, float(np.mean(yu[fit_idx])))
        moments = tuple(range(2, k + 1))
        G, nf = len(gset), fit_idx.size
        resid = yu[fit_idx] - mu0
        memb_h = gset.evaluate(_take(X, cal_idx), n_cal) if n_cal else None
        mu_h = None
        if n_cal:
            mu_h = base_u[cal_idx] if base_u is not None else np.full(n_cal, float(np.mean(yu[fit_idx])))

        candidates = AUTO_BUCKETS if self.n_buckets == "auto" else (int(self.n_buckets),)
        t0 = time.perf_counter()
        runs = []
        for m in candidates:
            params, init_moments = self._build_params(m, G, nf, moments, resid, mu0, memb)
            state = CellState(params, memb, yu[fit_idx], mu0, {a: np.full(nf, v) for a, v in init_moments.items()})
            holdout = None
            if n_cal:
                holdout = CellState(params, memb_h, yu[cal_idx], mu_h,
                                    {a: np.full(n_cal, v) for a, v in init_moments.items()})
            res = descend(params, state, holdout, callback if len(candidates) == 1 else None, stop=stop,
                          keep_best=early)
            kept = _best_round(res.history) if early else len(res.round_ends) - 1
            score = res.history[kept].get("holdout_mse", 0.0) if res.history else 0.0
            runs.append((score, m, params, init_moments, res, kept))
            if res.stopped:
                break
        score, m, params, init_moments, res, kept_round = min(runs, key=lambda r: r[0])
        seconds = time.perf_counter() - t0

        init_mean = {"kind": "base", "column": base_name} if base_u is not None else \
            {"kind": "constant", "value": float(np.mean(yu[fit_idx]))}
        log = res.log[: res.round_ends[kept_round]] if res.round_ends else res.log
        model = FittedModel(params, scale, gset, init_mean, init_moments, list(log),
                            list(res.round_ends[: kept_round + 1]), task=task, binary=binary_info)
        snap = res.extra.get("best")
        if kept_round == len(res.round_ends) - 1:
            fit_mu, fit_moms = res.state.mu.copy(), {a: v.copy() for a, v in res.state.mom.items()}
        elif snap is not None and snap["index"] == kept_round:
            fit_mu, fit_moms = snap["mu"], snap["mom"]
        else:
            fit_mu, fit_moms = model.predict_unit(Xf, mu0 if base_u is not None else None, fit_idx.size)
        achieved = _achieved(params, memb, yu[fit_idx], fit_mu, fit_moms)
        floors = {"alpha": params.alpha, "betas": {str(a): params.beta_for(a) for a in params.moments}}
        if params.z > 0:
            # The "se" rule: report the (alpha, beta) the kept model achieves on the fitting rows, so that the
            # paper's guarantees (and the guaranteed intervals) are stated with values that hold exactly there.
            alpha_a = achieved["alpha"] if self.alpha == "se" else params.alpha
            betas = {a: (achieved["betas"][a] if self.beta == "se" else params.beta_for(a)) for a in params.moments}
            model.params = dataclasses.replace(
                params, alpha=alpha_a, beta=betas.get(2, params.beta),
                moment_betas=tuple((a, b) for a, b in betas.items() if a != 2))
            params = model.params
        if n_cal and task != TASK_BINARY:
            # Interval calibration uses only the held-out rows (never the rows the moments were fitted on).
            from . import intervals

            model.extras["intervals"] = intervals.calibrate(
                model, _take(X, cal_idx), yu[cal_idx], None if base_u is None else base_u[cal_idx])
        model.info = {
            "mode": "practical (one fitting sample, audited exactly)",
            "task": task,
            # converged: the descent ran until its audit found no violated cell (early stopping may then keep an
            # earlier round: "kept_round" / "early_stopped"; the achieved alpha / beta hold for the kept model)
            "converged": bool(res.converged),
            "run_converged": bool(res.converged),
            "early_stopped": bool(kept_round < len(res.round_ends) - 1),
            "achieved": {"alpha": achieved["alpha"], "betas": {str(a): b for a, b in achieved["betas"].items()}},
            "thresholds_used": floors,
            "z": params.z, "z_group": params.z_group, "min_count": params.min_count,
            "stopped_by_user": bool(res.stopped),
            "rounds": int(res.history[-1]["round"]) if res.history else 0,
            "kept_round": int(kept_round),
            "mean_updates": int(res.mean_updates),
            "moment_updates": int(res.moment_updates),
            "max_moment_updates_per_call": int(res.max_moment_updates_per_call),
            "seconds": float(seconds),
            "n_rows": int(n),
            "n_fit": int(fit_idx.size),
            "n_calibration": int(n_cal),
            "calibration_fraction": float(self.calibration_fraction),
            "seed": self.random_state if isinstance(self.random_state, int) else None,
            "n_groups": len(gset),
            "empty_groups": [gset.names[g] for g in np.flatnonzero(memb.sizes == 0)],
            "base_clipped": base_clipped,
            "label": label_name,
            "early_stopping": bool(early),
            "buckets_rule": "auto" if self.n_buckets == "auto" else "given",
            "buckets_tried": {str(r[1]): float(r[0]) for r in runs} if len(runs) > 1 else {},
            "mean_buckets": self.mean_buckets,
            "moment_buckets": self.moment_buckets,
            "alpha_rule": self.alpha if isinstance(self.alpha, str) else "given",
            "beta_rule": self.beta if isinstance(self.beta, str) else "given",
            "history": res.history,
            "estimator_params": _json_params(self.get_params(deep=False)),
        }
        self._set_fitted(model)
        # row-level state of this fit (not saved with the model: a loaded estimator has None here)
        self.fit_index_ = fit_idx
        self.calibration_index_ = cal_idx
        self.fit_mean_unit_, self.fit_moments_unit_ = fit_mu, fit_moms
        if task == TASK_BINARY:  # probabilities never exactly 0 or 1 (see mmc_core.model.binary_clip)
            binary_info["floor"] = 0.5 / (fit_idx.size + 1)
        return self

    def _set_fitted(self, model: FittedModel) -> None:
        """Every fitted attribute that the model file holds (the one place they are set, for fit and load)."""
        p, info = model.params, model.info
        self.model_ = model
        self.alpha_, self.beta_ = p.alpha, p.beta
        self.moment_betas_ = {a: p.beta_for(a) for a in p.moments}
        self.z_ = p.z  # > 0: the per-cell standard-error test was on (alpha_ / beta_ are then floors)
        self.n_buckets_ = p.m
        self.history_ = info.get("history", [])
        self.converged_ = info.get("converged")
        self.n_rounds_ = info.get("rounds", 0)
        self.mean_updates_ = info.get("mean_updates", sum(u.target == 1 for u in model.log))
        self.moment_updates_ = info.get("moment_updates", sum(u.target != 1 for u in model.log))
        self.fit_seconds_ = info.get("seconds")
        self.label_scale_ = model.scale
        self.groups_ = model.groups
        self.empty_groups_ = info.get("empty_groups", [])
        self.task_, self.binary_ = model.task, model.binary

    # ------------------------------------------------------------------------------------------
    def _check_fitted(self):
        if not hasattr(self, "model_"):
            raise MMCError("this MomentMulticalibrator is not fitted yet: call fit() or load() first")

    def _base_for(self, X, base_prediction):
        """The base prediction as a label-unit array (None when the model was not fitted on one)."""
        self._check_fitted()
        if base_prediction is not None:
            return to_label_array(base_prediction, "base prediction", _n_rows(X))
        if self.model_.uses_base:
            raise MMCError("this model was fitted on a base prediction: pass base_prediction")
        return None

    def predict_moments(self, X, base_prediction=None) -> dict:
        """Predictions in label units: {"mean": (n,), "moment_2": (n,), ..., "moment_k": (n,)}."""
        X = as_table(X)
        base = self._base_for(X, base_prediction)
        return self.model_.predict(X, base) if base is not None else self.model_.predict(X)

    @property
    def predict_proba(self):
        """Binary models: ``predict_proba(X, base_prediction=None)``, the multicalibrated probability of the
        positive class, shape (n,), in [0, 1]. A fitted regression has no such method (AttributeError, as
        scikit-learn's ``available_if`` would say), so tools that look for it see a regressor."""
        if hasattr(self, "model_") and self.model_.task != TASK_BINARY:
            raise AttributeError("predict_proba needs a binary (classifier) model; this one is a regression: use "
                                 "predict")
        return self._predict_proba

    def _predict_proba(self, X, base_prediction=None) -> np.ndarray:
        self._check_fitted()
        return self.predict(X, base_prediction)

    def predict(self, X, base_prediction=None) -> np.ndarray:
        """Mean prediction, shape (n,), in label units."""
        return self.predict_moments(X, base_prediction)["mean"]

    def predict_interval(self, X, base_prediction=None, *, delta: float = 0.1, method: str = "calibrated",
                         gamma: float = 0.05) -> np.ndarray:
        """Prediction intervals in label units, shape (n, 2): column 0 the lower end, 1 the upper end.

        ``delta``: the miscoverage (0.1 gives 90% intervals); ``method``: one of ``mmc_core.intervals.METHODS``
        (default ``calibrated``: conditional conformal over the groups, per-group coverage; see
        :mod:`mmc_core.intervals` for what each method guarantees); ``gamma``: the smallest group mass the
        ``guaranteed`` intervals are stated for. A binary (classifier) model raises MMCError: a 0/1 outcome has
        no useful interval.
        """
        from .intervals import predict_intervals

        X = as_table(X)
        lo, hi = predict_intervals(self.model_, X, self._base_for(X, base_prediction), method=method, delta=delta,
                                   gamma=gamma)
        return np.column_stack([lo, hi])

    def save(self, path):
        self._check_fitted()
        self.model_.save(path)

    @classmethod
    def from_model(cls, model: FittedModel) -> "MomentMulticalibrator":
        """The estimator that fitted ``model``: its constructor parameters as they were given (``"se"``, ``"auto"``
        ... as saved in ``info["estimator_params"]``; for files written before that, the values the model
        used) and every fitted attribute the file holds. Refitting it on the same rows gives the same model.
        The row-level attributes of a fit (``fit_index_``, ``calibration_index_``, ``fit_mean_unit_``,
        ``fit_moments_unit_``) are None."""
        p = model.params
        saved = model.info.get("estimator_params")
        if isinstance(saved, dict):
            valid = cls().get_params(deep=False)
            kw = {k: (tuple(v) if k == "label_range" and isinstance(v, list) else v)
                  for k, v in saved.items() if k in valid}
        else:
            kw = dict(alpha=p.alpha, beta=p.beta, n_buckets=p.m, n_moments=len(p.moments) + 1, step=p.step,
                      odd_moments=p.odd_moments, label_range=(model.scale.lo, model.scale.hi),
                      calibration_fraction=model.info.get("calibration_fraction", 0.0),
                      early_stopping=model.info.get("early_stopping", False), max_rounds=p.max_rounds,
                      random_state=model.info.get("seed", 0),
                      mean_buckets="quantile" if p.mean_edges else "uniform",
                      moment_buckets="data" if (p.moment_edges or p.moment_floors) else "range",
                      task=model.task, positive_label=(model.binary or {}).get("positive"))
        est = cls(**kw)
        est._set_fitted(model)
        est.fit_index_ = est.calibration_index_ = None
        est.fit_mean_unit_ = est.fit_moments_unit_ = None
        return est

    @classmethod
    def load(cls, path) -> "MomentMulticalibrator":
        return cls.from_model(FittedModel.load(path))

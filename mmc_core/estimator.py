"""The public estimator: scikit-learn style fit / predict over tables, labels and groups.

Why one module of ~870 lines: ``fit`` is one sequence (checks, split, thresholds, descent, kept round, achieved
thresholds, interval calibration, the fit record) that ``predict``, ``audit``, ``save`` and ``load`` mirror;
the threshold rules, table handling, scikit-learn parameters and the binary task are already modules of their
own (``thresholds``, ``tables``, ``sklearn_params``, ``binary``).
"""

from __future__ import annotations

import numbers
import types

import numpy as np

from .buckets import fill_edges, geometric_edges
from .descent import CellState, DescentParams
from .errors import DataError, MMCError, not_fitted
from .groups import GroupSet
from .model import FittedModel
from .recalibrate import BASE_RECALIBRATIONS, affine_base, fit_affine, fit_group_linear, group_linear_base
from .moments import LabelScale, MomentKind, pseudo_label
from .binary import TASK_BINARY, TASKS, resolve_task  # noqa: F401 - TASKS re-exported
from .sklearn_params import SklearnParams
from .tables import count_rows, take_rows, as_table, to_label_array
from .fit_steps import (
    FitRows,
    FitStats,
    achieved_thresholds,
    cells_keep_given,
    check_held_out,
    count_labels,
    fit_info,
    search_buckets,
    state_achieved,
)
from .thresholds import (  # noqa: F401 - the rule constants are re-exported for older imports
    AUTO_BUCKETS,
    AUTO_LEVEL,
    AUTO_REFERENCE_MASS,
    FLOOR_MASS,
    GROUP_Z_RULES,
    MEAN_BUCKET_RULES,
    MOMENT_BUCKET_RULES,
    SE_GROUP_LEVEL,
    MOMENT_VAR_FLOOR_SHARE,
    NO_GROUP_MOMENT_Z,
    SE_GROUP_MOMENT_Z,
    SE_LEVEL,
    SE_MOMENT_SHRINK,
    SE_MIN_COUNT,
    THRESHOLD_RULES,
    check_unit_interval,
    auto_threshold,
    bonferroni_z,
    check_seed,
    effective_rule,
    validate_params,
)

__all__ = [
    "MomentMulticalibrator",
    "validate_params",
    "to_label_array",
    "auto_threshold",
    "bonferroni_z",
    "MEAN_BUCKET_RULES",
    "MOMENT_BUCKET_RULES",
    "AUTO_BUCKETS",
]


class MomentMulticalibrator(SklearnParams):
    """Mean and higher-central-moment predictors that are multicalibrated on every group.

    Implements AlternatingGradientDescent of Jung, Lee, Pai, Roth, Vohra, "Moment Multicalibration for
    Uncertainty Estimation", on a (practical-mode) sample: at termination the mean predictor is
    alpha-multicalibrated and each (mean, a-th moment) pair is (alpha, beta + a alpha, a/m)
    mean-conditioned moment multicalibrated on the fitting rows.

    Every parameter is keyword-only.

    Parameters
    ----------
    alpha, beta : float in (0, 1), "se" or "auto"
        Mass-weighted violation thresholds: a cell S is violated when P(S) |mean residual over S| >= alpha
        (mean) or >= beta (pseudo-moment). The guarantee on S is an error of at most alpha / P(S).

        * "se" (the default, exact step): a cell is corrected only when, besides passing a small
          mass-weighted floor, its residual is at least z of *its own* standard errors from 0 and it has
          >= 20 fitting rows; z is the two-sided Bonferroni critical value at family-wise level 0.1 over every
          audited cell (about 4 for a few hundred groups). Whole groups are audited too, at family-wise level
          0.1 over the groups: the mean (``mean_group_z``) and every moment, a moment with a shrunken step (the
          share max(1/2, 1 - 1/t^2) of the gap to the group's own moment: the fit does not follow a small
          group's noisy sample moment; smaller gaps are the moments' cell step's, see ``shrunken_cells``). After fitting, ``alpha_`` /
          ``beta_`` (and the saved params) are the values the kept model *achieves* on the fitting rows:
          every cell of the paper's partitions has mass-weighted |residual| below them, so the paper's
          theorems (and the guaranteed intervals) hold with them exactly on the fitting rows. The thresholds
          the descent used are in ``model_.info["thresholds_used"]`` and ``z_``.
        * "auto": one threshold per predictor just above the sampling-noise level of a 5%-mass cell (see
          :func:`auto_threshold`; the rule of model format 1).
        * a number: the paper's fixed threshold, met on the fitting rows: the per-cell test of an "se" other
          threshold gates only that threshold's cells, early stopping keeps the best held-out round among those
          that meet it, and the cell steps after the descent are dropped when they would break it (``info``
          then says so). ``alpha_`` / ``beta_`` state it; only a run that was stopped or capped can miss it, and
          then they state what that model achieves.
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
        violations during fitting, choose the kept round (early stopping) and m ("auto"), judge the base map and
        the shrunken cells (their weights; the cells' penalty; nothing is fitted on them), and calibrate the
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
    base_recalibration : {"auto", "none", "affine", "group-linear"}
        With a base prediction: "affine" first maps it to a + b x base (least squares on the fitting rows, on the
        unit scale, clipped to the label range) and starts the descent from that; the map is part of the model
        (``init.mean``: ``{"kind": "base-affine", "intercept": a, "slope": b}``) and applied to every base
        prediction passed to ``predict``. An over-fitted base model's predictions are too spread out (slope
        b < 1 on new rows); the bucketed corrections of the descent remove that only at the bucket
        resolution. "group-linear": one slope within the listed groups and one between them (so the groups'
        means are not shrunk with everything else), bent at the quartiles of the base where rows it was not
        fitted on bear that out (``init.mean`` "knots" / "bends"; such a file is version 3), without the
        between slope (or not at all) when it would leave a group significantly more biased out of sample than
        the base did (``model_.info["base_recalibration"]["between_dropped_for"]``), applied at
        the share of it that out-of-sample rows bear out (the residuals' least-squares scale on its
        out-of-sample change, in [0, 1]) times min(1, z / 2), z = that scale in robust standard errors (none
        for z <= 0; :mod:`mmc_core.recalibrate`; ``init.mean`` kind "base-group-linear"; the check is in
        ``model_.info["base_recalibration"]``). "none": the base prediction as given. "auto" (default):
        "group-linear" (both engines: the Dask engine fits the map on the client on the numpy engine's own sample of
        the rows; "affine" is numpy only).
    interval_calibration : {"held-out", "cross-fit", "auto"}
        Which rows the data-driven intervals (``mmc_core.intervals``) are calibrated on (needs
        calibration_fraction > 0; the final model is fitted the same way with either). "held-out" (default):
        the held-out rows, with the final model's predictions (exact split-conformal-type guarantees).
        "cross-fit": every row, with out-of-fold predictions: the rows are split into 5 seeded folds and a
        model with these same parameters is fitted on the other four folds for each (:mod:`mmc_core.crossfit`),
        i.e. 5 extra fits. A group calibrates on 4x its held-out rows, so its interval is narrower, but the
        guarantees hold only approximately (:mod:`mmc_core.intervals`), and on two unseen tables (cps91 and
        labsup without a base, benchmarks/README.md, issue 9) 6-12% of the groups were under-covered, against
        at most 0.3% with "held-out": an option, not the default. "auto": "cross-fit" in memory up to
        ``mmc_core.crossfit.CROSS_FIT_MAX_ROWS`` (200,000) rows, "held-out" above that and with the Dask engine
        ("cross-fit" there is an MMCError). A fit stopped by ``stop`` or ``callback`` is calibrated on the
        held-out rows either way.
    base_column : str or None
        The column of X that holds the base model's mean prediction (label units), read by ``fit`` and every
        prediction method, so that the estimator needs only X and y (scikit-learn's ``Pipeline``,
        ``cross_val_score``, ``GridSearchCV``). A ``base_prediction`` argument wins when given. Default None:
        no base column (without a ``base_prediction`` argument the descent starts from the label's mean).
    groups : list of str, GroupSet, group definitions (JSON) or None
        The groups to calibrate on when ``fit`` is not given any: a list of column names builds
        ``GroupSet.from_columns(X, groups, max_order)`` on the X passed to ``fit`` (numeric columns with more
        than 10 values cut at their quartiles on that X); a GroupSet or group definitions are used as they
        are. The ``groups`` argument of ``fit`` wins when given. Default None: the whole population only.
    max_order : int >= 1
        With column names as ``groups``: intersections of values of up to this many different columns
        (default 1: each column's values alone).
    shrunken_cells : bool
        After the descent (needs calibration_fraction > 0; the Dask engine fits them on the client on the same
        samples), correct every (group, tenth of the
        prediction) cell at once by a ridge fit of the residuals on the fitting rows, the penalty chosen on the
        held-out rows and applied at the share of it they bear out (:mod:`mmc_core.cells`); nothing is fitted
        on the held-out rows, which the intervals are calibrated on. The descent only corrects cells that pass their own test; this takes the small
        miscalibrations it leaves, in proportion. Default True; the model then has ``cells`` (a version-5
        file; version 4: the empirical-Bayes step before 2026-11-27) and ``info["shrunken_cells"]`` says what
        happened. The stated multicalibration (``alpha_``, the
        achieved errors) is measured after this step. Each positive moment (the variance, ...) then gets the
        same step on the log scale (:func:`mmc_core.cells.gated_moment_cells`): in two stages, whole groups and
        then (group, tenth of the moment prediction) cells, a penalized log-link ridge of the pseudo-labels
        (squared residuals around the final mean) multiplies each cell's predictions, shrunk by the rows
        behind it; the held-out rows choose the penalty by the QLIKE loss and the share of it they bear out,
        apply it only when their evidence for it reaches z >= 2.25, and drop it where it leaves a group's variance more misstated than before (``model_.moment_cells``, a
        version-7 file; ``info["moment_cells"]`` says what happened; ``beta_`` is measured after it).

    Attributes
    ----------
    model_ : FittedModel
        The fitted model (what :meth:`save` writes; predictions, audits and intervals read it).
    alpha_, beta_ : float
        The thresholds the model states: with "se" the values it achieves on the fitting rows.
    moment_betas_ : dict
        {moment: beta} for each fitted moment.
    z_ : float
        The critical value of the per-cell standard-error test (0 when it was off).
    n_buckets_ : int
        m, the number of level sets used (the one chosen with ``n_buckets="auto"``).
    history_ : list of dict
        One record per descent round (violations, held-out error, ...).
    converged_ : bool
        Whether the descent ran until no cell was violated.
    n_rounds_, mean_updates_, moment_updates_ : int
        Rounds and updates of the descent.
    fit_seconds_ : float
        Wall-clock seconds of the descent.
    label_scale_ : LabelScale
        The label's range and how it was set ("declared", "observed" or "binary").
    groups_ : GroupSet
        The groups the model was fitted on (the whole population included).
    empty_groups_, small_groups_ : list of str
        Groups without fitting rows, and groups with too few for the "se" rule to correct.
    task_ : {"regression", "binary"}
        The task the label was fitted as; ``binary_`` holds the classes of a binary label.
    classes_ : ndarray of shape (2,)
        Binary models only: [negative class, positive class], the columns of :meth:`predict_proba`.
    n_features_in_ : int
        The number of columns of the X passed to ``fit``.
    feature_names_in_ : ndarray of str
        Their names, when X had string column names (a DataFrame or a dict of columns).
    fit_index_, calibration_index_ : ndarray
        The rows of the last fit's descent and its held-out rows (None on a loaded estimator).

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from mmc_core import MomentMulticalibrator
    >>> from mmc_core.synthetic import demo_distribution
    >>> df = pd.DataFrame(demo_distribution().sample_table(2000, np.random.default_rng(0), truth=False))
    >>> est = MomentMulticalibrator(base_column="base_pred", groups=["sex", "race"], label_range=(0, 100))
    >>> est = est.fit(df, df["outcome"])
    >>> est.predict(df).shape
    (2000,)
    >>> sorted(est.predict_moments(df))
    ['mean', 'moment_2']

    The same estimator in scikit-learn's model selection (X carries the base prediction and the group columns):

    >>> from sklearn.model_selection import cross_val_score
    >>> scores = cross_val_score(est, df, df["outcome"], cv=3)  # R^2 of each fold
    >>> bool(np.isfinite(scores).all())
    True
    """

    # row-level state of the last fit (None on a loaded estimator)
    fit_index_: np.ndarray | None
    calibration_index_: np.ndarray | None
    fit_mean_unit_: np.ndarray | None
    fit_moments_unit_: dict | None
    oof_predictions_unit_: dict | None

    def __init__(
        self,
        *,
        alpha="se",
        beta="se",
        n_buckets=5,
        n_moments=2,
        step="exact",
        odd_moments="absolute",
        label_range=None,
        calibration_fraction=0.25,
        early_stopping="auto",
        max_rounds=None,
        random_state=0,
        mean_buckets="uniform",
        moment_buckets="data",
        mean_group_z="bonferroni",
        task="auto",
        positive_label=None,
        base_recalibration="auto",
        interval_calibration="held-out",
        shrunken_cells=True,
        base_column=None,
        groups=None,
        max_order=1,
    ):
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
        self.base_recalibration = base_recalibration
        self.interval_calibration = interval_calibration
        self.shrunken_cells = shrunken_cells
        self.base_column = base_column
        self.groups = groups
        self.max_order = max_order

    # ------------------------------------------------------------------------------------------
    def _params(
        self, alpha: float, beta: float, moments: tuple, moment_betas: tuple = (), m: int | None = None, **extra
    ) -> DescentParams:
        return DescentParams(
            float(alpha),
            float(beta),
            int(self.n_buckets if m is None else m),
            tuple(moments),
            self.step,
            self.odd_moments,
            None if self.max_rounds is None else int(self.max_rounds),
            moment_betas,
            **extra,
        )

    def _build_params(
        self, m: int, G: int, nf: int, moments: tuple, resid: np.ndarray, mu0: np.ndarray, memb, stats=None
    ):
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
        if self.shrunken_cells and self.calibration_fraction > 0:
            # the moments' cell step (after the descent, judged on held-out rows) takes whole groups' moments
            # with shrinkage; the descent's own whole-group test is a t test on skewed pseudo-labels, whose lower
            # tail is heavy: in a world of equal spread (10,000 rows) it moved a small group's variance down by
            # 20-30% in 3 of 10 fits (worst group up to 45% off; 8% at most without it). On islp_wage's held-out
            # rows it had caught real group spread the cell step shrinks more (benchmarks/README.md, "Moment cells")
            z_group_moment = NO_GROUP_MOMENT_Z
        mgz = getattr(self, "mean_group_z", "bonferroni")
        if not (
            mgz in GROUP_Z_RULES
            or (isinstance(mgz, numbers.Real) and not isinstance(mgz, bool) and 1.0 <= float(mgz) <= 10.0)
        ):
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

        alpha = (
            thr(self.alpha, stats.resid_std, G * m * (1 + K * m)) if isinstance(self.alpha, str) else float(self.alpha)
        )
        moment_betas: tuple = ()
        if not isinstance(self.beta, str):
            beta = float(self.beta)
        elif not moments:
            beta = 0.01  # unused: no moments are fitted
        else:
            # each moment on its own scale: a fourth moment's errors are far smaller than a variance's
            per = {a: thr(self.beta, stats.label_std(a), G * m * m) for a in moments}
            beta = per[2]
            moment_betas = tuple((a, b) for a, b in per.items() if a != 2)
        extra: dict = {"z": z, "z_group": z_group, "min_count": min_count}
        if se and not (self.alpha == "se" and self.beta == "se"):
            # the per-cell test gates only the family whose threshold is "se": the other one is the paper's plain
            # test, which the descent then meets on the fitting rows
            extra["se_scope"] = "mean" if self.alpha == "se" else "moments"
        if se and moments and self.beta == "se":
            extra["moment_var_floors"] = tuple(
                (a, float(stats.label_std(a)) ** 2 * MOMENT_VAR_FLOOR_SHARE) for a in moments
            )
            # A moment's whole group is corrected from |t| >= z_group_moment (the Bonferroni z_group), part-way:
            # the share max(1/2, 1 - 1 / t^2) of the gap to its own fitting-row moment (James-Stein with a floor
            # of 1/2; DescentParams.moment_shrink). Smaller gaps are left to the moments' cell step after the
            # descent, which shrinks each by its evidence and is judged on held-out rows (SE_GROUP_MOMENT_Z).
            extra["z_group_moment"] = z_group_moment
            extra["moment_shrink"] = SE_MOMENT_SHRINK
        if (
            self.moment_buckets == "data"
            and self.step == "exact"
            and not (self.odd_moments == MomentKind.SIGNED and K >= 2)
        ):
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

    def _fitting_rows(self, X, y, groups, base_prediction, label_name: str, base_name):
        """Checks, label scale, calibration split and the fitting rows' residuals: everything ``fit`` decides
        before the descent, shared with :meth:`planned_thresholds` so the preview cannot drift from the fit."""
        validate_params(
            self.alpha,
            self.beta,
            self.n_buckets,
            self.n_moments,
            self.step,
            self.odd_moments,
            self.calibration_fraction,
            self.max_rounds,
            self.mean_buckets,
            self.moment_buckets,
            self.early_stopping,
        )
        check_seed(self.random_state)
        if not isinstance(self.shrunken_cells, (bool, np.bool_)):
            raise MMCError(f"shrunken_cells must be True or False, got {self.shrunken_cells!r}")
        if self.base_recalibration not in BASE_RECALIBRATIONS:
            raise MMCError(
                f"base_recalibration must be one of {', '.join(BASE_RECALIBRATIONS)}, got {self.base_recalibration!r}"
            )
        X = as_table(X)
        n = count_rows(X)
        if n < 2:
            raise DataError(f"need at least 2 rows to fit, got n_samples={n}")
        task, y, binary_info = resolve_task(y, self.task, self.positive_label, label_name)
        k = int(self.n_moments)
        if task == TASK_BINARY:
            if self.n_moments not in (1, 2):
                raise MMCError(
                    f"moments={self.n_moments!r}: a binary label is fitted for the mean only (its "
                    "variance is p(1 - p) once the probability p is right); use moments=1"
                )
            if self.label_range is not None and tuple(float(v) for v in self.label_range) != (0.0, 1.0):
                raise MMCError(
                    f"label range {self.label_range!r}: a binary label is a probability on [0, 1] "
                    "(leave label_range unset)"
                )
            k = 1
        y = to_label_array(y, f"label '{label_name}'", n)
        if task == TASK_BINARY:
            scale = LabelScale(0.0, 1.0, "binary")
        elif self.label_range is None:
            scale = LabelScale.observed(y)
        else:
            scale = LabelScale.declared(self.label_range)
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
            del base
        gset = GroupSet.coerce(groups)

        rng = np.random.default_rng(self.random_state)
        n_cal = int(round(self.calibration_fraction * n))
        early = check_held_out(self, self.calibration_fraction, n, n - n_cal, n_cal)
        perm = rng.permutation(n)
        cal_idx = np.sort(perm[:n_cal])
        fit_idx = np.sort(perm[n_cal:]) if n_cal else np.arange(n)
        del perm, y  # row-length arrays no longer needed: at tens of millions of rows memory is the limit
        # without held-out rows the fitting rows are all the rows: the arrays are used as they are, not copied
        Xf = take_rows(X, fit_idx) if n_cal else X
        yu_f = yu[fit_idx] if n_cal else yu
        memb = gset.evaluate(Xf, fit_idx.size)
        affine = within = memb_h = None
        if base_u is not None:
            mu0 = base_u[fit_idx] if n_cal else base_u
            if self.base_recalibration == "affine":
                affine = fit_affine(yu_f, mu0)
                mu0 = affine_base(mu0, *affine)
            elif self.base_recalibration in ("group-linear", "auto"):
                memb_h = gset.evaluate(take_rows(X, cal_idx), n_cal) if n_cal else None
                held = (yu[cal_idx], base_u[cal_idx], memb_h.sums()) if memb_h is not None else None
                within = fit_group_linear(yu_f, mu0, memb.sums(), held)
                mu0 = group_linear_base(mu0, memb.sums(), within)
        else:
            mu0 = np.full(fit_idx.size, float(np.mean(yu_f)))
        moments = tuple(range(2, k + 1))
        G, nf = len(gset), fit_idx.size
        resid = yu_f - mu0
        return types.SimpleNamespace(
            X=X,
            n=n,
            task=task,
            binary_info=binary_info,
            scale=scale,
            yu=yu,
            yu_f=yu_f,
            base_u=base_u,
            base_clipped=base_clipped,
            gset=gset,
            n_cal=n_cal,
            early=early,
            cal_idx=cal_idx,
            fit_idx=fit_idx,
            Xf=Xf,
            memb=memb,
            mu0=mu0,
            affine=affine,
            within=within,
            memb_h=memb_h,
            moments=moments,
            G=G,
            nf=nf,
            resid=resid,
        )

    def planned_thresholds(self, X, y, groups=None, base_prediction=None, label_name: str = "label") -> dict:
        """The thresholds ``fit(X, y, groups, base_prediction)`` will use, computed by the fit's own steps
        (same checks, label scale and calibration split, then ``_build_params``) without running the descent:
        the one resolver of the "auto" and "se" rules (a number is returned as given).

        Returns ``rule`` ("se", "auto" or "given"), ``alpha``, ``beta``, ``moment_betas`` {moment: beta}, the
        "se" test's ``z``, ``z_group`` and ``min_count`` (0 without it), ``n_fit`` (rows the descent fits on),
        ``resid_sd`` (their residual SD, unit scale) and ``n_groups``. These equal the fitted model's
        ``info["thresholds_used"]`` (with "se", ``alpha_`` / ``beta_`` then state what the model achieved).
        With ``n_buckets="auto"`` the thresholds depend on the bucket count the fit chooses: MMCError."""
        if self.n_buckets == "auto":
            raise MMCError("with buckets 'auto' the thresholds are known only after the fit (they depend on m)")
        if self.groups is not None or self.base_column is not None:
            X = as_table(X)
            groups, base_prediction, _ = self._inputs_from_params(X, groups, base_prediction, None, False, None)
        d = self._fitting_rows(X, y, groups, base_prediction, label_name, None)
        params, _ = self._build_params(int(self.n_buckets), d.G, d.nf, d.moments, d.resid, d.mu0, d.memb)
        rules = (self.alpha, self.beta)
        # "se" is the per-cell test of the exact step; with the paper's step an "se" threshold falls back to the
        # "auto" noise rule (_build_params), and the preview says so
        se = self.step == "exact" and "se" in rules
        return {
            "rule": "se" if se else ("auto" if ("auto" in rules or "se" in rules) else "given"),
            "alpha": float(params.alpha),
            "beta": float(params.beta),
            "moment_betas": {int(a): float(params.beta_for(a)) for a in params.moments},
            "z": float(params.z),
            "z_group": float(params.z_group),
            "min_count": int(params.min_count),
            "n_fit": int(d.nf),
            "resid_sd": float(np.std(d.resid)),
            "n_groups": int(d.G),
        }

    def fit(
        self,
        X,
        y,
        groups=None,
        base_prediction=None,
        callback=None,
        label_name: str = "label",
        base_name: str | None = None,
        stop=None,
        engine: str | None = None,
        client=None,
    ):
        """Fit on a table.

        Parameters
        ----------
        X : pandas.DataFrame, dict of column -> array, or 2-D numpy array (columns ``x0``, ``x1``, ...), n rows
            Must contain every column the groups refer to (and ``base_column``, when set).
        y : array of shape (n,)
            Labels in their own units.
        groups : GroupSet, list of group dicts, or None
            The groups to calibrate on (the whole population is always added). When given it wins over the
            constructor's ``groups``; None uses the constructor's (and, when that is None too, only the whole
            population).
        base_prediction : array of shape (n,) or None
            A base model's mean prediction in label units, used as the initial mean predictor. When given it
            wins over the constructor's ``base_column``; None reads the column ``base_column`` of X when that is
            set (and fits without a base prediction otherwise).
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
        from .crossfit import check_interval_calibration

        check_interval_calibration(self.interval_calibration)  # the value, at the top; "auto" resolves by size below
        if y is None:
            raise DataError("MomentMulticalibrator requires y to be passed, but the target y is None")
        if (hasattr(y, "dtype") or isinstance(y, (list, tuple))) and np.iscomplexobj(y):
            raise DataError("Complex data not supported: y has complex values")
        dask = engine == "dask" or (engine is None and type(X).__module__.split(".")[0] in ("dask", "dask_expr"))
        X_given = X
        if not dask and (self.groups is not None or self.base_column is not None):
            X = as_table(X)  # the constructor's column names are read from it
        groups, base_prediction, base_name = self._inputs_from_params(
            X, groups, base_prediction, base_name, dask, client
        )
        if dask:
            from .engines.dask_engine import fit_dask  # lazily: importing mmc_core never imports dask
            from .threads import one_blas_thread

            with one_blas_thread():  # the client's solves as the numpy engine's (workers run one thread each)
                fit_dask(
                    self,
                    X,
                    y,
                    groups,
                    base_prediction,
                    callback=callback,
                    label_name=label_name if label_name != "label" else None,
                    base_name=base_name,
                    stop=stop,
                    client=client,
                )
        else:
            if label_name == "label" and isinstance(getattr(y, "name", None), str) and y.name:
                label_name = y.name  # a pandas Series names its column: errors and the model then say which
            from .memory import reuse_freed_memory
            from .threads import one_blas_thread

            with reuse_freed_memory(count_labels(y)), one_blas_thread():
                self._fit_in_memory(X, y, groups, base_prediction, callback, label_name, base_name, stop)
        self._set_features_in(X_given)
        return self

    def _inputs_from_params(self, X, groups, base_prediction, base_name, dask: bool, client):
        """``fit``'s groups, base prediction and base name: the arguments when given, else the constructor's
        ``groups`` (column names -> ``GroupSet.from_columns(X, groups, max_order)``; a GroupSet or group JSON as
        it is) and ``base_column`` (the base prediction read from that column of X)."""
        if groups is None and self.groups is not None:
            cols = self._group_columns()
            if cols is None:
                groups = self.groups
            else:
                order = self.max_order
                if isinstance(order, bool) or not isinstance(order, numbers.Integral) or order < 1:
                    raise MMCError(f"max_order must be an integer >= 1, got {order!r}")
                if dask:
                    from .engines.dask_engine import groups_from_columns

                    groups = groups_from_columns(X, cols, int(order), client=client)
                else:
                    groups = GroupSet.from_columns(X, cols, int(order))
        if base_prediction is None and self.base_column is not None:
            base_prediction = self.base_column if dask else self._base_column_of(X)
            base_name = base_name if base_name is not None else str(self.base_column)
        return groups, base_prediction, base_name

    def _group_columns(self) -> list | None:
        """The constructor's ``groups`` as a list of column names (a name or a list / tuple of names), or None
        when it is a GroupSet or group definitions."""
        g = self.groups
        if isinstance(g, str):
            return [g]
        if isinstance(g, (list, tuple)) and g and all(isinstance(c, str) for c in g):
            return list(g)
        return None

    def _base_column_of(self, X):
        """The column ``base_column`` of the table X (a DataError naming it when X has no such column)."""
        cols = list(X.columns) if hasattr(X, "columns") else list(X)
        if self.base_column not in cols:
            raise DataError(f"base_column={self.base_column!r} is not a column of X (columns: {cols[:20]})")
        return X[self.base_column]

    def _set_features_in(self, X) -> None:
        """``n_features_in_`` (the columns of X, as scikit-learn counts them) and ``feature_names_in_`` (their
        names, when they are all strings: a DataFrame's or a dict's; a numpy array has none)."""
        names = list(X.columns) if hasattr(X, "columns") else (list(X) if isinstance(X, dict) else None)
        self.n_features_in_ = len(names) if names is not None else len(as_table(X))  # a 2-D array's columns
        if names is not None and all(isinstance(c, str) for c in names):
            self.feature_names_in_ = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_

    def _fit_in_memory(self, X, y, groups, base_prediction, callback, label_name, base_name, stop):
        """The numpy engine's fit (see :meth:`fit`)."""
        from .crossfit import check_interval_calibration

        d = self._fitting_rows(X, y, groups, base_prediction, label_name, base_name)
        X, n, task, binary_info, scale, yu, yu_f, base_u, base_clipped, gset = (
            d.X,
            d.n,
            d.task,
            d.binary_info,
            d.scale,
            d.yu,
            d.yu_f,
            d.base_u,
            d.base_clipped,
            d.gset,
        )
        n_cal, early, cal_idx, fit_idx, Xf, memb, mu0, affine, within, memb_h, moments, G, nf, resid = (
            d.n_cal,
            d.early,
            d.cal_idx,
            d.fit_idx,
            d.Xf,
            d.memb,
            d.mu0,
            d.affine,
            d.within,
            d.memb_h,
            d.moments,
            d.G,
            d.nf,
            d.resid,
        )
        del d  # the locals hold what is needed; resid is dropped after the descent
        if memb_h is None and n_cal:
            memb_h = gset.evaluate(take_rows(X, cal_idx), n_cal)
        mu_h = None
        if n_cal:
            mu_h = base_u[cal_idx] if base_u is not None else np.full(n_cal, float(np.mean(yu_f)))
            if affine is not None:
                mu_h = affine_base(mu_h, *affine)
            elif within is not None:
                assert memb_h is not None
                mu_h = group_linear_base(mu_h, memb_h.sums(), within)

        def start(m):
            params, init_moments = self._build_params(m, G, nf, moments, resid, mu0, memb)
            state = CellState(params, memb, yu_f, mu0, {a: np.full(nf, v) for a, v in init_moments.items()})
            holdout = None
            if n_cal:
                assert memb_h is not None and mu_h is not None  # both exist whenever n_cal > 0
                holdout = CellState(
                    params, memb_h, yu[cal_idx], mu_h, {a: np.full(n_cal, v) for a, v in init_moments.items()}
                )
            return params, init_moments, state, holdout

        search = search_buckets(self, start, callback, stop, early)
        score, m, params, init_moments, res, kept_round = search.runs[search.best]
        resid = None  # the descents are done: free it (rebound, not deleted: start's closure shares the variable)

        if base_u is None:
            init_mean = {"kind": "constant", "value": float(np.mean(yu_f))}
        elif affine is not None:
            init_mean = {"kind": "base-affine", "column": base_name, "intercept": affine[0], "slope": affine[1]}
        elif within is not None and within["validation"]["kept"]:
            init_mean = {"kind": "base-group-linear", "column": base_name, **within}
        else:
            init_mean = {"kind": "base", "column": base_name}
        log = res.log[: res.round_ends[kept_round]] if res.round_ends else res.log
        model = FittedModel(
            params,
            scale,
            gset,
            init_mean,
            init_moments,
            list(log),
            list(res.round_ends[: kept_round + 1]),
            task=task,
            binary=binary_info,
        )
        snap = res.extra.get("best")
        if kept_round == len(res.round_ends) - 1:
            st = res.state
            assert isinstance(st, CellState)  # the in-memory engine (the Dask engine has its own fit path)
            fit_mu, fit_moms = st.mu.copy(), {a: v.copy() for a, v in st.mom.items()}
        elif snap is not None and snap["index"] == kept_round:
            fit_mu, fit_moms = snap["mu"], snap["mom"]
        else:
            base_f = None if base_u is None else (base_u[fit_idx] if n_cal else base_u)  # as given: predict maps it
            fit_mu, fit_moms = model.predict_unit(Xf, base_f, fit_idx.size)
        cells_check = moment_cells_check = None
        before_cells = (fit_mu, fit_moms)
        if self.shrunken_cells and n_cal and not (res.stopped or (stop is not None and stop())):
            assert memb_h is not None
            fit_mu, cells_check = self._shrunken_cells(model, memb, yu_f, fit_mu, memb_h, yu[cal_idx], base_u, cal_idx)
            fit_moms, moment_cells_check = self._moment_cells(
                model, memb, yu_f, fit_mu, fit_moms, memb_h, yu[cal_idx], base_u, cal_idx
            )
        achieved = achieved_thresholds(params, memb, yu_f, fit_mu, fit_moms)
        if not cells_keep_given(self, model, params, achieved, cells_check, moment_cells_check):
            fit_mu, fit_moms = before_cells
            achieved = achieved_thresholds(params, memb, yu_f, fit_mu, fit_moms)
        _, floors = state_achieved(self, model, params, achieved)
        if (model.has_cells or model.has_moment_cells) and 0 <= kept_round < len(res.history):
            # the stated alpha is the model's after the cell corrections; the round's own value stays the descent's
            res.history[kept_round]["cells_max_mean_violation"] = achieved["alpha"]
        oof = None
        if n_cal and task != TASK_BINARY and getattr(self, "_calibrate_intervals", True):
            from . import intervals

            interval_rows = check_interval_calibration(self.interval_calibration, n=n)
            if interval_rows == "cross-fit" and not (res.stopped or (stop is not None and stop())):
                # Every row, with the predictions of a model fitted without its fold (mmc_core.crossfit).
                from .crossfit import CROSS_FIT_FOLDS, out_of_fold_predictions

                oof = out_of_fold_predictions(self, X, yu, base_u, gset, task, stop=stop)
                if stop is not None and stop():  # stopped during the fold fits: their models are partial
                    oof = None
            if oof is not None:
                model.extras["intervals"] = intervals.calibrate(
                    model,
                    X,
                    yu,
                    base_u,
                    predictions=(oof["mean"], oof["moments"]),
                    rows="cross-fit",
                    folds=CROSS_FIT_FOLDS,
                    # the configuration measured for cross-fitting (mmc_core.intervals, 1'.-3'.)
                    options={"combine": "sum", "margin": intervals.CC_MARGIN_CROSS_FIT},
                )
            else:
                # Only the held-out rows (never the rows the moments were fitted on); also a stopped fit's
                # (the fold models would be as partial as it is, and the user is waiting).
                model.extras["intervals"] = intervals.calibrate(
                    model, take_rows(X, cal_idx), yu[cal_idx], None if base_u is None else base_u[cal_idx]
                )
        rows = FitRows(n, fit_idx.size, n_cal, memb.sizes, base_clipped, label_name)
        model.info = {"task": task, **fit_info(self, model, search, rows, achieved, floors)}
        if cells_check is not None:
            model.info["shrunken_cells"] = cells_check
        if moment_cells_check:
            model.info["moment_cells"] = moment_cells_check
        if n_cal:
            from .stages import stage_effects

            assert memb_h is not None
            base_h = None if base_u is None else base_u[cal_idx]
            model.info["stages"] = stage_effects(model, memb_h, yu[cal_idx], base_h)
        if within is not None:  # the out-of-sample check of the group-linear map, kept or not
            model.info["base_recalibration"] = {
                "method": "group-linear",
                "ridge": within["ridge"],
                **within["validation"],
            }
        self._set_fitted(model)
        # row-level state of this fit (not saved with the model: a loaded estimator has None here)
        self.fit_index_ = fit_idx
        self.calibration_index_ = cal_idx
        self.fit_mean_unit_, self.fit_moments_unit_ = fit_mu, fit_moms
        self.oof_predictions_unit_ = oof  # cross-fit: every row's out-of-fold predictions and fold (else None)
        if task == TASK_BINARY:  # probabilities never exactly 0 or 1 (see mmc_core.model.binary_clip)
            binary_info["floor"] = 0.5 / (fit_idx.size + 1)
        return self

    @staticmethod
    def _shrunken_cells(model, memb, y_f, fit_mu, memb_h, y_h, base_u, cal_idx) -> tuple:
        """The shrunken cell corrections after the descent (:mod:`mmc_core.cells`), fitted on the fitting rows
        (a seeded sample of ``CV_MAX_ROWS`` on a larger table: the cells' means are then precise anyway), their
        penalty and weight chosen on the held-out rows with the kept model's predictions there. Sets ``model.cells`` when kept;
        returns the fitting rows' final mean prediction and the check for ``info``."""
        from .cells import apply_cells, gated_cells
        from .recalibrate import capped

        mu_h, moms_h = model.initial(memb_h.n, None if base_u is None else base_u[cal_idx], memb_h)
        mu_h, _ = model.replay(memb_h, mu_h, moms_h)
        sums = memb.sums()
        sums_s, y_s, mu_s = capped(sums, y_f, fit_mu, 11)
        s_h, yy, mm = capped(memb_h.sums(), y_h, mu_h, 13)
        cells, check = gated_cells(y_s, mu_s, sums_s, (yy, mm, s_h))
        if cells is None:
            return fit_mu, check
        model.cells = cells
        return apply_cells(fit_mu, sums, cells), check

    @staticmethod
    def _moment_cells(model, memb, y_f, fit_mu, fit_moms, memb_h, y_h, base_u, cal_idx) -> tuple:
        """The log-scale cell corrections of each positive moment (:func:`mmc_core.cells.gated_moment_cells`),
        after the mean's: fitted on the fitting rows' pseudo-labels around the final mean (a seeded sample of
        ``CV_MAX_ROWS`` on a larger table), judged on the held-out rows with the model's final predictions there.
        Sets ``model.moment_cells`` when some are kept; returns the fitting rows' moment predictions and the
        checks per moment for ``info`` (None when no moment is positive on the log scale)."""
        from .cells import apply_moment_cells, gated_moment_cells
        from .recalibrate import capped

        p = model.params
        if not p.moments or p.moment_step != "ratio":  # signed or additive moments: no log scale to work on
            return fit_moms, None
        mu_h, moms_h = model.initial(memb_h.n, None if base_u is None else base_u[cal_idx], memb_h)
        mu_h, moms_h = model.replay(memb_h, mu_h, moms_h)  # with the mean's cells, if kept
        sums, sums_h = memb.sums(), memb_h.sums()
        cells, checks = {}, {}
        for a in p.moments:
            s_f = pseudo_label(a, y_f - fit_mu, p.odd_moments)
            s_h = pseudo_label(a, y_h - mu_h, p.odd_moments)
            sums_s, s_s, v_s = capped(sums, s_f, fit_moms[a], 17)
            sh, ss_h, vv_h = capped(sums_h, s_h, moms_h[a], 19)
            cell, checks[str(a)] = gated_moment_cells(s_s, v_s, sums_s, (ss_h, vv_h, sh))
            if cell is not None:
                cells[a] = cell
        if not cells:
            return fit_moms, checks
        model.moment_cells = cells
        out = dict(fit_moms)
        for a, cell in cells.items():
            out[a] = apply_moment_cells(fit_moms[a], sums, cell, p.projection(a))
        return out, checks

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
        self.small_groups_ = info.get("small_groups", [])
        self.task_, self.binary_ = model.task, model.binary
        if model.task == TASK_BINARY and model.binary:
            self.classes_ = np.asarray(model.binary["classes"])  # [negative, positive]: predict_proba's columns
        elif hasattr(self, "classes_"):
            del self.classes_

    # ------------------------------------------------------------------------------------------
    def __sklearn_is_fitted__(self) -> bool:
        """scikit-learn's ``check_is_fitted`` asks this: fitted once ``fit`` or ``load`` has set ``model_``."""
        return hasattr(self, "model_")

    def _check_fitted(self, method: str = "this method"):
        if not hasattr(self, "model_"):
            raise not_fitted(
                f"this MomentMulticalibrator is not fitted yet: call fit() (or load a saved model) before {method}()"
            )

    def _base_for(self, X, base_prediction, method: str = "predict"):
        """The base prediction as a label-unit array (None when the model was not fitted on one): the argument
        when given, else the column ``base_column`` of X when the model uses a base prediction."""
        self._check_fitted(method)
        if base_prediction is not None:
            return to_label_array(base_prediction, "base prediction", count_rows(X))
        if self.model_.uses_base:
            if self.base_column is not None:
                return to_label_array(self._base_column_of(X), f"base prediction '{self.base_column}'", count_rows(X))
            raise MMCError("this model was fitted on a base prediction: pass base_prediction (or set base_column)")
        return None

    def predict_moments(self, X, base_prediction=None) -> dict:
        """Predictions in label units: {"mean": (n,), "moment_2": (n,), ..., "moment_k": (n,)}."""
        return self._predict_moments(X, base_prediction, "predict_moments")

    def _predict_moments(self, X, base_prediction, method: str) -> dict:
        self._check_fitted(method)
        X = as_table(X)
        base = self._base_for(X, base_prediction, method)
        return self.model_.predict(X, base) if base is not None else self.model_.predict(X)

    @property
    def predict_proba(self):
        """Binary models: ``predict_proba(X, base_prediction=None)``, shape (n, 2) as scikit-learn's classifiers:
        column 0 the probability of the negative class, column 1 the multicalibrated probability of the positive
        class (the order of ``classes_``); rows sum to 1. A fitted regression has no such method
        (AttributeError, as scikit-learn's ``available_if`` would say), so tools that look for it see a
        regressor."""
        if hasattr(self, "model_") and self.model_.task != TASK_BINARY:
            raise AttributeError(
                "predict_proba needs a binary (classifier) model; this one is a regression: use predict"
            )
        return self._predict_proba

    def _predict_proba(self, X, base_prediction=None) -> np.ndarray:
        p = self._positive_proba(X, base_prediction, "predict_proba")
        return np.column_stack([1.0 - p, p])

    def _positive_proba(self, X, base_prediction=None, method: str = "predict_proba") -> np.ndarray:
        """The multicalibrated probability of the positive class, shape (n,) (``predict_proba(X)[:, 1]``)."""
        return self._predict_moments(X, base_prediction, method)["mean"]

    def predict(self, X, base_prediction=None) -> np.ndarray:
        """Mean prediction, shape (n,), in label units (a binary model's: the positive class's probability)."""
        return self._predict_moments(X, base_prediction, "predict")["mean"]

    def score(self, X, y, sample_weight=None, base_prediction=None) -> float:
        """scikit-learn's default score: R^2 of :meth:`predict` for a regression (as ``RegressorMixin.score``;
        1 - residual sum of squares / total sum of squares around the weighted mean of y), accuracy for a binary
        model (the positive class predicted where its probability is >= 0.5; as ``ClassifierMixin.score``)."""
        self._check_fitted("score")
        p = self._predict_moments(X, base_prediction, "score")["mean"]
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=float)
        if self.model_.task == TASK_BINARY:
            positive = (self.model_.binary or {}).get("positive", 1)
            hit = (p >= 0.5) == (np.asarray(y) == positive)
            return float(np.average(hit, weights=w))
        yt = to_label_array(y, "y", p.size)
        ss_res = float(np.average((yt - p) ** 2, weights=w))
        ss_tot = float(np.average((yt - np.average(yt, weights=w)) ** 2, weights=w))
        if ss_tot == 0.0:  # a constant label: scikit-learn's r2_score gives 1 for a perfect fit, else 0
            return 1.0 if ss_res == 0.0 else 0.0
        return 1.0 - ss_res / ss_tot

    def predict_interval(
        self, X, base_prediction=None, *, delta: float = 0.1, method: str = "calibrated", gamma: float = 0.05
    ) -> np.ndarray:
        """Prediction intervals in label units, shape (n, 2): column 0 the lower end, 1 the upper end.

        ``delta``: the miscoverage (0.1 gives 90% intervals); ``method``: one of ``mmc_core.intervals.METHODS``
        (default ``calibrated``: conditional conformal over the groups, per-group coverage; see
        :mod:`mmc_core.intervals` for what each method guarantees); ``gamma``: the smallest group mass the
        ``guaranteed`` intervals are stated for. A binary (classifier) model raises MMCError: a 0/1 outcome has
        no useful interval.
        """
        from .intervals import predict_intervals

        self._check_fitted("predict_interval")
        X = as_table(X)
        lo, hi = predict_intervals(
            self.model_,
            X,
            self._base_for(X, base_prediction, "predict_interval"),
            method=method,
            delta=delta,
            gamma=gamma,
        )
        return np.column_stack([lo, hi])

    def save(self, path):
        """Write the fitted model as JSON (:meth:`load` reads it back)."""
        self._check_fitted("save")
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
            kw = {
                k: (tuple(v) if k == "label_range" and isinstance(v, list) else v)
                for k, v in saved.items()
                if k in valid
            }
            kw.setdefault("shrunken_cells", False)  # saved before the step existed: the fit had none
        else:
            kw = dict(
                alpha=p.alpha,
                beta=p.beta,
                n_buckets=p.m,
                n_moments=len(p.moments) + 1,
                step=p.step,
                odd_moments=p.odd_moments,
                label_range=(model.scale.lo, model.scale.hi),
                calibration_fraction=model.info.get("calibration_fraction", 0.0),
                early_stopping=model.info.get("early_stopping", False),
                max_rounds=p.max_rounds,
                random_state=model.info.get("seed", 0),
                mean_buckets="quantile" if p.mean_edges else "uniform",
                moment_buckets="data" if (p.moment_edges or p.moment_floors) else "range",
                task=model.task,
                positive_label=(model.binary or {}).get("positive"),
                shrunken_cells=False,
            )
        est = cls(**kw)
        est._set_fitted(model)
        est._clear_row_state()
        return est

    def _clear_row_state(self) -> None:
        """A loaded estimator has no fitting rows: the row-level attributes of a fit are None."""
        self.fit_index_ = self.calibration_index_ = None
        self.fit_mean_unit_ = self.fit_moments_unit_ = None
        self.oof_predictions_unit_ = None

    @classmethod
    def load(cls, path) -> "MomentMulticalibrator":
        return cls.from_model(FittedModel.load(path))

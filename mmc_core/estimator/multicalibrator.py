"""The public estimator: scikit-learn style fit / predict over tables, labels and groups.

A thin front end: what a fit decides before the descent is :mod:`mmc_core.estimator.fit_rows`, the thresholds and grids
:mod:`mmc_core.fit.fit_params`, the in-memory fit and the steps after the descent :mod:`mmc_core.estimator.fit_memory`, the
steps both engines share :mod:`mmc_core.fit.fit_steps`; the threshold rules, table handling, scikit-learn parameters
and the binary task are modules of their own (``thresholds``, ``tables``, ``sklearn_params``, ``binary``).

Why over ~600 lines: the class docstring alone is ~210 lines (every constructor parameter, the fitted attributes
and examples, in numpydoc, which the API reference is generated from); the code is ~510.
"""

from __future__ import annotations

import numpy as np

from ..auditing.binary import TASK_BINARY
from ..common.errors import DataError, MMCError, not_fitted
from ..common.tables import as_table, count_rows, to_label_array
from ..fit.fit_steps import count_labels
from ..fit.model import FittedModel
from ..fit.parameters import check_value
from ..fit.sklearn_params import SklearnParams
from ..groups.group_set import GroupSet
from .fit_memory import fit_in_memory, plan_of_rows
from .fit_rows import fitting_rows

__all__ = ["MomentMulticalibrator"]


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
        the shrunken cells (their weights; the cells' penalty; nothing is fitted on them but the variance's
        level and whole-group shrinkage, at penalties of thousands of rows), and calibrate the
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
        0/1 outcome is {0}, {1} or {0, 1}; the per-group classifier audit of ``mmc_core.auditing.metrics.audit``
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
    base_recalibration : {"auto", "none", "affine", "group-linear", "group-logistic"}
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
        for z <= 0; :mod:`mmc_core.fit.recalibrate`; ``init.mean`` kind "base-group-linear"; the check is in
        ``model_.info["base_recalibration"]``). "none": the base prediction as given. "auto" (default):
        "group-linear" (both engines: the Dask engine fits the map on the client on the numpy engine's own sample of
        the rows; "affine" is numpy only) and, for a 0/1 label with the numpy engine, then a per-group logistic
        map kept only when the whole fit with it predicts the held-out rows better than the whole fit without it
        by at least ``KEEP_Z`` (1) standard errors of the rows' paired log-loss differences (two fits; the second
        is not shown live; ``model_.info["base_recalibration"]["logistic"]["final"]``). "group-logistic" (0/1
        labels only, numpy engine): "group-linear", then the per-group logistic map on its own gate:
        logit p = logit(base) + an intercept, slope and bend of logit(base) overall and per listed group,
        ridge-penalized with the penalty chosen by 5-fold cross-validation, applied at the share that
        out-of-sample rows bear out on the logit scale, not at all where it leaves a group more biased
        (:mod:`mmc_core.fit.logistic_map`; ``init.mean["logistic"]``, version 9; its check in
        ``model_.info["base_recalibration"]["logistic"]``).
    interval_calibration : {"held-out", "cross-fit", "auto"}
        Which rows the data-driven intervals (``mmc_core.intervals``) are calibrated on (needs
        calibration_fraction > 0; the final model is fitted the same way with either). "held-out" (default):
        the held-out rows, with the final model's predictions (exact split-conformal-type guarantees).
        "cross-fit": every row, with out-of-fold predictions: the rows are split into 5 seeded folds and a
        model with these same parameters is fitted on the other four folds for each (:mod:`mmc_core.estimator.crossfit`),
        i.e. 5 extra fits. A group calibrates on 4x its held-out rows, so its interval is narrower, but the
        guarantees hold only approximately (:mod:`mmc_core.intervals`), and on two unseen tables (cps91 and
        labsup without a base, benchmarks/README.md, issue 9) 6-12% of the groups were under-covered, against
        at most 0.3% with "held-out": an option, not the default. "auto": "cross-fit" in memory up to
        ``mmc_core.estimator.crossfit.CROSS_FIT_MAX_ROWS`` (200,000) rows, "held-out" above that and with the Dask engine
        ("cross-fit" there is an MMCError). A fit stopped by ``stop`` or ``callback`` is calibrated on the
        held-out rows either way.
    base_column : str or None
        The column of X that holds the base model's mean prediction (label units), read by ``fit`` and every
        prediction method, so that the estimator needs only X and y (scikit-learn's ``Pipeline``,
        ``cross_val_score``, ``GridSearchCV``). A ``base_prediction`` argument wins when given. Default None:
        no base column (without a ``base_prediction`` argument the descent starts from the label's mean).
    variance_column : str or None
        The column of X that holds a base model's *variance* prediction (label units squared, >= 0), read by
        ``fit`` and every prediction method: the variance then starts from ``factor x column ** power``
        instead of from one constant, and the descent and the moment cells correct it per group. ``power`` (0,
        0.25, 0.5, 0.75 or 1: how far the column is trusted; 0 is the constant start) is the one with the best
        Gaussian log score on the fitting rows among those that beat the constant start by 2.25 standard
        errors (else 0), ``factor`` gives them the constant start's level; both are in ``model_.init_variance``
        and ``info["base_variance"]``. A spread that follows a feature no group carries reaches the fit only
        this way. Fit that model on rows other than these (as the base prediction's): out-of-fold values on
        the fitting rows and a model's values on new rows differ in spread, and the fit then corrects cells by
        that difference (benchmarks/README.md, issue 34). Needs n_moments >= 2; in-memory engine only.
        Default None: the variance starts from the fitting rows' mean squared residual.
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
        held-out rows and applied at the share of it they bear out (:mod:`mmc_core.fit.cells`); nothing is fitted
        on the held-out rows, which the intervals are calibrated on. The descent only corrects cells that pass their own test; this takes the small
        miscalibrations it leaves, in proportion. Default True; the model then has ``cells`` (a version-5
        file; version 4: the empirical-Bayes step before 2026-11-27) and ``info["shrunken_cells"]`` says what
        happened. The stated multicalibration (``alpha_``, the
        achieved errors) is measured after this step. Each positive moment (the variance, ...) then gets the
        same step on the log scale (:func:`mmc_core.fit.cells.gated_moment_cells`): in four stages, whole
        groups, whole groups with one curve along the tenths of the mean prediction (or of its part the groups
        do not explain, whichever the held-out rows prefer; the curve's own penalty from the spread of its
        tenths, at most the groups'), (group, tenth of the mean) and (group, tenth of
        the moment prediction) cells, a penalized log-link ridge of the pseudo-labels (squared residuals
        around the final mean) multiplies each cell's predictions, shrunk by the rows behind it (nested
        groups, such as intersections, more: by the residual dispersion over the variance of their own
        deviations beyond their parents', a method-of-moments estimate on the fitting rows); the held-out rows
        choose the penalty by the QLIKE loss and the share of it they bear out, apply it only when their
        evidence for it reaches z >= 2.25 (3 for the stages along the mean) and its structure beyond one level
        beats the same choice made on at least 98 of 100 shuffles of the held-out rows' ratios (heavy tails),
        and drop it where it leaves a group's variance more misstated than before; then one round of whole
        groups fitted on every post-processing row (fitting and held-out), its penalty (3,000 or 10,000
        rows, times the ratios' dispersion; 30 to 1,000 too when none of 1,000 shuffles of the ratios' ranks
        finds as much difference between the groups) chosen by generalized cross-validation, which a table's
        held-out quarter is too small to judge, dropped where a group's held-out rows contradict it
        (``info["moment_cells"][k]["groups"]``); then, when the ratios' ranks still differ between the groups
        beyond chance (the same shuffles), a second whole-groups round on the QLIKE scale: the log-link ridge at
        the penalty (3 to 10,000 rows) of least QLIKE over five folds of those rows
        (``["groups_qlike"]``); then the level
        (``model_.moment_cells``; ``info["moment_cells"]`` says what happened; ``beta_`` is measured after
        it). With alpha and beta both "se" and at least 100 held-out rows the descent then makes no moment
        update (``model_.params.z_moment``): the step fits the moments alone (a version-10 file).

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
    plan_ : FitPlan
        What the last fit decided before its descent and then followed: rows fitted and held out, the bucket
        counts tried, the thresholds of each, and the stages it ran (None on a loaded estimator).

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from mmc_core import MomentMulticalibrator
    >>> from mmc_core.common.synthetic import demo_distribution
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
        variance_column=None,
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
        self.variance_column = variance_column

    # ------------------------------------------------------------------------------------------
    def planned_thresholds(self, X, y, groups=None, base_prediction=None, label_name: str = "label") -> dict:
        """The thresholds ``fit(X, y, groups, base_prediction)`` will use, computed by the fit's own steps
        (same checks, label scale and calibration split, then the fit's plan, :func:`mmc_core.fit.plan.plan_fit`)
        without running the descent: the one resolver of the "auto" and "se" rules (a number is returned as given).

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
        d = fitting_rows(self, X, y, groups, base_prediction, label_name, None)
        params, _ = plan_of_rows(self, d).descent(int(self.n_buckets))
        resid = d.resid
        assert resid is not None  # freed only after a descent
        rules = (self.alpha, self.beta)
        # "se" is the per-cell test of the exact step; with the paper's step an "se" threshold falls back to the
        # "auto" noise rule (mmc_core.fit.fit_params), and the preview says so
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
            "resid_sd": float(np.std(resid)),
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
            self._fit_dask(X, y, groups, base_prediction, callback, label_name, base_name, stop, client)
        else:
            if label_name == "label" and isinstance(getattr(y, "name", None), str) and y.name:
                label_name = y.name  # a pandas Series names its column: errors and the model then say which
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
                check_value("max_order", order)
                if dask:
                    from ..engines.dask_engine import groups_from_columns

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

    def _fit_dask(self, X, y, groups, base_prediction, callback, label_name, base_name, stop, client) -> None:
        """The Dask engine's fit (:func:`mmc_core.engines.dask_engine.fit_dask`), which sets the fitted attributes."""
        from ..common.threads import one_blas_thread
        from ..engines.dask_engine import fit_dask  # lazily: importing mmc_core never imports dask

        if self.variance_column is not None:
            raise MMCError(
                f"variance_column={self.variance_column!r} is not supported by the Dask engine: fit in memory, "
                "or leave variance_column unset"
            )

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

    def _fit_in_memory(self, X, y, groups, base_prediction, callback, label_name, base_name, stop):
        """The numpy engine's fit (:func:`mmc_core.estimator.fit_memory.fit_in_memory`), then the fitted attributes."""
        from ..common.memory import reuse_freed_memory
        from ..common.threads import one_blas_thread

        with reuse_freed_memory(count_labels(y)), one_blas_thread():
            fitted = fit_in_memory(
                self,
                X,
                y,
                groups,
                base_prediction,
                callback,
                label_name,
                base_name,
                stop,
                calibrate_intervals=getattr(self, "_calibrate_intervals", True),  # False in a cross-fit's folds
            )
        self._set_fitted(fitted.model)
        self.plan_ = fitted.plan
        # row-level state of this fit (not saved with the model: a loaded estimator has None here)
        self.fit_index_ = fitted.fit_index
        self.calibration_index_ = fitted.calibration_index
        self.fit_mean_unit_, self.fit_moments_unit_ = fitted.fit_mean_unit, fitted.fit_moments_unit
        self.oof_predictions_unit_ = fitted.oof_predictions_unit  # cross-fit: every row's out-of-fold predictions
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
        from ..intervals import predict_intervals

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
    def from_model(cls, model: FittedModel) -> MomentMulticalibrator:
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
        self.plan_ = None
        self.fit_index_ = self.calibration_index_ = None
        self.fit_mean_unit_ = self.fit_moments_unit_ = None
        self.oof_predictions_unit_ = None

    @classmethod
    def load(cls, path) -> MomentMulticalibrator:
        return cls.from_model(FittedModel.load(path))

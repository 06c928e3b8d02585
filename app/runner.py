"""The dashboard's engine room: label preparation, data splits, base models, the full audit pipeline, and a
background fitting job that can be watched and stopped.

Everything here is plain Python (no Streamlit), so it is unit-tested directly (tests/test_runner.py) and
the Streamlit pages stay thin. The pipeline (:func:`run_pipeline`) is:

1. prepare the label (:func:`prepare_label`): numeric check, optional log, range (observed / declared /
   robust = clipped at quantiles);
2. split the rows (:func:`split_rows`): base-model training rows (only when a base model is fitted in the
   app), multicalibration fitting rows (of which the estimator itself holds out ``calibration_fraction``
   for interval calibration and held-out tracking), and test rows on which the audit is computed;
3. the base prediction (:func:`base_prediction`): none (constant start), an existing column, or a
   scikit-learn model fitted on the base rows only (cached by :func:`cached_base_model`);
4. fit :class:`mmc_core.MomentMulticalibrator` with a callback (live history, stop flag);
5. audit the fitted model on the test rows (:func:`mmc_core.metrics.audit`).

:class:`FitJob` runs the pipeline in a daemon thread or (the dashboard) in a child process forked from a
preloaded fork server. Its ``history`` list grows one row per descent round (the page polls it a few times a
second to redraw the convergence chart). :meth:`FitJob.stop` sets a flag that is polled between chunks of
boosting iterations of the base model (nothing is kept), before every single update of the descent (the model
so far is kept, marked "stopped by user", and not audited: :func:`audit_run` audits it on request), and
abandons a running audit at once.
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from mmc_core.errors import DataError, MMCError

__all__ = [
    "LabelSpec", "BaseSpec", "SplitSpec", "FitSettings", "PreparedLabel", "AuditRun", "FitJob",
    "prepare_label", "split_rows", "base_prediction", "fit_base_model", "run_pipeline", "predictions_table",
    "row_details", "frame_key", "STEP_HELP", "BASE_MODELS", "SPLIT_NAMES", "StoppedByUser", "audit_run",
    "NOT_AUDITED", "DiscoverSpec", "DiscoverJob", "DiscoverResult", "run_discovery", "describe_finding",
    "discovered_group", "DISCOVERED_PREFIX",
]

SPLIT_NAMES = {"base": "base-model training", "fit": "multicalibration fitting",
               "calibration": "interval calibration (held out of fitting)", "test": "test (audit)"}
BASE_MODELS = {
    "hgb": "gradient boosting (HistGradientBoostingRegressor)",
    "ridge": "ridge regression (one-hot + standardised)",
}
STEP_HELP = {
    "exact": "exact: shift each violating cell by its mean residual (fast; at least the paper's progress)",
    "paper": "paper: move by alpha (beta) per update, as in the paper (slow; the textbook algorithm)",
}


# ---------------------------------------------------------------------------------------------------
# specs (frozen, hashable: they key the caches)
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LabelSpec:
    """How the label column becomes the fitted label.

    scaling: ``observed`` (min / max of all rows), ``declared`` (``lo``, ``hi``; rows outside are an error)
    or ``robust`` (clip at the ``q_lo`` / ``q_hi`` quantiles of all rows; the clipped count is reported).
    log: fit ln(label) (all values must be > 0); every output is then in log units.
    """

    column: str
    scaling: str = "observed"
    lo: float | None = None
    hi: float | None = None
    q_lo: float = 0.01
    q_hi: float = 0.99
    log: bool = False
    # binary labels (two distinct values): "auto" switches to a classifier audit; ``positive`` names the
    # positive class (as text) when the values are not 0/1 or true/false. Scaling and log are then unused.
    task: str = "auto"
    positive: str | None = None


@dataclass(frozen=True)
class BaseSpec:
    """The initial mean: ``none`` (the label mean), ``column`` (an existing prediction column, label units)
    or ``model`` (a scikit-learn model, ``model`` in BASE_MODELS, fitted on ``features`` of the base rows)."""

    kind: str = "none"
    column: str | None = None
    model: str = "hgb"
    features: tuple = ()


@dataclass(frozen=True)
class SplitSpec:
    """Shares of all rows: ``test`` for the audit, ``base`` for training an in-app base model (ignored
    otherwise); the rest is for multicalibration. Seeded, stratified by nothing (a plain permutation)."""

    test: float = 0.3
    base: float = 0.3
    seed: int = 0


@dataclass(frozen=True)
class FitSettings:
    """The estimator's parameters and the audit's. ``alpha`` / ``beta`` may be a rule, as in ``mmc fit``: "se"
    (the library default: the per-cell standard-error test) or "auto" (the older noise threshold);
    ``early_stopping`` True, False or "auto" (the library default: on whenever rows are held out)."""

    alpha: float | str = "se"
    beta: float | str = "se"
    n_buckets: int = 5
    n_moments: int = 2
    step: str = "exact"
    odd_moments: str = "absolute"
    calibration_fraction: float = 0.25
    early_stopping: bool | str = "auto"
    max_rounds: int | None = None
    delta: float = 0.1
    gamma: float = 0.05
    n_boot: int = 200
    threshold: float = 0.5  # binary labels: the decision threshold of the audit's rates
    # discovery during the fit (``mmc fit --discover``): audit the fitted model with the learning oracle on the
    # fitting rows, add the sets it accepts as groups, refit (at most ``discover_rounds`` times)
    discover: bool = False
    discover_features: tuple = ()
    discover_depth: int = 3
    discover_min_mass: float = 0.01
    discover_rounds: int = 2


@dataclass
class PreparedLabel:
    y: np.ndarray          # fitted label (after log / clipping), all rows
    lo: float
    hi: float
    source: str            # observed | declared | robust
    name: str              # display name, e.g. "wage" or "log(wage)"
    n_clipped: int = 0
    note: str = ""
    task: str = "regression"   # or "binary": y is 0/1, lo = 0, hi = 1
    classes: tuple = ()        # binary: (negative, positive) as in the data


@dataclass
class AuditRun:
    """Everything one pipeline run produced (kept in session state; survives reruns)."""

    model: object                      # mmc_core.FittedModel
    history: list
    converged: bool
    stopped: bool
    label: PreparedLabel
    base: np.ndarray | None            # base prediction of every row (label units after log), or None
    base_spec: BaseSpec
    label_spec: LabelSpec
    split: dict                        # name -> row indices (base / fit / calibration / test)
    settings: FitSettings
    groups_json: dict
    audit: object = None               # mmc_core.metrics.AuditResult on the test rows (None if unavailable)
    audit_error: str = ""
    timings: dict = field(default_factory=dict)
    data_key: str = ""
    data_name: str = ""
    base_metrics: dict = field(default_factory=dict)
    finished_at: float = 0.0
    thresholds: dict = field(default_factory=dict)  # alpha, beta, moment_betas actually used; auto: bool
    split_seed: int = 0

    @property
    def alpha(self) -> float:
        return float(self.thresholds.get("alpha", self.settings.alpha))

    @property
    def beta(self) -> float:
        return float(self.thresholds.get("beta", self.settings.beta))

    @property
    def test_rows(self) -> np.ndarray:
        return self.split["test"]

    def summary(self) -> dict:
        info = getattr(self.model, "info", {}) or {}
        return {
            "converged": self.converged, "stopped": self.stopped, "rounds": info.get("rounds"),
            "kept_round": info.get("kept_round"), "mean_updates": info.get("mean_updates"),
            "moment_updates": info.get("moment_updates"), "n_groups": info.get("n_groups"),
            "split": {k: int(v.size) for k, v in self.split.items()}, "timings": dict(self.timings),
            "task": getattr(self.label, "task", "regression"),
        }


# ---------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------
def frame_key(df: pd.DataFrame, name: str = "") -> str:
    """A content hash of a table (fast: pandas' row hashes on at most all rows, summed with shape/columns)."""
    h = hashlib.sha1()
    h.update(name.encode())
    h.update(repr((df.shape, [str(c) for c in df.columns], [str(t) for t in df.dtypes])).encode())
    try:
        h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    except TypeError:  # unhashable cells (lists): fall back to the CSV text of the table
        h.update(df.to_csv(index=False).encode())
    return h.hexdigest()[:16]


def prepare_label(df: pd.DataFrame, spec: LabelSpec) -> PreparedLabel:
    """The fitted label of every row and its range, or a DataError explaining what is wrong."""
    from app.io import numeric_column

    if not spec.column:
        raise DataError("choose a label column")
    binary = binary_label(df, spec)
    if binary is not None:
        return binary
    y = numeric_column(df, spec.column, "label column")
    name = spec.column
    note = ""
    if spec.log:
        bad = int(np.sum(y <= 0))
        if bad:
            raise DataError(f"log scale needs a positive label: {bad} row(s) of '{spec.column}' are <= 0 "
                            f"(smallest {float(np.min(y)):g}); turn log off or use a shifted column")
        y = np.log(y)
        name = f"log({spec.column})"
    n_clipped = 0
    if spec.scaling == "observed":
        lo, hi = float(np.min(y)), float(np.max(y))
        note = f"observed range of all {y.size:,} rows"
    elif spec.scaling == "declared":
        if spec.lo is None or spec.hi is None:
            raise DataError("a declared label range needs both LO and HI")
        lo, hi = float(spec.lo), float(spec.hi)
        if spec.log:
            if lo <= 0:
                raise DataError("with log scale the declared range must be positive (it is given in label units)")
            lo, hi = math.log(lo), math.log(hi)
        if not hi > lo:
            raise DataError(f"the declared label range needs LO < HI, got [{spec.lo}, {spec.hi}]")
        outside = int(np.sum((y < lo) | (y > hi)))
        if outside:
            raise DataError(f"{outside} label value(s) lie outside the declared range [{spec.lo:g}, {spec.hi:g}] "
                            f"(min {float(np.min(y)):g}, max {float(np.max(y)):g}); widen it or choose 'robust'")
        note = "declared range"
    elif spec.scaling == "robust":
        if not 0 <= spec.q_lo < spec.q_hi <= 1:
            raise DataError(f"robust range needs 0 <= lower quantile < upper quantile <= 1, got {spec.q_lo}, {spec.q_hi}")
        lo, hi = (float(v) for v in np.quantile(y, [spec.q_lo, spec.q_hi]))
        n_clipped = int(np.sum((y < lo) | (y > hi)))
        y = np.clip(y, lo, hi)
        note = f"clipped at the {spec.q_lo:.1%} and {spec.q_hi:.1%} quantiles: {n_clipped:,} row(s) clipped"
    else:
        raise DataError(f"unknown label scaling {spec.scaling!r}")
    if not hi > lo:
        raise DataError(f"the label '{spec.column}' is constant ({lo:g}) in this range; there is nothing to calibrate")
    return PreparedLabel(y=y, lo=lo, hi=hi, source=spec.scaling, name=name, n_clipped=n_clipped, note=note)


def label_values(df: pd.DataFrame, column: str) -> list:
    """The distinct non-missing values of a column (at most 3 are looked at: enough to tell binary)."""
    vals = pd.unique(df[column].dropna())
    return list(vals[:3])


def binary_label(df: pd.DataFrame, spec: LabelSpec) -> PreparedLabel | None:
    """The prepared 0/1 label when ``spec.column`` is binary (two distinct values) and the task allows it; None
    for a regression label. A DataError names the column when the positive class is needed or unknown."""
    from mmc_core.estimator import resolve_task

    if spec.task == "regression" or spec.column not in df.columns:
        return None
    s = df[spec.column]
    if s.nunique(dropna=True) != 2:
        if spec.task == "binary":
            raise DataError(f"the label '{spec.column}' is not binary: it has {s.nunique(dropna=True)} distinct values")
        return None
    miss = int(s.isna().sum())
    if miss:
        raise DataError(f"the binary label '{spec.column}' has {miss:,} missing value(s): drop those rows first")
    positive = spec.positive if spec.positive not in ("", None) else None
    numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
    if positive is not None and numeric:
        try:
            positive = float(positive)
        except ValueError:
            raise DataError(f"positive class {spec.positive!r} is not a value of the label '{spec.column}'") from None
    if positive is not None and pd.api.types.is_bool_dtype(s):
        positive = {"true": True, "false": False}.get(str(positive).lower(), positive)
    if positive is None and not (pd.api.types.is_bool_dtype(s) or (numeric and set(pd.unique(s)) <= {0, 1})):
        shown = ", ".join(repr(v) for v in sorted(pd.unique(s), key=str))
        raise DataError(f"the label '{spec.column}' has the two values {shown}: choose its positive class (the "
                        "outcome whose probability is predicted)")
    _, y, info = resolve_task(s, "binary", positive, spec.column)
    neg, pos = info["classes"]
    return PreparedLabel(y=y, lo=0.0, hi=1.0, source="binary", name=spec.column,
                         note=f"binary label: positive class {pos!s} ({int(y.sum()):,} of {y.size:,} rows)",
                         task="binary", classes=(neg, pos))


def split_rows(n: int, spec: SplitSpec, with_base_model: bool, calibration_fraction: float = 0.0) -> dict:
    """Disjoint sorted row indices: ``base`` (empty without an in-app model), ``fit``, ``test``.

    ``calibration`` is reported for display only: the estimator draws it from the fit rows itself
    (see :func:`run_pipeline`, which replaces it with the estimator's actual choice)."""
    if not 0 < spec.test < 1:
        raise DataError(f"the test share must be between 0 and 1, got {spec.test}")
    base_share = spec.base if with_base_model else 0.0
    if not 0 <= base_share < 1 or spec.test + base_share >= 0.95:
        raise DataError(f"test share {spec.test:.0%} + base-model share {base_share:.0%} leave too few rows "
                        "for multicalibration (keep their sum below 95%)")
    perm = np.random.default_rng(spec.seed).permutation(n)
    n_test = max(1, int(round(spec.test * n)))
    n_base = int(round(base_share * n))
    test = np.sort(perm[:n_test])
    base = np.sort(perm[n_test:n_test + n_base])
    fit = np.sort(perm[n_test + n_base:])
    if fit.size < 20:
        raise DataError(f"only {fit.size} row(s) left for multicalibration; use a larger table or smaller shares")
    if with_base_model and base.size < 10:
        raise DataError(f"only {base.size} row(s) to train the base model; raise its share")
    n_cal = int(round(calibration_fraction * fit.size))
    return {"base": base, "fit": fit, "test": test, "calibration": np.zeros(n_cal, dtype=np.int64)}


def _feature_frame(df: pd.DataFrame, features) -> pd.DataFrame:
    X = df[list(features)].copy()
    for c in X.columns:
        s = X[c]
        if pd.api.types.is_bool_dtype(s):
            X[c] = s.astype(float)
        elif not pd.api.types.is_numeric_dtype(s):
            X[c] = s.astype("string").astype(object).where(s.notna(), None)
    return X


def debug(msg: str):
    """Timing notes on stderr when MMC_DEBUG_TIMING is set (used to measure Stop latency in the server)."""
    import os
    import sys

    if os.environ.get("MMC_DEBUG_TIMING"):
        print(f"[mmc {time.time():.3f}] {msg}", file=sys.stderr, flush=True)


_PREWARM: list = []
SWITCH_INTERVAL = 0.0005  # seconds; Python's default is 0.005
_BASE_LOCK = threading.Lock()


def prewarm():
    """Import scikit-learn in a background thread, once per process. The first import takes seconds (scipy and
    all), holds the import lock and the interpreter, and used to happen inside the first in-app base-model fit,
    where Stop could not interrupt it and it counted as fit time."""
    with _BASE_LOCK:
        if _PREWARM:
            return
        # The fit thread (scikit-learn's Cython drops and retakes the GIL thousands of times per boosting
        # iteration) and the server's page runs share one interpreter: with the default 5 ms switch interval each
        # retake could wait 5 ms for a busy page run (the convoy effect), which made in-app fits many times slower.
        sys.setswitchinterval(SWITCH_INTERVAL)
        t = threading.Thread(target=_import_sklearn, name="mmc-prewarm", daemon=True)
        _PREWARM.append(t)
    t.start()


def _import_sklearn():
    try:
        import sklearn.compose  # noqa: F401
        import sklearn.ensemble  # noqa: F401
        import sklearn.impute  # noqa: F401
        import sklearn.linear_model  # noqa: F401
        import sklearn.pipeline  # noqa: F401
        import sklearn.preprocessing  # noqa: F401
    except ImportError:  # pragma: no cover - the base-model fit reports it
        pass
    try:  # start the fork server of background runs now, not on the first Run click
        _mp_context()
        from multiprocessing import forkserver

        forkserver.ensure_running()
    except Exception:  # noqa: BLE001 - the first run starts it then
        pass


class StoppedByUser(MMCError):
    """Raised inside the pipeline when Stop was pressed in a phase that keeps nothing (the base-model fit)."""


BOOST_CHUNK = 10  # boosting iterations between two looks at the stop flag


def _limit_threads():
    """At most one OpenMP / BLAS thread for fits inside the dashboard: the server's own threads (page runs,
    the 4-per-second live view) compete for the same cores, and spinning OpenMP workers waiting for the GIL made
    an in-app gradient-boosting fit over ten times slower than the same fit in a plain Python process."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1)


class _Probability:
    """A fitted scikit-learn classifier whose ``predict`` is the probability of class 1 (binary labels)."""

    def __init__(self, model):
        self.model = model

    def predict(self, X):
        return self.model.predict_proba(X)[:, 1]


def fit_base_model(X: pd.DataFrame, y: np.ndarray, kind: str = "hgb", seed: int = 0, stop=None, progress=None,
                   binary: bool = False):
    """A scikit-learn pipeline (one-hot for text columns) fitted on (X, y).

    ``stop()`` is polled between chunks of BOOST_CHUNK boosting iterations (gradient boosting is grown with
    ``warm_start``, which gives the same model as one fit); when it returns True, :class:`StoppedByUser` is
    raised. ``progress(iterations_done)`` is called after every chunk."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    if len(X) == 0:
        raise DataError("no rows to train the base model on")
    cat = [c for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])]
    num = [c for c in X.columns if c not in cat]
    if binary:
        return _fit_base_classifier(X, y, kind, seed, stop, progress, cat, num)
    if kind == "hgb":
        from sklearn.ensemble import HistGradientBoostingRegressor

        pre = ColumnTransformer(
            [("cat", make_pipeline(SimpleImputer(strategy="constant", fill_value="(missing)"),
                                   OneHotEncoder(handle_unknown="ignore", max_categories=30,
                                                 sparse_output=False)), cat),
             ("num", "passthrough", num)], remainder="drop")
        max_iter = 200
        reg = HistGradientBoostingRegressor(max_iter=BOOST_CHUNK, learning_rate=0.08, early_stopping=True,
                                            validation_fraction=0.15, random_state=seed, warm_start=True)
        with _limit_threads():
            Xt = pre.fit_transform(X)
            done = 0
            while done < max_iter:
                if stop is not None and stop():
                    raise StoppedByUser("stopped during the base-model fit")
                target = min(done + BOOST_CHUNK, max_iter)
                reg.set_params(max_iter=target)
                reg.fit(Xt, y)
                if progress is not None:
                    progress(int(reg.n_iter_))
                if reg.n_iter_ < target:  # early stopping ended the boosting
                    break
                done = target
        return Pipeline([("pre", pre), ("reg", reg)])
    if kind == "ridge":
        from sklearn.linear_model import RidgeCV

        pre = ColumnTransformer(
            [("cat", make_pipeline(SimpleImputer(strategy="constant", fill_value="(missing)"),
                                   OneHotEncoder(handle_unknown="ignore", max_categories=30)), cat),
             ("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), num)], remainder="drop")
        pipe = make_pipeline(pre, RidgeCV(alphas=np.logspace(-3, 3, 13)))
        if stop is not None and stop():
            raise StoppedByUser("stopped during the base-model fit")
        with _limit_threads():
            pipe.fit(X, y)
        return pipe
    raise MMCError(f"unknown base model {kind!r}; choose one of {', '.join(BASE_MODELS)}")


def _fit_base_classifier(X, y, kind, seed, stop, progress, cat, num):
    """Binary labels: gradient-boosted trees or a (ridge-penalised) logistic regression, predicting the
    probability of the positive class (a regression on 0/1 would give values outside [0, 1])."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    if len(np.unique(y)) < 2:
        raise DataError("the base-model rows hold only one class of the label: use a larger base-model share")
    if kind == "hgb":
        from sklearn.ensemble import HistGradientBoostingClassifier

        pre = ColumnTransformer(
            [("cat", make_pipeline(SimpleImputer(strategy="constant", fill_value="(missing)"),
                                   OneHotEncoder(handle_unknown="ignore", max_categories=30,
                                                 sparse_output=False)), cat),
             ("num", "passthrough", num)], remainder="drop")
        max_iter = 200
        clf = HistGradientBoostingClassifier(max_iter=BOOST_CHUNK, learning_rate=0.08, early_stopping=True,
                                             validation_fraction=0.15, random_state=seed, warm_start=True)
        with _limit_threads():
            Xt = pre.fit_transform(X)
            done = 0
            while done < max_iter:
                if stop is not None and stop():
                    raise StoppedByUser("stopped during the base-model fit")
                target = min(done + BOOST_CHUNK, max_iter)
                clf.set_params(max_iter=target)
                clf.fit(Xt, y)
                if progress is not None:
                    progress(int(clf.n_iter_))
                if clf.n_iter_ < target:
                    break
                done = target
        return _Probability(Pipeline([("pre", pre), ("clf", clf)]))
    if kind == "ridge":
        from sklearn.linear_model import LogisticRegressionCV

        pre = ColumnTransformer(
            [("cat", make_pipeline(SimpleImputer(strategy="constant", fill_value="(missing)"),
                                   OneHotEncoder(handle_unknown="ignore", max_categories=30)), cat),
             ("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), num)], remainder="drop")
        pipe = make_pipeline(pre, LogisticRegressionCV(Cs=np.logspace(-3, 3, 7), max_iter=2000, scoring="neg_log_loss"))
        if stop is not None and stop():
            raise StoppedByUser("stopped during the base-model fit")
        with _limit_threads():
            pipe.fit(X, y)
        return _Probability(pipe)
    raise MMCError(f"unknown base model {kind!r}; choose one of {', '.join(BASE_MODELS)}")


_BASE_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()


def cached_base_model(key: tuple, df: pd.DataFrame, y: np.ndarray, rows: np.ndarray, spec: BaseSpec, seed: int,
                      stop=None, progress=None, binary: bool = False):
    """Predictions of an in-app base model on all rows, fitted on ``rows`` only; cached on ``key`` (data hash,
    label, split, spec, row digest) so re-running the multicalibration with new parameters does not refit it."""
    with _BASE_LOCK:
        if key in _BASE_CACHE:
            _BASE_CACHE.move_to_end(key)
            return _BASE_CACHE[key]
    X = _feature_frame(df, spec.features)
    try:
        model = fit_base_model(X.iloc[rows], y[rows], spec.model, seed, stop=stop, progress=progress, binary=binary)
        with _limit_threads():
            pred = np.asarray(model.predict(X), dtype=float)
    except MMCError:
        raise
    except ValueError as e:  # scikit-learn's own checks: say which model and features
        raise DataError(f"the base model could not be fitted on features {', '.join(map(str, spec.features))}: "
                        f"{str(e).splitlines()[0]}") from None
    out = (pred, model)
    with _BASE_LOCK:
        _BASE_CACHE[key] = out
        while len(_BASE_CACHE) > 4:
            _BASE_CACHE.popitem(last=False)
    return out


def base_prediction(df: pd.DataFrame, label: PreparedLabel, label_spec: LabelSpec, spec: BaseSpec,
                    split: dict, split_spec: SplitSpec, data_key: str = "", stop=None, progress=None):
    """(base prediction of every row in fitted-label units clipped to the label range, or None; note)."""
    from app.io import numeric_column

    if spec.kind == "none":
        return None, "no base model: the mean starts at the label mean of the fitting rows"
    if spec.kind == "column":
        if not spec.column:
            raise DataError("choose the base prediction column")
        if spec.column == label_spec.column:
            raise DataError("the base prediction cannot be the label column itself")
        b = numeric_column(df, spec.column, "base prediction column")
        if label_spec.log:
            if np.any(b <= 0):
                raise DataError(f"log scale needs a positive base prediction; '{spec.column}' has values <= 0")
            b = np.log(b)
        note = f"base prediction: column '{spec.column}'"
    elif spec.kind == "model":
        feats = [f for f in spec.features if f != label_spec.column]
        if not feats:
            raise DataError("choose at least one feature column for the base model")
        missing = [f for f in feats if f not in df.columns]
        if missing:
            raise DataError(f"feature column(s) not in the data: {', '.join(missing)}")
        from app.validate import unusable_feature_error

        problem = unusable_feature_error(df, feats)
        if problem:
            raise DataError(problem)
        if split["base"].size == 0:
            raise DataError("no rows to train the base model on (the split gives it none)")
        spec = BaseSpec("model", None, spec.model, tuple(feats))
        # the key holds what the model is trained on -- its rows, their labels and features -- so an edited
        # table under the same name (or no data_key at all) never gets another table's model
        rows = split["base"]
        h = hashlib.sha1(np.ascontiguousarray(rows).tobytes())
        h.update(np.ascontiguousarray(label.y[rows], dtype=float).tobytes())
        h.update(pd.util.hash_pandas_object(df.iloc[rows][feats], index=False).to_numpy().tobytes())
        key = (data_key, label_spec, spec, split_spec, h.hexdigest()[:24])
        b, _ = cached_base_model(key, df, label.y, split["base"], spec, split_spec.seed, stop=stop, progress=progress,
                                 binary=label.task == "binary")
        note = (f"base prediction: {BASE_MODELS.get(spec.model, spec.model)} on {len(feats)} feature(s), "
                f"trained on {split['base'].size:,} rows that are not used again")
    else:
        raise DataError(f"unknown base prediction kind {spec.kind!r}")
    outside = int(np.sum((b < label.lo) | (b > label.hi)))
    if outside:
        note += f"; {outside:,} prediction(s) outside the label range were clipped into it"
    return np.clip(b, label.lo, label.hi), note


def auto_thresholds(y_unit: np.ndarray, base_unit: np.ndarray | None, n_groups: int, settings: FitSettings,
                    seed: int, groups=None, X=None) -> dict | None:
    """The thresholds ``MomentMulticalibrator(alpha="auto", beta="auto")`` will pick for these fitting rows
    (same calibration split, same noise rule), so the live chart can draw them while the fit runs. The
    fitted model's values are authoritative (``AuditRun.thresholds``).

    With the "se" rule the test is computed by the estimator itself (:func:`se_thresholds`; it needs the
    ``groups`` and the group columns ``X`` of the fitting rows, else None is returned)."""
    from mmc_core.estimator import auto_threshold
    from mmc_core.moments import pseudo_label

    if "se" in (settings.alpha, settings.beta):
        if groups is None or X is None:
            return None
        return se_thresholds(y_unit, base_unit, groups, X, settings, seed)
    n = y_unit.size
    n_cal = int(round(settings.calibration_fraction * n))
    perm = np.random.default_rng(seed).permutation(n)
    fit_idx = np.sort(perm[n_cal:]) if n_cal else np.arange(n)
    mu0 = base_unit[fit_idx] if base_unit is not None else np.full(fit_idx.size, float(np.mean(y_unit[fit_idx])))
    resid = y_unit[fit_idx] - mu0
    moments = tuple(range(2, int(settings.n_moments) + 1))
    m, G, nf = int(settings.n_buckets), int(n_groups), fit_idx.size
    out = {}
    out["alpha"] = auto_threshold(float(np.std(resid)), G * m * (1 + len(moments) * m), nf) \
        if settings.alpha == "auto" else float(settings.alpha)
    per = {a: auto_threshold(float(np.std(pseudo_label(a, resid, settings.odd_moments))), G * m * m, nf)
           for a in moments} if settings.beta == "auto" else {a: float(settings.beta) for a in moments}
    out["beta"] = per.get(2, 0.01) if settings.beta == "auto" else float(settings.beta)
    out["moment_betas"] = per
    return out


def se_thresholds(y_unit: np.ndarray, base_unit: np.ndarray | None, groups, X, settings: FitSettings,
                  seed: int) -> dict:
    """What the "se" rule of ``MomentMulticalibrator`` will use on these fitting rows, computed by the
    estimator's own code (its calibration split and ``_build_params``; nothing re-implemented here):

    ``z`` (a cell is corrected only when its mean residual is at least z of its own standard errors from 0),
    ``z_group`` (whole groups), ``min_count`` (smallest cell corrected), the mass-weighted floors ``alpha`` /
    ``beta`` / ``moment_betas`` a cell must also pass, ``n_fit`` (rows the descent fits on) and ``resid_sd``
    (the residual SD of those rows, unit scale), from which the page derives the smallest correctable error
    of a cell of a given size: z * resid_sd / sqrt(rows)."""
    from mmc_core import GroupSet, MomentMulticalibrator
    from mmc_core.estimator import _take

    est = MomentMulticalibrator(alpha=settings.alpha, beta=settings.beta, n_buckets=settings.n_buckets,
                                n_moments=settings.n_moments, step=settings.step, odd_moments=settings.odd_moments,
                                calibration_fraction=settings.calibration_fraction, random_state=seed)
    n = y_unit.size
    n_cal = int(round(settings.calibration_fraction * n))
    perm = np.random.default_rng(seed).permutation(n)  # the estimator's calibration split (same seed, same n)
    fit_idx = np.sort(perm[n_cal:]) if n_cal else np.arange(n)
    gset = GroupSet.coerce(groups)
    memb = gset.evaluate(_take(X, fit_idx), fit_idx.size)
    mu0 = base_unit[fit_idx] if base_unit is not None else np.full(fit_idx.size, float(np.mean(y_unit[fit_idx])))
    resid = y_unit[fit_idx] - mu0
    moments = tuple(range(2, int(settings.n_moments) + 1))
    params, _ = est._build_params(int(settings.n_buckets), len(gset), fit_idx.size, moments, resid, mu0, memb)
    return {"rule": "se", "alpha": float(params.alpha), "beta": float(params.beta),
            "moment_betas": {int(a): float(params.beta_for(a)) for a in params.moments},
            "z": float(params.z), "z_group": float(params.z_group), "min_count": int(params.min_count),
            "n_fit": int(fit_idx.size), "resid_sd": float(np.std(resid)), "n_groups": len(gset)}


def _groups_json_with_info(groups, given) -> dict:
    """``groups.to_json()`` with the descriptive fields (``kind``, ``p_value``...) of the given groups file kept,
    so the run's groups file still marks discovered groups."""
    out = groups.to_json()
    raw = (given.get("groups") if isinstance(given, dict) else given) or []
    info = {g["name"]: {k: g[k] for k in GROUP_INFO_KEYS if k in g} for g in raw
            if isinstance(g, dict) and isinstance(g.get("name"), str)}
    out["groups"] = [{**g, **info.get(g["name"], {})} for g in out["groups"]]
    return out


def _discovery_features(df: pd.DataFrame, label_spec: LabelSpec, settings: FitSettings) -> list:
    feats = list(settings.discover_features)
    if not feats:
        raise DataError("discovery during the fit needs feature columns: choose them on the Groups page "
                        "(tab 'Discover groups')")
    missing = [f for f in feats if f not in df.columns]
    if missing:
        raise DataError(f"discovery feature column(s) not in the data: {', '.join(map(str, missing))}")
    if label_spec.column in feats:
        raise DataError(f"the label '{label_spec.column}' cannot be a discovery feature")
    return feats


def error_metrics(y, pred) -> dict:
    if pred is None or y.size == 0:
        return {}
    err = pred - y
    ss = float(np.sum((y - y.mean()) ** 2))
    return {"rmse": float(np.sqrt(np.mean(err ** 2))), "mae": float(np.mean(np.abs(err))),
            "r2": float(1 - np.sum(err ** 2) / ss) if ss > 0 else float("nan")}


def _take_rows(df: pd.DataFrame, rows: np.ndarray, columns) -> pd.DataFrame:
    return df.iloc[rows][list(columns)].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------
# the pipeline
# ---------------------------------------------------------------------------------------------------
def run_pipeline(df: pd.DataFrame, label_spec: LabelSpec, base_spec: BaseSpec, split_spec: SplitSpec,
                 groups_json: dict, settings: FitSettings, callback=None, phase=None, data_key: str = "",
                 data_name: str = "", on_thresholds=None, stop=None, on_fitted=None) -> AuditRun:
    """Prepare, split, base model, fit (with ``callback(history_row) -> stop?``), audit. See module doc.

    ``on_thresholds(dict)`` receives the alpha / beta the fit will use (auto values computed) before it starts."""
    from mmc_core import GroupSet, MomentMulticalibrator

    def say(text):
        if phase is not None:
            phase(text)

    timings = {}
    t0 = time.perf_counter()
    say("preparing the label and the split")
    label = prepare_label(df, label_spec)
    groups = GroupSet.from_json(groups_json)
    missing = sorted(c for c in groups.columns() if c not in df.columns)
    if missing:
        raise DataError(f"the groups refer to column(s) not in the data: {', '.join(missing)}")
    if label_spec.column in groups.columns():
        raise DataError(f"the label '{label_spec.column}' cannot define groups (groups must be known for new rows)")
    split = split_rows(len(df), split_spec, base_spec.kind == "model", settings.calibration_fraction)
    timings["prepare"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    progress = None
    if base_spec.kind == "model":
        n_base = split["base"].size
        say(f"fitting the base model on {n_base:,} rows")

        def progress(it):
            say(f"fitting the base model on {n_base:,} rows ({it} boosting iterations)")
    if stop is not None and stop():
        raise StoppedByUser("stopped before the base model was fitted")
    base, base_note = base_prediction(df, label, label_spec, base_spec, split, split_spec, data_key, stop=stop,
                                      progress=progress)
    timings["base_model"] = time.perf_counter() - t1

    group_cols = sorted(groups.columns())
    fit_rows = split["fit"]
    say(f"multicalibrating on {fit_rows.size:,} rows and {len(groups)} groups")
    t2 = time.perf_counter()
    binary = label.task == "binary"
    if binary:  # a classifier audit: the mean (a probability) only; k, delta and gamma are not used
        settings = replace(settings, n_moments=1)
    est = MomentMulticalibrator(
        alpha=settings.alpha, beta=settings.beta, n_buckets=settings.n_buckets, n_moments=settings.n_moments,
        step=settings.step, odd_moments=settings.odd_moments, label_range=(label.lo, label.hi),
        calibration_fraction=settings.calibration_fraction, early_stopping=settings.early_stopping,
        max_rounds=settings.max_rounds, random_state=split_spec.seed, task="binary" if binary else "regression")
    X_fit = _take_rows(df, fit_rows, group_cols)
    if on_thresholds is not None:
        span = label.hi - label.lo
        thr = auto_thresholds((label.y[fit_rows] - label.lo) / span,
                              None if base is None else (base[fit_rows] - label.lo) / span,
                              len(groups), settings, split_spec.seed, groups=groups, X=X_fit)
        if thr is not None:
            on_thresholds(thr)
    base_name = base_spec.column if base_spec.kind == "column" else ("base_model" if base is not None else None)
    if settings.discover:
        feats = _discovery_features(df, label_spec, settings)
        from mmc_core.discover import fit_with_discovery

        say(f"multicalibrating on {fit_rows.size:,} rows and {len(groups)} groups, discovering groups on "
            f"{len(feats)} feature(s)")
        X_fit = _take_rows(df, fit_rows, sorted(set(group_cols) | set(feats)))
        try:
            fit_with_discovery(est, X_fit, label.y[fit_rows], groups,
                               base_prediction=None if base is None else base[fit_rows], features=feats,
                               max_depth=int(settings.discover_depth), min_mass=float(settings.discover_min_mass),
                               rounds=int(settings.discover_rounds), label_name=label.name, base_name=base_name,
                               stop=stop, callback=callback)
        except ImportError as e:
            raise DataError(f"discovery needs scikit-learn ({e})") from None
        groups = est.model_.groups
    else:
        est.fit(X_fit, label.y[fit_rows], groups, base_prediction=None if base is None else base[fit_rows],
                callback=callback, label_name=label.name, base_name=base_name, stop=stop)
    timings["fit"] = time.perf_counter() - t2
    model = est.model_
    if binary:
        model.binary = {"classes": [_json_scalar(c) for c in label.classes], "positive": _json_scalar(label.classes[1]),
                        "floor": float((model.binary or {}).get("floor", 0.0))}
    if label.source in ("observed", "robust"):  # the range was passed explicitly: say where it came from
        from mmc_core import LabelScale

        model.scale = LabelScale(model.scale.lo, model.scale.hi, label.source)
    model.info["label_source"] = label.source
    model.info["label_note"] = label.note
    model.info["base_note"] = base_note
    # groups found by Discover (they carry "kind", as `mmc discover` writes them): recorded in the model, so the
    # Results page and the PDF report can mark them
    model.info["discovered_groups"] = [
        {"name": g["name"], **{k: g[k] for k in GROUP_INFO_KEYS if k in g}}
        for g in (groups_json.get("groups") if isinstance(groups_json, dict) else groups_json) or []
        if isinstance(g, dict) and "kind" in g and g.get("name") in set(groups.names)]
    split = dict(split)
    split["calibration"] = fit_rows[np.asarray(est.calibration_index_, dtype=np.int64)]
    split["fit"] = fit_rows[np.asarray(est.fit_index_, dtype=np.int64)]

    thresholds = {"alpha": float(est.alpha_), "beta": float(est.beta_),
                  "moment_betas": {int(a): float(b) for a, b in getattr(est, "moment_betas_", {}).items()},
                  "auto": isinstance(settings.alpha, str) or isinstance(settings.beta, str),
                  "rule": settings.alpha if isinstance(settings.alpha, str) else "given",
                  "z": float(getattr(est, "z_", 0.0) or 0.0)}
    run = AuditRun(model=model, history=list(est.history_), converged=bool(est.converged_),
                   stopped=bool(model.info.get("stopped_by_user")), label=label, base=base, base_spec=base_spec,
                   label_spec=label_spec, split=split, settings=settings,
                   groups_json=_groups_json_with_info(groups, groups_json),
                   timings=timings, data_key=data_key, data_name=data_name, thresholds=thresholds,
                   split_seed=split_spec.seed)
    test = split["test"]
    if base is not None and not binary:  # RMSE / R² are label-unit metrics: not for a 0/1 outcome
        run.base_metrics = {"base_test": error_metrics(label.y[test], base[test])}

    if stop is not None and stop():  # Stop pressed: keep the model as fitted so far, skip the audit
        run.stopped = True
        run.audit_error = NOT_AUDITED
        timings["total"] = time.perf_counter() - t0
        run.finished_at = time.time()
        say("stopped")
        return run
    say(f"auditing on {test.size:,} test rows")
    if on_fitted is not None:  # a separate copy: an abandoned audit must not change what the user was given
        on_fitted(replace(run, timings=dict(run.timings), split=dict(run.split)))
    audit_run(run, df)
    timings["total"] = time.perf_counter() - t0
    run.finished_at = time.time()
    say("done")
    return run


NOT_AUDITED = "not audited: the run was stopped before its audit"


def _json_scalar(v):
    return v.item() if isinstance(v, np.generic) else v


def audit_run(run: AuditRun, df: pd.DataFrame) -> AuditRun:
    """Audit ``run``'s model on its test rows (fills ``run.audit`` or ``run.audit_error``)."""
    from mmc_core.errors import MMCError as _MMCError

    test = run.split["test"]
    settings = run.settings
    t3 = time.perf_counter()
    try:
        from mmc_core.metrics import audit as audit_fn

        group_cols = sorted(run.model.groups.columns())
        X_test = _take_rows(df, test, group_cols)
        if getattr(run.model, "task", "regression") == "binary":
            run.audit = audit_fn(run.model, X_test, run.label.y[test],
                                 base=None if run.base is None else run.base[test], n_boot=settings.n_boot,
                                 seed=run.split_seed, threshold=settings.threshold)
        else:
            run.audit = audit_fn(run.model, X_test, run.label.y[test],
                                 base=None if run.base is None else run.base[test], delta=settings.delta,
                                 gamma=settings.gamma, n_boot=settings.n_boot, seed=run.split_seed)
        run.audit_error = ""
    except ImportError as e:
        run.audit_error = f"the audit module is not available ({e})"
    except _MMCError as e:
        run.audit_error = str(e)
    run.timings["audit"] = time.perf_counter() - t3
    return run


def predictions_table(df: pd.DataFrame, run: AuditRun, methods=None, rows: np.ndarray | None = None) -> pd.DataFrame:
    """The original columns plus split, base, mean, SD, moments and interval ends (per method), in label units
    (log units if the label was logged). ``rows`` limits it to some rows (all by default)."""
    from mmc_core.intervals import interval_table

    rows = np.arange(len(df)) if rows is None else np.asarray(rows)
    model = run.model
    group_cols = sorted(model.groups.columns())
    table = _take_rows(df, rows, group_cols)
    base = None if run.base is None else run.base[rows]
    preds = model.predict(table, base)
    out = df.iloc[rows].reset_index(drop=True).copy()
    split = np.full(len(df), "", dtype=object)
    for name in ("base", "fit", "calibration", "test"):
        split[run.split[name]] = name
    out["mmc_split"] = split[rows]
    if base is not None:
        out["mmc_base"] = base
    out["mmc_mean"] = preds["mean"]
    if getattr(model, "task", "regression") == "binary":  # the probability of the positive class
        out["mmc_decision"] = (preds["mean"] >= run.settings.threshold).astype(int)
    if "moment_2" in preds:
        out["mmc_sd"] = np.sqrt(np.maximum(preds["moment_2"], 0.0))
    for k, v in preds.items():
        if k != "mean":
            out[f"mmc_{k}"] = v
    if methods:
        ints = interval_table(model, table, base=base, delta=run.settings.delta, gamma=run.settings.gamma,
                              methods=list(methods))
        for m, (lo, hi) in ints.items():
            out[f"mmc_lower_{m}"], out[f"mmc_upper_{m}"] = lo, hi
    return out


def classifier_rates(df: pd.DataFrame, run: AuditRun, threshold: float):
    """(rates, disparities) of a binary run's test rows at a new decision ``threshold``, from the stored
    predictions (no refit; see :func:`mmc_core.binary.threshold_rates`)."""
    from mmc_core.binary import threshold_rates
    from mmc_core.metrics import check_threshold

    threshold = check_threshold(threshold)
    test = run.split["test"]
    model = run.model
    group_cols = sorted(model.groups.columns())
    X_test = _take_rows(df, test, group_cols)
    base = None if run.base is None else run.base[test]
    mu = model.predict(X_test, base if model.uses_base else None)["mean"]  # in [floor, 1 - floor]
    if base is not None:
        before = np.clip(base, 0.0, 1.0)
    else:  # the constant the fit started from, as in the audit
        from mmc_core.intervals import _initial_constant

        before = np.full(test.size, _initial_constant(model))
    return threshold_rates(mu, run.label.y[test], model.groups, X_test, threshold, base=before,
                           n_boot=run.settings.n_boot, seed=run.split_seed)


def row_details(df: pd.DataFrame, run: AuditRun, row: int, intervals: dict | None = None) -> dict:
    """One row: its values, predictions, intervals per method and the groups it belongs to.

    ``intervals`` ({method: (lower, upper)}) should come from an interval table of many rows (the multi-moment
    cover is defined over a population); without it they are computed on this row alone."""
    model = run.model
    group_cols = sorted(model.groups.columns())
    table = _take_rows(df, np.array([row]), group_cols)
    base = None if run.base is None else run.base[[row]]
    preds = {k: float(v[0]) for k, v in model.predict(table, base).items()}
    if intervals is None:
        from mmc_core.intervals import interval_table

        intervals = {m: (float(lo[0]), float(hi[0])) for m, (lo, hi) in
                     interval_table(model, table, base=base, delta=run.settings.delta,
                                    gamma=run.settings.gamma).items()}
    memb = model.groups.evaluate(table, 1)
    groups = [model.groups.names[g] for g in range(len(model.groups)) if memb.sizes[g] > 0]
    return {"values": df.iloc[row].to_dict(), "label": float(run.label.y[row]),
            "base": None if base is None else float(base[0]), "pred": preds, "intervals": dict(intervals),
            "groups": groups}


# ---------------------------------------------------------------------------------------------------
# the background job
# ---------------------------------------------------------------------------------------------------
class FitJob:
    """Run :func:`run_pipeline` in a daemon thread; watch ``history`` / ``phase``; :meth:`stop` to end early.

    ``status`` is one of ``running``, ``done``, ``stopped`` (Stop pressed before anything was fitted: no
    result), ``error``. Stop is honoured within one check of the flag in every phase:

    * base-model fit: between two chunks of boosting iterations (nothing is kept; ``stopped``);
    * descent: before the next single update (the model fitted so far is kept, marked stopped, not audited);
    * audit: at once: the job ends with the fitted model (not audited) and the audit thread's result is dropped.

    ``stop_checks`` counts the looks at the flag after it was set (the tests assert that the flag was seen
    before the next boosting chunk / update, not wall-clock times); ``stop_seen_at`` is when it was first seen.
    """

    def __init__(self, df, label_spec, base_spec, split_spec, groups_json, settings, data_key="", data_name="",
                 worker: str = "thread"):
        self.worker = worker  # "thread" (in this process) or "process" (a forked worker; see start())
        self._proc = None
        self._mp_stop = None
        self._mp_seen = None
        self.args = (df, label_spec, base_spec, split_spec, groups_json, settings)
        self.settings = settings
        self.data_key, self.data_name = data_key, data_name
        self.history: list = []
        self.phase = "starting"
        self.status = "idle"
        self.result: AuditRun | None = None
        self.error = ""
        self.detail = ""
        self.started_at = self.ended_at = 0.0
        self.thresholds: dict = {}
        self.stop_requested_at: float | None = None
        self.stop_seen_at: float | None = None
        self.stop_phase = ""
        self.kept = ""
        self.updates_after_stop = 0
        self._stop = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._fitted: AuditRun | None = None
        self._abandoned = False
        self._thread: threading.Thread | None = None
        self.id = hashlib.sha1(f"{id(self)}{time.time()}".encode()).hexdigest()[:8]

    # -- control --
    def start(self) -> "FitJob":
        """Run in the background: a daemon thread, or with ``worker="process"`` a child process forked from a
        preloaded fork server (its own interpreter: the fit never competes with the server's page runs for the
        GIL, and a phase that keeps nothing is ended by terminating the child). The child reports history rows,
        phases and the result through a queue that a reader thread here turns into this object's attributes."""
        self.status = "running"
        self.started_at = time.time()
        if self.worker == "process":
            ctx = _mp_context()
            queue = ctx.Queue()
            self._mp_stop = ctx.Event()
            self._mp_seen = ctx.Event()
            self._proc = ctx.Process(target=_child_main, args=(self.args, self.data_key, self.data_name, queue,
                                                                self._mp_stop, self._mp_seen),
                                     name=f"mmc-fit-{self.id}", daemon=True)
            self._proc.start()
            self.args = None
            self._thread = threading.Thread(target=self._read_child, args=(queue,), name=f"mmc-read-{self.id}",
                                            daemon=True)
        else:
            self._thread = threading.Thread(target=self._run, name=f"mmc-fit-{self.id}", daemon=True)
        self._thread.start()
        return self

    def _read_child(self, queue):
        """Turn the child's messages into attributes (history rows, phase, thresholds, fitted run, result)."""
        import queue as queue_mod

        try:
            while True:
                try:
                    kind, payload = queue.get(timeout=0.5)
                except queue_mod.Empty:
                    if self._proc is not None and not self._proc.is_alive():
                        with self._lock:
                            if self.status == "running":
                                if self._stop.is_set() and self.stop_phase.startswith(("fitting the base", "preparing",
                                                                                        "starting")):
                                    self.kept = "nothing was fitted; the previous results are kept"
                                    self.error, self.status = "stopped during the base-model fit", "stopped"
                                else:
                                    self.error, self.status = "the fitting process ended unexpectedly", "error"
                                self.ended_at = time.time()
                                self._done.set()
                        return
                    continue
                if kind == "hist":
                    self.history.extend(payload)
                elif kind == "phase":
                    self._set_phase(payload)
                elif kind == "thr":
                    self.thresholds = payload
                elif kind == "seen":
                    self.stop_seen_at = self.stop_seen_at or time.time()
                elif kind == "fitted":
                    self._on_fitted(payload)
                elif kind == "end":
                    status, result, error, detail, kept = payload
                    with self._lock:
                        if not self._abandoned and self.status == "running":
                            self.result, self.error, self.detail = result, error, detail
                            self.kept = kept or self.kept
                            self.status = status
                            self.ended_at = time.time()
                            self._done.set()
                    return
        finally:
            if self._proc is not None:
                self._proc.join(timeout=5)

    def run_sync(self) -> "FitJob":
        """Run in the calling thread (used for the quick first demo audit and in tests)."""
        self.status = "running"
        self.started_at = time.time()
        self._run()
        return self

    def stop(self):
        if self.stop_requested_at is None:
            self.stop_requested_at = time.time()
            self.stop_phase = self.phase
        self._stop.set()
        if self._mp_stop is not None:
            self._mp_stop.set()
            if self._proc is not None and self._fitted is None and \
                    self.phase.startswith(("fitting the base", "preparing", "starting")):
                # nothing to keep: end the child at once (it may be inside a step that polls no flag)
                self._proc.terminate()
                with self._lock:
                    if self.status == "running":
                        self.stop_seen_at = time.time()
                        self.kept = "nothing was fitted; the previous results are kept"
                        self.error, self.status = "stopped during the base-model fit", "stopped"
                        self.ended_at = time.time()
                        self._done.set()
                return
        with self._lock:
            if self.status == "running" and self._fitted is not None:  # in the audit: end now with the model
                run = self._fitted
                run.audit, run.audit_error = None, NOT_AUDITED
                run.stopped = True
                run.finished_at = time.time()
                self.result = run
                self.kept = self._kept_text(run)
                self._abandoned = True
                self.stop_seen_at = time.time()
                if self._proc is not None:
                    self._proc.terminate()  # the audit's result is not wanted any more
                self.status = "done"
                self.ended_at = time.time()
                self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def stop_seen(self) -> bool:
        """True once the run has seen the stop flag (a worker process reports it through a shared event)."""
        if self.stop_seen_at is None and self._mp_seen is not None and self._mp_seen.is_set():
            self.stop_seen_at = time.time()
        return self.stop_seen_at is not None

    @property
    def elapsed(self) -> float:
        return (self.ended_at or time.time()) - self.started_at if self.started_at else 0.0

    # -- worker --
    def _seen(self):
        if self.stop_seen_at is None:
            self.stop_seen_at = time.time()

    def _callback(self, row: dict) -> bool:
        self.history.append({k: (float(v) if isinstance(v, (np.floating, np.integer)) else v) for k, v in row.items()})
        if self._stop.is_set():
            self._seen()
            return True
        return False

    def _stop_now(self) -> bool:
        if self._stop.is_set():
            self._seen()
            return True
        return False

    def _set_phase(self, text: str):
        debug(f"job {self.id}: {text}")
        self.phase = text

    def _set_thresholds(self, t: dict):
        self.thresholds = dict(t)

    def _on_fitted(self, run: AuditRun):
        with self._lock:
            self._fitted = run

    @staticmethod
    def _kept_text(run: AuditRun) -> str:
        info = getattr(run.model, "info", {}) or {}
        return (f"the model after {info.get('rounds')} round(s) ({info.get('mean_updates', 0):,} mean updates) was "
                "kept, not audited")

    def _run(self):
        try:
            result = run_pipeline(*self.args, callback=self._callback, stop=self._stop_now, phase=self._set_phase,
                                  data_key=self.data_key, data_name=self.data_name,
                                  on_thresholds=self._set_thresholds, on_fitted=self._on_fitted)
            with self._lock:
                if self._abandoned:
                    return
                self.result = result
                if result.stopped and not result.audit:
                    self.kept = self._kept_text(result)
                self.status = "done"
        except StoppedByUser as e:
            with self._lock:
                self.kept = "nothing was fitted; the previous results are kept"
                self.error, self.status = str(e), "stopped"
        except MMCError as e:
            with self._lock:
                if not self._abandoned:
                    self.error, self.status = str(e), "error"
        except MemoryError:
            self.error, self.status = "out of memory: use fewer groups, fewer buckets or a smaller table", "error"
        except Exception as e:  # noqa: BLE001 - shown to the user; the app keeps working
            with self._lock:
                if not self._abandoned:
                    self.error = f"unexpected error: {type(e).__name__}: {e}"
                    self.detail = traceback.format_exc()
                    self.status = "error"
        finally:
            with self._lock:
                if not self._abandoned:
                    self.ended_at = time.time()
                    self.args = None  # drop the reference to the table
                    self._done.set()


_MP_CTX = []


def _mp_context():
    """A fork-server context whose server has numpy, pandas, scikit-learn and this module imported, so a job's
    child starts in a fraction of a second (and is forked from a single-threaded process, not the server)."""
    import multiprocessing as mp

    with _BASE_LOCK:
        if not _MP_CTX:
            try:
                ctx = mp.get_context("forkserver")
                ctx.set_forkserver_preload(["numpy", "pandas", "app.runner", "mmc_core", "mmc_core.metrics",
                                            "sklearn.ensemble", "sklearn.compose", "sklearn.pipeline",
                                            "sklearn.preprocessing", "sklearn.impute", "sklearn.linear_model"])
            except ValueError:  # pragma: no cover - no fork server on this platform
                ctx = mp.get_context("spawn")
            _MP_CTX.append(ctx)
        return _MP_CTX[0]


HISTORY_FLUSH = 0.2  # seconds between two batches of history rows sent by a worker process


def _child_main(args, data_key, data_name, queue, stop_event, seen_event):
    """The body of a worker process: run the pipeline, report everything through ``queue`` (history rows in
    batches, so that a fast descent does not flood it) and ``seen_event`` (set the moment Stop is seen)."""
    buf, last = [], [time.time()]

    def flush():
        if buf:
            queue.put(("hist", list(buf)))
            buf.clear()
        last[0] = time.time()

    def stop():
        if stop_event.is_set():
            seen_event.set()
            return True
        return False

    def callback(row):
        buf.append({k: (float(v) if isinstance(v, (np.floating, np.integer)) else v) for k, v in row.items()})
        if time.time() - last[0] >= HISTORY_FLUSH:
            flush()
        return stop()

    def phase(text):
        flush()
        queue.put(("phase", text))

    try:
        result = run_pipeline(*args, callback=callback, stop=stop, phase=phase,
                              data_key=data_key, data_name=data_name, on_thresholds=lambda t: queue.put(("thr", dict(t))),
                              on_fitted=lambda r: queue.put(("fitted", r)))
        flush()
        kept = FitJob._kept_text(result) if result.stopped and not result.audit else ""
        queue.put(("end", ("done", result, "", "", kept)))
    except StoppedByUser as e:
        queue.put(("end", ("stopped", None, str(e), "", "nothing was fitted; the previous results are kept")))
    except MMCError as e:
        queue.put(("end", ("error", None, str(e), "", "")))
    except MemoryError:
        queue.put(("end", ("error", None, "out of memory: use fewer groups, fewer buckets or a smaller table", "", "")))
    except Exception as e:  # noqa: BLE001 - reported to the page
        queue.put(("end", ("error", None, f"unexpected error: {type(e).__name__}: {e}", traceback.format_exc(), "")))
    finally:
        queue.close()
        queue.join_thread()


def settings_dict(settings: FitSettings) -> dict:
    return asdict(settings)


def groups_key(groups_json) -> str:
    return hashlib.sha1(json.dumps(groups_json, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------
# Discover: the learning-oracle auditor (mmc_core.discover) on the loaded table, as a stoppable job
# ---------------------------------------------------------------------------------------------------
DISCOVERED_PREFIX = "found: "  # names of discovered groups start with this (every table and figure shows it)
GROUP_INFO_KEYS = ("kind", "count", "mass", "mean_residual", "moment_error", "p_value", "region", "violation")


@dataclass(frozen=True)
class DiscoverSpec:
    """What Discover searches: ``features`` (columns the rules may use), tree ``max_depth``, ``min_mass`` (smallest
    share of the searched rows a set may hold), ``top`` (accepted sets shown per kind), moments (2 = mean and
    variance), buckets, seed of the search / check split, test ``level``, and ``target``: "base" (the base
    prediction) or "model" (the last run's multicalibrated model)."""

    features: tuple = ()
    max_depth: int = 3
    min_mass: float = 0.01
    top: int = 5
    n_moments: int = 2
    n_buckets: int = 5
    seed: int = 0
    level: float = 0.05
    target: str = "base"


def discovered_group(f, taken=()) -> dict:
    """A finding as a group dict of the group file grammar, with the descriptive fields ``mmc discover`` writes
    (``kind`` marks it as discovered; the fields never change membership)."""
    name = DISCOVERED_PREFIX + f.name
    if len(name) > 190:
        name = name[:187] + "..."
    base, k = name, 2
    while name in taken:
        name, k = f"{base} #{k}", k + 1
    d = f.rule.group(name).to_dict()
    d.update(kind=f.kind, count=int(f.count), mass=float(f.mass), region=str(f.region)[:200],
             violation=float(f.violation), p_value=float(f.p_value))
    d["mean_residual" if f.kind == "mean" else "moment_error"] = float(f.residual_label_units)
    return d


def describe_finding(f, label: str, units: str = "") -> dict:
    """One finding as a table row in words: the rule, what is wrong, its size with a 95% interval, adjusted p."""
    u = f" {units}" if units else ""
    lo, hi = f.ci()
    if f.kind == "mean":
        direction = "prediction too low" if f.residual > 0 else "prediction too high"
        what = f"mean of {label}"
        size = f"{f.residual_label_units:+.3g}{u} (95% CI {lo:+.3g} to {hi:+.3g})"
    else:
        a = int(f.kind.split("_")[1])
        what = "variance" if a == 2 else f"moment {a}"
        direction = f"{what} under-predicted" if f.residual > 0 else f"{what} over-predicted"
        power = "²" if a == 2 else f"^{a}"
        unit = f" {units}{power}" if units else f" ({label} units){power}"
        size = f"{f.residual_label_units:+.3g}{unit} (95% CI {lo:+.3g} to {hi:+.3g})"
    return {"rule": f.name, "kind": f.kind, "error": direction, "observed − predicted": size,
            "rows": int(f.count), "share": float(f.mass), "p (adjusted)": float(f.p_value),
            "check rows": int(f.check_count), "region": f.region}


@dataclass
class DiscoverResult:
    discovery: object                     # mmc_core.discover.Discovery
    findings: list                        # the accepted findings shown (top per kind)
    groups: list                          # discovered_group(f) for each, same order
    n_rows: int                           # rows searched + checked (never the test or base-model rows)
    label: str
    target: str
    note: str = ""
    seconds: float = 0.0
    also: list = field(default_factory=list)  # per shown finding: findings of other kinds for the same rule


_DISCOVER_CACHE: "OrderedDict[tuple, DiscoverResult]" = OrderedDict()


def run_discovery(df: pd.DataFrame, label_spec: LabelSpec, base_spec: BaseSpec, split_spec: SplitSpec,
                  spec: DiscoverSpec, run: AuditRun | None = None, data_key: str = "", stop=None, phase=None,
                  progress=None) -> DiscoverResult:
    """Discover on the rows that are neither test rows (they stay fresh for the audit) nor base-model training
    rows (their base predictions are over-fitted): :func:`mmc_core.discover.discover` splits them into search
    and check halves and returns the sets whose error is significant on the check half. Cached on its inputs.

    Raises DataError with a sentence for the user when the inputs cannot work (no features, no prediction...)."""
    from mmc_core.discover import discover

    def say(text):
        if phase is not None:
            phase(text)

    t0 = time.perf_counter()
    feats = [f for f in spec.features if f in df.columns]
    if not spec.features:
        raise DataError("choose at least one feature column for the rules (Discover searches conditions on them)")
    missing = [f for f in spec.features if f not in df.columns]
    if missing:
        raise DataError(f"feature column(s) not in the data: {', '.join(map(str, missing))}")
    if label_spec.column in feats:
        raise DataError(f"the label '{label_spec.column}' cannot be a feature of a group (groups must be known for "
                        "new rows)")
    if spec.target == "model":
        if run is None or run.data_key != data_key:
            raise DataError("there is no fitted model for this table yet: run the audit first, or discover on the "
                            "base prediction")
    elif base_spec.kind == "none":
        raise DataError("Discover looks for groups on which a prediction is wrong, and there is no base prediction: "
                        "choose a prediction column or an in-app base model on the Data page (or run the audit "
                        "and discover on its model)")
    key = (data_key, label_spec, base_spec, split_spec, spec, run.finished_at if spec.target == "model" and run else 0)
    with _BASE_LOCK:
        if data_key and key in _DISCOVER_CACHE:
            _DISCOVER_CACHE.move_to_end(key)
            return _DISCOVER_CACHE[key]
    say("preparing the label and the rows")
    label = prepare_label(df, label_spec)
    if spec.target == "model":
        rows = np.sort(np.concatenate([run.split["fit"], run.split["calibration"]]))
        base = run.base
        target_note = "the last run's multicalibrated model"
        model = run.model
        cols = sorted(set(feats) | set(model.groups.columns()))
    else:
        split = split_rows(len(df), split_spec, base_spec.kind == "model", 0.0)
        rows = split["fit"]
        if base_spec.kind == "model":
            say(f"fitting the base model on {split['base'].size:,} rows")
        base, _ = base_prediction(df, label, label_spec, base_spec, split, split_spec, data_key, stop=stop,
                                  progress=None)
        target_note = "the base prediction"
        model = None
        cols = feats
    if rows.size < 40:
        raise DataError(f"only {rows.size} row(s) outside the test (and base-model) rows: too few to discover on")
    X = _take_rows(df, rows, cols)
    say(f"searching {rows.size:,} rows ({target_note})")
    try:
        disc = discover(X, label.y[rows], prediction=None if base is None else base[rows], model=model,
                        features=feats, max_depth=int(spec.max_depth), min_mass=float(spec.min_mass),
                        n_moments=int(spec.n_moments), n_buckets=int(spec.n_buckets),
                        label_range=(label.lo, label.hi), seed=int(spec.seed), level=float(spec.level),
                        label_name=label.name, stop=stop, progress=progress)
    except ImportError as e:
        raise DataError(f"Discover needs scikit-learn ({e})") from None
    # one group per rule: a rule accepted for the mean and for the variance is shown once (the strongest kind
    # first, mean before moments), with its other findings in ``also``
    shown, also, seen = [], [], {}
    for f in disc.top(int(spec.top)):
        k = f.rule.key()
        if k in seen:
            also[seen[k]].append(f)
            continue
        seen[k] = len(shown)
        shown.append(f)
        also.append([])
    taken: set = set()
    groups = []
    for f in shown:
        g = discovered_group(f, taken)
        taken.add(g["name"])
        groups.append(g)
    out = DiscoverResult(disc, shown, groups, int(rows.size), label.name, spec.target, also=also,
                         note=f"{rows.size:,} rows (the test rows"
                              + (" and the base model's training rows" if base_spec.kind == "model" else "")
                              + " were not used)",
                         seconds=time.perf_counter() - t0)
    if data_key:
        with _BASE_LOCK:
            _DISCOVER_CACHE[key] = out
            while len(_DISCOVER_CACHE) > 8:
                _DISCOVER_CACHE.popitem(last=False)
    return out


class DiscoverJob:
    """:func:`run_discovery` in a daemon thread: ``phase`` / ``done`` / ``total`` for a progress bar, :meth:`stop`
    ends it before the next oracle call (or the next boosting chunk of an in-app base model); nothing is kept.
    ``status``: running, done, stopped, error."""

    def __init__(self, df, label_spec, base_spec, split_spec, spec, run=None, data_key=""):
        self.args = (df, label_spec, base_spec, split_spec, spec)
        self.run, self.data_key = run, data_key
        self.spec = spec
        self.status, self.phase, self.error = "idle", "starting", ""
        self.done, self.total = 0, 0
        self.result: DiscoverResult | None = None
        self.stop_checks_after_stop = 0
        self._stop = threading.Event()
        self._done = threading.Event()
        self.started_at = self.ended_at = 0.0
        self.id = hashlib.sha1(f"d{id(self)}{time.time()}".encode()).hexdigest()[:8]

    def start(self) -> "DiscoverJob":
        self.status, self.started_at = "running", time.time()
        threading.Thread(target=self._work, name=f"mmc-discover-{self.id}", daemon=True).start()
        return self

    def run_sync(self) -> "DiscoverJob":
        self.status, self.started_at = "running", time.time()
        self._work()
        return self

    def stop(self):
        self._stop.set()

    def wait(self, timeout=None) -> bool:
        return self._done.wait(timeout)

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def elapsed(self) -> float:
        return (self.ended_at or time.time()) - self.started_at if self.started_at else 0.0

    def _stop_now(self) -> bool:
        if self._stop.is_set():
            self.stop_checks_after_stop += 1
            return True
        return False

    def _progress(self, done, total, text):
        self.done, self.total = int(done), int(total)
        self.phase = f"searching {text}"

    def _set_phase(self, text):
        self.phase = text

    def _work(self):
        from mmc_core.discover import DiscoveryStopped

        try:
            with _limit_threads():
                res = run_discovery(*self.args, run=self.run, data_key=self.data_key, stop=self._stop_now,
                                    phase=self._set_phase, progress=self._progress)
            self.result, self.status = res, "done"
        except (DiscoveryStopped, StoppedByUser):
            self.status, self.error = "stopped", "stopped by you: nothing was kept"
        except MMCError as e:
            self.status, self.error = "error", str(e)
        except MemoryError:
            self.status, self.error = "error", "out of memory: use fewer features, a smaller depth or a smaller table"
        except Exception as e:  # noqa: BLE001 - shown to the user as one line; the page keeps working
            self.status, self.error = "error", f"unexpected error: {type(e).__name__}: {e}"
            self.detail = traceback.format_exc()
        finally:
            self.ended_at = time.time()
            self.args = None
            self.run = None
            self._done.set()

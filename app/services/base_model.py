"""The base prediction a run starts from: none, an existing column, or a scikit-learn model (gradient boosting or
ridge / logistic regression) fitted on the base-model rows only, with the process-wide cache
(:func:`cached_base_model`) that lets the multicalibration be re-run with new parameters without refitting it.
In a thread the fit polls a stop flag between chunks of boosting iterations (:class:`StoppedByUser`); in the
dashboard's worker process, which Stop terminates, it runs in one call (:data:`KILLABLE`). It runs with one
OpenMP / BLAS thread (:func:`limit_threads`) so it does not fight the dashboard server for the cores. Kept apart
from :mod:`app.services.pipeline` because it is the only part that needs scikit-learn.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
import time
from collections import OrderedDict

import numpy as np
import pandas as pd

from app.services.specs import BASE_MODELS, BaseSpec, LabelSpec, PreparedLabel, SplitSpec
from mmc_core.common import DataError, MMCError

BASE_LOCK = threading.Lock()  # guards the process-wide caches (base models, discoveries, the fork server)


def feature_frame(df: pd.DataFrame, features) -> pd.DataFrame:
    """The feature columns as the base models take them: booleans as numbers, text as objects (None missing)."""
    X = df[list(features)].copy()
    for c in X.columns:
        s = X[c]
        if pd.api.types.is_bool_dtype(s):
            X[c] = s.astype(float)
        elif not pd.api.types.is_numeric_dtype(s):
            X[c] = s.astype("string").astype(object).where(s.notna(), None)
    return X


class StoppedByUser(MMCError):
    """Raised inside the pipeline when Stop was pressed in a phase that keeps nothing (the base-model fit)."""


BOOST_CHUNK = 10  # boosting iterations between two looks at the stop flag
# True in a worker process of the dashboard: Stop terminates the process, so the base model needs no stop checks
# and is fitted in one call (see _grow); set by app.services.jobs._child_main, never in the server process.
KILLABLE = False
# For the browser test of Stop during the base-model fit: while the file this names exists, a base-model fit
# waits before it starts (looking at the stop flag), so the click cannot arrive after a fast fit has ended (it did,
# in CI, under load). Unset in real use; a test sets it in the dashboard server's environment.
HOLD_ENV = "MMC_TEST_HOLD_BASE_FIT"
HOLD_LIMIT = 300  # seconds: a forgotten hold file cannot hang a fit for ever


def _hold_for_test(stop):
    path = os.environ.get(HOLD_ENV)
    if not path:
        return
    deadline = time.monotonic() + HOLD_LIMIT
    while os.path.exists(path) and time.monotonic() < deadline:
        if stop is not None and stop():
            raise StoppedByUser("stopped during the base-model fit")
        time.sleep(0.05)


def limit_threads():
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


def unwrap(model) -> tuple:
    """(the scikit-learn model a fitted base model holds, whether it is a classifier giving probabilities)."""
    return (model.model, True) if isinstance(model, _Probability) else (model, False)


def fit_base_model(
    X: pd.DataFrame,
    y: np.ndarray,
    kind: str = "hgb",
    seed: int = 0,
    stop=None,
    progress=None,
    binary: bool = False,
    one_call: bool | None = None,
):
    """A scikit-learn pipeline (one-hot for text columns) fitted on (X, y).

    ``stop()`` is polled between chunks of BOOST_CHUNK boosting iterations (gradient boosting is grown with
    ``warm_start``, which gives the same model as one fit); when it returns True, :class:`StoppedByUser` is
    raised. ``progress(iterations_done)`` is called after every chunk. ``one_call``: grow the trees in one call
    (True) or in chunks (False); by default in one call only in a worker process (:data:`KILLABLE`).

    Binary labels: gradient-boosted trees or a (ridge-penalised) logistic regression, predicting the
    probability of the positive class (a regression on 0/1 would give values outside [0, 1])."""
    from sklearn.pipeline import Pipeline, make_pipeline

    if len(X) == 0:
        raise DataError("no rows to train the base model on")
    _hold_for_test(stop)
    cat = [c for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])]
    num = [c for c in X.columns if c not in cat]
    if binary and len(np.unique(y)) < 2:
        raise DataError("the base-model rows hold only one class of the label: use a larger base-model share")
    if kind == "hgb":
        from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

        pre = _preprocessor(cat, num, linear=False)
        boost = HistGradientBoostingClassifier if binary else HistGradientBoostingRegressor
        est = boost(
            max_iter=BOOST_CHUNK,
            learning_rate=0.08,
            early_stopping=True,
            validation_fraction=0.15,
            random_state=seed,
            warm_start=True,
        )
        with limit_threads():
            _grow(est, pre.fit_transform(X), y, stop, progress, max_iter=200, one_call=one_call)
        model = Pipeline([("pre", pre), ("clf" if binary else "reg", est)])
    elif kind == "ridge":
        from sklearn.linear_model import LogisticRegressionCV, RidgeCV

        if binary:
            kw: dict = {}
            # scikit-learn 1.9 warns that 1.10 changes two defaults (the fitted attributes, which we do not use,
            # and l1_ratios): state the new ones where they exist, so no FutureWarning reaches the analyst (the
            # same plain L2 fit); older versions have neither
            if "use_legacy_attributes" in inspect.signature(LogisticRegressionCV).parameters:
                kw.update(use_legacy_attributes=False, l1_ratios=(0.0,))
            last = LogisticRegressionCV(Cs=np.logspace(-3, 3, 7), max_iter=2000, scoring="neg_log_loss", **kw)
        else:
            last = RidgeCV(alphas=np.logspace(-3, 3, 13))
        model = make_pipeline(_preprocessor(cat, num, linear=True), last)
        if stop is not None and stop():
            raise StoppedByUser("stopped during the base-model fit")
        with limit_threads():
            model.fit(X, y)
    else:
        raise MMCError(f"unknown base model {kind!r}; choose one of {', '.join(BASE_MODELS)}")
    return _Probability(model) if binary else model


def tree_preprocessor(cat: list, num: list):
    """The gradient-boosting models' encoding (see :func:`_preprocessor`): the base variance model uses it too."""
    return _preprocessor(cat, num, linear=False)


def _preprocessor(cat: list, num: list, linear: bool):
    """Text columns one-hot encoded (missing values as their own category, at most 30 categories); numbers passed
    through for trees (dense output), or median-imputed and standardised for a linear model."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    missing = SimpleImputer(strategy="constant", fill_value="(missing)")
    if linear:
        return ColumnTransformer(
            [
                ("cat", make_pipeline(missing, OneHotEncoder(handle_unknown="ignore", max_categories=30)), cat),
                ("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), num),
            ],
            remainder="drop",
        )
    return ColumnTransformer(
        [
            (
                "cat",
                make_pipeline(missing, OneHotEncoder(handle_unknown="ignore", max_categories=30, sparse_output=False)),
                cat,
            ),
            ("num", "passthrough", num),
        ],
        remainder="drop",
    )


def _grow(est, Xt, y, stop, progress, max_iter: int, one_call: bool | None = None):
    """Fit a ``warm_start`` gradient-boosting model BOOST_CHUNK iterations at a time up to ``max_iter`` (or until
    its early stopping ends the boosting), looking at ``stop()`` before every chunk.

    In a worker process that Stop terminates (:data:`KILLABLE`) the model is fitted in one call instead: every
    warm start re-bins the rows and re-predicts them with all the trees grown so far, which made the chunked fit
    up to twice as slow as the plain one on large tables. ``one_call`` overrides that choice (the export's refit)."""
    if KILLABLE if one_call is None else one_call:
        est.set_params(max_iter=max_iter)
        est.fit(Xt, y)
        if progress is not None:
            progress(int(est.n_iter_))
        return
    done = 0
    while done < max_iter:
        if stop is not None and stop():
            raise StoppedByUser("stopped during the base-model fit")
        target = min(done + BOOST_CHUNK, max_iter)
        est.set_params(max_iter=target)
        est.fit(Xt, y)
        if progress is not None:
            progress(int(est.n_iter_))
        if est.n_iter_ < target or _early_stopped(est):  # early stopping ended the boosting
            break
        done = target


def _early_stopped(est) -> bool:
    """Whether the model's own early stopping fired at its last iteration. A chunk that ends exactly there stops
    at ``max_iter`` and does not say so; without this check the next warm start grew one more tree than a single
    fit does (scikit-learn's rule, restated with the public ``n_iter_no_change`` / ``tol`` / scores)."""
    if not getattr(est, "do_early_stopping_", False):
        return False
    scores = est.validation_score_ if len(est.validation_score_) else est.train_score_
    ref = est.n_iter_no_change + 1
    if len(scores) < ref:
        return False
    return not any(s > scores[-ref] + est.tol for s in scores[-ref + 1 :])


def fit_digest(df: pd.DataFrame, y: np.ndarray, rows: np.ndarray, feats: list) -> str:
    """What a base model is trained on (its rows, their labels and features), hashed: part of the cache key."""
    h = hashlib.sha1(np.ascontiguousarray(rows).tobytes(), usedforsecurity=False)
    h.update(np.ascontiguousarray(y[rows], dtype=float).tobytes())
    h.update(pd.util.hash_pandas_object(df.iloc[rows][feats], index=False).to_numpy().tobytes())
    return h.hexdigest()[:24]


_BASE_CACHE: OrderedDict[tuple, tuple] = OrderedDict()


def cached_base_model(
    key: tuple,
    df: pd.DataFrame,
    y: np.ndarray,
    rows: np.ndarray,
    spec: BaseSpec,
    seed: int,
    stop=None,
    progress=None,
    binary: bool = False,
):
    """(predictions of an in-app base model on all rows, the model, seconds): fitted on ``rows`` only; cached on
    ``key`` (data hash, label, split, spec, row digest) so re-running the multicalibration with new parameters does
    not refit it. ``seconds`` ({"fit", "predict"}) is None when the cache answered (and the model is None when a
    worker process fitted it: only the predictions come back)."""
    hit = cache_lookup(key)
    if hit is not None:
        return (*hit, None)
    X = feature_frame(df, spec.features)
    try:
        t0 = time.perf_counter()
        model = fit_base_model(X.iloc[rows], y[rows], spec.model, seed, stop=stop, progress=progress, binary=binary)
        t1 = time.perf_counter()
        with limit_threads():
            pred = np.asarray(model.predict(X), dtype=float)
        seconds = {"fit": t1 - t0, "predict": time.perf_counter() - t1}
    except MMCError:
        raise
    except ValueError as e:  # scikit-learn's own checks: say which model and features
        raise DataError(
            f"the base model could not be fitted on features {', '.join(map(str, spec.features))}: "
            f"{str(e).splitlines()[0]}"
        ) from None
    cache_put(key, pred, model)
    return pred, model, seconds


CACHE_SIZE = 8  # four runs' base models, each with its base variance (app.services.base_variance)


def cache_lookup(key: tuple, touch: bool = True) -> tuple | None:
    """The cached (predictions, model) of ``key``, or None; ``touch`` makes it the most recent."""
    with BASE_LOCK:
        if key not in _BASE_CACHE:
            return None
        if touch:
            _BASE_CACHE.move_to_end(key)
        return _BASE_CACHE[key]


def cache_put(key: tuple, pred, model=None):
    """Keep a base model's predictions (the CACHE_SIZE most recent entries; a base variance's entry holds its
    predictions or the one-line reason it could not be fitted). A worker process's fit is put here by the server
    (with no model: only the predictions are used again), so the next run does not fit it again."""
    with BASE_LOCK:
        _BASE_CACHE[key] = (pred, model)
        _BASE_CACHE.move_to_end(key)
        while len(_BASE_CACHE) > CACHE_SIZE:
            _BASE_CACHE.popitem(last=False)


def cache_items() -> list:
    """Every cached (key, (predictions, model)), oldest first: what the export looks for a fitted model in."""
    with BASE_LOCK:
        return list(_BASE_CACHE.items())


def cache_entries(data_key: str | None = None) -> list:
    """The cached (key, predictions), oldest first, only those of the table ``data_key`` if given: what a worker
    process starts with (it is forked from the fork server, which has none of the server's cache)."""
    with BASE_LOCK:
        return [(k, v[0]) for k, v in _BASE_CACHE.items() if data_key is None or k[0] == data_key]


def model_key(df, label, label_spec: LabelSpec, spec: BaseSpec, split: dict, split_spec: SplitSpec, data_key: str):
    """The cache key of an in-app base model: (data_key, label spec, base spec, split spec, digest). The base spec
    keeps the model and its features only (the label is never one of them; the base variance switch is not part
    of the mean model, so turning it on or off does not refit it), and the digest holds what the model is trained
    on -- its rows, their labels and features -- so an edited table under the same name (or no data_key at all)
    never gets another table's model."""
    feats = [f for f in spec.features if f != label_spec.column]
    spec = BaseSpec("model", None, spec.model, tuple(feats))
    return (data_key, label_spec, spec, split_spec, fit_digest(df, label.y, split["base"], feats))


def base_prediction(
    df: pd.DataFrame,
    label: PreparedLabel,
    label_spec: LabelSpec,
    spec: BaseSpec,
    split: dict,
    split_spec: SplitSpec,
    data_key: str = "",
    stop=None,
    progress=None,
):
    """(base prediction of every row in fitted-label units clipped to the label range, or None; note)."""
    from app.services.io import numeric_column

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
        from app.services.validate import unusable_feature_error

        problem = unusable_feature_error(df, feats)
        if problem:
            raise DataError(problem)
        if split["base"].size == 0:
            raise DataError("no rows to train the base model on (the split gives it none)")
        key = model_key(df, label, label_spec, spec, split, split_spec, data_key)
        spec = key[2]
        b, _, seconds = cached_base_model(
            key,
            df,
            label.y,
            split["base"],
            spec,
            split_spec.seed,
            stop=stop,
            progress=progress,
            binary=label.task == "binary",
        )
        # the model actually fitted: a 0/1 label gets the classifier twin (a browser audit of loanapp read
        # "HistGradientBoostingRegressor" on its 0/1 label)
        fitted = {"hgb": "gradient boosting", "ridge": "ridge regression"}.get(spec.model, spec.model)
        if label.task == "binary":
            fitted = {"hgb": "gradient boosting classifier", "ridge": "logistic regression"}.get(spec.model, fitted)
        note = (
            f"base prediction: {fitted} on {len(feats)} feature(s), "
            f"trained on {split['base'].size:,} rows that are not used again"
        )
        if seconds:  # the Run page's "base model fitted in ..." counts both
            note += f" (fitted in {seconds['fit']:.2f} s, all {len(df):,} rows predicted in {seconds['predict']:.2f} s)"
        else:
            note += " (fitted for an earlier run with the same rows and settings, not again)"
    else:
        raise DataError(f"unknown base prediction kind {spec.kind!r}")
    outside = int(np.sum((b < label.lo) | (b > label.hi)))
    if outside:
        note += f"; {outside:,} prediction(s) outside the label range were clipped into it"
    return np.clip(b, label.lo, label.hi), note


_feature_frame = feature_frame  # the older name, kept for the tests that read it

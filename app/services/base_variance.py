"""The base variance of an in-app base model: a second scikit-learn model, fitted on the base rows only, that
predicts each row's squared error of the base model from the same features. The estimator starts the variance
from it (``MomentMulticalibrator(variance_column=...)``), which is the only way a spread that follows a feature
no group carries reaches the fit (benchmarks/README.md, "A base variance column").

The recipe is the benchmark's (``benchmarks/variance_protocol.py --base-variance hgb``): the base model's 5-fold
out-of-fold squared residuals on the base rows, then a Poisson HistGradientBoostingRegressor of them on all base
rows, floored at 1e-3 of their mean. Cross-fitting it on the fitting rows instead measured worse, so it never
sees them. Cached with the base model (:func:`app.services.base_model.cached_base_model`'s cache), so a new run
with other multicalibration parameters does not fit it again.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pandas as pd

from app.services.base_model import (
    StoppedByUser,
    cache_lookup,
    cache_put,
    feature_frame,
    fit_base_model,
    limit_threads,
    model_key,
    tree_preprocessor,
)
from mmc_core.common import DataError, MMCError

# The column the estimator reads the base variance from: named like the base prediction ("base_model" in the
# model file), with a number added when the table already has a column of that name (never a user's column).
VARIANCE_COLUMN = "base_model_variance"
FOLDS = 5  # out-of-fold residuals, as the benchmark's cross_val_predict(cv=5)
MIN_ROWS = 50  # fewer base rows than this leave each fold too few rows to say anything about the spread
FLOOR = 1e-3  # share of the mean squared residual below which no row's base variance goes (the benchmark's)


def variance_column_name(columns) -> str:
    """:data:`VARIANCE_COLUMN`, or ``base_model_variance_2`` (``_3``...) when ``columns`` already holds it."""
    taken = {str(c) for c in columns}
    name, k = VARIANCE_COLUMN, 1
    while name in taken:
        k += 1
        name = f"{VARIANCE_COLUMN}_{k}"
    return name


def wants_base_variance(spec, task: str, n_moments: int) -> bool:
    """Whether a run fits a base variance: an in-app base model with the switch on, a regression label and a
    fitted variance (a 0/1 label's variance is p (1 - p) once p is right; a mean-only fit has no variance)."""
    return spec.kind == "model" and bool(getattr(spec, "variance", True)) and task != "binary" and n_moments >= 2


def out_of_fold_residuals(X: pd.DataFrame, y: np.ndarray, kind: str, seed: int, stop=None, progress=None) -> np.ndarray:
    """The squared residuals of the base model ``kind`` on the rows of (X, y), each from a model fitted on the
    other four folds (unshuffled, as scikit-learn's ``cross_val_predict(cv=5)``); ``stop()`` is polled between
    folds (:class:`StoppedByUser`), ``progress(fold)`` is called before each (1 to FOLDS)."""
    from sklearn.model_selection import KFold

    oof = np.empty(len(y))
    for k, (train, held) in enumerate(KFold(FOLDS).split(X), start=1):
        if stop is not None and stop():
            raise StoppedByUser("stopped during the base variance fit")
        if progress is not None:
            progress(k)
        # one call per fold: the stop flag is looked at between folds, not between boosting chunks
        model = fit_base_model(X.iloc[train], y[train], kind, seed, one_call=True)
        with limit_threads():
            oof[held] = np.asarray(model.predict(X.iloc[held]), dtype=float)
    return (y - oof) ** 2


def fit_variance_model(X: pd.DataFrame, r2: np.ndarray, seed: int):
    """A Poisson HistGradientBoostingRegressor (log link; zero residuals allowed) of the squared residuals
    ``r2`` on the features ``X``, with the base model's one-hot encoding of text columns."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.pipeline import Pipeline

    cat = [c for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])]
    num = [c for c in X.columns if c not in cat]
    model = Pipeline(
        [
            ("pre", tree_preprocessor(cat, num)),
            ("reg", HistGradientBoostingRegressor(loss="poisson", random_state=seed)),
        ]
    )
    with warnings.catch_warnings(), limit_threads():
        warnings.simplefilter("ignore")  # the benchmark's: scikit-learn's convergence chatter is not for analysts
        model.fit(X, r2)
    return model


def predict_variance(model, X: pd.DataFrame, floor: float) -> np.ndarray:
    """The variance model's prediction of every row of ``X``, at least ``floor``."""
    with limit_threads():
        return np.maximum(np.asarray(model.predict(X), dtype=float), float(floor))


def fit_base_variance(df: pd.DataFrame, y: np.ndarray, rows: np.ndarray, spec, seed: int, stop=None, progress=None):
    """(every row's base variance, {"model", "floor"}): the recipe of the module doc on the base rows ``rows``
    with the features and model kind of ``spec``; DataError (one line) when it cannot be fitted."""
    if rows.size < MIN_ROWS:
        raise DataError(f"only {rows.size:,} base-model rows (at least {MIN_ROWS} are needed for {FOLDS} folds)")
    X = feature_frame(df, spec.features)
    try:
        r2 = out_of_fold_residuals(X.iloc[rows], y[rows], spec.model, seed, stop, progress)
        if not np.isfinite(r2).all() or not r2.mean() > 0:
            raise DataError("the base model's out-of-fold residuals are all zero: there is no spread to learn")
        floor = FLOOR * float(r2.mean())
        model = fit_variance_model(X.iloc[rows], r2, seed)
        v = predict_variance(model, X, floor)
    except (MMCError, StoppedByUser):
        raise
    except ValueError as e:  # scikit-learn's own checks
        raise DataError(str(e).splitlines()[0]) from None
    if not np.isfinite(v).all():
        raise DataError("the variance model predicts values that are not finite")
    return v, {"model": model, "floor": floor}


def base_variance(
    df: pd.DataFrame, y: np.ndarray, rows: np.ndarray, spec, seed: int, key: tuple, stop=None, progress=None
):
    """(every row's base variance in fitted-label units squared, or None; the note's sentence).

    ``key`` is the base model's cache key; the variance is cached under it plus the switch, so a new run with
    other fit parameters finds it (or the reason it could not be fitted) and does not fit it again. A failure
    never stops the run: the variance then starts from one constant, and the sentence says why."""
    vkey = (*key, ("variance", True))
    hit = cache_lookup(vkey)
    if hit is not None:
        v = hit[0]
        if isinstance(v, str):
            return None, f"not used ({v})"
        return v, "the variance model fitted for an earlier run with the same rows, not again"
    t0 = time.perf_counter()
    try:
        v, model = fit_base_variance(df, y, rows, spec, seed, stop, progress)
    except DataError as e:
        cache_put(vkey, str(e))
        return None, f"not used ({e})"
    seconds = time.perf_counter() - t0
    cache_put(vkey, v, model)
    return v, (
        f"a Poisson gradient boosting of the base model's {FOLDS}-fold out-of-fold squared residuals "
        f"on the same {rows.size:,} rows (fitted in {seconds:.2f} s)"
    )


def run_base_variance(
    df, label, label_spec, base_spec, split: dict, split_spec, data_key: str, n_moments: int, stop=None, say=None
):
    """The pipeline's base variance: (every row's, or None; the note's sentence, "" when none is wanted), for
    the base model :func:`app.services.base_model.base_prediction` fitted (or found) for the same arguments."""
    if not wants_base_variance(base_spec, label.task, n_moments):
        return None, ""
    key = model_key(df, label, label_spec, base_spec, split, split_spec, data_key)
    n = split["base"].size

    def progress(fold):
        if say is not None:
            say(f"fitting the base variance model on {n:,} rows (fold {fold} of {FOLDS})")

    return base_variance(df, label.y, split["base"], key[2], split_spec.seed, key, stop=stop, progress=progress)


def cached_variance_model(base_key: tuple):
    """The fitted variance model ({"model", "floor"}) cached for the base model of ``base_key`` in this
    process, or None (not fitted, fitted in a worker process, or not fitted because it failed)."""
    hit = cache_lookup((*base_key, ("variance", True)), touch=False)
    return None if hit is None or isinstance(hit[0], str) else hit[1]


__all__ = [
    "VARIANCE_COLUMN",
    "base_variance",
    "cached_variance_model",
    "fit_base_variance",
    "run_base_variance",
    "fit_variance_model",
    "out_of_fold_residuals",
    "predict_variance",
    "variance_column_name",
    "wants_base_variance",
]

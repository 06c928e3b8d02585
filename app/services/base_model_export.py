"""The exported base model: a skops file (scikit-learn's own safe format, no pickle), read with a closed list of
trusted types (:mod:`app.services.base_model_file`), that ``mmc predict --base-model`` applies to new rows. It holds
the run's base model and, when the run fitted one, its base variance model (:mod:`app.services.base_variance`), so
a model whose variance starts from it predicts on new rows too. Files written before the base variance (record
version 1) load as before.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pandas as pd

from app.services.base_model import (
    cache_items,
    feature_frame,
    fit_base_model,
    fit_digest,
    limit_threads,
    unwrap,
)
from app.services.base_model_file import BASE_MODEL_FORMAT, read_base_model_record
from app.services.base_variance import fit_base_variance, predict_variance
from app.services.specs import BaseSpec
from mmc_core.common import DataError

BASE_MODEL_FILE = "base_model.skops"
# the fitted model's predictions may differ from the run's stored ones by rounding only (relative to the span)
REPRODUCE_TOLERANCE = 1e-9


class LoadedBaseModel:
    """A base model read from a skops file: ``predict(df)`` gives the base prediction of every row of ``df``
    (fitted-label units: log units for a log label; a classifier's probability of the positive class), from the
    feature columns ``features`` the file records."""

    def __init__(self, record: dict, source: str = "the base model"):
        self.record = record
        self.source = source
        self.features = [str(f) for f in record["features"]]
        self.text_features = [str(f) for f in record.get("text_features", [])]
        self.output = record["output"]
        self.model = record["model"]
        # a base variance model ({"model", "floor", "column"}), in files written since it exists; None otherwise
        self.variance = record.get("variance")

    def missing(self, columns) -> list:
        have = {str(c) for c in columns}
        return [f for f in self.features if f not in have]

    def frame(self, df: pd.DataFrame) -> pd.DataFrame:
        """The feature columns of ``df`` as the fitted models take them (DataError naming a missing or
        non-numeric column)."""
        missing = self.missing(df.columns)
        if missing:
            raise DataError(
                f"the data lacks feature column(s) the base model needs: {', '.join(missing)} "
                f"(it was fitted on {', '.join(self.features)})"
            )
        X = df[self.features].copy()
        for c in self.features:
            s = X[c]
            if c in self.text_features:
                X[c] = s.astype("string").astype(object).where(s.notna(), None)
            elif pd.api.types.is_bool_dtype(s):
                X[c] = s.astype(float)
            elif not pd.api.types.is_numeric_dtype(s):
                raise DataError(
                    f"feature column '{c}' must hold numbers, as it did when the base model was fitted "
                    f"(found text such as {str(s.dropna().iloc[0])[:40]!r})"
                )
        return X

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """The base prediction of every row of ``df``."""
        X = self.frame(df)
        if len(X) == 0:
            return np.zeros(0)
        with limit_threads():
            if self.output == "probability":
                return np.asarray(self.model.predict_proba(X)[:, 1], dtype=float)
            return np.asarray(self.model.predict(X), dtype=float)

    def add_variance(self, df: pd.DataFrame, model) -> pd.DataFrame:
        """``df`` with the base variance column the fitted mmc ``model`` reads (``model.init_variance``), when
        that column is this file's base variance; ``df`` itself when the model reads none. DataError (one
        line) when the model needs it and this file has no base variance model."""
        iv = getattr(model, "init_variance", None)
        if not iv:
            return df
        col = iv["column"]
        if self.variance is None or self.variance.get("column") != col:
            if col in df.columns and self.variance is None:
                return df  # the data carries the column itself
            raise DataError(
                f"this model starts its variance from the base variance column {col!r}, which {self.source} does "
                "not hold (a base-model file exported before base variances, or from another run): export the "
                "base model again with this model"
            )
        if len(df) == 0:
            return df.assign(**{col: np.zeros(0)})
        v = predict_variance(self.variance["model"], self.frame(df), float(self.variance["floor"]))
        return df.assign(**{col: v})


def base_model_record(
    model, X: pd.DataFrame, *, kind: str, label_name: str, log: bool, label_range, seed: int, variance=None
) -> dict:
    """What the exported file holds: the scikit-learn pipeline and the facts needed to apply it to new rows;
    ``variance`` ({"model", "floor", "column"}): the base variance model (record version 2), or None (version 1,
    as files were before it)."""
    import sklearn

    inner, binary = unwrap(model)
    out = {
        "format": BASE_MODEL_FORMAT,
        "version": 1 if variance is None else 2,
        "features": [str(c) for c in X.columns],
        "text_features": [str(c) for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])],
        "output": "probability" if binary else "value",
        "kind": kind,
        "label": str(label_name),
        "log": bool(log),
        "label_range": [float(label_range[0]), float(label_range[1])],
        "seed": int(seed),
        "sklearn_version": str(sklearn.__version__),
        "model": inner,
    }
    if variance is not None:
        out["variance"] = {
            "model": variance["model"],
            "floor": float(variance["floor"]),
            "column": str(variance["column"]),
        }
    return out


def dump_base_model(record: dict) -> bytes:
    """The skops file of ``record`` (see :func:`base_model_record`)."""
    import skops.io

    return skops.io.dumps(record)


def load_base_model_bytes(data: bytes, source: str = "the base-model file") -> LoadedBaseModel:
    """A :class:`LoadedBaseModel` from the bytes of a skops file; :class:`DataError` (one line) for anything
    else: not a skops file, a type outside the trusted types (refused before skops builds anything, so
    nothing in the file runs), or a skops file that is not an mmc base model (:mod:`app.services.base_model_file`)."""
    return LoadedBaseModel(read_base_model_record(data, source), source)


def load_base_model(path) -> LoadedBaseModel:
    """:func:`load_base_model_bytes` of the file at ``path`` (DataError if it cannot be read)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise DataError(f"{path} is a folder, not a base-model file")
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would wait for a writer forever
        raise DataError(f"{path} is not a regular file (a device, FIFO or socket); give a base-model file")
    if not os.path.isfile(path):
        raise DataError(f"base-model file not found: {path}")
    with open(path, "rb") as f:
        return load_base_model_bytes(f.read(), path)


def _cached_models(run, spec_key: BaseSpec, digest: str, variance: bool):
    """The models in this process's cache fitted on the run's rows, labels, features and seed, newest first:
    base models, or with ``variance`` base variance models ({"model", "floor"})."""
    for key, (_, model) in reversed(cache_items()):
        if (
            model is not None
            and len(key) == (6 if variance else 5)
            and (not variance or key[5] == ("variance", True))
            and key[1:3] == (run.label_spec, spec_key)
            and key[4] == digest
            and getattr(key[3], "seed", None) == run.split_seed
        ):
            yield model


def _first_that_reproduces(models, predict, want: np.ndarray, tol: float, what: str):
    """The first of ``models`` (lazily: a refit only when no earlier one fits) whose ``predict(model)`` is
    within ``tol`` of ``want``; DataError saying by how much the closest missed."""
    worst = None
    for model in models:
        pred = predict(model)
        gap = float(np.max(np.abs(pred - want))) if want.size else 0.0
        if gap <= tol:
            return model
        worst = gap if worst is None else min(worst, gap)
    raise DataError(
        f"the {what} could not be rebuilt exactly (its predictions differ from this run's by up to {worst:.3g}): "
        "run the audit again, then export"
    )


def _variance_part(run, df: pd.DataFrame, X: pd.DataFrame, spec_key: BaseSpec, digest: str) -> dict | None:
    """The run's base variance model ({"model", "floor", "column"}) that reproduces ``run.base_variance``, or
    None when the run started its variance without one."""
    iv = getattr(run.model, "init_variance", None)
    if run.base_variance is None or not iv:
        return None
    want = np.asarray(run.base_variance, dtype=float)
    tol = REPRODUCE_TOLERANCE * max(1.0, float(np.max(want)) if want.size else 1.0)

    def refit():
        # a worker process's fit came back as its predictions only: the same recipe on the same rows and seed
        yield fit_base_variance(df, run.label.y, np.asarray(run.split["base"]), spec_key, run.split_seed)[1]

    chosen = _first_that_reproduces(
        itertools.chain(_cached_models(run, spec_key, digest, True), refit()),
        lambda m: predict_variance(m["model"], X, m["floor"]),
        want,
        tol,
        "base variance model",
    )
    return {**chosen, "column": iv["column"]}


def export_base_model(run, df: pd.DataFrame) -> bytes:
    """The skops file of ``run``'s in-app base model (and its base variance model, when the run fitted one),
    which reproduces ``run.base`` (and ``run.base_variance``) on the rows of ``df`` (the table the run was
    fitted on).

    The models the run used are taken from the cache when this process fitted them; models fitted in a worker
    process (the dashboard's default) came back as their predictions only, so they are fitted again on the same
    rows, labels, features and seed (one OpenMP thread: the same models). Either way their predictions on every
    row are compared with the run's: a model that does not reproduce them is never exported (DataError)."""
    spec = run.base_spec
    if spec.kind != "model" or run.base is None:
        raise DataError("this run has no base model fitted in the app")
    feats = [f for f in spec.features if f != run.label_spec.column]
    missing = [f for f in feats if f not in df.columns]
    if missing:
        raise DataError(f"feature column(s) not in the data: {', '.join(missing)}")
    rows = np.asarray(run.split["base"])
    y = run.label.y
    binary = run.label.task == "binary"
    X = feature_frame(df, feats)
    lo, hi = float(run.label.lo), float(run.label.hi)
    digest = fit_digest(df, y, rows, feats)
    spec_key = BaseSpec("model", None, spec.model, tuple(feats))

    def refits():
        for one_call in (True, False) if spec.model == "hgb" else (True,):
            try:
                yield fit_base_model(
                    X.iloc[rows], y[rows], spec.model, run.split_seed, binary=binary, one_call=one_call
                )
            except ValueError as e:
                raise DataError(f"the base model could not be fitted again: {str(e).splitlines()[0]}") from None

    def predict(model):
        with limit_threads():
            return np.clip(np.asarray(model.predict(X), dtype=float), lo, hi)

    model = _first_that_reproduces(
        itertools.chain(_cached_models(run, spec_key, digest, False), refits()),
        predict,
        np.asarray(run.base, dtype=float),
        REPRODUCE_TOLERANCE * max(1.0, hi - lo),
        "base model",
    )
    record = base_model_record(
        model,
        X,
        kind=spec.model,
        label_name=run.label.name,
        log=bool(run.label_spec.log),
        label_range=(lo, hi),
        seed=run.split_seed,
        variance=_variance_part(run, df, X, spec_key, digest),
    )
    return dump_base_model(record)

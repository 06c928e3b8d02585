"""The exported base model's file format, read without trusting it: a skops file (scikit-learn's own safe format,
no pickle) whose schema may name only the types an mmc base model holds (:data:`TRUSTED_TYPES`), checked before
skops builds anything and again by skops itself. :mod:`app.services.base_model_export` writes these files and wraps a record read
here as a :class:`app.services.base_model_export.LoadedBaseModel`.
"""

from __future__ import annotations

from mmc_core.common import DataError

BASE_MODEL_FORMAT = "mmc-base-model"
# Every type an exported base model may hold (the pipelines of fit_base_model and of the base variance's Poisson
# model, scikit-learn 1.4 and later, and the plain values of the file's record). load_base_model refuses a file naming any other type before skops
# builds anything, and passes this list (never trusted=True) to skops, which refuses anything else again.
TRUSTED_TYPES = tuple(
    sorted(
        {
            "builtins.dict",
            "builtins.list",
            "builtins.slice",
            "builtins.str",
            "builtins.tuple",
            "builtins.int",
            "builtins.float",
            "builtins.bool",
            "builtins.NoneType",
            "numpy.dtype",
            "numpy.ndarray",
            "numpy.float64",
            "numpy.float32",
            "numpy.int64",
            "numpy.int32",
            "numpy.uint8",
            "numpy.uint32",
            "numpy.uint64",
            "numpy.bool_",
            "numpy.random._generator.Generator",
            "numpy.random.mtrand.RandomState",
            "numpy.random._pcg64.PCG64",
            "numpy.random._mt19937.MT19937",
            "sklearn._loss._loss.CyHalfBinomialLoss",
            "sklearn._loss._loss.CyHalfPoissonLoss",  # the base variance model (app.services.base_variance)
            "sklearn._loss._loss.CyHalfSquaredError",
            "sklearn._loss.link.IdentityLink",
            "sklearn._loss.link.Interval",
            "sklearn._loss.link.LogLink",
            "sklearn._loss.link.LogitLink",
            "sklearn._loss.loss.HalfBinomialLoss",
            "sklearn._loss.loss.HalfPoissonLoss",
            "sklearn._loss.loss.HalfSquaredError",
            "sklearn.compose._column_transformer.ColumnTransformer",
            "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
            "sklearn.ensemble._hist_gradient_boosting.gradient_boosting.HistGradientBoostingClassifier",
            "sklearn.ensemble._hist_gradient_boosting.gradient_boosting.HistGradientBoostingRegressor",
            "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
            "sklearn.impute._base.SimpleImputer",
            "sklearn.linear_model._logistic.LogisticRegressionCV",
            "sklearn.linear_model._ridge.RidgeCV",
            "sklearn.pipeline.Pipeline",
            "sklearn.preprocessing._data.StandardScaler",
            "sklearn.preprocessing._encoders.OneHotEncoder",
            "sklearn.preprocessing._function_transformer.FunctionTransformer",
            "sklearn.preprocessing._label.LabelEncoder",
        }
    )
)


def _schema_types(node, out: set) -> set:
    """Every type (module.name) a skops schema names, at any depth."""
    if isinstance(node, dict):
        if "__class__" in node or "__module__" in node:
            out.add(f"{node.get('__module__', '?')}.{node.get('__class__', '?')}")
        for v in node.values():
            _schema_types(v, out)
    elif isinstance(node, list):
        for v in node:
            _schema_types(v, out)
    return out


def read_base_model_record(data: bytes, source: str = "the base-model file") -> dict:
    """The record of an mmc base-model file (see :func:`app.services.base_model_export.base_model_record`) from its bytes.

    Parameters
    ----------
    data : the bytes of a skops file
    source : how messages name the file

    Returns
    -------
    dict with the fitted scikit-learn model and the facts needed to apply it

    Raises
    ------
    DataError
        One line, for anything else: not a skops file, a type outside :data:`TRUSTED_TYPES` (refused before
        skops builds anything, so nothing in the file runs), or a skops file that is not an mmc base model.
    """
    import io
    import json
    import zipfile

    not_ours = f"{source} is not a base model saved by mmc (a skops file, e.g. base_model.skops from the Export page)"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            schema = json.loads(z.read("schema.json"))
    except (zipfile.BadZipFile, KeyError, ValueError, RuntimeError, OSError, NotImplementedError):
        raise DataError(not_ours) from None
    names = _schema_types(schema, set())
    untrusted = sorted(names - set(TRUSTED_TYPES))
    if untrusted:
        raise DataError(
            f"{source} holds type(s) an mmc base model never has, refused without loading: "
            f"{', '.join(untrusted[:5])}{' ...' if len(untrusted) > 5 else ''}"
        )
    try:
        import skops.io
    except ImportError as e:
        raise DataError(f"reading a base-model file needs the skops package: pip install skops ({e})") from None
    try:
        record = skops.io.loads(data, trusted=list(TRUSTED_TYPES))
    except Exception as e:  # noqa: BLE001 - skops raises many types for a damaged or foreign file: one line
        first = str(e).splitlines()[0][:200] if str(e) else ""
        raise DataError(f"{source} could not be read as a base model ({type(e).__name__}: {first})") from None
    ok = (
        isinstance(record, dict)
        and record.get("format") == BASE_MODEL_FORMAT
        and isinstance(record.get("features"), list)
        and record["features"]
        and all(isinstance(f, str) for f in record["features"])
        and record.get("output") in ("probability", "value")
        and hasattr(record.get("model"), "predict_proba" if record.get("output") == "probability" else "predict")
    )
    var = record.get("variance") if ok else None
    if var is not None and not (  # the base variance model of a newer file (record version 2)
        isinstance(var, dict)
        and hasattr(var.get("model"), "predict")
        and isinstance(var.get("floor"), float)
        and isinstance(var.get("column"), str)
    ):
        ok = False
    if not ok:
        raise DataError(not_ours)
    return record

"""The table edge of the core: labels and predictions as checked float vectors, tables (DataFrame, dict of
columns, 2-D array) read by column name, and row selection. Every error names the column or parameter."""

from __future__ import annotations

import numpy as np

from .errors import DataError


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
        raise DataError(
            f"{name} has {int(bad.sum())} missing or infinite value(s) (first at row {int(np.flatnonzero(bad)[0])})"
        )
    return arr


def as_table(X):
    """A table the estimator reads by column name: DataFrames (anything with ``columns``) and dicts of columns
    pass unchanged; a 2-D numpy array becomes columns ``x0``, ``x1``, ... (so groups can name them)."""
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):  # before dict: a dok_matrix is one
        raise DataError(f"X is a sparse matrix ({type(X).__name__}): sparse input is not supported, pass a dense table")
    if hasattr(X, "columns") or isinstance(X, dict):
        return X
    if not isinstance(X, (np.ndarray, str, bytes)) and (hasattr(X, "__len__") or hasattr(X, "__array__")):
        try:  # a 2-D array-like (a list of rows, an object with __array__), as scikit-learn's estimators accept
            arr = np.asarray(X)
        except (TypeError, ValueError):
            arr = None
        if arr is not None and arr.ndim == 2:
            X = arr
    if isinstance(X, np.ndarray):
        if X.ndim != 2:
            raise DataError(
                f"X must be a table (DataFrame, dict of columns or 2-D array), got a {X.ndim}-D array. "
                "Reshape your data: X.reshape(-1, 1) for a single column"
            )
        if X.shape[1] == 0:
            raise DataError(
                f"X has 0 feature(s) (shape=({X.shape[0]}, 0)) while a minimum of 1 is required: pass the table "
                "with at least the columns the groups refer to"
            )
        return {f"x{j}": X[:, j] for j in range(X.shape[1])}
    raise DataError(
        f"X must be a pandas DataFrame, a dict of columns or a 2-D array (numpy or array-like), got {type(X).__name__}"
    )


def count_rows(X) -> int:
    if hasattr(X, "shape"):
        return int(X.shape[0])
    if not X:
        raise DataError("X has no columns: pass the table with at least the columns the groups refer to")
    return len(next(iter(X.values())))


def take_rows(X, idx):
    """Rows ``idx`` of a DataFrame or a dict of columns, as a dict of numpy columns."""
    if hasattr(X, "iloc"):
        return {c: X[c].to_numpy()[idx] for c in X.columns}
    return {c: np.asarray(v)[idx] for c, v in X.items()}


def variance_column(table, column: str, n: int | None = None) -> np.ndarray:
    """The base variance in the column ``column`` of ``table`` (label units squared): finite and >= 0, with at
    least one positive value, or a DataError naming the column."""
    cols = list(table.keys()) if hasattr(table, "keys") else []
    if column not in cols:
        raise DataError(
            f"base variance column {column!r} (variance_column, mmc fit --variance-pred) is not in the data "
            f"(columns: {', '.join(map(str, cols[:20]))})"
        )
    name = f"base variance '{column}' (variance_column)"
    v = to_label_array(table[column], name, n)
    neg = v < 0
    if neg.any():
        raise DataError(f"{name} has {int(neg.sum())} negative value(s) (first at row {int(np.flatnonzero(neg)[0])})")
    return v

"""Checks of a table before a run (pure pandas; no Streamlit): which columns must not be base-model features.

:func:`feature_flags` names, for every column that is unusable or dangerous as a feature, the reason in a few
words: all values missing, a single value, an identifier, or a column that leaks the label (a near-perfect
correlation with it, or an exact monotone transform of it such as ``hrwage`` for the label ``lwage``).
The dashboard does not pre-select flagged columns and shows the reasons next to the feature list; the
pipeline refuses all-missing and constant features with a message naming the column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["feature_flags", "LEAK_CORRELATION", "unusable_feature_error", "label_problem_rows", "unlisted_notes"]

LEAK_CORRELATION = 0.98  # |Pearson r| at or above this with the label: flagged as leaking
MONOTONE_RANK = 0.999  # |Spearman rho| at or above this: an exact monotone transform of the label
MIN_PAIRS = 10


def _numeric(s: pd.Series) -> pd.Series | None:
    if pd.api.types.is_bool_dtype(s):
        return s.astype(float)
    if pd.api.types.is_numeric_dtype(s):
        return s.astype(float)
    return None


def feature_flags(df: pd.DataFrame, label: str | None = None) -> dict:
    """{column: reason} for columns that should not be base-model features (the label itself excluded)."""
    out: dict = {}
    y = None
    if label is not None and label in df.columns:
        y = pd.to_numeric(df[label], errors="coerce").astype(float)
        y = y.where(np.isfinite(y))
    n = len(df)
    for c in df.columns:
        if c == label:
            continue
        s = df[c]
        nn = int(s.notna().sum())
        if nn == 0:
            out[c] = "all values are missing"
            continue
        distinct = int(s.nunique(dropna=True))
        if distinct <= 1:
            out[c] = "constant (a single value)"
            continue
        x = _numeric(s)
        if x is None:
            if n >= 50 and distinct >= 0.95 * nn:
                out[c] = "an identifier (almost every value is different)"
            continue
        if y is None:
            continue
        ok = x.notna() & y.notna() & np.isfinite(x)
        if int(ok.sum()) < MIN_PAIRS:
            continue
        xv, yv = x[ok], y[ok]
        if xv.nunique() < 2 or yv.nunique() < 2:
            continue
        r = float(np.corrcoef(xv.to_numpy(), yv.to_numpy())[0, 1])
        if np.isfinite(r) and abs(r) >= LEAK_CORRELATION:
            out[c] = f"leaks the label '{label}' (correlation {r:.3f})"
            continue
        if xv.nunique() > 10:
            rho = float(np.corrcoef(xv.rank().to_numpy(), yv.rank().to_numpy())[0, 1])
            if np.isfinite(rho) and abs(rho) >= MONOTONE_RANK:
                out[c] = f"leaks the label '{label}' (an exact monotone transform of it, rank correlation {rho:.4f})"
    return out


def unusable_feature_error(df: pd.DataFrame, features) -> str | None:
    """A one-line message naming the first feature that cannot be used at all (all missing or constant)."""
    for c in features:
        if c not in df.columns:
            continue
        s = df[c]
        if s.notna().sum() == 0:
            return f"feature column '{c}' has no values (all missing): remove it from the base-model features"
        if s.nunique(dropna=True) <= 1:
            return f"feature column '{c}' is constant (a single value): remove it from the base-model features"
    return None


def label_problem_rows(df: pd.DataFrame, label: str) -> np.ndarray:
    """Boolean mask of rows whose label is missing, non-numeric or infinite."""
    s = df[label]
    if pd.api.types.is_bool_dtype(s):
        v = s.astype(float)
    else:
        v = pd.to_numeric(s, errors="coerce").astype(float)
    arr = v.to_numpy(dtype=float, na_value=np.nan)
    return ~np.isfinite(arr)


def unlisted_notes(groups, table) -> list[str]:
    """One sentence per group column of ``groups`` (a GroupSet) on which rows of ``table`` carry a value that
    no group lists (a category new since the fit: no group of that column corrects those rows). The one wording
    of this note, printed by ``mmc predict`` / ``mmc audit`` and written into the PDF report."""
    return [
        f"{k:,} row(s) have a value of group column '{col}' that no group of the model lists (e.g. "
        f"{', '.join(map(repr, examples))}): no group of that column corrects them"
        for col, k, examples in groups.unlisted_values(table)
    ]

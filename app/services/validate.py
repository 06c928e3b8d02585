"""Checks of a table before a run (pure pandas; no Streamlit): which columns must not be base-model features.

:func:`feature_flags` names, for every column that is unusable or dangerous as a feature, the reason in a few
words: all values missing, a single value, an identifier (text nearly unique per row, or whole numbers unique
per row named like an id or numbering the rows), or a column that leaks the label: a near-perfect correlation
with it, an exact monotone transform of it (``hrwage`` for the label ``lwage``), a column of few values that
determines the label (``action`` for ``approve``), one that is a step function of it (``affair`` = ``naffairs``
> 0), a label that is a step function of the column (``inlf`` = ``hours`` > 0), or a column missing exactly on
one side of a cut of the label (``wage`` missing exactly when ``hours`` is 0).
The dashboard does not pre-select flagged columns and shows the reasons next to the feature list; the
pipeline refuses all-missing and constant features with a message naming the column.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

__all__ = ["feature_flags", "LEAK_CORRELATION", "unusable_feature_error", "label_problem_rows", "unlisted_notes"]

LEAK_CORRELATION = 0.98  # |Pearson r| at or above this with the label: flagged as leaking
MONOTONE_RANK = 0.999  # |Spearman rho| at or above this: an exact monotone transform of the label
MIN_PAIRS = 10
FEW_VALUES = 50  # a column of at most this many distinct values can be checked as a coding of the label
DETERMINED_SHARE = 0.8  # "the label is a function of the column" must hold on this share of rows (values seen twice)
MIN_SIDE = 3  # rows on the smaller side of a step: one or two rows at an end of the label's order happen by chance
MIN_MISSING = 10  # missing cells for a missingness step: a lag's first rows missing where a trending label peaks
MIN_ID_ROWS = 20
_ID_WORDS = {"id", "ids", "idx", "index", "key", "obs", "obsno", "row", "rownum", "rowid", "serial", "uid", "uuid"}


def _numeric(s: pd.Series) -> pd.Series | None:
    if pd.api.types.is_bool_dtype(s):
        return s.astype(float)
    if pd.api.types.is_numeric_dtype(s):
        return s.astype(float)
    return None


def _id_like_name(name) -> bool:
    """``id``, ``person_id``, ``caseID``, ``hhid``, ``row_no``: a name that says the column numbers records."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower()
    words = [w for w in re.split(r"[^a-z0-9]+", text) if w]
    if not words:
        return False
    if words[-1] in _ID_WORDS or words[0] in ("id", "idx"):
        return True
    return words[-1].endswith("id") and len(words[-1]) <= 6 or (words[-1] in ("no", "nr", "num") and len(words) > 1)


def _integer_id(s: pd.Series, x: pd.Series | None, n: int) -> str | None:
    """Whole numbers, one per row (none missing), named like an id or numbering the rows (0..n-1 or 1..n in any
    order; a ``year`` of a yearly series is a range too, but not from 0 or 1): the reason, or None."""
    if x is None or pd.api.types.is_bool_dtype(s) or n < MIN_ID_ROWS or int(s.notna().sum()) != n:
        return None
    v = x.to_numpy(dtype=float)
    if not np.isfinite(v).all() or not (v == np.round(v)).all() or int(s.nunique()) != n:
        return None
    if _id_like_name(s.name):
        return "an identifier (a different whole number in every row)"
    if float(v.max() - v.min()) == n - 1 and float(v.min()) in (0.0, 1.0):
        return f"numbers the rows ({_fmt(v.min())} to {_fmt(v.max())}, each once): an identifier or a time index"
    return None


def _fmt(v) -> str:
    """A value as the group names write it (:func:`mmc_core.groups.group_set.format_value`: 3, not 3.0), numpy scalars
    included."""
    from mmc_core.groups import format_value

    return format_value(v.item() if isinstance(v, np.generic) else v)


def _step(key: np.ndarray, val: np.ndarray):
    """``val`` (codes >= 0) as a step function of ``key`` (sorted ascending): a single value per key, and along
    the keys each value in one run (so it changes at most k - 1 times for k values), every value on at least
    ``MIN_SIDE`` rows. Returns (the value per key, the first row of each key) or None. O(n), no Python loop."""
    if len(key) < 2:
        return None
    new = np.empty(len(key), dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    if np.any((val[1:] != val[:-1]) & ~new[1:]):  # two values for one key
        return None
    starts = np.flatnonzero(new)
    seq = val[starts]
    counts = np.bincount(val)
    counts = counts[counts > 0]
    if len(counts) < 2 or counts.min() < MIN_SIDE or np.count_nonzero(seq[1:] != seq[:-1]) > len(counts) - 1:
        return None
    return seq, starts


def _first_change(seq: np.ndarray) -> int:
    return int(np.flatnonzero(seq[1:] != seq[:-1])[0])


def _up_to(lab: dict, key: int, single: bool, above: bool = False) -> str:
    """'is 0', 'is at most 2', 'is at least 5': the label's side of a cut (text labels in sorted order)."""
    v = _fmt(lab["values"][key])
    if single:
        return f"is {v}"
    if lab["numeric"]:
        return f"is at least {v}" if above else f"is at most {v}"
    return f"is {v} or after it (sorted)" if above else f"is {v} or before it (sorted)"


def _label_is_determined(xcode: np.ndarray, lcode: np.ndarray) -> bool:
    """Each value of the column seen at least twice has a single label value, on most rows, with >= 2 label
    values among them (a rare label value alone in a row does not count)."""
    o = np.argsort(xcode, kind="stable")
    xs, ls = xcode[o], lcode[o]
    if np.any((ls[1:] != ls[:-1]) & (xs[1:] == xs[:-1])):
        return False
    sizes = np.bincount(xcode)
    seen = sizes >= 2
    if int(sizes[seen].sum()) < DETERMINED_SHARE * len(xcode):
        return False
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    return len(np.unique(ls[starts][seen[xs[starts]]])) >= 2


def _leak_reason(c, s: pd.Series, x: pd.Series | None, distinct: int, lab: dict) -> str | None:
    """Why column ``c`` leaks the label (``lab``: the label's forms, computed once by :func:`_label_forms`)."""
    label = lab["name"]
    has_y = lab["has_y"]
    # 1. near-perfect correlation, exact monotone transform (numeric columns)
    xf = None if x is None else x.to_numpy(dtype=float, na_value=np.nan)
    if xf is not None and lab["numeric"]:
        ok = np.isfinite(xf) & has_y
        if int(ok.sum()) >= MIN_PAIRS:
            xv, yv = xf[ok], lab["y"][ok]
            if np.ptp(xv) > 0 and np.ptp(yv) > 0:
                r = float(np.corrcoef(xv, yv)[0, 1])
                if np.isfinite(r) and abs(r) >= LEAK_CORRELATION:
                    return f"leaks the label '{label}' (correlation {r:.3f})"
                if distinct > 10:
                    yr = lab["yrank"] if ok.sum() == lab["rows"] else pd.Series(yv).rank().to_numpy()
                    rho = float(np.corrcoef(pd.Series(xv).rank().to_numpy(), yr)[0, 1])
                    if np.isfinite(rho) and abs(rho) >= MONOTONE_RANK:
                        return (
                            f"leaks the label '{label}' (an exact monotone transform of it, rank correlation {rho:.4f})"
                        )
    present = s.notna().to_numpy()
    both = present & has_y
    code, values = lab["code"], lab["values"]
    if int(both.sum()) >= MIN_PAIRS and lab["k"] >= 2:
        if 2 <= distinct <= FEW_VALUES:
            xcode, xuniq = pd.factorize(s, sort=True)
            # 2. a step function of the label (an indicator such as label > 0, a banding of it)
            o = lab["order"][both[lab["order"]]]  # rows in the label's order
            step = _step(code[o], xcode[o])
            if step is not None:
                seq, starts = step
                if len(np.unique(seq)) == 2:
                    i = _first_change(seq)
                    when = _up_to(lab, code[o][starts[i]], i == 0)
                    return (
                        f"leaks the label '{label}' (it is {_fmt(xuniq[seq[i]])} exactly when '{label}' {when}, "
                        f"else {_fmt(xuniq[seq[i + 1]])})"
                    )
                return f"leaks the label '{label}' (a step function of it: one value per range of '{label}')"
            # 3. the label is a function of it (a coding of the outcome, such as a decision code)
            if distinct < int(both.sum()) and _label_is_determined(xcode[both], code[both]):
                return f"leaks the label '{label}' (each value of '{c}' goes with a single value of the label)"
        # 4. the label (of few values) is a step function of a numeric column (label = column > 0): the column's
        # ranges of the label's values do not overlap (no sort of the column needed)
        if xf is not None and lab["k"] <= FEW_VALUES and lab["k"] < lab["rows"]:
            ok = np.isfinite(xf) & has_y
            g, v = code[ok], xf[ok]
            lo = np.full(lab["k"], np.inf)
            hi = np.full(lab["k"], -np.inf)
            np.minimum.at(lo, g, v)
            np.maximum.at(hi, g, v)
            counts = np.bincount(g, minlength=lab["k"])
            used = np.flatnonzero(counts)
            used = used[np.argsort(lo[used], kind="stable")]
            if len(used) >= 2 and counts[used].min() >= MIN_SIDE and np.all(hi[used[:-1]] < lo[used[1:]]):
                if len(used) == 2:
                    return (
                        f"leaks the label '{label}' (the label is {_fmt(values[used[0]])} exactly when '{c}' is at "
                        f"most {_fmt(hi[used[0]])}, else {_fmt(values[used[1]])})"
                    )
                return f"leaks the label '{label}' (the label is a step function of it)"
    # 5. missing exactly on one side of a cut of the label (a wage recorded only for those who worked)
    n_miss = lab["rows"] - int(both.sum())
    if MIN_MISSING <= n_miss <= lab["rows"] - MIN_SIDE and lab["k"] >= 2:
        o = lab["order"]
        step = _step(code[o], (~present[o]).astype(np.intp))
        if step is not None:
            seq, starts = step
            keys = code[o][starts]
            i = _first_change(seq)  # the first run ends at key i
            if seq[0]:  # missing on the low side
                when = _up_to(lab, keys[i], i == 0)
            else:
                when = _up_to(lab, keys[i + 1], i == len(keys) - 2, above=True)
            return f"leaks the label '{label}' (missing exactly when '{label}' {when})"
    return None


def _label_forms(df: pd.DataFrame, label: str) -> dict:
    """The label as floats, as dense codes in its order (numbers by value, text sorted), its rows in that
    order and its ranks: computed once per table, not once per column."""
    raw = df[label]
    y = raw.astype(float) if pd.api.types.is_bool_dtype(raw) else pd.to_numeric(raw, errors="coerce").astype(float)
    y = y.where(np.isfinite(y))
    numeric = bool(y.notna().any())
    code, values = pd.factorize(y if numeric else raw, sort=True)
    has_y = code >= 0
    yf = y.to_numpy(dtype=float, na_value=np.nan)
    return {
        "name": label,
        "y": yf,
        "numeric": numeric,
        "has_y": has_y,
        "rows": int(has_y.sum()),
        "code": code,
        "values": np.asarray(values),
        "k": len(values),
        "order": np.flatnonzero(has_y)[np.argsort(code[has_y], kind="stable")],
        "yrank": pd.Series(yf[has_y]).rank().to_numpy() if numeric else None,
    }


def feature_flags(df: pd.DataFrame, label: str | None = None) -> dict:
    """{column: reason} for columns that should not be base-model features (the label itself excluded)."""
    out: dict = {}
    lab = _label_forms(df, label) if label is not None and label in df.columns else None
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
        elif why := _integer_id(s, x, n):
            out[c] = why
            continue
        if lab is None:
            continue
        why = _leak_reason(c, s, x, distinct, lab)
        if why:
            out[c] = why
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

"""What the dashboard knows about a table without the session: which column is likely the label, which columns
are numbers (or numbers but for a few cells), the features to pre-select, and the facts the pages show about
it, cached per table (keyed on the table's hash ``key``; the table itself is not hashed). The session's own
state (:mod:`app.ui.state`) applies these guesses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from app.services.specs import BaseSpec, FitSettings, LabelSpec, SplitSpec

PREVIEW_ROWS = 200

LABEL_NAMES = ("y", "label", "target", "outcome", "y_true")
PREDICTION_NAMES = ("pred", "prediction", "y_pred", "base_pred", "yhat", "score_pred")


def guess_label(frame: pd.DataFrame, nums: list | None = None):
    """The label column an upload most likely means: a column named like a label (y, label, target, ...) even
    when some of its cells are not numbers (the Data page then names them and offers to drop those rows),
    else the last numeric column that varies and is not named like a prediction; never a prediction column
    while another numeric column exists, never a constant column while a varying one exists."""
    nums = numeric_columns(frame) if nums is None else nums
    named = {str(c).lower(): c for c in frame.columns}
    for n in LABEL_NAMES:
        if n in named:
            return named[n]
    usable = [c for c in nums if frame[c].notna().any()]
    varying = [c for c in usable if frame[c].nunique(dropna=True) > 1]  # a constant column has nothing to calibrate
    plain = [c for c in varying if str(c).lower() not in PREDICTION_NAMES]
    pool = plain or varying or usable or nums
    return pool[-1] if pool else None


def numeric_columns(frame: pd.DataFrame) -> list:
    return [
        c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
    ]


NUMBER_LIKE_SHARE = 0.9  # a text column whose cells are numbers but for at most 10% is offered as numeric
_NUMBER_LIKE_SAMPLE = 20_000  # cells looked at per text column


def number_like_columns(frame: pd.DataFrame) -> list:
    """Text columns whose cells are numbers but for a few: one stray 'abc' or 'n/a' makes pandas read a whole
    prediction column as text, and it was then never offered as the prediction (the page quietly chose to fit
    a model instead). Offered where a number column is expected, marked as text, so the Data page names the
    cells that are not numbers and can drop those rows. Judged on at most ``_NUMBER_LIKE_SAMPLE`` cells."""
    out = []
    for c in frame.columns:
        s = frame[c]
        if not (pd.api.types.is_object_dtype(s) or pd.api.types.is_string_dtype(s)):
            continue
        cells = s.dropna().iloc[:_NUMBER_LIKE_SAMPLE]
        if cells.empty:
            continue
        numbers = pd.to_numeric(cells.astype(str).str.strip(), errors="coerce").notna()
        if numbers.mean() >= NUMBER_LIKE_SHARE:
            out.append(c)
    return out


@st.cache_data(show_spinner=False, max_entries=16)
def number_like(_frame: pd.DataFrame, key: str) -> list:
    """:func:`number_like_columns` of the table ``key`` (the Data page asks on every rerun)."""
    return number_like_columns(_frame)


def preselected_features(frame: pd.DataFrame, label, base_col, demo, flags) -> list:
    """The base-model features pre-selected for ``label`` (on loading a table, and again on a new label): every
    column but the label, the prediction column ``base_col``, a demo's truth and leaky columns, and the
    ``flags`` (:func:`app.services.validate.feature_flags` of the label), in the table's order."""
    out = set(getattr(demo, "ground_truth", ()) or ()) | set(getattr(demo, "leaky", ()) or ())
    out |= set(flags) | {label, base_col}
    return [c for c in frame.columns if c not in out]


# ---------------------------------------------------------------------------------------------------
# cached table helpers (keyed on the data hash; the table itself is not hashed)
# ---------------------------------------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=8)
def preview(_frame: pd.DataFrame, key: str, n: int = PREVIEW_ROWS) -> pd.DataFrame:
    if len(_frame) <= n:
        return _frame.copy()
    idx = np.sort(np.random.default_rng(0).choice(len(_frame), n, replace=False))
    return _frame.iloc[idx]


@st.cache_data(show_spinner=False, max_entries=8)
def column_profile(_frame: pd.DataFrame, key: str) -> pd.DataFrame:
    rows = []
    for c in _frame.columns:
        s = _frame[c]
        numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
        rows.append(
            {
                "column": c,
                "type": "number" if numeric else ("yes/no" if pd.api.types.is_bool_dtype(s) else "text"),
                "missing": int(s.isna().sum()),
                "distinct": int(s.nunique(dropna=True)),
                "min": float(s.min()) if numeric and s.notna().any() else None,
                "max": float(s.max()) if numeric and s.notna().any() else None,
            }
        )
    return pd.DataFrame(rows)


@st.cache_data(show_spinner=False, max_entries=32)
def group_sizes(_frame: pd.DataFrame, key: str, groups_text: str) -> list:
    from mmc_core import GroupSet

    gs = GroupSet.from_json(groups_text)
    return [int(v) for v in gs.evaluate(_frame).sizes]


@st.cache_data(show_spinner=False, max_entries=64)
def column_values(_frame: pd.DataFrame, key: str, col: str) -> dict:
    from app.ui.groupbuild import column_kind, distinct_values

    s = _frame[col]
    kind = column_kind(s)
    out = {"kind": kind, "missing": int(s.isna().sum())}
    if kind == "categorical":
        out["values"] = distinct_values(s, limit=200)
        out["n_distinct"] = int(s.nunique(dropna=True))
    else:
        v = pd.to_numeric(s, errors="coerce").dropna()
        out["min"], out["max"] = float(v.min()), float(v.max())
        out["quartiles"] = [float(q) for q in np.quantile(v, [0.25, 0.5, 0.75])]
    return out


@st.cache_data(show_spinner=False, max_entries=32)
def threshold_preview(
    _frame: pd.DataFrame,
    key: str,
    lspec: LabelSpec,
    bspec: BaseSpec,
    sspec: SplitSpec,
    n_groups: int,
    settings: FitSettings,
    groups_text: str | None = None,
) -> dict | None:
    """The thresholds a run with these settings will use, asked of the estimator the run fits with
    (:func:`app.services.pipeline.planned_thresholds`); None when the base model must be fitted first or the groups
    file (``groups_text``, JSON) is missing. ``n_groups`` only keys the cache (the groups file decides)."""
    from app.services.base_model import base_prediction
    from app.services.pipeline import make_estimator, planned_thresholds, split_rows
    from app.services.specs import prepare_label
    from mmc_core.common import MMCError

    if not isinstance(settings.alpha, str) and not isinstance(settings.beta, str):  # set by hand: nothing to compute
        a, b = float(settings.alpha), float(settings.beta)
        return {"alpha": a, "beta": b, "moment_betas": {k: b for k in range(2, int(settings.n_moments) + 1)}}
    if bspec.kind == "model" or groups_text is None:  # the base model is fitted at the start of the run
        return None
    try:
        from mmc_core import GroupSet

        lab = prepare_label(_frame, lspec)
        split = split_rows(len(_frame), sspec, False, settings.calibration_fraction)
        base, _ = base_prediction(_frame, lab, lspec, bspec, split, sspec, key)
        est = make_estimator(settings, lab, sspec.seed)
        return planned_thresholds(est, _frame, lab, base, GroupSet.from_json(groups_text), split["fit"])
    except MMCError:
        return None
    except Exception:  # noqa: BLE001 - a preview never breaks the page; the run reports the error
        return None


@st.cache_data(show_spinner=False, max_entries=16)
def label_problems(_frame: pd.DataFrame, key: str, label: str) -> int:
    """How many rows of ``label`` (any column meant to be numeric) are missing, not numbers or infinite."""
    from app.services.validate import label_problem_rows

    return int(label_problem_rows(_frame, label).sum())


@st.cache_data(show_spinner=False, max_entries=16)
def feature_flags(_frame: pd.DataFrame, key: str, label: str | None) -> dict:
    from app.services.validate import feature_flags as flags

    return flags(_frame, label)


@st.cache_data(show_spinner=False, max_entries=16)
def label_summary(_frame: pd.DataFrame, key: str, spec: LabelSpec) -> dict:
    """The prepared label's range and a histogram, or the error message."""
    from app.services.specs import prepare_label
    from mmc_core.common import MMCError

    try:
        lab = prepare_label(_frame, spec)
    except MMCError as e:
        return {"error": str(e)}
    counts, edges = np.histogram(lab.y, bins=40)
    return {
        "lo": lab.lo,
        "hi": lab.hi,
        "name": lab.name,
        "note": lab.note,
        "n_clipped": lab.n_clipped,
        "mean": float(np.mean(lab.y)),
        "sd": float(np.std(lab.y)),
        "counts": counts.tolist(),
        "edges": edges.tolist(),
    }

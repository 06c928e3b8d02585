"""Session state of the dashboard: defaults, the current table, the specs built from widget values, caches.

Conventions: every widget that holds a setting has a key listed in ``PERSIST``; its default is put into
``st.session_state`` before any widget is drawn (so widgets never get ``value=`` and a key at the same
time), and :func:`keep_widget_state` re-assigns those keys on every run so that Streamlit does not drop
them while their page is not shown.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pandas as pd
import streamlit as st

from app import demo_data
from app.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec, frame_key

DEFAULT_DATASET = "synthetic_scores"
PREVIEW_ROWS = 200

# widget keys whose values must survive page switches, with their defaults
SETTING_DEFAULTS = {
    "label_col": None, "label_scaling": "observed", "label_lo": 0.0, "label_hi": 1.0, "label_qlo": 1.0,
    "label_qhi": 99.0, "label_log": False, "label_units": "",
    "base_kind": "none", "base_col": None, "base_model": "hgb", "base_features": [],
    "split_test": 30, "split_base": 30, "split_seed": 0,
    "p_auto": True, "p_alpha": 0.001, "p_beta": 0.0001, "p_m": 5, "p_k": 2, "p_step": "exact", "p_odd": "absolute",
    "p_cal": 25, "p_es": False, "p_maxr": 0, "p_delta": 0.1, "p_gamma": 0.05, "p_nboot": 200,
    "qa_cols": [], "qa_order": 1, "qa_bins": 4, "src_kind": "Bundled demo dataset", "demo_name": DEFAULT_DATASET,
    "t_pop": "strong", "t_alpha": 0.02, "t_beta": 0.02, "t_m": 5, "t_cols": ["sex", "race", "age"], "t_start": "zero", "t_seed": 0,
    "t_speed": 0.25,
    "res_method": "calibrated", "res_moment": 2, "res_top": 30, "res_mincount": 20, "exp_methods": ["calibrated"],
}
PERSIST = tuple(SETTING_DEFAULTS)


def keep_widget_state():
    """Keep settings across page switches. Streamlit drops the state of widgets that a run did not draw (and a
    fragment rerun on another page can drop them too), so every setting is mirrored in ``_persist`` and
    restored from there when its key has gone."""
    ss = st.session_state
    store = ss.setdefault("_persist", {})
    for k in PERSIST:
        if k in ss:
            store[k] = ss[k]
            ss[k] = ss[k]
        elif k in store:
            ss[k] = store[k]


def save_widget_state():
    """Mirror the settings after a run (programmatic changes made during the run included)."""
    ss = st.session_state
    store = ss.setdefault("_persist", {})
    for k in PERSIST:
        if k in ss:
            store[k] = ss[k]


def init_session(cli_data: str | None = None):
    ss = st.session_state
    for k, v in SETTING_DEFAULTS.items():
        ss.setdefault(k, v)
    ss.setdefault("groups", [])
    ss.setdefault("job", None)
    ss.setdefault("run", None)
    ss.setdefault("messages", [])
    if "data" not in ss:
        ss["data"] = None
        if cli_data:
            try:
                from app.io import read_table

                df = read_table(cli_data)
                set_data(df, os.path.basename(cli_data), "file")
                ss["src_kind"] = "File given on the command line"
                ss["cli_data"] = cli_data
            except Exception as e:  # noqa: BLE001 - shown on the Data page; fall back to the demo
                ss["cli_data_error"] = f"could not open {cli_data}: {e}"
                load_demo_into_state(DEFAULT_DATASET, autorun=True)
        else:
            load_demo_into_state(DEFAULT_DATASET, autorun=True)


# ---------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=6)
def _load_demo_cached(name: str) -> pd.DataFrame:
    return demo_data.load_dataset(name)


def data() -> dict | None:
    return st.session_state.get("data")


def df() -> pd.DataFrame | None:
    d = data()
    return None if d is None else d["df"]


def set_data(frame: pd.DataFrame, name: str, source: str, demo=None, file_id: str | None = None,
             keep_settings: bool = False):
    """Make ``frame`` the current table: reset the label / base / groups to suggestions (unless
    ``keep_settings``) and drop results."""
    ss = st.session_state
    key = frame_key(frame, name)
    ss["data"] = {"df": frame, "name": name, "source": source, "demo": demo, "key": key, "file_id": file_id,
                  "rows": len(frame), "cols": frame.shape[1]}
    ss["run"] = None
    job = ss.get("job")
    if job is not None and job.running:
        job.stop()
    ss["job"] = None
    for k in ("export_pdf", "export_pdf_error", "export_csv", "export_model", "export_groups", "export_audit",
              "draft_conds", "autorun"):
        ss.pop(k, None)
    if not keep_settings:
        apply_suggestions(frame, demo)


def load_demo_into_state(name: str, autorun: bool = False):
    ds = demo_data.get_dataset(name)
    frame = _load_demo_cached(name)
    set_data(frame, name, "demo", demo=ds)
    st.session_state["demo_name"] = name
    if autorun:
        st.session_state["autorun"] = True


def numeric_columns(frame: pd.DataFrame) -> list:
    return [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])]


def apply_suggestions(frame: pd.DataFrame, demo=None):
    """Label, range, base prediction and groups: the demo's suggestions, or guesses for an upload."""
    from app.ui.groupbuild import suggest_groups

    ss = st.session_state
    nums = numeric_columns(frame)
    cols = list(frame.columns)
    truth = set(demo.ground_truth) if demo else set()
    if demo is not None:
        label = demo.label
        ss["label_scaling"] = "declared" if demo.label_range else "observed"
        if demo.label_range:
            ss["label_lo"], ss["label_hi"] = float(demo.label_range[0]), float(demo.label_range[1])
        group_cols = [g for g in demo.groups if g in cols]
        numeric_groups = [g for g in demo.numeric_groups if g in cols]
        base_col = demo.base_prediction
        order = 2 if len(group_cols) <= 3 and not numeric_groups else 1
    else:
        lower = {c.lower(): c for c in nums}
        label = next((lower[n] for n in ("y", "label", "target", "outcome", "y_true") if n in lower),
                     nums[-1] if nums else None)
        ss["label_scaling"] = "observed"
        base_col = next((lower[n] for n in ("pred", "prediction", "y_pred", "base_pred", "yhat", "score_pred")
                         if n in lower and lower[n] != label), None)
        group_cols = [c for c in cols if c != label and c != base_col
                      and not pd.api.types.is_float_dtype(frame[c]) and 2 <= frame[c].nunique(dropna=True) <= 10][:3]
        numeric_groups = []
        order = 1
    ss["label_col"] = label
    ss["label_log"] = False
    ss["label_units"] = {"islp_wage": "thousand USD per year", "nels_catholic": "test-score points",
                         "synthetic_scores": "points"}.get(getattr(demo, "name", ""), "")
    if ss["label_scaling"] == "observed" and label is not None:
        y = pd.to_numeric(frame[label], errors="coerce")
        if y.notna().any():
            ss["label_lo"], ss["label_hi"] = float(y.min()), float(y.max())
    features = [c for c in cols if c != label and c != base_col and c not in truth]
    ss["base_features"] = features
    if base_col:
        ss["base_kind"], ss["base_col"] = "column", base_col
    elif features:
        ss["base_kind"], ss["base_col"] = "model", None
    else:
        ss["base_kind"], ss["base_col"] = "none", None
    ss["p_nboot"] = 200 if len(frame) <= 50_000 else 50  # the bootstrap dominates the audit time on big tables
    ss["qa_cols"] = group_cols
    ss["qa_order"] = order
    try:
        ss["groups"] = suggest_groups(frame, group_cols, numeric_groups, order=order, n_bins=4)
    except Exception:  # noqa: BLE001 - suggestions are best effort
        ss["groups"] = []


# ---------------------------------------------------------------------------------------------------
# specs from widget values
# ---------------------------------------------------------------------------------------------------
def label_spec() -> LabelSpec:
    ss = st.session_state
    return LabelSpec(column=ss.get("label_col") or "", scaling=ss["label_scaling"], lo=float(ss["label_lo"]),
                     hi=float(ss["label_hi"]), q_lo=float(ss["label_qlo"]) / 100, q_hi=float(ss["label_qhi"]) / 100,
                     log=bool(ss["label_log"]))


def base_spec() -> BaseSpec:
    ss = st.session_state
    kind = ss["base_kind"]
    if kind == "column":
        return BaseSpec("column", ss.get("base_col"))
    if kind == "model":
        return BaseSpec("model", None, ss["base_model"], tuple(ss.get("base_features") or ()))
    return BaseSpec("none")


def split_spec() -> SplitSpec:
    ss = st.session_state
    return SplitSpec(test=ss["split_test"] / 100, base=ss["split_base"] / 100, seed=int(ss["split_seed"]))


def fit_settings() -> FitSettings:
    ss = st.session_state
    auto = bool(ss.get("p_auto", True))
    return FitSettings(alpha="auto" if auto else float(ss["p_alpha"]), beta="auto" if auto else float(ss["p_beta"]),
                       n_buckets=int(ss["p_m"]),
                       n_moments=int(ss["p_k"]), step=ss["p_step"], odd_moments=ss["p_odd"],
                       calibration_fraction=ss["p_cal"] / 100, early_stopping=bool(ss["p_es"]),
                       max_rounds=int(ss["p_maxr"]) or None, delta=float(ss["p_delta"]), gamma=float(ss["p_gamma"]),
                       n_boot=int(ss["p_nboot"]))


def units() -> str:
    """Unit text for axis labels: what the user typed, else '<label> units'."""
    ss = st.session_state
    u = (ss.get("label_units") or "").strip()
    return u


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
        rows.append({
            "column": c, "type": "number" if numeric else ("yes/no" if pd.api.types.is_bool_dtype(s) else "text"),
            "missing": int(s.isna().sum()), "distinct": int(s.nunique(dropna=True)),
            "min": float(s.min()) if numeric and s.notna().any() else None,
            "max": float(s.max()) if numeric and s.notna().any() else None,
        })
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
def threshold_preview(_frame: pd.DataFrame, key: str, lspec: LabelSpec, bspec: BaseSpec, sspec: SplitSpec,
                      n_groups: int, settings: FitSettings) -> dict | None:
    """The alpha / beta a run with these settings will use (None when the base model must be fitted first)."""
    from app.runner import auto_thresholds, base_prediction, prepare_label, split_rows
    from mmc_core.errors import MMCError

    if bspec.kind == "model" and (settings.alpha == "auto" or settings.beta == "auto"):
        return None
    try:
        lab = prepare_label(_frame, lspec)
        split = split_rows(len(_frame), sspec, False, settings.calibration_fraction)
        base, _ = base_prediction(_frame, lab, lspec, bspec, split, sspec, key)
    except MMCError:
        return None
    rows = split["fit"]
    span = lab.hi - lab.lo
    return auto_thresholds((lab.y[rows] - lab.lo) / span, None if base is None else (base[rows] - lab.lo) / span,
                           n_groups, settings, sspec.seed)


@st.cache_data(show_spinner=False, max_entries=16)
def label_summary(_frame: pd.DataFrame, key: str, spec: LabelSpec) -> dict:
    """The prepared label's range and a histogram, or the error message."""
    from app.runner import prepare_label
    from mmc_core.errors import MMCError

    try:
        lab = prepare_label(_frame, spec)
    except MMCError as e:
        return {"error": str(e)}
    counts, edges = np.histogram(lab.y, bins=40)
    return {"lo": lab.lo, "hi": lab.hi, "name": lab.name, "note": lab.note, "n_clipped": lab.n_clipped,
            "mean": float(np.mean(lab.y)), "sd": float(np.std(lab.y)), "counts": counts.tolist(),
            "edges": edges.tolist()}


def bytes_key(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:16]


def status_line() -> str:
    """One line for the sidebar: the model's state."""
    ss = st.session_state
    job = ss.get("job")
    if job is not None and job.running:
        h = job.history[-1] if job.history else None
        return f"running: {job.phase}" + (f" (round {h['round']})" if h else "")
    run = ss.get("run")
    if run is None:
        return "not fitted yet"
    if run.stopped:
        return "stopped early (not converged)"
    return "converged" if run.converged else "not converged"

"""Session state of the dashboard: defaults, the current table, the specs built from widget values. Guesses about a
table (its label, numeric columns, features) and the facts the pages show about it, cached per table, are in
:mod:`app.ui.table_facts`.

Conventions: every setting is a field of one :class:`app.ui.settings.Settings` object kept in
``st.session_state["settings"]`` (the single source of truth). A widget that shows a setting has the field's
name as its key and ``**bind(name)`` (an on_change that writes the user's value back); :func:`keep_widget_state`
re-fills every such key from the object at the start of every script run, and code changes settings with
:func:`put`. Widgets never get ``value=`` and a key at the same time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re

import pandas as pd
import streamlit as st

from app.services import demo_data
from app.services.specs import BaseSpec, FitSettings, LabelSpec, SplitSpec, frame_key, looks_like_log
from app.ui.settings import Settings
from app.ui.table_facts import (
    PREDICTION_NAMES,
    guess_label,
    number_like_columns,
    numeric_columns,
    preselected_features,
)

DEFAULT_DATASET = "synthetic_scores"


SETTING_DEFAULTS = Settings().to_dict()
PERSIST = Settings.names()


def settings() -> Settings:
    """The one settings object of this session (created on first use)."""
    ss = st.session_state
    s = ss.get("settings")
    if not isinstance(s, Settings):
        s = ss["settings"] = Settings()
    return s


def _copy(v):
    return list(v) if isinstance(v, (list, tuple)) else v


def put(key: str, value):
    """Change a setting from code (suggestions, sanitizing, imports): the object and the widget key."""
    setattr(settings(), key, _copy(value))
    st.session_state[key] = _copy(value)


def sync(key: str):
    """``on_change`` of every settings widget: the user's new value goes into the settings object."""
    ss = st.session_state
    if key in ss:
        setattr(settings(), key, _copy(ss[key]))


def bind(key: str, extra=None) -> dict:
    """Keyword arguments that tie a widget to the setting ``key`` (``extra``: a further on_change callback)."""
    if extra is None:
        return {"key": key, "on_change": sync, "args": (key,)}

    def both():
        sync(key)
        extra()

    return {"key": key, "on_change": both}


def keep_widget_state():
    """Fill every settings widget's key from the settings object, first thing in every script run. Whatever
    Streamlit did to widget state since (dropped keys of widgets not drawn, values re-sent by the browser after
    a fragment rerun or a Stop) is overwritten: only on_change callbacks (which ran before this) and ``put``
    change settings."""
    ss = st.session_state
    s = settings()
    for k in PERSIST:
        ss[k] = _copy(getattr(s, k))


def save_widget_state():
    """Kept for compatibility: settings are written through (``sync`` / ``put``), nothing to do at the end."""


def init_session(cli_data: str | None = None):
    ss = st.session_state
    settings()
    ss.setdefault("groups", [])
    ss.setdefault("job", None)
    ss.setdefault("run", None)
    ss.setdefault("messages", [])
    if "data" not in ss:
        ss["data"] = None
        if cli_data:
            try:
                from app.services.io import read_table
                from app.ui.budget import table_limit

                df = read_table(cli_data, limit=table_limit())
                set_data(df, os.path.basename(cli_data), "file")
                put("src_kind", "File given on the command line")
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


def set_data(
    frame: pd.DataFrame,
    name: str,
    source: str,
    demo=None,
    file_id: str | None = None,
    keep_settings: bool = False,
    note: str = "",
    restore: bool = True,
    file_rows=None,
):
    """Make ``frame`` the current table: reset the label / base / groups to suggestions (unless
    ``keep_settings``) and drop results. A table worked on before in this session (on the shelf) comes back
    with its work instead, unless ``restore`` is False. ``file_rows``: for a table made by dropping rows, each
    row's number in the file as uploaded (1-based), so that messages name the row the analyst can find."""
    ss = st.session_state
    key = frame_key(frame, name)
    old = ss.get("data")
    if not keep_settings and restore and old is not None and old.get("key") == key:
        # the same table chosen again (the same file uploaded again, the same demo picked): it is already the
        # current one, and its groups, settings and result stay (this reset them all, with nothing set aside)
        old["file_id"] = file_id if file_id is not None else old.get("file_id")
        ss["same_table"] = name
        return
    if not keep_settings and old is not None and old.get("key") != key:
        set_aside_workspace()
    # a table worked on before in this session comes back with its groups, settings and result; one whose rows
    # were dropped on the Data page is found by the table it came from, and comes back as it was left
    origin = (old.get("origin_key") or old.get("key")) if keep_settings and old is not None else key
    saved = None if keep_settings or not restore else _from_shelf(key)
    raw = None
    if saved is not None:
        kept = saved["data"]
        origin = kept.get("origin_key") or kept.get("key") or key  # kept across every trip to the shelf
        if kept.get("key") != key:
            # the file as it was read: offered on the Data page in place of the table made from it
            raw = {"df": frame, "name": name, "source": source, "demo": demo, "file_id": file_id}
            frame, key, note = kept["df"], kept["key"], kept.get("note", "")
    ss.pop("raw_offer", None)
    ss["data"] = {
        "df": frame,
        "name": name,
        "source": source,
        "demo": demo,
        "key": key,
        "file_id": file_id,
        "rows": len(frame),
        "cols": frame.shape[1],
        "note": note,
        "origin_key": origin,
        "file_rows": file_rows if saved is None else saved["data"].get("file_rows"),
    }
    ss["run"] = None
    job = ss.get("job")
    if job is not None and job.running:
        job.stop()
    ss["job"] = None
    for k in (
        "export_pdf",
        "export_pdf_error",
        "export_csv",
        "export_model",
        "export_groups",
        "export_audit",
        "draft_conds",
        "cg_name_kept",
        "autorun",
        "run_error",
        "last_job",
        "run_before_stop",
    ):
        ss.pop(k, None)
    if saved is not None:
        _bring_back(saved)
        if raw is not None:
            ss["raw_offer"] = {**raw, "for_key": key, "rows": len(raw["df"])}
    elif not keep_settings:
        apply_suggestions(frame, demo)


# tables set aside with their work, per session (the most recent last); the oldest goes beyond this many, or
# beyond this many bytes of tables (the persisted workspaces of closed sessions share a budget: app.ui.persist)
SHELF_MAX = 4
SHELF_MAX_BYTES = 2**30


def set_aside_workspace():
    """Keep the current table with its groups, settings and last result, so that switching to another table
    never loses an analyst's work: switching back to it (or the Data page's button) brings it back. The last
    ``SHELF_MAX`` tables are kept (one before: a third table silently dropped the first one's result)."""
    import copy

    ss = st.session_state
    job = ss.get("job")
    d = ss.get("data")
    ws = {
        "data": d,
        "groups": copy.deepcopy(ss.get("groups") or []),
        "settings": settings().to_dict(),
        "run": ss.get("run") if job is None or not job.running else None,
    }
    ss["previous_workspace"] = ws
    if d is not None and d.get("key") is not None:
        shelf = dict(ss.get("shelf") or {})
        shelf.pop(d["key"], None)
        shelf[d["key"]] = ws

        from app.ui.persist import table_bytes

        while len(shelf) > 1 and (len(shelf) > SHELF_MAX or table_bytes({"shelf": shelf}) > SHELF_MAX_BYTES):
            shelf.pop(next(iter(shelf)))
        ss["shelf"] = shelf


def use_raw_offer():
    """The Data page's button: the file as it was read, in place of the table made from it (rows dropped), which
    is set aside with its work."""
    offer = st.session_state.pop("raw_offer", None)
    if offer is not None:
        set_data(
            offer["df"],
            offer["name"],
            offer["source"],
            demo=offer.get("demo"),
            file_id=offer.get("file_id"),
            restore=False,
        )


def _from_shelf(key: str) -> dict | None:
    """The shelved workspace of the table ``key``, or of a table made from it (rows dropped), taken off the
    shelf; None when there is none."""
    shelf = st.session_state.get("shelf") or {}
    if key in shelf:
        return shelf.pop(key)
    for k, ws in list(shelf.items()):
        if (ws.get("data") or {}).get("origin_key") == key:
            return shelf.pop(k)
    return None


def _bring_back(ws: dict):
    """A shelved workspace's groups, settings and result on its (already current) table."""
    import copy

    from app.ui.settings import Settings

    ss = st.session_state
    d = ws["data"]
    ss["groups"] = copy.deepcopy(ws.get("groups") or [])
    ss["run"] = ws.get("run")
    ss["settings"] = Settings(**ws["settings"])
    # the source shown is the restored table's (the settings were saved after the source widget had moved on)
    src = {"demo": "Bundled demo dataset", "upload": "Upload a file", "file": "File given on the command line"}
    ss["settings"].src_kind = src.get(d["source"], ss["settings"].src_kind)
    if d["source"] == "demo":
        ss["settings"].demo_name = d["name"]
    ss["brought_back"] = d["name"]
    # no keep_widget_state() here: in the upload path the source widgets are already drawn in this run, and
    # writing their keys raises; the next run starts with keep_widget_state (callbacks run before it, and the
    # upload path reruns at once)


def restore_workspace():
    """Bring back the table set aside by the last switch, with its groups, settings and result; the current
    one is set aside in its place (so a second click undoes the first)."""
    ss = st.session_state
    prev = ss.get("previous_workspace")
    if not prev or prev.get("data") is None:
        return
    d = prev["data"]
    shelf = dict(ss.get("shelf") or {})
    shelf[d["key"]] = prev  # what set_data looks for (it may have left the shelf as the oldest)
    ss["shelf"] = shelf
    set_data(d["df"], d["name"], d["source"], demo=d.get("demo"), file_id=d.get("file_id"), note=d.get("note", ""))
    ss["groups"] = prev["groups"]
    ss["run"] = prev["run"]


def restore_shelved(key: str):
    """Bring back the table ``key`` from the shelf (any of those set aside, not only the last), with its groups,
    settings and result; the current one is set aside in its place."""
    ws = (st.session_state.get("shelf") or {}).get(key)
    if not ws or ws.get("data") is None:
        return
    d = ws["data"]
    set_data(d["df"], d["name"], d["source"], demo=d.get("demo"), file_id=d.get("file_id"), note=d.get("note", ""))


def shelved_tables() -> list:
    """[(key, name, has results)] of the tables set aside in this session, the most recent first, the current
    one and the one the 'Bring it back' button already offers left out."""
    ss = st.session_state
    d, prev = ss.get("data") or {}, (ss.get("previous_workspace") or {}).get("data") or {}
    skip = {d.get("key"), prev.get("key")}
    return [
        (k, ws["data"]["name"], ws.get("run") is not None)
        for k, ws in reversed(list((ss.get("shelf") or {}).items()))
        if k not in skip and ws.get("data") is not None
    ]


def load_demo_into_state(name: str, autorun: bool = False):
    ds = demo_data.get_dataset(name)
    frame = _load_demo_cached(name)
    set_data(frame, name, "demo", demo=ds)
    put("demo_name", name)
    if autorun:
        st.session_state["autorun"] = True


def apply_suggestions(frame: pd.DataFrame, demo=None):
    """Label, range, base prediction and groups: the demo's suggestions, or guesses for an upload. Columns that
    cannot be features (all missing, constant, identifiers, leaking the label) are never pre-selected."""
    from app.services.validate import feature_flags
    from app.ui.groupbuild import suggest_groups

    ss = st.session_state
    nums = numeric_columns(frame)
    cols = list(frame.columns)
    # a new table starts from the defaults: buckets, the base model, discovery during the fit, the split... of
    # the last table followed the analyst to the next one unannounced (issue 35); the data source and the
    # teaching page's settings are not the table's
    new = {k: v for k, v in SETTING_DEFAULTS.items() if not k.startswith(("src_", "demo_", "t_"))}
    if demo is not None:
        label = demo.label
        new["label_scaling"] = "declared" if demo.label_range else "observed"
        if demo.label_range:
            new["label_lo"], new["label_hi"] = float(demo.label_range[0]), float(demo.label_range[1])
        group_cols = [g for g in demo.groups if g in cols]
        numeric_groups = [g for g in demo.numeric_groups if g in cols]
        base_col = demo.base_prediction
        order = 2 if len(group_cols) <= 3 and not numeric_groups else 1
    else:
        lower = {str(c).lower(): c for c in nums + number_like_columns(frame)}
        label = guess_label(frame, nums)
        new["label_scaling"] = "observed"
        base_col = next((lower[n] for n in PREDICTION_NAMES if n in lower and lower[n] != label), None)
        group_cols = [
            c
            for c in cols
            if c != label
            and c != base_col
            and not pd.api.types.is_float_dtype(frame[c])
            and 2 <= frame[c].nunique(dropna=True) <= 10
        ][:3]
        numeric_groups = []
        order = 1
    new["label_col"] = label
    new["label_log"] = False
    new["label_percent"] = looks_like_log(label)
    new["label_positive"] = None
    new["res_threshold"] = 0.5
    new["label_units"] = {
        "islp_wage": "thousand USD per year",
        "nels_catholic": "test-score points",
        "synthetic_scores": "points",
    }.get(getattr(demo, "name", ""), "")
    if new["label_scaling"] == "observed" and label is not None:
        y = pd.to_numeric(frame[label], errors="coerce")
        if y.notna().any():
            new["label_lo"], new["label_hi"] = float(y.min()), float(y.max())
    features = preselected_features(frame, label, base_col, demo, feature_flags(frame, label))
    new["base_features"] = features
    new["disc_features"] = list(features)  # the columns Discover may use in its rules
    if base_col:
        new["base_kind"], new["base_col"] = "column", base_col
    elif features:
        new["base_kind"], new["base_col"] = "model", None
    else:
        new["base_kind"], new["base_col"] = "none", None
    new["p_nboot"] = 200 if len(frame) <= 50_000 else 50  # the bootstrap dominates the audit time on big tables
    new["qa_cols"] = group_cols
    new["qa_order"] = order
    for k, v in new.items():
        put(k, v)
    try:
        ss["groups"] = suggest_groups(frame, group_cols, numeric_groups, order=order, n_bins=4)
    except Exception:  # noqa: BLE001 - suggestions are best effort
        ss["groups"] = []


# ---------------------------------------------------------------------------------------------------
# specs from widget values
# ---------------------------------------------------------------------------------------------------
def label_spec() -> LabelSpec:
    s = settings()
    return LabelSpec(
        column=s.label_col or "",
        scaling=s.label_scaling,
        lo=float(s.label_lo),
        hi=float(s.label_hi),
        q_lo=float(s.label_qlo) / 100,
        q_hi=float(s.label_qhi) / 100,
        log=bool(s.label_log),
        percent=bool(s.label_percent),
        positive=s.label_positive or None,
    )


def base_spec() -> BaseSpec:
    s = settings()
    if s.base_kind == "column":
        return BaseSpec("column", s.base_col)
    if s.base_kind == "model":
        return BaseSpec("model", None, s.base_model, tuple(s.base_features or ()), variance=bool(s.base_variance))
    return BaseSpec("none")


def split_spec() -> SplitSpec:
    s = settings()
    return SplitSpec(test=s.split_test / 100, base=s.split_base / 100, seed=int(s.split_seed))


def fit_settings() -> FitSettings:
    s = settings()
    auto = bool(s.p_auto)
    rule = s.p_rule if s.p_rule in ("se", "auto") else "se"
    # early stopping: the library's "auto" (on whenever rows are held out) unless switched off
    return FitSettings(
        alpha=rule if auto else float(s.p_alpha),
        beta=rule if auto else float(s.p_beta),
        n_buckets=int(s.p_m),
        mean_buckets=s.p_mb if s.p_mb in ("auto", "uniform", "quantile") else "auto",
        n_moments=int(s.p_k),
        step=s.p_step,
        odd_moments=s.p_odd,
        calibration_fraction=s.p_cal / 100,
        early_stopping="auto" if s.p_es else False,
        max_rounds=int(s.p_maxr) or None,
        delta=float(s.p_delta),
        gamma=float(s.p_gamma),
        n_boot=int(s.p_nboot),
        discover=bool(s.p_disc),
        discover_features=tuple(s.disc_features or ()) if s.p_disc else (),
        # the search's settings count only when the fit searches (the Discover tab's sliders share them)
        discover_depth=int(s.disc_depth) if s.p_disc else 3,
        discover_min_mass=float(s.disc_min_mass) if s.p_disc else 0.01,
    )


def units() -> str:
    """Unit text for axis labels: what the user typed, else '<label> units'."""
    return (settings().label_units or "").strip()


# the row a message of app.services.io names: "(first in data row 99)", "(e.g. 'x' in row 99)" (1-based)
_ROW_REF = re.compile(r"\b(data row|in row) (\d+)\)")


def file_row(k: int, d: dict | None = None) -> str:
    """ "data row k" of the current table (1-based) in words the analyst finds in the file: "data row 101 of the
    file" when rows were dropped from it on the Data page (the table's were renumbered)."""
    d = data() if d is None else d
    rows = None if d is None else d.get("file_rows")
    if rows is None or not 1 <= k <= len(rows):
        return f"data row {k}"
    return f"data row {int(rows[k - 1])} of the file"


def in_file_rows(message: str, d: dict | None = None) -> str:
    """``message`` with the row number of the current table (app.services.io's "(first in data row 99)", "(e.g. 'x' in
    row 99)") in the file's own numbers (:func:`file_row`)."""
    d = data() if d is None else d

    def sub(m):
        return ("" if m.group(1) == "data row" else "in ") + file_row(int(m.group(2)), d) + ")"

    return _ROW_REF.sub(sub, message)


def bytes_key(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()[:16]


def changes_since(run) -> list:
    """What the current label, base prediction, groups and fit settings change against those ``run`` was made
    with (words, e.g. ["the label", "the groups"]; [] when none): the Run, Results and Export pages and the
    sidebar say the result shown is the earlier run's (a changed table is said apart: it blocks the pages)."""
    from app.ui.groupbuild import groups_file

    out = []
    try:
        if label_spec() != run.label_spec:
            out.append("the label")
        if base_spec() != run.base_spec:
            out.append("the base prediction")

        def listed(doc):
            # the run's file starts with the whole population, which the pipeline adds, and holds the sets a fit
            # with discovery learned ("learned: ..."), which the session's list does not
            gs = (doc or {}).get("groups") or []
            return [
                g
                for g in gs
                if not (g.get("name") == "all" and not g.get("where") and not g.get("any"))
                and not str(g.get("name", "")).startswith("learned: ")
            ]

        try:
            groups = listed(groups_file(st.session_state.get("groups") or []))
        except Exception:  # noqa: BLE001 - an invalid group list is not the run's either
            groups = None
        if groups != listed(run.groups_json):
            out.append("the groups")
        now = fit_settings()
        if getattr(run.model, "task", "") == "binary":  # the pipeline fits a classifier's mean only (k = 1)
            now = dataclasses.replace(now, n_moments=run.settings.n_moments)
        if now != run.settings:
            out.append("the fit settings")
    except AttributeError:  # a run record from before these fields: nothing to compare
        return []
    return out


def status_line() -> str:
    """One line for the sidebar: the model's state."""
    ss = st.session_state
    job = ss.get("job")
    if job is not None and job.running:
        if job.stop_requested:  # the Run page already says what Stop keeps; the job is only winding down
            return f"stopping (stopped during {job.stop_phase or job.phase})"
        # no phase or round here: on the Run page the sidebar is not redrawn while the live view ticks (a
        # fragment), and "running: fitting the base model" stayed next to a descent, or a stopped run
        return "running (the Run page shows its progress)"
    run = ss.get("run")
    if run is None:
        return "not fitted yet"
    changed = " (settings changed since)" if changes_since(run) else ""
    if run.stopped:
        return "stopped early (not converged)" + changed
    return ("converged" if run.converged else "not converged") + changed

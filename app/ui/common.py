"""Small Streamlit helpers shared by the pages."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.figures.display import visible_controls
from app.services.specs import base_variance_text
from mmc_core.estimator import describe as describe_base
from mmc_core.estimator import describe_cells, describe_stages, stage_sentences


def sanitize(key: str, options: list, default=None, multi: bool = False):
    """Make ``st.session_state[key]`` valid for a widget with ``options`` before the widget is drawn (a setting
    is changed through :func:`app.ui.state.put`, so the settings object follows)."""
    from app.ui import state

    ss = st.session_state
    v: Any = ss.get(key)
    is_setting = key in state.PERSIST
    if multi:
        new: Any = [x for x in (v or []) if x in options]
        if new != list(v or []) or key not in ss:
            state.put(key, new) if is_setting else ss.__setitem__(key, new)
    elif v not in options:
        new = default if (default in options or default is None) else (options[0] if options else None)
        state.put(key, new) if is_setting else ss.__setitem__(key, new)


def feature_columns(frame) -> list:
    """The table's columns other than the label (what groups, features and rules may use)."""
    return [c for c in frame.columns if c != st.session_state.get("label_col")]


def columns_multiselect(frame, key: str, label: str, help: str) -> None:
    """A multiselect of the non-label columns bound to the setting ``key`` (columns no longer there dropped)."""
    from app.ui import state

    options = feature_columns(frame)
    sanitize(key, options, multi=True)
    st.multiselect(label, options, **state.bind(key), help=help)


def choose_one(key: str, label: str, options: list, placeholder: str, format_func=str) -> None:
    """A selectbox bound to the setting ``key`` that starts empty (the analyst must choose). Once chosen, a
    choice is not cleared: an empty selectbox can be emptied again by Escape in the open list, which dropped
    the prediction column (and its error and drop button) and kept the empty choice across a reload (an
    exploratory browser check); nothing needs an empty choice after a real one."""
    from app.ui import state

    def keep_choice():
        ss = st.session_state
        if ss.get(key) is None and getattr(state.settings(), key, None) in options:
            ss[key] = getattr(state.settings(), key)  # put back what the settings still hold
        else:
            state.sync(key)

    sanitize(key, options, None)
    st.selectbox(
        label, options, key=key, on_change=keep_choice, index=None, placeholder=placeholder, format_func=format_func
    )


_MD_SPECIAL = "\\`*_{}[]<>#|~$:"  # links and images need [ ], autolinks < > or :, math $


def esc(text) -> str:
    """User-supplied text (column, file, group names, values) made inert for st.markdown and friends: every
    markdown / HTML special character is backslash-escaped, so a name like ``![x](http://host/img)`` or
    ``<img src=...>`` shows as text and nothing is fetched."""
    s = visible_controls(text).replace("\r", " ").replace("\n", " ")
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in s)


def kept_tabs(key: str, names: list):
    """``st.tabs(names)`` that keep the open tab across reruns (creating a group, a new run) and page switches:
    the tab is a widget with ``key``, mirrored in a plain session key Streamlit never drops, by its change
    callback and again on every run that draws it (a tab clicked while another rerun was under way once left
    the mirror unset in the browser test)."""
    ss = st.session_state
    store = f"_{key}"

    def remember():
        ss[store] = ss.get(key)

    default = ss.get(store) if ss.get(store) in names else None
    tabs = st.tabs(names, key=key, default=default, on_change=remember)
    if ss.get(key) in names:
        ss[store] = ss[key]
    return tabs


def tabbed(key: str, sections: dict) -> None:
    """Tabs named by ``sections``' keys, each drawn by its value (a function), the open tab kept (:func:`kept_tabs`)."""
    names = list(sections)
    for tab, draw in zip(kept_tabs(key, names), sections.values()):
        with tab:
            draw()


def show_error(prefix: str, e: Exception):
    st.error(f"{prefix}: {esc(e)}" if prefix else esc(e), icon=":material/error:")


def need_run() -> bool:
    """True (and an explanation drawn) when there is no fitted model yet."""
    if st.session_state.get("run") is None:
        job = st.session_state.get("job")
        if job is not None and job.running:
            st.info("A fit is running: watch it on the Run page. Results appear here when it is done.")
        else:
            st.info("No audit yet: set up the data and groups, then press **Run** on the Run page.")
        st.page_link("ui/run_page.py", label="Go to the Run page", icon=":material/play_circle:")
        return True
    return False


def run_and_frame(stale: str):
    """(run, table) for the pages that show a finished run, or None with the reason drawn: no run yet, or the
    loaded table is not the one the run was fitted on (``stale`` says what to do)."""
    from app.ui import state

    if need_run():
        return None
    run = st.session_state["run"]
    d = state.data()
    if d is None or d["key"] != run.data_key:
        st.warning(stale)
        return None
    changed_since_note(run)
    return run, d["df"]


def changed_since_note(run) -> None:
    """Says when the label, base, groups or fit settings changed after ``run``: what is shown is that run's."""
    from app.ui import state

    changed = state.changes_since(run)
    if changed:
        what = ", ".join(changed[:-1]) + (" and " if len(changed) > 1 else "") + changed[-1]
        st.warning(
            f"{what[0].upper()}{what[1:]} changed since this run: what is shown here is the earlier run's "
            "(its model, groups and audit). Run again on the Run page for the current settings.",
            icon=":material/history:",
        )


def units_suffix() -> str:
    u = (st.session_state.get("label_units") or "").strip()
    return f" ({esc(u)})" if u else ""


def download(label: str, data: bytes, file_name: str, key: str, mime: str = "application/json", where=st, **extra):
    """A download button as every page draws it: no rerun on click (the data is ready), the download icon;
    ``where``: a column or container."""
    where.download_button(
        label,
        data=data,
        file_name=file_name,
        mime=mime,
        key=key,
        on_click="ignore",
        icon=":material/download:",
        **extra,
    )


def fit_notes(model) -> list:
    """How the model used the base prediction, what the step after the descent did and what each stage changed
    on the held-out rows, one technical sentence each (the PDF report says the same in its settings table)."""
    info = model.info
    out = []
    if base_text := describe_base(model.init_mean, info):
        out.append(f"Base prediction: {base_text}.")
    if bv_text := base_variance_text(info):
        out.append(f"Base variance: {bv_text}.")
    if cells_text := describe_cells(info):
        out.append(f"After the descent: {cells_text}.")
    if stages_text := describe_stages(info.get("stages")):
        out.append(f"What each stage changed: {stages_text}")
    return out


def show_fit_notes(model) -> None:
    """The fit in plain words, one sentence per stage with what it changed on the held-out rows, and the
    technical sentences of :func:`fit_notes` behind an expander (the Run and Results pages)."""
    info = model.info
    n_mean = sum(1 for u in model.log if u.target == 1)
    plain = stage_sentences(info.get("stages"), info, n_mean, len(model.log) - n_mean)
    details = fit_notes(model)
    if not plain:  # a model file without stage records: the technical sentences as before
        for line in details:
            st.caption(esc(line))
        return
    for line in plain:
        st.caption(esc(line))
    if details:
        with st.expander("Details of each stage"):
            for line in details:
                st.caption(esc(line))


def label_error(msg: str) -> str:
    """A label error as the Data and Run pages show it: "Label: ..." unless the message already names the label
    (it said "Label: label column 'y' has ...")."""
    return msg[:1].upper() + msg[1:] if msg.lower().startswith("label") else f"Label: {msg}"


def chosen_periods(run) -> tuple:
    """(column, period audit) the Over time view holds for ``run``, or (None, None) when none is chosen or it
    has not been computed for this run."""
    column = st.session_state.get("res_period")
    if column is None:
        return None, None
    res = (st.session_state.get("_period_memo") or {}).get(("periods", run.finished_at, column))
    return (column, res) if res is not None else (None, None)


def all_findings(found: list, s: dict, line) -> str:
    """Every finding under an expander when there are more than the ones shown (the PDF sends readers to this
    page for those it leaves out); returns the caption's words about them ("" when all are shown)."""
    more = s["n_found"] - len(s["shown"])
    if more <= 0:
        return ""
    with st.expander(f"All {s['n_found']} findings"):
        st.markdown("\n".join(line(f) for f in found))
    return f"{more} more finding(s) under 'All {s['n_found']} findings', and in the audit JSON (Export page). "


def scorecard_box(audit, units: str, what: str = "mean error") -> None:
    """Every listed group of ``audit`` in one searchable table (app.report.tables.scorecard_table; the PDF shows
    its first rows), for the regression and the classifier Results pages: estimates with intervals, what the
    group's size can detect (``what``: the quantity it detects) and its findings."""
    from app.report.tables import mean_error_note, scorecard_table

    table = scorecard_table(audit, name_chars=60)
    if table is None:
        return
    with st.expander(f"Group scorecard: all {len(table)} groups, first by harm and evidence", expanded=True):
        st.dataframe(table, width="stretch", hide_index=True, height=min(420, 38 + 35 * len(table)))
        st.caption(
            mean_error_note(audit, units) + f" Detectable: the smallest {what} the group's rows find with 80% power "
            f"among all the audit's tests; no finding means any {what} is smaller than that, not that there is "
            "none. Search the table with its toolbar's magnifier."
        )

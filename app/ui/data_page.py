"""Data page: pick a demo table or upload CSV / Parquet; choose the label, its range and the base prediction;
see the train / fit / test split. Only a sample of rows is ever sent to the browser."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.figures.figure_style import interval_text
from app.services import demo_data
from app.services.io import MAX_COLUMNS, MAX_FILE_BYTES, MAX_ROWS, read_table_bytes
from app.services.specs import BASE_MODELS, binary_values, looks_like_log
from app.ui import admission, budget, state, table_facts
from app.ui.common import choose_one, columns_multiselect, esc, label_error, sanitize
from mmc_core.common import MMCError

SOURCES = ["Bundled demo dataset", "Upload a file"]
BASE_KINDS = {
    "column": "an existing prediction column",
    "model": "fit a model here (scikit-learn)",
    "none": "none: start from the label mean",
}
SCALINGS = {
    "observed": "observed: min / max of the data",
    "declared": "declared: a known range (e.g. 0-100)",
    "robust": "robust: clip at quantiles",
}


def _preselection(d: dict, label) -> list:
    """The features pre-selected for ``label``, as on loading the table (table_facts.preselected_features)."""
    flags = table_facts.feature_flags(d["df"], d["key"], label)
    return table_facts.preselected_features(d["df"], label, state.settings().base_col, d.get("demo"), flags)


def _on_label_change():
    """A new label: the base-model features are pre-selected again for it. Features left out only for the old
    label come back (the guessed `expersq` kept out `exper` after `hours` was chosen); the new label and the
    features that leak it are taken out; features the user removed or added by hand (the difference between the
    list and the old label's pre-selection) stay removed or added, unless one added is the new label or leaks it."""
    s = state.settings()
    old = s.label_col  # still the old label: the widget's new value is synced here, not by state.bind
    state.sync("label_col")
    d = state.data()
    if d is None:
        return
    frame, new = d["df"], s.label_col
    flags = table_facts.feature_flags(frame, d["key"], new)
    current = list(s.base_features or [])
    if old in frame.columns and old != new:
        before = set(_preselection(d, old))
        removed, added = before - set(current), set(current) - before
        fresh = set(_preselection(d, new)) - removed
        # an added column flagged already before (an id, say) was the user's choice; a new leak is not
        was = table_facts.feature_flags(frame, d["key"], old)
        keep = fresh | {c for c in added if c != new and (c not in flags or c in was)}
        state.put("base_features", [c for c in frame.columns if c in keep])
    else:
        state.put("base_features", [c for c in current if c != new and c not in flags])
    state.put("label_positive", None)
    state.put("label_percent", looks_like_log(new))
    # the declared range's starting values are the new label's own (they were the previous label's: choosing
    # `score` after the guessed `base` offered base's -1.41 .. 149.3, a browser session)
    demo = d.get("demo")
    if demo is not None and getattr(demo, "label_range", None) and s.label_col == demo.label:
        # a demo's own label: its known range, as on first load
        state.put("label_lo", float(demo.label_range[0]))
        state.put("label_hi", float(demo.label_range[1]))
    elif s.label_col in d["df"].columns:
        y = pd.to_numeric(d["df"][s.label_col], errors="coerce")
        if y.notna().any():
            state.put("label_lo", float(y.min()))
            state.put("label_hi", float(y.max()))


def binary_section(values: list):
    """A binary label: a classifier audit (probabilities on [0, 1]); asks for the positive class when the two
    values are not 0/1 or true/false."""
    *vals, needs = values
    st.info(
        "**Binary label** (two values: " + ", ".join(f"`{esc(v)}`" for v in vals) + "): the audit is a "
        "classifier audit. The model's prediction is the probability of the positive class on [0, 1]; only "
        "the mean is fitted (the spread of a 0/1 outcome is p(1 − p)), no intervals are computed, and the "
        "results show per-group calibration and rates at a decision threshold.",
        icon=":material/toggle_on:",
    )
    if needs:
        choose_one(
            "label_positive",
            "Positive class (the outcome whose probability is predicted)",
            vals,
            "choose the positive class",
        )


def _drop_bad_rows(column: str):
    """Keep only the rows with a number in ``column`` (the label or the prediction column). The table stays the
    same upload (same file id, so it is not read again), every setting is kept, and each row keeps its number
    in the file for messages (``file_rows``)."""
    from app.services.validate import label_problem_rows

    d = state.data()
    if d is None or column not in d["df"].columns:
        return
    frame = d["df"]
    bad = label_problem_rows(frame, column)
    kept = frame.loc[~bad].reset_index(drop=True)
    if pd.api.types.is_object_dtype(kept[column]) or pd.api.types.is_string_dtype(kept[column]):
        kept[column] = pd.to_numeric(kept[column], errors="coerce")
    rows = d.get("file_rows")
    rows = np.arange(1, len(frame) + 1) if rows is None else np.asarray(rows)
    earlier = d.get("note")
    note = f"{int(bad.sum()):,} row(s) without a numeric '{column}' dropped"
    state.set_data(
        kept,
        d["name"],
        d["source"],
        demo=d.get("demo"),
        file_id=d.get("file_id"),
        keep_settings=True,
        note=f"{earlier}; {note}" if earlier else note,
        file_rows=rows[~bad],
    )


def _first_bad_row(frame: pd.DataFrame, column: str) -> int:
    from app.services.validate import label_problem_rows

    return int(np.flatnonzero(label_problem_rows(frame, column))[0]) + 1


def _drop_button(column: str, n_bad: int, what: str, key: str) -> None:
    """The button that drops the ``n_bad`` rows without a number in ``column`` (``what``: "label", ...)."""
    st.button(
        f"Drop the {n_bad:,} {'row' if n_bad == 1 else 'rows'} whose {what} is missing or not a number",
        key=key,
        on_click=_drop_bad_rows,
        args=(column,),
    )


def _on_demo_change():
    state.load_demo_into_state(st.session_state["demo_name"])


def _on_source_change():
    ss = st.session_state
    if ss["src_kind"] == "Bundled demo dataset":
        d = state.data()
        if d is None or d["source"] != "demo" or d["name"] != ss["demo_name"]:
            state.load_demo_into_state(ss["demo_name"])
    elif ss["src_kind"] == "File given on the command line" and ss.get("cli_data"):
        from app.services.io import read_table

        try:
            state.set_data(
                read_table(ss["cli_data"], limit=budget.table_limit()), ss["cli_data"].rsplit("/", 1)[-1], "file"
            )
        except MMCError as e:
            ss["upload_error"] = str(e)


def _previous_table_notice():
    """After a switch of table: the one set aside, with a button that brings it back (state.restore_workspace).
    Drawn into a slot at the top of the page after the source widgets ran (an upload switches in this run)."""
    back = st.session_state.pop("brought_back", None)
    same = st.session_state.pop("same_table", None)
    d = state.data()
    if same is not None:
        st.info(
            f"**{esc(same)}** is already the current table (the same rows): its groups, settings and results are kept.",
            icon=":material/check_circle:",
        )
    if back is not None:
        note = f" ({esc(d['note'])})" if d is not None and d.get("note") else ""
        st.success(
            f"**{esc(back)}** is back with the groups, settings and results you had for it{note}.",
            icon=":material/history:",
        )
    offer = st.session_state.get("raw_offer")
    if offer is not None and d is not None and offer.get("for_key") == d["key"]:
        left, right = st.columns([5, 1], vertical_alignment="center")
        left.info(
            f"This is the table you made from **{esc(offer['name'])}** ({d['rows']:,} of its {offer['rows']:,} rows: "
            f"{esc(d.get('note') or 'rows dropped')}). The file as uploaded can replace it; this one is then set "
            "aside with its work.",
            icon=":material/table_rows:",
        )
        right.button(f"Use all {offer['rows']:,} rows", key="use_raw_offer", on_click=state.use_raw_offer)
    # every other table set aside in this session, each with its own button (only the last one had one: the
    # first of three tables was reachable only by uploading its file again)
    for key, name, has_run in state.shelved_tables():
        left, right = st.columns([5, 1], vertical_alignment="center")
        left.caption(
            f"Also set aside: **{esc(name)}**, with its groups, settings"
            + (" and results." if has_run else " (no results yet).")
        )
        right.button(
            "Bring it back",
            key=f"restore_shelf_{key}",
            on_click=state.restore_shelved,
            args=(key,),
            help="Makes it the current table again, with its work; the current table is set aside in its place.",
        )
    prev = st.session_state.get("previous_workspace")
    if not prev or prev.get("data") is None or d is None or prev["data"]["key"] == d["key"]:
        return
    kept = [f"{len(prev['groups'])} groups", "its settings"] + (["its results"] if prev["run"] is not None else [])
    left, right = st.columns([5, 1], vertical_alignment="center")
    left.info(
        f"The previous table, **{esc(prev['data']['name'])}**, is set aside with {', '.join(kept[:-1])} and "
        f"{kept[-1]}.",
        icon=":material/history:",
    )
    right.button(
        "Bring it back",
        key="restore_ws",
        on_click=state.restore_workspace,
        help="Makes it the current table again, with its groups, settings and results; the current table is "
        "set aside in its place.",
    )


def source_section():
    ss = st.session_state
    notice = st.container()
    sources = list(SOURCES) + (["File given on the command line"] if ss.get("cli_data") else [])
    sanitize("src_kind", sources, SOURCES[0])
    st.radio(
        "Source", sources, horizontal=True, **state.bind("src_kind", _on_source_change), label_visibility="collapsed"
    )
    if ss.get("cli_data_error"):
        st.error(esc(ss["cli_data_error"]))
    if ss["src_kind"] == "Bundled demo dataset":
        names = [ds.name for ds in demo_data.list_datasets()]
        titles = {ds.name: ds.title for ds in demo_data.list_datasets()}
        st.selectbox(
            "Demo dataset",
            names,
            format_func=lambda n: f"{titles[n]}  ({n})",
            **state.bind("demo_name", _on_demo_change),
        )
        ds = demo_data.get_dataset(ss["demo_name"])
        st.markdown(ds.description)
        st.caption(f"Source: {ds.source}")
    elif ss["src_kind"] == "Upload a file":
        up = st.file_uploader(
            "CSV or Parquet file",
            type=["csv", "parquet", "pq"],
            key="upload",
            help="The first row of a CSV must hold the column names; UTF-8, comma-separated.",
        )
        st.caption(
            f"Up to {MAX_FILE_BYTES // 1024**2} MB, {MAX_ROWS:,} rows and {MAX_COLUMNS:,} columns, and "
            f"{budget.table_limit() / 1e6:,.0f} MB once read ({budget.table_limit() // 8:,} numeric cells). "
            "Missing values may be empty cells, NA, NaN or '.'. The file stays on this machine: the "
            "browser only ever receives a sample of 200 rows."
        )
        if up is not None:
            # a file is read once, when it is uploaded: a table brought back from the set-aside slot is not
            # replaced by the file still sitting in the uploader
            if ss.get("upload_seen_id") != up.file_id:
                ss["upload_seen_id"] = up.file_id
                ss.pop("upload_error", None)
                with st.spinner(f"Reading {up.name}…"):
                    try:
                        # the server's memory budget is checked from the file's metadata or a sample, before
                        # it is read (a 0.9 MB Parquet file decoded to gigabytes)
                        admission.admit(up.getvalue(), up.name)
                        frame = read_table_bytes(up.getvalue(), up.name, limit=budget.table_limit())
                        budget.release_memory()  # what reading left in Arrow's pool, in this thread
                        state.set_data(frame, up.name, "upload", file_id=up.file_id)
                        if ss.get("brought_back"):
                            # its settings go into the widgets at the start of the next run (the ones drawn
                            # above cannot change in this one)
                            st.rerun()
                    except MMCError as e:
                        ss["upload_error"] = str(e)
                        ss["upload_error_id"] = up.file_id
                        frame = None
                        budget.release_memory()
            if ss.get("upload_error") and ss.get("upload_error_id") == up.file_id:
                st.error(f"Cannot use this file: {esc(ss['upload_error'])}", icon=":material/error:")
        elif (state.data() or {}).get("source") != "upload":
            st.info("Choose a file to audit your own model's predictions. Until then the previous table stays loaded.")
    else:
        st.caption(esc(ss.get("cli_data")))
    with notice:
        _previous_table_notice()


def overview_section(d):
    frame = d["df"]
    prof = table_facts.column_profile(frame, d["key"])
    c = st.columns(4)
    c[0].metric("Rows", f"{d['rows']:,}")
    c[1].metric("Columns", f"{d['cols']:,}")
    c[2].metric("Missing cells", f"{int(prof['missing'].sum()):,}")
    c[3].metric("Source", {"demo": "demo", "upload": "upload", "file": "file"}.get(d["source"], d["source"]))
    n = min(table_facts.PREVIEW_ROWS, d["rows"])
    shown = table_facts.preview(frame, d["key"])
    # numbered as the messages number rows: the file's data rows from 1 (the table's positions were 0-based,
    # and renumbered after a drop, so the preview's row 2 was the message's "data row 3")
    rows = d.get("file_rows")
    shown = shown.set_axis(
        (np.asarray(rows)[shown.index.to_numpy()] if rows is not None else shown.index.to_numpy() + 1).tolist()
    )
    st.dataframe(shown, height=260, hide_index=False, width="stretch")
    st.caption(
        (
            f"A random sample of {n} of {d['rows']:,} rows (on the left, each row's data row number in the file)."
            if d["rows"] > n
            else f"All {d['rows']:,} rows (on the left, each row's data row number in the file)."
        )
        + (f" This table: {esc(d['note'])}." if d.get("note") else "")
    )
    with st.expander("Columns: types, missing values, distinct values"):
        st.dataframe(prof, hide_index=True, width="stretch")


def _label_hist(summary, name, units):
    edges = np.asarray(summary["edges"])
    fig = go.Figure(
        go.Bar(
            x=(edges[:-1] + edges[1:]) / 2,
            y=summary["counts"],
            width=np.diff(edges),
            marker_color="#0072B2",
            hovertemplate="%{x:.4g}: %{y:,} rows<extra></extra>",
        )
    )
    fig.update_layout(
        height=230,
        margin=dict(l=60, r=10, t=30, b=50),
        bargap=0.02,
        title=dict(text="Distribution of the fitted label", font=dict(size=13)),
        font=dict(family="DejaVu Sans, Arial, sans-serif", size=12),
        plot_bgcolor="white",
    )
    fig.update_xaxes(title_text=f"{name} ({units})" if units else name, showgrid=False, linecolor="#888")
    fig.update_yaxes(title_text="rows", gridcolor="#e5e5e5")
    return fig


def _regression_label_widgets():
    """A regression label: its range, log scale and units."""
    ss = st.session_state
    st.radio(
        "Label range (the theory works on [0, 1]; outputs are mapped back to label units)",
        list(SCALINGS),
        **state.bind("label_scaling"),
        format_func=SCALINGS.get,
    )
    if ss["label_scaling"] == "declared":
        a, b = st.columns(2)
        a.number_input("Lowest possible value", **state.bind("label_lo"), format="%g")
        b.number_input("Highest possible value", **state.bind("label_hi"), format="%g")
    elif ss["label_scaling"] == "robust":
        a, b = st.columns(2)
        a.number_input("Clip below quantile (%)", 0.0, 49.0, step=0.5, **state.bind("label_qlo"))
        b.number_input("Clip above quantile (%)", 51.0, 100.0, step=0.5, **state.bind("label_qhi"))
    st.checkbox("Log scale (fit ln label; all outputs in log units)", **state.bind("label_log"))
    st.checkbox(
        "The label is already a natural log (log wage): state mean errors also in percent",
        **state.bind("label_percent"),
        disabled=bool(st.session_state.get("label_log")),
        help="Findings and the scorecard then also give each mean error as the percent difference of the original "
        "values (0.05 log points is +5.1%). A label logged with the box above is stated in percent too. Ticked at "
        "first when the label's name looks like a log (log_..., ln_..., lwage).",
    )
    st.text_input(
        "Units of the label (for axis titles)",
        **state.bind("label_units"),
        placeholder="e.g. thousand USD",
        max_chars=40,
    )


def label_section(d):
    ss = st.session_state
    frame = d["df"]
    cols = list(frame.columns)
    nums = table_facts.numeric_columns(frame)
    ordered = nums + [c for c in cols if c not in nums]
    sanitize("label_col", ordered, nums[-1] if nums else None)
    c1, c2 = st.columns([1, 1], gap="large")
    with c1:
        st.selectbox(
            "Label column (what the model predicts)",
            ordered,
            key="label_col",
            on_change=_on_label_change,  # it syncs the setting itself, after reading the old label
            format_func=lambda c: c if c in nums else f"{c}  (text)",
            help="Numeric columns are listed first.",
        )
        binary = binary_values(frame, ss.get("label_col"))
        if binary is not None:
            binary_section(binary)
        else:
            _regression_label_widgets()
    with c2:
        summary = table_facts.label_summary(frame, d["key"], state.label_spec())
        if "error" in summary:
            st.error(esc(label_error(state.in_file_rows(summary["error"], d))), icon=":material/error:")
            lab = ss.get("label_col")
            if lab in frame.columns:
                n_bad = int(table_facts.label_problems(frame, d["key"], lab))
                if n_bad and n_bad < len(frame):
                    _drop_button(lab, n_bad, "label", "drop_missing_label")
        else:
            st.markdown(
                f"Fitted label **{esc(summary['name'])}** in **{interval_text(summary['lo'], summary['hi'], 4)}** "
                f"({esc(summary['note'])}); mean {summary['mean']:.4g}, SD {summary['sd']:.4g}."
            )
            st.plotly_chart(
                _label_hist(summary, summary["name"], state.units()),
                width="stretch",
                config={"displayModeBar": False},
                key="label_hist",
            )


def base_section(d):
    ss = st.session_state
    frame = d["df"]
    nums = [c for c in table_facts.numeric_columns(frame) if c != ss.get("label_col")]
    texts = [c for c in table_facts.number_like(frame, d["key"]) if c != ss.get("label_col")]
    c1, c2 = st.columns([1, 1], gap="large")
    with c1:
        st.radio(
            "Base prediction (the model being audited; the initial mean)",
            list(BASE_KINDS),
            **state.bind("base_kind"),
            format_func=BASE_KINDS.get,
        )
    with c2:
        if ss["base_kind"] == "column":
            binary = binary_values(frame, ss.get("label_col")) is not None
            what = "Prediction column (probability of the positive class, in [0, 1])" if binary else None
            choose_one(
                "base_col",
                what or "Prediction column (label units)",
                nums + texts,
                "choose a column",
                format_func=lambda c: f"{c}  (text: some cells are not numbers)" if c in texts else str(c),
            )
            if not nums + texts:
                st.warning("There is no numeric column other than the label.")
            col = ss.get("base_col")
            n_bad = table_facts.label_problems(frame, d["key"], col) if col in frame.columns else 0
            if n_bad:
                # the run stopped on it with "drop or fill them first", and only the label had a drop button
                where = state.file_row(_first_bad_row(frame, col), d)
                st.error(
                    f"Prediction column **{esc(col)}** is missing (or not a number) in {n_bad:,} row(s), first in "
                    f"{where}: a run stops on it. Fill them in the file, or drop those rows.",
                    icon=":material/error:",
                )
                if n_bad < len(frame):
                    _drop_button(col, n_bad, "prediction", "drop_missing_base")
        elif ss["base_kind"] == "model":
            st.selectbox("Model", list(BASE_MODELS), **state.bind("base_model"), format_func=BASE_MODELS.get)
            columns_multiselect(
                frame,
                "base_features",
                "Feature columns",
                "Text columns are one-hot encoded; missing values are handled. Do not include columns that leak "
                "the label.",
            )
            flags = table_facts.feature_flags(frame, d["key"], ss.get("label_col"))
            chosen = [c for c in ss.get("base_features") or [] if c in flags]
            for c in chosen:
                st.warning(f"Feature **{esc(c)}**: {esc(flags[c])}.", icon=":material/warning:")
            others = [c for c in flags if c not in chosen and c != ss.get("label_col")]
            if others:
                st.caption(
                    "Not pre-selected: "
                    + "; ".join(f"{esc(c)} ({esc(flags[c])})" for c in others[:12])
                    + ("…" if len(others) > 12 else "")
                    + "."
                )
            st.caption(
                "The model is trained on its own rows only (see the split below), so its predictions on the "
                "fitting and test rows are honest out-of-sample predictions."
            )
            st.checkbox(
                "Learn the spread from the features too",
                **state.bind("base_variance"),
                help="A variance model of the base model's squared residuals (a Poisson gradient boosting of its "
                "out-of-fold errors), fitted on the base-model rows only, for a numeric label when the variance is "
                "fitted: the variance then starts from it, so a spread that follows a feature no group carries is "
                "found. Off: the variance starts from one constant.",
            )
        else:
            st.caption("The mean predictor starts at the label mean; multicalibration alone then fits the means.")


def split_section(d):
    ss = st.session_state
    from app.ui.run_page import split_summary

    model = ss["base_kind"] == "model"
    c1, c2, c3 = st.columns(3)
    c1.slider("Test rows (%): audited, never fitted on", 5, 60, **state.bind("split_test"), step=5)
    if model:
        c2.slider("Base-model training rows (%)", 5, 60, **state.bind("split_base"), step=5)
    c3.number_input("Random seed of the split", min_value=0, max_value=10_000, **state.bind("split_seed"))
    sizes = split_summary(d)
    if sizes is None:
        # what the split itself says (a 1-row file was told to lower the shares, which cannot help it; with too few
        # base-model rows the share must be raised, not lowered)
        from app.services.pipeline import split_rows

        try:
            split_rows(
                d["rows"],
                state.split_spec(),
                state.base_spec().kind == "model",
                state.fit_settings().calibration_fraction,
            )
            why = "these shares leave too few rows for multicalibration"
        except MMCError as e:
            why = str(e)
        small = d["rows"] < 21  # 20 fitting rows and one test row at the least, whatever the shares
        st.error(
            (f"The table has {d['rows']:,} row{'s' if d['rows'] != 1 else ''}, too few to split: " if small else "")
            + f"{why[0].upper() if not small else why[0]}{why[1:]}."
        )
        return
    df = pd.DataFrame({"part": list(sizes), "rows": list(sizes.values())})
    df["share"] = df["rows"] / d["rows"]
    df = df[df["rows"] > 0]
    st.dataframe(
        df,
        hide_index=True,
        width="content",
        column_config={"share": st.column_config.ProgressColumn("share", format="percent", min_value=0, max_value=1)},
    )
    st.caption(
        "Interval calibration rows are drawn by the estimator from the multicalibration rows "
        "(the share is set on the Run page)."
    )


def render():
    ss = st.session_state
    st.title("Data")
    run = ss.get("run")
    if run is not None and run.data_key == (state.data() or {}).get("key") and ss.get("src_kind") != "Upload a file":
        with st.container(border=True):
            info = run.model.info
            st.markdown(
                f"**An audit of _{esc(run.data_name)}_ is ready** ({info.get('n_groups')} groups, "
                f"{run.split['test'].size:,} test rows). Change anything below and re-run, or look at it now."
            )
            st.page_link("ui/results_page.py", label="Open the results", icon=":material/insights:")
    st.subheader("1 · Table")
    source_section()
    d = state.data()
    if d is None:
        return
    overview_section(d)
    st.subheader("2 · Label")
    label_section(d)
    st.subheader("3 · Base prediction")
    base_section(d)
    st.subheader("4 · Split")
    split_section(d)
    st.page_link("ui/groups_page.py", label="Next: define the groups", icon=":material/arrow_forward:")


if __name__ == "__main__":
    render()

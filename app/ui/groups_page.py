"""Groups page: build the groups the audit is calibrated on.

Quick add (every value / quantile bin of chosen columns and their intersections up to an order), custom
groups (conditions on columns combined with AND), edit / rename / remove, and import / export as the JSON
file ``mmc fit --groups`` reads. Counts are live; groups below gamma mass are flagged.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from app.ui import groupbuild as gb
from app.ui import state, table_facts
from app.ui.common import columns_multiselect, download, esc, feature_columns, kept_tabs, sanitize
from app.ui.widgets import page_start
from mmc_core.common import MMCError

if TYPE_CHECKING:
    from app.ui.settings import Settings


def _groups() -> list:
    return st.session_state.setdefault("groups", [])


def _set_groups(groups: list, message: str | None = None):
    st.session_state["groups"] = groups
    st.session_state.pop("export_groups", None)
    if message:
        st.session_state["groups_msg"] = message


# a listed group holding every row is the whole population again (a column with one value): nothing to audit
EVERY_ROW = "⚠ every row (= all)"


def counts_table(d, groups: list) -> pd.DataFrame:
    frame = d["df"]
    text = json.dumps([{"name": "all", "where": []}] + groups)
    sizes = table_facts.group_sizes(frame, d["key"], text)
    gamma = float(st.session_state["p_gamma"])
    rows = []
    for i, (g, n) in enumerate(zip([{"name": "all", "where": []}] + groups, sizes)):
        share = n / max(d["rows"], 1)
        status = "✕ empty" if n == 0 else ("⚠ below γ" if share < gamma else "✓ ok")
        if i > 0 and n == d["rows"] and n > 0:
            status = EVERY_ROW
        rows.append(
            {
                "#": i,
                "group": g["name"],
                "definition": gb.definition(g),
                "rows": n,
                "share": share,
                "status": status,
                "origin": "discovered" if gb.is_discovered(g) else ("always" if i == 0 else "listed"),
            }
        )
    return pd.DataFrame(rows)


def current_section(d):
    groups = _groups()
    try:
        table = counts_table(d, groups)
    except MMCError as e:
        st.error(f"The group definitions do not fit this table: {esc(e)}")
        return
    gamma = float(st.session_state["p_gamma"])
    n_below = int((table["status"] == "⚠ below γ").sum())
    n_empty = int((table["status"] == "✕ empty").sum())
    c = st.columns(3)
    c[0].metric("Groups", f"{len(table):,}", help="Including the whole population ('all'), which is always audited.")
    c[1].metric(
        f"Below γ = {gamma:g}",
        f"{n_below:,}",
        help="Groups with some rows but less than γ of them (the empty ones are counted apart): the guarantees do "
        "not cover them and their estimates are noisy.",
    )
    c[2].metric("Empty", f"{n_empty:,}")
    same = table.loc[table["status"] == EVERY_ROW, "group"].tolist()
    if same:
        st.warning(
            f"{len(same)} group(s) contain every row, like *all* ({', '.join(esc(n) for n in same[:6])}"
            f"{'…' if len(same) > 6 else ''}): they repeat the whole population's audit. A column with one value "
            "gives such a group; remove it, or pick a column whose values differ.",
            icon=":material/warning:",
        )
    if n_below or n_empty:
        names = table.loc[table["status"].isin(("⚠ below γ", "✕ empty")), "group"].tolist()
        st.warning(
            # the two metrics above, added up and said so (the sum alone read as a third, different count)
            f"{n_below + n_empty} group(s) hold less than γ = {gamma:g} of the rows ({n_below:,} below γ, "
            f"{n_empty:,} empty: {', '.join(esc(n) for n in names[:6])}{'…' if len(names) > 6 else ''}). They are "
            "still fitted, but their guarantees are weak; the results mark them with †.",
            icon=":material/warning:",
        )
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        height=min(38 + 35 * len(table), 420),
        column_config={
            "#": st.column_config.NumberColumn(width="small"),
            "rows": st.column_config.NumberColumn(format="localized"),
            "share": st.column_config.ProgressColumn("share of rows", format="percent", min_value=0, max_value=1),
            "origin": st.column_config.TextColumn(
                help="discovered: found by the Discover tab (the learning-oracle auditor) and checked on held-out rows"
            ),
        },
    )


def quick_add(d):
    ss = st.session_state
    frame = d["df"]
    columns_multiselect(
        frame,
        "qa_cols",
        "Columns",
        "Each value of a column becomes a group; numeric columns with many values are cut into quantile bins.",
    )
    c1, c2 = st.columns(2)
    max_order = max(1, len(ss["qa_cols"]))
    if ss["qa_order"] > max_order:
        state.put("qa_order", max_order)
    c1.number_input(
        "Intersections up to order",
        min_value=1,
        max_value=max(max_order, 1),
        **state.bind("qa_order"),
        help="2 adds every pair of values from two different columns (e.g. race=B & sex=F).",
    )
    c2.number_input("Quantile bins for numeric columns", min_value=2, max_value=10, **state.bind("qa_bins"))
    if not ss["qa_cols"]:
        st.caption("Pick one or more columns.")
        return
    try:
        per = [gb.column_conditions(frame, c, int(ss["qa_bins"])) for c in ss["qa_cols"]]
        new = gb.intersections(per, int(ss["qa_order"]))
    except MMCError as e:
        st.error(esc(e))
        return
    existing = {g["name"] for g in _groups()}
    fresh = [g for g in new if g["name"] not in existing]
    st.caption(
        f"{len(new):,} groups from these settings; {len(fresh):,} of them are new"
        + (": " + ", ".join(esc(g["name"]) for g in fresh[:5]) + ("…" if len(fresh) > 5 else "") if fresh else ".")
    )
    b1, b2 = st.columns(2)
    if b1.button(f"Add {len(fresh):,} groups", key="qa_add", disabled=not fresh, type="primary"):
        merged, _ = gb.merge(_groups(), new)
        _set_groups(merged, f"Added {len(fresh)} groups.")
        st.rerun()
    if b2.button("Replace all groups with these", key="qa_replace"):
        _set_groups(new, f"Replaced the groups with {len(new)} new ones.")
        st.rerun()


def _cond_widgets(d, prefix: str):
    """Widgets for one condition; returns a condition dict or None."""
    ss = st.session_state
    frame = d["df"]
    options = feature_columns(frame)
    sanitize(f"{prefix}_col", options, options[0] if options else None)
    col = st.selectbox("Column", options, key=f"{prefix}_col")
    if col is None:
        return None
    info = table_facts.column_values(frame, d["key"], col)
    if info["kind"] == "categorical":
        vals = info["values"]
        sanitize(f"{prefix}_vals", vals, multi=True)
        c1, c2 = st.columns([3, 1])
        picked = c1.multiselect(f"Values of {esc(col)}", vals, key=f"{prefix}_vals")
        neg = c2.checkbox("exclude them", key=f"{prefix}_neg", help="Rows whose value is NOT one of these.")
        if not picked:
            return None
        if len(picked) == 1:
            return {"column": col, "op": "!=" if neg else "==", "value": picked[0]}
        return {"column": col, "op": "not in" if neg else "in", "values": list(picked)}
    q = info["quartiles"]
    st.caption(
        f"{esc(col)}: min {info['min']:.4g}, quartiles {q[0]:.4g} / {q[1]:.4g} / {q[2]:.4g}, max {info['max']:.4g}"
    )
    c1, c2 = st.columns(2)
    ss.setdefault(f"{prefix}_lo", float(q[0]))
    ss.setdefault(f"{prefix}_hi", float(q[2]))
    lo = c1.number_input("from (inclusive)", key=f"{prefix}_lo", format="%g")
    hi = c2.number_input("to (exclusive)", key=f"{prefix}_hi", format="%g")
    if not hi > lo:
        st.warning("'to' must be larger than 'from'.")
        return None
    return {"column": col, "op": "between", "lo": float(lo), "hi": float(hi)}


def _cb_add_condition(cond):
    st.session_state.setdefault("draft_conds", []).append(cond)


def _cb_create_group(columns):
    ss = st.session_state
    draft = ss.get("draft_conds") or []
    name = (ss.get("cg_name") or "").strip() or gb.group_name(draft)
    try:
        gb.validate_groups(_groups() + [{"name": name, "where": draft}], columns)
    except MMCError as e:
        ss["groups_err"] = str(e)
        return
    _set_groups(_groups() + [{"name": name, "where": list(draft)}], f"Created group '{name}'.")
    ss["draft_conds"] = []
    ss["cg_name"] = ss["cg_name_kept"] = ""


def _cb_clear_draft():
    st.session_state["draft_conds"] = []
    st.session_state["cg_name"] = st.session_state["cg_name_kept"] = ""


def _cb_keep_name():
    """The typed group name outside the widget's own key, which Streamlit drops when the page changes (the name
    was lost on a trip to another page: an exploratory browser check)."""
    st.session_state["cg_name_kept"] = st.session_state.get("cg_name", "")


def custom_group(d):
    ss = st.session_state
    draft = ss.setdefault("draft_conds", [])
    st.markdown("A group is the rows meeting **all** its conditions. Add conditions one by one.")
    cond = _cond_widgets(d, "cg")
    st.button("Add this condition", key="cg_add_cond", disabled=cond is None, on_click=_cb_add_condition, args=(cond,))
    if draft:
        try:
            sizes = table_facts.group_sizes(d["df"], d["key"], json.dumps([{"name": "draft", "where": draft}]))
            n = sizes[-1]
        except MMCError as e:
            st.error(esc(e))
            n = None
        st.markdown(
            "**Draft:** "
            + " **and** ".join(esc(gb.condition_label(c)) for c in draft)
            + (f" — {n:,} rows ({n / max(d['rows'], 1):.1%})" if n is not None else "")
        )
        ss.setdefault("cg_name", ss.get("cg_name_kept", ""))
        st.text_input(
            "Group name (optional)",
            key="cg_name",
            placeholder=gb.group_name(draft),
            max_chars=200,
            on_change=_cb_keep_name,
        )
        b1, b2 = st.columns(2)
        b1.button(
            "Create group", key="cg_create", type="primary", on_click=_cb_create_group, args=(list(d["df"].columns),)
        )
        b2.button("Clear draft", key="cg_clear", on_click=_cb_clear_draft)


def _cb_save_group(i: int, columns):
    ss = st.session_state
    groups = _groups()
    try:
        from mmc_core.common import (
            GroupDefinitionError,
            loads,  # bounded: depth, numbers, duplicate keys (one line each)
        )

        where = loads(ss["ed_json"], "the conditions", GroupDefinitionError, kind="condition list", max_bytes=10**6)
        name = ss["ed_name"].strip()
        edited = {"name": name, "where": where}
        if groups[i].get("any"):
            edited["any"] = groups[i]["any"]  # a learned rule's disjunction is kept (the editor shows 'where')
        if where == groups[i].get("where"):
            edited.update(gb.info_fields(groups[i]))  # same rule, renamed: still the discovered group
        new = groups[:i] + [edited] + groups[i + 1 :]
        gs = gb.validate_groups(new, columns)
    except json.JSONDecodeError as e:
        ss["groups_err"] = f"The conditions are not valid JSON: {e.msg} (line {e.lineno})"
        return
    except MMCError as e:
        ss["groups_err"] = str(e)
        return
    info = {g["name"]: gb.info_fields(g) for g in new}
    _set_groups(
        [{**x.to_dict(), **info.get(x.name, {})} for x in gs.groups if not x.is_everything or x.name != "all"],
        f"Saved '{name}'.",
    )
    ss["ed_loaded"] = None
    ss["ed_pick"] = name


def _cb_remove(names: list | None, message: str | None):
    ss = st.session_state
    if names is None:  # the multiselect's current value
        names = list(ss.get("rm_pick") or [])
        message = f"Removed {len(names)} group(s)."
    gone = set(names)
    _set_groups([g for g in _groups() if g["name"] not in gone], message)
    ss["rm_pick"] = []
    ss["ed_loaded"] = None


def _cb_to_draft(g: dict):
    ss = st.session_state
    ss["draft_conds"] = list(g["where"])
    ss["cg_name"] = ss["cg_name_kept"] = g["name"]
    ss["groups_msg"] = f"Loaded '{g['name']}' into the custom builder (tab 'Custom group')."


def edit_groups(d):
    ss = st.session_state
    groups = _groups()
    if not groups:
        st.caption("No groups yet (the whole population 'all' is always audited).")
        return
    names = [g["name"] for g in groups]
    sanitize("ed_pick", names, names[0])
    pick = st.selectbox("Group", names, key="ed_pick")
    i = names.index(pick)
    g = groups[i]
    if ss.get("ed_loaded") != pick:
        ss["ed_name"] = g["name"]
        ss["ed_json"] = json.dumps(g["where"], indent=1)
        ss["ed_loaded"] = pick
    st.text_input("Name", key="ed_name", max_chars=200)
    st.text_area(
        "Conditions (JSON list; the grammar of the group file)",
        key="ed_json",
        height=140,
        help='e.g. [{"column": "race", "op": "==", "value": "B"}, {"column": "age", "op": "between", '
        '"lo": 50, "hi": 65}]',
    )
    b1, b2, b3 = st.columns(3)
    b1.button("Save changes", key="ed_save", type="primary", on_click=_cb_save_group, args=(i, list(d["df"].columns)))
    b2.button("Remove this group", key="ed_remove", on_click=_cb_remove, args=([pick], f"Removed '{pick}'."))
    b3.button("Load into the custom builder", key="ed_to_draft", on_click=_cb_to_draft, args=(g,))
    st.divider()
    sanitize("rm_pick", names, multi=True)
    st.multiselect("Remove several groups", names, key="rm_pick")
    c1, c2 = st.columns(2)
    c1.button("Remove selected", key="rm_btn", disabled=not ss.get("rm_pick"), on_click=_cb_remove, args=(None, None))
    c2.button("Remove all groups", key="rm_all", on_click=_cb_remove, args=(names, "Removed all groups."))


COLUMN_SETTINGS = ("label_col", "base_col")  # a recipe naming a missing one is refused
COLUMN_LIST_SETTINGS = ("base_features", "disc_features", "qa_cols")  # missing entries are dropped and named


def _check_recipe_columns(settings: Settings, raw: dict, columns) -> tuple[Settings, list]:
    """A recipe's column settings against this table: a label or base column it names that is missing refuses
    the import (naming it); feature lists lose their missing columns, which the message names."""
    cols = set(columns)
    bad = [f"{k} '{raw[k]}'" for k in COLUMN_SETTINGS if raw.get(k) is not None and raw[k] not in cols]
    if bad:
        raise ValueError(f"the recipe names column(s) this table does not have: {', '.join(bad)}")
    dropped = []
    for k in COLUMN_LIST_SETTINGS:
        if k in raw:
            kept = [c for c in getattr(settings, k) if c in cols]
            dropped += [f"{c} ({k}: not in this table)" for c in getattr(settings, k) if c not in cols]
            setattr(settings, k, kept)
    return settings, dropped


def _check_groups_fit(groups: list, frame) -> None:
    """Refuse groups whose conditions cannot be evaluated on this table (a comparison on a text column, ...)."""
    from mmc_core import GroupSet

    if not groups:
        return
    gs = GroupSet.from_json(json.dumps({"format": "mmc-groups", "version": 1, "groups": groups}))
    try:
        gs.evaluate(frame, len(frame))
    except MMCError as e:
        raise ValueError(f"the groups do not fit this table: {e}") from None


def _parse_import(data, frame) -> tuple[list, object, list]:
    """(groups, Settings or None, notes) from a groups file or an audit recipe (bytes or text), checked against
    the table ``frame``: every group must evaluate on it, and a recipe's label and base columns must exist (its
    feature lists lose missing columns: ``notes`` names them). Raises MMCError or ValueError with the reason."""
    from app.ui.settings import RECIPE_FORMAT, Settings
    from mmc_core.common import loads  # bounded: size, depth, numbers, duplicate keys (one line each)
    from mmc_core.groups import MAX_GROUPS_FILE_BYTES

    text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    obj = loads(text, "the file", ValueError, kind="groups file or recipe", max_bytes=MAX_GROUPS_FILE_BYTES)
    columns = list(frame.columns)
    if isinstance(obj, dict) and obj.get("format") == RECIPE_FORMAT:
        if obj.get("version", 1) != 1:
            raise ValueError(f"recipe version {obj.get('version')!r} is not supported (expected 1)")
        raw = obj.get("settings") or {}
        settings = Settings.from_dict(raw, base=state.settings())
        settings, notes = _check_recipe_columns(settings, raw, columns)
        groups = gb.parse_groups_file(
            json.dumps({"format": "mmc-groups", "version": 1, "groups": obj.get("groups") or []}), columns
        )
        _check_groups_fit(groups, frame)
        return groups, settings, notes + _whole_population_note(obj.get("groups"), groups)
    groups = gb.parse_groups_file(text, columns)
    _check_groups_fit(groups, frame)
    return groups, None, _whole_population_note(obj.get("groups") if isinstance(obj, dict) else obj, groups)


def _whole_population_note(raw, groups: list) -> list:
    """A note for the groups of the file that were left out because they have no conditions (the whole
    population, audited anyway as 'all')."""
    n = len(raw) - len(groups) if isinstance(raw, list) else 0
    return [f"{n} group(s) without conditions (the whole population, always audited as 'all')"] if n > 0 else []


def _apply_import(new: list, settings, mode: str, source: str, notes: tuple | list = ()):
    """Take imported groups (and a recipe's settings: they replace the current ones) and redraw."""
    ss = st.session_state
    groups = _groups()
    left_out = f" Left out: {'; '.join(notes)}." if notes else ""
    if settings is not None:
        ss["settings"] = settings  # the widgets are re-filled from it at the start of the next run
        _set_groups(new, f"Loaded the audit recipe {source}: every setting and {len(new)} groups.{left_out}")
    elif mode.startswith("replace"):
        _set_groups(new, f"Imported {len(new)} groups from {source} (replacing the old ones).{left_out}")
    else:
        merged, skipped = gb.merge(groups, new)
        _set_groups(
            merged,
            f"Imported {len(new) - skipped} groups from {source}"
            + (f" ({skipped} already present by name)" if skipped else "")
            + f".{left_out}",
        )
    st.rerun()


def import_export(d):
    from app.ui.settings import recipe

    ss = st.session_state
    groups = _groups()
    c1, c2 = st.columns(2, gap="large")
    with c1:
        st.markdown("**Export**: the file `mmc fit --groups FILE.json` reads.")
        text = gb.to_text(groups) if groups else json.dumps({"format": "mmc-groups", "version": 1, "groups": []})
        ss["export_groups"] = text.encode("utf-8")
        download("Download groups.json", ss["export_groups"], "groups.json", "grp_download")
        ss["export_recipe"] = json.dumps(recipe(state.settings(), json.loads(text)), indent=2).encode("utf-8")
        download(
            "Download the audit recipe (settings + groups)",
            ss["export_recipe"],
            "mmc_recipe.json",
            "recipe_download",
            help="Every setting of every page plus the groups; import it here to repeat the audit.",
        )
        with st.expander("Show the JSON"):
            st.code(text[:20000] + ("\n…" if len(text) > 20000 else ""), language="json")
    with c2:
        st.markdown("**Import** a groups file or an audit recipe (JSON, as exported here or written by hand).")
        up = st.file_uploader("Groups or recipe JSON", type=["json"], key="grp_upload")
        mode = st.radio(
            "On import", ["add to the current groups", "replace the current groups"], key="grp_mode", horizontal=True
        )
        if up is not None and ss.get("grp_imported") != up.file_id:
            try:
                new, settings, notes = _parse_import(up.getvalue(), d["df"])
            except (MMCError, ValueError, UnicodeDecodeError) as e:
                st.error(f"Cannot import {esc(up.name)}: {esc(e)}")
            else:
                ss["grp_imported"] = up.file_id
                _apply_import(new, settings, mode, up.name, notes)
        st.text_area(
            "…or paste JSON",
            key="grp_paste",
            height=100,
            placeholder='{"format": "mmc-groups", "version": 1, "groups": [...]}',
        )
        if st.button("Import pasted JSON", key="grp_paste_btn", disabled=not (ss.get("grp_paste") or "").strip()):
            try:
                new, settings, notes = _parse_import(ss["grp_paste"], d["df"])
            except (MMCError, ValueError) as e:
                st.error(f"Cannot import: {esc(e)}")
            else:
                _apply_import(new, settings, mode, "(pasted)", notes)


def render():
    ss = st.session_state
    d = page_start(
        "Groups",
        "The audit checks calibration of means and variances on every group below (and on 'all'). Groups "
        "may overlap. They are defined by conditions on columns, so they can be computed on new rows.",
    )
    if d is None:
        return
    msg = ss.pop("groups_msg", None)
    if msg:
        st.success(msg, icon=":material/check:")
    err = ss.pop("groups_err", None)
    if err:
        st.error(err, icon=":material/error:")
    current_section(d)
    names = ["Quick add from columns", "Custom group", "Discover groups", "Edit · rename · remove", "Import · export"]
    tabs = kept_tabs("groups_tab", names)
    with tabs[0]:
        quick_add(d)
    with tabs[1]:
        custom_group(d)
    with tabs[2]:
        from app.ui import discover_tab

        discover_tab.render(d)
    with tabs[3]:
        edit_groups(d)
    with tabs[4]:
        import_export(d)
    st.page_link("ui/run_page.py", label="Next: run the audit", icon=":material/arrow_forward:")


if __name__ == "__main__":
    render()

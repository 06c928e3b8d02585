"""Discover: find groups nobody listed (the paper's learning-oracle auditor, :mod:`mmc_core.discovery.discover_groups`).

The tab on the Groups page runs :class:`app.services.discovery.DiscoverJob` in the background (a fragment polls its progress
and offers Stop, like the Run page), shows every accepted set as a readable rule with its size, the direction and
size of the error with a 95% interval and the adjusted p-value, and adds a chosen one to the group list with one
click. Added groups carry ``kind`` (and the other descriptive fields ``mmc discover`` writes), which marks them as
discovered everywhere: the group list, the recipe, the Results page and the PDF report.

:func:`results_section` is the Results page's note on the discovered groups of a run.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.services.discovery import DiscoverJob, DiscoverSpec, describe_finding
from app.ui import groupbuild as gb
from app.ui import state
from app.ui.common import columns_multiselect, esc, sanitize
from app.ui.widgets import job_inputs, outcome, running_job, start_job, take_finished
from mmc_core.auditing import p_words

POLL_SECONDS = 0.25
TARGETS = {"base": "the base prediction", "model": "the last run's multicalibrated model"}


def _spec() -> DiscoverSpec:
    s = state.settings()
    return DiscoverSpec(
        features=tuple(s.disc_features or ()),
        max_depth=int(s.disc_depth),
        min_mass=float(s.disc_min_mass),
        top=int(s.disc_top),
        n_moments=max(2, int(s.p_k)),
        n_buckets=int(s.p_m),
        seed=int(s.split_seed),
        target=s.disc_target,
    )


def start(sync: bool = False) -> DiscoverJob | None:
    """Start Discover with the current settings (``sync``: in this thread, for tests)."""
    ss = st.session_state
    d = state.data()
    if d is None:
        return None
    old = running_job("disc_job")
    if old is not None:
        return old
    ss.pop("disc_last", None)
    job = DiscoverJob(
        *job_inputs(d),
        _spec(),
        run=ss.get("run"),
        data_key=d["key"],
    )
    start_job("disc_job", job, sync, 0.5)  # quick (cached) searches finish before the page is drawn
    finalize()
    return job


def finalize():
    """A finished job's outcome into session state (called on every run of the tab)."""
    ss = st.session_state
    job = take_finished("disc_job")
    if job is None:
        return
    ss["disc_last"] = outcome(job, "status", "error", "elapsed", "result", "data_key")  # shown only for that table


def _add(i: int):
    ss = st.session_state
    last = ss.get("disc_last") or {}
    res = last.get("result")
    if res is None or not 0 <= i < len(res.groups):
        return
    g = dict(res.groups[i])
    groups = ss.setdefault("groups", [])
    if any(x["name"] == g["name"] for x in groups):
        ss["groups_msg"] = f"'{g['name']}' is already in the group list."
        return
    ss["groups"] = groups + [g]
    ss.pop("export_groups", None)
    ss["groups_msg"] = (
        f"Added the discovered group '{g['name']}' ({g['count']:,} rows). The next run calibrates on "
        "it; Results and the PDF mark it as discovered."
    )


def _add_all():
    ss = st.session_state
    res = (ss.get("disc_last") or {}).get("result")
    if res is None:
        return
    merged, skipped = gb.merge(ss.get("groups") or [], [dict(g) for g in res.groups])
    ss["groups"] = merged
    ss.pop("export_groups", None)
    ss["groups_msg"] = f"Added {len(res.groups) - skipped} discovered group(s)."


def _live():
    ss = st.session_state
    job = ss.get("disc_job")
    if job is None or not job.running:
        finalize()
        st.rerun()
        return
    c1, c2 = st.columns([1, 5])
    if c1.button(
        "Stop",
        key="disc_stop",
        icon=":material/stop_circle:",
        disabled=job._stop.is_set(),
        help="Ends the search before the next tree is grown; nothing is kept.",
    ):
        job.stop()
        job.wait(2.0)
        if not job.running:
            finalize()
            st.rerun(scope="app")
        st.warning("Stopping…")
        return
    frac = job.done / job.total if job.total else 0.0
    c2.progress(min(frac, 0.99), text=f"{job.phase} · region {job.done} of at most {job.total} · {job.elapsed:.1f} s")


def _controls(d, has_run: bool):
    ss = st.session_state
    frame = d["df"]
    columns_multiselect(
        frame,
        "disc_features",
        "Features the rules may use",
        "Discover grows shallow regression trees on these columns and reads each leaf back as a rule "
        "(conditions joined by AND). Leave out identifiers and columns unknown for new rows.",
    )
    c1, c2, c3 = st.columns(3)
    c1.number_input(
        "Conditions per rule (tree depth)",
        1,
        6,
        **state.bind("disc_depth"),
        help="At most this many conditions in one rule. 2–3 keeps rules readable.",
    )
    c2.number_input(
        "Smallest group (share of the searched rows)",
        min_value=0.001,
        max_value=0.4,
        step=0.005,
        format="%.3f",
        **state.bind("disc_min_mass"),
        help="A rule must hold for at least this share of the rows; smaller sets are too noisy to check.",
    )
    c3.number_input(
        "Groups shown per kind",
        1,
        20,
        **state.bind("disc_top"),
        help="The strongest accepted sets of each kind (mean, variance).",
    )
    if has_run:
        sanitize("disc_target", list(TARGETS), "base")
        st.radio(
            "Look for errors of",
            list(TARGETS),
            **state.bind("disc_target"),
            format_func=lambda t: TARGETS[t],
            horizontal=True,
            help="The base prediction: groups it gets wrong (to list them before the audit). "
            "The model: groups the last run still gets wrong (the listed groups are "
            "calibrated; is anything outside them off?).",
        )
    elif ss.get("disc_target") != "base":
        state.put("disc_target", "base")


def _problem(d) -> str | None:
    """Why Discover cannot run with these settings (a sentence), or None."""
    s = state.settings()
    run = st.session_state.get("run")
    if not s.disc_features:
        return "Choose at least one feature column: Discover builds its rules from them."
    if s.disc_target == "model":
        if run is None or run.data_key != d["key"]:
            return "There is no fitted model for this table yet: run the audit first, or look at the base prediction."
    elif s.base_kind == "none":
        return (
            "Discover looks for groups on which a prediction is wrong, and there is no base prediction yet: "
            "choose a prediction column or an in-app base model on the Data page"
            + (
                ", or look at the last run's model."
                if run is not None and run.data_key == d["key"]
                else " (or run the audit and look at its model)."
            )
        )
    if s.label_col in (s.disc_features or []):
        return f"The label '{s.label_col}' cannot be a feature of a group."
    return None


def _same_as_listed(d, found: list) -> list:
    """For each found group: the name of a listed group with exactly the same rows in this table, or None."""
    import numpy as np

    from mmc_core import GroupSet

    listed = [g for g in st.session_state.get("groups") or [] if not gb.is_discovered(g)]
    if not listed or len(listed) > 500 or not found:
        return [None] * len(found)
    try:
        memb = GroupSet.from_json(
            listed + [dict(g, name=f"__discover_candidate_{i}") for i, g in enumerate(found)]
        ).evaluate(d["df"])
    except Exception:  # noqa: BLE001 - a hint only
        return [None] * len(found)
    rows = [memb.group_rows(i + 1) for i in range(len(listed) + len(found))]
    by_rows: dict = {}
    for i, g in enumerate(listed):
        by_rows.setdefault(rows[i].tobytes(), g["name"])
    return [by_rows.get(np.asarray(rows[len(listed) + j]).tobytes()) for j in range(len(found))]


def _nothing_found(disc, lead: str):
    """No rule passed the check half: say so, what was searched and the strongest candidates."""
    st.info(
        "**No group found.** No rule on these features has a mean or variance error beyond sampling noise "
        "on the check rows (adjusted p < 0.05 and above the size threshold). Try more features or a smaller "
        "'smallest group', or accept that the prediction is calibrated on every such rule at this "
        "sample size.",
        icon=":material/search_off:",
    )
    st.caption(esc(lead))
    best = disc.findings[:3]
    if best:
        st.caption(
            "Strongest candidates (not significant): "
            + "; ".join(f"{esc(f.name)} ({p_words(f.p_value)})" for f in best)
        )


def _found_card(i: int, g: dict, r: dict, others: list, same, added: bool):
    """One found group: its rule, error, rows and adjusted p (and its other kinds of error, and the listed group
    with the same rows), with the button that adds it."""
    with st.container(border=True):
        c1, c2 = st.columns([5, 1])
        c1.markdown(
            f"**{esc(r['rule'])}** · {esc(r['error'])}  \n"
            f"{r['rows']:,} rows ({r['share']:.1%} of the searched rows) · observed − predicted "
            f"{esc(r['observed − predicted'])} on {r['check rows']:,} check rows in "
            f"{esc(r['region'])} · adjusted {p_words(r['p (adjusted)'])}"
            + "".join(
                f"  \nAlso: {esc(o['error'])}, {esc(o['observed − predicted'])}, adjusted {p_words(o['p (adjusted)'])}"
                for o in others
            )
            + (f"  \n*Same rows as the listed group '{esc(same)}'.*" if same else "")
        )
        c2.button(
            "Added ✓" if added else "Add",
            key=f"disc_add_{i}",
            disabled=added,
            on_click=_add,
            args=(i,),
            type="secondary" if added else "primary",
            width="stretch",
            help=f"Adds the group '{g['name']}' to the list.",
        )


def _results(d):
    ss = st.session_state
    last = ss.get("disc_last")
    if not last or last.get("data_key") != d["key"]:
        return
    if last["status"] == "stopped":
        st.warning("Discover was stopped by you: nothing was kept.", icon=":material/stop_circle:")
        return
    if last["status"] == "error":
        st.error(f"Discover could not run: {esc(state.in_file_rows(last['error'], d))}", icon=":material/error:")
        return
    res = last["result"]
    if res is None:
        return
    disc = res.discovery
    units = state.units()
    lead = (
        f"Looked for errors of {TARGETS.get(res.target, res.target)} on {res.note}: {disc.n_candidates} "
        f"candidate set(s) "
        f"from the search half ({disc.n_search:,} rows), each tested on the check half ({disc.n_check:,} rows) "
        f"with a Bonferroni correction over all candidates; {last['elapsed']:.1f} s."
    )
    if not res.findings:
        _nothing_found(disc, lead)
        return
    st.markdown(
        f"**{len(res.findings)} group(s) found** — each is a rule (a group definition you can add), the "
        "error measured on check rows the search never saw, inside the prediction bucket it was found in."
    )
    st.caption(esc(lead))
    in_list = {g["name"] for g in ss.get("groups") or []}
    same = _same_as_listed(d, res.groups)
    rows = [describe_finding(f, res.label, units) for f in res.findings]
    others = [[describe_finding(o, res.label, units) for o in fs] for fs in (res.also or [[] for _ in rows])]
    for i, (g, r) in enumerate(zip(res.groups, rows)):
        _found_card(i, g, r, others[i], same[i], g["name"] in in_list)
    fresh = [g for g in res.groups if g["name"] not in in_list]
    if len(fresh) > 1:
        st.button(f"Add all {len(fresh)}", key="disc_add_all", on_click=_add_all)
    with st.expander("As a table"):
        t = pd.DataFrame(rows)
        st.dataframe(
            t,
            hide_index=True,
            width="stretch",
            column_config={
                "share": st.column_config.NumberColumn(format="percent"),
                "p (adjusted)": st.column_config.NumberColumn(format="%.2g"),
            },
        )


def render(d):
    ss = st.session_state
    finalize()
    st.markdown(
        "Find groups you did not list: a learning oracle (shallow regression trees on the residuals, inside "
        "each prediction bucket) proposes rules on half of the non-test rows, and only rules whose error is "
        "significant on the other half are shown. Test rows are never used, so the audit of an added group "
        "stays honest."
    )
    run = ss.get("run")
    has_run = run is not None and run.data_key == d["key"]
    _controls(d, has_run)
    job = ss.get("disc_job")
    running = job is not None and job.running
    problem = _problem(d)
    if problem:
        st.info(problem, icon=":material/info:")
    if st.button(
        "Discover",
        key="disc_btn",
        type="primary",
        icon=":material/travel_explore:",
        disabled=running or problem is not None,
    ):
        job = start()
        running = job is not None and job.running
    if running:
        st.fragment(run_every=POLL_SECONDS)(_live)()
        return
    _results(d)


# ---------------------------------------------------------------------------------------------------
# Results page
# ---------------------------------------------------------------------------------------------------
def discovered_names(run) -> dict:
    """{group name: descriptive fields} of the discovered groups a run was fitted on (also ``mmc fit
    --discover``'s learned sets, recorded by the estimator)."""
    info = getattr(run.model, "info", {}) or {}
    out = {g["name"]: g for g in info.get("discovered_groups") or [] if isinstance(g, dict) and "name" in g}
    for name in info.get("learned_sets") or []:
        out.setdefault(name, {"name": name, "kind": "learned"})
    return out


def results_section(run):
    """On the Results page: which groups were discovered, with their test-row numbers (never seen by Discover)."""
    found = discovered_names(run)
    if not found:
        return
    bg = getattr(run.audit, "by_group", None)
    rows = []
    for name, g in found.items():
        r = {
            "group": name,
            "origin": "discovered",
            "found for": {"mean": "mean error", "moment_2": "variance error", "learned": "learned during the fit"}.get(
                g.get("kind"), str(g.get("kind"))
            ),
        }
        if isinstance(bg, pd.DataFrame) and name in bg.index:
            b = bg.loc[name]
            r["test rows"] = int(b.get("count", 0))
            if "mean_label" in b and "mean_pred" in b:
                r["mean error now"] = float(b["mean_label"] - b["mean_pred"])
                if "mean_pred_base" in b:
                    r["mean error of the base"] = float(b["mean_label"] - b["mean_pred_base"])
            if "emp_var" in b and "pred_var" in b and float(b["pred_var"]) > 0:
                r["variance obs./pred."] = float(b["emp_var"]) / float(b["pred_var"])
        rows.append(r)
    with st.container(border=True):
        st.markdown(
            f"**Discovered groups** ({len(rows)}): found by the learning-oracle auditor (Discover) and checked "
            "on held-out rows, then calibrated like the listed groups. The numbers here are on the test rows, "
            "which the search never saw (mean error: observed − predicted mean; variance: observed over "
            "predicted variance)."
        )
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            width="stretch",
            column_config={
                c: st.column_config.NumberColumn(format="%.3g")
                for c in ("mean error now", "mean error of the base", "variance obs./pred.")
            },
        )

"""Compare page: two runs of this session (or a run and an uploaded model file) side by side, group by group, on
the test rows both held out (mmc_core.comparison.compare_models through app.services.compare_service; the chart from app.figures.compare).
A view only: every number comes from the pure functions of app.services.compare_service."""

from __future__ import annotations

import hashlib

import streamlit as st

from app.services import compare_service as cs
from app.ui.common import download, esc, run_and_frame, sanitize, show_error

VALUES = {"rmse": "RMSE", "mean_error": "Mean error", "spread": "Spread ratio", "coverage": "Coverage"}
MAX_FINDINGS = 12  # findings listed on the page; the rest are in the table


def _numbers(runs) -> dict:
    """A number per run of the session that stays the same while the session lasts (the first run seen is
    run 1), keyed by the run's finishing time."""
    seen = st.session_state.setdefault("_cmp_numbers", {})
    for r in sorted(runs, key=lambda r: r.finished_at):
        seen.setdefault(r.finished_at, len(seen) + 1)
    return seen


def _candidates(current, past, uploaded) -> dict:
    """{key: (label in the pickers, what findings call it, the run or model)}, the current run first."""
    nums = _numbers([current, *past])
    out = {"current": (f"The current run (Run {nums[current.finished_at]})", "the current run", current)}
    if uploaded is not None:
        name, model, _ = uploaded
        out["upload"] = (f"the model in {name}", f"the model in {name}", model)
    for r in past:
        n = nums[r.finished_at]
        out[f"run:{r.finished_at}"] = (cs.describe(r, n), f"Run {n}", r)
    return out


def _upload(current, df):
    """The model file the analyst uploaded (name, FittedModel, digest), or None; a refusal is shown."""
    up = st.file_uploader(
        "A model file (JSON from Export, or from `mmc fit`): compared on the current run's test rows, with its base "
        "prediction",
        type=["json"],
        key="cmp_upload",
    )
    if up is None:
        return None
    data = up.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    memo = st.session_state.get("_cmp_upload")
    if memo is None or memo[0] != (digest, current.finished_at):
        try:
            model = cs.read_model(data, up.name, current, df)
        except Exception as e:  # noqa: BLE001 - any refusal of the file is the analyst's to read
            st.session_state.pop("_cmp_upload", None)
            show_error(f"Cannot compare with {esc(up.name)}", e)
            return None
        memo = st.session_state["_cmp_upload"] = ((digest, current.finished_at), model)
        st.session_state["cmp_a"] = "upload"  # a model file just given: it is what the analyst means to compare
    return up.name[:60], memo[1], digest


def _comparison(df, current, picks, candidates, uploaded):
    """Computed once per pair of sides (runs are keyed by their finishing times, a model file by its digest)."""
    ka, kb = picks
    key = tuple((k, uploaded[2] if k == "upload" else "") for k in picks) + (current.finished_at,)
    memo = st.session_state.setdefault("_compare_memo", {})
    if key not in memo:
        memo.clear()
        (_, name_a, a), (_, name_b, b) = candidates[ka], candidates[kb]
        memo[key] = cs.compare_sides(df, current, a, b, (name_a, name_b))
    return memo[key]


def _pickers(candidates, current) -> tuple:
    """The two pickers; after a new run, A is the newest other side again and B the current run."""
    ss = st.session_state
    keys = list(candidates)
    if ss.get("_cmp_current") != current.finished_at:
        ss["_cmp_current"] = current.finished_at
        ss.pop("cmp_b", None)
        if ss.get("cmp_a") != "upload":
            ss.pop("cmp_a", None)
    sanitize("cmp_a", keys[1:] + keys[:1], default=keys[1])
    sanitize("cmp_b", keys, default="current")
    c1, c2 = st.columns(2)
    fmt = lambda k: candidates[k][0]  # noqa: E731
    ka = c1.selectbox("A: the reference", keys, format_func=fmt, key="cmp_a")
    kb = c2.selectbox("B: compared with A", keys, format_func=fmt, key="cmp_b")
    return ka, kb


def render():
    st.header("Compare")
    st.caption(
        "Two models side by side, group by group, on the same held-out rows: where is B worse than A, and where "
        "better, beyond chance?"
    )
    got = run_and_frame("The loaded table is not the one the current run used: run again on this table to compare.")
    if got is None:
        return
    current, df = got
    past = cs.comparable(current, st.session_state.get("past_runs") or [])
    if not past:
        st.info(
            "There is no earlier run on this table to compare with. Change a setting on the Run page (the groups, "
            "the base model, the thresholds) and run again: the current run is then compared with this one, "
            "group by group, on the test rows both held out. Or upload a model file below.",
            icon=":material/compare_arrows:",
        )
    pickers = st.container()  # drawn above the model file, filled once the file is read
    with st.expander("Compare with a model file", expanded=not past, icon=":material/upload_file:"):
        uploaded = _upload(current, df)
    candidates = _candidates(current, past, uploaded)
    if len(candidates) < 2:
        return
    with pickers:
        ka, kb = _pickers(candidates, current)
    if ka == kb:
        st.info("A and B are the same: pick two different ones.", icon=":material/compare_arrows:")
        return
    try:
        with st.spinner("comparing on the shared test rows"):
            res = _comparison(df, current, (ka, kb), candidates, uploaded)
    except Exception as e:  # noqa: BLE001 - a model that cannot predict on this table: say why
        show_error("Could not compare", e)
        return
    _show(res, current)


def _show(res, current):
    a, b = res.names
    st.markdown(f"**{esc(cs.headline(res))}**")
    shown = res.worse() + res.better()
    if shown:
        with st.container(border=True):
            st.markdown("**Findings**, worse first (each interval allows for its selection among all tests)")
            st.markdown("\n".join(f"- {esc(cs.sentence(f['text']))}" for f in shown[:MAX_FINDINGS]))
            if len(shown) > MAX_FINDINGS:
                st.caption(f"{len(shown) - MAX_FINDINGS} more finding(s): see the table below.")
    compared = [v for v in VALUES if v in res.params["compared"]]
    sanitize("cmp_value", compared, default=compared[0] if compared else None)
    c1, c2 = st.columns([3, 1])
    value = c1.radio(
        "Value compared",
        compared,
        format_func=VALUES.get,
        horizontal=True,
        key="cmp_value",
        help="RMSE: root mean squared error. Mean error: its size. Spread ratio: observed over predicted variance, "
        "by its distance from 1. Coverage: of the intervals, by its distance from the target.",
    )
    if value is None:
        return
    from app.figures.compare import TOP, difference_figure

    n_groups = int(res.by_group[f"{value}_diff"].notna().sum())
    top: int | None = n_groups
    if n_groups > TOP:
        choices = [n for n in (TOP, 2 * TOP, 4 * TOP) if n < n_groups] + ["all"]
        sanitize("cmp_top", choices, default=TOP)
        pick = c2.selectbox("Groups in the chart", choices, key="cmp_top", help="every finding is always drawn")
        top = None if pick == "all" else int(pick)

    st.plotly_chart(difference_figure(res, value, top=top), width="stretch", key="cmp_fig")
    st.dataframe(cs.group_table(res, value), width="stretch", key="cmp_table")
    st.caption(
        f"A: {esc(a)}, B: {esc(b)}. B - A is the difference of the compared form (positive: B is worse) with its "
        "95% interval, largest worsening first. Detectable: the smallest difference this group's rows would find "
        f"with 80% power among all {res.n_tests} tests, so a smaller one may exist unseen."
    )
    stem = "".join(ch if ch.isalnum() else "_" for ch in f"mmc_compare_{b}_vs_{a}")[:80]
    c1, c2, c3 = st.columns(3)
    download(
        "Comparison (JSON)", lambda: _json(res), f"{stem}.json", "cmp_json", where=c1, help="every table and finding"
    )
    download(
        "Comparison report (HTML)",
        lambda: _html(res, current),
        f"{stem}.html",
        "cmp_html",
        mime="text/html",
        where=c2,
        help="the headline, the findings, a chart and table per value; opens in any browser",
    )
    if _can_pdf():
        download(
            "Comparison report (PDF)",
            lambda: _pdf(res, current),
            f"{stem}.pdf",
            "cmp_pdf",
            mime="application/pdf",
            where=c3,
            help="as the HTML report, laid out like the audit's PDF; takes a few seconds to build",
        )
    else:
        c3.caption("The PDF report needs the kaleido and fpdf2 packages: pip install kaleido fpdf2")


def _can_pdf() -> bool:
    from importlib.util import find_spec

    return find_spec("kaleido") is not None and find_spec("fpdf") is not None


def _pdf(res, current) -> bytes:
    from app.report.compare import build_compare_pdf

    return build_compare_pdf(res, current.data_name or "table", current.label.name)


def _json(res) -> bytes:
    import json

    return json.dumps(res.to_json(), indent=1, allow_nan=False).encode()


def _html(res, current) -> bytes:
    from app.report.html import build_compare_html

    return build_compare_html(res, current.data_name or "table", current.label.name)


render()

"""Compare page: the current run against an earlier run of this session, group by group, on the test rows both
held out (mmc_core.compare through app.compare_service; the figure from app.figures_compare)."""

from __future__ import annotations

import streamlit as st

from app import compare_service as cs
from app.ui.common import esc, run_and_frame

VALUES = {
    "rmse": "Root mean squared error",
    "mean_error": "Mean error (its size)",
    "spread": "Spread ratio (distance from 1)",
    "coverage": "Interval coverage (distance from target)",
}


def _comparison(df, earlier, current, number):
    """Computed once per pair of runs (runs are not hashable: keyed by their finishing times)."""
    key = ("compare", earlier.finished_at, current.finished_at)
    memo = st.session_state.setdefault("_compare_memo", {})
    if key not in memo:
        memo.clear()
        memo[key] = cs.compare_runs(df, earlier, current, names=(f"run {number}", "the current run"))
    return memo[key]


def render():
    st.header("Compare runs")
    got = run_and_frame("The loaded table is not the one the current run used: run again on this table to compare.")
    if got is None:
        return
    current, df = got
    past = cs.comparable(current, st.session_state.get("past_runs") or [])
    if not past:
        st.info(
            "There is no earlier run on this table to compare with. Change a setting on the Run page (the groups, "
            "the base model, the thresholds) and run again: the current run is then compared with this one, "
            "group by group, on the test rows both held out.",
            icon=":material/compare_arrows:",
        )
        return
    labels = [cs.describe(r, i + 1) for i, r in enumerate(past)]
    pick = st.selectbox(
        "Compare the current run with", range(len(past)), format_func=lambda i: labels[i], key="cmp_pick"
    )
    earlier = past[pick]
    with st.spinner("comparing on the shared test rows"):
        res = _comparison(df, earlier, current, pick + 1)
    st.markdown(f"**{esc(cs.headline(res))}**")
    worse, better = res.worse(), res.better()
    if worse or better:
        with st.container(border=True):
            st.markdown("**Findings** (worse first; each interval allows for its selection among all tests)")
            st.markdown("\n".join(f"- {esc(cs.sentence(f['text']))}" for f in (worse + better)[:12]))
            if len(worse) + len(better) > 12:
                st.caption(f"{len(worse) + len(better) - 12} more in the table below.")
    value = st.radio(
        "Value",
        [v for v in VALUES if v in res.params["compared"]],
        format_func=VALUES.get,
        horizontal=True,
        key="cmp_value",
    )
    from app.figures_compare import difference_figure

    st.plotly_chart(difference_figure(res, value), width="stretch", key="cmp_fig")
    cols = ["n", f"{value}_a", f"{value}_b", f"{value}_diff", f"{value}_lo", f"{value}_hi"]
    if f"{value}_detectable" in res.by_group:
        cols.append(f"{value}_detectable")
    st.dataframe(res.by_group[cols], width="stretch")
    st.caption(
        "a: the earlier run, b: the current run; diff = b - a of the compared form (positive: the current run is "
        "worse), with its 95% interval. Detectable: the smallest difference this group's rows find with 80% "
        f"power among all {res.n_tests} tests; a smaller one may exist unseen."
    )


render()

"""The Results page's section "Over time": the model per period of a column the analyst picks, the changes found
between consecutive periods, their trend chart, and the reports with that section added.
"""

from __future__ import annotations

import streamlit as st

from app.ui import state
from app.ui.common import download, esc
from app.ui.results_data import run_key


def over_time(run, frame):
    """The model per period of a column the analyst picks (dates, quarters, batches): each group's values per period
    and the changes found beyond chance (mmc_core.comparison.compare_models.compare_periods on the test rows). A classifier's values
    are its rates at the rates tab's threshold (selection rate, TPR, FPR) and its calibration (mean error)."""
    from app.services import compare_service as cs

    binary = getattr(run.model, "task", "regression") == "binary"
    threshold = round(float(state.settings().res_threshold), 4) if binary else None
    changes = (
        "the changes of each group's selection rate, true and false positive rates (at the decision threshold of "
        "the rates tab) and calibration between consecutive periods"
        if binary
        else "the changes of each group's mean error, spread, coverage and RMSE between consecutive periods"
    )

    with st.expander("Over time: the model per period of a column", expanded=bool(st.session_state.get("res_period"))):
        options = [None] + cs.period_columns(frame, run)
        column = st.selectbox(
            "Period column",
            options,
            format_func=lambda c: "(none)" if c is None else str(c),
            key="res_period",
            help=f"A column whose values are periods or batches (2 to 200 values): the audit per period, and {changes}.",
        )
        if column is None:
            st.caption("Pick a column to see each group over time.")
            return
        key = ("periods", run.finished_at, column)  # as app.ui.common.chosen_periods looks it up
        memo = st.session_state.setdefault("_period_memo", {})
        if key not in memo or memo[key].params.get("threshold") != threshold:  # a classifier's rates: at the slider's
            memo.clear()
            memo[key] = cs.periods_of_run(frame, run, column, delta=run.settings.delta, threshold=threshold)
        res = memo[key]
        if res.findings:
            st.markdown("\n".join(f"- {esc(cs.sentence(f['text']))}" for f in res.findings[:10]))
        else:
            st.markdown(f"No group's values change between periods beyond chance ({res.n_tests} tests of change).")
        from app.figures.compare import PERIOD_TITLES, period_figure

        if binary:
            st.caption(f"Rates at the decision threshold {threshold:g} (set on the tab Rates at a threshold).")
        values = cs.period_values(res)
        if st.session_state.get("res_period_value") not in (None, *values):  # a value of another task's run
            del st.session_state["res_period_value"]
        value = st.radio("Value", values, format_func=PERIOD_TITLES.get, horizontal=True, key="res_period_value")
        st.plotly_chart(period_figure(res, value), width="stretch", key="fig_period")
        period_downloads(run, frame, column, res)


def period_downloads(run, frame, column: str, res) -> None:
    """The audit's HTML and PDF reports with this view as their section "Over time" (built on click, cached)."""
    from app.report.pdf import CHROMIUM_MESSAGE, chromium_available
    from app.ui.export_page import dropped_note, report_file_name

    stem = report_file_name(run.data_name).removesuffix(".pdf")
    stem += "_over_" + "".join(ch if ch.isalnum() else "_" for ch in str(column))[:40]
    # the key names the rates' threshold: a classifier's report at another slider threshold is another report
    args = (f"{run_key(run)}:{res.params.get('threshold')}", str(column), state.units(), dropped_note(run))

    def build(fmt):
        return lambda: _period_report(fmt, *args, run, frame, res)

    c1, c2 = st.columns(2)
    download(
        "Report with Over time (HTML)",
        build("html"),
        f"{stem}.html",
        "res_period_html",
        mime="text/html",
        where=c1,
        help="the audit's report on the test rows, with this view's changes and charts; opens in any browser",
    )
    if chromium_available():
        download(
            "Report with Over time (PDF)",
            build("pdf"),
            f"{stem}.pdf",
            "res_period_pdf",
            mime="application/pdf",
            where=c2,
            help="the Export page's PDF report with the section Over time added; takes a few seconds to build",
        )
    else:
        c2.caption(f"PDF export is unavailable: {esc(CHROMIUM_MESSAGE)}.")


@st.cache_data(show_spinner=False, max_entries=4)
def _period_report(fmt: str, key: str, column: str, units: str, data_note: str, _run, _frame, _res) -> bytes:
    """The audit's report (``fmt`` "pdf" or "html") on the run's test rows, as the Export page builds its PDF,
    with the section "Over time" of ``column`` (``_res``: the period audit the view shows)."""
    from app.ui.export_page import build_pdf, report_inputs

    thr = _res.params.get("threshold")  # a classifier's: the slider's, as the Export page's PDF
    if fmt == "pdf":
        return build_pdf(_run, _frame, threshold=thr, periods=_res, period_column=column)
    from app.report.html import build_report_html

    table, y, common = report_inputs(_run, _frame)
    more = {} if thr is None else {"threshold": thr}
    return build_report_html(_run.model, table, y, **common, **more, periods=_res, period_column=column)

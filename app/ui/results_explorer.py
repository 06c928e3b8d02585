"""The Results page's Row explorer: one test row's features, predicted mean and moments, every interval method's
interval against the observed value, and the groups the row belongs to.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.figures.figure_style import format_number, interval_text, legend_line
from app.ui import state
from app.ui.common import esc
from app.ui.results_data import METHOD_LABELS, intervals_of_test_rows, run_key


def _interval_figure(details: dict, y: float, name: str, units: str) -> go.Figure:
    from app.figures.charts import OKABE_ITO

    rows = [(m, v) for m, v in details["intervals"].items() if isinstance(v, tuple)]
    fig = go.Figure()
    labels = [METHOD_LABELS.get(m, m) for m, _ in rows]
    for lab, (_, (lo, hi)) in zip(labels, rows):
        inside = lo <= y <= hi
        fig.add_trace(
            go.Scatter(
                x=[lo, hi],
                y=[lab, lab],
                mode="lines+markers",
                showlegend=False,
                line=dict(color=OKABE_ITO["blue"] if inside else OKABE_ITO["vermillion"], width=6),
                marker=dict(symbol="line-ns", size=14, line=dict(width=2)),
                hovertemplate=f"{lab}: {interval_text(lo, hi, 4)}<extra></extra>",
            )
        )
    mu = details["pred"]["mean"]
    fig.add_vline(x=mu, line=dict(color="#555", dash="dot", width=2))
    fig.add_vline(x=y, line=dict(color=OKABE_ITO["orange"], width=3))
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="lines",
            line=dict(color="#555", dash="dot", width=2),
            name=f"predicted mean {format_number(mu, 4)}",
        )
    )
    fig.add_trace(legend_line(f"observed {name} {format_number(y, 4)}", dict(color=OKABE_ITO["orange"], width=3)))
    if any(not (lo <= y <= hi) for _, (lo, hi) in rows):
        miss = dict(color=OKABE_ITO["vermillion"], width=6)
        fig.add_trace(legend_line("interval misses the observed value", miss))
    fig.update_layout(
        height=120 + 38 * len(rows),
        margin=dict(l=10, r=20, t=40, b=50),
        template="plotly_white",
        font=dict(family="DejaVu Sans, Arial, sans-serif", size=13),
        title=dict(text="<b>This row's intervals</b>", x=0, font=dict(size=15)),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"),
    )
    fig.update_xaxes(title_text=f"{name} ({units})" if units else name)
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig


def explorer_tab(run, frame):
    """The Row explorer tab: one test row's features, predictions, every method's interval and its groups."""
    from app.services.pipeline import row_details

    ss = st.session_state
    test = run.split["test"]
    st.markdown(
        "Pick a test row: its features, predicted mean and moments, every method's interval, and the "
        "groups it belongs to."
    )
    c1, c2 = st.columns([1, 3])
    if "res_row" not in ss or not 0 <= ss["res_row"] < test.size:
        ss["res_row"] = 0
    c1.number_input(
        f"Test row (0 – {test.size - 1:,})", min_value=0, max_value=int(test.size - 1), key="res_row", step=1
    )
    if c1.button("Random row", key="res_random"):
        ss["res_row_next"] = int(np.random.default_rng().integers(test.size))
        st.rerun()
    pos = int(ss["res_row"])
    row = int(test[pos])
    try:
        t = intervals_of_test_rows(run_key(run), run, frame)
        ints = {m: (float(lo[pos]), float(hi[pos])) for m, (lo, hi) in t["ints"].items()}
        det = row_details(frame, run, row, ints)
    except Exception as e:  # noqa: BLE001 - shown, the page keeps working
        st.error(f"Cannot explain this row: {esc(e)}")
        return
    ss["row_details"] = det
    units = state.units()
    u = f" ({esc(units)})" if units else ""
    with c2:
        p = det["pred"]
        k = st.columns(4)
        k[0].metric(f"Observed {esc(run.label.name)}{u}", format_number(det["label"], 4))
        k[1].metric(
            f"Predicted mean{u}",
            format_number(p["mean"], 4),
            delta=None if det["base"] is None else f"{p['mean'] - det['base']:+.3g} vs base",
            delta_color="off",
        )
        if "moment_2" in p:
            k[2].metric(f"Predicted SD{u}", format_number(math.sqrt(max(p["moment_2"], 0)), 4))
        if det["base"] is not None:
            k[3].metric(f"Base prediction{u}", format_number(det["base"], 4))
    st.caption(
        f"{state.file_row(row + 1).capitalize()} (test row {pos:,}). Central moments: "
        + ", ".join(
            f"m{k.split('_')[1]} = {format_number(v, 4)}" for k, v in det["pred"].items() if k.startswith("moment_")
        )
    )
    a, b = st.columns([3, 2], gap="large")
    with a:
        st.plotly_chart(_interval_figure(det, det["label"], run.label.name, units), width="stretch", key="fig_row")
        rows = [
            (METHOD_LABELS.get(m, m), lo, hi, hi - lo, lo <= det["label"] <= hi)
            for m, v in det["intervals"].items()
            if isinstance(v, tuple)
            for lo, hi in [v]
        ]
        st.dataframe(
            pd.DataFrame(rows, columns=["method", "lower", "upper", "width", "contains the outcome"]),
            hide_index=True,
            width="stretch",
            column_config={c: st.column_config.NumberColumn(format="%.4g") for c in ("lower", "upper", "width")},
        )
    with b:
        st.markdown(f"**Groups of this row** ({len(det['groups'])})")
        st.markdown(" · ".join(esc(g) for g in det["groups"]))
        vals = {k: v for k, v in det["values"].items()}
        st.dataframe(
            pd.DataFrame({"column": list(vals), "value": [str(v) for v in vals.values()]}),
            hide_index=True,
            width="stretch",
            height=min(36 + 35 * len(vals), 320),
        )

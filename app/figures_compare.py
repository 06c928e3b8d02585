"""Figures of a comparison of two models (mmc_core.compare), built from its tables: used by the dashboard's
Compare page (and meant for the reports). Group names are user text: drawn through the shared display rules."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .figure_style import _base_layout, _display_names, _left_margin, _rows_height

WORSE, BETTER, NEUTRAL = "#c0392b", "#1f7a3a", "#7f8c8d"
TITLES = {
    "rmse": "Root mean squared error",
    "mean_error": "Size of the mean error",
    "spread": "Distance of the spread ratio from 1 (|log ratio|)",
    "coverage": "Distance of interval coverage from its target",
}


def difference_figure(res, value: str = "rmse", top: int = 25) -> go.Figure:
    """Per group, the difference B - A of ``value`` (its compared form: positive = B worse) with its 95% interval,
    groups sorted by the size of the difference; groups with a finding always shown (worse red, better green),
    then the largest other differences, at most ``top`` groups in all."""
    tab = res.by_group
    est = tab[f"{value}_diff"].to_numpy(float)
    lo, hi = tab[f"{value}_lo"].to_numpy(float), tab[f"{value}_hi"].to_numpy(float)
    names = list(tab.index)
    found = {f["group"]: f["direction"] for f in res.findings if f["kind"] == value}
    ok = np.isfinite(est)
    order = sorted(np.flatnonzero(ok), key=lambda i: (names[i] not in found, -abs(est[i])))
    shown = order[:top]
    shown = sorted(shown, key=lambda i: est[i])  # bottom to top: the largest worsening on top
    labels = _display_names([names[i] for i in shown])
    colors = [
        WORSE if found.get(names[i]) == "worse" else BETTER if found.get(names[i]) == "better" else NEUTRAL
        for i in shown
    ]
    fig = go.Figure(
        go.Scatter(
            x=est[shown],
            y=labels,
            mode="markers",
            marker=dict(color=colors, size=9),
            error_x=dict(
                type="data",
                symmetric=False,
                array=hi[shown] - est[shown],
                arrayminus=est[shown] - lo[shown],
                color="#999",
            ),
            hovertemplate="%{y}: %{x:.4g}<extra></extra>",
            showlegend=False,
        )
    )
    fig.add_vline(x=0, line=dict(color="#333", dash="dash", width=1))
    a, b = (str(n) for n in res.names)
    more = f"; {ok.sum() - len(shown)} more group(s) in the table" if ok.sum() > len(shown) else ""
    _base_layout(
        fig,
        f"{TITLES.get(value, value)}: {b} minus {a}",
        _rows_height(len(shown)),
        subtitle=f"Right of 0: {b} is worse. Red / green: a finding (worse / better) after adjustment; bars: 95% "
        f"intervals (paired on the same rows){more}.",
        left=_left_margin(labels),
        legend=False,
    )
    fig.update_xaxes(title="difference (B - A)", zeroline=False)
    return fig


PERIOD_TITLES = {
    "mean_error": "Mean error (observed - predicted)",
    "spread": "Spread ratio (observed / predicted variance)",
    "coverage": "Interval coverage",
    "rmse": "Root mean squared error",
}


def period_figure(res, value: str = "spread", top: int = 8) -> go.Figure:
    """Each group's ``value`` per period with its 95% interval (mmc_core.compare.compare_periods): the whole table
    and the groups with a finding on this value first, then the groups whose value changes most, at most ``top``."""
    per = res.by_period
    if value not in per:
        raise ValueError(f"no {value} per period in this result")
    found = [f["group"] for f in res.findings if f["kind"] == value]
    spread = per.groupby("group", sort=False)[value].agg(
        lambda v: float(np.nanmax(v) - np.nanmin(v)) if v.notna().any() else 0.0
    )
    order = ["all"] + list(dict.fromkeys(g for g in found if g != "all"))
    order += [g for g in spread.sort_values(ascending=False).index if g not in order]
    chosen = order[:top]
    labels = [str(p) for p in res.periods]
    fig = go.Figure()
    for g, name in zip(chosen, _display_names(chosen)):
        rows = per[per["group"] == g]
        y, lo, hi = (rows[c].to_numpy(float) for c in (value, f"{value}_lo", f"{value}_hi"))
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=y,
                name=name + (" (finding)" if g in found else ""),
                mode="lines+markers",
                line=dict(width=3 if g in found else 1.5, dash="solid" if g in found or g == "all" else "dot"),
                error_y=dict(type="data", symmetric=False, array=hi - y, arrayminus=y - lo, thickness=1),
            )
        )
    if value == "spread":
        fig.add_hline(y=1.0, line=dict(color="#333", dash="dash", width=1))
    elif value == "mean_error":
        fig.add_hline(y=0.0, line=dict(color="#333", dash="dash", width=1))
    _base_layout(
        fig,
        f"{PERIOD_TITLES.get(value, value)} by period",
        480,
        subtitle="Bars: 95% intervals per period. Thick lines: a change between periods found beyond chance "
        f"(adjusted over all {res.n_tests} tests of change).",
    )
    fig.update_xaxes(title="period", type="category")
    return fig

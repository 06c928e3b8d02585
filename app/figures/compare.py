"""Figures of a comparison of two models (mmc_core.comparison.compare_models), built from its tables: used by the dashboard's
Compare page, the comparison's PDF and HTML reports, and the period trend on Results. Group and side names are
user text: drawn through the shared display rules (shortened, angle brackets neutralised)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from mmc_core.comparison import POINTS

from .figure_style import (
    MUTED,
    OKABE_ITO,
    add_footer,
    base_layout,
    display_names,
    hover_safe,
    left_margin,
    rows_height,
    short_name,
)

# colour-blind safe (Okabe-Ito), and told apart by the marker's shape as well: worse points right, better left
WORSE, BETTER, NEUTRAL = OKABE_ITO["vermillion"], OKABE_ITO["blue"], MUTED
MARKS = {
    "worse": ("triangle-right", WORSE, 12, "B worse (a finding)"),
    "better": ("triangle-left", BETTER, 12, "B better (a finding)"),
    "": ("circle", NEUTRAL, 8, "no finding"),
}
TITLES = {
    "rmse": "Root mean squared error",
    "mean_error": "Size of the mean error",
    "spread": "Distance of the spread ratio from 1 (|log ratio|)",
    "coverage": "Distance of interval coverage from its target",
}
TOP = 25  # groups drawn by default; the others are in the table


def shown_groups(res, value: str, top: int | None = TOP) -> list:
    """Which groups the chart of ``value`` draws, as positions in ``res.by_group``, bottom to top: every group
    with a finding on ``value``, then the largest other differences, at most ``top`` (None: all) in all; sorted
    by the signed difference, so the largest worsening is on top and the largest improvement at the bottom."""
    tab = res.by_group
    est = tab[f"{value}_diff"].to_numpy(float)
    names = list(tab.index)
    found = {f["group"] for f in res.findings if f["kind"] == value}
    ok = np.flatnonzero(np.isfinite(est))
    order = sorted(ok, key=lambda i: (names[i] not in found, -abs(est[i])))
    n = len(order) if top is None else max(int(top), sum(names[i] in found for i in order))
    return sorted(order[:n], key=lambda i: est[i])


def difference_figure(res, value: str = "rmse", top: int | None = TOP) -> go.Figure:
    """Per group, the difference B - A of ``value`` (its compared form: positive = B worse) with its 95% interval
    (a forest chart built from ``res.by_group``): the groups of :func:`shown_groups`, a finding marked by colour
    and shape (worse: vermillion, pointing right; better: blue, pointing left), a note of the groups left out.
    A share's difference (coverage, a classifier's rates) is drawn in percentage points, as the table says it."""
    tab = res.by_group
    scale = 100.0 if value in POINTS else 1.0
    est = scale * tab[f"{value}_diff"].to_numpy(float)
    lo, hi = scale * tab[f"{value}_lo"].to_numpy(float), scale * tab[f"{value}_hi"].to_numpy(float)
    names = list(tab.index)
    found = {f["group"]: f["direction"] for f in res.findings if f["kind"] == value}
    shown = shown_groups(res, value, top)
    labels = display_names([names[i] for i in shown])
    a, b = (hover_safe(short_name(str(n), 50)) for n in res.names)
    fig = go.Figure()
    for kind, (symbol, color, size, legend) in MARKS.items():
        idx = [k for k, i in enumerate(shown) if found.get(names[i], "") == kind]
        if not idx:
            continue
        rows = [shown[k] for k in idx]
        fig.add_trace(
            go.Scatter(
                x=est[rows],
                y=[labels[k] for k in idx],
                mode="markers",
                name=legend,
                marker=dict(color=color, size=size, symbol=symbol),
                error_x=dict(
                    type="data",
                    symmetric=False,
                    array=hi[rows] - est[rows],
                    arrayminus=est[rows] - lo[rows],
                    color=color if kind else "#b0b0b0",
                    thickness=1.5,
                ),
                customdata=np.column_stack([lo[rows], hi[rows], tab["n"].to_numpy()[rows]]),
                hovertemplate="%{y}: %{x:.4g} (95% CI %{customdata[0]:.4g} to %{customdata[1]:.4g}; "
                "%{customdata[2]:,} rows)<extra></extra>",
            )
        )
    fig.add_vline(x=0, line=dict(color="#333", dash="dash", width=1))
    n_ok = int(np.isfinite(est).sum())
    more = (
        f" Showing {len(shown)} of {n_ok} groups (every finding, then the largest differences); the rest are in the table."
        if n_ok > len(shown)
        else ""
    )
    base_layout(
        fig,
        f"{TITLES.get(value, value)}: {b} minus {a}",
        rows_height(len(shown)),
        subtitle=f"Right of 0: {_side_name('B', b)} is worse than {_side_name('A', a)}. Bars: 95% intervals, paired "
        "on the same rows; a "
        f"finding is a difference beyond chance after adjusting over all {res.n_tests} tests.{more}",
        left=left_margin(labels),
    )
    fig.update_yaxes(categoryorder="array", categoryarray=labels)
    fig.update_xaxes(
        title="difference (B - A), percentage points" if value in POINTS else "difference (B - A)", zeroline=False
    )
    return fig


def _side_name(letter: str, name: str) -> str:
    return letter if name == letter else f"{letter} ({name})"


# the groups' lines of the period chart (the whole table in black): Okabe-Ito, the yellow left out (too light)
PERIOD_COLORS = [OKABE_ITO[c] for c in ("vermillion", "blue", "green", "orange", "purple", "sky", "grey")]

PERIOD_TITLES = {
    "mean_error": "Mean error (observed - predicted)",
    "spread": "Spread ratio (observed / predicted variance)",
    "coverage": "Interval coverage",
    "rmse": "Root mean squared error",
    "selection_rate": "Selection rate (share decided positive)",
    "tpr": "True positive rate (positives decided positive)",
    "fpr": "False positive rate (negatives decided positive)",
}
PERIOD_PERCENT = ("coverage", "selection_rate", "tpr", "fpr")  # drawn on a percent axis


def period_figure(res, value: str = "spread", top: int = 8) -> go.Figure:
    """Each group's ``value`` per period with its 95% interval (mmc_core.comparison.compare_models.compare_periods): the whole table
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
    P = len(labels)
    # each group a little to the side of the period's position, so that the intervals of one period stay apart
    width = min(0.3, 0.06 * (len(chosen) - 1))
    offsets = np.linspace(-width / 2, width / 2, len(chosen)) if len(chosen) > 1 else np.zeros(1)
    colors = iter(PERIOD_COLORS * (1 + len(chosen) // len(PERIOD_COLORS)))
    fmt = ".1%" if value in PERIOD_PERCENT else ".4g"
    fig = go.Figure()
    for k, (g, name) in enumerate(zip(chosen, display_names(chosen))):
        rows = per[per["group"] == g]
        y, lo, hi = (rows[c].to_numpy(float) for c in (value, f"{value}_lo", f"{value}_hi"))
        color = OKABE_ITO["black"] if g == "all" else next(colors)
        fig.add_trace(
            go.Scatter(
                x=np.arange(P) + offsets[k],
                y=y,
                name=name + (" (finding)" if g in found else ""),
                mode="lines+markers",
                marker=dict(color=color, size=8 if g in found else 6),
                line=dict(
                    color=color,
                    width=3 if g in found else 1.5,
                    dash="solid" if g in found or g == "all" else "dot",
                ),
                error_y=dict(type="data", symmetric=False, array=hi - y, arrayminus=y - lo, thickness=1, color=color),
                customdata=[[lab, a, b, int(c)] for lab, a, b, c in zip(labels, lo, hi, rows["n"])],
                hovertemplate=f"%{{fullData.name}}<br>%{{customdata[0]}}: %{{y:{fmt}}} (95% CI "
                f"%{{customdata[1]:{fmt}}} to %{{customdata[2]:{fmt}}}; %{{customdata[3]}} rows)<extra></extra>",
            )
        )
    if value == "spread":
        fig.add_hline(y=1.0, line=dict(color="#333", dash="dash", width=1))
    elif value == "mean_error":
        fig.add_hline(y=0.0, line=dict(color="#333", dash="dash", width=1))
    n_groups = int(per["group"].nunique())
    more = (
        f" Showing {len(chosen)} of {n_groups} groups: the whole table, every group with a finding, then the largest "
        "changes."
        if n_groups > len(chosen)
        else ""
    )
    # the legend under the plot, about three names a row: above it, it ran over the two-line subtitle
    legend_rows = -(-len(chosen) // 3)
    base_layout(
        fig,
        f"{PERIOD_TITLES.get(value, value)} by period",
        440 + 24 * legend_rows,
        subtitle="Bars: 95% intervals per period. Thick lines: a change between periods found beyond chance "
        f"(adjusted over all {res.n_tests} tests of change).{more}",
    )
    fig.update_xaxes(title="period", tickmode="array", tickvals=list(range(P)), ticktext=labels, range=[-0.5, P - 0.5])
    if value in PERIOD_PERCENT:
        fig.update_yaxes(tickformat=".0%")
    add_footer(fig, legend_rows=legend_rows)
    return fig

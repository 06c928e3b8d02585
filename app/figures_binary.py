"""Figures and tables of a classifier audit (binary labels): per-group probability calibration, rates at a
decision threshold and their disparities as display tables with 95% intervals, reliability diagrams and the rate
figure. Everything is on the probability scale, never in label units. Built from the tables of
:class:`mmc_core.metrics.AuditResult` for a binary model (``by_group``, ``calibration_cells``,
``classifier.disparities``) or :func:`mmc_core.binary.threshold_rates`; the shared palette, layout and name
helpers come from :mod:`app.figure_style`, so these look like the regression figures. Used by the Results page and
the classifier PDF report (:mod:`app.report_binary`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figure_style import (
    FIT_COLOR,
    HOLDOUT_COLOR,
    _base_layout,
    _display_names,
    _empty,
    _fmt,
    _left_margin,
    _rows_height,
    _short,
)
from app.figures import _hover_safe

__all__ = [
    "reliability_figure",
    "rate_figure",
    "classifier_calibration_table",
    "classifier_rate_table",
    "classifier_disparity_table",
    "RATE_NAMES",
    "CALIB_NAMES",
]

RATE_NAMES = {
    "selection_rate": "selection rate",
    "tpr": "true positive rate",
    "fpr": "false positive rate",
    "precision": "precision",
}
CALIB_NAMES = {
    "base_rate": "positive share",
    "mean_score": "mean probability",
    "calib_error_worst": "worst bucket error",
    "ece": "ECE",
    "brier": "Brier",
    "log_loss": "log loss",
}


def _ci_text(v, lo, hi, digits: int = 3) -> str:
    try:
        v, lo, hi = float(v), float(lo), float(hi)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(v):
        return "–"
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
    return f"{v:.{digits}f}"


def _pick_groups(bg: pd.DataFrame, top: int | None) -> list:
    """ "all" first, then the largest groups (at most ``top`` in all)."""
    names = list(bg.index)
    if top is None or len(names) <= top:
        return names
    rest = bg.iloc[1:].sort_values("count", ascending=False).index[: max(top - 1, 0)]
    return [names[0]] + [n for n in names[1:] if n in set(rest)]


def classifier_calibration_table(by_group: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Per-group probability metrics before -> after with bootstrap 95% intervals, as display text (the
    dashboard and the PDF show this same table)."""
    rows = []
    has_base = "mean_score_base" in by_group.columns
    for g in _pick_groups(by_group, top):
        r = by_group.loc[g]
        row = {
            "group": str(g),
            "n": int(r["count"]),
            "positive share": _ci_text(r["base_rate"], r.get("base_rate_lo"), r.get("base_rate_hi")),
        }
        for k in ("mean_score", "calib_error_worst", "ece", "log_loss", "brier"):
            name = CALIB_NAMES[k]
            if has_base:
                row[f"{name}, before"] = _ci_text(r[k + "_base"], r.get(k + "_base_lo"), r.get(k + "_base_hi"))
            row[f"{name}{', after' if has_base else ''}"] = _ci_text(r[k], r.get(k + "_lo"), r.get(k + "_hi"))
        rows.append(row)
    return pd.DataFrame(rows)


def classifier_rate_table(rates: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Per-group rates at the decision threshold (after multicalibration; before in brackets below when
    given), with bootstrap 95% intervals, as display text."""
    rows = []
    has_base = "selection_rate_base" in rates.columns
    for g in _pick_groups(rates, top):
        r = rates.loc[g]
        row = {"group": str(g), "n": int(r["count"])}
        for k, name in RATE_NAMES.items():
            row[name] = _ci_text(r[k], r.get(k + "_lo"), r.get(k + "_hi"))
            if has_base:
                row[f"{name}, before"] = _ci_text(r[k + "_base"], r.get(k + "_base_lo"), r.get(k + "_base_hi"))
        rows.append(row)
    return pd.DataFrame(rows)


def classifier_disparity_table(disparities: pd.DataFrame) -> pd.DataFrame:
    """Demographic parity / equalized odds per column and the four-fifths rule, as display text."""
    rows = []
    for col, d in disparities.iterrows():
        rows.append(
            {
                "column": str(col),
                "groups": int(d["groups"]),
                "DP difference": _fmt(d["demographic_parity_difference"]),
                "DP ratio": _fmt(d["demographic_parity_ratio"]),
                "EO difference": _fmt(d["equalized_odds_difference"]),
                "EO ratio": _fmt(d["equalized_odds_ratio"]),
                "below 4/5 of the top selection rate": ", ".join(d["four_fifths_flagged"]) or "none",
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "column",
            "groups",
            "DP difference",
            "DP ratio",
            "EO difference",
            "EO ratio",
            "below 4/5 of the top selection rate",
        ],
    )


def reliability_figure(
    cells: pd.DataFrame, by_group: pd.DataFrame, top: int = 9, cols: int = 3, min_count: int = 1
) -> go.Figure:
    """Per-group reliability diagrams: observed share of positives (Wilson 95% interval) against the mean
    predicted probability per score bucket, before (base) and after multicalibration; the diagonal is perfect
    calibration. ``cells``: :func:`mmc_core.binary.reliability_cells` (``audit.calibration_cells``)."""
    title = "Reliability by group: observed vs predicted probability"
    if cells is None or len(cells) == 0:
        return _empty(title, "No reliability cells (no test rows).")
    cells = cells[cells["count"] >= min_count]
    groups = [g for g in _pick_groups(by_group, top) if (cells["group"] == g).any()]
    rows = max(1, math.ceil(len(groups) / cols))
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[_hover_safe(_short(str(g), 34)) for g in groups],
        horizontal_spacing=0.07,
        vertical_spacing=0.12 if rows > 1 else 0.1,
        shared_xaxes=False,
        shared_yaxes=False,
    )
    styles = {
        "before": ("base model (before)", HOLDOUT_COLOR, "diamond"),
        "after": ("multicalibrated (after)", FIT_COLOR, "circle"),
    }
    shown = set()
    for k, g in enumerate(groups):
        r, c = divmod(k, cols)
        r, c = r + 1, c + 1
        fig.add_trace(
            go.Scatter(
                x=[0, 1],
                y=[0, 1],
                mode="lines",
                line=dict(color="#b0b0b0", dash="dash", width=1),
                hoverinfo="skip",
                showlegend=False,
            ),
            row=r,
            col=c,
        )
        for which in ("before", "after"):
            d = cells[(cells["group"] == g) & (cells["score"] == which)]
            if d.empty:
                continue
            name, color, symbol = styles[which]
            size = 5 + 10 * np.sqrt(d["count"].to_numpy() / max(float(d["count"].max()), 1.0))
            custom = np.column_stack([d["count"], d["bucket_lo"], d["bucket_hi"], d["observed_lo"], d["observed_hi"]])
            fig.add_trace(
                go.Scatter(
                    x=d["mean_score"],
                    y=d["observed"],
                    mode="markers+lines",
                    name=name,
                    legendgroup=which,
                    showlegend=which not in shown,
                    line=dict(color=color, width=1),
                    marker=dict(color=color, size=size, symbol=symbol, line=dict(width=0.5, color="#333")),
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=d["observed_hi"] - d["observed"],
                        arrayminus=d["observed"] - d["observed_lo"],
                        color=color,
                        thickness=1,
                        width=2,
                    ),
                    customdata=custom,
                    hovertemplate=(
                        f"<b>{_hover_safe(str(g))}</b> ({which})<br>scores in [%{{customdata[1]:.1f}}, "
                        "%{customdata[2]:.1f})<br>rows %{customdata[0]}<br>predicted %{x:.3f}<br>observed "
                        "%{y:.3f} (95% CI %{customdata[3]:.3f}–%{customdata[4]:.3f})<extra></extra>"
                    ),
                ),
                row=r,
                col=c,
            )
            shown.add(which)
        fig.update_xaxes(
            range=[-0.02, 1.02],
            row=r,
            col=c,
            title_text="predicted probability" if r == rows else None,
            title_font=dict(size=11),
            tickfont=dict(size=10),
        )
        fig.update_yaxes(
            range=[-0.02, 1.02],
            row=r,
            col=c,
            title_text="observed share" if c == 1 else None,
            title_font=dict(size=11),
            tickfont=dict(size=10),
        )
    for ann in fig.layout.annotations:
        ann.font = dict(size=12)
    height = 120 + 250 * rows
    _base_layout(
        fig,
        title,
        height,
        subtitle="per bucket of the predicted probability (tenths); bars: 95% Wilson "
        "intervals; marker area ~ rows; dashed: perfect calibration",
    )
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.0 + 40.0 / height, xanchor="right", x=1.0))
    return fig


def rate_figure(
    rates: pd.DataFrame, threshold: float, top: int = 12, metrics=("selection_rate", "tpr", "fpr")
) -> go.Figure:
    """Per-group rates at the decision threshold (decision = probability >= threshold), with bootstrap 95%
    intervals, before (base) and after multicalibration. ``rates``: ``audit.by_group`` or
    :func:`mmc_core.binary.threshold_rates` at another threshold."""
    title = f"Rates by group at threshold {threshold:g}"
    if rates is None or len(rates) == 0:
        return _empty(title, "No groups.")
    groups = _pick_groups(rates, top)[::-1]  # "all" at the top
    disp = _display_names([str(g) for g in groups])
    fig = make_subplots(
        rows=1,
        cols=len(metrics),
        shared_yaxes=True,
        horizontal_spacing=0.03,
        subplot_titles=[RATE_NAMES[m] for m in metrics],
    )
    has_base = "selection_rate_base" in rates.columns
    for j, m in enumerate(metrics):
        for which, suffix, color, symbol, off in (
            ("before", "_base", HOLDOUT_COLOR, "diamond", 0.18),
            ("after", "", FIT_COLOR, "circle", -0.18),
        ):
            if suffix and not has_base:
                continue
            v = rates.loc[groups, m + suffix].astype(float).to_numpy()
            lo = rates.loc[groups, m + suffix + "_lo"].astype(float).to_numpy() if m + suffix + "_lo" in rates else v
            hi = rates.loc[groups, m + suffix + "_hi"].astype(float).to_numpy() if m + suffix + "_hi" in rates else v
            fig.add_trace(
                go.Scatter(
                    x=v,
                    y=np.arange(len(groups)) + off,
                    mode="markers",
                    name="base model (before)" if suffix else "multicalibrated (after)",
                    legendgroup=which,
                    showlegend=j == 0,
                    marker=dict(color=color, size=9, symbol=symbol),
                    error_x=dict(
                        type="data",
                        symmetric=False,
                        array=np.nan_to_num(hi - v),
                        arrayminus=np.nan_to_num(v - lo),
                        color=color,
                        thickness=1.2,
                        width=3,
                    ),
                    customdata=np.column_stack([[_hover_safe(str(g)) for g in groups], lo, hi]),
                    hovertemplate=(
                        f"<b>%{{customdata[0]}}</b> ({which})<br>{RATE_NAMES[m]} %{{x:.3f}} "
                        "(95% CI %{customdata[1]:.3f}–%{customdata[2]:.3f})<extra></extra>"
                    ),
                ),
                row=1,
                col=j + 1,
            )
        fig.update_xaxes(range=[-0.03, 1.03], row=1, col=j + 1, tickfont=dict(size=10))
    fig.update_yaxes(tickvals=list(range(len(groups))), ticktext=disp, row=1, col=1, automargin=True)
    for ann in fig.layout.annotations:
        ann.font = dict(size=12)
    height = _rows_height(len(groups), per_row=30, extra=200)
    _base_layout(
        fig,
        title,
        height,
        subtitle="decision = predicted probability ≥ threshold; bars: bootstrap 95% intervals",
        left=_left_margin(disp),
    )
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.0 + 40.0 / height, xanchor="right", x=1.0))
    return fig

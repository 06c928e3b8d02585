"""Figures and tables of a classifier audit (binary labels): per-group probability calibration, rates at a
decision threshold and their disparities as display tables with 95% intervals, reliability diagrams and the rate
figure. Everything is on the probability scale, never in label units. Intervals: the rates (selection rate, true and
false positive rate, precision) and the positive share are proportions k / n of a group's rows, shown with Wilson
score intervals from those counts (:func:`wilson_rates`; a percentile bootstrap collapses to a point when a
group's rate is 0 or 1, e.g. a TPR of 1.000 [1.000, 1.000] on 50 rows); the other metrics keep the audit's
percentile bootstrap intervals. Built from the tables of
:class:`mmc_core.auditing.metrics.AuditResult` for a binary model (``by_group``, ``calibration_cells``,
``classifier.disparities``) or :func:`mmc_core.auditing.binary.threshold_rates`; the shared palette, layout and name
helpers come from :mod:`app.figures.figure_style`, so these look like the regression figures. Used by the Results page and
the classifier PDF report (:mod:`app.report.binary`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.figure_style import (
    FIT_COLOR,
    HOLDOUT_COLOR,
    base_layout,
    display_names,
    empty_figure,
    format_number,
    hover_safe,
    left_margin,
    rows_height,
    short_name,
)

__all__ = [
    "wilson_interval",
    "wilson_rates",
    "rate_counts",
    "RATE_INTERVAL_NOTE",
    "reliability_figure",
    "rate_figure",
    "finding_groups",
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


# how the intervals of the rates are computed: said under every rate table and figure (dashboard and PDF)
RATE_INTERVAL_NOTE = (
    "Intervals of the rates: Wilson score 95% intervals from the group's counts (selection rate: rows decided "
    "positive of the group's rows; true positive rate: of its positives; false positive rate: of its negatives; "
    "precision: positives among the rows decided positive). Unlike a bootstrap they do not shrink to a point when "
    "a small group's rate is 0 or 1."
)


def wilson_interval(k, n, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of the proportion ``k`` / ``n`` at confidence ``level``, elementwise
    (:func:`mmc_core.auditing.findings.wilson_interval`, the findings' own); NaN where ``n`` is 0 or unknown. Wide when
    ``n`` is small, also at k = 0 or k = n (0 of 16: [0, 0.19] at 95%)."""
    from mmc_core.auditing import normal_isf2
    from mmc_core.auditing import wilson_interval as core_wilson

    if not 0 < float(level) < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    ok = np.isfinite(k) & np.isfinite(n) & (n > 0)
    lo, hi = core_wilson(np.where(ok, np.clip(k, 0.0, n), 0.0), np.where(ok, n, 1.0), normal_isf2(1 - float(level)))
    # at k = 0 (k = n) the lower (upper) end is exactly 0 (1); rounding of centre - half must not move it
    lo = np.where(ok, np.where(k <= 0, 0.0, lo), np.nan)
    hi = np.where(ok, np.where(k >= n, 1.0, hi), np.nan)
    return lo, hi


def _rounded(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return np.where(np.isfinite(x), np.round(x), np.nan)


def rate_counts(rates: pd.DataFrame, base_rate=None, suffix: str = "") -> dict:
    """{metric: (k, n)}: the counts behind each rate of ``rates`` (``audit.by_group`` or
    :func:`mmc_core.auditing.binary.threshold_rates`; ``suffix`` "_base" for the rates before multicalibration), read
    back from the rates and the group sizes (each rate is a ratio of whole counts). The group's positives come
    from its ``base_rate`` column, else from ``base_rate`` (a Series by group, e.g. ``audit.by_group["base_rate"]``:
    the same test rows at any threshold), else from the rates themselves (NaN where they do not determine it)."""
    n = rates["count"].astype(float).to_numpy()
    sr = rates[f"selection_rate{suffix}"].astype(float).to_numpy()
    tpr = rates[f"tpr{suffix}"].astype(float).to_numpy()
    fpr = rates[f"fpr{suffix}"].astype(float).to_numpy()
    prec = rates[f"precision{suffix}"].astype(float).to_numpy()
    d = _rounded(sr * n)  # rows decided positive
    if "base_rate" in rates.columns:
        share = rates["base_rate"].astype(float).to_numpy()
    elif base_rate is not None:
        share = pd.Series(base_rate).reindex(rates.index).astype(float).to_numpy()
    else:
        share = np.full(n.shape, np.nan)
    pos = _rounded(share * n)
    with np.errstate(divide="ignore", invalid="ignore"):
        tp_prec = np.where(d > 0, _rounded(prec * d), np.where(d == 0, 0.0, np.nan))
        # positives from the rates alone: TP / TPR, or n - FP / FPR, or 0 (TPR undefined), or n (FPR undefined)
        derived = np.where(
            np.isfinite(tpr) & (tpr > 0),
            _rounded(tp_prec / tpr),
            np.where(
                np.isfinite(fpr) & (fpr > 0),
                n - _rounded((d - tp_prec) / fpr),
                np.where(np.isnan(tpr), 0.0, np.where(np.isnan(fpr), n, np.nan)),
            ),
        )
    pos = np.where(np.isfinite(pos), pos, derived)
    tp = np.where(pos > 0, _rounded(tpr * pos), np.where(pos == 0, 0.0, tp_prec))
    tp = np.where(np.isfinite(tp), tp, tp_prec)
    return {
        "selection_rate": (d, n),
        "tpr": (tp, pos),
        "fpr": (d - tp, n - pos),
        "precision": (tp, d),
    }


def wilson_rates(rates: pd.DataFrame, base_rate=None, level: float = 0.95) -> pd.DataFrame:
    """A copy of ``rates`` whose rate intervals (``<rate>_lo`` / ``<rate>_hi`` of :data:`RATE_NAMES`, and their
    ``_base`` columns) are Wilson score intervals at ``level`` from the counts behind them (:func:`rate_counts`)
    instead of the audit's percentile bootstrap, which has no width where every replicate of a small group gives
    the same 0 or 1. Idempotent (``attrs["rate_intervals"] == "wilson"``)."""
    if rates is None or len(rates) == 0 or rates.attrs.get("rate_intervals") == "wilson":
        return rates
    out = rates.copy()
    for suffix in ("", "_base"):
        if f"selection_rate{suffix}" not in out.columns:
            continue
        for k, (hits, total) in rate_counts(rates, base_rate, suffix).items():
            out[f"{k}{suffix}_lo"], out[f"{k}{suffix}_hi"] = wilson_interval(hits, total, level)
    out.attrs["rate_intervals"] = "wilson"
    return out


def _ci_text(v, lo, hi, digits: int = 3) -> str:
    try:
        v, lo, hi = float(v), float(lo), float(hi)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(v):
        return "–"
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{v:.{digits}f} [{lo:.{digits}f}; {hi:.{digits}f}]"
    return f"{v:.{digits}f}"


def finding_groups(audit) -> list:
    """The groups the audit's findings name, in the findings' order: a chart with room for some groups shows all
    of these whatever its room (issue 35: every group with a finding is on every group chart)."""
    out = [f.get("group") for f in (getattr(audit, "findings", None) or []) if isinstance(f, dict)]
    return [g for g in dict.fromkeys(out) if isinstance(g, str)]


def _pick_groups(bg: pd.DataFrame, top: int | None, first=(), always=()) -> list:
    """ "all" first, then the groups of ``always`` (those with findings: all of them, ``top`` grows to hold
    them), then those of ``first`` (findings or flags, by harm and evidence), then the largest groups, at most
    ``top`` in all. The largest alone hid the minority groups the analyst came for (colour=Black, the group the
    four-fifths rule flagged, never appeared); a cap of 9 panels hid the tenth group with a finding."""
    names = list(bg.index)
    known = set(names[1:])
    must = [n for n in dict.fromkeys(always) if n in known]
    if top is not None:
        top = max(top, 1 + len(must))
    if top is None or len(names) <= top:
        return names
    chosen = [n for n in dict.fromkeys([*must, *first]) if n in known][: max(top - 1, 0)]
    for n in bg.iloc[1:].sort_values("count", ascending=False).index:
        if len(chosen) >= top - 1:
            break
        if n not in chosen:
            chosen.append(n)
    keep = set(chosen)
    return [names[0]] + [n for n in names[1:] if n in keep]


def classifier_calibration_table(
    by_group: pd.DataFrame, top: int | None = None, level: float = 0.95, first=()
) -> pd.DataFrame:
    """Per-group probability metrics before -> after with bootstrap 95% intervals, as display text (the
    dashboard and the PDF show this same table); the positive share (a proportion of the group's rows) with its
    Wilson score interval."""
    rows = []
    has_base = "mean_score_base" in by_group.columns
    groups = _pick_groups(by_group, top, first)
    cnt = by_group.loc[groups, "count"].astype(float).to_numpy()
    share = by_group.loc[groups, "base_rate"].astype(float).to_numpy()
    share_lo, share_hi = wilson_interval(_rounded(share * cnt), cnt, level)
    for i, g in enumerate(groups):
        r = by_group.loc[g]
        row = {
            "group": str(g),
            "n": int(r["count"]),
            "positive share": _ci_text(r["base_rate"], share_lo[i], share_hi[i]),
        }
        for k in ("mean_score", "calib_error_worst", "ece", "log_loss", "brier"):
            name = CALIB_NAMES[k]
            if has_base:
                row[f"{name}, before"] = _ci_text(r[k + "_base"], r.get(k + "_base_lo"), r.get(k + "_base_hi"))
            row[f"{name}{', after' if has_base else ''}"] = _ci_text(r[k], r.get(k + "_lo"), r.get(k + "_hi"))
        rows.append(row)
    return pd.DataFrame(rows)


def classifier_rate_table(
    rates: pd.DataFrame, top: int | None = None, base_rate=None, level: float = 0.95, first=()
) -> pd.DataFrame:
    """Per-group rates at the decision threshold (after multicalibration; before in the ", before" columns when
    given), with Wilson score intervals at ``level`` (:func:`wilson_rates`; ``base_rate``: the groups' shares of
    positives when ``rates`` has none), as display text."""
    rates = wilson_rates(rates, base_rate, level)
    rows = []
    has_base = "selection_rate_base" in rates.columns
    for g in _pick_groups(rates, top, first):
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
                "DP difference": format_number(d["demographic_parity_difference"]),
                "DP ratio": format_number(d["demographic_parity_ratio"]),
                "EO difference": format_number(d["equalized_odds_difference"]),
                "EO ratio": format_number(d["equalized_odds_ratio"]),
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


_RELIABILITY_STYLES = {
    "before": ("base model (before)", HOLDOUT_COLOR, "diamond"),
    "after": ("multicalibrated (after)", FIT_COLOR, "circle"),
}


def _reliability_trace(d: pd.DataFrame, g, which: str, legend: bool) -> go.Scatter:
    """One group's buckets for one score ("before" or "after"): markers sized by rows, Wilson bars, hover."""
    name, color, symbol = _RELIABILITY_STYLES[which]
    size = 5 + 10 * np.sqrt(d["count"].to_numpy() / max(float(d["count"].max()), 1.0))
    custom = np.column_stack([d["count"], d["bucket_lo"], d["bucket_hi"], d["observed_lo"], d["observed_hi"]])
    return go.Scatter(
        x=d["mean_score"],
        y=d["observed"],
        mode="markers+lines",
        name=name,
        legendgroup=which,
        showlegend=legend,
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
            f"<b>{hover_safe(str(g))}</b> ({which})<br>scores in [%{{customdata[1]:.1f}}; "
            "%{customdata[2]:.1f})<br>rows %{customdata[0]}<br>predicted %{x:.3f}<br>observed "
            "%{y:.3f} (95% CI %{customdata[3]:.3f}–%{customdata[4]:.3f})<extra></extra>"
        ),
    )


def _reliability_panel(fig, cells: pd.DataFrame, g, r: int, c: int, rows: int, shown: set) -> None:
    """Group ``g``'s panel at row ``r``, column ``c``: the diagonal, its before / after buckets and its axes
    (``shown``: the scores already in the legend, updated)."""
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
        fig.add_trace(_reliability_trace(d, g, which, which not in shown), row=r, col=c)
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


def reliability_figure(
    cells: pd.DataFrame,
    by_group: pd.DataFrame,
    top: int = 9,
    cols: int = 3,
    min_count: int = 1,
    first=(),
    always=(),
) -> go.Figure:
    """Per-group reliability diagrams: observed share of positives (Wilson 95% interval) against the mean
    predicted probability per score bucket, before (base) and after multicalibration; the diagonal is perfect
    calibration. ``cells``: :func:`mmc_core.auditing.binary.reliability_cells` (``audit.calibration_cells``). Panels:
    "all", every group of ``always`` (:func:`finding_groups`), then ``first``'s and the largest up to ``top``."""
    title = "Reliability by group: observed vs predicted probability"
    if cells is None or len(cells) == 0:
        return empty_figure(title, "No reliability cells (no test rows).")
    cells = cells[cells["count"] >= min_count]
    groups = [g for g in _pick_groups(by_group, top, first, always) if (cells["group"] == g).any()]
    rows = max(1, math.ceil(len(groups) / cols))
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[hover_safe(short_name(str(g), 34)) for g in groups],
        horizontal_spacing=0.07,
        vertical_spacing=0.12 if rows > 1 else 0.1,
        shared_xaxes=False,
        shared_yaxes=False,
    )
    shown: set = set()
    for k, g in enumerate(groups):
        r, c = divmod(k, cols)
        _reliability_panel(fig, cells, g, r + 1, c + 1, rows, shown)
    for ann in fig.layout.annotations:
        ann.font = dict(size=12)
    height = 120 + 250 * rows
    base_layout(
        fig,
        title,
        height,
        subtitle="per bucket of the predicted probability (tenths); bars: 95% Wilson "
        "intervals; marker area ~ rows; dashed: perfect calibration",
    )
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.0 + 40.0 / height, xanchor="right", x=1.0))
    return fig


def rate_figure(
    rates: pd.DataFrame,
    threshold: float,
    top: int = 12,
    metrics=("selection_rate", "tpr", "fpr"),
    base_rate=None,
    level: float = 0.95,
    first=(),
    always=(),
) -> go.Figure:
    """Per-group rates at the decision threshold (decision = probability >= threshold), with Wilson score
    intervals at ``level`` (:func:`wilson_rates`), before (base) and after multicalibration. ``rates``:
    ``audit.by_group`` or :func:`mmc_core.auditing.binary.threshold_rates` at another threshold (``base_rate``: the
    groups' shares of positives, which the latter has not). Rows: as :func:`reliability_figure`'s panels."""
    title = f"Rates by group at threshold {threshold:g}"
    if rates is None or len(rates) == 0:
        return empty_figure(title, "No groups.")
    rates = wilson_rates(rates, base_rate, level)
    groups = _pick_groups(rates, top, first, always)[::-1]  # "all" at the top
    disp = display_names([str(g) for g in groups])
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
                    customdata=np.column_stack([[hover_safe(str(g)) for g in groups], lo, hi]),
                    hovertemplate=(
                        f"<b>%{{customdata[0]}}</b> ({which})<br>{RATE_NAMES[m]} %{{x:.3f}} "
                        f"(Wilson {level:.0%} CI %{{customdata[1]:.3f}}–%{{customdata[2]:.3f}})<extra></extra>"
                    ),
                ),
                row=1,
                col=j + 1,
            )
        fig.update_xaxes(range=[-0.03, 1.03], row=1, col=j + 1, tickfont=dict(size=10))
    fig.update_yaxes(tickvals=list(range(len(groups))), ticktext=disp, row=1, col=1, automargin=True)
    for ann in fig.layout.annotations:
        ann.font = dict(size=12)
    height = rows_height(len(groups), per_row=30, extra=200)
    base_layout(
        fig,
        title,
        height,
        subtitle=f"decision = predicted probability ≥ threshold; bars: Wilson score {level:.0%} intervals",
        left=left_margin(disp),
    )
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.0 + 40.0 / height, xanchor="right", x=1.0))
    return fig

"""The convergence figure of a fit: the paper's mass-weighted violations per descent round (mean and each
moment), against the thresholds alpha / beta on a log scale, for the fitting rows and the held-out rows, with the
kept round marked. Drawn live on the Run page while a fit runs (from the growing history) and again in the PDF
report; the label is scaled to [0, 1] here, unlike every other figure (its axes say so).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.figure_style import FIT_COLOR, HOLDOUT_COLOR, MUTED, OKABE_ITO, add_footer, base_layout, empty_figure


# ---------------------------------------------------------------------------------------------------
# convergence
# ---------------------------------------------------------------------------------------------------
def _log_hline(
    fig: go.Figure, y: float, text: str, row: int, color: str, below: bool = False, right: bool = True
) -> None:
    """A horizontal reference line with a label on a log-scaled subplot.

    (``add_hline``'s own annotation is misplaced on log axes: annotations take log10 coordinates there.)
    """
    fig.add_hline(y=y, line=dict(color=color, dash="dot", width=1.5), row=row, col=1)
    axis = "" if row == 1 else str(row)
    fig.add_annotation(
        text=text,
        xref=f"x{axis} domain",
        yref=f"y{axis}",
        x=1.0 if right else 0.0,
        y=math.log10(y),
        xanchor="right" if right else "left",
        yanchor="top" if below else "bottom",
        showarrow=False,
        font=dict(size=11, color=color),
        bgcolor="rgba(255,255,255,0.7)",
    )


def _positive(v):
    """Zeros and negatives as gaps: log axes cannot show them."""
    return None if v is None else np.where(v > 0, v, np.nan)


def _log_range(*arrays):
    """A padded log10 axis range holding every positive finite value of ``arrays`` (None: nothing to hold)."""
    v = np.concatenate([np.atleast_1d(np.asarray(a, dtype=float)) for a in arrays if a is not None])
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        return None
    lo, hi = math.log10(v.min()), math.log10(v.max())
    pad = max(0.15, 0.08 * (hi - lo))
    return [lo - pad, hi + pad]


class _Panels:
    """The stacked panels under construction: the history's columns, the shared round axis and the figure."""

    def __init__(self, df: pd.DataFrame, moments: bool):
        self.df = df
        self.x = df["round"].astype(int).to_numpy()
        self.mode = "lines+markers" if len(df) <= 60 else "lines"
        self.moments = moments
        self.r_cnt = 3 if moments else 2  # the counts panel's row
        titles = ("Largest mean violation", "Largest moment violation", "Violating cells and updates")
        self.fig = make_subplots(
            rows=self.r_cnt,
            cols=1,
            shared_xaxes=True,
            vertical_spacing=0.1,
            subplot_titles=titles if moments else (titles[0], titles[2]),
        )

    def col(self, name):
        """A column of the history as floats; None when it is missing or empty."""
        if name not in self.df:
            return None
        v = pd.to_numeric(self.df[name], errors="coerce").to_numpy(dtype=float)
        return None if np.all(np.isnan(v)) else v

    def series(self, v, row: int, name: str, line: dict, hover: str, always: bool = False, **extra):
        """One line of a panel; a column the history lacks draws nothing (``always``: an empty trace)."""
        if v is None and not always:
            return
        trace = go.Scatter(
            x=self.x,
            y=_positive(v),
            mode=self.mode,
            name=name,
            line=line,
            hovertemplate=f"round %{{x}}<br>{hover}<extra></extra>",
        )
        self.fig.add_trace(trace.update(**extra), row, 1)

    def after_cells(self, name: str, row: int, what: str, color: str):
        """The diamond at the kept round: its model after the shrunken cell corrections, the model whose alpha
        and beta are stated (the round's line stays the descent's); returns the column (None when missing)."""
        v = self.col(name)
        if v is None:
            return None
        at = np.isfinite(v)
        marker = go.Scatter(
            x=self.x[at],
            y=_positive(v[at]),
            mode="markers",
            name=f"{what}: after the shrunken cell corrections",
            marker=dict(symbol="diamond", size=11, color=color, line=dict(color="white", width=1)),
            hovertemplate="round %{x}, after the cell corrections: %{y:.3g}<extra></extra>",
        )
        self.fig.add_trace(marker, row, 1)
        return v


def _mean_panel(p: _Panels, alpha: float) -> list:
    """The largest mean violation on the fitting and held-out rows, the kept model after the cell corrections,
    and α; returns the values drawn (they set the panel's range)."""
    fig = p.fig
    mv, hmv = p.col("max_mean_violation"), p.col("holdout_max_mean_violation")
    p.series(
        mv, 1, "mean: fitting rows", dict(color=FIT_COLOR, width=2.5), "fitting rows: %{y:.3g}", True, legendgroup="fit"
    )
    held = dict(color=HOLDOUT_COLOR, width=2.5, dash="dash")
    p.series(hmv, 1, "mean: held-out rows", held, "held-out rows: %{y:.3g}")
    cv = p.after_cells("cells_max_mean_violation", 1, "mean", FIT_COLOR)
    _log_hline(fig, alpha, f"α = {alpha:.3g} (threshold)", 1, OKABE_ITO["black"])
    return [mv, hmv, cv, [alpha]]


def _moment_panel(p: _Panels, beta: float | None) -> list:
    """The largest moment violation before and after each round's moment fit and held out, and β (drawn only
    for a model with moments); returns the values drawn."""
    fig = p.fig
    xv, bv, hxv = (
        p.col("max_moment_violation"),
        p.col("moment_violation_before_fit"),
        p.col("holdout_max_moment_violation"),
    )
    if not p.moments:
        xv = bv = hxv = None
    before = dict(color=MUTED, width=1.5, dash="dot")
    p.series(bv, 2, "moment: before the round's moment fit", before, "before moment fit: %{y:.3g}", marker=dict(size=5))
    p.series(xv, 2, "moment: fitting rows", dict(color=OKABE_ITO["green"], width=2.5), "fitting rows: %{y:.3g}")
    held = dict(color=OKABE_ITO["purple"], width=2.5, dash="dash")
    p.series(hxv, 2, "moment: held-out rows", held, "held-out rows: %{y:.3g}")
    cv = p.after_cells("cells_max_moment_violation", 2, "moment", OKABE_ITO["green"]) if p.moments else None
    if p.moments and beta is not None:
        _log_hline(fig, beta, f"β = {beta:.3g} (threshold)", 2, OKABE_ITO["black"])
    if p.moments and not any(v is not None and np.any(v > 0) for v in (xv, bv, hxv, cv)):
        fig.add_annotation(
            text="no moment violations to show (mean-only model, or every moment cell within β)",
            xref="x2 domain",
            yref="y2 domain",
            x=0.5,
            y=0.5,
            showarrow=False,
            font=dict(size=12, color="#555555"),
        )
    return [xv, bv, hxv, cv, [beta]]


def _count_panel(p: _Panels, mean_bound: float | None, moment_bound: float | None) -> list:
    """Cells violating α (bars), cumulative mean and moment updates and their bounds; returns the values drawn."""
    fig, x, r_cnt = p.fig, p.x, p.r_cnt
    vc, mu, mo = p.col("violating_cells"), p.col("mean_updates"), p.col("moment_updates")
    if vc is not None:
        fig.add_trace(
            go.Bar(
                x=x,
                y=_positive(vc),
                name="mean cells violating α",
                marker_color=OKABE_ITO["sky"],
                opacity=0.75,
                hovertemplate="round %{x}<br>violating cells: %{y:d}<extra></extra>",
            ),
            r_cnt,
            1,
        )
    mean_line = dict(color=OKABE_ITO["vermillion"], width=2.5)
    p.series(mu, r_cnt, "cumulative mean updates", mean_line, "mean updates: %{y:,.0f}")
    moment_line = dict(color=OKABE_ITO["black"], width=2, dash="dashdot")
    if p.moments:
        p.series(mo, r_cnt, "cumulative moment updates", moment_line, "moment updates: %{y:,.0f}")
    if mean_bound is not None and math.isfinite(mean_bound) and mean_bound > 0:
        _log_hline(
            fig,
            mean_bound,
            f"bound on mean updates 1/α²−1 = {mean_bound:,.0f}",
            r_cnt,
            OKABE_ITO["vermillion"],
            below=True,
        )
    if moment_bound is not None and math.isfinite(moment_bound) and moment_bound > 0:
        _log_hline(
            fig, moment_bound, f"bound on moment updates = {moment_bound:,.0f}", r_cnt, OKABE_ITO["black"], right=False
        )
    bounds = [b for b in (mean_bound, moment_bound) if b is not None and math.isfinite(b) and b > 0]
    return [vc, mu, mo if p.moments else None, [1.0], bounds]


def _kept_round_line(p: _Panels, kept_round: int | None) -> None:
    """A dashed line through every panel at the kept round, named in the legend (unless it is the last round)."""
    if kept_round is None or not len(p.x) or kept_round == int(p.x[-1]):
        return
    kept_line = dict(color=OKABE_ITO["green"], width=1.5, dash="dash")
    for r in range(1, p.r_cnt + 1):
        p.fig.add_vline(x=kept_round, line=kept_line, row=r, col=1)
    # named in the legend: a label on the line itself sat on the first panel's title when an early round
    # was kept (round 0 of a stopped run)
    p.fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="lines",
            line=kept_line,
            name=f"kept round {kept_round} (best on the held-out rows)",
            hoverinfo="skip",
        ),
        row=1,
        col=1,
    )


def _axes_and_layout(p: _Panels, drawn: list, title: str) -> None:
    """Log value axes ranged on what each panel drew (``drawn``: its values, per panel), the round axis, the
    title and the subplot titles."""
    fig, x, r_cnt = p.fig, p.x, p.r_cnt
    # plain digits ("0.00002", "1,000"), not "2e−5" or "10³": no scientific notation below 1e9 (issue 35)
    violation = dict(title_text="mass-weighted<br>violation", dtick="D2", tickformat=".1~r")
    count = dict(title_text="count (log)", tickformat=",~r")
    rows = [1, 2, r_cnt] if p.moments else [1, r_cnt]
    for row, values in zip(rows, drawn):
        title_row = count if row == r_cnt else violation
        fig.update_yaxes(type="log", exponentformat="none", row=row, col=1, range=_log_range(*values), **title_row)
    fig.update_xaxes(title_text="round", row=r_cnt, col=1)
    n = len(x)
    fig.update_xaxes(
        range=[x.min() - 0.6, x.max() + 0.6] if n else None, dtick=1 if n <= 15 else None, showticklabels=True
    )
    fig.update_layout(barmode="overlay")
    status = f"{n} round{'s' if n != 1 else ''} shown"
    base_layout(
        fig,
        title,
        760 if p.moments else 560,
        subtitle=f"Violations on the label scaled to [0, 1], weighted by cell mass; {status}.",
        left=90,
    )
    add_footer(fig, axis_px=60, legend_rows=2)
    for a in fig.layout.annotations[:r_cnt]:  # subplot titles: left-aligned and bold-ish
        a.update(x=0.0, xanchor="left", font=dict(size=13, color="#333333"))


def convergence_figure(
    history: list[dict],
    alpha: float,
    beta: float | None,
    mean_bound: float | None = None,
    *,
    moment_bound: float | None = None,
    kept_round: int | None = None,
    title: str = "Convergence of the alternating descent",
) -> go.Figure:
    """Per-round audit statistics of a (possibly still running) fit.

    Three stacked panels sharing the round axis:

    1. largest mass-weighted mean violation on the fitting rows (and on the held-out rows when present)
       against the threshold alpha;
    2. largest moment violation after each round's moment fit (and before it, and held out) against beta;
    3. counts: mean cells still violating alpha (bars), cumulative mean and moment updates, and the
       theoretical bound on mean updates 1/alpha^2 - 1 (``mean_bound``), on a log scale.

    ``beta=None`` (a mean-only model, e.g. a classifier): no moment panel (two panels: mean and counts).
    Works for a partial history (live updates) and for a single row; an empty history gives a placeholder.
    Violations are on the label scaled to [0, 1] and weighted by cell mass, as in the paper.
    """
    rows = [dict(r) for r in (history or [])]
    if not rows:
        return empty_figure(title, "No rounds yet: the history fills in as the fit runs.", height=360)
    df = pd.DataFrame(rows)
    if "round" not in df:
        df["round"] = np.arange(len(df))
    p = _Panels(df, moments=beta is not None)
    drawn = [_mean_panel(p, alpha)]
    moment_values = _moment_panel(p, beta)
    if p.moments:
        drawn.append(moment_values)
    drawn.append(_count_panel(p, mean_bound, moment_bound))
    _kept_round_line(p, kept_round)
    _axes_and_layout(p, drawn, title)
    return p.fig

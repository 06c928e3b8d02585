"""The audit's heatmaps: interval coverage by group and method, coverage by predicted-mean bucket, and interval
widths (groups as rows). Every cell prints its value and, where there is room, the rows behind it; the
conventions (palette, γ mark, name shortening) are those of :mod:`app.figures.charts`, which re-exports the builders.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.figure_style import (
    BELOW_GAMMA_MARK,
    METHOD_LABELS,
    WIDTH_SCALE,
    add_footer,
    base_layout,
    below_gamma,
    bucket_labels,
    coverage_colorscale,
    coverage_range,
    display_names,
    empty_figure,
    format_number,
    hover_safe,
    label_info,
    left_margin,
    method_order,
    method_tick,
    rows_height,
)
from mmc_core.auditing import AuditResult

__all__ = ["coverage_heatmap", "coverage_by_bucket_heatmap", "width_heatmap", "bucket_counts"]


def _group_counts(audit: AuditResult, names) -> np.ndarray:
    """Test rows of each group."""
    return audit.by_group["count"].reindex(names).to_numpy(dtype=float)


def bucket_counts(audit: AuditResult, z: pd.DataFrame) -> np.ndarray | None:
    """Rows of each (group, predicted-mean bucket) cell of a coverage-by-bucket table: the counts of the audit's
    mean-calibration cells (the same buckets of the model's mean grid)."""
    cc = audit.calibration_cells
    if cc.empty:
        return None
    piv = cc.pivot_table(index="group", columns="bucket", values="count", aggfunc="sum")
    return piv.reindex(index=z.index, columns=z.columns).to_numpy(dtype=float)


def _cell_values(raw: np.ndarray, value_fmt) -> np.ndarray:
    """Each cell's printed value: formatted when finite, ∞ / −∞ when unbounded, blank when missing."""
    text = np.where(np.isnan(raw), "", np.where(np.isinf(raw), np.where(raw > 0, "∞", "−∞"), ""))
    fin = np.isfinite(raw)
    text = text.astype(object)
    fmt = value_fmt if callable(value_fmt) else (lambda v: format(v, value_fmt))
    text[fin] = [fmt(v) for v in raw[fin]]
    return text


def _with_counts(text: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The printed values with the cell's row count in small type under each non-blank one."""
    shown = text.copy()
    for i in range(text.shape[0]):
        for j in range(text.shape[1]):
            if text[i, j] != "" and np.isfinite(counts[i, j]):
                shown[i, j] = f"{text[i, j]}<br><span style='font-size:0.8em'>n={int(counts[i, j]):,}</span>"
    return shown


def _cell_hovers(names: list, counts: np.ndarray, text: np.ndarray, hover_value: str) -> np.ndarray:
    custom = np.empty(text.shape, dtype=object)
    for i, n in enumerate(names):
        for j in range(text.shape[1]):
            c = counts[i, j]
            rows = f"<br>rows in this cell {int(c):,}" if np.isfinite(c) else ""
            custom[i, j] = f"<b>{hover_safe(n)}</b>{rows}<br>{hover_value} {text[i, j]}"
    return custom


def _heatmap(
    z: pd.DataFrame,
    audit: AuditResult,
    title: str,
    subtitle: str,
    x_labels: list,
    x_title: str,
    colorscale,
    zmin: float,
    zmax: float,
    colorbar_title: str,
    value_fmt,
    hover_value: str,
    zmid: float | None = None,
    counts: np.ndarray | None = None,
    min_count: float = 0.0,
) -> go.Figure:
    """``value_fmt``: Python format spec of the printed values; ``hover_value``: hover label of the value.
    Infinite values (unbounded intervals) print as ∞ and take the top colour; missing cells stay blank.
    ``counts``: rows behind each cell (default: the group's test rows); shown on hover and printed under the
    value where the cells are large enough (at most 10 columns and 60 rows), so a 0.50 cell of 2 rows is
    told apart from one of 2,000. Cells of fewer than ``min_count`` rows keep their value and count but no
    colour (a 1-row cell at coverage 0 was painted the darkest red)."""
    names = [str(n) for n in z.index]
    below = below_gamma(audit, z.index)
    disp = display_names(names, below)
    raw = z.to_numpy(dtype=float)
    if counts is None:
        counts = np.repeat(_group_counts(audit, names)[:, None], raw.shape[1], axis=1)
    counts = np.asarray(counts, dtype=float)
    text = _cell_values(raw, value_fmt)
    n_cols = raw.shape[1]
    print_counts = n_cols <= 10 and len(names) <= 60 and np.isfinite(counts).any()
    shown = _with_counts(text, counts) if print_counts else text.copy()
    vals = np.where(np.isposinf(raw), zmax, np.where(np.isneginf(raw), zmin, raw))
    if min_count > 0:
        vals = np.where(np.isfinite(counts) & (counts < min_count), np.nan, vals)
    custom = _cell_hovers(names, counts, text, hover_value)
    text_size = 12 if n_cols <= 8 else (10 if n_cols <= 12 else 8)
    fig = go.Figure(
        go.Heatmap(
            z=vals,
            x=x_labels,
            y=disp,
            colorscale=colorscale,
            zmin=zmin,
            zmax=zmax,
            zmid=zmid,
            text=shown,
            texttemplate="%{text}",
            textfont=dict(size=text_size),
            customdata=custom,
            hoverongaps=bool(min_count > 0),  # an uncoloured small cell still tells its value and count
            xgap=1,
            ygap=1,
            hovertemplate="%{customdata}<br>%{x}<extra></extra>",
            colorbar=dict(title=dict(text=colorbar_title, side="right"), thickness=14, len=min(1.0, 0.9)),
        )
    )
    fig.update_yaxes(autorange="reversed", type="category", automargin=True, title_text="group")
    fig.update_xaxes(
        type="category", side="top", title_text=x_title, tickangle=0 if n_cols <= 8 else -35, automargin=True
    )
    height = rows_height(len(disp), per_row=34 if print_counts else 22, extra=230)
    base_layout(fig, title, height, subtitle=subtitle, left=left_margin(disp), legend=False)
    fig.update_layout(margin=dict(t=125 if n_cols <= 8 else 150), plot_bgcolor="#f2f2f2")
    note = "n = test rows in the cell." if print_counts else "Hover a cell for its row count."
    if any(below):
        note += (
            f" {BELOW_GAMMA_MARK.strip()} group mass below γ = "
            f"{format_number(audit.params.get('gamma'))}: the guarantees do not cover it."
        )
    add_footer(fig, axis_px=8, note=note)
    return fig


def _coverage_cells(z, audit, title, subtitle, x_labels, x_title, target: float, counts=None) -> go.Figure:
    """A coverage heatmap: diverging colours centred on the target 1 - delta, values printed to 2 decimals;
    cells of fewer rows than the audit tests (its minimum group count) are printed but not coloured."""
    zmin, zmax = coverage_range(z.to_numpy(dtype=float), target)
    scale = coverage_colorscale(zmin, zmax, target)
    # the audit tests groups and cells from min_group_count rows (mmc_core.auditing.audit_findings.group_findings)
    min_n = float((audit.params or {}).get("min_group_count") or 0)
    n = (
        np.asarray(counts, dtype=float)
        if counts is not None
        else np.repeat(_group_counts(audit, [str(v) for v in z.index])[:, None], z.shape[1], axis=1)
    )
    small = np.isfinite(z.to_numpy(dtype=float)) & (n < min_n)
    if min_n > 0 and small.any():
        subtitle += f"; uncoloured = fewer than {min_n:,.0f} rows (not tested)"
    return _heatmap(
        z,
        audit,
        title,
        subtitle,
        x_labels,
        x_title,
        scale,
        zmin,
        zmax,
        "coverage",
        ".2f",
        "coverage",
        counts=n,  # the counts just found (the group counts when none were given, as _heatmap would take)
        min_count=min_n,
    )


def coverage_heatmap(audit: AuditResult, delta: float) -> go.Figure:
    """Empirical interval coverage per group (rows) and method (columns).

    Diverging RdBu scale centred on the target 1 - delta (white): red cells under-cover, blue cells
    over-cover (conservative intervals). Values are printed in the cells.
    """
    title = "Interval coverage by group and method"
    cov = audit.coverage
    if cov.empty:
        return empty_figure(title, "The audit has no coverage table.")
    target = 1.0 - float(delta)
    labels = [method_tick(m) for m in method_order(cov.columns)]
    subtitle = (
        f"share of rows inside their interval; target 1 − δ = {target:.2f} (white); red = under-covers, blue = "
        "over-covers"
    )
    return _coverage_cells(cov, audit, title, subtitle, labels, "interval method", target)


def coverage_by_bucket_heatmap(
    audit: AuditResult, delta: float, method: str | None = None, *, label: str, units: str = ""
) -> go.Figure:
    """Coverage of one interval method's intervals per group and predicted-mean bucket (centred on 1 - delta):
    ``method`` None is the audit's ``coverage_by_bucket`` (its ``bucket_method``), else the audit's table of that
    method (``coverage_by_bucket_of``)."""
    info = label_info(audit, label, units)
    method = method or audit.params.get("bucket_method") or "calibrated"
    title = f"Coverage of the {METHOD_LABELS.get(method, method)} intervals by predicted-mean bucket"
    cb = audit.coverage_by_bucket_of.get(method, audit.coverage_by_bucket)
    if cb.empty:
        return empty_figure(title, "The audit has no coverage-by-bucket table.")
    labels = bucket_labels(cb.columns, info, None, audit.params.get("mean_buckets"))
    keep = cb.notna().any(axis=0).to_numpy()  # drop buckets no group's predictions fall in
    cb, labels = cb.loc[:, keep], [lab for lab, k in zip(labels, keep) if k]
    if cb.empty:
        return empty_figure(title, "No coverage values in any bucket.")
    target = 1.0 - float(delta)
    subtitle = f"target 1 − δ = {target:.2f} (white); blank = no rows of the group in the bucket; red = under-covers"
    x_title = f"predicted mean μ(x) ({info['units']})"
    return _coverage_cells(cb, audit, title, subtitle, labels, x_title, target, counts=bucket_counts(audit, cb))


def width_heatmap(audit: AuditResult, *, label: str, units: str = "") -> go.Figure:
    """Mean interval width per group and method, in label units (sequential colour scale).

    The colour scale is capped at the widest non-outlying method so a very wide method (typically the
    worst-case "guaranteed" intervals) does not wash out the others; the printed values are exact.
    """
    info = label_info(audit, label, units)
    title = "Mean interval width by group and method"
    wd = audit.width
    if wd.empty:
        return empty_figure(title, "The audit has no width table.")
    vals = wd.to_numpy(dtype=float)
    finite = vals[np.isfinite(vals)]
    zmax = float(np.max(finite)) if finite.size else 1.0
    zmin = float(np.min(finite)) * 0.9 if finite.size else 0.0
    capped = False
    if finite.size:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            col_max = np.nanmax(np.where(np.isfinite(vals), vals, np.nan), axis=0)
        cm = col_max[np.isfinite(col_max)]
        if cm.size >= 3:
            typical = cm[cm <= 2.5 * np.median(cm)]
            if typical.size and typical.size < cm.size:
                zmax, capped = float(typical.max()) * 1.05, True
    methods = method_order(wd.columns)
    labels = [method_tick(m) for m in methods]

    def digits(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"

    sub = f"mean of upper − lower bound ({info['units']}); narrower is better only where coverage holds"
    if capped:
        sub += f"; colour scale capped at {format_number(zmax)} (darkest = at or above)"
    return _heatmap(
        wd,
        audit,
        title,
        sub,
        labels,
        "interval method",
        WIDTH_SCALE,
        zmin,
        zmax,
        f"width ({info['units']})",
        digits,
        f"mean width ({info['units']})",
    )

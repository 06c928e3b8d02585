"""The shared look of every dashboard and report figure: the colour-blind-safe palette (Okabe-Ito), the coverage
and width colour scales, fonts, and the helpers every figure builder uses (shortened group names with the
below-gamma mark, row-dependent heights and margins, the common layout and footer, the empty-figure placeholder,
number formatting, interval-method and bucket labels, the label's name, units and range). Kept in one
place so :mod:`app.figures.charts`, :mod:`app.figures.convergence` and :mod:`app.figures.binary` look alike.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import plotly.graph_objects as go

from mmc_core.auditing import AuditResult

from .display import LABEL_CHARS, display_text

# Okabe & Ito (2008): distinguishable under all common colour-vision deficiencies.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "grey": "#999999",
}
FIT_COLOR = OKABE_ITO["blue"]  # multicalibrated / fitting sample / predicted
HOLDOUT_COLOR = OKABE_ITO["orange"]  # held-out rows / base model
OBSERVED_COLOR = OKABE_ITO["vermillion"]
MUTED = "#8c8c8c"
BELOW_GAMMA_MARK = " †"
COVERAGE_SCALE = "RdBu"  # red = under-covers, white = on target (1 - delta), blue = over-covers
#                              (see coverage_colorscale: the white point is placed exactly at 1 - delta)
WIDTH_SCALE = "Blues"  # sequential single hue: wider = darker
FONT = dict(family="DejaVu Sans, Arial, Helvetica, sans-serif", size=13, color="#222222")
MAX_NAME = 40  # characters of a group name shown on an axis

METHOD_LABELS = {
    "guaranteed": "guaranteed",
    "plugin": "plug-in",
    "multimoment": "multi-moment",
    "calibrated": "calibrated",
    "split-conformal": "split conformal",
    "mondrian": "Mondrian",
    "gaussian": "Gaussian",
}


# ---------------------------------------------------------------------------------------------------
# shared helpers
def method_tick(method: str) -> str:
    """A method's axis label on at most two short lines (narrow heatmap columns stay readable)."""
    label = METHOD_LABELS.get(method, method)
    for sep in (" ", "-"):
        if len(label) > 9 and sep in label:
            a, b = label.split(sep, 1)
            return f"{a}{sep if sep == '-' else ''}<br>{b}"
    return label


# ---------------------------------------------------------------------------------------------------
def label_info(audit: AuditResult, label: str, units: str = "") -> dict:
    """What the figures print about the label: the name and units the caller states (the dashboard's units box,
    the report's label argument; empty units read "<label> units") and the range the audit was scaled with."""
    rng = audit.params["label"]
    # shortened (a 7,000-character name ran over the neighbouring panel) and made safe (app.figures.display's rule)
    name = hover_safe(label or "label", LABEL_CHARS)
    units = hover_safe(units, LABEL_CHARS) if units else f"{name} units"
    return {"name": name, "units": units, "lo": rng["lo"], "hi": rng["hi"]}


def _unit_power(units: str, a: int) -> str:
    sup = {1: "", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹"}
    return f"{units}{sup.get(a, f'^{a}')}"


def short_name(name: str, n: int = MAX_NAME) -> str:
    """Shorten a group name to ``n`` characters. Conjunctions ("a=1 & b=2") are shortened part by part, so
    every condition stays visible: "maritl=2. Married & educ…=4. College Grad"."""
    name = str(name)
    if len(name) <= n:
        return name
    parts = name.split(" & ")
    if len(parts) > 1:
        budget = n - 3 * (len(parts) - 1)
        if budget >= 6 * len(parts):
            sizes = [len(q) for q in parts]
            while sum(sizes) > budget:  # take one character at a time from the longest part
                sizes[sizes.index(max(sizes))] -= 1
            return " & ".join(_short_part(q, k) for q, k in zip(parts, sizes))
    return name[: n - 1] + "…"


def _short_part(part: str, k: int) -> str:
    """One condition in ``k`` characters: a long column name is shortened first ("educati…=2. HS Grad"),
    then the end of the value is cut ("maritl=1. Never Ma…")."""
    if len(part) <= k:
        return part
    col, sep, val = part.partition("=")
    if sep and len(col) > 6:
        cut = min(len(part) - k, len(col) - 5)
        part = col[: len(col) - cut - 1] + "…=" + val
    return part if len(part) <= k else part[: k - 1] + "…"


def hover_safe(text: str, limit: int | None = None) -> str:
    """User text in a Plotly figure (axis labels, hover labels and titles render a little HTML: <b>, <a href>):
    app.figures.display's rule (bidi controls shown as "[U+202E]", never applied; cut to ``limit`` characters), then
    angle brackets neutralised, so a group named "Zürich <b>x</b>" is drawn as written."""
    return display_text(text, limit).replace("<", "&lt;").replace(">", "&gt;")


def display_names(names, below=None, n: int = MAX_NAME) -> list:
    """Shortened, unique axis labels (user text made safe for Plotly); groups below gamma get the † mark."""
    out: list = []
    seen: dict = {}
    below = below if below is not None else [False] * len(names)
    for name, b in zip(names, below):
        s = short_name(name, n)
        if s in seen:
            seen[s] += 1
            s = f"{s[: max(1, n - 4)]}…#{seen[s]}"
        else:
            seen[s] = 1
        out.append(hover_safe(s) + (BELOW_GAMMA_MARK if b else ""))
    return out


def below_gamma(audit: AuditResult, names) -> list:
    """True for groups whose mass is below gamma (``large_enough`` is False; a classifier audit has no gamma)."""
    le = audit.by_group.get("large_enough")
    if le is None:
        return [False] * len(names)
    return [not bool(le.get(n, True)) for n in names]


def coverage_tested(audit: AuditResult, names) -> np.ndarray:
    """True for the groups whose coverage is read as a result: mass >= gamma and at least the audit's minimum
    group count of test rows (the ones the coverage heatmaps colour; an 11-row group's coverage moves 9 points
    per row and read as the "worst group" of a 601-row table)."""
    min_n = float((audit.params or {}).get("min_group_count") or 0)
    counts = audit.by_group["count"].reindex([str(v) for v in names]).to_numpy(dtype=float)
    return ~np.asarray(below_gamma(audit, names), dtype=bool) & (counts >= min_n)


def rows_height(n_rows: int, per_row: float = 24, extra: float = 190, minimum: float = 360) -> int:
    """A figure's height in pixels for ``n_rows`` rows: ``extra`` plus ``per_row`` a row, at least ``minimum``."""
    return int(max(minimum, extra + per_row * n_rows))


def left_margin(labels) -> int:
    """The left margin in pixels that fits the longest axis label (at most 330)."""
    longest = max((len(str(s)) for s in labels), default=5)
    return int(min(330, 30 + 7.6 * longest))


SUBTITLE_CHARS = 125  # characters of a 12 px subtitle line at the export width


def base_layout(
    fig: go.Figure,
    title: str,
    height: int,
    subtitle: str | None = None,
    left: int = 80,
    bottom: int = 60,
    legend: bool = True,
) -> go.Figure:
    """Apply the common layout to ``fig``: font, bold title with a wrapped subtitle, margins and legend."""
    # Plotly does not wrap titles: a long subtitle ran off the right edge (cut in the PDF), so it is wrapped at
    # the width of the export (900 px at 12 px: about 125 characters) and the top margin grows with it
    lines = textwrap.wrap(subtitle, width=SUBTITLE_CHARS, break_long_words=False) if subtitle else []
    sub = "<br>".join(lines)
    text = f"<b>{title}</b>" + (f"<br><span style='font-size:12px;color:#555'>{sub}</span>" if sub else "")
    fig.update_layout(
        template="plotly_white",
        font=FONT,
        height=height,
        title=dict(
            text=text,
            x=10 / 900,
            xanchor="left",
            xref="container",
            y=1.0 - 14.0 / height,
            yref="container",
            yanchor="top",
            font=dict(size=16),
        ),
        margin=dict(l=left, r=30, t=(95 + 16 * (len(lines) - 1)) if lines else 70, b=bottom),
        hoverlabel=dict(font_size=12),
        showlegend=legend,
        legend=dict(
            orientation="h",
            yanchor="bottom",
            y=1.005,
            xanchor="right",
            x=1.0,
            font=dict(size=12),
            bgcolor="rgba(255,255,255,0.8)",
        ),
    )
    return fig


def add_footer(fig: go.Figure, axis_px: int = 58, legend_rows: int = 0, note: str | None = None) -> None:
    """Lay out what sits under the plot area, top to bottom: the x-axis title (``axis_px``), a horizontal
    legend of ``legend_rows`` rows, a one-line note. Sets the bottom margin to fit and places legend and
    note in paper coordinates computed from pixels, so nothing overlaps whatever the figure height."""
    legend_px = 24 * legend_rows
    note_px = 22 if note else 0
    bottom = axis_px + legend_px + note_px + 10
    fig.update_layout(margin=dict(b=bottom))
    m = fig.layout.margin
    plot_h = max(80.0, float(fig.layout.height) - float(m.t or 0) - bottom)
    if legend_rows:
        fig.update_layout(
            legend=dict(orientation="h", yanchor="top", y=-axis_px / plot_h, xanchor="left", x=0.0, font=dict(size=11))
        )
    if note:
        fig.add_annotation(
            text=note,
            xref="paper",
            yref="paper",
            x=0,
            y=-(axis_px + legend_px + 2) / plot_h,
            xanchor="left",
            yanchor="top",
            showarrow=False,
            align="left",
            font=dict(size=11, color="#555555"),
        )


def empty_figure(title: str, message: str, height: int = 320) -> go.Figure:
    """A placeholder figure: the common layout with ``title`` and ``message`` where the plot would be."""
    fig = go.Figure()
    base_layout(fig, title, height, legend=False)
    message_only(fig, message)
    return fig


def message_only(fig: go.Figure, message: str, color: str = "#555555") -> None:
    """Turn ``fig`` into a message where a figure will be: the text centred, no axes (the results' empty figures,
    the teaching tab before its first step)."""
    fig.add_annotation(
        text=message, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, font=dict(size=14, color=color)
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)


def legend_line(name: str, line: dict) -> go.Scatter:
    """A legend entry for a line drawn some other way (a reference line, error bars, a coloured bar)."""
    return go.Scatter(x=[None], y=[None], mode="lines", line=line, name=name)


def format_number(v, digits: int = 3, kind: str = "g") -> str:
    """A number for display, "–" when missing or not finite: ``digits`` significant digits ("g"), decimals ("f")
    or a percentage with that many decimals ("%")."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(v):
        return "–"
    out = f"{v:.{digits}{kind}}"
    if kind == "g" and 1e3 <= abs(float(out)) < 1e9:
        # "1,120 hours" and "22,330 dollars", not "1.12e+03" / "2.233e+04": the same significant digits, read at
        # a glance (scientific notation from 1e9 only)
        return f"{float(out):,.0f}"
    if kind == "g" and 0 < abs(v) < 1e-4 and "e" in out:
        # 0.0000123, not 1.23e-05
        return np.format_float_positional(float(out), trim="-")
    return out


def format_pair(a, b, digits: int = 4) -> tuple[str, str]:
    """Two numbers compared side by side ("0.4420 → 0.4402"): both with the same decimals, ``digits`` significant
    digits of the larger, more decimals (up to 4 more) when that would show two different numbers as equal,
    thousands separated; :func:`format_number` of each when one is missing, not finite or from 1e9 (issue 35)."""
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return format_number(a, digits), format_number(b, digits)
    if not (math.isfinite(x) and math.isfinite(y)) or max(abs(x), abs(y)) >= 1e9:
        return format_number(a, digits), format_number(b, digits)
    top = max(abs(x), abs(y))
    dec = max(0, digits - 1 - math.floor(math.log10(top))) if top > 0 else digits - 1
    for extra in range(5):
        sx, sy = f"{x:,.{dec + extra}f}", f"{y:,.{dec + extra}f}"
        if x == y or sx != sy:
            break
    return sx, sy


def method_order(cols) -> list:
    """The interval methods of ``cols`` in the order shown (their column order), as strings."""
    return [str(c) for c in cols]


def interval_text(lo, hi, digits: int = 3, closed_right: bool = True) -> str:
    """An interval for display, "[16,400; 119,000)" (``closed_right`` False) or "[717.6; 119,000]": each end by
    :func:`format_number` with ``digits`` significant digits, thousands separated as every number (issue 35), and a
    semicolon between the ends, which no thousands separator can be read as."""
    return f"[{format_number(lo, digits)}; {format_number(hi, digits)}{']' if closed_right else ')'}"


def bucket_labels(cols, info: dict, m=None, edges=None) -> list:
    """Mean-bucket column names: integers are turned into label-unit ranges ([lo, hi), the last closed), from
    the audit's bucket edges when given, else from the label range."""
    cols = list(cols)
    ints = all(isinstance(c, (int, np.integer)) or (isinstance(c, str) and c.isdigit()) for c in cols)
    if ints and edges is not None and len(edges) >= 2:
        e = [float(v) for v in edges]
        last = len(e) - 2
        out = []
        for c in cols:
            i = int(c)
            if 0 <= i <= last:
                out.append(interval_text(e[i], e[i + 1], closed_right=i == last))
            else:
                out.append(str(c))
        return out
    if ints and info["lo"] is not None and info["hi"] is not None and cols:
        idx = [int(c) for c in cols]
        m = int(m) if m else max(max(idx) + 1, len(cols))
        w = (info["hi"] - info["lo"]) / m
        out = []
        for i in idx:
            a, b = info["lo"] + i * w, info["lo"] + (i + 1) * w
            out.append(interval_text(a, b, closed_right=i == m - 1))
        return out
    return [str(c) for c in cols]


def coverage_range(z: np.ndarray, target: float) -> tuple[float, float]:
    """Colour range of a coverage heatmap: from the lowest value (at least 0.05 below the target) to 1."""
    finite = z[np.isfinite(z)]
    lo = min(float(finite.min()) if finite.size else target, target - 0.05)
    hi = max(1.0, float(finite.max()) if finite.size else 1.0)
    return max(0.0, lo), hi


def coverage_colorscale(zmin: float, zmax: float, target: float) -> list:
    """A diverging RdBu scale whose white centre sits exactly at ``target`` (1 - delta) on [zmin, zmax].

    The two sides are stretched to the same intensity per unit of coverage: a cell 0.05 below the target is
    as dark red as a cell 0.05 above it is dark blue, so the (short) over-coverage side is not exaggerated.
    """
    from plotly.colors import diverging, sample_colorscale

    RdBu = diverging.RdBu  # red (low) ... rgb(247,247,247) ... blue (high)

    c = (target - zmin) / (zmax - zmin)
    red, blue = target - zmin, zmax - target
    fr = min(1.0, red / blue) if blue > 0 else 1.0
    fb = min(1.0, blue / red) if red > 0 else 1.0
    n = 6
    scale = []
    if c > 0:
        cols = sample_colorscale(RdBu, list(np.linspace(0.5 - 0.5 * fr, 0.5, n)))
        scale += [[c * i / (n - 1), col] for i, col in enumerate(cols)]
    if c < 1:
        cols = sample_colorscale(RdBu, list(np.linspace(0.5, 0.5 + 0.5 * fb, n)))
        scale += [[c + (1 - c) * i / (n - 1), col] for i, col in enumerate(cols)][1 if c > 0 else 0 :]
    return scale

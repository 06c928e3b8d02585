"""The audit report (and a comparison's) as one self-contained, interactive HTML file: the same plotly figures as
the PDF and the dashboard, plotly.js inlined once (no network), every user-supplied text escaped (a group named
``[x](http://...)`` or ``<img ...>`` is shown as written, never as a link or a tag). ``mmc report --format html``
and ``mmc compare --report X.html``."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from ..figures.display import visible_controls

STYLE = """
body { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; max-width: 1000px; margin: 24px auto; color: #222;
       padding: 0 16px; }
h1 { color: #1f5fa8; font-size: 26px; margin-bottom: 4px; } h2 { color: #1f5fa8; font-size: 19px; margin-top: 28px; }
.facts { color: #666; font-size: 13px; } .note { color: #555; font-size: 13px; font-style: italic; }
.warn { color: #a83200; } table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th { background: #1f5fa8; color: white; text-align: left; padding: 4px 8px; } td { padding: 3px 8px;
border-bottom: 1px solid #ddd; } td:nth-child(n+2) { text-align: right; } li { margin: 3px 0; }
"""


def _t(text) -> str:
    """User or report text as inert HTML."""
    return html.escape(visible_controls(text), quote=True)


def _table(df: pd.DataFrame | None) -> str:
    if df is None or len(df) == 0:
        return ""
    head = "".join(f"<th>{_t(c)}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{_t(v)}</td>" for v in r) + "</tr>" for r in df.astype(str).to_numpy())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _figure(fig) -> str:
    """A figure's div (plotly.js is in the page's head once)."""
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True})


def _page(title: str, facts: str, body: list) -> bytes:
    from plotly.offline import get_plotlyjs

    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_t(title)}</title><style>{STYLE}</style>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
        f"<h1>{_t(title)}</h1><p class='facts'>{_t(facts)}</p>" + "".join(body) + "</body></html>"
    ).encode("utf-8")


def build_report_html(model, table, y, base=None, delta: float = 0.1, gamma: float = 0.05, label: str = "label",
                      data_name: str = "data", audit=None, threshold: float = 0.5, periods=None,
                      period_column: str = "period") -> bytes:  # fmt: skip
    """The audit report of ``model`` on ``table`` / ``y`` as HTML bytes (arguments as build_report_pdf's; ``periods``
    adds the section "Over time")."""
    from mmc_core.auditing import audit as run_audit

    from ..figures import charts as F
    from ..figures.convergence import convergence_figure
    from ..services.specs import descent_thresholds
    from .pdf_doc import report_label
    from .tables import findings_summary, mean_error_note, scorecard_table

    if audit is None:
        binary = getattr(model, "task", "regression") == "binary"
        audit = (
            run_audit(model, table, y, base=base, threshold=threshold)
            if binary
            else run_audit(model, table, y, base=base, delta=delta, gamma=gamma)
        )
    label = report_label(model, label)
    names = {"label": label, "units": f"{label} units"}
    s = findings_summary(audit)
    body = ["<h2>Key findings</h2>"]
    if s["failed"]:
        body.append(f"<p class='warn'>The findings could not be computed ({_t(s['failed'])}).</p>")
    elif s["untestable"]:
        body.append(f"<p class='warn'>{_t(s['untestable'])}</p>")
    elif audit.findings:
        body.append("<ul>" + "".join(f"<li>{_t(f['text'])}</li>" for f in audit.findings) + "</ul>")
    else:
        body.append("<p>No defect found beyond chance.</p>")
    if s["n_tests"]:
        body.append(
            f"<p class='note'>{s['n_tests']} tests adjusted together by {_t(s['control'])} at {s['level']:g}.</p>"
        )
    card = scorecard_table(audit, name_chars=80)
    if card is not None:
        body += [
            "<h2>Group scorecard</h2>",
            "<p class='note'>Every listed group, first by harm and evidence. "
            + _t(mean_error_note(audit, names["units"]))
            + " Detectable: the smallest mean error the group's rows find with 80% power among all tests.</p>",
            _table(card),
        ]
    info = dict(model.info or {})
    d_alpha, d_beta = descent_thresholds(model)
    figs = [
        (
            "Convergence of the fit",
            convergence_figure(
                list(info.get("history") or []),
                d_alpha,
                d_beta,
                1.0 / d_alpha**2 - 1.0,
                kept_round=info.get("kept_round"),
            ),
        )
    ]
    bg = audit.by_group
    if getattr(audit, "task", "regression") != "binary":
        if "pred_var" in bg and np.isfinite(bg["pred_var"].astype(float)).any():
            figs.append(("Variance disparities by group", F.variance_disparity_figure(audit, top=30, **names)))
        if not audit.coverage.empty and len(audit.coverage.columns):
            figs.append(("Interval coverage by group and method", F.coverage_heatmap(audit, delta)))
            figs.append(("Interval widths", F.width_heatmap(audit, **names)))
        figs.append(("Mean calibration before and after", F.calibration_before_after_figure(audit, top=30, **names)))
        mc = audit.moment_cells
        if "moment" in mc and not mc.empty and (mc["moment"].astype(int) == 2).any():
            figs.append(("Variance reliability", F.moment_reliability_figure(audit, 2, **names)))
    for heading, fig in figs:
        body += [f"<h2>{_t(heading)}</h2>", _figure(fig)]
    if periods is not None:
        body += _over_time(periods, period_column)
    n = len(y)
    return _page(
        f"Moment multicalibration audit: {label}",
        f"Data: {data_name} · {n:,} rows · {len(model.groups.names):,} groups · made by mmc-audit",
        body,
    )


def _over_time(res, column: str) -> list:
    """The section "Over time" (as the PDF's): what was tested, the changes found or that none was, the charts."""
    from ..figures.compare import period_figure
    from ..services.compare_service import (
        period_chart_values,
        period_findings_table,
        period_headline,
        period_intro,
        period_table_note,
    )

    body = [
        f"<h2>Over time: {_t(column)}</h2>",
        f"<p class='note'>{_t(period_intro(res, column))}</p>",
        f"<p>{_t(period_headline(res, column))}</p>",
    ]
    table = period_findings_table(res)
    if len(table):
        body += [
            _table(table),
            f"<p class='note'>{_t(period_table_note(res))}</p>",
        ]
    return body + [_figure(period_figure(res, value)) for value in period_chart_values(res)]


def build_compare_html(res, data_name: str, label: str) -> bytes:
    """A comparison (mmc_core.comparison.compare_models.ComparisonResult) as HTML bytes."""
    from ..figures.compare import TITLES, difference_figure
    from ..services.compare_service import group_table, headline, sentence

    a, b = (str(x) for x in res.names)
    body = ["<h2>Key findings</h2>", f"<p>{_t(headline(res))}</p>"]
    shown = res.worse() + res.better()
    if shown:
        body.append("<ul>" + "".join(f"<li>{_t(sentence(f['text']))}</li>" for f in shown) + "</ul>")
    for value in res.params["compared"]:
        body += [
            f"<h2>{_t(TITLES.get(value, value))}</h2>",
            _figure(difference_figure(res, value)),
            _table(group_table(res, value).reset_index().round(4)),
        ]
    return _page(f"Comparison: {b} against {a}", f"Label: {label} · data: {data_name} · {res.params['n']:,} rows", body)

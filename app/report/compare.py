"""The PDF of a comparison of two models (``mmc compare --report``): the headline, the findings worse first, a
chart per compared value (app.figures.compare) and the per-group table, in the audit report's layout
(app.report.pdf_doc)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..figures.display import shorten
from .pdf_doc import title_page

TABLE_ROWS = 25


def table_text(res, value: str) -> pd.DataFrame:
    """The page's table (app.services.compare_service.group_table, shares in percent and points) as text: the
    ``TABLE_ROWS`` largest differences either way, largest first."""
    from ..services.compare_service import group_table

    tab = group_table(res, value)
    diff, low, high, detectable = (c for c in tab.columns if c.startswith(("B - A", "95% ", "detectable")))
    tab = tab.iloc[np.argsort(-np.nan_to_num(np.abs(tab[diff].to_numpy(float)), nan=-1.0), kind="stable")]
    tab = tab.iloc[:TABLE_ROWS]

    def f(v):
        return "–" if not np.isfinite(v) else f"{v:.4g}"

    a_col, b_col = tab.columns[1], tab.columns[2]
    return pd.DataFrame(
        {
            "group": [shorten(g, 40) for g in tab.index],
            "rows": [f"{int(n):,}" for n in tab["rows"]],
            a_col: [f(v) for v in tab[a_col]],
            b_col: [f(v) for v in tab[b_col]],
            f"{diff} [95% CI]": [f"{f(e)} [{f(lo)}; {f(hi)}]" for e, lo, hi in tab[[diff, low, high]].to_numpy(float)],
            detectable: [f(v) for v in tab[detectable]],
            "finding": list(tab["finding"]),
        }
    )


def build_compare_pdf(res, data_name: str, label: str) -> bytes:
    """The comparison ``res`` (mmc_core.comparison.compare_models.ComparisonResult) as PDF bytes."""
    from ..figures.compare import TITLES, difference_figure
    from ..services.compare_service import headline, sentence
    from .pdf import EXPORT_WIDTH, figure_to_png

    a, b = (shorten(n, 60) for n in res.names)
    pdf, doc = title_page(
        f"mmc-audit comparison: {b} against {a}",
        f"Comparison: {b} against {a}",
        f"Label: {shorten(label, 60)} · data: {shorten(data_name, 60)} · {res.params['n']:,} rows · "
        f"{len(res.by_group)} groups",
    )
    doc.heading("Key findings", size=12, space=1)
    doc.para(headline(res))
    shown = (res.worse() + res.better())[:15]
    if shown:
        doc.bullets([sentence(f["text"]) for f in shown])
    control = {"holm": "Holm (family-wise error)", "bh": "Benjamini-Hochberg (false discovery rate)"}
    doc.para(
        f"{res.n_tests} paired tests of the groups' {', '.join(res.params['compared'])} (groups of at least "
        f"{res.params['min_group_count']} rows), adjusted together by {control.get(res.params['error_control'])} at "
        f"{res.params['level']:g}. Both sides predict the same rows, so each difference's interval is paired. "
        "Each finding's interval allows for its selection among all tests.",
        size=8.5,
        style="I",
    )
    for value in res.params["compared"]:
        fig = difference_figure(res, value)
        pdf.add_page()
        doc.heading(TITLES.get(value, value), size=12)
        doc.figure(figure_to_png(fig), EXPORT_WIDTH, int(fig.layout.height or 500), max_height=150)
        doc.data_table(
            table_text(res, value),
            col_widths=(52, 15, 20, 20, 42, 20, 17),
            size=7.5,
            title=f"The {min(TABLE_ROWS, len(res.by_group))} largest differences (A: {a}, B: {b})",
        )
    return bytes(pdf.output())

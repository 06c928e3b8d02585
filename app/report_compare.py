"""The PDF of a comparison of two models (``mmc compare --report``): the headline, the findings worse first, a
chart per compared value (app.figures_compare) and the per-group table, in the audit report's layout
(app.pdf_doc)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .display import shorten
from .pdf_doc import title_page

TABLE_ROWS = 25


def _table(res, value: str) -> pd.DataFrame:
    d = res.by_group
    found = {f["group"]: f["direction"] for f in res.findings if f["kind"] == value}
    order = np.argsort(-np.nan_to_num(np.abs(d[f"{value}_diff"].to_numpy(float)), nan=-1.0))[:TABLE_ROWS]
    d = d.iloc[order]

    def f(v):
        return "–" if not np.isfinite(v) else f"{v:.4g}"

    return pd.DataFrame(
        {
            "group": [shorten(g, 40) for g in d.index],
            "rows": [f"{int(n):,}" for n in d["n"]],
            "A": [f(v) for v in d[f"{value}_a"]],
            "B": [f(v) for v in d[f"{value}_b"]],
            "B - A [95% CI]": [
                f"{f(e)} [{f(lo)}; {f(hi)}]"
                for e, lo, hi in d[[f"{value}_diff", f"{value}_lo", f"{value}_hi"]].to_numpy(float)
            ],
            "detectable": [f(v) for v in d.get(f"{value}_detectable", pd.Series(np.nan, index=d.index))],
            "finding": [found.get(g, "") for g in d.index],
        }
    )


def build_compare_pdf(res, data_name: str, label: str) -> bytes:
    """The comparison ``res`` (mmc_core.compare.ComparisonResult) as PDF bytes."""
    from .compare_service import headline, sentence
    from .figures_compare import TITLES, difference_figure
    from .report import EXPORT_WIDTH, figure_to_png

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
            _table(res, value),
            col_widths=(52, 15, 20, 20, 42, 20, 17),
            size=7.5,
            title=f"The {min(TABLE_ROWS, len(res.by_group))} largest differences (A: {a}, B: {b})",
        )
    return bytes(pdf.output())

"""The PDF reports' section "Over time" (``mmc report --period``): the changes found between consecutive periods
and their trend charts, shared by the regression and the classifier report.
"""

from __future__ import annotations

from ..figures.figure_style import short_name

PERIOD_TABLE_ROWS = 25  # findings of change listed in the PDF's Over time section; every one is in the JSON


def over_time_section(doc, res, column: str, heading: str, add_figure) -> None:
    """The section "Over time": what was tested, the changes found (a table) or that none was, and the trend chart
    of each value with a finding (:func:`app.figures.compare.period_figure`, as on the Results page).

    Parameters
    ----------
    doc : app.report.pdf_doc document the section is added to (on a new page)
    res : the per-period comparison (``mmc_core.comparison.compare_models.compare_periods``)
    column : the name of the period column
    heading : the section's numbered heading
    add_figure : ``add_figure(fig, heading, caption, max_height=...)`` of the report, which exports and places
        a figure
    """
    from ..figures.compare import period_figure
    from ..services.compare_service import (
        PERIOD_VALUE_WORDS,
        period_chart_values,
        period_findings_table,
        period_headline,
        period_intro,
        period_table_note,
    )

    doc.pdf.add_page()
    doc.heading(heading)
    doc.para(period_intro(res, column), size=9)
    doc.para(period_headline(res, column), size=9.5, style="B" if res.findings else "")
    table = period_findings_table(res, top=PERIOD_TABLE_ROWS)
    if len(table):
        table["group"] = [short_name(g, 48) for g in table["group"]]
        doc.data_table(
            table,
            col_widths=(38, 27, 30, 26, 46, 19),
            size=7.5,
            align=["LEFT", "LEFT", "LEFT", "RIGHT", "RIGHT", "RIGHT"],
            title="Changes found between periods (surest first)",
        )
        more = len(res.findings) - len(table)
        doc.para(
            period_table_note(res)
            + (
                f" {more} more finding(s) are in the HTML report and the audit JSON (mmc audit --period)."
                if more > 0
                else ""
            ),
            size=7.8,
            color=(70, 70, 70),
        )
    for value in period_chart_values(res):
        add_figure(
            period_figure(res, value),
            f"Over time: {PERIOD_VALUE_WORDS.get(value, value)} by period",
            "Each line is a group's value per period with its 95% interval (black: every row); a thick line marks a "
            "group whose change between periods is a finding. The whole table, the groups with a finding, then "
            "the largest changes are drawn.",
            max_height=115,
        )

"""The PDF report of a classifier audit (binary labels): key findings, the model and the data, per-group
probability calibration before / after, reliability diagrams, rates at the decision threshold and the disparity
summaries, all on the probability scale (figures and tables from :mod:`app.figures.binary`, the same the dashboard
shows). :func:`app.report.pdf.build_report_pdf` hands a binary audit to :func:`binary_report` with its own figure
renderer (``app.report.pdf.figure_to_png``, looked up there at call time, so one renderer, and one stand-in in the
tests, serves both reports).
"""

from __future__ import annotations

from app.figures import binary as FB
from app.figures.figure_style import short_name
from app.report.pdf_doc import report_label, title_page
from app.report.tables import (
    convergence_warning,
    findings_section,
    in_sample_warning,
    mean_error_note,
    priority_groups,
    scorecard_table,
)

_BINARY_HOW_TO_READ = (
    "The label is a 0/1 outcome, so the model's prediction is a probability, and every number in this report "
    "is on the probability scale (no variances either: the spread of a 0/1 outcome is p(1 − p) once p "
    "is right). Multicalibration asks that, inside every group listed and every bucket of predicted "
    "probabilities within a group, the share of positives equals the average predicted probability. 'Before' is "
    "the base score the fit started from, 'after' the multicalibrated probability. Intervals in brackets are "
    "95% intervals: for the proportions (positive share, selection rate, true and false positive rate, "
    "precision, and the observed shares in the reliability diagrams) Wilson score intervals from the group's "
    "counts, which stay wide for a small group even when its rate is 0 or 1; for the other metrics (mean "
    "probability, calibration errors, log loss, Brier) percentile bootstrap intervals over the test rows. No "
    "prediction intervals are given: for a 0/1 outcome an interval is {0}, {1} or {0, 1}."
)


SCORECARD_ROWS = 10  # the first page's scorecard rows, as app.report.pdf's


class _Figures:
    """Figures with their heading and caption, kept together on a page; ``render(fig)``: the PNG at ``width`` px."""

    def __init__(self, doc, render, width: int):
        self.doc, self.render, self.width = doc, render, width

    def add(self, fig, heading, caption, max_height=None):
        doc = self.doc
        png = self.render(fig)
        hpx = int(fig.layout.height or 500)
        w, h = doc.figure_size(self.width, hpx, max_height)
        doc.ensure(12 + h + doc.caption_height(caption))
        doc.heading(heading)
        doc.figure(png, self.width, hpx, caption, max_height=max_height)


def _table(doc, df, title, first=30.0):
    """A group table: the first column ``first`` mm wide, the others sharing the rest of the page."""
    n_other = len(df.columns) - 1
    widths = [first] + [(186 - first) / n_other] * n_other
    doc.data_table(df, col_widths=widths, size=6.8, title=title)


def _summary_section(doc, audit, info: dict) -> None:
    """The findings, a convergence warning and the group scorecard, under the title."""
    findings_section(
        doc,
        audit,
        "the predicted probability on every group and every group × probability bucket",
        "No miscalibrated group or bucket found",
    )
    convergence_warning(doc, info, False)
    card = scorecard_table(audit, top=SCORECARD_ROWS)
    if card is not None:  # first, as in the regression report (the classifier report had none: issue 35)
        doc.data_table(
            card,
            col_widths=(52, 16, 52, 24, 42),
            size=7.3,
            title=f"Group scorecard (the first {len(card)} of {len(audit.scorecard)} groups by harm and evidence)",
        )
        doc.para(
            f"{mean_error_note(audit, '')} Detectable: the smallest difference this group's rows find with 80% power "
            "among all the audit's tests. Every group is in audit.json and on the dashboard's Results page.",
            size=7.8,
            color=(70, 70, 70),
        )


def _model_and_data_section(doc, model, audit, label: str, threshold_text: str, notes) -> None:
    """The "Model and run" and "Data" tables with the data notes (``threshold_text``: the rates' threshold)."""
    info = dict(model.info or {})
    params = audit.params
    bg = audit.by_group
    classes = params["label"].get("classes") or [0, 1]
    p = model.params
    doc.heading("Model and run", size=12)
    doc.kv_table(
        [
            (
                "Task",
                f"classifier audit (binary label {label}: positive class {classes[1]!s}, negative {classes[0]!s})",
            ),
            ("Prediction", "the multicalibrated probability of the positive class, in [0, 1] (mean only)"),
            ("Before", str(params.get("base", "–"))),
            (
                "Fit",
                f"α = {p.alpha:.3g} (mass-weighted, probability scale); m = {p.m} probability buckets; "
                f"{info.get('rounds', '–')} round(s), {info.get('mean_updates', '–')} update(s); converged: "
                f"{'yes' if info.get('converged', True) else 'no'}",
            ),
            (
                "Audit",
                f"threshold {threshold_text} (decision = probability ≥ threshold); {params['n_buckets']} equal "
                f"probability buckets for calibration; {params['n_boot']} bootstrap replicates; worst-bucket "
                f"errors over buckets of ≥ {params['min_cell_count']} rows",
            ),
        ]
    )
    ov = bg.iloc[0]
    doc.heading("Data", size=12)
    small = bg.sort_values("count").head(3)
    doc.kv_table(
        [
            ("Rows", f"{int(ov['count']):,} audited; share of positives {ov['base_rate']:.3f}"),
            ("Groups", f"{len(bg):,} (overlapping; 'all' is the whole population)"),
            (
                "Smallest groups",
                "; ".join(f"{short_name(g, 40)} ({int(c):,} rows)" for g, c in zip(small.index, small["count"])),
            ),
        ]
    )
    for note in notes:
        doc.para(note, size=8.5, style="I")
    in_sample_warning(doc, int(params["n"]), info)


def _calibration_section(doc, figs: _Figures, audit, first) -> None:
    """1. Probability calibration by group (two tables) and 2. the reliability diagrams."""
    params = audit.params
    bg = audit.by_group
    doc.ensure(70)
    cal = FB.classifier_calibration_table(bg, top=24, first=first)
    keep = [c for c in cal.columns if not c.startswith("Brier")]
    _table(doc, cal[keep[:2] + keep[2:7]], "1. Probability calibration by group (before → after, 95% intervals)", 28)
    _table(doc, cal[keep[:2] + keep[7:]], "Log loss and expected calibration error by group", 28)
    doc.para(
        "positive share: observed share of positives (Wilson score interval); mean probability: average "
        "predicted probability; worst bucket error: observed − predicted in the group's probability bucket with "
        f"the largest gap (buckets of ≥ {params['min_cell_count']} rows); ECE: gaps averaged over the group's "
        f"buckets, weighted by rows; log loss: lower is better. Intervals other than the positive share's: "
        f"percentile bootstrap, {params['n_boot']} replicates.",
        size=8,
        color=(70, 70, 70),
    )
    doc.pdf.add_page()
    figs.add(
        FB.reliability_figure(audit.calibration_cells, bg, first=first, always=FB.finding_groups(audit)),
        "2. Reliability diagrams",
        "Observed share of positives against the average predicted probability in each tenth of the "
        "probability scale, per group (every group with a finding, then the largest), before (orange) and after (blue) "
        "multicalibration. Points on the dashed diagonal are calibrated; bars are Wilson 95% intervals, "
        "so small buckets scatter widely.",
        max_height=190,
    )


def _rates_section(doc, figs: _Figures, audit, first, thr: float, rate_rows, disparities) -> None:
    """3. Rates by group at the threshold (figure and table) and the disparities across each column's values."""
    bg = audit.by_group
    doc.pdf.add_page()
    # Wilson intervals from the counts (the groups' positives: the audit's shares, the same test rows)
    rate_rows = FB.wilson_rates(rate_rows, bg["base_rate"])
    figs.add(
        FB.rate_figure(rate_rows, thr, first=first, always=FB.finding_groups(audit)),
        f"3. Rates by group at threshold {thr:g}",
        "Selection rate (share decided positive), true positive rate and false positive rate per group, "
        "with Wilson score 95% intervals, before and after multicalibration.",
        max_height=110,
    )
    rt = FB.classifier_rate_table(rate_rows, top=24, first=first)
    _table(
        doc,
        rt[[c for c in rt.columns if not c.endswith(", before")]],
        f"Rates at threshold {thr:g} after multicalibration (Wilson score 95% intervals)",
        28,
    )
    doc.para(FB.RATE_INTERVAL_NOTE, size=8, color=(70, 70, 70))
    dt = FB.classifier_disparity_table(disparities) if disparities is not None else None
    if dt is not None and len(dt):
        doc.data_table(
            dt,
            col_widths=(24, 14, 22, 18, 22, 18, 68),
            size=7.5,
            title="Disparities across the values of each column (after multicalibration)",
        )
        doc.para(
            "DP: demographic parity (selection rates: largest − smallest, smallest / largest); EO: equalized "
            "odds (the larger gap of the true and false positive rates; the smaller ratio); four-fifths rule: "
            "groups selected at less than 4/5 of the column's highest selection rate. Computed as fairlearn's "
            "MetricFrame does, from the rates' point estimates (no intervals).",
            size=8,
            color=(70, 70, 70),
        )


def binary_report(
    model,
    audit,
    label: str,
    data_name: str,
    rates: tuple | None = None,
    notes: list | tuple = (),
    *,
    render,
    width: int,
    over_time=None,
) -> bytes:
    """The PDF of a classifier audit: findings, per-group probability metrics before / after, reliability
    diagrams, rates at the threshold and the disparity summaries (figures and tables from app/figures/binary.py,
    the same the dashboard shows). ``rates``: (threshold, rates, disparities) at a threshold the analyst chose
    after the audit (the dashboard's slider); without it, the audit's own threshold and rates. ``notes``:
    sentences about the data printed under its table (e.g. categories no group lists). ``render(fig)``: the
    figure's PNG bytes at ``width`` px (the regression report's renderer). ``over_time(doc, add_figure, number)``:
    draws the section "Over time" (app.report.pdf's, for the periods the caller holds) as section ``number``."""
    info = dict(model.info or {})
    label = report_label(model, label)
    params = audit.params
    audit_thr = float(params.get("threshold", 0.5))
    bg = audit.by_group
    if rates is None:
        thr, rate_rows = audit_thr, bg
        disparities = audit.classifier.disparities if audit.classifier is not None else None
    else:
        thr, rate_rows, disparities = float(rates[0]), rates[1], rates[2]
    # the reader must know which threshold the rates are at when it is not the one the audit ran with
    chosen = f" (chosen on the dashboard; the audit ran at {audit_thr:g})" if thr != audit_thr else ""
    pdf, doc = title_page(
        f"mmc-audit classifier report: {label} on {data_name}",
        f"Classifier audit: {label}",
        f"Data: {data_name} · {int(params['n']):,} rows · {len(bg):,} groups · decision threshold {thr:g}{chosen}",
    )
    _summary_section(doc, audit, info)
    _model_and_data_section(doc, model, audit, label, f"{thr:g}{chosen}", notes)
    doc.heading("How to read this report", size=12)
    doc.para(_BINARY_HOW_TO_READ, size=9)
    figs = _Figures(doc, render, width)
    first = priority_groups(audit)
    _calibration_section(doc, figs, audit, first)
    _rates_section(doc, figs, audit, first, thr, rate_rows, disparities)
    if over_time is not None:
        over_time(doc, figs.add, 4)
    doc.ensure(30)
    doc.heading("Not in this report", size=11)
    doc.bullets(
        [
            "Prediction intervals, coverage and variance findings: a 0/1 outcome has no useful interval, and "
            "its variance p(1 − p) follows from the probability."
        ],
        size=9,
    )
    return bytes(pdf.output())

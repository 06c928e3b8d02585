"""The PDF audit report: the dashboard's figures and tables on paper.

The regression report is one linear document: :func:`build_report_pdf` calls one function per section in page
order; its tables, its words, the fpdf2 layer and the classifier report are split off (below).

``build_report_pdf`` computes the audit (unless given one), builds the same plotly figures the dashboard
shows (``app/figures/charts.py``), exports them to PNG with kaleido and the system Chromium, and lays them out
with fpdf2 together with the run's parameters, a data summary, compact tables and the audit's findings in
plain language.

One kaleido server (a headless Chromium) is started per process on first use and reused by every later
report; without it each figure would start its own Chromium (2-4 s each).

This module holds the figure export and the regression report's layout (:func:`build_report_pdf`); its tables
and findings text are in :mod:`app.report.tables`, the run's parameters, data summary and reading notes in
:mod:`app.report.text`, the fpdf2 document layer in :mod:`app.report.pdf_doc`, and the classifier report in
:mod:`app.report.binary`.
"""

from __future__ import annotations

import errno
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from mmc_core.common import MMCError

from ..figures import charts as F
from ..figures.figure_style import short_name
from ..services.specs import descent_thresholds, interval_range_note
from ..services.validate import unlisted_notes
from .pdf_doc import KALEIDO_MESSAGE, report_label, title_page
from .periods import over_time_section
from .tables import (
    audit_subset,
    calibration_table,
    convergence_warning,
    coverage_table,
    even_chunks,
    findings_section,
    findings_summary,
    in_sample_warning,
    mean_error_note,
    scorecard_table,
    variance_table,
)
from .text import data_rows, param_rows, reading_notes

SCORECARD_ROWS = 10  # the first page's scorecard: the groups first by harm and evidence

__all__ = ["build_report_pdf", "figure_to_png", "chromium_available", "CHROMIUM_MESSAGE", "findings_summary"]

CHROMIUM_MESSAGE = (
    "PDF export needs Chromium: run `apt-get install chromium` (Debian/Ubuntu) or set "
    "BROWSER_PATH to a Chrome/Chromium executable; the audit itself (`mmc audit`) works without it"
)
EXPORT_WIDTH = 900  # px: figure width used for export (fonts are sized for this)
EXPORT_SCALE = 2.0  # device pixels per px (sharp on paper)
EXPORT_TIMEOUT = 120.0  # s per figure, including the first Chromium start
MAX_HEATMAP_ROWS = 42  # groups per heatmap page; more groups are split over several figures

_export_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------------
# figure export
# ---------------------------------------------------------------------------------------------------
def chromium_available() -> str | None:
    """The Chrome/Chromium executable kaleido will use, or None."""
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return None
    try:
        path = Chromium.find_browser(skip_local=False)
    except Exception:  # noqa: BLE001 - best effort: any failure means "not found"
        return None
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return str(path)
    return None


def _server():
    import kaleido

    return kaleido._global_server  # private: only to check that its thread is alive


def _ensure_kaleido():
    """Start (once per process) the kaleido server, or raise MMCError with what to install."""
    try:
        import kaleido
        import plotly.io  # noqa: F401
    except ImportError:
        raise MMCError(KALEIDO_MESSAGE) from None
    warnings.filterwarnings("ignore", message="The kopts argument is ignored", category=UserWarning)
    srv = _server()
    if srv.is_running():
        t = getattr(srv, "_thread", None)
        if t is not None and t.is_alive():
            return
        kaleido.stop_sync_server(silence_warnings=True)
    if chromium_available() is None:
        raise MMCError(CHROMIUM_MESSAGE)
    kaleido.start_sync_server(silence_warnings=True)


def _is_kaleido_error(e: BaseException) -> bool:
    mod = type(e).__module__ or ""
    return mod.startswith(("kaleido", "choreographer")) or "Chrome" in str(e) or "Kaleido" in str(e)


def figure_to_png(fig, width: int = EXPORT_WIDTH, height: int | None = None, scale: float = EXPORT_SCALE) -> bytes:
    """Render a plotly figure to PNG bytes with the shared kaleido server (system Chromium).

    Raises MMCError with an actionable one-line message if Chromium or kaleido is missing or the browser
    dies; a watchdog makes sure a crashed browser cannot hang the caller. A render whose page had not loaded
    kaleido's scripts (a JavaScript ReferenceError, seen once in a full test run on a loaded machine) is retried once
    on a fresh server.
    """
    try:
        return _figure_to_png(fig, width, height, scale)
    except MMCError as e:
        if "ReferenceError" not in str(e):
            raise
        import kaleido

        with _export_lock:
            kaleido.stop_sync_server(silence_warnings=True)
        return _figure_to_png(fig, width, height, scale)


def _figure_to_png(fig, width: int, height: int | None, scale: float) -> bytes:
    import plotly.io as pio

    height = int(height or fig.layout.height or 500)
    with _export_lock:
        _ensure_kaleido()
        box: dict = {}

        def work():
            try:
                try:
                    box["png"] = pio.to_image(fig, format="png", width=width, height=height, scale=scale)
                except OSError as e:
                    if e.errno != errno.ENAMETOOLONG:
                        raise
                    # kaleido 1.1-1.2 (the minimum version) names even an in-memory export after the figure's
                    # title and looks for that file: a long title with its subtitle failed with "File name too
                    # long" and the PDF export crashed. Those versions take a path of our own naming instead.
                    import kaleido

                    with tempfile.TemporaryDirectory(prefix="mmc-fig-") as tmp:
                        box["png"] = kaleido.calc_fig_sync(
                            fig.to_dict(),
                            path=Path(tmp) / "figure.png",
                            opts=dict(format="png", width=width, height=height, scale=scale),
                        )
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = e

        th = threading.Thread(target=work, name="mmc-report-export", daemon=True)
        th.start()
        deadline = time.monotonic() + EXPORT_TIMEOUT
        while th.is_alive():
            th.join(0.05)
            if not th.is_alive():
                break
            srv_thread = getattr(_server(), "_thread", None)
            if srv_thread is None or not srv_thread.is_alive():
                import kaleido

                kaleido.stop_sync_server(silence_warnings=True)
                raise MMCError(CHROMIUM_MESSAGE + " (the browser process stopped unexpectedly)")
            if time.monotonic() > deadline:
                raise MMCError(
                    f"PDF export timed out after {EXPORT_TIMEOUT:.0f} s rendering a figure; "
                    "check that Chromium starts (`chromium --headless --version`)"
                )
        if "error" in box:
            e = box["error"]
            if _is_kaleido_error(e):
                raise MMCError(f"{CHROMIUM_MESSAGE} ({type(e).__name__}: {str(e).splitlines()[0][:160]})") from None
            raise e
        return box["png"]


# ---------------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------------
class _FigurePages:
    """The report's numbered figure sections on ``doc``: a heading, a figure (exported by :func:`figure_to_png`,
    looked up at call time so that a test's stand-in serves) and its caption, kept together on one page."""

    def __init__(self, doc):
        self.doc, self.n = doc, 0

    def numbered(self, text: str) -> str:
        self.n += 1
        return f"{self.n}. {text}"

    def add(self, fig, heading, caption, max_height=None, fill=False):
        """Heading + figure + caption, kept together; ``fill``: shrink to the space left on the page."""
        doc = self.doc
        png = figure_to_png(fig)
        hpx = int(fig.layout.height or 500)
        if fill:
            room = doc.space_left() - 16 - doc.caption_height(caption)
            if room >= 120:
                max_height = min(max_height or 1e9, room)
        w, h = doc.figure_size(EXPORT_WIDTH, hpx, max_height)
        doc.ensure(12 + h + doc.caption_height(caption))
        doc.heading(heading)
        doc.figure(png, EXPORT_WIDTH, hpx, caption, max_height=max_height)


def _summary_section(doc, model, audit, info: dict, units: str, has_intervals: bool) -> None:
    """The first page under the title: the findings, a convergence warning and the group scorecard."""
    tested = ["means", "bucket calibration"] + (["variances"] if model.moments else [])
    tested += ["interval coverage"] if has_intervals else []
    findings_section(
        doc,
        audit,
        f"the model's {', '.join(tested[:-1])} and {tested[-1]} on every group and cell",
        "No defect found",
    )
    convergence_warning(doc, info, bool(model.moments))
    card = scorecard_table(audit, top=SCORECARD_ROWS)
    if card is not None:
        doc.data_table(
            card,
            col_widths=(38, 14, 34, 20, 30, 28, 22),
            size=7.3,
            title=f"Group scorecard (the first {len(card)} of {len(audit.scorecard)} groups by harm and evidence)",
        )
        doc.para(
            f"{mean_error_note(audit, units)} Detectable: the smallest mean error this group's rows "
            "find with 80% power among all the audit's tests: a group without a finding is not shown to be fine, "
            "only that any error is smaller than that. Every group is in audit.json and on the dashboard's "
            "Results page.",
            size=7.8,
            color=(70, 70, 70),
        )


def _model_and_data_section(doc, model, audit, y, info: dict, settings: dict, unlisted: list) -> None:
    """The sections "Model and run" and "Data" with its notes, and the interval coverage by method
    (``settings``: delta, gamma, label, units, data_name)."""
    delta, gamma, units = settings["delta"], settings["gamma"], settings["units"]
    doc.heading("Model and run", size=12)
    doc.kv_table(param_rows(model, audit, delta, gamma, settings["label"], units))
    doc.heading("Data", size=12)
    drows, dnotes = data_rows(audit, model, y, settings["data_name"], gamma)
    dnotes += unlisted
    doc.kv_table(drows)
    for n_ in dnotes:
        doc.para(n_, size=8.5, style="I")
    in_sample_warning(doc, len(y), info)
    ct = coverage_table(audit, delta)
    if ct is not None:
        doc.data_table(
            ct,
            col_widths=(30, 26, 62, 34, 34),
            align=["LEFT", "RIGHT", "LEFT", "RIGHT", "RIGHT"],
            title=f"Interval coverage by method (target {1 - delta:.0%})",
        )
    unavailable = audit.params.get("methods_unavailable") or {}
    if unavailable:
        by_reason: dict = {}
        for meth, why in dict(unavailable).items():
            by_reason.setdefault(str(why), []).append(F.METHOD_LABELS.get(str(meth), str(meth)))
        doc.para(
            "Interval methods not computed: "
            + "; ".join(f"{', '.join(ms)}: {why}" for why, ms in by_reason.items())
            + ".",
            size=8.3,
            color=(70, 70, 70),
        )


def _how_to_read_section(doc, model, audit, has_intervals: bool) -> None:
    pdf = doc.pdf
    doc.ensure(95)
    doc.heading("How to read this report", size=12, space=4 if pdf.get_y() > pdf.t_margin + 1 else 0)
    how, promises, not_promises = reading_notes(bool(model.moments), has_intervals, tuple(audit.coverage.columns))
    doc.para(how, size=9)
    doc.para(promises, size=9, markdown=True)
    doc.para(not_promises, size=9, markdown=True)
    doc.para(
        (
            "Notation: α, β are the mean and moment thresholds; "
            if model.moments
            else "Notation: α is the mean threshold; "
        )
        + ("δ the interval miscoverage; " if has_intervals else "")
        + "γ the smallest cell mass covered by the guarantees. Group names ending in † have mass below γ.",
        size=8.3,
        color=(70, 70, 70),
    )


def _convergence_section(figs: _FigurePages, model, info: dict) -> None:
    hist = list(info.get("history") or [])
    d_alpha, d_beta = descent_thresholds(model)  # the lines the descent compared against
    figs.add(
        F.convergence_figure(hist, d_alpha, d_beta, 1.0 / d_alpha**2 - 1.0, kept_round=info.get("kept_round")),
        figs.numbered("Convergence of the fit"),
        "Top: the largest mass-weighted mean error over all cells, per round, on the fitting rows (blue) "
        "and the held-out rows (orange); the fit stops when the blue line is below α"
        + (
            " or when no cell's error is significant against its own standard error (the per-cell test)"
            if float(info.get("z") or 0.0) > 0
            else ""
        )
        + ". "
        + (
            (
                "The diamonds: the kept round's model after the shrunken cell corrections, the model whose α and β "
                "are stated. "
                if model.has_moment_cells
                else "The diamond: the kept round's model after the shrunken cell corrections, the model whose α is "
                "stated. "
            )
            if model.has_cells or model.has_moment_cells
            else ""
        )
        + ("Middle: the same for the moments against β. " if model.moments else "")
        + "Bottom: cells still violating α, and cumulative updates against the "
        "theoretical bound. A held-out line far above the fitting line signals over-fitting of small cells.",
        fill=True,
    )


def _variance_section(figs: _FigurePages, audit, names: dict) -> bool:
    """The variance disparities figure and table; False (nothing drawn) for a mean-only model."""
    bg = audit.by_group
    if not ("pred_var" in bg and np.isfinite(bg["pred_var"].astype(float)).any()):
        return False
    figs.doc.pdf.add_page()
    figs.add(
        F.variance_disparity_figure(audit, top=20, **names),
        figs.numbered("Variance disparities by group"),
        "Left: the predicted spread (square root of the mean predicted variance) and the observed spread "
        "(standard deviation of the residual y - prediction within the group) per group. Right: both variances "
        "relative to all rows, with 95% bootstrap intervals. Where blue and orange disagree, the model "
        "misjudges the uncertainty of that group; where both sit away from 1, the group is genuinely "
        "more (or less) variable than the population.",
        max_height=160,
    )
    vt = variance_table(audit, top=8)
    if vt is not None:
        figs.doc.data_table(
            vt,
            col_widths=(55, 12, 15, 15, 19, 35, 35),
            title="Groups whose predicted and observed variance disagree most",
        )
        figs.doc.para(
            f"SD in {names['units']}; pred./obs.: predicted over observed variance (1 = right); "
            "vs all: the group's variance over the whole population's, with a 95% bootstrap interval.",
            size=8,
            color=(70, 70, 70),
        )
    return True


def _coverage_section(figs: _FigurePages, audit, delta: float, names: dict) -> bool:
    """The coverage, coverage-by-bucket and width heatmaps, each split over pages of at most
    ``MAX_HEATMAP_ROWS`` groups; False (nothing drawn) when the audit has no interval method."""
    cov = audit.coverage
    if cov.empty or len(cov.columns) == 0:
        return False
    chunks = even_chunks(list(cov.index), MAX_HEATMAP_ROWS)

    def parts(builder, heading, caption):
        heading = figs.numbered(heading)
        for i, group_names in enumerate(chunks):
            part = f" (part {i + 1} of {len(chunks)})" if len(chunks) > 1 else ""
            sub = audit_subset(audit, group_names) if len(chunks) > 1 else audit
            figs.doc.pdf.add_page()
            figs.add(builder(sub), heading + part, caption, fill=True)

    parts(
        lambda a: F.coverage_heatmap(a, delta),
        "Interval coverage by group and method",
        f"Share of rows whose label falls inside its interval, per group and interval method. White is "
        f"the target {1 - delta:.0%}; red cells under-cover (the intervals are too narrow there), blue "
        "cells over-cover (too wide). 'guaranteed' are the paper's worst-case intervals. The summary by "
        "method is the table 'Interval coverage by method' in the summary at the start.",
    )
    if audit.coverage_by_bucket.notna().to_numpy().any():
        bm = audit.params.get("bucket_method") or "calibrated"
        parts(
            lambda a: F.coverage_by_bucket_heatmap(a, delta, **names),
            "Coverage by predicted mean",
            f"Coverage of the {bm} intervals per group and bucket of the predicted mean: multicalibrated "
            "intervals should be close to the target in every cell, not only on average. Blank: no rows "
            "there. Cells with few rows are noisy.",
        )
    parts(
        lambda a: F.width_heatmap(a, **names),
        "Interval widths",
        f"Mean interval width in {names['units']}. Read together with the coverage: the best method is "
        "the narrowest one that still reaches the target in every group."
        + (f" {past}" if (past := interval_range_note(audit.params)) else ""),
    )
    return True


def _calibration_section(figs: _FigurePages, audit, names: dict) -> None:
    figs.doc.pdf.add_page()
    figs.add(
        F.calibration_before_after_figure(audit, top=20, **names),
        figs.numbered("Mean calibration before and after"),
        "For each group, the largest gap between the average prediction and the average label over the "
        "group's buckets of predicted values, for the base model (or the constant the fit started from) "
        "and after multicalibration.",
        max_height=140,
    )
    calt = calibration_table(audit, top=10)
    if calt is not None:
        w = [60, 14] + [(186 - 74) / (len(calt.columns) - 2)] * (len(calt.columns) - 2)
        figs.doc.data_table(
            calt, col_widths=w, title=f"Calibration errors ({names['units']}; weighted: times the cell's share of rows)"
        )


def _moment_section(figs: _FigurePages, model, audit, names: dict) -> None:
    """Reliability of the variance and, when fitted, of the highest moment (nothing without moment cells)."""
    moments = tuple(model.params.moments)
    mc = audit.moment_cells
    has_mom = "moment" in mc and not mc.empty

    def has_moment(a):
        return has_mom and (mc["moment"].astype(int) == a).any()

    if not has_moment(2):
        return
    figs.doc.pdf.add_page()
    a_max = max(moments) if moments else 2
    second = a_max >= 3 and has_moment(a_max)
    figs.add(
        F.moment_reliability_figure(audit, 2, **names),
        figs.numbered("Variance reliability"),
        "Each dot is a cell (a group × a bucket of the predicted mean × a bucket of the predicted "
        "variance); its area is the cell's share of rows. Dots on the dashed diagonal have the predicted "
        "variance they observe; small cells scatter more.",
        max_height=118 if second else 160,
    )
    if second:
        figs.add(
            F.moment_reliability_figure(audit, a_max, **names),
            figs.numbered(f"Moment {a_max} reliability"),
            f"As above for the {a_max}th central moment.",
            max_height=105,
        )


def _run_audit(model, table, y, base, delta, gamma, threshold):
    from mmc_core.auditing import audit as run_audit

    if getattr(model, "task", "regression") == "binary":
        return run_audit(model, table, y, base=base, threshold=threshold)
    return run_audit(model, table, y, base=base, delta=delta, gamma=gamma)


def _binary_report_pdf(model, audit, label, data_name, rates, notes, periods, period_column) -> bytes:
    from app.report.binary import binary_report

    def over_time(doc, add_figure, number):
        heading = f"{number}. Over time: {short_name(period_column, 40)}"
        over_time_section(doc, periods, period_column, heading, add_figure)

    return binary_report(
        model,
        audit,
        label,
        data_name,
        rates=rates,
        notes=notes,
        render=figure_to_png,
        width=EXPORT_WIDTH,
        over_time=None if periods is None else over_time,
    )


def _regression_report_pdf(model, audit, y, settings: dict, unlisted: list, periods, period_column: str) -> bytes:
    """The regression report, section by section in page order (``settings``: delta, gamma, label, units and
    data_name as printed)."""
    info = dict(model.info or {})
    label, units, data_name, delta = settings["label"], settings["units"], settings["data_name"], settings["delta"]
    names = {"label": label, "units": units}  # what the figures print about the label
    pdf, doc = title_page(
        f"mmc-audit report: {label} on {data_name}",
        f"Moment multicalibration audit: {label}",
        f"Data: {data_name} · {len(y):,} rows · {len(model.groups.names):,} groups",
    )
    has_intervals = not audit.coverage.empty  # a mean-only audit has one row per group and no columns
    _summary_section(doc, model, audit, info, units, has_intervals)
    _model_and_data_section(doc, model, audit, y, info, settings, unlisted)
    _how_to_read_section(doc, model, audit, has_intervals)

    figs = _FigurePages(doc)
    _convergence_section(figs, model, info)
    skipped = []
    if not _variance_section(figs, audit, names):
        skipped.append("variance disparities and moment reliability (the model predicts the mean only)")
    if not _coverage_section(figs, audit, delta, names):
        skipped.append("interval coverage and widths (no interval method is available for this model)")
    _calibration_section(figs, audit, names)
    _moment_section(figs, model, audit, names)
    if periods is not None:
        heading = figs.numbered(f"Over time: {short_name(period_column, 40)}")
        over_time_section(doc, periods, period_column, heading, figs.add)

    if skipped:
        doc.ensure(30)
        doc.heading("Not in this report", size=11)
        doc.bullets([s_[0].upper() + s_[1:] + "." for s_ in skipped], size=9)
    out = pdf.output()
    return bytes(out)


def build_report_pdf(
    model,
    table,
    y,
    base=None,
    delta: float = 0.1,
    gamma: float = 0.05,
    label: str = "label",
    data_name: str = "data",
    audit=None,
    threshold: float = 0.5,
    rates: tuple | None = None,
    units: str = "",
    data_note: str = "",
    periods=None,
    period_column: str = "period",
) -> bytes:
    """Build the PDF audit report and return its bytes.

    Parameters
    ----------
    model : mmc_core.FittedModel
    table : DataFrame (or dict of columns) with the group columns, n rows
    y : array (n,), labels in their own units
    base : array (n,) or None, the base model's predictions (label units); needed if the model used one
    delta, gamma : interval miscoverage and the smallest cell mass the guarantees cover
    label, data_name : names printed in the report
    units : the label's units as the axes and tables print them (default "<label> units")
    data_note : a sentence for the Data section (e.g. which rows of the file were dropped before the run)
    audit : a precomputed ``mmc_core.auditing.metrics.AuditResult`` for the same arguments (computed if None)
    threshold : the decision threshold of a binary (classifier) model's rates (see :func:`app.report.binary.binary_report`)
    rates : (threshold, rates, disparities) of a binary model at a threshold chosen after the audit (the dashboard's
        slider; :func:`app.services.pipeline.classifier_rates`): the report's rates, disparities and stated threshold are these
    periods : the model audited per period of ``period_column`` (``mmc_core.comparison.compare_models.compare_periods`` on the same rows;
        a classifier's with its rates at the threshold): adds the section "Over time" with its findings and trend
        charts

    Raises
    ------
    MMCError
        If Chromium (or kaleido / fpdf2) is missing: a one-line message saying what to install.
    """
    # Fail fast, before the (possibly long) audit, if figures cannot be exported.
    with _export_lock:
        _ensure_kaleido()
    if audit is None:
        audit = _run_audit(model, table, y, base, delta, gamma, threshold)
    # rows whose category no group lists get no correction from that column: said in the Data section
    unlisted = [note[:1].upper() + note[1:] + "." for note in unlisted_notes(model.groups, table)]
    unlisted += [data_note] if data_note else []
    if getattr(audit, "task", "regression") == "binary":
        return _binary_report_pdf(model, audit, label, data_name, rates, unlisted, periods, period_column)
    label = report_label(model, label)
    settings = {
        "delta": delta,
        "gamma": gamma,
        "label": label,
        "units": units or f"{label} units",
        "data_name": data_name,
    }
    return _regression_report_pdf(model, audit, np.asarray(y, dtype=float), settings, unlisted, periods, period_column)

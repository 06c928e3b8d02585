"""The PDF audit report: the dashboard's figures and tables on paper.

Why one module of ~600 lines: the regression report is one linear document whose sections share the run's
parameters and the figure export; its tables, the fpdf2 layer and the classifier report are split off (below).

``build_report_pdf`` computes the audit (unless given one), builds the same plotly figures the dashboard
shows (``app/figures.py``), exports them to PNG with kaleido and the system Chromium, and lays them out
with fpdf2 together with the run's parameters, a data summary, compact tables and the audit's findings in
plain language.

One kaleido server (a headless Chromium) is started per process on first use and reused by every later
report; without it each figure would start its own Chromium (2-4 s each).

This module holds the figure export and the regression report's layout (:func:`build_report_pdf`); its tables
and findings text are in :mod:`app.report_tables`, the fpdf2 document layer in :mod:`app.pdf_doc`, and the
classifier report in :mod:`app.report_binary`.
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

from mmc_core.cells import describe_cells
from mmc_core.stages import describe_stages
from mmc_core.descent import SHRINK_MIN
from mmc_core.errors import MMCError
from mmc_core.base_map_text import describe as describe_base
from mmc_core.thresholds import NO_GROUP_MOMENT_Z

from . import figures as F
from .figure_style import below_gamma, interval_text, short_name
from .pdf_doc import KALEIDO_MESSAGE, title_page, report_label
from .specs import descent_thresholds, interval_range_note, missed_reason, outside_range_note, threshold_rules
from .validate import unlisted_notes
from .report_tables import (
    calibration_table,
    even_chunks,
    coverage_table,
    convergence_warning,
    findings_section,
    in_sample_warning,
    audit_subset,
    variance_table,
    findings_summary,
    mean_error_note,
    scorecard_table,
)

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


def reading_notes(has_moments: bool, has_intervals: bool, methods=("guaranteed", "calibrated")) -> tuple[str, str, str]:
    """The report's "how to read", "what it promises" and "what it does not promise" paragraphs, for what the
    model fits: a mean-only model has no moment threshold β and no variance, and intervals are spoken of only
    when the audit has some (a mean-only model's report must not promise what it does not have)."""
    if has_moments:
        what = (
            "The model predicts, for every row, a mean and central moments (the variance and, if fitted, higher "
            "moments) of the label."
        )
        example = ", and their spread matches the predicted variance"
        errors = "the mean error is below α and every moment error below β"
    else:
        what = (
            "The model predicts, for every row, the mean of the label (no variance: it was fitted for the mean only)."
        )
        example = ""
        errors = "the mean error is below α"
    how = (
        f"{what} Multicalibration means these predictions are correct on average not only overall but inside "
        "every group listed here and inside every bucket of predicted values within a group: among rows of a "
        f"group whose predicted mean is about 40, the labels average about 40{example}. The audit measures this "
        "on the data given to the report, which should be rows the model was not fitted on; all numbers are in "
        "the label's own units unless an axis says otherwise."
    )
    promises = (
        f"**What it promises.** On the fitting rows the guarantees hold by construction: in every cell {errors} "
        "(weighted by the cell's share of rows). On new rows they hold up to sampling error, which is small for "
        "large groups and large for small ones."
    )
    if has_intervals and "guaranteed" in methods:
        promises += (
            " The 'guaranteed' intervals cover the label with probability at least 1 − δ in every cell of mass at "
            "least γ (they are honest, and wide); the 'calibrated' intervals aim at 1 − δ in every group using "
            "held-out (or out-of-fold) rows, and are much narrower."
        )
    elif has_intervals:  # a mean-only model: no guaranteed intervals (they need the moments)
        promises += (
            " The 'calibrated' intervals aim at 1 − δ in every group using held-out (or out-of-fold) rows; a "
            "mean-only model has no 'guaranteed' intervals (they need the predicted moments)."
        )
    spread = (
        "a calibrated variance describes a group of similar rows, not one person"
        if has_moments
        else ("a calibrated mean describes a group of similar rows, not one person")
    )
    not_promises = (
        "**What it does not promise.** It says nothing about groups that were not defined (check that the groups "
        "match the people you care about), nothing reliable about groups below γ (marked †), and "
        f"nothing about individuals: {spread}. It does not make a model fair in other senses (equal error rates, "
        "equal outcomes), and calibrated predictions can still be uninformative."
        + (" Coverage is an average over rows, not a per-person promise." if has_intervals else "")
    )
    return how, promises, not_promises


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
def _outside(audit) -> str:
    note = outside_range_note(audit.params) if audit is not None and isinstance(audit.params, dict) else None
    return f". Note: {note}." if note else ""


def _param_rows(model, audit, delta, gamma, label, units: str = "") -> list:
    p, info, sc = model.params, dict(model.info or {}), model.scale
    moments = tuple(p.moments)
    k = max(moments) if moments else 1
    used_alpha, used_beta = descent_thresholds(model)
    mb = 1.0 / used_alpha**2 - 1.0  # the paper's bound is on the threshold the descent used
    beta_bound = 1.0 / p.beta**2 - 1.0 if p.beta > 0 else float("inf")
    rounds = info.get("rounds", "–")
    kept = info.get("kept_round")
    rounds_txt = f"{rounds}" + (
        f" (kept round {kept}: stopped at the best held-out error)"
        if kept is not None and rounds != "–" and kept != rounds
        else ""
    )
    conv = info.get("converged")
    conv_txt = (
        "yes"
        if conv
        else (
            "no (stopped by the user)"
            if info.get("stopped_by_user")
            else "no (round cap or early stop: the guarantees below are not reached)"
        )
    )
    if conv is None:
        conv_txt = "unknown"
    odd = (
        "; odd moments as E|y − μ|^a"
        if p.odd_moments == "absolute" and any(a % 2 for a in moments)
        else ("; odd moments signed" if any(a % 2 for a in moments) else "")
    )
    src = getattr(sc, "source", "declared")
    src_txt = {
        "declared": "declared by the user",
        "robust": "robust: clipped at quantiles of the data (not declared)",
    }.get(src, "observed min/max of the fitting data (not declared)")
    note = info.get("label_note")
    if src == "robust" and isinstance(note, str) and note.strip():
        src_txt += f"; {note.strip()}"
    elif src not in ("declared", "robust") and isinstance(note, str) and note.strip().startswith("observed"):
        # the dashboard's observed range is of all the table's rows (app.specs), not the fitting rows'
        src_txt = f"the {note.strip()} (not declared)"
    # a mean-only model has no moment threshold: β is neither stated nor explained
    applied = threshold_rules(model)  # older files kept "se" for a paper-step fit: it was the "auto" rule
    rules = (("α", "alpha"), ("β", "beta")) if moments else (("α", "alpha"),)
    auto = [n_ for n_, r in rules if applied[r] == "auto"]
    se = [n_ for n_, r in rules if applied[r] == "se"]
    auto_txt = f"; {' and '.join(auto)} chosen automatically just above the sampling noise" if auto else ""
    missed = not se and (p.alpha > used_alpha or (used_beta is not None and p.beta > used_beta))
    if missed:  # early stopping kept a round that misses the thresholds the descent used
        auto_txt += (
            f"; the descent used α = {F.format_number(used_alpha, 3)}"
            + (f", β = {F.format_number(used_beta, 3)}" if used_beta is not None else "")
            + f", and the kept model achieves the values stated here ({missed_reason(info)})"
        )
    if se:
        auto_txt += (
            f"; {' and '.join(se)}: the values the model achieves on its fitting rows (cells were corrected "
            f"only when |t| >= {float(info.get('z', 0)):.2f} against their own standard error, whole "
            f"groups at {float(info.get('z_group', 0)):.2f}"
            + (
                "; whole groups' moments left to the cell step after the descent"
                if moments and p.z_group_moment >= NO_GROUP_MOMENT_Z
                else f"; a whole group's moments from |t| >= {p.z_group_moment:g}, part-way: the share "
                f"max({SHRINK_MIN:g}, 1 − {p.moment_shrink:g}/t²) of the gap to its own fitting-row moment"
                if moments and getattr(p, "moment_shrink", 0) > 0 and p.z_group_moment >= 0
                else ""
            )
            + ")"
        )
    secs = f", descent {float(info['seconds']):.2f} s" if "seconds" in info else ""
    base_text = describe_base(model.init_mean, info)
    rows = [
        (
            "Label",
            f"{label} in {interval_text(sc.lo, sc.hi, 6)}, range {src_txt}" + _outside(audit),
        ),
        ("Mode", str(info.get("mode", "–"))),
        (
            "Thresholds",
            f"α = {F.format_number(p.alpha, 3)} (means)"
            + (f", β = {F.format_number(p.beta, 3)} (moments)" if moments else "")
            + f"; mass-weighted, label scaled to [0, 1]{auto_txt}",
        ),
        (
            "Predictors",
            (("mean and variance" if k == 2 else f"mean and central moments 2..{k}{odd}") if moments else "mean only")
            + f"; m = {p.m} buckets per predictor (mean bucket width {F.format_number((sc.hi - sc.lo) / p.m, 3)} {units or label + ' units'})",
        ),
        (
            "Step rule",
            f"{p.step}"
            + (
                " (shift each violating cell by its mean residual)"
                if p.step == "exact"
                else " (the paper's fixed step α or β)"
            ),
        ),
        ("Converged", f"{conv_txt}; {rounds_txt} round{'s' if rounds != 1 else ''}{secs}"),
        (
            "Mean updates",
            f"{info.get('mean_updates', '–'):,} of at most 1/α² − 1 = {mb:,.0f}"
            if isinstance(info.get("mean_updates"), int)
            else "–",
        ),
        *(
            [
                (
                    "Moment updates",
                    (
                        f"{info.get('moment_updates'):,} in total, the largest moment pass "
                        f"{info.get('max_moment_updates_per_call', '–'):,} "
                        f"(bound 1/β² − 1 = {beta_bound:,.0f} per pass)"
                    )
                    if isinstance(info.get("moment_updates"), int)
                    and isinstance(info.get("max_moment_updates_per_call"), int)
                    else str(info.get("moment_updates", "–")),
                )
            ]
            if moments
            else []
        ),
        *([("Base prediction", base_text)] if base_text else []),
        *([("After the descent", cells_text)] if (cells_text := describe_cells(info)) else []),
        *([("What each stage changed", stages_text)] if (stages_text := describe_stages(info.get("stages"))) else []),
        (
            "Fitting rows",
            f"{info.get('n_fit', '–'):,} fitted, {info.get('n_calibration', 0):,} held out"
            + (
                "; intervals calibrated on all of them out of fold (5-fold cross-fitting)"
                if (model.extras.get("intervals") or {}).get("rows") == "cross-fit"
                else " for interval calibration"
            )
            if isinstance(info.get("n_fit"), int)
            else "–",
        ),
        (
            "Audit settings",
            f"δ = {delta:g} (target coverage {1 - delta:.0%}), γ = {gamma:g} (smallest cell mass the guarantees cover)",
        ),
    ]
    return rows


def _data_rows(audit, model, y, data_name, gamma) -> tuple[list, list]:
    bg = audit.by_group
    n = len(y)
    rows = [("Data", f"{data_name}: {n:,} labelled rows audited")]
    notes = []
    if len(bg):
        rows.append(("Groups", f"{len(bg):,} (overlapping; the whole population is the group 'all')"))
        if "count" in bg:
            small = bg.sort_values("count").head(3)
            rows.append(
                (
                    "Smallest groups",
                    "; ".join(f"{short_name(g, 40)} ({int(c):,} rows)" for g, c in zip(small.index, small["count"])),
                )
            )
            empty = [str(g) for g, c in zip(bg.index, bg["count"]) if int(c) == 0]
            if empty:
                more = f" and {len(empty) - 8} more" if len(empty) > 8 else ""
                notes.append(f"{len(empty)} group(s) have no rows in this data: " + ", ".join(empty[:8]) + more)
        below = [g for g, b in zip(bg.index, below_gamma(audit, bg.index)) if b]
        rows.append(
            (
                "Groups below γ",
                (
                    f"{len(below)}: "
                    + ", ".join(short_name(g, 40) for g in below[:6])
                    + (f" and {len(below) - 6} more (marked † in the figures)" if len(below) > 6 else "")
                )
                if below
                else f"none (every group has mass ≥ γ = {gamma:g})",
            )
        )
    found = discovered_groups(model)
    if found:
        rows.append(
            (
                "Discovered groups",
                f"{len(found)}: "
                + "; ".join(short_name(g, 60) for g in found[:6])
                + (f" and {len(found) - 6} more" if len(found) > 6 else ""),
            )
        )
        notes.append(DISCOVERED_NOTE)
    return rows, notes


DISCOVERED_NOTE = (
    "Discovered groups were not listed by the analyst: the learning-oracle auditor (the dashboard's "
    "Discover, or mmc fit --discover) found them as rules on rows other than the audited ones, and "
    "kept each only after its error was significant on held-out check rows (Bonferroni-adjusted "
    "over every candidate tested). They were then calibrated like the listed groups; their names "
    "start with 'found:' or 'learned:'."
)


def discovered_groups(model) -> list:
    """Names of the groups of ``model`` that were discovered (the dashboard's Discover: ``info
    ["discovered_groups"]``; ``mmc fit --discover``: ``info["learned_sets"]``), in the model's order."""
    info = dict(getattr(model, "info", None) or {})
    names = {g.get("name") for g in info.get("discovered_groups") or [] if isinstance(g, dict)}
    names |= {n for n in info.get("learned_sets") or [] if isinstance(n, str)}
    return [n for n in model.groups.names if n in names]


PERIOD_TABLE_ROWS = 25  # findings of change listed in the PDF's Over time section; every one is in the JSON


def _over_time_section(doc, res, column: str, heading: str, add_figure) -> None:
    """The section "Over time": what was tested, the changes found (a table) or that none was, and the trend chart
    of each value with a finding (:func:`app.figures_compare.period_figure`, as on the Results page)."""
    from .compare_service import (
        PERIOD_VALUE_WORDS,
        period_chart_values,
        period_findings_table,
        period_headline,
        period_intro,
        period_table_note,
    )
    from .figures_compare import period_figure

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
    audit : a precomputed ``mmc_core.metrics.AuditResult`` for the same arguments (computed if None)
    threshold : the decision threshold of a binary (classifier) model's rates (see :func:`app.report_binary.binary_report`)
    rates : (threshold, rates, disparities) of a binary model at a threshold chosen after the audit (the dashboard's
        slider; :func:`app.pipeline.classifier_rates`): the report's rates, disparities and stated threshold are these
    periods : the model audited per period of ``period_column`` (``mmc_core.compare.compare_periods`` on the same rows;
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
        from mmc_core.metrics import audit as run_audit

        if getattr(model, "task", "regression") == "binary":
            audit = run_audit(model, table, y, base=base, threshold=threshold)
        else:
            audit = run_audit(model, table, y, base=base, delta=delta, gamma=gamma)
    # rows whose category no group lists get no correction from that column: said in the Data section
    unlisted = [note[:1].upper() + note[1:] + "." for note in unlisted_notes(model.groups, table)]
    unlisted += [data_note] if data_note else []
    if getattr(audit, "task", "regression") == "binary":
        from app.report_binary import binary_report

        def over_time(doc, add_figure, number):
            heading = f"{number}. Over time: {short_name(period_column, 40)}"
            _over_time_section(doc, periods, period_column, heading, add_figure)

        return binary_report(
            model,
            audit,
            label,
            data_name,
            rates=rates,
            notes=unlisted,
            render=figure_to_png,
            width=EXPORT_WIDTH,
            over_time=None if periods is None else over_time,
        )
    y = np.asarray(y, dtype=float)
    info = dict(model.info or {})
    label = report_label(model, label)
    units = units or f"{label} units"
    names = {"label": label, "units": units}  # what the figures print about the label
    pdf, doc = title_page(
        f"mmc-audit report: {label} on {data_name}",
        f"Moment multicalibration audit: {label}",
        f"Data: {data_name} · {len(y):,} rows · {len(model.groups.names):,} groups",
    )
    tested = ["means", "bucket calibration"] + (["variances"] if model.moments else [])
    has_intervals = not audit.coverage.empty  # a mean-only audit has one row per group and no columns
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

    doc.heading("Model and run", size=12)
    doc.kv_table(_param_rows(model, audit, delta, gamma, label, units))
    doc.heading("Data", size=12)
    drows, dnotes = _data_rows(audit, model, y, data_name, gamma)
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

    # ---- page 2: how to read + convergence ---------------------------------------------------
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

    def add_figure(fig, heading, caption, max_height=None, fill=False):
        """Heading + figure + caption, kept together; ``fill``: shrink to the space left on the page."""
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

    section = {"n": 0}

    def numbered(text: str) -> str:
        section["n"] += 1
        return f"{section['n']}. {text}"

    skipped = []
    hist = list(info.get("history") or [])
    d_alpha, d_beta = descent_thresholds(model)  # the lines the descent compared against
    add_figure(
        F.convergence_figure(hist, d_alpha, d_beta, 1.0 / d_alpha**2 - 1.0, kept_round=info.get("kept_round")),
        numbered("Convergence of the fit"),
        "Top: the largest mass-weighted mean error over all cells, per round, on the fitting rows (blue) "
        "and the held-out rows (orange); the fit stops when the blue line is below α"
        + (
            " or when no cell's error is significant against its own standard error (the per-cell test)"
            if float(info.get("z") or 0.0) > 0
            else ""
        )
        + ". "
        + (
            "The diamond: the kept round's model after the shrunken cell corrections, the model whose α is stated. "
            if model.has_cells or model.has_moment_cells
            else ""
        )
        + ("Middle: the same for the moments against β. " if model.moments else "")
        + "Bottom: cells still violating α, and cumulative updates against the "
        "theoretical bound. A held-out line far above the fitting line signals over-fitting of small cells.",
        fill=True,
    )

    bg = audit.by_group
    has_var = "pred_var" in bg and np.isfinite(bg["pred_var"].astype(float)).any()
    if has_var:
        pdf.add_page()
        add_figure(
            F.variance_disparity_figure(audit, top=20, **names),
            numbered("Variance disparities by group"),
            "Left: the predicted spread (square root of the mean predicted variance) and the observed spread "
            "(standard deviation of the residual y - prediction within the group) per group. Right: both variances "
            "relative to all rows, with 95% bootstrap intervals. Where blue and orange disagree, the model "
            "misjudges the uncertainty of that group; where both sit away from 1, the group is genuinely "
            "more (or less) variable than the population.",
            max_height=160,
        )
        vt = variance_table(audit, top=8)
        if vt is not None:
            doc.data_table(
                vt,
                col_widths=(55, 12, 15, 15, 19, 35, 35),
                title="Groups whose predicted and observed variance disagree most",
            )
            doc.para(
                f"SD in {units}; pred./obs.: predicted over observed variance (1 = right); "
                "vs all: the group's variance over the whole population's, with a 95% bootstrap interval.",
                size=8,
                color=(70, 70, 70),
            )
    else:
        skipped.append("variance disparities and moment reliability (the model predicts the mean only)")

    cov = audit.coverage
    has_cov = not cov.empty and len(cov.columns) > 0
    if has_cov:
        chunks = even_chunks(list(cov.index), MAX_HEATMAP_ROWS)

        def parts(builder, heading, caption):
            heading = numbered(heading)
            for i, names in enumerate(chunks):
                part = f" (part {i + 1} of {len(chunks)})" if len(chunks) > 1 else ""
                sub = audit_subset(audit, names) if len(chunks) > 1 else audit
                pdf.add_page()
                add_figure(builder(sub), heading + part, caption, fill=True)

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
            f"Mean interval width in {units}. Read together with the coverage: the best method is "
            "the narrowest one that still reaches the target in every group."
            + (f" {past}" if (past := interval_range_note(audit.params)) else ""),
        )
    else:
        skipped.append("interval coverage and widths (no interval method is available for this model)")

    pdf.add_page()
    add_figure(
        F.calibration_before_after_figure(audit, top=20, **names),
        numbered("Mean calibration before and after"),
        "For each group, the largest gap between the average prediction and the average label over the "
        "group's buckets of predicted values, for the base model (or the constant the fit started from) "
        "and after multicalibration.",
        max_height=140,
    )
    calt = calibration_table(audit, top=10)
    if calt is not None:
        w = [60, 14] + [(186 - 74) / (len(calt.columns) - 2)] * (len(calt.columns) - 2)
        doc.data_table(
            calt, col_widths=w, title=f"Calibration errors ({units}; weighted: times the cell's share of rows)"
        )

    moments = tuple(model.params.moments)
    mc = audit.moment_cells
    has_mom = "moment" in mc and not mc.empty

    def has_moment(a):
        return has_mom and (mc["moment"].astype(int) == a).any()

    if has_moment(2):
        pdf.add_page()
        a_max = max(moments) if moments else 2
        second = a_max >= 3 and has_moment(a_max)
        add_figure(
            F.moment_reliability_figure(audit, 2, **names),
            numbered("Variance reliability"),
            "Each dot is a cell (a group × a bucket of the predicted mean × a bucket of the predicted "
            "variance); its area is the cell's share of rows. Dots on the dashed diagonal have the predicted "
            "variance they observe; small cells scatter more.",
            max_height=118 if second else 160,
        )
        if second:
            add_figure(
                F.moment_reliability_figure(audit, a_max, **names),
                numbered(f"Moment {a_max} reliability"),
                f"As above for the {a_max}th central moment.",
                max_height=105,
            )

    if periods is not None:
        _over_time_section(
            doc, periods, period_column, numbered(f"Over time: {short_name(period_column, 40)}"), add_figure
        )

    if skipped:
        doc.ensure(30)
        doc.heading("Not in this report", size=11)
        doc.bullets([s_[0].upper() + s_[1:] + "." for s_ in skipped], size=9)

    out = pdf.output()
    return bytes(out)

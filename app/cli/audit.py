"""``mmc audit`` and ``mmc report``: a fitted model audited on labelled rows, written as JSON (with a classifier's
table on stdout) or as a PDF / HTML report."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

__all__ = ["cmd_audit", "cmd_report", "report_format"]

from .apply import (
    applied_options,
    applied_threshold,
    check_apply_args,
    check_threshold_applies,
    label_scale,
    load_for_apply,
    refuse_base_model_on_dask,
)
from .common import CLIError, progress_lines, refuse_output_over_input


def cmd_audit(args) -> int:
    refuse_output_over_input(args)
    scale = label_scale(args)
    if args.engine == "dask":
        refuse_base_model_on_dask(args)
        from .dask import audit as audit_dask

        return audit_dask(args)
    from mmc_core.auditing import audit
    from mmc_core.fit import atomic_write_text

    check_apply_args(args)
    if args.min_group_count < 2:
        raise CLIError(f"--min-group-count must be at least 2, got {args.min_group_count}")
    from mmc_core.auditing import VARIANCE_TOLERANCE

    tol = VARIANCE_TOLERANCE if args.variance_tolerance is None else args.variance_tolerance
    if not (0 <= tol < 1):
        raise CLIError(f"--variance-tolerance must be in [0, 1), got {args.variance_tolerance}")
    model, df, base, y = load_for_apply(args, need_label=True)
    check_threshold_applies(args, model)
    result = audit(
        model,
        df,
        y,
        **applied_options(args, base),
        error_control=args.error_control,
        min_group_count=args.min_group_count,
        variance_tolerance=tol,
        progress=progress_lines("audit"),
        label_scale=scale,
    )
    doc = result.to_json()
    from .compare import periods_json

    periods = periods_json(args, model, df, y, base)
    if periods is not None:
        doc["periods"] = periods
    atomic_write_text(args.out, json.dumps(doc, allow_nan=False))
    from ..services.specs import interval_range_note, outside_range_note

    for note in (outside_range_note(result.params), interval_range_note(result.params)):
        if note:
            print(f"note: {note.rstrip('.')}.", file=sys.stderr)
    _warn_status(result)
    summary = {
        "findings": len(result.findings),
        "findings_status": result.findings_status,
        "tests": result.params.get("n_tests"),
        "error_control": args.error_control,
    }
    if result.task == "binary":
        print(_classifier_text(result))
        summary = {"task": "binary", "threshold": applied_threshold(args), "groups": len(result.by_group), **summary}
    print(json.dumps(summary))
    return 0


def _classifier_text(result) -> str:
    """The per-group classifier table (before -> after, probability scale) and the disparities, as text."""
    bg = result.by_group
    cols = [
        ("count", "n", "{:.0f}"),
        ("base_rate", "rate", "{:.3f}"),
        ("mean_score_base", "score0", "{:.3f}"),
        ("mean_score", "score", "{:.3f}"),
        ("calib_error_worst_base", "worst0", "{:+.3f}"),
        ("calib_error_worst", "worst", "{:+.3f}"),
        ("log_loss_base", "logloss0", "{:.3f}"),
        ("log_loss", "logloss", "{:.3f}"),
        ("selection_rate", "sel", "{:.3f}"),
        ("tpr", "tpr", "{:.3f}"),
        ("fpr", "fpr", "{:.3f}"),
        ("precision", "prec", "{:.3f}"),
    ]
    width = max([len(str(g)) for g in bg.index] + [5])
    lines = [
        f"classifier audit at threshold {result.params['threshold']:g} (0 = before multicalibration; "
        "every number on the probability scale)",
        "group".ljust(width) + "".join(f"{h:>9}" for _, h, _ in cols),
    ]
    for g, row in bg.iterrows():
        cells = []
        for c, _, fmt in cols:
            v = row.get(c)
            cells.append(f"{'-' if v is None or v != v else fmt.format(v):>9}")
        lines.append(str(g).ljust(width) + "".join(cells))
    disp = result.classifier.disparities if result.classifier is not None else None
    if disp is not None and len(disp):
        lines.append(
            "disparities (after): column, demographic parity diff / ratio, equalized odds diff / ratio, "
            "four-fifths flagged"
        )
        for col, r in disp.iterrows():
            lines.append(
                f"  {col}: {r['demographic_parity_difference']:.3f} / {r['demographic_parity_ratio']:.3f}, "
                f"{r['equalized_odds_difference']:.3f} / {r['equalized_odds_ratio']:.3f}, "
                f"{', '.join(r['four_fifths_flagged']) or 'none'}"
            )
    return "\n".join(lines)


def report_format(args) -> str:
    """--format, or html when --out ends in .html / .htm."""
    fmt = getattr(args, "format", None)
    if fmt:
        return fmt
    return "html" if str(args.out).lower().endswith((".html", ".htm")) else "pdf"


def _warn_status(result) -> None:
    """An audit that tested nothing (or whose findings failed) must not pass for a clean one."""
    if result.findings_status != "ok":
        print(f"warning: the findings are {result.findings_status}", file=sys.stderr)


def cmd_report(args) -> int:
    from ..report.pdf import build_report_pdf
    from ..services.io import write_bytes

    refuse_output_over_input(args)
    check_apply_args(args)
    model, df, base, y = load_for_apply(args, need_label=True)
    check_threshold_applies(args, model)
    from mmc_core.auditing import audit

    from .compare import check_period, period_result

    check_period(args, model, df)  # before the audit: a wrong column is said at once
    result = audit(
        model, df, y, **applied_options(args, base), progress=progress_lines("report"), label_scale=label_scale(args)
    )
    periods = period_result(args, model, df, y, base)
    over_time = {} if periods is None else {"periods": periods, "period_column": args.period}
    build: Callable[..., bytes] = build_report_pdf
    if report_format(args) == "html":
        from ..report.html import build_report_html as build
    page = build(
        model,
        df,
        y,
        **applied_options(args, base),
        label=args.label,
        data_name=os.path.basename(args.data),
        audit=result,
        **over_time,
    )
    write_bytes(args.out, page)
    _warn_status(result)
    return 0

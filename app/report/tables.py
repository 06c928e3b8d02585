"""The tables and texts of the regression PDF report: number formatting, the compact variance / coverage /
calibration tables (the largest groups first, groups below gamma marked), the plain-language key findings
(:func:`findings_summary`, also used by the classifier report) and the helpers that split a long group list over
several heatmaps (:func:`audit_subset`, :func:`even_chunks`). Functions of an ``AuditResult`` with no figure export
(only :func:`findings_section` writes, through the document layer of :mod:`app.report.pdf_doc`); :mod:`app.report.pdf`
lays them out.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd

from ..figures import charts as F
from ..figures.figure_style import below_gamma, coverage_tested, short_name
from ..services.specs import not_converged_note


def _num(v, digits: int = 3) -> str:
    """The figures' number format, with very large or small numbers in exponent notation (narrow table cells)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "–"
    if math.isfinite(f) and f != 0 and abs(f) >= 1e9:  # scientific notation from 1e9 only (issue 35)
        return f"{f:.{digits - 1}e}"
    return F.format_number(f, digits)


def _pct(v) -> str:
    return F.format_number(v, 1, "%")


def _name_col(audit, names, n=30) -> list:
    below = below_gamma(audit, names)
    return [short_name(nm, n) + (F.BELOW_GAMMA_MARK if b else "") for nm, b in zip(names, below)]


def priority_groups(audit) -> list:
    """The groups a chart with room for a few shows first: those with findings (by harm), those a classifier's
    four-fifths rule flags, then the scorecard's order (harm, then evidence)."""
    out = [f.get("group") for f in (audit.findings or [])]
    ca = getattr(audit, "classifier", None)
    disp = getattr(ca, "disparities", None)
    if isinstance(disp, pd.DataFrame) and "four_fifths_flagged" in disp:
        for flagged in disp["four_fifths_flagged"]:
            out += list(flagged or [])
    card = getattr(audit, "scorecard", None)
    if card is not None:
        out += [g for g, h, p in zip(card.index, card["harm"], card["p_min"]) if h > 0 or p < 0.5]
    return [g for g in dict.fromkeys(out) if isinstance(g, str)]


def scorecard_table(audit, top: int | None = None, name_chars: int = 30) -> pd.DataFrame | None:
    """The audit's group scorecard (mmc_core.auditing.scorecard) as the dashboard and the PDF show it: per group (sorted by
    harm, then evidence) n, the mean error, spread ratio and coverage with their 95% intervals, what its size
    lets the audit detect (80% power), and the kinds of its findings. Groups too small to test say so. ``top``:
    the first rows only. None for an audit without a scorecard (a failed findings step, an old audit)."""
    card = getattr(audit, "scorecard", None)
    if card is None or len(card) == 0:
        return None
    d = card if top is None else card.iloc[:top]

    def ci(v, lo, hi, digits=3):  # ";" between the ends, as figure_style.interval_text: "-3,520 [-4,300; -2,700]"
        return "–" if not np.isfinite(float(v)) else f"{_num(v, digits)} [{_num(lo, digits)}; {_num(hi, digits)}]"

    tested = d["tested"].to_numpy(bool)
    det = d["mean_error_detectable"].to_numpy(float)
    if "mean_error_percent" in d:  # a log label: the mean error as the percent difference of the original values

        def pct(v):
            return f"{v:+.1f}%" if abs(v) < 1e3 else f"{_num(v, 3)}%"

        mean_col, mean_cells = (
            "mean error, % [95% CI]",
            [
                "–" if not np.isfinite(v) else f"{pct(v)} [{pct(lo)}; {pct(hi)}]"
                for v, lo, hi in d[["mean_error_percent", "mean_error_percent_lo", "mean_error_percent_hi"]].to_numpy(
                    float
                )
            ],
        )
        det_cells = [f"±{100 * np.expm1(v):.1f}%" if np.isfinite(v) else "" for v in det]
    else:
        mean_col = "mean error [95% CI]"
        mean_cells = [ci(*v) for v in d[["mean_error", "mean_error_lo", "mean_error_hi"]].to_numpy(float)]
        det_cells = [f"±{_num(v, 2)}" if np.isfinite(v) else "" for v in det]
    rows = {
        "group": _name_col(audit, d.index, name_chars),
        "rows": [f"{int(n):,}" for n in d["n"]],
        mean_col: mean_cells,
        "detectable": [c if t and c else "too small to test" for c, t in zip(det_cells, tested)],
        "spread obs/pred [95% CI]": [
            ci(v, lo, hi, digits=2)
            for v, lo, hi in d[["spread_ratio", "spread_ratio_lo", "spread_ratio_hi"]].to_numpy(float)
        ],
        "coverage [95% CI]": [
            "–" if not np.isfinite(c) else f"{c:.0%} [{lo:.0%}; {hi:.0%}]"
            for c, lo, hi in d[["coverage", "coverage_lo", "coverage_hi"]].to_numpy(float)
        ],
        "findings": [f or "–" for f in d["findings"]],
    }
    if getattr(audit, "task", "regression") == "binary":
        # a classifier's audit tests the probability only: its mean error is the share of positives minus the
        # mean predicted probability, and a 0/1 label has no spread or interval columns to show
        rows = {
            "group": rows["group"],
            "rows": rows["rows"],
            "observed − predicted probability [95% CI]": rows[mean_col],
            "detectable": rows["detectable"],
            "findings": rows["findings"],
        }
    return pd.DataFrame(rows)


def mean_error_note(audit, units: str) -> str:
    """What the scorecard's mean error column holds: label units, or percent for a log label."""
    if getattr(audit, "task", "regression") == "binary":
        return "Observed − predicted: the group's share of positives minus its mean predicted probability."
    if getattr(audit, "params", {}).get("label_scale") == "log":
        return (
            "Mean error: observed - predicted of the log label, shown as the percent difference of the original "
            "values (observed above predicted is +)."
        )
    return f"Mean error: observed - predicted, in {units}."


def variance_table(audit, top: int = 12) -> pd.DataFrame | None:
    """The groups whose predicted and observed variance disagree most (largest |log(predicted/observed)|),
    the groups with a variance finding first (a group on page 1's findings was left out of a top-8 table that
    put groups below gamma last)."""
    bg = audit.by_group
    if not {"pred_var", "emp_var"} <= set(bg.columns):
        return None
    pv, ev = bg["pred_var"].astype(float), bg["emp_var"].astype(float)
    ok = np.isfinite(pv) & np.isfinite(ev) & (pv > 0) & (ev > 0)
    if "count" in bg:
        ok &= bg["count"].astype(float) >= 20  # a variance from a handful of rows is noise
    d = bg[ok]
    if d.empty:
        return None
    gap = np.abs(np.log(d["pred_var"].astype(float) / d["emp_var"].astype(float)))
    small = pd.Series(below_gamma(audit, d.index), index=d.index, dtype=float)
    found = {f.get("group") for f in (audit.findings or []) if f.get("kind") == "variance"}
    flagged = pd.Series([g in found for g in d.index], index=d.index, dtype=float)
    d = d.loc[
        (gap - 1e6 * small + 1e7 * flagged).sort_values(ascending=False).index[:top]
    ]  # findings, then mass >= gamma

    def ci(v, lo, hi):
        return f"{_num(v, 2)} [{_num(lo, 2)}; {_num(hi, 2)}]"

    def col(c):
        return d[c] if c in d else pd.Series(np.nan, index=d.index)

    return pd.DataFrame(
        {
            "group": _name_col(audit, d.index, 34),
            "rows": [f"{int(v):,}" for v in d["count"]] if "count" in d else "–",
            "pred. SD": [_num(math.sqrt(v)) for v in d["pred_var"].astype(float)],
            "obs. SD": [_num(math.sqrt(v)) for v in d["emp_var"].astype(float)],
            "pred./obs.": [_num(p_ / e_) for p_, e_ in zip(d["pred_var"].astype(float), d["emp_var"].astype(float))],
            "pred. vs all": [ci(*t) for t in zip(col("var_ratio"), col("var_ratio_lo"), col("var_ratio_hi"))],
            "obs. vs all": [
                ci(*t) for t in zip(col("emp_var_ratio"), col("emp_var_ratio_lo"), col("emp_var_ratio_hi"))
            ],
        }
    )


def coverage_table(audit, delta: float) -> pd.DataFrame | None:
    """Coverage per interval method: over all rows, the worst tested group, groups under target - 0.05, width."""
    cov, wid = audit.coverage, audit.width
    if cov.empty:
        return None
    target = 1 - delta
    big = coverage_tested(audit, cov.index)  # the groups the dashboard's headline and heatmaps read
    rows = []
    for m in cov.columns:
        c = cov[m].astype(float)
        overall = c.get("all", np.nan) if "all" in c.index else np.nan
        cb = c[big]
        worst = cb.idxmin() if cb.notna().any() else None
        rows.append(
            {
                "method": F.METHOD_LABELS.get(str(m), str(m)),
                "coverage (all)": _pct(overall),
                "worst group (mass ≥ γ)": f"{short_name(worst, 26)}: {_pct(cb.min())}" if worst is not None else "–",
                f"groups under {target - 0.05:.0%}": f"{int((cb < target - 0.05).sum())} of {int(cb.notna().sum())}",
                "mean width (all)": _num(wid[m].astype(float).get("all", np.nan)) if m in wid else "–",
            }
        )
    return pd.DataFrame(rows)


def calibration_table(audit, top: int = 12) -> pd.DataFrame | None:
    """The ``top`` groups by worst calibration-cell error (base model's if known), groups of mass >= gamma first."""
    bg = audit.by_group
    if "calib_error_worst" not in bg:
        return None
    has_base = "calib_error_worst_base" in bg and np.isfinite(bg["calib_error_worst_base"].astype(float)).any()
    key = bg["calib_error_worst_base"].astype(float) if has_base else bg["calib_error_worst"].astype(float)
    key = key.fillna(-1.0) - 1e6 * pd.Series(below_gamma(audit, bg.index), index=bg.index, dtype=float)
    d = bg.loc[key.sort_values(ascending=False).index[:top]]  # groups of mass >= gamma first
    out = {"group": _name_col(audit, d.index, 34), "rows": [f"{int(v):,}" for v in d["count"]] if "count" in d else "–"}
    if "mean_label" in d:
        out["mean label"] = [_num(v) for v in d["mean_label"]]
    if has_base:
        out["worst cell, base"] = [_num(v) for v in d["calib_error_worst_base"]]
    out["worst cell, after"] = [_num(v) for v in d["calib_error_worst"]]
    if "calib_error_worst_weighted" in d:
        if has_base and "calib_error_worst_weighted_base" in d:
            out["weighted, base"] = [_num(v) for v in d["calib_error_worst_weighted_base"]]
        out["weighted, after"] = [_num(v) for v in d["calib_error_worst_weighted"]]
    return pd.DataFrame(out)


_MAX_FINDINGS = 8


def findings_summary(audit) -> dict:
    """What the findings section says, as data (shared by the PDF and the dashboard): the findings to show
    (most significant first, at most ``_MAX_FINDINGS``), how many there are, how many tests were made, the
    error control, the smallest group tested, the descriptive disparities, and a failure message if the
    findings could not be computed."""
    params, status, found = audit.params, audit.findings_status, list(audit.findings)
    control = {"holm": "Holm (family-wise error)", "bh": "Benjamini-Hochberg (false discovery rate)"}.get(
        params.get("error_control"), str(params.get("error_control"))
    )
    return {
        "failed": status.removeprefix("failed:").strip() if status.startswith("failed") else None,
        "untestable": (
            f"Nothing could be tested: no group has {params.get('min_group_count')} or more audit rows. Audit a "
            "larger table before reading anything into the tables and figures."
            if status.startswith("untestable") or params.get("n_tests") == 0
            else None
        ),
        "shown": found[:_MAX_FINDINGS],
        "n_found": len(found),
        "n_tests": params.get("n_tests"),
        "control": control,
        "level": params.get("findings_level"),
        "min_count": params.get("min_group_count"),
        "variance_note": _variance_note(params.get("variance_tolerance")),
        "interval_note": _interval_note(found, params.get("n_tests")),
        "disparities": list(audit.disparities)[:3],
    }


def _interval_note(found, n_tests) -> str:
    """How the findings' intervals are adjusted, in words ("" without findings, or for audits made before the
    adjustment existed)."""
    from mmc_core.auditing import percent

    miss = [f.get("interval_miss") for f in found]
    fcr = found[0].get("interval_fcr") if found else None
    if not found or any(not isinstance(v, (int, float)) for v in miss) or not isinstance(fcr, (int, float)):
        return ""
    return (
        f" Each finding's confidence interval allows for its selection among the {n_tests} tests (Benjamini and "
        f"Yekutieli's false-coverage-rate intervals, each missing with probability {miss[0]:.2g}): on average at "
        f"most {percent(fcr)} of the findings' intervals miss the true value."
    )


def _variance_note(tol) -> str:
    """How a variance finding is judged, in words ("" for audits made before the tolerance existed)."""
    if tol is None:
        return ""
    if not tol:
        return " A variance counts as misstated when observed / predicted differs from 1 beyond chance."
    return f" A variance counts as misstated only when it is off by more than {1 + tol:.2g}x beyond chance."


def findings_section(doc, audit, tested: str, none_found: str) -> None:
    """The "Key findings" block of both PDF reports: the findings shown (any more are counted, and where to find
    them said) or ``none_found``, then what was ``tested`` and how; or why the findings could not be computed. Then the
    descriptive variance disparities, if any."""
    s = findings_summary(audit)
    doc.heading("Key findings", size=12, space=1)
    if s["failed"]:
        doc.para(
            f"The findings could not be computed ({s['failed']}); the tables below still hold the numbers.",
            color=(170, 40, 0),
        )
        return
    scope = (
        f"{s['n_tests']} tests of {tested} of at least {s['min_count']} rows, adjusted together by {s['control']} "
        f"at {s['level']:g}.{s['variance_note']}{s['interval_note']}"
    )
    if s["shown"]:
        doc.bullets([f["text"] for f in s["shown"]])
        more = s["n_found"] - len(s["shown"])
        # `mmc report` writes no audit.json (the PDF said the rest were in one): say where they are
        rest = (
            f"{more} further finding(s) are not listed here: `mmc audit` writes every finding to its JSON file, and "
            "the dashboard's Results page lists them all. "
        )
        doc.para(("" if more <= 0 else rest) + scope, size=8.5, style="I")
    elif s["untestable"]:  # not a clean result
        doc.para(s["untestable"], color=(170, 40, 0))
    else:
        doc.para(f"{none_found}: " + scope, style="I")
    if s["disparities"]:
        doc.para("Where the model is more or less certain (descriptive, not defects):", size=9.5)
        doc.bullets([d["text"] for d in s["disparities"]])


def convergence_warning(doc, info: dict, has_moments: bool) -> None:
    """Both reports say, under the findings, when the fit did not converge."""
    if not info.get("converged", True):
        doc.para(
            "**Warning:** " + not_converged_note(has_moments),
            color=(170, 40, 0),
            markdown=True,
        )


def in_sample_warning(doc, n_rows: int, info: dict) -> None:
    """Both reports warn when the audited table is as large as the fitting table (probably the same rows)."""
    if n_rows == info.get("n_rows"):
        doc.para(
            "These data have as many rows as the model was fitted on: if they are the fitting rows, the "
            "numbers in this report are in-sample and optimistic. Audit on rows the model has not seen.",
            size=8.5,
            style="I",
            color=(170, 40, 0),
        )


def audit_subset(audit, names):
    """The audit restricted to some groups (for splitting tall heatmaps over pages): a copy whose coverage, width
    and coverage-by-bucket tables hold only ``names``."""
    names = list(names)

    def take(t):
        return t.loc[[n for n in names if n in t.index]] if not t.empty else t

    part = copy.copy(audit)
    part.coverage, part.width = take(audit.coverage), take(audit.width)
    part.coverage_by_bucket = take(audit.coverage_by_bucket)
    part.coverage_by_bucket_of = {m: take(t) for m, t in audit.coverage_by_bucket_of.items()}
    return part


def even_chunks(index, size: int) -> list:
    idx = list(index)
    if len(idx) <= size:
        return [idx]
    k = math.ceil(len(idx) / size)
    step = math.ceil(len(idx) / k)
    return [idx[i : i + step] for i in range(0, len(idx), step)]

"""How findings are written: the sentence of each finding (:func:`describe`), its p-value in words
(:func:`p_words`), shares as percentages (:func:`percent`) and a log label's mean errors as percent
differences (:func:`log_percent`, :func:`with_percent`).

Apart from the tests (:mod:`mmc_core.auditing.findings`): the CLI, the reports and the dashboard read these words.
"""

from __future__ import annotations

import math

import numpy as np

from ..common.errors import MMCError

__all__ = ["P_FLOOR", "describe", "log_percent", "p_words", "percent", "with_percent"]


def _g(v) -> str:
    """Three significant digits, in the analyst's notation: thousands separators below 1e9 ("22,300", not
    "2.23e+04"), tiny values written out ("0.0000123"); scientific notation from 1e9 only."""
    out = f"{v:.3g}"
    try:
        f = float(out)
    except ValueError:
        return out
    if 1e3 <= abs(f) < 1e9:
        return f"{f:,.0f}"
    if 0 < abs(f) < 1e-4:
        return np.format_float_positional(f, trim="-")
    return out


def _sd(variance) -> float:
    v = float(variance)
    return math.sqrt(v) if v >= 0 else float("nan")


def _within_note(groups) -> str:
    if not groups:
        return ""
    shown = ", ".join(str(g) for g in groups[:3]) + (f" and {len(groups) - 3} more" if len(groups) > 3 else "")
    return (
        f" Part of this spread may be the mean error found on {shown}, which cover(s) part of this group: a "
        "bias on some of its rows spreads the residuals, and the variance may be right once the mean is."
    )


def log_percent(x):
    """A difference of natural logs as the percent difference of the original values: 0.05 -> 5.13 (and the
    ends of an interval map to the ends of the percent interval, since the map is increasing)."""
    return 100.0 * np.expm1(np.asarray(x, dtype=float))


def with_percent(rec: dict) -> dict:
    """A mean or calibration finding of a natural-log label with ``percent`` and ``percent_interval`` added (the
    original values' ratio of geometric means, observed / predicted, minus 1) and its sentence saying them;
    other kinds are returned unchanged. A new dict: the caller's record is not changed."""
    if rec.get("kind") not in ("mean", "calibration"):
        return rec
    out = dict(rec)
    out["percent"] = float(log_percent(rec["estimate"]))
    out["percent_interval"] = [float(v) for v in log_percent(rec["interval"])]
    if "text" in out:
        out["text"] = describe(out)
    return out


def _pct(v: float, sign: str = "+") -> str:
    """5.126 -> "+5.1%" ("5.1%" with ``sign=""``); thousands as the other numbers of the sentences."""
    return f"{v:{sign}.1f}%" if abs(v) < 1e3 else ("+" if sign and v > 0 else "") + f"{_g(v)}%"


def percent(share: float) -> str:
    """0.95 -> "95%", 0.975 -> "97.5%" (no rounding to a level that was not asked for)."""
    return f"{100 * share:.10g}%"


def _ci_words(rec: dict) -> str:
    """ "95% CI", or "selection-adjusted 95% CI" for an interval that allows for the finding's selection among
    all the tests (:func:`fcr_miss`; 95% = 1 - the false coverage-statement rate ``interval_fcr``)."""
    fcr = rec.get("interval_fcr", 0.05)
    fcr = fcr if isinstance(fcr, (int, float)) and 0 < fcr < 1 else 0.05
    return ("selection-adjusted " if "interval_miss" in rec else "") + f"{percent(1 - fcr)} CI"


# Below this a p-value is stated as a bound: the t-type tests are normal approximations (Hall's skewness
# correction included) whose far tail no data set of a few dozen rows can vouch for (a 31-row group of an
# affairs count read "adjusted p = 2.2e-37")
P_FLOOR = 1e-6


def p_words(p: float) -> str:
    """'p = 0.0033', 'p = 0.0000076' or, below ``P_FLOOR``, 'p < 0.000001' (the record keeps the computed value):
    written out in full, as every number below 1e9 is (issue 35; "p = 7.6e-06" was the only scientific notation
    left on a Results page)."""
    if p < P_FLOOR:
        return f"p < {np.format_float_positional(P_FLOOR, trim='-')}"
    out = f"{p:.2g}"
    return f"p = {np.format_float_positional(float(out), trim='-') if 'e' in out else out}"


def describe(rec: dict) -> str:
    """One plain sentence for a finding record (the numbers are the record's)."""
    kind, g, n = rec["kind"], rec["group"], rec["n"]
    lo, hi = rec["interval"]
    ci = _ci_words(rec)
    padj = f"adjusted {p_words(rec['p_adjusted'])}, {rec['adjustment']}"
    if kind in ("mean", "calibration"):
        where = (
            f"group {g}"
            if kind == "mean"
            else f"group {g} with predictions in [{_g(rec['bucket'][0])}; {_g(rec['bucket'][1])})"
        )
        verb = "under-predicts" if rec["estimate"] > 0 else "over-predicts"
        out = (
            f"For {where} (n={n}) the model {verb} the mean: observed {_g(rec['observed'])} vs predicted "
            f"{_g(rec['predicted'])} (difference {_g(rec['estimate'])}, {ci} {_g(lo)} to {_g(hi)}; {padj})."
        )
        if "percent" in rec:  # a log label: the same difference on the original scale
            pc, (plo, phi) = rec["percent"], rec["percent_interval"]
            out += (
                f" On the original scale (a log label): observed {_pct(abs(pc), '')} "
                f"{'above' if pc > 0 else 'below'} predicted ({ci} {_pct(plo)} to {_pct(phi)})."
            )
        return out
    if kind == "variance":
        verb = "understates" if rec["estimate"] > 1 else "overstates"
        tol = rec.get("tolerance") or 0.0
        beyond = f"; by more than {1 + tol:.2g}x" if tol > 0 else ""
        # the interval inverts the finding's own test (metrics._selection_adjusted_intervals), so a finding's
        # interval is clear of the tolerance band; a record whose interval is not (made by other code, or before
        # that) is said to be so, never passed off as "by more than 1.1x"
        band = 1 + tol
        if (lo <= band) if rec["estimate"] > 1 else (hi >= 1 / band):
            beyond = f"; the interval reaches within {band:.2g}x: not a finding by its own interval"
        return (
            # standard deviations in the sentence (the label's own units; variances are in squared units an
            # analyst does not read), the test's ratio of variances beside them
            f"For group {g} (n={n}) the model {verb} its uncertainty: predicted SD {_g(_sd(rec['predicted']))}, "
            f"observed residual SD {_g(_sd(rec['observed']))} (observed variance {rec['estimate']:.2f} times the "
            f"predicted, {ci} {lo:.2f}-{hi:.2f}{beyond}; {padj})." + _within_note(rec.get("mean_findings_within"))
        )
    if kind == "coverage":
        return (
            f"The {rec['method']} {rec['target']:.0%} intervals cover only {rec['estimate']:.1%} of group {g} "
            f"(n={n}, {ci} {lo:.1%}-{hi:.1%}; {padj})."
        )
    raise MMCError(f"unknown finding kind {kind!r}")

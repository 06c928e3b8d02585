"""The dashboard's comparison of two runs made in the session, or of a run and an uploaded model file: pure
functions over AuditRun and FittedModel objects (no Streamlit), so the Compare page stays a thin view. Two runs
are compared on the rows both held out for testing (neither model was fitted on them), each with its own base
prediction, on the union of both models' groups; an uploaded model is compared on the current run's test rows,
with the current run's base prediction when it needs one."""

from __future__ import annotations

import numpy as np
import pandas as pd

from app.services.run_tables import with_variance
from mmc_core import GroupSet
from mmc_core.comparison import POINTS, ComparisonResult, compare, points_text, side

MAX_PAST_RUNS = 4  # runs kept for comparison besides the current one (each holds its model and predictions)


def remember(past: list, run) -> list:
    """``past`` with ``run`` first (the newest), at most MAX_PAST_RUNS, without repeats."""
    return [run] + [r for r in past if r is not run][: MAX_PAST_RUNS - 1]


def comparable(current, past: list) -> list:
    """The past runs that can be compared with ``current``: the same table and label (prepared alike: the same
    log and clipping, so both predict the same numbers), the same task, with test rows in common."""
    out = []
    for r in past:
        if r.data_key != current.data_key or r.label.name != current.label.name:
            continue
        if getattr(r.model, "task", "regression") != getattr(current.model, "task", "regression"):
            continue
        rows = np.intersect1d(r.test_rows, current.test_rows)
        if rows.size and np.array_equal(r.label.y[rows], current.label.y[rows]):
            out.append(r)
    return out


def describe(run, number: int) -> str:
    """How the page names a run: when it ran and what it was."""
    s = run.settings
    when = pd.Timestamp(run.finished_at, unit="s").strftime("%H:%M:%S") if run.finished_at else "earlier"
    return (
        f"Run {number} ({when}): {len(run.model.groups.names) - 1} groups, {s.n_moments} moment(s), "
        f"base {run.base_spec.kind}"
    )


def _model(x):
    """The fitted model of a run, or the model itself (an uploaded file)."""
    return getattr(x, "model", x) if hasattr(x, "test_rows") else x


def _union_groups(a, b) -> GroupSet:
    ga, gb = _model(a).groups, _model(b).groups
    known = set(ga.names)
    return ga + GroupSet([g for g in gb.groups if g.name not in known])


def _side(run, df, rows, name, delta, model=None, threshold=None):
    """The side of ``model`` (default: the run's) on ``rows``, with the run's base prediction and threshold (or
    ``threshold``, a classifier's)."""
    from mmc_core.intervals import available_methods

    own = model is None or model is run.model
    model = run.model if model is None else model
    X = with_variance(df.iloc[rows], run, rows) if own else df.iloc[rows]
    base = run.base[rows] if (run.base is not None and model.uses_base) else None
    if getattr(model, "task", "regression") == "binary":
        thr = getattr(run.settings, "threshold", 0.5) if threshold is None else threshold
        return side(model, X, name=name, base=base, threshold=float(thr))
    if model.moments and "calibrated" in available_methods(model):
        return side(model, X, name=name, base=base, method="calibrated", delta=delta)
    pred = model.predict(X, base)
    return side({"mean": pred["mean"], "variance": pred.get("moment_2")}, name=name)


def compare_runs(df: pd.DataFrame, a, b, names=("earlier run", "current run"), delta: float = 0.1) -> ComparisonResult:
    """Run ``b`` against run ``a`` on the test rows both held out, per group of both models."""
    return compare_sides(df, b, a, b, names, delta)


def compare_sides(df: pd.DataFrame, current, a, b, names, delta: float | None = None) -> ComparisonResult:
    """Side ``b`` against side ``a``, each a run (AuditRun) or a fitted model (an uploaded file, predicted with
    ``current``'s base prediction), on the test rows every run among them held out, with ``current``'s label;
    per group of both models. ``delta``: the intervals' miscoverage (default: the current run's)."""
    delta = float(getattr(current.settings, "delta", 0.1)) if delta is None else float(delta)
    rows = current.test_rows
    for x in (a, b):
        if hasattr(x, "test_rows"):
            rows = np.intersect1d(rows, x.test_rows)
    if not rows.size:
        raise ValueError("the two runs have no test rows in common: nothing to compare on")
    y = current.label.y[rows]
    sides = [
        _side(x if hasattr(x, "test_rows") else current, df, rows, n, delta, model=_model(x))
        for x, n in zip((a, b), names)
    ]
    return compare(df.iloc[rows], y, sides[0], sides[1], _union_groups(a, b), delta=delta)


def read_model(data: bytes, file_name: str, current, df: pd.DataFrame):
    """The model in an uploaded file (bounded and checked by FittedModel.from_json), refused with a sentence
    (ValueError) when it cannot be compared with ``current`` on ``df``: another task, a column its groups need
    missing from the table, or a base prediction it needs that the current run does not have."""
    from mmc_core import FittedModel

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{file_name} is not a text (JSON) file") from None
    model = FittedModel.from_json(text, file_name)
    task, cur = getattr(model, "task", "regression"), getattr(current.model, "task", "regression")
    if task != cur:
        raise ValueError(f"{file_name} is a {task} model and the current run is a {cur} audit: they do not compare")
    missing = sorted(model.input_columns() - set(df.columns))
    if missing:
        raise ValueError(
            f"the groups of {file_name} use column(s) this table does not have: {', '.join(map(str, missing[:5]))}"
        )
    if model.uses_base and current.base is None:
        raise ValueError(
            f"{file_name} was fitted on top of a base prediction and the current run has none: choose the base "
            "prediction on the Data page and run again"
        )
    return model


def headline(res: ComparisonResult) -> str:
    """One sentence: how many groups are worse and better off under B, the worst named."""
    a, b = res.names
    worse = list(dict.fromkeys(f["group"] for f in res.worse()))  # in the findings' order: the surest first
    better = list(dict.fromkeys(f["group"] for f in res.better()))
    if not worse and not better:
        return f"No group differs between {a} and {b} beyond chance ({res.n_tests} tests)."

    def named(groups):
        return ", ".join(map(str, groups[:3])) + (f" and {len(groups) - 3} more" if len(groups) > 3 else "")

    parts = []
    if worse:
        parts.append(f"{b} is worse than {a} for {len(worse)} group(s): {named(worse)}")
    if better:
        parts.append(f"{'better' if worse else f'{b} is better than {a}'} for {len(better)} group(s): {named(better)}")
    return sentence("; ".join(parts) + f" ({res.n_tests} tests, adjusted together).")


def group_table(res: ComparisonResult, value: str) -> pd.DataFrame:
    """The per-group table of one compared value, as the page shows it: rows, A, B, the difference B - A (its
    compared form: positive = B worse) with its 95% interval, the detectable difference and the finding (worse /
    better / empty), sorted from the largest worsening to the largest improvement (groups without a difference
    last). A share (coverage, a classifier's rates: ``POINTS``) is shown as it is said everywhere else: A and B
    in percent, the difference, its interval and the detectable difference in percentage points (the column
    names say so); ``res.by_group`` keeps the fractions."""
    tab = res.by_group
    found = {f["group"]: f["direction"] for f in res.findings if f["kind"] == value}
    scale, share, pts = (100.0, " (%)", " (pts)") if value in POINTS else (1.0, "", "")
    out = pd.DataFrame(
        {
            "rows": tab["n"].to_numpy(),
            "A" + share: scale * tab[f"{value}_a"].to_numpy(float),
            "B" + share: scale * tab[f"{value}_b"].to_numpy(float),
            "B - A" + pts: scale * tab[f"{value}_diff"].to_numpy(float),
            "95% low" + pts: scale * tab[f"{value}_lo"].to_numpy(float),
            "95% high" + pts: scale * tab[f"{value}_hi"].to_numpy(float),
            "detectable" + pts: (
                scale * tab[f"{value}_detectable"].to_numpy(float) if f"{value}_detectable" in tab else np.nan
            ),
            "finding": [found.get(g, "") for g in tab.index],
        },
        index=pd.Index([str(g) for g in tab.index], name="group"),
    )
    key = np.nan_to_num(-out["B - A" + pts].to_numpy(float), nan=np.inf)
    return out.iloc[np.argsort(key, kind="stable")]


def sentence(text: str) -> str:
    """``text`` with a capital first letter when it starts with our own words ("the current run ..."); a side's
    own name ("mb is worse ...") is left as its author spelt it."""
    return text[:1].upper() + text[1:] if text.startswith("the ") else text


def period_columns(df: pd.DataFrame, run, max_periods: int | None = None) -> list:
    """Columns that can split the run's test rows into periods: 2 to MAX_PERIODS distinct values, no missing
    values, not the label."""
    from mmc_core.comparison import MAX_PERIODS

    limit = max_periods or MAX_PERIODS
    rows = df.iloc[run.test_rows]
    out = []
    for c in df.columns:
        if c == run.label_spec.column:
            continue
        col = rows[c]
        if col.isna().any():
            continue
        k = col.nunique()
        if 2 <= k <= limit:
            out.append(c)
    return out


def periods_of_run(df: pd.DataFrame, run, column: str, delta: float = 0.1, threshold: float | None = None):
    """The run's model audited per period of ``column`` on its test rows, with the tests of each group's changes
    between consecutive periods (mmc_core.comparison.compare_models.compare_periods). A classifier's rates are at ``threshold``
    (default: the run's), recorded in the result's params as ``threshold``."""
    from mmc_core.comparison import compare_periods

    rows = run.test_rows
    binary = getattr(run.model, "task", "regression") == "binary"
    if threshold is None:
        threshold = float(getattr(run.settings, "threshold", 0.5))
    s = _side(run, df, rows, "the model", delta, threshold=threshold)
    res = compare_periods(
        df.iloc[rows], run.label.y[rows], s, run.model.groups, df[column].to_numpy()[rows], delta=delta
    )
    if binary:
        res.params["threshold"] = float(threshold)
    return res


# ---- the Over time section of the audit's reports (PDF and HTML, from the CLI and the dashboard) ----------------
CONTROL_WORDS = {"holm": "Holm (family-wise error)", "bh": "Benjamini-Hochberg (false discovery rate)"}
PERIOD_VALUE_WORDS = {
    "spread": "spread ratio",
    "mean_error": "mean error",
    "coverage": "interval coverage",
    "rmse": "RMSE",
    "selection_rate": "selection rate",
    "tpr": "true positive rate",
    "fpr": "false positive rate",
}
RATES = ("selection_rate", "tpr", "fpr")  # a classifier's rates at its decision threshold, shown in percent


def period_values(res) -> list:
    """The values the result has per period, in the order the Results page offers them: a classifier's rates
    first (selection rate, TPR, FPR), then its calibration (mean error: observed share minus predicted
    probability) and RMSE; a regression's spread, mean error, coverage and RMSE."""
    order = RATES + ("mean_error", "rmse") if "selection_rate" in res.by_period else tuple(PERIOD_VALUE_WORDS)
    return [v for v in order if v in res.by_period]


def period_intro(res, column: str) -> str:
    """What the Over time section shows and how its changes were tested, in one paragraph."""
    p = res.params
    labels = [str(x) for x in res.periods]
    shown = ", ".join(labels[:6]) + (f", … {labels[-1]}" if len(labels) > 6 else "")
    values = [PERIOD_VALUE_WORDS[v] for v in period_values(res) if f"{v}_change" in res.changes] or ["values"]
    rates = ""
    if "selection_rate" in res.by_period:
        thr = p.get("threshold")
        rates = (
            f" Rates are at the decision threshold{f' {thr:g}' if thr is not None else ''} (decided positive: "
            "predicted probability ≥ threshold); a true (false) positive rate is tested where the group has that "
            "many positives (negatives) in both periods. The mean error is the observed share of positives minus "
            "the mean predicted probability."
        )
    return (
        f"The model audited on each period of the column '{column}' ({len(labels)} periods, in sorted order: "
        f"{shown}; {p['n']:,} rows). For every group with at least {p['min_group_count']} rows in both periods, "
        f"the change of its {', '.join(values[:-1])}{' and ' if len(values) > 1 else ''}{values[-1]} from "
        + ("each period to the next" if p.get("reference", "previous") == "previous" else "the first period")
        + f" is tested: {res.n_tests} tests of change, adjusted together by "
        f"{CONTROL_WORDS.get(p['error_control'], p['error_control'])} at {p['level']:g}. A finding's interval is "
        "selection-adjusted: it keeps its level among the changes selected as findings." + rates
    )


def period_headline(res, column: str) -> str:
    """One sentence: the groups whose values changed between periods of ``column``, or that none did."""
    if not res.n_tests:
        return (
            f"Nothing was tested: no group has {res.params['min_group_count']} or more rows in two periods of "
            f"'{column}' to compare."
        )
    if not res.findings:
        return f"No group's values change between periods of '{column}' beyond chance ({res.n_tests} tests of change)."
    groups = list(dict.fromkeys(str(f["group"]) for f in res.findings))  # the surest first
    named = ", ".join(groups[:3]) + (f" and {len(groups) - 3} more" if len(groups) > 3 else "")
    return (
        f"{len(res.findings)} change(s) between periods of '{column}' found beyond chance, in {len(groups)} "
        f"group(s): {named} ({res.n_tests} tests of change, adjusted together)."
    )


def _change_cells(f: dict, probability: bool = False) -> tuple[str, str]:
    """(from → to, change with its selection-adjusted interval) of one period finding, in the value's units: the
    spread as the factor its ratio was multiplied by, the coverage and a classifier's rates in percentage points,
    other values on the probability scale (``probability``: a classifier's) with three decimals."""
    lo, hi = f["interval"]
    est, kind = f["estimate"], f["kind"]
    if kind == "spread":
        return (
            f"{f['before']:#.3g} → {f['after']:#.3g}",
            f"×{np.exp(est):.3g} (×{np.exp(lo):.3g} to ×{np.exp(hi):.3g})",
        )
    if kind in POINTS:  # the coverage and a classifier's rates: as the finding's sentence says them
        return f"{f['before']:.1%} → {f['after']:.1%}", "{} pts ({} to {})".format(*points_text(est, lo, hi))
    if probability:
        return f"{f['before']:.3f} → {f['after']:.3f}", f"{est:+.3f} ({lo:+.3f} to {hi:+.3f})"
    return f"{f['before']:#.4g} → {f['after']:#.4g}", f"{est:+#.3g} ({lo:+#.3g} to {hi:+#.3g})"


def period_findings_table(res, top: int | None = None) -> pd.DataFrame:
    """The period findings (surest first; at most ``top``) as the reports print them: group, statistic, the two
    periods, the values before and after, the change with its selection-adjusted interval, the adjusted p."""
    from mmc_core.auditing import p_words

    rows = []
    probability = "selection_rate" in res.by_period  # a classifier: its values are on the probability scale
    for f in res.findings[:top]:
        before_after, change = _change_cells(f, probability)
        rows.append(
            [
                str(f["group"]),
                PERIOD_VALUE_WORDS.get(f["kind"], f["kind"]),
                f"{f['reference']} → {f['period']}",
                before_after,
                change,
                p_words(f["p_adjusted"]).replace("p = ", "").replace("p < ", "< "),
            ]
        )
    return pd.DataFrame(
        rows, columns=["group", "statistic", "periods", "from → to", "change (adjusted CI)", "adjusted p"]
    )


def period_table_note(res) -> str:
    """The note under the table of period findings: how each kind of change is printed."""
    kinds = {f["kind"] for f in res.findings}
    parts = []
    if "spread" in kinds:
        parts.append("Spread: observed over predicted variance; its change is the factor the ratio was multiplied by.")
    pts = [PERIOD_VALUE_WORDS[k] for k in ("coverage",) + RATES if k in kinds]
    if pts:
        parts.append(f"{', '.join(pts)[:1].upper() + ', '.join(pts)[1:]}: the change in percentage points.")
    parts.append("Change: the later period minus the earlier, with its selection-adjusted interval.")
    return " ".join(parts)


def period_chart_values(res) -> list:
    """The values the reports chart by period: each with a finding, else the first the result has (the spread,
    or a classifier's selection rate, as the Results page shows first)."""
    have = period_values(res)
    found = {f["kind"] for f in res.findings}
    return [v for v in have if v in found] or have[:1]

"""The dashboard's comparison of two runs made in the session: pure functions over AuditRun objects (no
Streamlit), so the Compare page stays a thin view. Two runs are compared on the rows both held out for testing
(neither model was fitted on them), each with its own base prediction, on the union of both models' groups."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mmc_core import GroupSet
from mmc_core.compare import ComparisonResult, compare, side

MAX_PAST_RUNS = 4  # runs kept for comparison besides the current one (each holds its model and predictions)


def remember(past: list, run) -> list:
    """``past`` with ``run`` first (the newest), at most MAX_PAST_RUNS, without repeats."""
    return [run] + [r for r in past if r is not run][: MAX_PAST_RUNS - 1]


def comparable(current, past: list) -> list:
    """The past runs that can be compared with ``current``: the same table and label, audited, with test rows in
    common."""
    out = []
    for r in past:
        if r.data_key != current.data_key or r.label.name != current.label.name:
            continue
        if getattr(r.model, "task", "regression") != getattr(current.model, "task", "regression"):
            continue
        if np.intersect1d(r.test_rows, current.test_rows).size:
            out.append(r)
    return out


def describe(run, number: int) -> str:
    """How the page names a run: when it ran and what it was."""
    s = run.settings
    when = pd.Timestamp(run.finished_at, unit="s").strftime("%H:%M:%S") if run.finished_at else "earlier"
    return (
        f"run {number} ({when}): {len(run.model.groups.names) - 1} groups, {s.n_moments} moment(s), "
        f"base {run.base_spec.kind}"
    )


def _union_groups(a, b) -> GroupSet:
    known = set(a.model.groups.names)
    return a.model.groups + GroupSet([g for g in b.model.groups.groups if g.name not in known])


def _side(run, df, rows, name, delta):
    from mmc_core.intervals import available_methods

    model = run.model
    X = df.iloc[rows]
    base = run.base[rows] if (run.base is not None and model.uses_base) else None
    if getattr(model, "task", "regression") == "binary":
        return side(model, X, name=name, base=base, threshold=float(getattr(run.settings, "threshold", 0.5)))
    if model.moments and "calibrated" in available_methods(model):
        return side(model, X, name=name, base=base, method="calibrated", delta=delta)
    pred = model.predict(X, base)
    return side({"mean": pred["mean"], "variance": pred.get("moment_2")}, name=name)


def compare_runs(df: pd.DataFrame, a, b, names=("earlier run", "current run"), delta: float = 0.1) -> ComparisonResult:
    """Run ``b`` against run ``a`` on the test rows both held out, per group of both models."""
    rows = np.intersect1d(a.test_rows, b.test_rows)
    y = a.label.y[rows]
    groups = _union_groups(a, b)
    X = df.iloc[rows]
    return compare(X, y, _side(a, df, rows, names[0], delta), _side(b, df, rows, names[1], delta), groups, delta=delta)


def headline(res: ComparisonResult) -> str:
    """One sentence: how many groups are worse and better off under B, the worst named."""
    a, b = res.names
    worse = sorted({f["group"] for f in res.worse()}, key=lambda g: [f["group"] for f in res.worse()].index(g))
    better = sorted({f["group"] for f in res.better()})
    if not worse and not better:
        return f"No group differs between {a} and {b} beyond chance ({res.n_tests} tests)."
    parts = []
    if worse:
        shown = ", ".join(worse[:3]) + (f" and {len(worse) - 3} more" if len(worse) > 3 else "")
        parts.append(f"{b} is worse than {a} for {len(worse)} group(s): {shown}")
    if better:
        parts.append(f"better for {len(better)}")
    return sentence("; ".join(parts) + f" ({res.n_tests} tests, adjusted together).")


def sentence(text: str) -> str:
    """``text`` with a capital first letter when it starts with our own words ("the current run ..."); a side's
    own name ("mb is worse ...") is left as its author spelt it."""
    return text[:1].upper() + text[1:] if text.startswith("the ") else text


def period_columns(df: pd.DataFrame, run, max_periods: int | None = None) -> list:
    """Columns that can split the run's test rows into periods: 2 to MAX_PERIODS distinct values, no missing
    values, not the label."""
    from mmc_core.compare import MAX_PERIODS

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


def periods_of_run(df: pd.DataFrame, run, column: str, delta: float = 0.1):
    """The run's model audited per period of ``column`` on its test rows, with the tests of each group's changes
    between consecutive periods (mmc_core.compare.compare_periods)."""
    from mmc_core.compare import compare_periods

    rows = run.test_rows
    s = _side(run, df, rows, "the model", delta)
    return compare_periods(
        df.iloc[rows], run.label.y[rows], s, run.model.groups, df[column].to_numpy()[rows], delta=delta
    )

"""What the pages derive from a finished run's model on rows of its table: the table the model reads
(:func:`model_table`, with the run's base variance column, which the user's table does not have), the export
table (:func:`predictions_table`), a classifier's rates at a new threshold (:func:`classifier_rates`) and one
row's details (:func:`row_details`). Kept apart from :mod:`app.services.pipeline`, which re-exports them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from app.services.specs import AuditRun


def take_table_rows(df: pd.DataFrame, rows: np.ndarray, columns) -> pd.DataFrame:
    """The ``columns`` of the rows ``rows`` of ``df``, numbered from 0."""
    return df.iloc[rows][list(columns)].reset_index(drop=True)


def with_variance(table: pd.DataFrame, run: AuditRun, rows: np.ndarray) -> pd.DataFrame:
    """``table`` (the rows ``rows`` of the run's table) with the run's base variance column when the run's model
    reads one the table lacks (the in-app base variance); ``table`` itself otherwise."""
    iv = getattr(run.model, "init_variance", None)
    if not iv or run.base_variance is None or iv["column"] in table.columns:
        return table
    return table.assign(**{iv["column"]: np.asarray(run.base_variance, dtype=float)[np.asarray(rows)]})


def model_table(df: pd.DataFrame, run: AuditRun, rows: np.ndarray, extra=()) -> pd.DataFrame:
    """The columns ``run.model`` reads (and ``extra``) of the rows ``rows`` of the run's table ``df``; the base
    variance column of an in-app base variance model (not in ``df``) is filled from ``run.base_variance``."""
    model = run.model
    cols = sorted(set(model.input_columns()) | set(extra), key=str)
    iv = getattr(model, "init_variance", None)
    added = iv["column"] if iv and run.base_variance is not None and iv["column"] not in df.columns else None
    table = take_table_rows(df, rows, [c for c in cols if c != added])
    if added is not None:
        table[added] = np.asarray(run.base_variance, dtype=float)[np.asarray(rows)]
    return table


def predictions_table(
    df: pd.DataFrame,
    run: AuditRun,
    methods=None,
    rows: np.ndarray | None = None,
    file_rows=None,
    threshold: float | None = None,
) -> pd.DataFrame:
    """The original columns plus the row's number in the file, split, base, mean, SD, moments and interval
    ends (per method), in label units (log units if the label was logged). ``rows`` limits it to some rows (all
    by default). ``file_rows``: each row's number among the file's data rows (1-based) when ``df`` was made by
    dropping rows from the file (the Data page's drop buttons), else 1, 2, ...: the column that joins an export
    of a cleaned table, or of its test rows only, back to the file. ``threshold``: a classifier's decision
    threshold of the ``decision`` column (1 when the probability ``mean`` >= it): the one chosen on the
    dashboard, which the PDF's rates use too; by default the one the audit ran at (``run.settings.threshold``)."""
    from mmc_core.intervals import interval_table

    rows = np.arange(len(df)) if rows is None else np.asarray(rows)
    model = run.model
    table = model_table(df, run, rows)
    base = None if run.base is None else run.base[rows]
    preds = model.predict(table, base)
    out = df.iloc[rows].reset_index(drop=True).copy()
    split = np.full(len(df), "", dtype=object)
    for name in ("base", "fit", "calibration", "test"):
        split[run.split[name]] = name
    numbers = np.arange(1, len(df) + 1) if file_rows is None else np.asarray(file_rows, dtype=np.int64)
    if numbers.size != len(df):
        raise ValueError(f"file_rows has {numbers.size} entries for a table of {len(df)} rows")
    new = {"file_row": numbers[rows], "split": split[rows]}
    if base is not None:
        new["base"] = base
    new["mean"] = preds["mean"]
    if getattr(model, "task", "regression") == "binary":  # the probability of the positive class
        from mmc_core.auditing import check_threshold

        thr = run.settings.threshold if threshold is None else check_threshold(threshold)
        new["decision"] = (preds["mean"] >= thr).astype(int)
    if "moment_2" in preds:
        new["sd"] = np.sqrt(np.maximum(preds["moment_2"], 0.0))
    for k, v in preds.items():
        if k != "mean":
            new[k] = v
    if methods:
        ints = interval_table(
            model, table, base=base, delta=run.settings.delta, gamma=run.settings.gamma, methods=list(methods)
        )
        for m, (lo, hi) in ints.items():
            new[f"lower_{m}"], new[f"upper_{m}"] = lo, hi
    prefix = output_prefix(out.columns, new)
    for k, v in new.items():
        out[prefix + k] = v
    out.attrs["mmc_prefix"] = prefix
    return out


def output_prefix(columns, names) -> str:
    """The prefix of the tool's columns in an export: "mmc_", or "mmc_out_" ("mmc_out2_", ...) when the table
    already has a column of one of those names (a user's own ``mmc_mean`` was silently replaced by the model's:
    an exploratory browser check); the user's columns are never overwritten."""
    taken = {str(c) for c in columns}
    prefix, k = "mmc_", 1
    while any(prefix + n in taken for n in names):
        prefix = "mmc_out_" if k == 1 else f"mmc_out{k}_"
        k += 1
    return prefix


def classifier_rates(df: pd.DataFrame, run: AuditRun, threshold: float):
    """(rates, disparities) of a binary run's test rows at a new decision ``threshold``, from the stored
    predictions (no refit; see :func:`mmc_core.auditing.binary.threshold_rates`)."""
    from mmc_core.auditing import check_threshold, threshold_rates

    threshold = check_threshold(threshold)
    test = run.split["test"]
    model = run.model
    X_test = model_table(df, run, test)
    base = None if run.base is None else run.base[test]
    mu = model.predict(X_test, base if model.uses_base else None)["mean"]  # in [floor, 1 - floor]
    if base is not None:
        before = np.clip(base, 0.0, 1.0)
    else:  # the constant the fit started from, as in the audit
        from mmc_core.intervals import initial_constant

        before = np.full(test.size, initial_constant(model))
    return threshold_rates(
        mu,
        run.label.y[test],
        model.groups,
        X_test,
        threshold,
        base=before,
        n_boot=run.settings.n_boot,
        seed=run.split_seed,
    )


def row_details(df: pd.DataFrame, run: AuditRun, row: int, intervals: dict | None = None) -> dict:
    """One row: its values, predictions, intervals per method and the groups it belongs to.

    ``intervals`` ({method: (lower, upper)}) should come from an interval table of many rows (the multi-moment
    cover is defined over a population); without it they are computed on this row alone."""
    model = run.model
    table = model_table(df, run, np.array([row]))
    base = None if run.base is None else run.base[[row]]
    preds = {k: float(v[0]) for k, v in model.predict(table, base).items()}
    if intervals is None:
        from mmc_core.intervals import interval_table

        intervals = {
            m: (float(lo[0]), float(hi[0]))
            for m, (lo, hi) in interval_table(
                model, table, base=base, delta=run.settings.delta, gamma=run.settings.gamma
            ).items()
        }
    memb = model.groups.evaluate(table, 1)
    groups = [model.groups.names[g] for g in range(len(model.groups)) if memb.sizes[g] > 0]
    return {
        "values": df.iloc[row].to_dict(),
        "label": float(run.label.y[row]),
        "base": None if base is None else float(base[0]),
        "pred": preds,
        "intervals": dict(intervals),
        "groups": groups,
    }

"""``mmc fit``: read the table and the groups, build the estimator from the options, fit it with progress lines
and a Ctrl-C that stops between updates, write the model and print what was fitted (notes on stderr, a one-line
JSON summary on stdout). ``--engine dask`` runs :func:`app.cli.dask.fit` instead."""

from __future__ import annotations

import json
import sys
import time

__all__ = ["cmd_fit", "pd_numeric"]

from .common import CLIError, StopOnCtrlC, check_out, estimator_from_args, refuse_output_over_input
from .discover import discovery_kwargs, features


def _fit_columns(args, extra) -> list | None:
    """The columns `mmc fit` uses: only those of a Parquet file are read (its memory limit is checked on the
    columns read); all of them with --discover but no --features."""
    if args.discover and not args.features:
        return None
    used = [
        args.label,
        args.pred,
        args.variance_pred,
        *args.group_cols,
        *(extra.columns() if extra is not None else ()),
    ]
    return [c for c in [*used, *(args.features or ())] if c]


def cmd_fit(args) -> int:
    refuse_output_over_input(args)
    if args.features and not args.discover:
        raise CLIError("--features names the columns --discover may learn groups on: add --discover, or drop it")
    if args.variance_pred and args.n_moments < 2:
        raise CLIError(
            f"--variance-pred gives the variance a starting point: it needs --moments 2 or more, got {args.n_moments}"
        )
    if args.engine == "dask":
        from .dask import fit

        if args.variance_pred:
            raise CLIError("--variance-pred is not supported with --engine dask: fit without --engine dask")

        return fit(args)
    check_out(args.out)
    df, y, base, groups, task, binary_info = _fit_inputs(args)
    est = estimator_from_args(args, task=task, variance_column=args.variance_pred)
    interrupted = _fit_with_progress(args, est, df, y, groups, base)
    info = est.model_.info
    if interrupted:
        print(
            f"mmc: interrupted after {info['rounds']} round(s), {info['mean_updates']} mean and "
            f"{info['moment_updates']} moment updates; the model is NOT converged",
            file=sys.stderr,
        )
        if not args.save_partial:
            print("mmc: nothing was written (use --save-partial to keep a partial model)", file=sys.stderr)
            return 130
    if binary_info is not None:  # the label's own classes (the estimator was given the 0/1 coding)
        binary_info["floor"] = est.binary_.get("floor", 0.0)
        est.model_.binary = est.binary_ = binary_info
    est.save(args.out)
    _fit_notes(est, df, groups)
    print(json.dumps(_fit_summary(args, est)))
    return 0


def _fit_inputs(args):
    """The table, the label (as the estimator takes it), the base prediction and the groups of `mmc fit`, each
    checked with one line naming what is wrong; the (row, group) pairs are counted before any work."""
    from mmc_core import GroupSet

    from ..services.io import column_problem, numeric_column, read_table

    extra = None
    if args.groups:
        extra = GroupSet.from_file(args.groups)  # bounded: size, depth, numbers (mmc_core.common.jsonfile), then schema
    # columns the group file compares with identifiers such as "01" are read as text (as numbers "01" == "1")
    df = read_table(args.data, extra.text_columns() if extra is not None else (), columns=_fit_columns(args, extra))
    task, y, binary_info = _fit_label(df, args)
    base = numeric_column(df, args.pred, "prediction column") if args.pred else None
    if args.variance_pred:
        numeric_column(df, args.variance_pred, "variance column")  # the estimator checks its values
    if args.max_order < 1:
        raise CLIError(f"--max-order must be >= 1, got {args.max_order}")
    for c in args.group_cols:
        if c not in df.columns:
            raise CLIError(f"group column '{c}' is not in the data")
        if c == args.label:
            raise CLIError(f"the label '{c}' cannot define groups (groups must be computable on new rows)")
        if why := column_problem(df[c]):
            raise CLIError(f"group column '{c}' cannot be used: {why}")
    groups = GroupSet.from_columns(df, args.group_cols, args.max_order) if args.group_cols else GroupSet([])
    if extra is not None:
        for col in extra.columns():
            if col not in df.columns:
                raise CLIError(f"group file {args.groups} refers to column '{col}', which is not in the data")
        groups = groups + extra
    from ..services.io import check_fit_size

    memb = groups.evaluate(df)  # the fit's memory and its time before a first line grow with the pairs
    check_fit_size(len(df), memb.n_groups, len(memb.rows) + len(df))  # + the whole table's own group
    del memb
    return df, y, base, groups, task, binary_info


def _fit_with_progress(args, est, df, y, groups, base) -> bool:
    """Fit ``est`` (with --discover: fit, audit and refit) with progress lines on stderr; the first Ctrl-C stops
    the descent before its next update instead of killing it mid-update. Whether it was interrupted."""
    feats = None
    if args.discover:
        from mmc_core.discovery import validate_discovery_params

        feats = features(args, df, {args.label, args.pred, args.variance_pred})
        validate_discovery_params(args.max_depth, args.min_mass, rounds=args.discover_rounds)
    announced: list = []
    intr = StopOnCtrlC()

    def stop_requested() -> bool:  # polled before every update; the first poll says the descent is running
        if not announced:
            announced.append(True)
            print(
                f"mmc: fitting {len(df):,} labelled rows x {len(groups):,} groups"
                + (f" ({args.calibration_fraction:g} of them held out)" if args.calibration_fraction else "")
                + " (Ctrl-C stops after the current update)",
                file=sys.stderr,
                flush=True,
            )
        return intr.hit

    # the same names, Ctrl-C poll and progress lines with and without --discover
    fit_kw = {"label_name": args.label, "base_name": args.pred, "stop": stop_requested, "callback": _progress()}
    with intr:
        if args.discover:
            from mmc_core.discovery import fit_with_discovery

            fit_with_discovery(
                est,
                df,
                y,
                groups,
                base,
                features=feats,
                **discovery_kwargs(args),
                rounds=args.discover_rounds,
                **fit_kw,
            )
        else:
            est.fit(df, y, groups, base_prediction=base, **fit_kw)
    return intr.hit


def _progress():
    """The descent's callback: a line per round on stderr, at most one a second (long runs only)."""
    started, last = time.monotonic(), [0.0]

    def progress(row) -> bool:
        now = time.monotonic() - started
        if now - last[0] >= 1.0:
            last[0] = now
            print(
                f"mmc: round {row['round']}: {row['violating_cells']} violating mean cell(s), "
                f"{row['mean_updates']} mean / {row['moment_updates']} moment updates, {now:.0f} s "
                "(Ctrl-C stops after the current update)",
                file=sys.stderr,
                flush=True,
            )
        return False

    return progress


def _fit_notes(est, df, groups) -> None:
    """The notes of a fit on stderr: empty and small groups, rows missing a group column's value, a clipped base,
    a label range taken from the data."""
    info = est.model_.info
    if info["empty_groups"]:
        print(
            f"note: {len(info['empty_groups'])} group(s) have no fitting rows: " + ", ".join(info["empty_groups"][:10]),
            file=sys.stderr,
        )
    small = info.get("small_groups", [])
    if info["n_fit"] < info["min_count"]:
        print(
            f"note: only {info['n_fit']} fitting row(s), fewer than the {info['min_count']} a correction needs "
            "(alpha/beta 'se'): nothing could be corrected, so the model is its starting prediction. Fit on more "
            "rows, or pass fixed --alpha/--beta values",
            file=sys.stderr,
        )
    elif small:
        print(
            f"note: {len(small)} group(s) have fewer than the {info['min_count']} fitting rows a correction needs "
            f"and were never corrected: " + ", ".join(small[:10]) + (", ..." if len(small) > 10 else ""),
            file=sys.stderr,
        )
    _missing_group_values_notes(df, groups)
    from ..figures.figure_style import interval_text  # plotly: only when a note is printed

    if info.get("base_clipped"):
        print(
            f"note: {info['base_clipped']} base prediction(s) lay outside the label range "
            f"{interval_text(est.label_scale_.lo, est.label_scale_.hi, 6)} and were clipped to it",
            file=sys.stderr,
        )
    if est.label_scale_.source == "observed":
        print(
            f"note: label range taken from the data: {interval_text(est.label_scale_.lo, est.label_scale_.hi, 6)} "
            "(pass --label-range LO,HI to declare it)",
            file=sys.stderr,
        )


def _missing_group_values_notes(df, groups) -> None:
    # a missing value satisfies "!=" and "not in": a column tested that way may hold those rows in a group
    negated = {
        c.column
        for g in groups.groups
        for c in [*g.where, *(c for term in g.any for c in term)]
        if c.op in ("!=", "not in")
    }
    for c in sorted(groups.columns() - negated, key=str):
        n_missing = int(df[c].isna().sum()) if c in df.columns else 0
        if n_missing:  # they are fitted, but none of the column's groups holds them: say so, as predict does
            print(
                f"note: {n_missing} row(s) have no value in group column '{c}': no group of that column holds "
                "them (they stay in 'all' and in groups of other columns)",
                file=sys.stderr,
            )


def _fit_summary(args, est) -> dict:
    """The one-line JSON `mmc fit` prints last: the task, the descent's counts, thresholds, rows and stages."""
    info = est.model_.info
    summary = {"task": info.get("task", "regression")}
    if est.binary_:
        summary["positive"] = est.binary_["positive"]
    summary.update(
        {k: info[k] for k in ("rounds", "mean_updates", "moment_updates", "seconds", "converged", "n_groups")}
    )
    summary.update(
        alpha=est.alpha_,
        beta=est.beta_ if est.model_.moments else None,  # a mean-only model has no moment threshold
        moment_betas={str(a): b for a, b in est.moment_betas_.items()},
        kept_round=info["kept_round"],
        n_fit=info["n_fit"],
        n_calibration=info["n_calibration"],
        label_range=[est.label_scale_.lo, est.label_scale_.hi],
        model=args.out,
    )
    from mmc_core.estimator import describe, describe_cells

    base_text = describe(est.model_.init_mean, info)
    if base_text:
        summary["base_prediction"] = base_text
    cells_text = describe_cells(info)
    if cells_text:
        summary["after_descent"] = cells_text
    from mmc_core.estimator import describe_stages

    if stages_text := describe_stages(info.get("stages")):
        summary["stages"] = stages_text
    from mmc_core.estimator import describe_base_variance

    if bv_text := describe_base_variance(info):
        summary["base_variance"] = bv_text
    if args.discover:
        summary["learned_sets"] = len(info.get("learned_sets", []))
    return summary


def _fit_label(df, args):
    """("regression", float label, None) or ("binary", 0/1 label, {"classes", "positive"})."""
    import pandas as pd

    from mmc_core.auditing import resolve_task

    from ..services.io import column_problem, numeric_column

    if args.task == "regression":
        if args.positive is not None:
            raise CLIError("--positive is only used with a binary label (--task binary or auto)")
        return "regression", numeric_column(df, args.label, "label column"), None
    if args.label not in df.columns or column_problem(df[args.label]):
        return "regression", numeric_column(df, args.label, "label column"), None  # the usual error
    raw = df[args.label]
    if args.task == "auto" and raw.nunique(dropna=True) != 2:
        if args.positive is not None:
            raise CLIError(
                f"--positive {args.positive} was given but the label '{args.label}' is not binary "
                f"(it has {raw.nunique(dropna=True)} distinct values)"
            )
        return "regression", numeric_column(df, args.label, "label column"), None
    positive = args.positive
    if positive is None and not pd_numeric(raw) and not pd.api.types.is_bool_dtype(raw):
        shown = ", ".join(repr(v) for v in sorted(raw.dropna().unique(), key=str))
        raise CLIError(
            f"label column '{args.label}' is not numeric: it has the two values {shown}; to audit it as a "
            "classifier, name the positive class with --positive VALUE"
        )
    if positive is not None and pd_numeric(raw):
        try:
            positive = float(positive)
        except ValueError:
            raise CLIError(f"--positive {args.positive!r} is not a value of the label '{args.label}'") from None
    return resolve_task(raw, "binary", positive, args.label)


def pd_numeric(s) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)

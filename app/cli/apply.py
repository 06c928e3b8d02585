"""A fitted model applied to a table (``mmc predict``, and the loading and checks ``mmc audit`` and ``mmc report``
share with it): the model, the table, the base prediction (a column or an exported base model) and the label,
each checked with one line naming what is wrong."""

from __future__ import annotations

import sys

__all__ = [
    "cmd_predict",
    "load_for_apply",
    "check_apply_args",
    "applied_options",
    "applied_threshold",
    "check_threshold_applies",
    "refuse_base_model_on_dask",
    "label_scale",
]

from .common import (
    CLIError,
    check_out,
    check_prob,
    prediction_columns,
    refuse_output_over_input,
    refuse_overwrite,
)


def label_scale(args) -> str:
    """The audit's ``label_scale`` from --log-label (refused where it cannot apply, before any work)."""
    if not getattr(args, "log_label", False):
        return "linear"
    if getattr(args, "engine", None) == "dask":
        raise CLIError("--log-label needs --engine numpy: the Dask audit writes tables without findings")
    return "log"


# the path options of the commands: an output renamed over an input would replace it (`fit --out DATA.csv` left a
# model where the data was, `report --out MODEL.json` a PDF where the model was)
def check_apply_args(args):
    """--out, --delta and --gamma of the commands that apply a model (predict, audit, report)."""
    check_out(args.out)
    check_prob("--delta", args.delta)
    check_prob("--gamma", args.gamma)


def applied_options(args, base) -> dict:
    """The keyword arguments ``mmc audit`` and ``mmc report`` pass alike (mmc_core.auditing.metrics.audit and
    build_report_pdf take them under the same names): the base prediction, --delta, --gamma, --threshold."""
    return {"base": base, "delta": args.delta, "gamma": args.gamma, "threshold": applied_threshold(args)}


def applied_threshold(args) -> float:
    return 0.5 if args.threshold is None else args.threshold


def check_threshold_applies(args, model) -> None:
    """--threshold is a classifier's decision threshold: refused on a regression model (it would be ignored)."""
    if args.threshold is not None and model.task != "binary":
        raise CLIError("--threshold needs a binary (classifier) model; this model is a regression")


def load_for_apply(args, need_label: bool):
    from mmc_core import FittedModel

    from ..services.io import column_problem, numeric_column, read_table
    from ..services.validate import unlisted_notes

    model = FittedModel.load(args.model)
    base_model = _base_model_file(args, model)
    text = set(model.groups.text_columns()) | set(base_model.text_features if base_model else ())
    df = read_table(args.data, sorted(text))
    if base_model is not None:  # the base variance column of an in-app base variance model, from the file
        have = set(df.columns)
        df = base_model.add_variance(df, model)
        df.attrs["mmc_added_columns"] = [c for c in df.columns if c not in have]
    missing = sorted(c for c in model.input_columns() if c not in df.columns)
    if missing:
        iv = model.init_variance or {}
        also = (
            " (the base variance of the dashboard's base model: pass --base-model FILE, the base model exported "
            "with it)"
            if iv.get("column") in missing and model.init_mean.get("column") == "base_model"
            else ""
        )
        raise CLIError(f"the data lacks column(s) the model needs: {', '.join(missing)}{also}")
    for note in unlisted_notes(model.groups, df):
        print(f"note: {note}", file=sys.stderr)
    base = None
    if base_model is not None:
        base = base_model.predict(df)  # a missing or non-numeric feature column: one line naming it
    elif model.uses_base:
        if not args.pred:
            col = model.init_mean.get("column")
            also = " or --base-model FILE (the base model exported with it)" if col == "base_model" else ""
            raise CLIError(
                f"this model was fitted on a base prediction{f' ({col})' if col else ''}: pass --pred COL{also}"
            )
        base = numeric_column(df, args.pred, "prediction column")
    elif args.pred:
        print("note: the model was fitted without a base prediction; --pred is ignored", file=sys.stderr)
    if need_label:  # audit and report: their memory grows with the (row, group) pairs, checked before the work
        from ..services.io import check_audit_size

        memb = model.groups.evaluate(df)
        check_audit_size(len(df), memb.n_groups, len(memb.rows))
        del memb
    if need_label and model.task == "binary":
        from mmc_core.auditing import binary_labels

        if args.label not in df.columns or column_problem(df[args.label]):
            numeric_column(df, args.label, "label column")  # raises "not in the data", "cannot be used"
        if df[args.label].isna().any():
            raise CLIError(
                f"label column '{args.label}' has {int(df[args.label].isna().sum())} missing value(s); drop them first"
            )
        # checked here so that a bad value names the column; passed on as the data has it, since the audit maps
        # the labels through the model's positive class itself (mapping here too would flip a positive class 0)
        binary_labels(model, df[args.label], f"label column '{args.label}'")
        return model, df, base, df[args.label].to_numpy()
    y = numeric_column(df, args.label, "label column") if need_label else None
    return model, df, base, y


def _base_model_file(args, model):
    """The base model of --base-model (app.services.base_model_export.LoadedBaseModel), or None. Refused with one line: together
    with --pred, on a model fitted without a base prediction, on a file that is not an mmc base model or holds a
    type outside the trusted list (nothing in it runs)."""
    path = getattr(args, "base_model", None)
    if not path:
        return None
    if args.pred:
        raise CLIError("pass either --pred COL or --base-model FILE, not both")
    if not model.uses_base:
        raise CLIError("--base-model: this model was fitted without a base prediction; leave --base-model out")
    from ..services.base_model_export import load_base_model

    return load_base_model(path)


def refuse_base_model_on_dask(args) -> None:
    if getattr(args, "base_model", None):
        raise CLIError("--base-model works with the default engine only; leave --engine dask out")


def _note_base_range(model, base):
    if base is None:
        return
    from ..figures.figure_style import interval_text

    out = (base < model.scale.lo) | (base > model.scale.hi)
    if out.any():
        print(
            f"note: {int(out.sum())} base prediction(s) lie outside the model's label range "
            f"{interval_text(model.scale.lo, model.scale.hi, 6)} and were clipped to it",
            file=sys.stderr,
        )


def cmd_predict(args) -> int:
    refuse_output_over_input(args)
    if args.engine == "dask":
        refuse_base_model_on_dask(args)
        from .dask import predict

        return predict(args)
    import pandas as pd

    from ..services.io import write_csv

    check_apply_args(args)
    model, df, base, _ = load_for_apply(args, need_label=False)
    if args.threshold is not None and model.task != "binary":
        raise CLIError("--threshold needs a binary (classifier) model; this model is a regression")
    if args.interval and model.task == "binary":
        raise CLIError(
            "--interval: no prediction intervals for a binary (classifier) model; `mean` is the "
            "probability (use --threshold T for a decision)"
        )
    refuse_overwrite(df.columns, prediction_columns(model, args.threshold is not None, bool(args.interval)))
    preds = model.predict(df, base)
    _note_base_range(model, base)
    out = df.drop(columns=df.attrs.get("mmc_added_columns", []))  # the base variance is the model's input only
    for k, v in preds.items():
        out[k] = v
    if args.threshold is not None:
        out["decision"] = (preds["mean"] >= args.threshold).astype(int)
    if args.interval:
        from mmc_core.intervals import predict_intervals

        lower, upper = predict_intervals(model, df, base=base, method=args.interval, delta=args.delta, gamma=args.gamma)
        out["lower"], out["upper"] = lower, upper
    write_csv(pd.DataFrame(out), args.out)
    if args.interval and len(df):
        import numpy as np

        from ..services.specs import interval_range_note

        sc = model.scale
        past = [float(np.mean(np.asarray(lower) < sc.lo)), float(np.mean(np.asarray(upper) > sc.hi))]
        params = {
            "label": {"lo": sc.lo, "hi": sc.hi, "source": sc.source},
            "intervals_past_range": {args.interval: past},
        }
        if note := interval_range_note(params):
            print(f"note: {note.replace('audited rows', 'predicted rows').rstrip('.')}.", file=sys.stderr)
    return 0

"""``mmc discover``: the learning-oracle auditor on a table, its sets written as an mmc-groups file; and the
feature columns and learner options that ``mmc fit --discover`` shares with it."""

from __future__ import annotations

import json
import sys

__all__ = ["cmd_discover", "features", "discovery_kwargs"]

from .common import CLIError, check_out, refuse_output_over_input


def discovery_kwargs(args) -> dict:
    """What app.cli.parser's discovery options declare, as the learner's keyword arguments (mmc fit --discover,
    mmc discover)."""
    return {"max_depth": args.max_depth, "min_mass": args.min_mass}


def features(args, df, exclude) -> list:
    feats = args.features if args.features else [c for c in df.columns if c not in exclude]
    for c in feats:
        if c not in df.columns:
            raise CLIError(f"feature column '{c}' is not in the data")
        if c in exclude:
            raise CLIError(f"feature column '{c}' is the label or the prediction; learned groups cannot use it")
    if not feats:
        raise CLIError("no feature columns left for --features (the table has only the label and the prediction)")
    return list(feats)


def cmd_discover(args) -> int:
    from mmc_core.discovery import discover
    from mmc_core.fit import atomic_write_text

    from ..services.io import numeric_column, read_table

    refuse_output_over_input(args)
    check_out(args.out)
    if not 1 <= args.top <= 100:
        raise CLIError(f"--top must be an integer from 1 to 100, got {args.top}")
    model = None
    if args.model:
        from mmc_core import FittedModel

        model = FittedModel.load(args.model)
    elif not args.pred:
        raise CLIError("pass --pred COL (the prediction to audit) or --model MODEL.json")
    df = read_table(args.data, model.groups.text_columns() if model is not None else ())
    y = numeric_column(df, args.label, "label column")
    pred = numeric_column(df, args.pred, "prediction column") if args.pred else None
    if model is not None:
        missing = sorted(c for c in model.input_columns() if c not in df.columns)
        if missing:
            raise CLIError(f"the data lacks column(s) the model needs: {', '.join(missing)}")
        if not model.uses_base and pred is not None:
            print("note: the model was fitted without a base prediction; --pred is ignored", file=sys.stderr)
            pred = None
    feats = features(args, df, {args.label} | ({args.pred} if args.pred else set()))
    res = discover(
        df,
        y,
        prediction=pred,
        model=model,
        features=feats,
        **discovery_kwargs(args),
        n_moments=args.moments,
        n_buckets=args.buckets,
        label_range=args.label_range,
        seed=args.seed,
        level=args.level,
        label_name=args.label,
    )
    out = res.to_groups_json(args.top)
    atomic_write_text(args.out, json.dumps(out, allow_nan=False, indent=1))
    print(
        json.dumps(
            {
                "n_found": len(out["groups"]),
                "n_candidates": res.n_candidates,
                "n_accepted": len(res.accepted()),
                "n_search": res.n_search,
                "n_check": res.n_check,
                "kinds": sorted({g["kind"] for g in out["groups"]}),
                "seconds": round(res.seconds, 3),
                "out": args.out,
            }
        )
    )
    return 0

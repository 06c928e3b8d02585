"""``mmc compare``: two models (or prediction columns) on the same labelled rows, group by group; and the period
option of ``mmc audit`` (``--period COLUMN``). The statistics are :mod:`mmc_core.comparison.compare_models`'s; this module reads
the files, builds the two sides and writes the JSON."""

from __future__ import annotations

import json
import os
import sys

from .common import period_threshold


def add_parser(sub) -> None:
    from .common import choice_option

    c = sub.add_parser(
        "compare",
        help="compare two models (or prediction columns) group by group on the same labelled rows",
        description="Paired comparison: per group the RMSE, mean error, spread ratio, interval coverage and width "
        "of sides A and B (classifiers: also the selection rate, TPR and FPR at --threshold), the difference B - A "
        "with a 95%% interval, and findings (Holm or BH over every test) "
        "naming where B is worse or better than A. Side A is --pred-a if given, else the first --model; side B is "
        "--pred-b if given, else the last --model.",
    )
    c.add_argument("--data", required=True, help="labelled table (CSV or Parquet) both sides predict")
    c.add_argument("--label", required=True)
    c.add_argument("--model", action="append", default=[], help="a fitted model (give it once or twice)")
    c.add_argument("--pred-a", help="side A as a prediction column (the mean only)")
    c.add_argument("--pred-b", help="side B as a prediction column (the mean only)")
    c.add_argument("--name-a", default=None, help="what findings call side A (default: its file or column name)")
    c.add_argument("--name-b", default=None, help="what findings call side B")
    c.add_argument("--pred", help="base prediction column of a model fitted with --pred")
    c.add_argument(
        "--group-cols",
        type=lambda s: [x for x in s.split(",") if x],
        default=[],
        help="columns whose values define groups (default: the models' groups)",
    )
    c.add_argument("--max-order", type=int, default=1, help="with --group-cols: intersections up to this order")
    c.add_argument("--groups", help="an mmc-groups JSON file of groups to compare on (added to the others)")
    c.add_argument(
        "--interval",
        default="calibrated",
        help="interval method of the models' sides (default calibrated; see `mmc predict --interval`); with "
        "--engine dask every method formed row by row: not multimoment, and guaranteed / plugin only for a model "
        "with an interval calibration",
    )
    c.add_argument("--delta", type=float, default=0.1, help="interval miscoverage (default 0.1)")
    choice_option(c, "--error-control", ["holm", "bh"], "adjustment over every test: holm (family-wise) or bh (FDR)")
    c.add_argument("--min-group-count", type=int, default=30, help="smallest group tested (default 30)")
    c.add_argument("--level", type=float, default=0.05, help="error level of the findings (default 0.05)")
    c.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="decision threshold of probabilities: compare selection rate, TPR and FPR at it (default 0.5 for "
        "classifier models; with prediction columns the labels must then be 0/1)",
    )
    c.add_argument("--out", required=True, help="where to write the comparison (JSON)")
    c.add_argument(
        "--report",
        help="also write the comparison as a report here: PDF (needs Chromium), or interactive HTML if it ends in .html",
    )
    from .dask import add_engine_options

    add_engine_options(c)


def _sides_spec(args):
    """[(kind, source, name)] for A and B: kind "model" (a path) or "column"."""
    from .common import CLIError

    models = list(args.model)
    if len(models) > 2:
        raise CLIError(f"--model is given {len(models)} times; a comparison has two sides")
    need = (args.pred_a is None) + (args.pred_b is None)
    if len(models) != need:
        raise CLIError(
            "a comparison needs exactly two sides: two --model files, or --pred-a / --pred-b columns, or one "
            f"of each (got {len(models)} --model and {2 - need} prediction column(s))"
        )
    a = ("column", args.pred_a) if args.pred_a else ("model", models[0])
    b = ("column", args.pred_b) if args.pred_b else ("model", models[-1])

    def default(kind, src):
        return os.path.splitext(os.path.basename(src))[0] if kind == "model" else src

    name_a = args.name_a or default(*a)
    name_b = args.name_b or default(*b)
    if name_a == name_b:
        name_a, name_b = (f"A ({name_a})", f"B ({name_b})") if not (args.name_a or args.name_b) else (name_a, name_b)
    if name_a == name_b:
        raise CLIError(f"--name-a and --name-b must differ, both are {name_a!r}")
    return [(*a, name_a), (*b, name_b)]


def cmd_compare(args) -> int:
    from mmc_core import FittedModel, GroupSet
    from mmc_core.comparison import compare, side

    from ..services.io import numeric_column, read_table
    from .common import CLIError, check_out, check_prob, refuse_output_over_input

    refuse_output_over_input(args)
    check_out(args.out)
    if args.report:
        check_out(args.report)
        if os.path.realpath(args.report) == os.path.realpath(args.out):
            raise CLIError("--report and --out name the same file; give the PDF another name")
    check_prob("--delta", args.delta)
    check_prob("--level", args.level)
    if args.min_group_count < 2:
        raise CLIError(f"--min-group-count must be at least 2, got {args.min_group_count}")
    spec = _sides_spec(args)
    models = {src: FittedModel.load(src) for kind, src, _ in spec if kind == "model"}
    extra = None
    if args.groups:
        extra = GroupSet.from_file(args.groups)  # bounded: size, depth, numbers (mmc_core.common.jsonfile), then schema
    binary = [m for m in models.values() if m.task == "binary"]
    if binary and len(binary) != len(models):
        raise CLIError("a classifier (binary) model and a regression model cannot be compared")
    if args.threshold is not None and not 0 < args.threshold < 1:
        raise CLIError(f"--threshold must be strictly between 0 and 1, got {args.threshold}")
    threshold = args.threshold if args.threshold is not None else (0.5 if binary else None)
    dask = getattr(args, "engine", "numpy") == "dask"
    _check_interval(args, spec, models, dask)
    if dask:
        return _write(args, spec, _compare_on_dask(args, spec, models, extra, threshold))
    text_cols = set()
    for m in models.values():
        text_cols |= set(m.groups.text_columns())
    df = read_table(args.data, tuple(sorted(text_cols)))
    if binary:  # the labels through the models' own positive class (as `mmc audit` reads them)
        from mmc_core.auditing import binary_labels

        if args.label not in df.columns:
            numeric_column(df, args.label, "label column")  # the "not in the data" error, with the columns
        y = binary_labels(binary[0], df[args.label], f"label column '{args.label}'")
    else:
        y = numeric_column(df, args.label, "label column")
    groups = _groups(args, df.columns, models, extra, lambda cols: GroupSet.from_columns(df, cols, args.max_order))
    _check_size(df, groups, models)
    from .common import progress_lines

    say = progress_lines("compare")  # a long comparison says what it is doing (3.9M rows: 26 s without a word)
    sides = []
    for kind, src, name in spec:
        say(f"side {name}")
        if kind == "column":
            sides.append(side(numeric_column(df, src, "prediction column"), name=name, threshold=threshold))
            continue
        model = models[src]
        missing = sorted(c for c in model.input_columns() if c not in df.columns)
        if missing:
            raise CLIError(f"the data lacks column(s) model {src} needs: {', '.join(missing)}")
        base = None
        if model.uses_base:
            if not args.pred:
                raise CLIError(f"model {src} was fitted on a base prediction: pass --pred COL")
            base = numeric_column(df, args.pred, "prediction column")
        sides.append(side(model, df, name=name, base=base, method=args.interval, delta=args.delta, threshold=threshold))
    say(f"comparing the sides on {len(groups):,} groups")
    res = compare(df, y, sides[0], sides[1], groups, **_options(args))
    return _write(args, spec, res)


def _options(args) -> dict:
    return {
        "delta": args.delta,
        "min_group_count": args.min_group_count,
        "error_control": args.error_control,
        "level": args.level,
    }


def _check_interval(args, spec, models, dask: bool) -> None:
    """--interval is a method each regression model side can form (on Dask: row by row, partition by partition);
    CLIError naming the option otherwise, before any data is read. Classifier and mean-only models form no
    intervals (the option does not apply to them), nor do prediction columns."""
    from mmc_core.common import MMCError
    from mmc_core.intervals import available_methods

    from .common import CLIError

    for kind, src, _ in spec:
        model = models.get(src) if kind == "model" else None
        if model is None or model.task == "binary" or not model.moments:
            continue
        have = available_methods(model)
        if args.interval not in have:
            raise CLIError(
                f"--interval {args.interval} is not available for model {src} (available: {', '.join(have) or 'none'})"
            )
        if dask:
            from mmc_core.engines import check_interval_method

            try:
                check_interval_method(model, args.interval)
            except MMCError as e:
                raise CLIError(f"--interval {args.interval} with --engine dask: {e}") from None


def _compare_on_dask(args, spec, models, extra, threshold):
    from mmc_core.engines import compare_dask, groups_from_columns

    from .dask import dask_session, dask_table

    need = [("label column", args.label)] + [("prediction column", src) for kind, src, _ in spec if kind == "column"]
    if any(m.uses_base for m in models.values()):
        need.append(("prediction column", args.pred))
    ddf = dask_table(args, need)
    sides = [(kind, models[src] if kind == "model" else src, name) for kind, src, name in spec]
    with dask_session(args) as client:
        groups = _groups(
            args,
            ddf.columns,
            models,
            extra,
            lambda cols: groups_from_columns(ddf, cols, args.max_order, client=client),
        )
        return compare_dask(
            ddf, args.label, sides, groups, args.pred, method=args.interval, threshold=threshold, **_options(args)
        )


def _write(args, spec, res) -> int:
    from mmc_core.fit import atomic_write_text

    pdf = None
    if getattr(args, "report", None):  # built before anything is written: a failed report leaves no JSON either
        name = os.path.basename(args.data.rstrip("/"))
        if args.report.lower().endswith((".html", ".htm")):
            from ..report.html import build_compare_html

            pdf = build_compare_html(res, name, args.label)
        else:
            from ..report.compare import build_compare_pdf

            pdf = build_compare_pdf(res, name, args.label)
    out = res.to_json()
    out["sources"] = [{"kind": k, "source": s, "name": n} for k, s, n in spec]
    atomic_write_text(args.out, json.dumps(out, allow_nan=False))
    if pdf is not None:
        from ..services.io import write_bytes

        write_bytes(args.report, pdf)
    if res.n_tests == 0:
        print(
            f"warning: nothing could be tested: no group has {args.min_group_count} or more labelled rows",
            file=sys.stderr,
        )
    for f in res.findings[:10]:
        print(f"- {f['text']}", file=sys.stderr)
    print(
        json.dumps(
            {
                "a": spec[0][2],
                "b": spec[1][2],
                "groups": len(res.by_group),
                "tests": res.n_tests,
                "worse": len(res.worse()),
                "better": len(res.better()),
                "compared": res.params["compared"],
                "out": args.out,
                **({"report": args.report} if pdf is not None else {}),
            }
        )
    )
    return 0


def _check_size(df, groups, models) -> None:
    """One line before the work when the comparison's (row, group) pairs would take it past its memory bound: 3.4M
    rows x 1,080 groups from --max-order 5 took `mmc compare` to 2.2 GB (about 16 bytes a pair beside 160 a row,
    as a fit: :func:`app.services.io.check_fit_size`); a model side's tables cost what an audit's do
    (:func:`app.services.io.check_audit_size`). Columns a group needs that the table lacks are left to the sides to name."""
    from ..services.io import check_audit_size, check_fit_size

    if any(c not in df.columns for c in groups.columns()):
        return
    memb = groups.evaluate(df)
    pairs = len(memb.rows)
    del memb
    check_fit_size(len(df), len(groups), pairs + len(df), "the comparison")
    if models:
        check_audit_size(len(df), len(groups), pairs, "the comparison")


def _groups(args, columns, models, extra, from_columns):
    """The groups compared on: --group-cols (and --groups) if given, else the models' own groups (both models'
    when they differ, each name once). ``from_columns(cols)`` builds groups from columns on the engine's table."""
    from mmc_core import GroupSet

    from .common import CLIError

    if args.group_cols:
        for c in args.group_cols:
            if c not in columns:
                raise CLIError(f"group column '{c}' is not in the data")
            if c == args.label:
                raise CLIError(f"the label '{c}' cannot define groups")
        groups = from_columns(args.group_cols)
    else:
        groups = GroupSet([])
        for m in models.values():
            known = set(groups.names)
            groups = groups + GroupSet([g for g in m.groups.groups if g.name not in known])
    if extra is not None:
        groups = groups + extra
    if len(groups) == 1:
        print("note: only the whole table is compared (pass --group-cols or --groups for groups)", file=sys.stderr)
    return groups


def add_period_option(p, where: str = "written under 'periods' in the audit JSON") -> None:
    """--period of `mmc audit` and `mmc report` (``where``: what the command does with the period audit)."""
    p.add_argument(
        "--period",
        help="a column of periods (dates, quarters, batches): also audit each group per period and test its "
        f"changes between consecutive periods ({where}); a classifier's are its calibration and its rates at "
        "--threshold",
    )


def check_period(args, model, df) -> None:
    """--period names a column of the data (a classifier's periods too: its rates at --threshold). CLIError
    otherwise."""
    if not getattr(args, "period", None):
        return
    from .common import CLIError

    if args.period not in df.columns:
        raise CLIError(f"period column '{args.period}' is not in the data")


def period_result(args, model, df, y, base):
    """The period audit of ``--period COL`` (mmc_core.comparison.compare_models.PeriodResult; None without --period), its findings
    printed on stderr. A command without --min-group-count / --error-control (`mmc report`) uses the audit's
    defaults, as its audit does."""
    if not getattr(args, "period", None):
        return None
    from mmc_core.comparison import compare_periods, side
    from mmc_core.intervals import available_methods

    check_period(args, model, df)
    method = "calibrated" if "calibrated" in available_methods(model) else None
    threshold = period_threshold(args, model)
    if model.task == "binary":  # the raw label column, as the audit takes it: 0/1 through the positive class
        from mmc_core.auditing import binary_labels

        y = binary_labels(model, y, f"label column '{args.label}'")
    if method or model.task == "binary":  # a classifier: its probability and decisions at the threshold
        s = side(model, df, name="the model", base=base, method="calibrated", delta=args.delta, threshold=threshold)
    else:  # no interval calibration: the mean and the variance (the spread) without intervals
        pred = model.predict(df, base)
        cols = {"mean": pred["mean"], "variance": pred.get("moment_2")}
        s = side({k: v for k, v in cols.items() if v is not None}, name="the model")
    res = compare_periods(
        df,
        y,
        s,
        model.groups,
        df[args.period].to_numpy(),
        delta=args.delta,
        min_group_count=getattr(args, "min_group_count", 30),
        error_control=getattr(args, "error_control", "holm"),
    )
    if threshold is not None:
        res.params["threshold"] = float(threshold)  # the rates' threshold, said in the reports' Over time section
    for f in res.findings[:10]:
        print(f"- {f['text']}", file=sys.stderr)
    return res


def periods_json(args, model, df, y, base) -> dict | None:
    """The period audit of `mmc audit --period COL` (None without --period), its findings printed on stderr."""
    res = period_result(args, model, df, y, base)
    return None if res is None else res.to_json()

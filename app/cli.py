"""The ``mmc`` command line: fit, predict, audit, report, discover, dashboard.

Why one module of ~600 lines: the argparse parser and the six command handlers share the table loading, label
and output helpers and one error convention (below); each handler is 20-120 lines, and a module per command would
leave those shared helpers as the real content of every module.

Every user error prints one line to stderr (``mmc: error: ...``) and exits with status 2; nothing is
written unless the command succeeds (outputs are written to a temporary file and renamed), and an output that
is one of the command's inputs is refused before any work (:func:`refuse_output_over_input`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

__all__ = ["main", "build_parser"]

from .cli_common import (
    EXIT_USAGE,
    CLIError,
    check_out,
    check_prob,
    choice_option,
    estimator_from_args,
    prediction_columns,
    refuse_output_over_input,
    refuse_overwrite,
)


def _float_pair(text: str):
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI (two numbers), got {text!r}") from None
    return lo, hi


def _number_or_word(number, words: tuple, expected: str):
    """An argparse type: one of ``words`` as it is, else the text as a ``number`` (int or float)."""

    def parse(text: str):
        if text in words:
            return text
        try:
            return number(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None

    return parse


_threshold = _number_or_word(float, ("auto", "se"), "a number, 'se' or 'auto'")
_buckets = _number_or_word(int, ("auto",), "an integer or 'auto'")


def _decision_threshold(text: str):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number strictly between 0 and 1, got {text!r}") from None
    if not 0 < v < 1:  # also rejects nan and inf
        raise argparse.ArgumentTypeError(f"expected a number strictly between 0 and 1, got {text!r}")
    return v


def _columns(text: str):
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise argparse.ArgumentTypeError("expected comma-separated column names")
    return cols


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return v


ERROR_CHARS = 2000  # an error line quoting a hostile name (a column of 100k characters) stays readable


def _one_line(text) -> str:
    """An error message as the one line the CLI prints: names quoted from the user's files (columns, groups,
    labels) may hold line breaks, which would split it, or bidirectional controls (U+202E), which would reorder
    what the terminal shows; :func:`mmc_core.jsonfile.one_line` escapes both and bounds the length."""
    from mmc_core.jsonfile import one_line

    return one_line(str(text), ERROR_CHARS)


class _HeldNotes:
    """stderr while a command runs, holding its "note:" and "warning:" lines back until the command has done its
    work: a note said while the inputs are read ("only the whole table is compared", "--pred is ignored") came
    before the error a later input caused, and a bad input was two lines. Held lines are written when any other
    line is (a progress line: the inputs passed their checks) and when the command succeeds; an error drops them,
    so that it is the one line."""

    HELD = ("note: ", "warning: ")

    def __init__(self, stream):
        self.stream, self.held, self.part = stream, [], ""
        self.lock = threading.Lock()  # the heartbeat (:func:`_run`) writes from its own thread
        self.last = time.monotonic()  # when a line was last shown

    def write(self, text) -> int:
        with self.lock:
            self.part += text
            *lines, self.part = self.part.split("\n")
            for line in lines:
                if line.startswith(self.HELD):
                    self.held.append(line + "\n")
                else:
                    self.release()
                    self.stream.write(line + "\n")
                    self.last = time.monotonic()
        return len(text)

    def beat(self, command: str, started: float) -> None:
        """A line saying the command still works, when nothing was shown for HEARTBEAT seconds (a long prediction
        or comparison ran half a minute without a word)."""
        with self.lock:
            now = time.monotonic()
            if now - self.last >= HEARTBEAT and not self.part:
                self.release()
                self.stream.write(f"mmc: {command}: still working, {now - started:.0f} s so far\n")
                self.stream.flush()
                self.last = now

    def release(self) -> None:
        for line in self.held:
            self.stream.write(line)
        self.held = []

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding: the real stream's
        return getattr(self.stream, name)


HEARTBEAT = 15.0  # seconds without a line on stderr after which a running command says it still works


def _run(command, args) -> int:
    """``command(args)`` with its notes held back (:class:`_HeldNotes`): written if it succeeds, dropped if not;
    and a heartbeat line whenever it has said nothing for HEARTBEAT seconds."""
    real = sys.stderr
    held = _HeldNotes(real)
    sys.stderr = held
    ok = False
    done = threading.Event()
    started = time.monotonic()

    def heartbeat():
        while not done.wait(min(1.0, HEARTBEAT / 4)):
            held.beat(args.command, started)

    beater = threading.Thread(target=heartbeat, daemon=True)
    beater.start()
    try:
        code = command(args)
        ok = code == 0
        return code
    finally:
        done.set()
        beater.join()
        sys.stderr = real
        if ok:
            held.release()
        if held.part and (ok or not held.part.startswith(_HeldNotes.HELD)):
            real.write(held.part)
        real.flush()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other user error
        self.exit(EXIT_USAGE, f"mmc: error: {_one_line(message)} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="mmc",
        description="Moment multicalibration: fit, apply and audit mean and variance "
        "predictors that are calibrated on every subgroup.",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    f = sub.add_parser(
        "fit",
        help="fit a moment-multicalibrated model on a table",
        description="Fit mean and central-moment predictors that are multicalibrated on every group.",
    )
    f.add_argument("--data", required=True, help="training table (CSV or Parquet)")
    f.add_argument("--label", required=True, help="label column")
    f.add_argument("--pred", help="base prediction column (label units), used as the initial mean")
    f.add_argument("--group-cols", type=_columns, default=[], help="columns whose values define groups, e.g. sex,race")
    f.add_argument(
        "--max-order", type=int, default=1, help="intersections of values of up to R different columns (default 1)"
    )
    f.add_argument("--groups", help="JSON file of named groups defined by conditions (see README)")
    f.add_argument(
        "--alpha",
        type=_threshold,
        default="se",
        help="mean violation threshold, mass-weighted: a cell S is flagged when P(S)*|mean residual| >= A; "
        "'se' (default) = a cell is corrected only when its residual is significant against its own "
        "standard error (Bonferroni); 'auto' = one threshold just above the sampling noise",
    )
    f.add_argument(
        "--beta",
        type=_threshold,
        default="se",
        help="moment violation threshold, mass-weighted (default 'se', as for --alpha)",
    )
    f.add_argument(
        "--buckets",
        dest="n_buckets",
        metavar="BUCKETS",
        type=_buckets,
        default=5,
        help="buckets m per predictor (default 5; 'auto' = 5, 10 or 20, chosen on the held-out rows)",
    )
    choice_option(
        f,
        "--base-recalibration",
        ["auto", "none", "affine", "group-linear"],  # mmc_core.recalibrate.BASE_RECALIBRATIONS (lazy imports)
        "with --pred: 'affine' first maps the base prediction to a + b x pred by least squares on the fitting "
        "rows (an over-fitted base model's predictions are too spread out); 'group-linear' fits one slope within "
        "the listed groups and one between them (bent at the base's quartiles where that helps out of sample), "
        "applied at the share of it that out-of-sample rows bear out (in full at z >= 2 for that share); "
        "default auto = group-linear ('affine' not with --engine dask)",
    )
    choice_option(
        f,
        "--shrunken-cells",
        ["on", "off"],
        "after the descent, correct every (group, tenth of the prediction) cell at once by a ridge fit of the "
        "residuals, its penalty and weight chosen on the held-out rows (needs --calibration-fraction > 0); "
        "default on",
    )
    choice_option(
        f,
        "--mean-buckets",
        ["uniform", "quantile"],
        "mean buckets equally wide (default) or at quantiles of the base prediction",
    )
    choice_option(
        f,
        "--moment-buckets",
        ["data", "range"],
        "moment buckets on a log scale over the moments the data show (default) or over the attainable range",
    )
    f.add_argument(
        "--moments",
        dest="n_moments",
        metavar="MOMENTS",
        type=int,
        default=2,
        help="fit central moments 2..K; 1 = mean only (default 2; a binary label is always fitted for the mean only)",
    )
    choice_option(
        f,
        "--task",
        ["auto", "regression", "binary"],
        "auto (default): a label with two values (0/1, true/false, or two values with --positive) "
        "is a classifier audit (probabilities on [0, 1], mean only, no intervals); regression: never",
    )
    f.add_argument("--positive", help="the positive class of a binary label whose values are not 0/1 (e.g. yes)")
    choice_option(f, "--step", ["exact", "paper"], "step rule (default exact)")
    choice_option(f, "--odd-moments", ["absolute", "signed"], "odd moments as E|y-mu|^a (default) or E(y-mu)^a")
    f.add_argument("--label-range", type=_float_pair, help="LO,HI of the label (default: observed min,max)")
    f.add_argument(
        "--calibration-fraction",
        type=float,
        default=0.25,
        help="share of rows held out of fitting for interval calibration (default 0.25; 0 = none)",
    )
    f.add_argument(
        "--early-stopping",
        action=argparse.BooleanOptionalAction,
        default="auto",
        help="keep the round with the best held-out error (default: on when rows are held out)",
    )
    f.add_argument("--max-rounds", type=int, help="cap on mean rounds (a capped run is reported as not converged)")
    f.add_argument(
        "--seed",
        dest="random_state",
        metavar="SEED",
        type=_seed,
        default=0,
        help="seed of the calibration split (default 0)",
    )
    f.add_argument(
        "--save-partial",
        action="store_true",
        help="if interrupted (Ctrl-C), still save the model reached so far, marked as not converged",
    )
    f.add_argument(
        "--discover",
        action="store_true",
        help="also find and calibrate sets nobody listed (learning-oracle auditor; see README)",
    )
    _discovery_options(f)
    f.add_argument(
        "--discover-rounds", type=int, default=2, help="with --discover: at most R audit-and-refit rounds (default 2)"
    )
    f.add_argument("--out", required=True, help="where to write the model (JSON)")
    _engine_options(f)

    pr = sub.add_parser("predict", help="predict mean, moments and intervals for new rows")
    _model_options(pr, label=False)
    pr.add_argument(
        "--interval",
        choices=["guaranteed", "plugin", "multimoment", "calibrated", "split-conformal", "mondrian", "gaussian"],
        help="add lower/upper columns from this method",
    )
    pr.add_argument(
        "--threshold",
        type=_decision_threshold,
        help="binary models: add a 0/1 `decision` column (1 when the probability `mean` >= T)",
    )
    pr.add_argument("--out", required=True)
    _engine_options(pr)

    au = sub.add_parser("audit", help="audit a fitted model on labelled data (per-group tables as JSON)")
    _model_options(au, label=True)
    choice_option(
        au,
        "--error-control",
        ["holm", "bh"],
        "adjustment of the findings over every test: holm (family-wise error) or bh (false discovery rate)",
    )
    au.add_argument("--min-group-count", type=int, default=30, help="smallest group or cell tested (30)")
    au.add_argument(
        "--variance-tolerance",
        type=float,
        default=None,
        help="a variance finding needs observed/predicted outside [1/(1+T), 1+T] beyond chance "
        "(default 0.1; 0 tests ratio != 1)",
    )
    _rates_threshold_option(au)
    _log_label_option(au)
    au.add_argument("--out", required=True)
    _engine_options(au)
    from .cli_compare import add_parser as add_compare_parser, add_period_option

    add_period_option(au)

    rp = sub.add_parser("report", help="write the audit report (PDF, or self-contained interactive HTML)")
    _model_options(rp, label=True)
    _rates_threshold_option(rp)
    _log_label_option(rp)
    rp.add_argument("--out", required=True)
    rp.add_argument(
        "--format",
        choices=["pdf", "html"],
        default=None,
        help="pdf (needs Chromium for its figures) or html (one self-contained file with interactive figures); "
        "default: html when --out ends in .html, else pdf",
    )
    add_period_option(rp, "an 'Over time' section with the changes found and a trend chart")

    ds = sub.add_parser(
        "discover",
        help="find miscalibrated groups nobody listed (audit only, no fitting)",
        description="Run the paper's learning-oracle auditor: a shallow regression tree proposes "
        "sets on half of the rows, the other half tests them; the strongest significant ones are "
        "written as an mmc-groups file that --groups reads.",
    )
    ds.add_argument("--data", required=True)
    ds.add_argument("--label", required=True)
    ds.add_argument("--pred", help="prediction column to audit (label units); with --model, its base prediction")
    ds.add_argument("--model", help="fitted model to audit instead of a prediction column")
    _discovery_options(ds)
    ds.add_argument("--top", type=int, default=5, help="write at most K sets per kind (mean, moment_2, ...; default 5)")
    ds.add_argument("--moments", type=int, default=2, help="audit the mean and central moments 2..K (default 2)")
    ds.add_argument("--buckets", type=int, default=5, help="buckets m of the prediction (default 5; a model's own)")
    ds.add_argument("--label-range", type=_float_pair, help="LO,HI of the label (default: observed)")
    ds.add_argument(
        "--level",
        type=float,
        default=0.05,
        help="significance level after Bonferroni over all candidates tested (default 0.05)",
    )
    ds.add_argument("--seed", type=_seed, default=0, help="seed of the search / check split (default 0)")
    ds.add_argument("--out", required=True, help="where to write the groups (mmc-groups JSON)")

    add_compare_parser(sub)

    d = sub.add_parser("dashboard", help="start the Streamlit dashboard")
    d.add_argument("--port", type=int, default=8501)
    d.add_argument("--data", help="CSV/Parquet to open instead of the bundled demo dataset")
    d.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; anything else serves the network: a warning is printed)",
    )
    return p


def _model_options(p, label: bool):
    """--model, --data, (--label), --pred, --delta, --gamma: a fitted model applied to a table (predict, audit,
    report)."""
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    if label:
        p.add_argument("--label", required=True)
    p.add_argument("--pred", help="base prediction column, required if the model was fitted with --pred")
    p.add_argument(
        "--base-model",
        help="base model file exported with the model from the dashboard (base_model.skops): the base prediction "
        "is computed from the rows' feature columns instead of read from --pred",
    )
    p.add_argument("--delta", type=float, default=0.1, help="interval miscoverage (default 0.1)")
    p.add_argument("--gamma", type=float, default=0.05, help="smallest cell mass the guarantees cover (default 0.05)")


def _rates_threshold_option(p):
    """--threshold of audit and report: the decision threshold of a binary model's rates."""
    p.add_argument(
        "--threshold",
        type=_decision_threshold,
        default=None,
        help="binary models: the decision threshold of the rates (decision = probability >= T; default 0.5)",
    )


def _log_label_option(p):
    """--log-label of audit and report: the label is a natural log; mean errors also in percent."""
    p.add_argument(
        "--log-label",
        action="store_true",
        help="the label is a natural logarithm (log wage): mean errors are also stated as percent differences "
        "of the original values (regression models, in-memory engine)",
    )


def label_scale(args) -> str:
    """The audit's ``label_scale`` from --log-label (refused where it cannot apply, before any work)."""
    if not getattr(args, "log_label", False):
        return "linear"
    if getattr(args, "engine", None) == "dask":
        raise CLIError("--log-label needs --engine numpy: the Dask audit writes tables without findings")
    return "log"


def _engine_options(p):
    from .cli_dask import add_engine_options

    add_engine_options(p)


def _discovery_options(p):
    p.add_argument(
        "--features",
        type=_columns,
        help="columns the learner may use (default: every column but the label and the prediction)",
    )
    p.add_argument("--max-depth", type=int, default=3, help="conditions per learned rule, at most D (default 3)")
    p.add_argument(
        "--min-mass", type=float, default=0.01, help="smallest share of the rows a learned set may hold (default 0.01)"
    )


def _discovery_kwargs(args) -> dict:
    """What _discovery_options declares, as the learner's keyword arguments (mmc fit --discover, mmc discover)."""
    return {"max_depth": args.max_depth, "min_mass": args.min_mass}


def _features(args, df, exclude) -> list:
    feats = args.features if args.features else [c for c in df.columns if c not in exclude]
    for c in feats:
        if c not in df.columns:
            raise CLIError(f"feature column '{c}' is not in the data")
        if c in exclude:
            raise CLIError(f"feature column '{c}' is the label or the prediction; learned groups cannot use it")
    if not feats:
        raise CLIError("no feature columns left for --features (the table has only the label and the prediction)")
    return list(feats)


# the path options of the commands: an output renamed over an input would replace it (`fit --out DATA.csv` left a
# model where the data was, `report --out MODEL.json` a PDF where the model was)
def _check_apply_args(args):
    """--out, --delta and --gamma of the commands that apply a model (predict, audit, report)."""
    check_out(args.out)
    check_prob("--delta", args.delta)
    check_prob("--gamma", args.gamma)


def _applied_options(args, base) -> dict:
    """The keyword arguments ``mmc audit`` and ``mmc report`` pass alike (mmc_core.metrics.audit and
    build_report_pdf take them under the same names): the base prediction, --delta, --gamma, --threshold."""
    return {"base": base, "delta": args.delta, "gamma": args.gamma, "threshold": applied_threshold(args)}


def applied_threshold(args) -> float:
    return 0.5 if args.threshold is None else args.threshold


def _check_threshold_applies(args, model) -> None:
    """--threshold is a classifier's decision threshold: refused on a regression model (it would be ignored)."""
    if args.threshold is not None and model.task != "binary":
        raise CLIError("--threshold needs a binary (classifier) model; this model is a regression")


def _fit_columns(args, extra) -> list | None:
    """The columns `mmc fit` uses: only those of a Parquet file are read (its memory limit is checked on the
    columns read); all of them with --discover but no --features."""
    if args.discover and not args.features:
        return None
    used = [args.label, args.pred, *args.group_cols, *(extra.columns() if extra is not None else ())]
    return [c for c in [*used, *(args.features or ())] if c]


def cmd_fit(args) -> int:
    refuse_output_over_input(args)
    if args.features and not args.discover:
        raise CLIError("--features names the columns --discover may learn groups on: add --discover, or drop it")
    if args.engine == "dask":
        from .cli_dask import fit

        return fit(args)
    from mmc_core import GroupSet
    from .io import column_problem, numeric_column, read_table

    check_out(args.out)
    extra = None
    if args.groups:
        extra = GroupSet.from_file(args.groups)  # bounded: size, depth, numbers (mmc_core.jsonfile), then schema
    # columns the group file compares with identifiers such as "01" are read as text (as numbers "01" == "1")
    df = read_table(args.data, extra.text_columns() if extra is not None else (), columns=_fit_columns(args, extra))
    task, y, binary_info = _fit_label(df, args)
    base = numeric_column(df, args.pred, "prediction column") if args.pred else None
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
    from .io import check_fit_size

    memb = groups.evaluate(df)  # the fit's memory and its time before a first line grow with the pairs
    check_fit_size(len(df), memb.n_groups, len(memb.rows) + len(df))  # + the whole table's own group
    del memb
    est = estimator_from_args(args, task=task)
    # Ctrl-C stops the descent at the end of the current round instead of killing it mid-update.
    interrupted = []
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum, frame):
        if interrupted:  # a second Ctrl-C aborts at once
            raise KeyboardInterrupt
        interrupted.append(True)
        print("\nmmc: stopping after the current round (Ctrl-C again to abort)...", file=sys.stderr, flush=True)

    try:
        signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not in the main thread
        previous = None
    started, last = time.monotonic(), [0.0]

    def progress(row) -> bool:  # long runs only: at most one line a second on stderr
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

    announced = []

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
        return bool(interrupted)

    feats = None
    if args.discover:
        from mmc_core.discover import validate_discovery_params

        feats = _features(args, df, {args.label, args.pred})
        validate_discovery_params(args.max_depth, args.min_mass, rounds=args.discover_rounds)
    # the same names, Ctrl-C poll and progress lines with and without --discover
    fit_kw = {"label_name": args.label, "base_name": args.pred, "stop": stop_requested, "callback": progress}
    try:
        if args.discover:
            from mmc_core.discover import fit_with_discovery

            fit_with_discovery(
                est,
                df,
                y,
                groups,
                base,
                features=feats,
                **_discovery_kwargs(args),
                rounds=args.discover_rounds,
                **fit_kw,
            )
        else:
            est.fit(df, y, groups, base_prediction=base, **fit_kw)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
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
    from .figure_style import interval_text  # plotly: only when a note is printed

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
    from mmc_core.cells import describe_cells
    from mmc_core.recalibrate import describe

    base_text = describe(est.model_.init_mean, info)
    if base_text:
        summary["base_prediction"] = base_text
    cells_text = describe_cells(info)
    if cells_text:
        summary["after_descent"] = cells_text
    from mmc_core.stages import describe_stages

    if stages_text := describe_stages(info.get("stages")):
        summary["stages"] = stages_text
    if args.discover:
        summary["learned_sets"] = len(info.get("learned_sets", []))
    print(json.dumps(summary))
    return 0


def _fit_label(df, args):
    """("regression", float label, None) or ("binary", 0/1 label, {"classes", "positive"})."""
    import pandas as pd

    from mmc_core.estimator import resolve_task
    from .io import column_problem, numeric_column

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


def _load_for_apply(args, need_label: bool):
    from mmc_core import FittedModel
    from .io import column_problem, numeric_column, read_table
    from .validate import unlisted_notes

    model = FittedModel.load(args.model)
    base_model = _base_model_file(args, model)
    text = set(model.groups.text_columns()) | set(base_model.text_features if base_model else ())
    df = read_table(args.data, sorted(text))
    missing = sorted(c for c in model.groups.columns() if c not in df.columns)
    if missing:
        raise CLIError(f"the data lacks group column(s) the model needs: {', '.join(missing)}")
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
        from .io import check_audit_size

        memb = model.groups.evaluate(df)
        check_audit_size(len(df), memb.n_groups, len(memb.rows))
        del memb
    if need_label and model.task == "binary":
        from mmc_core.binary import binary_labels

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
    """The base model of --base-model (app.base_model.LoadedBaseModel), or None. Refused with one line: together
    with --pred, on a model fitted without a base prediction, on a file that is not an mmc base model or holds a
    type outside the trusted list (nothing in it runs)."""
    path = getattr(args, "base_model", None)
    if not path:
        return None
    if args.pred:
        raise CLIError("pass either --pred COL or --base-model FILE, not both")
    if not model.uses_base:
        raise CLIError("--base-model: this model was fitted without a base prediction; leave --base-model out")
    from .base_model import load_base_model

    return load_base_model(path)


def _refuse_base_model_on_dask(args) -> None:
    if getattr(args, "base_model", None):
        raise CLIError("--base-model works with the default engine only; leave --engine dask out")


def _note_base_range(model, base):
    if base is None:
        return
    from .figure_style import interval_text

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
        _refuse_base_model_on_dask(args)
        from .cli_dask import predict

        return predict(args)
    import pandas as pd

    from .io import write_csv

    _check_apply_args(args)
    model, df, base, _ = _load_for_apply(args, need_label=False)
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
    out = df.copy()
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

        from .specs import interval_range_note

        sc = model.scale
        past = [float(np.mean(np.asarray(lower) < sc.lo)), float(np.mean(np.asarray(upper) > sc.hi))]
        params = {
            "label": {"lo": sc.lo, "hi": sc.hi, "source": sc.source},
            "intervals_past_range": {args.interval: past},
        }
        if note := interval_range_note(params):
            print(f"note: {note.replace('audited rows', 'predicted rows').rstrip('.')}.", file=sys.stderr)
    return 0


def cmd_audit(args) -> int:
    refuse_output_over_input(args)
    scale = label_scale(args)
    if args.engine == "dask":
        _refuse_base_model_on_dask(args)
        from .cli_dask import audit as audit_dask

        return audit_dask(args)
    from mmc_core.metrics import audit
    from mmc_core.model import atomic_write_text

    _check_apply_args(args)
    if args.min_group_count < 2:
        raise CLIError(f"--min-group-count must be at least 2, got {args.min_group_count}")
    from mmc_core.findings import VARIANCE_TOLERANCE

    tol = VARIANCE_TOLERANCE if args.variance_tolerance is None else args.variance_tolerance
    if not (0 <= tol < 1):
        raise CLIError(f"--variance-tolerance must be in [0, 1), got {args.variance_tolerance}")
    model, df, base, y = _load_for_apply(args, need_label=True)
    _check_threshold_applies(args, model)
    result = audit(
        model,
        df,
        y,
        **_applied_options(args, base),
        error_control=args.error_control,
        min_group_count=args.min_group_count,
        variance_tolerance=tol,
        progress=progress_lines("audit"),
        label_scale=scale,
    )
    doc = result.to_json()
    from .cli_compare import periods_json

    periods = periods_json(args, model, df, y, base)
    if periods is not None:
        doc["periods"] = periods
    atomic_write_text(args.out, json.dumps(doc, allow_nan=False))
    from .specs import interval_range_note, outside_range_note

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


PROGRESS_EVERY = 5.0  # seconds: a long command says what it is doing at most this often, a quick one says nothing


def progress_lines(command: str):
    """A ``progress`` callback for the core's long computations: a line on stderr for the stage under way once
    PROGRESS_EVERY seconds have passed since the last line (or the start)."""
    last = [time.monotonic()]

    def say(what: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY:
            print(f"mmc: {command}: {what}...", file=sys.stderr, flush=True)
            last[0] = now

    return say


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
    from .io import write_bytes
    from .report import build_report_pdf

    refuse_output_over_input(args)
    _check_apply_args(args)
    model, df, base, y = _load_for_apply(args, need_label=True)
    _check_threshold_applies(args, model)
    from mmc_core.metrics import audit

    from .cli_compare import check_period, period_result

    check_period(args, model, df)  # before the audit: a wrong column is said at once
    result = audit(
        model, df, y, **_applied_options(args, base), progress=progress_lines("report"), label_scale=label_scale(args)
    )
    periods = period_result(args, model, df, y, base)
    over_time = {} if periods is None else {"periods": periods, "period_column": args.period}
    if report_format(args) == "html":
        from .report_html import build_report_html

        page = build_report_html(
            model,
            df,
            y,
            **_applied_options(args, base),
            label=args.label,
            data_name=os.path.basename(args.data),
            audit=result,
            **over_time,
        )
        write_bytes(args.out, page)
        _warn_status(result)
        return 0
    pdf = build_report_pdf(
        model,
        df,
        y,
        **_applied_options(args, base),
        label=args.label,
        data_name=os.path.basename(args.data),
        audit=result,
        **over_time,
    )
    write_bytes(args.out, pdf)
    _warn_status(result)
    return 0


def cmd_compare(args) -> int:
    from .cli_compare import cmd_compare as run

    return run(args)


def cmd_discover(args) -> int:
    from mmc_core.discover import discover
    from mmc_core.model import atomic_write_text
    from .io import numeric_column, read_table

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
        missing = sorted(c for c in model.groups.columns() if c not in df.columns)
        if missing:
            raise CLIError(f"the data lacks group column(s) the model needs: {', '.join(missing)}")
        if not model.uses_base and pred is not None:
            print("note: the model was fitted without a base prediction; --pred is ignored", file=sys.stderr)
            pred = None
    feats = _features(args, df, {args.label} | ({args.pred} if args.pred else set()))
    res = discover(
        df,
        y,
        prediction=pred,
        model=model,
        features=feats,
        **_discovery_kwargs(args),
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


def cmd_dashboard(args) -> int:
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard.py")
    if args.data and not os.path.exists(args.data):
        raise CLIError(f"data file not found: {args.data}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"WARNING: serving the dashboard on {args.host}: anyone who can reach this machine can open it "
            "and upload data. Use the default 127.0.0.1 unless you mean it.",
            file=sys.stderr,
        )
    cmd = [
        sys.executable,
        "-m",
        "app.serve",  # streamlit run, with the Host header check (DNS rebinding; app/serve.py)
        "run",
        script,
        "--server.port",
        str(args.port),
        "--server.address",
        args.host,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        # also when a config.toml of the working folder or of the user turns it back on: Streamlit's table
        # download writes formulas and bare line breaks as they are (our CSV writer is app.io.csv_bytes)
        "--client.disableDataExport",
        "true",
    ]
    if args.data:
        cmd += ["--", "--data", os.path.abspath(args.data)]
    print(f"mmc dashboard: http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd)
    # a service manager (or `kill`) stops `mmc dashboard` with SIGTERM: pass it on, or Streamlit keeps the port
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


COMMANDS = {
    "fit": cmd_fit,
    "predict": cmd_predict,
    "audit": cmd_audit,
    "report": cmd_report,
    "compare": cmd_compare,
    "discover": cmd_discover,
    "dashboard": cmd_dashboard,
}


PAIR_OPTIONS = ("--label-range",)  # options whose value LO,HI may start with a minus sign


def _join_pairs(argv: list) -> list:
    """``--label-range -20,140`` as ``--label-range=-20,140``: argparse reads a value starting with "-" that is
    not a plain number as another option ("expected one argument")."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in PAIR_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-") and "," in argv[i + 1]:
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def main(argv=None) -> int:
    from mmc_core.errors import MMCError

    try:
        args = build_parser().parse_args(_join_pairs(sys.argv[1:] if argv is None else list(argv)))
    except SystemExit as e:  # usage errors and --help: argparse has printed its message
        return int(e.code or 0)
    try:
        if args.command == "dashboard":  # a server: what it says is said at once
            return COMMANDS[args.command](args)
        return _run(COMMANDS[args.command], args)
    except (MMCError, CLIError) as e:
        print(f"mmc: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("mmc: interrupted; nothing was written", file=sys.stderr)
        return 130
    except MemoryError:
        print(
            "mmc: error: out of memory: the table or the number of groups is too large for this machine",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except OSError as e:  # a full disk, a read-only folder, a file that vanished (also raised by Dask workers)
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        print(f"mmc: error: {_one_line(f'cannot read or write{where}: {e.strerror or e}')}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # a bug: one line for the user, the traceback on request
        if os.environ.get("MMC_TRACEBACK"):
            raise
        print(
            f"mmc: internal error: {type(e).__name__}: {_one_line(str(e).splitlines()[0][:300]) if str(e) else ''} "
            "(a bug: please report it; set MMC_TRACEBACK=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())

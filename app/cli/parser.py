"""The argparse definition of ``mmc``: one function per subcommand (``mmc compare``'s is
:func:`app.cli.compare.add_parser`), the options several commands share, and the argparse types that check a
value when the options are read. :func:`build_parser` is re-exported by :mod:`app.cli`."""

from __future__ import annotations

import argparse

__all__ = ["build_parser"]

from .common import EXIT_USAGE, choice_option, error_line


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


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other user error
        self.exit(EXIT_USAGE, f"mmc: error: {error_line(message)} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="mmc",
        description="Moment multicalibration: fit, apply and audit mean and variance "
        "predictors that are calibrated on every subgroup.",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_fit(sub)
    _add_predict(sub)
    _add_audit(sub)
    _add_report(sub)
    _add_discover(sub)
    from .compare import add_parser as add_compare_parser

    add_compare_parser(sub)
    _add_dashboard(sub)
    return p


def _add_fit(sub) -> None:
    f = sub.add_parser(
        "fit",
        help="fit a moment-multicalibrated model on a table",
        description="Fit mean and central-moment predictors that are multicalibrated on every group.",
    )
    _fit_input_options(f)
    _fit_model_options(f)
    _fit_run_options(f)


def _fit_input_options(f) -> None:
    """The table, its label and base prediction, and the groups."""
    f.add_argument("--data", required=True, help="training table (CSV or Parquet)")
    f.add_argument("--label", required=True, help="label column")
    f.add_argument("--pred", help="base prediction column (label units), used as the initial mean")
    f.add_argument(
        "--variance-pred",
        help="base variance column (label units squared, from a model fitted on other rows), used as the initial "
        "variance; later commands read the same column from their data",
    )
    f.add_argument("--group-cols", type=_columns, default=[], help="columns whose values define groups, e.g. sex,race")
    f.add_argument(
        "--max-order", type=int, default=1, help="intersections of values of up to R different columns (default 1)"
    )
    f.add_argument("--groups", help="JSON file of named groups defined by conditions (see README)")


def _fit_model_options(f) -> None:
    """What the model fits and how: thresholds, buckets, the base's recalibration, moments, task, step rule."""
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
        ["auto", "none", "affine", "group-linear", "group-logistic"],  # recalibrate.BASE_RECALIBRATIONS (lazy)
        "with --pred: 'affine' first maps the base prediction to a + b x pred by least squares on the fitting "
        "rows (an over-fitted base model's predictions are too spread out); 'group-linear' fits one slope within "
        "the listed groups and one between them (bent at the base's quartiles where that helps out of sample), "
        "applied at the share of it that out-of-sample rows bear out (in full at z >= 2 for that share); "
        "'group-logistic' (0/1 labels): group-linear, then per group an intercept, slope and bend of the logit, "
        "penalized and checked out of sample; default auto = group-linear, and for a 0/1 label the logistic map "
        "too when the whole fit with it is better on the held-out rows ('affine' and 'group-logistic' not "
        "with --engine dask)",
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


def _fit_run_options(f) -> None:
    """Held-out rows, stopping, seed, discovery, the output and the engine."""
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


def _add_predict(sub) -> None:
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


def _add_audit(sub) -> None:
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
    from .compare import add_period_option

    add_period_option(au)


def _add_report(sub) -> None:
    from .compare import add_period_option

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


def _add_discover(sub) -> None:
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


def _add_dashboard(sub) -> None:
    d = sub.add_parser("dashboard", help="start the Streamlit dashboard")
    d.add_argument("--port", type=int, default=8501)
    d.add_argument("--data", help="CSV/Parquet to open instead of the bundled demo dataset")
    d.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; anything else serves the network: a warning is printed)",
    )


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


def _engine_options(p):
    from .dask import add_engine_options

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

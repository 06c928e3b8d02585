"""Settings of a dashboard run and the prepared label: the frozen spec dataclasses (:class:`LabelSpec`,
:class:`BaseSpec`, :class:`SplitSpec`, :class:`FitSettings`) that key every cache, the record of a finished run
(:class:`AuditRun`), and label preparation (:func:`prepare_label`, binary labels included). These are the plain
values every other part of the engine room (:mod:`app.services.base_model`, :mod:`app.services.pipeline`, :mod:`app.services.jobs`,
:mod:`app.services.discovery`) and the Streamlit pages pass around; they import nothing from those modules, so the UI can
build settings without loading scikit-learn or the fitting code.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mmc_core.common import DataError
from mmc_core.fit import FittedModel
from mmc_core.groups import GROUP_INFO_KEYS  # noqa: F401 - re-exported; defined once, in mmc_core

SPLIT_NAMES = {
    "base": "base-model training",
    "fit": "multicalibration fitting",
    "calibration": "interval calibration (held out of fitting)",
    "test": "test (audit)",
}
BASE_MODELS = {
    # the classifier twins for a 0/1 label (app.services.base_model.fit_base_model): named so, not as regressors
    "hgb": "gradient boosting (HistGradientBoosting regressor; classifier for a 0/1 label)",
    "ridge": "ridge regression (one-hot + standardised; logistic for a 0/1 label)",
}
STEP_HELP = {
    "exact": "exact: shift each violating cell by its mean residual (fast; at least the paper's progress)",
    "paper": "paper: move by alpha (beta) per update, as in the paper (slow; the textbook algorithm)",
}


# ---------------------------------------------------------------------------------------------------
# specs (frozen, hashable: they key the caches)
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LabelSpec:
    """How the label column becomes the fitted label.

    scaling: ``observed`` (min / max of all rows), ``declared`` (``lo``, ``hi``; rows outside are an error)
    or ``robust`` (clip at the ``q_lo`` / ``q_hi`` quantiles of all rows; the clipped count is reported).
    log: fit ln(label) (all values must be > 0); every output is then in log units.
    """

    column: str
    scaling: str = "observed"
    lo: float | None = None
    hi: float | None = None
    q_lo: float = 0.01
    q_hi: float = 0.99
    log: bool = False
    # the label column is itself a natural log (log wage): the audit states mean errors also in percent, as it
    # does for ``log`` (mmc_core.auditing.metrics.audit's label_scale)
    percent: bool = False
    # binary labels (two distinct values): "auto" switches to a classifier audit; ``positive`` names the
    # positive class (as text) when the values are not 0/1 or true/false. Scaling and log are then unused.
    task: str = "auto"
    positive: str | None = None


@dataclass(frozen=True)
class BaseSpec:
    """The initial mean: ``none`` (the label mean), ``column`` (an existing prediction column, label units)
    or ``model`` (a scikit-learn model, ``model`` in BASE_MODELS, fitted on ``features`` of the base rows);
    ``variance``: with ``model``, the initial variance from a base variance model too (see the field)."""

    kind: str = "none"
    column: str | None = None
    model: str = "hgb"
    features: tuple = ()
    # an in-app model of a regression label with a fitted variance: also fit a base variance (a model of the base
    # model's squared residuals on the same rows, app.services.base_variance) that the variance starts from
    variance: bool = True


@dataclass(frozen=True)
class SplitSpec:
    """Shares of all rows: ``test`` for the audit, ``base`` for training an in-app base model (ignored
    otherwise); the rest is for multicalibration. Seeded, stratified by nothing (a plain permutation)."""

    test: float = 0.3
    base: float = 0.3
    seed: int = 0


# names of labels that are natural logs: log_wage, ln_price, logsales, and the wooldridge style lwage / lsalary
_LOG_NAME = re.compile(
    r"^(?:(?:log|ln)(?:[_\-. ]|(?!in|ic|ist|o)[a-z])|l(?:wage|sal|salary|price|inc|income|earn|earns|earnings|rent|"
    r"sales|output|value|crime|pop|avgsal|hrwage|faminc|rev|cost|emp|hours|hrs|gdp|y)\b)",
    re.IGNORECASE,
)


def looks_like_log(name) -> bool:
    """Whether a label's name says it is a natural log (the dashboard's starting guess, which the analyst sees
    and can change)."""
    return isinstance(name, str) and bool(_LOG_NAME.match(name.strip()))


def label_scale(spec: LabelSpec, task: str = "regression") -> str:
    """The audit's label_scale for a label spec and the fitted model's task: "log" when a regression's fitted
    label is a natural log (logged in the app or declared one), else "linear"."""
    return "log" if (spec.log or spec.percent) and task != "binary" else "linear"


def binary_values(frame: pd.DataFrame, label) -> list | None:
    """The two values of a binary label column (None when it is not binary), and whether they need a declared
    positive class: [values..., needs_positive]."""
    if label not in frame.columns:
        return None
    s = frame[label]
    vals = list(pd.unique(s.dropna()))
    if len(vals) != 2:
        return None
    is01 = all(
        isinstance(v, (bool, np.bool_))
        or (isinstance(v, (int, float, np.integer, np.floating)) and float(v) in (0.0, 1.0))
        for v in vals
    )
    return sorted(str(v) for v in vals) + [not is01]


SKEWED = 1.0  # |sample skewness| of the label above which the app's "auto" mean buckets are quantile buckets


def label_skewness(y) -> float:
    """The sample skewness of a label (0 for fewer than 3 values or no spread)."""
    y = np.asarray(y, dtype=float)
    y = y[np.isfinite(y)]
    if y.size < 3 or not y.std() > 0:
        return 0.0
    return float(np.mean(((y - y.mean()) / y.std()) ** 3))


def mean_bucket_rule(choice: str, y) -> str:
    """The estimator's mean_buckets for the app's choice: "auto" is quantile for a skewed label (one uniform bucket
    held 94% of a wage table's rows), uniform otherwise."""
    if choice in ("uniform", "quantile"):
        return choice
    return "quantile" if abs(label_skewness(y)) > SKEWED else "uniform"


@dataclass(frozen=True)
class FitSettings:
    """The estimator's parameters and the audit's. ``alpha`` / ``beta`` may be a rule, as in ``mmc fit``: "se"
    (the library default: the per-cell standard-error test) or "auto" (the older noise threshold);
    ``early_stopping`` True, False or "auto" (the library default: on whenever rows are held out)."""

    alpha: float | str = "se"
    beta: float | str = "se"
    n_buckets: int = 5
    # "auto": quantile buckets when the label is skewed (SKEWED), else uniform; or "uniform" / "quantile"
    mean_buckets: str = "auto"
    n_moments: int = 2
    step: str = "exact"
    odd_moments: str = "absolute"
    calibration_fraction: float = 0.25
    early_stopping: bool | str = "auto"
    max_rounds: int | None = None
    delta: float = 0.1
    gamma: float = 0.05
    n_boot: int = 200
    threshold: float = 0.5  # binary labels: the decision threshold of the audit's rates
    # discovery during the fit (``mmc fit --discover``): audit the fitted model with the learning oracle on the
    # fitting rows, add the sets it accepts as groups, refit (at most ``discover_rounds`` times)
    discover: bool = False
    discover_features: tuple = ()
    discover_depth: int = 3
    discover_min_mass: float = 0.01
    discover_rounds: int = 2


@dataclass
class PreparedLabel:
    y: np.ndarray  # fitted label (after log / clipping), all rows
    lo: float
    hi: float
    source: str  # observed | declared | robust
    name: str  # display name, e.g. "wage" or "log(wage)"
    n_clipped: int = 0
    note: str = ""
    task: str = "regression"  # or "binary": y is 0/1, lo = 0, hi = 1
    classes: tuple = ()  # binary: (negative, positive) as in the data


@dataclass
class AuditRun:
    """Everything one pipeline run produced (kept in session state; survives reruns)."""

    model: FittedModel
    history: list
    converged: bool
    stopped: bool
    label: PreparedLabel
    base: np.ndarray | None  # base prediction of every row (label units after log), or None
    base_spec: BaseSpec
    label_spec: LabelSpec
    split: dict  # name -> row indices (base / fit / calibration / test)
    settings: FitSettings
    groups_json: dict
    audit: object = None  # mmc_core.auditing.metrics.AuditResult on the test rows (None if unavailable)
    audit_error: str = ""
    timings: dict = field(default_factory=dict)
    data_key: str = ""
    data_name: str = ""
    base_metrics: dict = field(default_factory=dict)
    finished_at: float = 0.0
    thresholds: dict = field(default_factory=dict)  # alpha, beta, moment_betas actually used; auto: bool
    split_seed: int = 0
    # every row's base variance (fitted-label units squared) from the in-app base variance model, or None: the
    # model reads it from the column its init_variance names, which the user's table does not have
    # (app.services.run_tables.model_table adds it)
    base_variance: np.ndarray | None = None

    @property
    def alpha(self) -> float:
        return float(self.thresholds.get("alpha", self.settings.alpha))

    @property
    def beta(self) -> float:
        return float(self.thresholds.get("beta", self.settings.beta))

    @property
    def test_rows(self) -> np.ndarray:
        return self.split["test"]

    def summary(self) -> dict:
        info = getattr(self.model, "info", {}) or {}
        return {
            "converged": self.converged,
            "stopped": self.stopped,
            "rounds": info.get("rounds"),
            "kept_round": info.get("kept_round"),
            "mean_updates": info.get("mean_updates"),
            "moment_updates": info.get("moment_updates"),
            "n_groups": info.get("n_groups"),
            "split": {k: int(v.size) for k, v in self.split.items()},
            "timings": dict(self.timings),
            "task": getattr(self.label, "task", "regression"),
        }


# ---------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------
def threshold_rules(model) -> dict:
    """{"alpha": rule, "beta": rule} as the fit applied them ("se", "auto" or "given"): older model files kept
    "se" for a paper-step fit, which falls back to the "auto" noise rule (mmc_core.fit.thresholds.effective_rule)."""
    from mmc_core.fit import effective_rule

    info, step = dict(model.info or {}), model.params.step
    return {k: effective_rule(info.get(f"{k}_rule", "given"), step) for k in ("alpha", "beta")}


def descent_thresholds(model) -> tuple:
    """(alpha, beta or None) the descent compared its cells against, for the convergence figure and the bound
    on updates: with the "se" rule the values the kept model achieves (the per-cell test is the real gate),
    otherwise the thresholds used (``info["thresholds_used"]``), which the stated ones exceed when early
    stopping kept a round that misses them. beta is None for a mean-only model."""
    p, info = model.params, dict(model.info or {})
    used = info.get("thresholds_used") or {}
    se = threshold_rules(model)["alpha"] == "se"
    alpha = p.alpha if se or "alpha" not in used else float(used["alpha"])
    if not model.moments:
        return alpha, None
    betas = used.get("betas") or {}
    beta = p.beta if se or "2" not in betas else float(betas["2"])
    return alpha, beta


def not_converged_note(has_moments: bool) -> str:
    """What a stopped or capped model's guarantees are, for every page and report that warns about it: the
    stated thresholds are what the kept model achieves on its fitting rows (mmc_core.fit.fit_steps.state_achieved),
    so its guarantees hold at those values, not at the ones the fit was asked for."""
    stated = "α and β" if has_moments else "α"
    return (
        "This model did not converge (the run was stopped or capped): it does not reach the thresholds the fit "
        f"was asked for. Its guarantees hold on its fitting rows at the {stated} it achieves, stated here."
    )


def missed_reason(info: dict) -> str:
    """Why a kept model misses thresholds its descent used, in words (a stated alpha / beta above the one used):
    the run was stopped or capped; in model files from before the thresholds contract (issue 34) also: early
    stopping kept an earlier round, or the per-cell standard-error test left cells uncorrected."""
    parts = []
    if info.get("early_stopped"):
        parts.append(f"early stopping kept round {info.get('kept_round')}, the best on the held-out rows")
    if float(info.get("z") or 0.0) > 0:
        parts.append(
            f"cells whose error was not significant against their own standard error (|t| < {float(info['z']):.2f}) "
            "were left uncorrected"
        )
    if info.get("stopped_by_user"):
        parts.append("the run was stopped")
    elif not info.get("run_converged", info.get("converged", True)):
        parts.append("the run was capped")
    cells = info.get("shrunken_cells")
    if isinstance(cells, dict) and cells.get("kept"):
        # after the descent: the mean moves, so the moments' cells (measured around it) move too
        moments = bool((info.get("thresholds_used") or {}).get("betas"))
        parts.append(
            "the shrunken cell corrections after the descent moved the mean"
            + (", and with it the moments' cells" if moments else "")
        )
    return "; ".join(parts) if parts else "the kept model's cells were not all corrected"


def kept_model_text(info: dict) -> str:
    """Which model a fit kept, in words: the last round's, or with early stopping an earlier round's (the best
    on the held-out rows), so that a stopped or early-stopped run never claims its last round was kept."""
    rounds, kept = info.get("rounds"), info.get("kept_round")
    if info.get("early_stopped") and kept is not None and kept != rounds:
        return f"the model of round {kept:,} (the best on the held-out rows; the descent ran {rounds:,} rounds)"
    if rounds == 0:  # round 0: before the first mean update (the moments' first pass, if any)
        return "the model as fitted so far (no mean update yet)"
    return f"the model after {rounds:,} round{'s' if rounds != 1 else ''}"


def count(n, word: str) -> str:
    """``n`` and ``word`` in the right number ("1 round", "2,046 rounds"); ``n`` None reads "?"."""
    if n is None:
        return f"? {word}s"
    return f"{int(n):,} {word}{'' if int(n) == 1 else 's'}"


def interval_range_note(audit_params: dict, declare: str = "declare it (mmc fit --label-range LO,HI)") -> str | None:
    """A sentence when the audit's intervals reach past the label's observed range (None when none do, or when the
    range was declared: the ends are then clipped to it). ``declare``: how the reader declares a known range.
    The calibrated intervals are the ones named when the audit has them, else the first method computed."""
    past = audit_params.get("intervals_past_range") or {}
    lab = audit_params.get("label") or {}
    if not isinstance(past, dict) or not past or lab.get("source") == "declared":
        return None
    from app.figures.figure_style import format_number, interval_text

    m = "calibrated" if "calibrated" in past else next(iter(past))
    below, above = (float(v) for v in past[m])
    if not (below or above):
        return None
    lo, hi = float(lab.get("lo", 0.0)), float(lab.get("hi", 0.0))
    where = " and ".join(
        t
        for t in (
            f"{_share(below)} of the lower ends below {format_number(lo, 6)}" if below else "",
            f"{_share(above)} of the upper ends above {format_number(hi, 6)}" if above else "",
        )
        if t
    )
    return (
        f"The {m} intervals reach beyond the label's observed range {interval_text(lo, hi, 6)} on the audited rows ({where}). "
        "They are not cut there because an observed range does not bound new labels. If the label cannot leave a "
        f"known range (a count or hours cannot be negative), {declare}: interval ends are then clipped to it, and "
        "no label can fall outside, so coverage stays as it is."
    )


def _share(v: float) -> str:
    """0.234 -> "23%", 0.0004 -> "<1%" (a share that is not 0 is never printed as 0%)."""
    return "<1%" if 0 < v < 0.005 else f"{v:.0%}"


def outside_range_note(audit_params: dict) -> str | None:
    """A sentence when some audited labels lie outside the model's label range (None otherwise): the model never
    predicts outside it, so those rows' errors enter every table as they are, and the analyst should know
    (a different unit, a different population), whatever the audit then says."""
    n_out = int(audit_params.get("label_outside_range") or 0)
    if n_out <= 0:
        return None
    from app.figures.figure_style import interval_text

    lab = audit_params.get("label") or {}
    n = int(audit_params.get("n") or 0)
    how = "declared" if lab.get("source") == "declared" else "fitted"
    return (
        f"{n_out:,} of the {n:,} audited labels lie outside the model's {how} label range "
        f"{interval_text(float(lab.get('lo', 0)), float(lab.get('hi', 0)), 6)}, which its predictions never leave: their "
        "errors weigh in every group they belong to (check the unit, or whether these rows belong to the "
        "population the model was fitted on)"
    )


def frame_key(df: pd.DataFrame, name: str = "") -> str:
    """A content hash of a table (fast: pandas' row hashes on at most all rows, summed with shape/columns)."""
    h = hashlib.sha1(usedforsecurity=False)
    h.update(name.encode())
    h.update(repr((df.shape, [str(c) for c in df.columns], [str(t) for t in df.dtypes])).encode())
    try:
        h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    except TypeError:  # unhashable cells (lists): fall back to the CSV text of the table
        h.update(df.to_csv(index=False).encode())
    return h.hexdigest()[:16]


def prepare_label(df: pd.DataFrame, spec: LabelSpec) -> PreparedLabel:
    """The fitted label of every row and its range, or a DataError explaining what is wrong."""
    from app.services.io import numeric_column

    if not spec.column:
        raise DataError("choose a label column")
    binary = binary_label(df, spec)
    if binary is not None:
        return binary
    y = numeric_column(df, spec.column, "label column")
    name = spec.column
    note = ""
    if spec.log:
        bad = int(np.sum(y <= 0))
        if bad:
            raise DataError(
                f"log scale needs a positive label: {bad} row(s) of '{spec.column}' are <= 0 "
                f"(smallest {float(np.min(y)):g}); turn log off or use a shifted column"
            )
        y = np.log(y)
        name = f"log({spec.column})"
    n_clipped = 0
    if spec.scaling == "observed":
        lo, hi = float(np.min(y)), float(np.max(y))
        note = f"observed range of all {y.size:,} rows"
    elif spec.scaling == "declared":
        if spec.lo is None or spec.hi is None:
            raise DataError("a declared label range needs both LO and HI")
        lo, hi = float(spec.lo), float(spec.hi)
        if spec.log:
            if lo <= 0:
                raise DataError("with log scale the declared range must be positive (it is given in label units)")
            lo, hi = math.log(lo), math.log(hi)
        if not hi > lo:
            raise DataError(f"the declared label range needs LO < HI, got [{spec.lo}, {spec.hi}]")
        from app.figures.figure_style import interval_text

        outside = int(np.sum((y < lo) | (y > hi)))
        if outside:
            raise DataError(
                f"{outside} label value(s) lie outside the declared range {interval_text(spec.lo, spec.hi, 6)} "
                f"(min {float(np.min(y)):g}, max {float(np.max(y)):g}); widen it or choose 'robust'"
            )
        note = "declared range"
    elif spec.scaling == "robust":
        if not 0 <= spec.q_lo < spec.q_hi <= 1:
            raise DataError(
                f"robust range needs 0 <= lower quantile < upper quantile <= 1, got {spec.q_lo}, {spec.q_hi}"
            )
        lo, hi = (float(v) for v in np.quantile(y, [spec.q_lo, spec.q_hi]))
        n_clipped = int(np.sum((y < lo) | (y > hi)))
        y = np.clip(y, lo, hi)
        note = f"clipped at the {spec.q_lo:.1%} and {spec.q_hi:.1%} quantiles: {n_clipped:,} row(s) clipped"
    else:
        raise DataError(f"unknown label scaling {spec.scaling!r}")
    if not hi > lo:
        raise DataError(f"the label '{spec.column}' is constant ({lo:g}) in this range; there is nothing to calibrate")
    return PreparedLabel(y=y, lo=lo, hi=hi, source=spec.scaling, name=name, n_clipped=n_clipped, note=note)


def label_values(df: pd.DataFrame, column: str) -> list:
    """The distinct non-missing values of a column (at most 3 are looked at: enough to tell binary)."""
    vals = pd.unique(df[column].dropna())
    return list(vals[:3])


def binary_label(df: pd.DataFrame, spec: LabelSpec) -> PreparedLabel | None:
    """The prepared 0/1 label when ``spec.column`` is binary (two distinct values) and the task allows it; None
    for a regression label. A DataError names the column when the positive class is needed or unknown."""
    from mmc_core.auditing import resolve_task

    if spec.task == "regression" or spec.column not in df.columns:
        return None
    s = df[spec.column]
    if s.nunique(dropna=True) != 2:
        if spec.task == "binary":
            raise DataError(f"the label '{spec.column}' is not binary: it has {s.nunique(dropna=True)} distinct values")
        return None
    miss = int(s.isna().sum())
    if miss:
        raise DataError(f"the binary label '{spec.column}' has {miss:,} missing value(s): drop those rows first")
    positive: Any = spec.positive if spec.positive not in ("", None) else None
    numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
    if positive is not None and numeric:
        try:
            positive = float(positive)
        except ValueError:
            raise DataError(f"positive class {spec.positive!r} is not a value of the label '{spec.column}'") from None
    if positive is not None and pd.api.types.is_bool_dtype(s):
        positive = {"true": True, "false": False}.get(str(positive).lower(), positive)
    if positive is None and not (pd.api.types.is_bool_dtype(s) or (numeric and set(pd.unique(s)) <= {0, 1})):
        shown = ", ".join(repr(v) for v in sorted(pd.unique(s), key=str))
        raise DataError(
            f"the label '{spec.column}' has the two values {shown}: choose its positive class (the "
            "outcome whose probability is predicted)"
        )
    _, y, info = resolve_task(s, "binary", positive, spec.column)
    neg, pos = info["classes"]
    return PreparedLabel(
        y=y,
        lo=0.0,
        hi=1.0,
        source="binary",
        name=spec.column,
        note=f"binary label: positive class {pos!s} ({int(y.sum()):,} of {y.size:,} rows)",
        task="binary",
        classes=(neg, pos),
    )


def settings_dict(settings: FitSettings) -> dict:
    return asdict(settings)


def groups_key(groups_json) -> str:
    return hashlib.sha1(json.dumps(groups_json, sort_keys=True).encode(), usedforsecurity=False).hexdigest()[:16]


DISCOVERED_PREFIX = "found: "  # names of discovered groups start with this (every table and figure shows it)


def base_variance_text(info: dict) -> str | None:
    """Where the variance started, for the Run page's fit notes and the PDF's settings: the estimator's sentence
    (:func:`mmc_core.estimator.describe_base_variance`) and, for an in-app base variance
    (:mod:`app.services.base_variance`), what fitted it or why it was not used (``info["base_variance_note"]``).
    None when the run had neither."""
    from mmc_core.estimator import describe_base_variance

    parts = [t for t in (info.get("base_variance_note"), describe_base_variance(info)) if t]
    return "; ".join(parts) or None

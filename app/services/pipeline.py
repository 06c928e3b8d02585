"""One audit run, start to end, without threads: split the rows (:func:`split_rows`), take the base prediction
(:mod:`app.services.base_model`), fit :class:`mmc_core.MomentMulticalibrator` with a callback and a stop flag
(:func:`run_pipeline`), audit the fitted model on the test rows (:func:`audit_run`); plus what the pages derive
from a finished run (the export table, classifier rates at a new threshold, one row's details) and the threshold
preview the live chart draws before the fit starts (:func:`planned_thresholds`, asked of the estimator). The
background jobs (:mod:`app.services.jobs`) call :func:`run_pipeline`; the tests call it directly.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd

from app.services.base_model import StoppedByUser, base_prediction
from app.services.base_variance import run_base_variance, variance_column_name
from app.services.run_tables import (  # noqa: F401 - take_table_rows and the run tables: their old import path
    classifier_rates,
    model_table,
    output_prefix,
    predictions_table,
    row_details,
    take_table_rows,
)
from app.services.specs import (
    GROUP_INFO_KEYS,
    AuditRun,
    BaseSpec,
    FitSettings,
    LabelSpec,
    SplitSpec,
    label_scale,
    mean_bucket_rule,
    prepare_label,
)
from mmc_core.common import DataError


def split_rows(n: int, spec: SplitSpec, with_base_model: bool, calibration_fraction: float = 0.0) -> dict:
    """Disjoint sorted row indices: ``base`` (empty without an in-app model), ``fit``, ``test``.

    ``calibration`` is reported for display only: the estimator draws it from the fit rows itself
    (see :func:`run_pipeline`, which replaces it with the estimator's actual choice)."""
    if not 0 < spec.test < 1:
        raise DataError(f"the test share must be between 0 and 1, got {spec.test}")
    base_share = spec.base if with_base_model else 0.0
    if not 0 <= base_share < 1 or spec.test + base_share >= 0.95:
        raise DataError(
            f"test share {spec.test:.0%} + base-model share {base_share:.0%} leave too few rows "
            "for multicalibration (keep their sum below 95%)"
        )
    perm = np.random.default_rng(spec.seed).permutation(n)
    n_test = max(1, int(round(spec.test * n)))
    n_base = int(round(base_share * n))
    test = np.sort(perm[:n_test])
    base = np.sort(perm[n_test : n_test + n_base])
    fit = np.sort(perm[n_test + n_base :])
    if fit.size < 20:
        raise DataError(f"only {fit.size} row(s) left for multicalibration; use a larger table or smaller shares")
    if with_base_model and base.size < 10:
        raise DataError(f"only {base.size} row(s) to train the base model; raise its share")
    n_cal = int(round(calibration_fraction * fit.size))
    return {"base": base, "fit": fit, "test": test, "calibration": np.zeros(n_cal, dtype=np.int64)}


# the FitSettings fields that are MomentMulticalibrator parameters of the same name
ESTIMATOR_SETTINGS = (
    "alpha",
    "beta",
    "n_buckets",
    "step",
    "odd_moments",
    "calibration_fraction",
    "early_stopping",
    "max_rounds",
)


def make_estimator(settings: FitSettings, label, seed: int, variance_column: str | None = None):
    """The estimator a run fits with these settings on this prepared label (a classifier audit fits the mean
    only), its variance starting from the column ``variance_column`` when given (the in-app base variance).
    The live threshold preview asks this same estimator what it will use (:func:`planned_thresholds`)."""
    from mmc_core import MomentMulticalibrator

    binary = label.task == "binary"
    shared = {k: getattr(settings, k) for k in ESTIMATOR_SETTINGS}
    return MomentMulticalibrator(
        **shared,
        mean_buckets="uniform" if binary else mean_bucket_rule(settings.mean_buckets, label.y),
        n_moments=1 if binary else settings.n_moments,
        label_range=(label.lo, label.hi),
        random_state=seed,
        task="binary" if binary else "regression",
        variance_column=variance_column,
    )


def fit_table(df: pd.DataFrame, rows: np.ndarray, columns, variance=None) -> pd.DataFrame:
    """:func:`take_table_rows`, plus the base variance column when ``variance`` = (column, every row's base
    variance) is given: the table the estimator fits on (the user's table does not have that column)."""
    table = take_table_rows(df, rows, columns)
    if variance is not None:
        table[variance[0]] = np.asarray(variance[1], dtype=float)[rows]
    return table


def planned_thresholds(
    est, df: pd.DataFrame, label, base: np.ndarray | None, groups, fit_rows: np.ndarray, variance=None
) -> dict:
    """What ``est`` will use on these fitting rows, from the estimator's own resolver
    (:meth:`mmc_core.MomentMulticalibrator.planned_thresholds`: same split, same "auto" / "se" rule), so the
    live chart draws the thresholds the fit will use. Keys: see that method (``z``, ``n_fit``, ``resid_sd``
    feed the Run page's description of the "se" test)."""
    return est.planned_thresholds(
        fit_table(df, fit_rows, sorted(groups.columns()), variance),
        label.y[fit_rows],
        groups,
        base_prediction=None if base is None else base[fit_rows],
        label_name=label.name,
    )


def _groups_json_with_info(groups, given) -> dict:
    """``groups.to_json()`` with the descriptive fields (``kind``, ``p_value``...) of the given groups file kept,
    so the run's groups file still marks discovered groups."""
    out = groups.to_json()
    raw = (given.get("groups") if isinstance(given, dict) else given) or []
    info = {
        g["name"]: {k: g[k] for k in GROUP_INFO_KEYS if k in g}
        for g in raw
        if isinstance(g, dict) and isinstance(g.get("name"), str)
    }
    out["groups"] = [{**g, **info.get(g["name"], {})} for g in out["groups"]]
    return out


def _discovery_features(df: pd.DataFrame, label_spec: LabelSpec, settings: FitSettings) -> list:
    feats = list(settings.discover_features)
    if not feats:
        raise DataError(
            "discovery during the fit needs feature columns: choose them on the Groups page (tab 'Discover groups')"
        )
    missing = [f for f in feats if f not in df.columns]
    if missing:
        raise DataError(f"discovery feature column(s) not in the data: {', '.join(map(str, missing))}")
    if label_spec.column in feats:
        raise DataError(f"the label '{label_spec.column}' cannot be a discovery feature")
    return feats


def error_metrics(y, pred) -> dict:
    if pred is None or y.size == 0:
        return {}
    err = pred - y
    ss = float(np.sum((y - y.mean()) ** 2))
    return {
        "rmse": float(np.sqrt(np.mean(err**2))),
        "mae": float(np.mean(np.abs(err))),
        "r2": float(1 - np.sum(err**2) / ss) if ss > 0 else float("nan"),
    }


def worse_note(what: str, before_loss, after_loss) -> str | None:
    """A sentence when a per-row loss (squared error, log loss) is higher after multicalibration than before on
    the same rows: by how much, whether beyond chance (the paired z of the per-row differences, which shares the
    rows' noise between the two) and why it can happen. None when it is not higher."""
    d = np.asarray(after_loss, dtype=float) - np.asarray(before_loss, dtype=float)
    d = d[np.isfinite(d)]
    if d.size < 2 or not float(d.mean()) > 0:
        return None
    se = float(d.std(ddof=1)) / np.sqrt(d.size)
    z = float(d.mean()) / se if se > 0 else float("inf")
    sure = (
        f"beyond chance (paired z = {z:.1f})"
        if z >= 2
        else f"within sampling noise (paired z = {z:.1f}): these rows do not show that it is worse"
    )
    return (
        f"The {what} is higher after multicalibration than for the base on the test rows, {sure}. Multicalibration "
        "moves each group's and bucket's predictions to what its fitting rows show; on new rows the part of a "
        "correction that was noise adds error. The fit's stage summary (Run page) says which step moved the "
        "held-out error; more rows per group, fewer or larger groups, or a larger minimum cell help."
    )


# ---------------------------------------------------------------------------------------------------
# the pipeline
# ---------------------------------------------------------------------------------------------------
def _prepare(df, label_spec: LabelSpec, base_spec: BaseSpec, split_spec: SplitSpec, groups_json, settings) -> tuple:
    """The prepared label, the groups (checked against the table and the label) and the split of the rows."""
    from mmc_core import GroupSet

    label = prepare_label(df, label_spec)
    groups = GroupSet.from_json(groups_json)
    missing = sorted(c for c in groups.columns() if c not in df.columns)
    if missing:
        raise DataError(f"the groups refer to column(s) not in the data: {', '.join(missing)}")
    if label_spec.column in groups.columns():
        raise DataError(f"the label '{label_spec.column}' cannot define groups (groups must be known for new rows)")
    from .io import check_audit_size, check_fit_size

    memb = groups.evaluate(df)  # the fit's and the audit's memory grow with the (row, group) pairs: checked first
    pairs = len(memb.rows) + len(df)
    del memb
    check_fit_size(len(df), len(groups), pairs)
    check_audit_size(len(df), len(groups), pairs)
    split = split_rows(len(df), split_spec, base_spec.kind == "model", settings.calibration_fraction)
    return label, groups, split


def _base(df, label, label_spec: LabelSpec, base_spec: BaseSpec, split: dict, split_spec, data_key, stop, say):
    """The base prediction and its note (:func:`app.services.base_model.base_prediction`), saying the base model's
    progress; StoppedByUser when Stop came before it."""
    progress = None
    if base_spec.kind == "model":
        n_base = split["base"].size
        say(f"fitting the base model on {n_base:,} rows")

        def progress(it):
            say(f"fitting the base model on {n_base:,} rows ({it} boosting iterations)")

    if stop is not None and stop():
        raise StoppedByUser("stopped before the base model was fitted")
    return base_prediction(df, label, label_spec, base_spec, split, split_spec, data_key, stop=stop, progress=progress)


def _bases(df, label, label_spec, base_spec, split, split_spec, data_key, n_moments, stop, say, timings) -> tuple:
    """(base prediction or None, the note, base variance or None, its sentence or ""): the base model and, when
    the run fits one, its base variance (:func:`app.services.base_variance.run_base_variance`), each timed in
    ``timings``; the note says both."""
    t1 = time.perf_counter()
    base, base_note = _base(df, label, label_spec, base_spec, split, split_spec, data_key, stop, say)
    timings["base_model"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    bvar, bvar_note = run_base_variance(
        df, label, label_spec, base_spec, split, split_spec, data_key, n_moments, stop, say
    )
    if bvar_note:
        timings["base_variance"] = time.perf_counter() - t1
        base_note = f"{base_note}; base variance: {bvar_note}"
    return base, base_note, bvar, bvar_note


def _fit(est, df, label, label_spec, base_spec, groups, base, fit_rows, settings, rows_text, callback, stop, say):
    """Fit ``est`` on the fitting rows, with discovery when the settings ask for it; the groups of the fitted
    model (discovery adds some). ``base`` is (base prediction or None, (column, base variance) or None)."""
    base, variance = base
    group_cols = sorted(groups.columns())
    X_fit = fit_table(df, fit_rows, group_cols, variance)
    base_name = base_spec.column if base_spec.kind == "column" else ("base_model" if base is not None else None)
    if settings.discover:
        feats = _discovery_features(df, label_spec, settings)
        from mmc_core.discovery import fit_with_discovery

        say(f"multicalibrating on {rows_text} and {len(groups)} groups, discovering groups on {len(feats)} feature(s)")
        X_fit = fit_table(df, fit_rows, sorted(set(group_cols) | set(feats)), variance)
        try:
            fit_with_discovery(
                est,
                X_fit,
                label.y[fit_rows],
                groups,
                base_prediction=None if base is None else base[fit_rows],
                features=feats,
                max_depth=int(settings.discover_depth),
                min_mass=float(settings.discover_min_mass),
                rounds=int(settings.discover_rounds),
                label_name=label.name,
                base_name=base_name,
                stop=stop,
                callback=callback,
            )
        except ImportError as e:
            raise DataError(f"discovery needs scikit-learn ({e})") from None
        groups = est.model_.groups
    else:
        est.fit(
            X_fit,
            label.y[fit_rows],
            groups,
            base_prediction=None if base is None else base[fit_rows],
            callback=callback,
            label_name=label.name,
            base_name=base_name,
            stop=stop,
        )
    return groups


def _record_run_facts(model, label, base_note: str, groups, groups_json, bvar_note: str = "") -> None:
    """What the model records of the run: a classifier's classes, where the label range came from, the base
    prediction's note (and the base variance's sentence) and the discovered groups."""
    if label.task == "binary":
        model.binary = {
            "classes": [_json_scalar(c) for c in label.classes],
            "positive": _json_scalar(label.classes[1]),
            "floor": float((model.binary or {}).get("floor", 0.0)),
        }
    if label.source in ("observed", "robust"):  # the range was passed explicitly: say where it came from
        from mmc_core import LabelScale

        model.scale = LabelScale(model.scale.lo, model.scale.hi, label.source)
    model.info["label_source"] = label.source
    model.info["label_note"] = label.note
    model.info["base_note"] = base_note
    if bvar_note:  # the Run page's and the report's "Base variance" (app.services.specs.base_variance_text)
        model.info["base_variance_note"] = bvar_note
    # groups found by Discover (they carry "kind", as `mmc discover` writes them): recorded in the model, so the
    # Results page and the PDF report can mark them
    model.info["discovered_groups"] = [
        {"name": g["name"], **{k: g[k] for k in GROUP_INFO_KEYS if k in g}}
        for g in (groups_json.get("groups") if isinstance(groups_json, dict) else groups_json) or []
        if isinstance(g, dict) and "kind" in g and g.get("name") in set(groups.names)
    ]


def _thresholds(est, settings, model) -> dict:
    """The thresholds the fit used (automatic values resolved) and the rule that set them."""
    return {
        "alpha": float(est.alpha_),
        "beta": float(est.beta_),
        "moment_betas": {int(a): float(b) for a, b in getattr(est, "moment_betas_", {}).items()},
        "auto": isinstance(settings.alpha, str) or isinstance(settings.beta, str),
        "rule": model.info.get("alpha_rule", "given"),  # "se" with the paper's step is the "auto" rule
        "z": float(getattr(est, "z_", 0.0) or 0.0),
    }


def run_pipeline(
    df: pd.DataFrame,
    label_spec: LabelSpec,
    base_spec: BaseSpec,
    split_spec: SplitSpec,
    groups_json: dict,
    settings: FitSettings,
    callback=None,
    phase=None,
    data_key: str = "",
    data_name: str = "",
    on_thresholds=None,
    stop=None,
    on_fitted=None,
) -> AuditRun:
    """Prepare, split, base model, fit (with ``callback(history_row) -> stop?``), audit. See module doc.

    ``on_thresholds(dict)`` receives the alpha / beta the fit will use (auto values computed) before it starts."""

    def say(text):
        if phase is not None:
            phase(text)

    timings = {}
    t0 = time.perf_counter()
    say("preparing the label and the split")
    label, groups, split = _prepare(df, label_spec, base_spec, split_spec, groups_json, settings)
    timings["prepare"] = time.perf_counter() - t0

    base, base_note, bvar, bvar_note = _bases(
        df, label, label_spec, base_spec, split, split_spec, data_key, settings.n_moments, stop, say, timings
    )
    variance = None if bvar is None else (variance_column_name(df.columns), bvar)

    fit_rows = split["fit"]
    # the rows as the Run page counts them: the estimator holds a share of its rows out (early stopping,
    # interval calibration) and fits on the rest (the line said 3,500 where the page said 2,625 fitting rows)
    n_held = int(round(settings.calibration_fraction * fit_rows.size))
    rows_text = f"{fit_rows.size - n_held:,} fitting rows" + (f" ({n_held:,} more held out)" if n_held else "")
    say(f"multicalibrating on {rows_text} and {len(groups)} groups")
    t2 = time.perf_counter()
    binary = label.task == "binary"
    if binary:  # a classifier audit: the mean (a probability) only; k, delta and gamma are not used
        settings = replace(settings, n_moments=1)
    est = make_estimator(settings, label, split_spec.seed, None if variance is None else variance[0])
    if on_thresholds is not None:
        on_thresholds(planned_thresholds(est, df, label, base, groups, fit_rows, variance))
    fit_args = (label, label_spec, base_spec, groups, (base, variance), fit_rows, settings, rows_text)
    groups = _fit(est, df, *fit_args, callback, stop, say)
    timings["fit"] = time.perf_counter() - t2
    model = est.model_
    _record_run_facts(model, label, base_note, groups, groups_json, bvar_note)
    split = dict(split)
    split["calibration"] = fit_rows[np.asarray(est.calibration_index_, dtype=np.int64)]
    split["fit"] = fit_rows[np.asarray(est.fit_index_, dtype=np.int64)]

    run = AuditRun(
        model=model,
        history=list(est.history_),
        converged=bool(est.converged_),
        stopped=bool(model.info.get("stopped_by_user")),
        label=label,
        base=base,
        base_spec=base_spec,
        label_spec=label_spec,
        split=split,
        settings=settings,
        groups_json=_groups_json_with_info(groups, groups_json),
        timings=timings,
        data_key=data_key,
        data_name=data_name,
        thresholds=_thresholds(est, settings, model),
        split_seed=split_spec.seed,
        base_variance=bvar,
    )
    test = split["test"]
    if base is not None and not binary:  # RMSE / R² are label-unit metrics: not for a 0/1 outcome
        run.base_metrics = {"base_test": error_metrics(label.y[test], base[test])}
    return _audit_unless_stopped(run, df, stop, on_fitted, say, t0)


def _audit_unless_stopped(run: AuditRun, df, stop, on_fitted, say, t0: float) -> AuditRun:
    """Audit the fitted run on its test rows (after handing a copy to ``on_fitted``), or, when Stop was pressed,
    keep the model as fitted so far, not audited; the total time is ``t0`` on."""
    if stop is not None and stop():  # Stop pressed: keep the model as fitted so far, skip the audit
        run.stopped = True
        run.audit_error = NOT_AUDITED
        run.timings["total"] = time.perf_counter() - t0
        run.finished_at = time.time()
        say("stopped")
        return run
    say(f"auditing on {run.split['test'].size:,} test rows")
    if on_fitted is not None:  # a separate copy: an abandoned audit must not change what the user was given
        on_fitted(replace(run, timings=dict(run.timings), split=dict(run.split)))
    audit_run(run, df)
    run.timings["total"] = time.perf_counter() - t0
    run.finished_at = time.time()
    say("done")
    return run


NOT_AUDITED = "not audited: the run was stopped before its audit"


def _json_scalar(v):
    return v.item() if isinstance(v, np.generic) else v


def audit_labels(run: AuditRun, rows: np.ndarray) -> np.ndarray:
    """The labels of ``rows`` as :func:`mmc_core.auditing.metrics.audit` takes them, i.e. as the data has them: a
    classifier's in its own two classes (the audit maps them to 0/1 through the model's positive class, so a
    run whose positive class is 0 must not pass its prepared 0/1 labels, which are already flipped), a
    regression's as numbers."""
    y = run.label.y[rows]
    if getattr(run.model, "task", "regression") == "binary" and len(run.label.classes) == 2:
        return np.asarray(run.label.classes)[np.asarray(y, dtype=np.int64)]
    return y


def audit_run(run: AuditRun, df: pd.DataFrame) -> AuditRun:
    """Audit ``run``'s model on its test rows (fills ``run.audit`` or ``run.audit_error``)."""
    from mmc_core.common import MMCError as _MMCError

    test = run.split["test"]
    settings = run.settings
    t3 = time.perf_counter()
    try:
        from mmc_core.auditing import audit as audit_fn

        X_test = model_table(df, run, test)
        # a classifier is audited at its decision threshold; a regression's intervals at delta / gamma
        task_args: dict
        if getattr(run.model, "task", "regression") == "binary":
            task_args = {"threshold": settings.threshold}
        else:
            task_args = {"delta": settings.delta, "gamma": settings.gamma, "label_scale": label_scale(run.label_spec)}
        run.audit = audit_fn(
            run.model,
            X_test,
            audit_labels(run, test),
            base=None if run.base is None else run.base[test],
            n_boot=settings.n_boot,
            seed=run.split_seed,
            **task_args,
        )
        run.audit_error = ""
    except ImportError as e:
        run.audit_error = f"the audit module is not available ({e})"
    except _MMCError as e:
        run.audit_error = str(e)
    run.timings["audit"] = time.perf_counter() - t3
    return run

"""The dashboard's engine room, as one import: a compatibility facade that re-exports the public names of the
modules it was split into (issue 15), so ``from app.services.runner import X`` keeps working. New code imports from the
module that defines a name:

* :mod:`app.services.specs`: the settings dataclasses, :class:`AuditRun`, label preparation;
* :mod:`app.services.base_model`: the in-app scikit-learn base model and its process-wide cache;
* :mod:`app.services.pipeline`: splitting, :func:`run_pipeline`, :func:`audit_run`, export tables, threshold preview;
* :mod:`app.services.jobs`: :class:`FitJob`, the worker process / fork server, :func:`prewarm`, :func:`debug`;
* :mod:`app.services.discovery`: Discover on the loaded table and :class:`DiscoverJob`.

Patching a name here (``monkeypatch.setattr(app.services.runner, ...)``) does not change the module that looks it up:
patch the defining module instead.

Everything here is plain Python (no Streamlit), so it is unit-tested directly (tests/test_runner.py) and
the Streamlit pages stay thin. The pipeline (:func:`run_pipeline`) is:

1. prepare the label (:func:`prepare_label`): numeric check, optional log, range (observed / declared /
   robust = clipped at quantiles);
2. split the rows (:func:`split_rows`): base-model training rows (only when a base model is fitted in the
   app), multicalibration fitting rows (of which the estimator itself holds out ``calibration_fraction``
   for interval calibration and held-out tracking), and test rows on which the audit is computed;
3. the base prediction (:func:`base_prediction`): none (constant start), an existing column, or a
   scikit-learn model fitted on the base rows only (cached by :func:`cached_base_model`);
4. fit :class:`mmc_core.MomentMulticalibrator` with a callback (live history, stop flag);
5. audit the fitted model on the test rows (:func:`mmc_core.auditing.metrics.audit`).

:class:`FitJob` runs the pipeline in a daemon thread or (the dashboard) in a child process forked from a
preloaded fork server. Its ``history`` list grows one row per descent round (the page polls it a few times a
second to redraw the convergence chart). :meth:`FitJob.stop` sets a flag that is polled between chunks of
boosting iterations of the base model (nothing is kept), before every single update of the descent (the model
so far is kept, marked "stopped by user", and not audited: :func:`audit_run` audits it on request), and
abandons a running audit at once.
"""

from __future__ import annotations

from app.services.base_model import BOOST_CHUNK, StoppedByUser, base_prediction, cached_base_model, fit_base_model
from app.services.discovery import (
    DiscoverJob,
    DiscoverResult,
    DiscoverSpec,
    describe_finding,
    discovered_group,
    run_discovery,
)
from app.services.jobs import HISTORY_FLUSH, SWITCH_INTERVAL, FitJob, debug, prewarm
from app.services.pipeline import (
    NOT_AUDITED,
    audit_run,
    classifier_rates,
    error_metrics,
    planned_thresholds,
    predictions_table,
    row_details,
    run_pipeline,
    split_rows,
)
from app.services.specs import (
    BASE_MODELS,
    DISCOVERED_PREFIX,
    GROUP_INFO_KEYS,
    SPLIT_NAMES,
    STEP_HELP,
    AuditRun,
    BaseSpec,
    FitSettings,
    LabelSpec,
    PreparedLabel,
    SplitSpec,
    binary_label,
    frame_key,
    groups_key,
    label_values,
    prepare_label,
    settings_dict,
)

__all__ = [
    "LabelSpec",
    "BaseSpec",
    "SplitSpec",
    "FitSettings",
    "PreparedLabel",
    "AuditRun",
    "FitJob",
    "prepare_label",
    "split_rows",
    "base_prediction",
    "fit_base_model",
    "run_pipeline",
    "predictions_table",
    "row_details",
    "frame_key",
    "STEP_HELP",
    "BASE_MODELS",
    "SPLIT_NAMES",
    "StoppedByUser",
    "audit_run",
    "NOT_AUDITED",
    "DiscoverSpec",
    "DiscoverJob",
    "DiscoverResult",
    "run_discovery",
    "describe_finding",
    "discovered_group",
    "DISCOVERED_PREFIX",
    # also used by the pages and tests
    "BOOST_CHUNK",
    "GROUP_INFO_KEYS",
    "HISTORY_FLUSH",
    "SWITCH_INTERVAL",
    "binary_label",
    "cached_base_model",
    "classifier_rates",
    "debug",
    "error_metrics",
    "groups_key",
    "label_values",
    "prewarm",
    "planned_thresholds",
    "settings_dict",
]

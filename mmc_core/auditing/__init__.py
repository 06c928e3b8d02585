"""The audit of a fitted model on labelled rows (:func:`audit`): per-group tables, findings with error
control, the scorecard, classifier audits and the distributions their tests need.

The modules behind this package are private by convention: the app and other users import the names
exported here (``__all__``, loaded on first use); inside mmc_core a module may import another package's
modules directly, never an underscore name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .binary import TASK_BINARY, TASKS, binary_labels, check_threshold, resolve_task, threshold_rates
    from .findings import VARIANCE_TOLERANCE, fcr_miss, normal_isf2, p_words, percent, wilson_interval
    from .metrics import AuditResult, audit, json_clean, residual_variance

_EXPORTS = {
    "AuditResult": "metrics",
    "TASKS": "binary",
    "TASK_BINARY": "binary",
    "VARIANCE_TOLERANCE": "findings",
    "audit": "metrics",
    "binary_labels": "binary",
    "check_threshold": "binary",
    "fcr_miss": "findings",
    "json_clean": "metrics",
    "normal_isf2": "findings",
    "p_words": "findings",
    "percent": "findings",
    "residual_variance": "metrics",
    "resolve_task": "binary",
    "threshold_rates": "binary",
    "wilson_interval": "findings",
}

__all__ = [
    "AuditResult",
    "TASKS",
    "TASK_BINARY",
    "VARIANCE_TOLERANCE",
    "audit",
    "binary_labels",
    "check_threshold",
    "fcr_miss",
    "json_clean",
    "normal_isf2",
    "p_words",
    "percent",
    "residual_variance",
    "resolve_task",
    "threshold_rates",
    "wilson_interval",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

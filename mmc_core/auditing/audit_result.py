"""The audit's result object, :class:`AuditResult`: per-group tables with MetricFrame-style views, and its
strict JSON (:func:`json_clean`). Apart from :mod:`mmc_core.auditing.metrics` so that the classifier audit
(:mod:`mmc_core.auditing.binary`) builds the same object without importing the module that dispatches to it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from ..common.errors import MMCError

__all__ = ["AuditResult", "FORMAT", "VERSION", "json_clean"]

FORMAT = "mmc-audit-audit"
VERSION = 1
_TABLES = ("by_group", "coverage", "width", "calibration_cells", "moment_cells", "coverage_by_bucket")


def json_clean(obj):
    """Strict-JSON version of nested dicts / lists / numpy scalars (NaN and +-inf -> None)."""
    if isinstance(obj, dict):
        return {str(k): json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.ndarray):
        return json_clean(obj.tolist())
    if obj is None or isinstance(obj, (str, int)):
        return obj
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)


# ---- the result object -----------------------------------------------------------------------------------
@dataclasses.dataclass(eq=False, repr=False)
class AuditResult:
    """Per-group audit tables of one model on one labelled table (see the module docstring)."""

    overall: Any  # pandas Series of the whole-population values
    by_group: Any  # the per-group tables (pandas DataFrames, one row per group)
    coverage: Any
    width: Any
    calibration_cells: Any
    moment_cells: Any
    coverage_by_bucket: Any
    params: dict
    findings: Any = ()  # stored as a list
    disparities: Any = ()  # stored as a list
    findings_status: str = "ok"
    task: str = "regression"
    classifier: Any = None  # mmc_core.auditing.binary.ClassifierAudit for a binary model, else None
    # {method: coverage_by_bucket of that method}, every computed method (the dashboard's method choice);
    # not in the JSON, which keeps ``coverage_by_bucket`` of ``params["bucket_method"]`` only
    coverage_by_bucket_of: Any = None  # stored as a dict
    # every listed group: estimates with intervals, findings and the defect sizes its rows can detect
    # (mmc_core.auditing.scorecard); None when the findings failed
    scorecard: Any = None

    def __post_init__(self):
        self.findings = list(self.findings)
        self.disparities = list(self.disparities)
        self.coverage_by_bucket_of = dict(self.coverage_by_bucket_of or {})

    # ---- MetricFrame-style views ----
    def _column(self, column: str) -> tuple[pd.Series, float]:
        if column.startswith("coverage:") or column.startswith("width:"):
            kind, method = column.split(":", 1)
            tab = self.coverage if kind == "coverage" else self.width
            if method not in tab.columns:
                raise MMCError(f"no {kind} for method {method!r}; computed: {', '.join(tab.columns)}")
            return tab[method], float(self.overall[column])
        if column not in self.by_group.columns:
            raise MMCError(
                f"unknown column {column!r}; by_group has {', '.join(self.by_group.columns)} "
                "(or use 'coverage:<method>' / 'width:<method>')"
            )
        return self.by_group[column], float(self.overall[column])

    def difference(self, column: str) -> pd.Series:
        """Each group's value minus the overall value."""
        s, o = self._column(column)
        return (s.astype(float) - o).rename(f"{column} - overall")

    def ratio(self, column: str) -> pd.Series:
        """Each group's value divided by the overall value (NaN when the overall value is 0)."""
        s, o = self._column(column)
        return (s.astype(float) / o if o != 0 else s.astype(float) * np.nan).rename(f"{column} / overall")

    # ---- serialisation ----
    def to_json(self) -> dict:
        d = {"format": FORMAT, "version": VERSION, "overall": json_clean({k: v for k, v in self.overall.items()})}
        for name in _TABLES:
            d[name] = json_clean(getattr(self, name).to_dict(orient="split"))
        d["params"] = json_clean(self.params)
        d["findings"] = json_clean(self.findings)
        d["disparities"] = json_clean(self.disparities)
        d["findings_status"] = self.findings_status
        if self.scorecard is not None:
            d["scorecard"] = json_clean(self.scorecard.reset_index().to_dict(orient="split"))
        if self.task != "regression":
            d["task"] = self.task
            d["threshold"] = self.params.get("threshold")
            d["classifier"] = self.classifier.to_json() if self.classifier is not None else None
        return d

    def __repr__(self) -> str:
        return f"AuditResult(n={self.params['n']}, groups={len(self.by_group)}, methods={list(self.coverage.columns)})"

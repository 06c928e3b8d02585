"""The audit of a binary (classifier) model: :func:`mmc_core.auditing.metrics.audit`'s branch for ``model.task ==
"binary"``, an ``AuditResult`` with ``task="binary"`` built from the classifier metrics of :mod:`mmc_core.auditing.binary`
and the mean and calibration findings on the probability scale.

Apart from the classifier metrics so that :mod:`mmc_core.auditing.binary` stays about a score and a 0/1 outcome, and
the audit's parts (rows, findings, scorecard, result) are imported here only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import intervals as iv
from ..common.errors import MMCError
from ..fit.model import binary_clip
from .audit_findings import audit_rows, group_findings
from .audit_result import AuditResult
from .binary import binary_labels, check_threshold, classifier_audit, reliability_cells
from .findings import status_of
from .scorecard import scorecard

__all__ = ["audit_binary_model"]


def audit_binary_model(model, table, y, base, opts) -> AuditResult:
    """:func:`mmc_core.auditing.metrics.audit` of a binary model (see the metrics module docstring).

    Parameters
    ----------
    model : FittedModel
        A model with ``task == "binary"``.
    table : table
        The audited rows.
    y : array of shape (n,)
        Their labels (the model's two classes).
    base : array of shape (n,) or None
        The base score, when the model was fitted on one.
    opts : AuditOptions
        The audit's checked options (``threshold`` and ``n_buckets`` are checked here).

    Returns
    -------
    AuditResult
        With ``task="binary"`` and the :class:`~mmc_core.auditing.binary.ClassifierAudit` in ``classifier``.
    """
    threshold, n_buckets = check_threshold(opts.threshold), opts.n_buckets
    if isinstance(n_buckets, bool) or not isinstance(n_buckets, (int, np.integer)) or not 1 <= n_buckets <= 100:
        raise MMCError(f"n_buckets must be an integer from 1 to 100, got {n_buckets!r}")
    y01 = binary_labels(model, y)
    n = y01.size
    # the label range of a binary model is [0, 1]: the unit-scale "before" is the base itself, clipped
    ctx, before, base_kind = audit_rows(model, table, n, base, "positive share of the fitting rows")
    mu = binary_clip(model, ctx.mu)
    ca = classifier_audit(
        mu,
        y01,
        model.groups,
        table,
        base=before,
        threshold=threshold,
        n_buckets=int(n_buckets),
        min_cell_count=opts.min_cell_count,
        n_boot=opts.n_boot,
        seed=opts.seed,
    )
    bg = ca.by_group
    cells = reliability_cells(mu, y01, model.groups, table, int(n_buckets), base=before)
    empty = pd.DataFrame(index=bg.index)
    overall = bg.iloc[0].copy()
    overall.name = "overall"
    params = _params(model, opts, threshold, n, int(n_buckets), base_kind)
    found, status, card = _findings(model, ctx, mu, y01, opts, params)
    return AuditResult(
        overall,
        bg,
        empty,
        empty.copy(),
        cells,
        pd.DataFrame(),
        empty.copy(),
        params,
        found,
        [],
        status,
        task="binary",
        classifier=ca,
        scorecard=card,
    )


def _params(model, opts, threshold: float, n: int, n_buckets: int, base_kind: str) -> dict:
    """The binary audit's ``params`` record."""
    return {
        "task": "binary",
        "threshold": threshold,
        "n": int(n),
        "n_buckets": int(n_buckets),
        "label": {
            "lo": 0.0,
            "hi": 1.0,
            "source": "binary",
            "name": (model.info or {}).get("label") if isinstance(model.info, dict) else None,
            "classes": (model.binary or {}).get("classes"),
            "positive": (model.binary or {}).get("positive"),
        },
        "methods": [],
        "methods_unavailable": {},
        "intervals": iv.BINARY_NO_INTERVALS,
        "base": base_kind,
        "n_boot": int(opts.n_boot),
        "seed": int(opts.seed),
        "bootstrap_level": 0.95,
        "min_cell_count": int(opts.min_cell_count),
        "min_group_count": int(opts.min_group_count),
        "error_control": opts.error_control,
        "findings_level": float(opts.findings_level),
        "moments": [],
    }


def _findings(model, ctx, mu, y01, opts, params: dict) -> tuple:
    """(findings, status, scorecard): the mean and calibration tests on the probability scale (``params`` gets
    ``n_tests``); a failure is reported as such, never as "no findings"."""
    pairs = ctx.memb.sums()
    names = list(ctx.memb.names)
    all_tests: list = []
    try:
        found, n_tests = group_findings(
            pairs,
            names,
            model.scale,
            mu,
            y01,
            None,
            model.params.mean_grid,
            None,
            None,
            0.0,
            opts.min_group_count,
            opts.error_control,
            opts.findings_level,
            binary=True,
            collect=all_tests,
        )
        for t in found:  # the mean of a 0/1 outcome is a probability
            t["text"] = t["text"].replace("the mean:", "the probability of the positive class:")
        status = status_of(n_tests, opts.min_group_count)
        params["n_tests"] = n_tests
        card = scorecard(all_tests, names, pairs.group_sums(), n_tests, opts.findings_level, opts.min_group_count)
    except Exception as e:  # noqa: BLE001 - reported as a failure, never as "no findings"
        found, status, card = [], f"failed: {type(e).__name__}: {e}", None
    return found, status, card

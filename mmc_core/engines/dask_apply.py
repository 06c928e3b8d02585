"""A fitted model applied on a Dask DataFrame: predictions (the numpy replay per partition) and the audit's
per-group tables with the achieved (alpha, beta)."""

from __future__ import annotations

import math

import numpy as np

from ..auditing.metrics import residual_variance
from ..common.errors import DataError
from ..common.tables import to_label_array
from .dask_base import model_cache, require, tree_sum

__all__ = ["predict_dask", "audit_tables_dask"]


# ---- prediction and audit tables ----------------------------------------------------------------------------
def _predict_frame(df, model_json, base_col, moments):
    import pandas as pd

    from ..fit.model import FittedModel

    model = model_cache(model_json, FittedModel)
    base = None if base_col is None else to_label_array(df[base_col], f"prediction column '{base_col}'")
    if len(df) == 0:
        out = {"mean": np.zeros(0)}
        out.update({f"moment_{a}": np.zeros(0) for a in moments})
    else:
        out = model.predict(df, base)
    res = df.copy()
    for k, v in out.items():
        res[k] = v
    return pd.DataFrame(res)


def predict_dask(model, ddf, base_col=None):
    """The model's predictions (label units) as new columns ``mean``, ``moment_a`` of a Dask DataFrame: the
    numpy replay per partition (row-local, so identical to predicting the whole table at once)."""
    require()
    import dask

    if model.uses_base and base_col is None:
        col = model.init_mean.get("column")
        raise DataError(f"this model was fitted on top of a base prediction ({col}); pass it (--pred COL)")
    missing = sorted(c for c in model.input_columns() if c not in ddf.columns)
    if missing:
        raise DataError(f"the data lacks column(s) the model needs: {', '.join(missing)}")
    meta = ddf._meta.copy()
    meta["mean"] = np.zeros(0)
    for a in model.moments:
        meta[f"moment_{a}"] = np.zeros(0)
    text = dask.delayed(model.to_json(), pure=True)
    return ddf.map_partitions(
        _predict_frame, text, base_col if model.uses_base else None, tuple(model.moments), meta=meta
    )


def _audit_part(df, model_json, label, base_col):
    from ..fit.model import FittedModel
    from ..paper.descent import CellState

    model = model_cache(model_json, FittedModel)
    n = len(df)
    if getattr(model, "task", "regression") == "binary":  # through the model's own classes (positive class 0...)
        from ..auditing.binary import binary_labels

        y = binary_labels(model, df[label], f"label '{label}'") if n else np.zeros(0)
    else:
        try:
            y = df[label].to_numpy(dtype=float)
        except (TypeError, ValueError):  # text on the workers: the in-memory engine's words, not a worker's crash
            raise DataError(f"label '{label}' is not numeric (found non-numeric values)") from None
    if n and not np.all(np.isfinite(y)):
        raise DataError(f"label '{label}' has missing or infinite values")
    base_u = None
    if model.uses_base:
        base = to_label_array(df[base_col], f"prediction column '{base_col}'") if n else np.zeros(0)
        base_u = np.clip((base - model.scale.lo) / model.scale.span, 0.0, 1.0)
    memb = model.groups.evaluate(df, n)
    mu, moms = model.initial(n, base_u, memb, model.variance_unit(df, n))
    model.replay(memb, mu, moms)
    yu = (y - model.scale.lo) / model.scale.span
    import dataclasses

    plain = dataclasses.replace(model.params, z=0.0, z_group=0.0, min_count=0)
    st = CellState(plain, memb, yu, mu, moms)
    gs = memb.sums().group_sums

    out = [float(n), gs(None), gs(yu), gs(yu * yu), gs(mu), gs((yu - mu) ** 2), st.S0, st.C0]
    for a in model.moments:
        out += [gs(moms[a]), st.TA[a], st.CA[a], st.SA[a]]
    return out


def audit_tables_dask(model, ddf, label, base_col=None):
    """Per-group audit tables of a model on labelled Dask rows, by the descent's reductions: per group the
    count, mass, mean label / prediction, the empirical and predicted variance, and the worst mass-weighted
    calibration error over the mean cells G(mu, i) and each moment's cells G(mu, m_a, i, j) (the paper's
    audit statistics: the alpha / beta the model achieves on these rows). Returns a JSON-ready dict."""
    require()
    if label not in ddf.columns:
        raise DataError(f"label column '{label}' is not in the data")
    if model.uses_base and base_col is None:
        raise DataError("this model was fitted on a base prediction: pass it (--pred COL)")
    missing = sorted(c for c in model.input_columns() if c not in ddf.columns)
    if missing:
        raise DataError(f"the data lacks column(s) the model needs: {', '.join(missing)}")
    import dask

    text = dask.delayed(model.to_json(), pure=True)
    parts = [dask.delayed(_audit_part, pure=False)(d, text, label, base_col) for d in ddf.to_delayed()]
    tot = tree_sum(parts)
    return _audit_json(model, tot)


def _audit_json(model, tot):
    sc = model.scale
    n = tot[0]
    cnt, sy, syy, smu, sres2, S0, C0 = tot[1:8]
    G, m = cnt.size, model.params.m
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_label = sc.mean_from_unit(sy / cnt)
        mean_pred = sc.mean_from_unit(smu / cnt)
        emp_var = sc.moment_from_unit(residual_variance(sy - smu, sres2, cnt), 2)
        label_var = sc.moment_from_unit(np.maximum(syy / cnt - (sy / cnt) ** 2, 0.0), 2)
    worst_mean = np.abs(S0).reshape(G, m).max(axis=1) / n
    rows = {
        "group": list(model.groups.names),
        "count": cnt.astype(int).tolist(),
        "mass": (cnt / n).tolist(),
        "mean_label": mean_label.tolist(),
        "mean_pred": mean_pred.tolist(),
        "emp_var": emp_var.tolist(),
        "label_var": label_var.tolist(),
        "calib_error_worst_weighted": worst_mean.tolist(),
    }
    achieved_alpha = float(np.abs(S0).max() / n)
    betas = {}
    for i, a in enumerate(model.moments):
        spred, TA, CA, SA = tot[8 + 4 * i : 12 + 4 * i]
        with np.errstate(invalid="ignore", divide="ignore"):
            rows[f"pred_moment_{a}"] = sc.moment_from_unit(spred / cnt, a).tolist()
        rows[f"moment_{a}_error_worst_weighted"] = (np.abs(TA).reshape(G, m * m).max(axis=1) / n).tolist()
        achieved_alpha = max(achieved_alpha, float(np.abs(SA).max() / n))
        betas[str(a)] = float(np.abs(TA).max() / n)
    cells = [
        {
            "group": model.groups.names[g],
            "bucket": int(b),
            "count": int(C0[g * m + b]),
            "mass_weighted_residual": float(S0[g * m + b] / n),
        }
        for g in range(G)
        for b in range(m)
        if C0[g * m + b] > 0
    ]
    return _finite(
        {
            "format": "mmc-audit-tables",
            "version": 1,
            "engine": "dask",
            "n": int(n),
            "achieved": {"alpha": achieved_alpha, "betas": betas},
            "by_group": rows,
            "mean_cells": cells,
        }
    )


def _finite(obj):
    """JSON-ready: NaN / infinite numbers (empty groups) become null."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj

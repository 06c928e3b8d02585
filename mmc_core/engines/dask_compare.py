"""Paired comparisons and audits over time on a Dask DataFrame: each partition's per-(group, side) sums, added
up a tree, then the in-memory comparison's own code on the sums."""

from __future__ import annotations

import json

import numpy as np

from ..common.errors import DataError, MMCError
from ..common.tables import to_label_array
from .dask_base import model_cache, require, tree_sum

__all__ = ["check_interval_method", "compare_dask", "periods_dask"]


def _compare_side(df, kind, src, name, base_col, method=None, delta=0.1, threshold=None):
    """One side on a partition's rows, built as the in-memory engine builds it (:func:`mmc_core.comparison.compare_models.side`):
    a column's mean (its decisions at ``threshold``), or a model's mean, variance, its ``method`` intervals at
    ``delta`` (none when ``method`` is None) and a classifier's decisions (at ``threshold``, default 0.5)."""
    from ..comparison.compare_models import Side, side
    from ..fit.model import FittedModel

    if kind == "column":
        return side(to_label_array(df[src], f"prediction column '{src}'"), name=name, threshold=threshold)
    model = model_cache(src, FittedModel)
    base = to_label_array(df[base_col], f"prediction column '{base_col}'") if model.uses_base else None
    if method is not None:
        return side(model, df, name=name, base=base, method=method, delta=delta, threshold=threshold)
    pred = model.predict(df, base)
    if getattr(model, "task", "regression") == "binary" and threshold is None:
        threshold = 0.5
    dec = None if threshold is None else (np.asarray(pred["mean"]) >= threshold).astype(float)
    return Side(name, np.asarray(pred["mean"], float), pred.get("moment_2"), decision=dec)


def _side_labels(df, specs, label, sides):
    """The partition's labels as the in-memory command reads them: through the first classifier model's own
    positive class when a side is a classifier model, else the numbers; 0/1 when a side has decisions."""
    from ..fit.model import FittedModel

    binary = [
        m
        for m in (model_cache(src, FittedModel) for kind, src, _ in specs if kind == "model")
        if getattr(m, "task", "regression") == "binary"
    ]
    if binary:
        from ..auditing.binary import binary_labels

        y = binary_labels(binary[0], df[label], f"label '{label}'")
    else:
        y = to_label_array(df[label], f"label '{label}'")
    if any(s.decision is not None for s in sides) and not np.isin(y, (0.0, 1.0)).all():
        raise DataError("rates at a decision threshold need 0/1 labels; this label has other values")
    return y


def _side_sums(df, specs, label, base_col, opts, memb_of, cells_of, n_cells, has, target, shift, G):
    """Per (group, cell) sums (:func:`mmc_core.comparison.compare_models.cell_sums`) of the sides' quantities on one partition;
    zeros for an empty partition (nothing to predict)."""
    from ..comparison.compare_models import Layout, cell_sums

    lay = Layout(has, target)
    if len(df) == 0:
        C = G * n_cells
        return np.zeros(C), np.zeros((C, lay.K)), np.zeros((C, lay.K, lay.K))
    sides = [_compare_side(df, kind, src, name, base_col, *opts) for kind, src, name in specs]
    y = _side_labels(df, specs, label, sides)
    cells = cells_of(df)
    return cell_sums(memb_of(df).sums(), lay.rows(sides, y), cells, n_cells, shift)


def _compare_part(df, specs, label, base_col, opts, groups_json, has, target, shift):
    from ..groups.group_set import GroupSet

    gs = model_cache(groups_json, GroupSet)
    return _side_sums(
        df,
        specs,
        label,
        base_col,
        opts,
        lambda d: gs.evaluate(d, len(d)),
        lambda d: None,
        1,
        has,
        target,
        shift,
        len(gs),
    )


def _plain_specs(ddf, specs, base_col):
    plain = []
    for kind, src, name in specs:
        if kind == "model":
            if src.uses_base and (base_col is None or base_col not in ddf.columns):
                raise DataError(f"model {name!r} was fitted on a base prediction: pass it (--pred COL)")
            plain.append((kind, src.to_json(), name))
        elif kind == "column":
            if src not in ddf.columns:
                raise DataError(f"prediction column '{src}' is not in the data")
            plain.append((kind, src, name))
        else:
            raise MMCError(f"a side is ('model', FittedModel, name) or ('column', column, name), got kind {kind!r}")
    return plain


ROW_LOCAL_NOTE = "the Dask engine forms intervals partition by partition"


def check_interval_method(model, method: str) -> None:
    """MMCError unless ``model``'s intervals by ``method`` can be formed partition by partition, as on the whole
    table: every method whose interval of a row depends on the model and that row only. ``multimoment`` chooses
    its cover over all rows at once; ``guaranteed`` and ``plugin`` choose their moment on the model's stored
    calibration quantiles (row-local), or lacking them on the predicted rows (not)."""
    from ..intervals import available_methods

    if getattr(model, "task", "regression") == "binary" or not model.moments:
        return  # no intervals: the in-memory side has none either
    if method not in available_methods(model):
        raise MMCError(
            f"interval method {method!r} is not available for this model "
            f"(available: {', '.join(available_methods(model))})"
        )
    if method == "multimoment":
        raise MMCError(
            f"interval method 'multimoment' is not offered with the Dask engine: its cover is chosen over all rows "
            f"at once and {ROW_LOCAL_NOTE} (use calibrated, split-conformal, mondrian or gaussian)"
        )
    if method in ("guaranteed", "plugin"):
        rec = model.extras.get("intervals") if isinstance(model.extras, dict) else None
        mq = rec.get("moment_quantiles") if isinstance(rec, dict) else None
        if not (isinstance(mq, dict) and all(str(a) in mq for a in model.moments)):
            raise MMCError(
                f"interval method {method!r} chooses its moment on the predicted rows for this model (it has no "
                f"stored calibration quantiles) and {ROW_LOCAL_NOTE}: use the numpy engine or another method"
            )


def _head_layout(ddf, plain, label, base_col, opts, delta):
    """The layout of the sides' quantities (what each side has) and one shift for every partition (the sums must
    add), both from the first rows: their means keep the covariances of values far from zero exact."""
    from ..comparison.compare_models import Layout

    head = ddf.head(1000, npartitions=-1)
    if not len(head):
        raise DataError("the data has no rows")
    sides = [_compare_side(head, k, s, n, base_col, *opts) for k, s, n in plain]
    lay = Layout.of(sides, 1 - delta)
    has = [(s.variance is not None, s.lower is not None, s.decision is not None) for s in sides]
    return lay, has, lay.rows(sides, _side_labels(head, plain, label, sides)).mean(axis=1)


def compare_dask(
    ddf,
    label,
    specs,
    groups,
    base_col=None,
    *,
    method: str | None = None,
    threshold: float | None = None,
    delta: float = 0.1,
    min_group_count: int = 30,
    error_control: str = "holm",
    level: float = 0.05,
):
    """:func:`mmc_core.comparison.compare_models.compare` on a Dask DataFrame, with the sides of :func:`mmc_core.comparison.compare_models.side`:
    per partition the per-group sums of both sides' residuals, squares, variances, interval coverage and width
    (the models' ``method`` intervals at ``delta``, formed row by row as in memory; None: no intervals, as
    ``mmc_core.comparison.compare_models.Side`` objects without ends; :func:`check_interval_method` says which methods can be
    formed partition by partition) and decisions at ``threshold`` (a
    classifier model's default 0.5; the labels then through its positive class), added with the fan-in tree of
    the audit; the comparison is then made from the totals. ``specs``: two (kind, source, name), kind "model"
    (source a FittedModel) or "column" (source a column name)."""
    require()
    import dask

    from ..comparison.compare_models import compare_from_sums

    if label not in ddf.columns:
        raise DataError(f"label column '{label}' is not in the data")
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0 < threshold < 1):
        raise MMCError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")
    plain = _plain_specs(ddf, specs, base_col)
    for kind, src, _ in specs:
        if kind == "model" and method is not None:
            check_interval_method(src, method)
    missing = sorted(c for c in groups.columns() if c not in ddf.columns)
    if missing:
        raise DataError(f"the data lacks group column(s) the groups need: {', '.join(missing)}")
    opts = (method, delta, threshold)
    lay, has, shift = _head_layout(ddf, plain, label, base_col, opts, delta)
    gjson = json.dumps(groups.to_json())
    args = [dask.delayed(v, pure=True) for v in (plain, gjson)]
    parts = [
        dask.delayed(_compare_part, pure=False)(d, args[0], label, base_col, opts, args[1], has, 1 - delta, shift)
        for d in ddf.to_delayed()
    ]
    cnt, S1, S2 = tree_sum(parts)
    names = list(groups.names)
    return compare_from_sums(
        cnt, S1, S2, shift, lay, names, tuple(n for _, _, n in specs), delta, min_group_count, error_control, level
    )


def _period_part(df, specs, label, base_col, opts, period_col, labels, has, target, shift):
    from ..fit.model import FittedModel

    model = model_cache(specs[0][1], FittedModel)
    return _side_sums(
        df,
        specs,
        label,
        base_col,
        opts,
        lambda d: model.groups.evaluate(d, len(d)),
        lambda d: np.searchsorted(labels, d[period_col].to_numpy()).astype(np.int64),
        len(labels),
        has,
        target,
        shift,
        len(model.groups),
    )


def periods_dask(
    model,
    ddf,
    label,
    period_col,
    base_col=None,
    *,
    method: str | None = None,
    threshold: float | None = None,
    reference: str = "previous",
    delta: float = 0.1,
    min_group_count: int = 30,
    error_control: str = "holm",
    level: float = 0.05,
):
    """:func:`mmc_core.comparison.compare_models.compare_periods` of a model on a Dask DataFrame: its mean, variance, ``method``
    intervals at ``delta`` (None: none) and a classifier's decisions at ``threshold`` (default 0.5; its rates
    per period and their changes); the distinct periods first (one pass), then per partition the
    per-(group, period) sums, added with the fan-in tree."""
    require()
    import dask

    from ..comparison.compare_models import check_periods, periods_from_sums

    for what, col in (("label", label), ("period", period_col)):
        if col not in ddf.columns:
            raise DataError(f"{what} column '{col}' is not in the data")
    if model.uses_base and (base_col is None or base_col not in ddf.columns):
        raise DataError("this model was fitted on a base prediction: pass it (--pred COL)")
    if reference not in ("previous", "first"):
        raise MMCError(f"reference must be 'previous' or 'first', got {reference!r}")
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0 < threshold < 1):
        raise MMCError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")
    if method is not None:
        check_interval_method(model, method)
    missing, values = dask.compute(ddf[period_col].isna().sum(), ddf[period_col].drop_duplicates())
    if int(missing):
        raise DataError(f"period column '{period_col}' has {int(missing)} missing value(s): drop or fill them")
    labels = np.unique(values.to_numpy())
    check_periods(labels)
    plain = [("model", model.to_json(), "the model")]
    opts = (method, delta, threshold)
    lay, has, shift = _head_layout(ddf, plain, label, base_col, opts, delta)
    text = dask.delayed(plain, pure=True)
    parts = [
        dask.delayed(_period_part, pure=False)(
            d, text, label, base_col, opts, period_col, labels, has, 1 - delta, shift
        )
        for d in ddf.to_delayed()
    ]
    cnt, S1, S2 = tree_sum(parts)
    return periods_from_sums(
        cnt,
        S1,
        S2,
        shift,
        lay,
        list(model.groups.names),
        labels,
        "the model",
        reference,
        min_group_count,
        error_control,
        level,
        delta,
    )

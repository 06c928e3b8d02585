"""Exact quantiles of a column spread over partitions (an approximate sketch brackets each order statistic and
the few values inside the bracket are brought to the client) and the groups of columns built on them, as the
numpy engine builds them."""

from __future__ import annotations

import math

import numpy as np

from ..common.errors import GroupDefinitionError
from .dask_base import resolve_client

__all__ = ["SKETCH", "sketch", "bracket", "exact_quantiles", "groups_from_columns"]


SKETCH = 1025  # per-partition quantile sketch size of the exact quantiles


# ---- exact quantiles and groups from columns -----------------------------------------------------------------
def sketch(v):
    v = np.asarray(v, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return 0, None, math.inf, -math.inf
    return int(v.size), np.quantile(v, np.linspace(0.0, 1.0, SKETCH)), float(v.min()), float(v.max())


def bracket(v, lo, hi):
    v = np.asarray(v, dtype=float)
    v = v[np.isfinite(v)]
    return int(np.count_nonzero(v < lo)), np.sort(v[(v >= lo) & (v <= hi)])


def _lerp(a, b, t):
    """numpy's linear interpolation of np.quantile (``_lerp``), scalar form: the same arithmetic."""
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def exact_quantiles(sketches, brackets, qs, nonempty_range: bool = False):
    """``np.quantile(all finite values, qs)`` (method "linear"), bit for bit, over values spread across
    partitions (``sketches()``: per-partition (count, sketch, min, max) from :func:`sketch`; ``brackets(lo,
    hi)``: per-partition (count below lo, sorted values in [lo, hi]) from :func:`bracket`): one pass for per-partition sketches (which
    bracket each needed order statistic), one pass that counts the values below each bracket and brings the few inside it to the client (a bracket that
    misses is widened and the pass repeated, so the result is always exact). ``None`` when there are no
    values (or, with ``nonempty_range``, when all values are equal)."""
    sk = sketches()
    n = sum(s[0] for s in sk)
    if n == 0:
        return None
    vmin, vmax = min(s[2] for s in sk), max(s[3] for s in sk)
    if nonempty_range and not vmax > vmin:
        return None
    qs = np.asarray(qs, dtype=float)
    vi = (n - 1) * qs
    ranks = set()
    for v in vi:
        k = int(np.floor(v))
        k = min(max(k, 0), n - 1)
        ranks.update({k, min(k + 1, n - 1)})
    # approximate global CDF from the sketches: count(<= t) ~ sum_i n_i * F_i(t)
    pts = np.unique(np.concatenate([s[1] for s in sk if s[1] is not None]))
    if pts.size > 20000:
        pts = pts[np.linspace(0, pts.size - 1, 20000).astype(int)]
    est = np.zeros(pts.size)
    fr = np.linspace(0.0, 1.0, SKETCH)
    for s in sk:
        if s[1] is not None:
            est += s[0] * np.interp(pts, s[1], fr, left=0.0, right=1.0)
    margin = n / (SKETCH - 1) + len(sk) + 2
    values = {}
    pending = sorted(ranks)
    widen = False
    while pending:
        r_lo, r_hi = pending[0], pending[-1]
        if widen:
            lo, hi = -math.inf, math.inf
        else:
            i_lo = np.searchsorted(est, r_lo - margin, side="left") - 1
            i_hi = np.searchsorted(est, r_hi + 1 + margin, side="left")
            lo = pts[i_lo] if i_lo >= 0 else -math.inf
            hi = pts[i_hi] if i_hi < pts.size else math.inf
        res = brackets(lo, hi)
        below = sum(r[0] for r in res)
        inside = np.sort(np.concatenate([r[1] for r in res]))
        left = []
        for r in pending:
            if below <= r < below + inside.size:
                values[r] = float(inside[r - below])
            else:
                left.append(r)
        pending = left
        widen = True
    out = []
    for v in vi:
        k = int(np.floor(v))
        if v >= n - 1:
            out.append(values[n - 1])
            continue
        k = max(k, 0)
        out.append(float(_lerp(values[k], values[k + 1], v - k)))
    return np.asarray(out)


def _cols_values(df, columns):
    from ..groups.group_set import table_column

    return {c: table_column(df, c) for c in columns}


def _uniques(cols, cap):
    out = {}
    for c, arr in cols.items():
        if arr.dtype.kind in "biuf":
            out[c] = ("num", np.unique(arr[np.isfinite(arr)])[: cap + 1])
        else:
            miss = np.equal(arr, None)
            out[c] = ("text", sorted({str(v) for v in arr[~miss]})[: cap + 1])
    return out


def _sketch_col(cols, c):
    return sketch(cols[c])


def _bracket_col(cols, c, lo, hi):
    return bracket(cols[c], lo, hi)


def groups_from_columns(ddf, columns, max_order: int = 1, max_values: int = 10, client=None):
    """``GroupSet.from_columns`` on a Dask DataFrame: the same groups, the same (exact) quartile cuts (the rule
    of :func:`mmc_core.groups.group_set.column_conditions`: one group per value, numeric columns with more than
    ``max_values`` distinct values cut at their quartiles)."""
    import dask

    from ..groups.group_set import GroupSet, numeric_conditions, text_conditions

    client = resolve_client(client)
    columns = list(columns)
    for c in columns:
        if c not in ddf.columns:
            raise GroupDefinitionError(
                f"group column '{c}' is not in the data (columns: {', '.join(map(str, list(ddf.columns)[:30]))})"
            )
    futs = client.compute([dask.delayed(_cols_values, pure=False)(d, columns) for d in ddf.to_delayed()])
    per_col = {}
    try:
        us = client.gather([client.submit(_uniques, f, max(max_values, 200), pure=False) for f in futs])
        for c in columns:
            kinds = {u[c][0] for u in us}
            if len(kinds) > 1:
                raise GroupDefinitionError(f"group column '{c}' is numeric in some partitions and text in others")
            if kinds == {"num"}:
                distinct = np.unique(np.concatenate([u[c][1] for u in us]))
                edges = None
                if distinct.size > max_values:
                    qs = exact_quantiles(
                        lambda: client.gather([client.submit(_sketch_col, f, c, pure=False) for f in futs]),
                        lambda lo, hi: client.gather(
                            [client.submit(_bracket_col, f, c, lo, hi, pure=False) for f in futs]
                        ),
                        np.linspace(0, 1, 5)[1:-1],
                    )
                    vmin = float(distinct[0]) if distinct.size else 0.0
                    edges = [float(q) for q in np.unique(qs) if q > vmin] if qs is not None else []
                per_col[c] = numeric_conditions(c, distinct, edges)
            else:
                per_col[c] = text_conditions(c, sorted(set().union(*(set(u[c][1]) for u in us))), counted_to=200)
    finally:
        for f in futs:
            f.release()
    return GroupSet.from_columns(None, columns, max_order, max_values, conditions=per_col)

"""What every part of the Dask engine uses: the check that dask is installed (imported lazily, never at import
time), the client, and the elementwise sums of the (group x cell) statistics that cross the wire."""

from __future__ import annotations

import numpy as np

from ..common.errors import MMCError

__all__ = ["FAN_IN", "require", "is_dask_collection", "resolve_client", "add_sums", "tree_sum", "model_cache"]


FAN_IN = 8  # tree reduction: partial sums combined 8 at a time


def require():
    try:
        import dask.dataframe  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        raise MMCError(
            f"the Dask engine needs dask[dataframe] and distributed ({e}); "
            "install them with: pip install 'mmc-audit[dask]'"
        ) from None


def is_dask_collection(x) -> bool:
    """Whether ``x`` is a Dask DataFrame / Series (checked without importing dask)."""
    return type(x).__module__.split(".")[0] in ("dask", "dask_expr") and hasattr(x, "npartitions")


def resolve_client(client=None):
    require()
    if client is not None:
        return client
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        raise MMCError(
            "the Dask engine needs a distributed client: start one (distributed.Client(...) or "
            "Client(LocalCluster(...))) or pass client="
        ) from None


def add_sums(*items):
    """Elementwise sum of sums lists (or of (fit, holdout) pairs of them, or of numbers)."""
    items = [x for x in items if x is not None]
    if not items:
        return None
    first = items[0]
    if isinstance(first, tuple):
        return tuple(add_sums(*(x[i] for x in items)) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: add_sums(*(x[k] for x in items)) for k in first}
    if isinstance(first, list):
        return [None if first[i] is None else _sum_arrays([x[i] for x in items]) for i in range(len(first))]
    return sum(items[1:], first)


def _sum_arrays(arrs):
    out = np.array(arrs[0], dtype=float, copy=True)
    for a in arrs[1:]:
        out += a
    return out


def tree_sum(parts: list):
    """The elementwise sum (:func:`add_sums`) of the partitions' delayed results, added FAN_IN at a time up a tree
    (never all on one worker), computed."""
    import dask

    while len(parts) > 1:
        parts = [dask.delayed(add_sums, pure=False)(*parts[i : i + FAN_IN]) for i in range(0, len(parts), FAN_IN)]
    return parts[0].compute()


_MODELS: dict = {}


def model_cache(text, cls):
    key = hash(text)
    if key not in _MODELS:
        if len(_MODELS) >= 4:  # a comparison alternates between two models: keep both
            _MODELS.clear()
        _MODELS[key] = cls.from_json(text)
    return _MODELS[key]

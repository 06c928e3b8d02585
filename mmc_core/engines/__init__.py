"""Engines behind the descent's seam (:class:`mmc_core.paper.descent.CellStats`).

The numpy engine is :class:`mmc_core.paper.descent.CellState` (the default, in memory). Other engines live in
their own modules here and are imported lazily: importing ``mmc_core`` never imports them or their
dependencies. ``mmc_core.engines.dask_engine`` runs the descent, prediction and audit tables on a Dask
DataFrame (``pip install 'mmc-audit[dask]'``).

The modules behind this package are private by convention: the app imports the names exported
here (``__all__``, loaded on first use so that importing the package stays cheap) or a module directly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dask_engine import (
        audit_tables_dask,
        check_interval_method,
        close_client,
        compare_dask,
        fit_dask,
        groups_from_columns,
        periods_dask,
        predict_dask,
        read_parquet,
        start_client,
    )

ENGINES = ("numpy", "dask")

_EXPORTS = {
    "audit_tables_dask": "dask_engine",
    "check_interval_method": "dask_engine",
    "close_client": "dask_engine",
    "compare_dask": "dask_engine",
    "fit_dask": "dask_engine",
    "groups_from_columns": "dask_engine",
    "periods_dask": "dask_engine",
    "predict_dask": "dask_engine",
    "read_parquet": "dask_engine",
    "start_client": "dask_engine",
}

__all__ = [
    "ENGINES",
    "audit_tables_dask",
    "check_interval_method",
    "close_client",
    "compare_dask",
    "fit_dask",
    "groups_from_columns",
    "periods_dask",
    "predict_dask",
    "read_parquet",
    "start_client",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

"""The paper's algorithm (Jung, Lee, Pai, Roth, Vohra): label scaling and moments, the buckets, the descent
and its parameters, the per-cell state of the numpy engine and the finite-sample auditors.

The modules behind this package are private by convention: the app and other users import the names
exported here (``__all__``, loaded on first use); inside mmc_core a module may import another package's
modules directly, never an underscore name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .auditor import chernoff_auditor
    from .buckets import (
        fill_edges,
        geometric_edges,
        inner_edges,
        mean_grid,
        moment_grid,
        moment_projection,
        quantile_edges,
    )
    from .cell_state import CellState
    from .descent import SHRINK_MIN, CellStats, DescentParams, descend
    from .descent_params import SE_SCOPES, STEP_RULES, WHOLE, Update, select_rows
    from .moments import LabelScale, MomentKind, max_central_moment, pseudo_label

_EXPORTS = {
    "CellState": "cell_state",
    "CellStats": "descent",
    "DescentParams": "descent",
    "LabelScale": "moments",
    "MomentKind": "moments",
    "SE_SCOPES": "descent_params",
    "SHRINK_MIN": "descent",
    "STEP_RULES": "descent_params",
    "Update": "descent_params",
    "WHOLE": "descent_params",
    "chernoff_auditor": "auditor",
    "descend": "descent",
    "fill_edges": "buckets",
    "geometric_edges": "buckets",
    "inner_edges": "buckets",
    "max_central_moment": "moments",
    "mean_grid": "buckets",
    "moment_grid": "buckets",
    "moment_projection": "buckets",
    "pseudo_label": "moments",
    "quantile_edges": "buckets",
    "select_rows": "descent_params",
}

__all__ = [
    "CellState",
    "CellStats",
    "DescentParams",
    "LabelScale",
    "MomentKind",
    "SE_SCOPES",
    "SHRINK_MIN",
    "STEP_RULES",
    "Update",
    "WHOLE",
    "chernoff_auditor",
    "descend",
    "fill_edges",
    "geometric_edges",
    "inner_edges",
    "max_central_moment",
    "mean_grid",
    "moment_grid",
    "moment_projection",
    "pseudo_label",
    "quantile_edges",
    "select_rows",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

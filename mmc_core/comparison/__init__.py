"""Comparisons: two models on the same labelled rows, or one model across periods (:func:`compare`,
:func:`compare_periods`, :func:`side`), group by group with error control.

The modules behind this package are private by convention: the app and other users import the names
exported here (``__all__``, loaded on first use); inside mmc_core a module may import another package's
modules directly, never an underscore name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .compare_models import (
        MAX_PERIODS,
        POINTS,
        ComparisonResult,
        Layout,
        Side,
        cell_sums,
        check_periods,
        compare,
        compare_from_sums,
        compare_periods,
        periods_from_sums,
        points_text,
        side,
    )

_EXPORTS = {
    "ComparisonResult": "compare_models",
    "Layout": "compare_models",
    "MAX_PERIODS": "compare_models",
    "POINTS": "compare_models",
    "Side": "compare_models",
    "cell_sums": "compare_models",
    "check_periods": "compare_models",
    "compare": "compare_models",
    "compare_from_sums": "compare_models",
    "compare_periods": "compare_models",
    "periods_from_sums": "compare_models",
    "points_text": "compare_models",
    "side": "compare_models",
}

__all__ = [
    "ComparisonResult",
    "Layout",
    "MAX_PERIODS",
    "POINTS",
    "Side",
    "cell_sums",
    "check_periods",
    "compare",
    "compare_from_sums",
    "compare_periods",
    "periods_from_sums",
    "points_text",
    "side",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

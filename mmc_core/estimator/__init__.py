"""The public estimator, :class:`MomentMulticalibrator`, and its in-memory (numpy) engine: the rows a fit
works on, the fit itself, cross-fitted interval calibration and the fit's stages in words.

The modules behind this package are private by convention: the app and other users import the names
exported here (``__all__``, loaded on first use); inside mmc_core a module may import another package's
modules directly, never an underscore name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base_map_text import describe
    from .cells_text import describe_cells
    from .multicalibrator import MomentMulticalibrator
    from .stages import describe_base_variance, describe_stages, stage_rows, stage_sentences

_EXPORTS = {
    "MomentMulticalibrator": "multicalibrator",
    "describe": "base_map_text",
    "describe_base_variance": "stages",
    "describe_cells": "cells_text",
    "describe_stages": "stages",
    "stage_rows": "stages",
    "stage_sentences": "stages",
}

__all__ = [
    "MomentMulticalibrator",
    "describe",
    "describe_base_variance",
    "describe_cells",
    "describe_stages",
    "stage_rows",
    "stage_sentences",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

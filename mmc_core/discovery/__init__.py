"""Finding groups nobody listed: the learning oracles, the oracle-efficient auditor (:func:`discover`) and
fits alternated with it (:func:`fit_with_discovery`).

The modules behind this package are private by convention: the app and other users import the names
exported here (``__all__``, loaded on first use); inside mmc_core a module may import another package's
modules directly, never an underscore name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .discover_fit import fit_with_discovery
    from .discover_groups import DiscoveryStopped, discover, validate_discovery_params

_EXPORTS = {
    "DiscoveryStopped": "discover_groups",
    "discover": "discover_groups",
    "fit_with_discovery": "discover_fit",
    "validate_discovery_params": "discover_groups",
}

__all__ = [
    "DiscoveryStopped",
    "discover",
    "fit_with_discovery",
    "validate_discovery_params",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

"""What every part of the core shares: the exceptions, bounded JSON reading, the table edge (labels and
predictions as checked vectors), the BLAS thread limit, freed-memory reuse and the synthetic distributions.

The modules behind this package are private by convention: the app and other users import the names
exported here (``__all__``, loaded on first use); inside mmc_core a module may import another package's
modules directly, never an underscore name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import DataError, GroupDefinitionError, MMCError, ModelFormatError, NotFittedError, not_fitted
    from .jsonfile import key_path, loads, one_line, read_file
    from .memory import glibc, reuse_freed_memory
    from .synthetic import DiscreteBetaDistribution, demo_distribution, feature_spread_world
    from .tables import as_table, count_rows, take_rows, to_label_array, variance_column
    from .threads import one_blas_thread

_EXPORTS = {
    "DataError": "errors",
    "DiscreteBetaDistribution": "synthetic",
    "GroupDefinitionError": "errors",
    "MMCError": "errors",
    "ModelFormatError": "errors",
    "NotFittedError": "errors",
    "as_table": "tables",
    "count_rows": "tables",
    "demo_distribution": "synthetic",
    "feature_spread_world": "synthetic",
    "glibc": "memory",
    "key_path": "jsonfile",
    "loads": "jsonfile",
    "not_fitted": "errors",
    "one_blas_thread": "threads",
    "one_line": "jsonfile",
    "read_file": "jsonfile",
    "reuse_freed_memory": "memory",
    "take_rows": "tables",
    "to_label_array": "tables",
    "variance_column": "tables",
}

__all__ = [
    "DataError",
    "DiscreteBetaDistribution",
    "GroupDefinitionError",
    "MMCError",
    "ModelFormatError",
    "NotFittedError",
    "as_table",
    "count_rows",
    "demo_distribution",
    "feature_spread_world",
    "glibc",
    "key_path",
    "loads",
    "not_fitted",
    "one_blas_thread",
    "one_line",
    "read_file",
    "reuse_freed_memory",
    "take_rows",
    "to_label_array",
    "variance_column",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

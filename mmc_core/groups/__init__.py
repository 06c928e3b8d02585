"""Groups: conditions on columns (:class:`Condition`), named and possibly overlapping groups
(:class:`GroupSet`), their membership (:class:`Membership`) and the sums over it.

The modules behind this package are private by convention: the app and other users import the names
exported here (``__all__``, loaded on first use); inside mmc_core a module may import another package's
modules directly, never an underscore name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .conditions import Condition, is_numeric_column, missing_mask
    from .group_set import (
        GROUP_INFO_KEYS,
        MAX_GROUPS,
        MAX_GROUPS_FILE_BYTES,
        MAX_VALUES,
        Group,
        GroupSet,
        column_conditions,
        format_value,
        loadable_name,
        numeric_conditions,
        quartile_edges,
        table_column,
        text_conditions,
        unique_names,
    )
    from .membership import Membership
    from .sums import MembershipSums

_EXPORTS = {
    "Condition": "conditions",
    "GROUP_INFO_KEYS": "group_set",
    "Group": "group_set",
    "GroupSet": "group_set",
    "MAX_GROUPS": "group_set",
    "MAX_GROUPS_FILE_BYTES": "group_set",
    "MAX_VALUES": "group_set",
    "Membership": "membership",
    "MembershipSums": "sums",
    "column_conditions": "group_set",
    "format_value": "group_set",
    "is_numeric_column": "conditions",
    "loadable_name": "group_set",
    "missing_mask": "conditions",
    "numeric_conditions": "group_set",
    "quartile_edges": "group_set",
    "table_column": "group_set",
    "text_conditions": "group_set",
    "unique_names": "group_set",
}

__all__ = [
    "Condition",
    "GROUP_INFO_KEYS",
    "Group",
    "GroupSet",
    "MAX_GROUPS",
    "MAX_GROUPS_FILE_BYTES",
    "MAX_VALUES",
    "Membership",
    "MembershipSums",
    "column_conditions",
    "format_value",
    "is_numeric_column",
    "loadable_name",
    "missing_mask",
    "numeric_conditions",
    "quartile_edges",
    "table_column",
    "text_conditions",
    "unique_names",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

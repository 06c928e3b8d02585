"""The ``mmc`` command line: :func:`main` (the entry point, also ``python -m app.cli``), the argparse
definition and one module per command.

The modules behind this package are private by convention: other packages import the names exported
here (``__all__``, loaded on first use so that importing the package stays cheap) or a module directly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .entry import main
    from .parser import build_parser

_EXPORTS = {
    "build_parser": "parser",
    "main": "entry",
}

__all__ = [
    "build_parser",
    "main",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

"""The reports: the PDF document, the regression and classifier PDF reports, comparisons, periods and the
self-contained HTML report.

The modules behind this package are private by convention: other packages import the names exported
here (``__all__``, loaded on first use so that importing the package stays cheap) or a module directly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .compare import build_compare_pdf
    from .html import build_compare_html, build_report_html
    from .pdf import CHROMIUM_MESSAGE, build_report_pdf, chromium_available, findings_summary
    from .tables import audit_subset, even_chunks, mean_error_note, priority_groups, scorecard_table

_EXPORTS = {
    "CHROMIUM_MESSAGE": "pdf",
    "audit_subset": "tables",
    "build_compare_html": "html",
    "build_compare_pdf": "compare",
    "build_report_html": "html",
    "build_report_pdf": "pdf",
    "chromium_available": "pdf",
    "even_chunks": "tables",
    "findings_summary": "pdf",
    "mean_error_note": "tables",
    "priority_groups": "tables",
    "scorecard_table": "tables",
}

__all__ = [
    "CHROMIUM_MESSAGE",
    "audit_subset",
    "build_compare_html",
    "build_compare_pdf",
    "build_report_html",
    "build_report_pdf",
    "chromium_available",
    "even_chunks",
    "findings_summary",
    "mean_error_note",
    "priority_groups",
    "scorecard_table",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

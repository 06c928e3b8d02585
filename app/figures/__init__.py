"""The figures of the dashboard and the reports (plotly), their shared look and how user text is shown.

The modules behind this package are private by convention: other packages import the names exported
here (``__all__``, loaded on first use so that importing the package stays cheap) or a module directly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .charts import OKABE_ITO
    from .compare import PERIOD_TITLES, TITLES, TOP, difference_figure, period_figure
    from .convergence import convergence_figure
    from .display import code_point, display_text, shorten, visible_controls
    from .figure_style import (
        below_gamma,
        coverage_tested,
        format_number,
        format_pair,
        interval_text,
        legend_line,
        message_only,
        short_name,
    )

_EXPORTS = {
    "OKABE_ITO": "charts",
    "PERIOD_TITLES": "compare",
    "TITLES": "compare",
    "TOP": "compare",
    "below_gamma": "figure_style",
    "code_point": "display",
    "convergence_figure": "convergence",
    "coverage_tested": "figure_style",
    "difference_figure": "compare",
    "display_text": "display",
    "format_number": "figure_style",
    "format_pair": "figure_style",
    "interval_text": "figure_style",
    "legend_line": "figure_style",
    "message_only": "figure_style",
    "period_figure": "compare",
    "short_name": "figure_style",
    "shorten": "display",
    "visible_controls": "display",
}

__all__ = [
    "OKABE_ITO",
    "PERIOD_TITLES",
    "TITLES",
    "TOP",
    "below_gamma",
    "code_point",
    "convergence_figure",
    "coverage_tested",
    "difference_figure",
    "display_text",
    "format_number",
    "format_pair",
    "interval_text",
    "legend_line",
    "message_only",
    "period_figure",
    "short_name",
    "shorten",
    "visible_controls",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

r"""User text as every page shows it (PDF, charts, dashboard): one rule for controls that would change how the
text around them is drawn, one for characters no font can draw, and one for length.

Bidirectional controls (U+202E RIGHT-TO-LEFT OVERRIDE and its kin) in a group or column name reversed the chart
labels drawn after them, so a name could read as something it is not. They are shown as their code, "[U+202E]",
never applied; the name stays distinguishable from the same name without them. A character no installed font
has is shown the same way (a PDF used to print it as a Python escape, "\uc18c"). A label of 7,000 characters
crashed the PDF (a table row taller than a page): names are shortened for display, with an ellipsis.

:func:`display_text` is the entry point: app/report/pdf_doc.py (every string the PDF draws) and app/figures/figure_style.py
(every user string a Plotly figure draws, HTML-escaped on top) go through it.
"""

from __future__ import annotations

import re

__all__ = ["BIDI_CONTROLS", "LABEL_CHARS", "code_point", "display_text", "shorten", "visible_controls"]

# the explicit embeddings, overrides and isolates, the implicit marks (LRM, RLM) and the Arabic letter mark
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# a label's name in the charts' titles and axis titles ("SD (income units)"); a longer one ran over the next panel
LABEL_CHARS = 30


def code_point(c: str) -> str:
    """How a character that must not be drawn as itself is shown: "[U+202E]"."""
    return f"[U+{ord(c):04X}]"


def visible_controls(text) -> str:
    """``text`` with each bidirectional control written as its code point ("[U+202E]")."""
    s = str(text)
    if not any(c in BIDI_CONTROLS for c in s):
        return s
    return "".join(code_point(c) if c in BIDI_CONTROLS else c for c in s)


def shorten(text, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (names in titles and table cells)."""
    s = str(text)
    return s if len(s) <= limit else s[: max(0, limit - 1)] + "…"


def display_text(text, limit: int | None = None) -> str:
    """User text made safe to draw: bidi controls shown as their code (:func:`visible_controls`), then, with
    ``limit``, cut to that many characters with an ellipsis (:func:`shorten`)."""
    s = visible_controls(text)
    if limit is None or len(s) <= limit:
        return s
    kept = s[: max(0, limit - 1)]
    return re.sub(r"\[(U(\+[0-9A-F]{0,6})?)?$", "", kept) + "…"  # never half a code

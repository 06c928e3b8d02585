"""User text as every page shows it (PDF, charts, dashboard): one rule for controls that would change how the
text around them is drawn, and one for length.

Bidirectional controls (U+202E RIGHT-TO-LEFT OVERRIDE and its kin) in a group or column name reversed the chart
labels drawn after them, so a name could read as something it is not. They are shown as their code, "[U+202E]",
never applied; the name stays distinguishable from the same name without them. A label of 7,000 characters
crashed the PDF (a table row taller than a page): names are shortened for display, with an ellipsis.
"""

from __future__ import annotations

__all__ = ["BIDI_CONTROLS", "visible_controls", "shorten"]

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def visible_controls(text) -> str:
    """``text`` with each bidirectional control written as its code point ("[U+202E]")."""
    s = str(text)
    if not any(c in BIDI_CONTROLS for c in s):
        return s
    return "".join(f"[U+{ord(c):04X}]" if c in BIDI_CONTROLS else c for c in s)


def shorten(text, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (names in titles and table cells)."""
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"

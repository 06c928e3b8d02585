"""The PDF document of the audit report: an A4 fpdf2 document with the DejaVu fonts when installed (else the core
fonts, with Greek letters and symbols spelt out in ASCII), page footers, and :class:`_Doc`, the small layout layer
(headings, paragraphs, bullets, key-value and data tables, figures that never split over a page) that both the
regression report (:mod:`app.report.pdf`) and the classifier report (:mod:`app.report.binary`) write through. Kept
apart from the report's content so the content modules read as a sequence of sections.
"""

from __future__ import annotations

import datetime as _dt
import io
import math
import os

import pandas as pd

from mmc_core.common import MMCError

from ..figures.display import code_point, display_text

KALEIDO_MESSAGE = "PDF export needs the kaleido and fpdf2 packages: run `pip install kaleido fpdf2`"
FONT_DIRS = (
    "/usr/share/fonts/truetype/dejavu",
    "/usr/share/fonts/TTF",
    "/usr/share/fonts/dejavu",
    "/usr/local/share/fonts",
    "/Library/Fonts",
    "C:/Windows/Fonts",
)


# fonts for the scripts DejaVu lacks (Chinese, Japanese, Korean, ...), tried in order when present: TrueType or
# OpenType single fonts (Debian: fonts-droid-fallback; macOS / Windows: Arial Unicode)
FALLBACK_FONTS = (
    "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
    "/usr/share/fonts/truetype/droid/DroidSansFallback.ttf",
    "/usr/share/fonts/truetype/nanum/NanumGothic.ttf",  # Korean (Debian: fonts-nanum; Droid has no Hangul)
    "/usr/share/fonts/truetype/ancient-scripts/Symbola_hint.ttf",  # symbols and emoji (Debian: fonts-symbola)
    "/usr/share/fonts/opentype/noto/NotoSansSC-Regular.otf",
    "/usr/share/fonts/opentype/unifont/unifont.otf",
    "/Library/Fonts/Arial Unicode.ttf",
    "C:/Windows/Fonts/arialuni.ttf",
)


def _find_font(name: str) -> str | None:
    for d in FONT_DIRS:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    return None


_ASCII = {
    "α": "alpha",
    "β": "beta",
    "γ": "gamma",
    "δ": "delta",
    "μ": "mu",
    "σ": "sigma",
    "−": "-",
    "–": "-",
    "—": "-",
    "†": "+",
    "…": "...",
    "²": "^2",
    "³": "^3",
    "⁴": "^4",
    "≥": ">=",
    "≤": "<=",
    "×": "x",
    "·": "-",
    "√": "sqrt",
    "∝": "~",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "≈": "~",
    "→": "->",
}


def _make_pdf(title_left: str):
    try:
        from fpdf import FPDF
    except ImportError:
        raise MMCError(KALEIDO_MESSAGE) from None

    class ReportPDF(FPDF):
        unicode = False
        family = "helvetica"

        glyphs: frozenset = frozenset()  # the code points the fonts in use can draw (unicode mode)

        def text_(self, s) -> str:
            """``s`` as the document's fonts can draw it (app.figures.display's rule: a bidi control is shown as its
            code, "[U+202E]", never applied). A character no font has is shown the same way ("[U+5973]"), never
            dropped and never as a Python escape: group names that differ only in such characters stay
            different. An emoji presentation selector (U+FE0E, U+FE0F) no font has is left out: it only
            chooses between two looks of the character before it."""
            s = display_text(s)
            if self.unicode:
                if all(ord(c) in self.glyphs or c in "\n\t" for c in s):
                    return s
                return "".join(
                    c if ord(c) in self.glyphs or c in "\n\t" else "" if c in "\ufe0e\ufe0f" else code_point(c)
                    for c in s
                )
            for a, b in _ASCII.items():
                s = s.replace(a, b)
            return "".join(c if ord(c) < 256 else "" if c in "\ufe0e\ufe0f" else code_point(c) for c in s)

        def fit_(self, s: str, width: float, lines: int = 1) -> str:
            """``s`` (already through :meth:`text_`) cut with an ellipsis to what ``lines`` lines of ``width``
            mm hold in the current font: a cell of thousands of characters made a table row taller than a
            page, which fpdf2 cannot lay out (the 7,000-character label of issue 38)."""
            room = lines * max(1.0, width)
            if self.get_string_width(s) <= room:
                return s
            dots = "…" if self.unicode else "..."
            lo, hi = 0, len(s)
            while lo < hi:  # the longest prefix that fits with the ellipsis
                mid = (lo + hi + 1) // 2
                if self.get_string_width(s[:mid] + dots) <= room:
                    lo = mid
                else:
                    hi = mid - 1
            return s[:lo] + dots

        def footer(self):
            self.set_y(-11)
            self.set_font(self.family, "", 7.5)
            self.set_text_color(120, 120, 120)
            page = f"page {self.page_no()} of {{nb}}"
            room = self.w - self.l_margin - self.r_margin - self.get_string_width(page.replace("{nb}", "999")) - 4
            self.cell(room, 5, self.fit_(self.text_(title_left), room), align="L")
            self.set_x(self.l_margin)
            self.cell(0, 5, page, align="R")
            self.set_text_color(0, 0, 0)

    pdf = ReportPDF(orientation="P", unit="mm", format="A4")
    pdf.set_margins(12, 12, 12)
    pdf.set_auto_page_break(True, margin=15)
    regular, bold = _find_font("DejaVuSans.ttf"), _find_font("DejaVuSans-Bold.ttf")
    italic = _find_font("DejaVuSans-Oblique.ttf")
    if regular and bold:
        try:
            pdf.add_font("DejaVu", "", regular)
            pdf.add_font("DejaVu", "B", bold)
            pdf.add_font("DejaVu", "I", italic or regular)
            pdf.unicode, pdf.family = True, "DejaVu"
            pdf.glyphs = frozenset(pdf.fonts["dejavu"].cmap)  # type: ignore[union-attr]  # a TTF font: just added
        except Exception:  # noqa: BLE001 - a broken font file: fall back to the core fonts
            pdf.unicode, pdf.family = False, "helvetica"
        if pdf.unicode:
            _add_fallback_font(pdf)
    pdf.set_title(pdf.text_(title_left))
    pdf.set_creator("mmc-audit")
    return pdf


def _add_fallback_font(pdf, candidates=None) -> str | None:
    """Register every usable font of ``candidates`` (default FALLBACK_FONTS) as a fallback of every style, in
    order, for the characters DejaVu lacks (each script from the first font that has it); returns the first one's
    path (None: none found, those characters are written as codes)."""
    if not hasattr(pdf, "set_fallback_fonts"):
        return None
    used: list = []
    for path in FALLBACK_FONTS if candidates is None else candidates:
        if not os.path.isfile(path):
            continue
        family = f"mmcfallback{len(used)}"
        try:
            pdf.add_font(family, "", path)
            pdf.add_font(family, "B", path)
            pdf.add_font(family, "I", path)
        except Exception:  # noqa: BLE001, S112 - an unreadable font: try the next one
            continue
        used.append((family, path))
        pdf.glyphs = pdf.glyphs | frozenset(pdf.fonts[family].cmap)
    if not used:
        return None
    import logging

    # Symbola's hinting tables cannot be subset; fontTools drops them (harmless) with a warning per table and
    # document on stderr
    logging.getLogger("fontTools.subset").setLevel(logging.ERROR)
    pdf.set_fallback_fonts([f for f, _ in used], exact_match=False)
    return used[0][1]


REPORT_LABEL_CHARS = 80  # a label's name in the PDF's titles, headings and tables (the charts: LABEL_CHARS)


def report_label(model, label) -> str:
    """The label name a report prints: the one given, else the one the model was fitted with (shortened: a
    name of thousands of characters made a table row taller than a page)."""
    info = dict(model.info or {})
    if label in (None, "", "label") and info.get("label") not in (None, "", "label"):
        label = str(info["label"])
    return display_text(label or "label", REPORT_LABEL_CHARS)


def title_page(window_title: str, title: str, facts: str):
    """A new report on its first page: the title (large, blue) and one grey line of ``facts`` with the time it was
    generated. Returns (pdf, doc)."""
    pdf = _make_pdf(window_title)
    doc = _Doc(pdf)
    pdf.add_page()
    pdf.set_font(pdf.family, "B", 18)
    pdf.set_text_color(*_Doc.BLUE)
    room = pdf.w - pdf.l_margin - pdf.r_margin
    pdf.multi_cell(0, 9, pdf.fit_(pdf.text_(title), room, 3), new_x="LMARGIN", new_y="NEXT", align="L")
    pdf.set_text_color(90, 90, 90)
    pdf.set_font(pdf.family, "", 9)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    pdf.multi_cell(0, 5, pdf.text_(f"{facts} · generated {stamp} by mmc-audit"), new_x="LMARGIN", new_y="NEXT")
    pdf.set_text_color(0, 0, 0)
    pdf.ln(2)
    return pdf, doc


class _Doc:
    """Small layout helpers over fpdf2 (headings, paragraphs, key-value and data tables, figures)."""

    BLUE = (0, 84, 147)
    CELL_LINES = 8  # the most lines a table cell takes: longer text is cut with an ellipsis (Doc.fit_)

    def __init__(self, pdf):
        self.pdf = pdf
        self.t = pdf.text_
        self.figure_pages: list[int] = []

    @property
    def width(self) -> float:
        return self.pdf.w - self.pdf.l_margin - self.pdf.r_margin

    def _widths(self, col_widths, n: int) -> list:
        """The text width (mm) of each of ``n`` columns of a table of the page's width: ``col_widths`` are
        proportions (fpdf2 scales them to the width), None is equal columns; less the cell padding."""
        cw = list(col_widths) if col_widths is not None else [1.0] * n
        scale = self.width / float(sum(cw))
        return [max(1.0, w * scale - 2.0) for w in cw]

    def space_left(self) -> float:
        return self.pdf.h - self.pdf.b_margin - self.pdf.get_y()

    def ensure(self, mm: float):
        if self.space_left() < mm:
            self.pdf.add_page()

    def heading(self, text: str, size: float = 13, space: float = 3):
        self.ensure(22)
        p = self.pdf
        p.ln(space)
        p.set_font(p.family, "B", size)
        p.set_text_color(*self.BLUE)
        p.multi_cell(0, size * 0.5, p.fit_(self.t(text), self.width, 3), new_x="LMARGIN", new_y="NEXT", align="L")
        p.set_text_color(0, 0, 0)
        p.ln(1)

    def para(
        self,
        text: str,
        size: float = 9.5,
        style: str = "",
        color=(0, 0, 0),
        h: float | None = None,
        markdown: bool = False,
    ):
        """A paragraph; ``markdown`` only for our own texts (user and audit strings may contain ``--``)."""
        p = self.pdf
        p.set_font(p.family, style, size)
        p.set_text_color(*color)
        p.multi_cell(0, h or size * 0.47, self.t(text), new_x="LMARGIN", new_y="NEXT", markdown=markdown, align="L")
        p.set_text_color(0, 0, 0)
        p.ln(1.2)

    def bullets(self, items, size: float = 9.5):
        p = self.pdf
        p.set_font(p.family, "", size)
        for it in items:
            p.set_x(p.l_margin + 2)
            p.cell(4, size * 0.47, self.t("•") if p.unicode else "-")
            p.multi_cell(self.width - 6, size * 0.47, self.t(it), new_x="LMARGIN", new_y="NEXT", align="L")
            p.ln(0.8)
        p.ln(1)

    def kv_table(self, rows, col_widths=(34, 152), size: float = 8.5):
        p = self.pdf
        p.set_font(p.family, "", size)
        p.set_draw_color(190, 190, 190)
        with p.table(
            col_widths=col_widths,
            first_row_as_headings=False,
            line_height=size * 0.5,
            text_align=("LEFT", "LEFT"),
            borders_layout="HORIZONTAL_LINES",
            padding=0.8,
        ) as tb:
            widths = self._widths(col_widths, 2)
            for k, v in rows:
                r = tb.row()
                p.set_font(p.family, "B", size)
                r.cell(p.fit_(self.t(k), widths[0], self.CELL_LINES))
                p.set_font(p.family, "", size)
                r.cell(p.fit_(self.t(v), widths[1], self.CELL_LINES))
        p.ln(2)

    def table_height(self, df: pd.DataFrame, col_widths, size: float = 8.0) -> float:
        """Estimated height (mm) of ``data_table(df)``: wrapped lines per row times the line height."""
        p = self.pdf
        p.set_font(p.family, "B", size)
        scale = self.width / float(sum(col_widths))
        line = size * 0.5

        def lines(values, bold=False):
            p.set_font(p.family, "B" if bold else "", size)
            return max(
                min(self.CELL_LINES, math.ceil(p.get_string_width(self.t(v)) / max(1.0, w * scale - 1.6)) or 1)
                for v, w in zip(values, col_widths)
            )

        h = lines([str(c) for c in df.columns], True) * line + 1.6
        for _, row in df.iterrows():
            h += lines([str(v) for v in row]) * line + 1.6
        return h + 2

    def data_table(self, df: pd.DataFrame, col_widths=None, size: float = 8.0, align=None, title: str | None = None):
        p = self.pdf
        if col_widths is not None:  # keep the table (and its title) on one page when it fits on one
            need = self.table_height(df, col_widths, size) + (12 if title else 0)
            if need < p.h - p.t_margin - p.b_margin:
                self.ensure(need)
        if title:
            self.heading(title, size=11, space=2)
        p.set_font(p.family, "", size)
        p.set_draw_color(150, 150, 150)
        cols = [str(c) for c in df.columns]
        align = align or ["LEFT"] + ["RIGHT"] * (len(cols) - 1)
        with p.table(
            col_widths=col_widths,
            line_height=size * 0.5,
            text_align=align,
            headings_style=_headings_style(p, size),
            borders_layout="SINGLE_TOP_LINE",
            padding=0.7,
            first_row_as_headings=True,
        ) as tb:
            widths = self._widths(col_widths, len(cols))
            r = tb.row()
            p.set_font(p.family, "B", size)
            heads = [p.fit_(self.t(c), w, self.CELL_LINES) for c, w in zip(cols, widths)]
            p.set_font(p.family, "", size)
            for c in heads:
                r.cell(c)
            for _, row in df.iterrows():
                r = tb.row()
                for v, w in zip(row, widths):
                    r.cell(p.fit_(self.t(v), w, self.CELL_LINES))
        p.ln(2)

    def figure_size(self, width_px: int, height_px: int, max_height: float | None = None) -> tuple[float, float]:
        p = self.pdf
        w = self.width
        h = w * height_px / width_px
        limit = min(max_height or 1e9, p.h - p.t_margin - p.b_margin - 24)
        if h > limit:
            w, h = w * limit / h, limit
        return w, h

    def caption_height(self, caption: str | None, size: float = 8.3) -> float:
        if not caption:
            return 0.0
        p = self.pdf
        p.set_font(p.family, "", size)
        n = math.ceil(p.get_string_width(self.t(caption)) / (self.width - 2)) + 0.3
        return n * size * 0.47 + 2.5

    def figure(
        self, png: bytes, width_px: int, height_px: int, caption: str | None = None, max_height: float | None = None
    ):
        """Place a figure at full text width (scaled down to fit the page if it is too tall)."""
        p = self.pdf
        w, h = self.figure_size(width_px, height_px, max_height)
        cap_h = self.caption_height(caption)
        if self.space_left() < h + cap_h:
            p.add_page()
        x = p.l_margin + (self.width - w) / 2
        p.image(io.BytesIO(png), x=x, y=p.get_y(), w=w, h=h)
        self.figure_pages.append(p.page_no())
        p.set_y(p.get_y() + h + 1.5)
        if caption:
            self.para(caption, size=8.3, color=(70, 70, 70))


def _headings_style(p, size):
    from fpdf.fonts import FontFace

    return FontFace(family=p.family, emphasis="BOLD", size_pt=size, color=(255, 255, 255), fill_color=(0, 84, 147))

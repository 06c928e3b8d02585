r"""User text in the PDF and the charts: Korean drawn with the installed fallback font (not as \uXXXX codes),
bidirectional controls shown as their code (never applied: U+202E reversed chart labels), and a label of
thousands of characters shortened instead of crashing the report (issue 38)."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from app.figures.display import LABEL_CHARS, display_text, shorten, visible_controls
from app.report import pdf as R
from app.report import pdf_doc
from mmc_core import GroupSet, MomentMulticalibrator
from tests.report_stand_in import stand_in_renderer

NANUM = "/usr/share/fonts/truetype/nanum/NanumGothic.ttf"


def _report(tmp_path, monkeypatch, label: str, values) -> str:
    stand_in_renderer(monkeypatch)
    rng = np.random.default_rng(0)
    n = 900
    df = pd.DataFrame({"지역": rng.choice(values, n), "x": rng.normal(size=n)})
    df[label] = df["x"] + rng.normal(size=n)
    est = MomentMulticalibrator(n_moments=2, calibration_fraction=0.3).fit(
        df, df[label], GroupSet.from_columns(df, ["지역"]), label_name=label
    )
    data = R.build_report_pdf(est.model_, df, df[label].to_numpy(), label=label, data_name="k.csv")
    path = tmp_path / "r.pdf"
    path.write_bytes(data)
    return subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True, check=True).stdout


needs_poppler = pytest.mark.skipif(shutil.which("pdftotext") is None, reason="needs poppler-utils (pdftotext)")


@needs_poppler
@pytest.mark.skipif(not os.path.isfile(NANUM), reason="needs fonts-nanum (scripts/test.sh installs it)")
def test_korean_is_drawn_not_written_as_codes(tmp_path, monkeypatch):
    text = _report(tmp_path, monkeypatch, "소득", ["서울", "부산"])
    assert "소득" in text and "지역=서울" in text
    assert "\\uc18c" not in text and "\\u" not in text


@needs_poppler
def test_bidi_controls_are_shown_never_applied(tmp_path, monkeypatch):
    text = _report(tmp_path, monkeypatch, "income", ["plain", "x\u202eevil"])
    assert "x[U+202E]evil" in text and "\u202e" not in text


@needs_poppler
def test_a_label_of_7000_characters_is_shortened_not_a_crash(tmp_path, monkeypatch):
    label = "y" * 7000
    text = _report(tmp_path, monkeypatch, label, ["a", "b"])
    assert "y" * 70 in text and "y" * 100 not in text.replace("\n", "")


def test_one_rule_for_every_page():
    from app.figures.figure_style import hover_safe
    from app.ui.common import esc

    s = "a\u202eb\u2066c"
    assert visible_controls(s) == "a[U+202E]b[U+2066]c"
    assert "[U+202E]" in hover_safe(s) and "\u202e" not in hover_safe(s)
    assert "\u202e" not in esc(s) and "U+202E" in esc(s)
    assert shorten("abc", 3) == "abc" and shorten("abcd", 3) == "ab…"
    pdf = pdf_doc._make_pdf("t")
    assert "\u202e" not in pdf.text_(s)


def test_a_character_no_font_has_is_shown_as_its_code_not_a_python_escape(monkeypatch):
    r"""Without a font for Hangul the PDF printed "\uc18c": now "[U+C18C]", the notation of the bidi controls."""
    monkeypatch.setattr(pdf_doc, "FALLBACK_FONTS", ())
    pdf = pdf_doc._make_pdf("t")
    if not pdf.unicode:
        pytest.skip("DejaVu fonts not installed")
    assert pdf.text_("소득") == "[U+C18C][U+B4DD]"
    assert pdf.text_("a\u202eb") == "a[U+202E]b"
    assert "[U+FE0F]" not in pdf.text_("\u2764\ufe0f")  # a presentation selector is never shown as a code
    pdf.unicode = False  # the core fonts (no DejaVu installed): the same notation, never "\\u"
    assert pdf.text_("소 ≥") == "[U+C18C] >="


@needs_poppler
def test_the_installed_fallback_fonts_draw_korean_chinese_arabic_and_emoji(tmp_path):
    """Every script from the first installed font that has it (set_fallback_fonts): nothing is left as a code."""
    pdf = pdf_doc._make_pdf("t")
    wanted = {"소득": NANUM, "女": pdf_doc.FALLBACK_FONTS[0], "مرحبا": None, "😀": pdf_doc.FALLBACK_FONTS[3]}
    for text, font in wanted.items():
        if font is None or os.path.isfile(font):
            assert pdf.text_(text) == text, text
    pdf.add_page()
    pdf.set_font(pdf.family, "", 10)
    pdf.multi_cell(0, 5, pdf.text_(" ".join(wanted)))
    path = tmp_path / "t.pdf"
    path.write_bytes(bytes(pdf.output()))
    out = subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True, check=True).stdout
    assert "\\u" not in out and "[U+" not in out
    if os.path.isfile(NANUM):
        assert "소득" in out


def test_the_footer_and_every_table_cell_fit_whatever_the_text(tmp_path):
    """A 7,000-character name in a key-value or data table, a heading or the footer: cut with an ellipsis to a
    few lines instead of a row taller than a page (fpdf2 refuses to lay that out)."""
    long = "y" * 7000
    pdf, doc = pdf_doc.title_page(f"mmc-audit report: {long} on d.csv", f"Audit: {long}", "facts")
    doc.heading(f"Errors ({long} units)")
    doc.kv_table([("Label", long), (long, "x"), ("Words", " ".join(["word"] * 3000))])
    doc.data_table(pd.DataFrame({long: [long, "a"], "rows": [1, 2]}), col_widths=(60, 20))
    doc.data_table(pd.DataFrame({"group": [long]}))
    data = bytes(pdf.output())
    assert pdf.page_no() <= 3
    if shutil.which("pdftotext") is None:
        return
    path = tmp_path / "t.pdf"
    path.write_bytes(data)
    out = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True).stdout
    footer = [ln for ln in out.splitlines() if "page 1 of" in ln][0]
    assert "…" in footer and footer.rstrip().endswith("page 1 of " + str(pdf.page_no()))


def _report_figures(monkeypatch, label: str, values) -> list:
    """Every Plotly figure a report draws (through the stand-in renderer), for a table with these names."""
    figures = []
    stand_in_renderer(monkeypatch)
    inner = R.figure_to_png

    def keep(fig, *a, **k):
        figures.append(fig)
        return inner(fig, *a, **k)

    monkeypatch.setattr(R, "figure_to_png", keep)
    _report_pdf(label, values)
    return figures


def _report_pdf(label: str, values) -> bytes:
    rng = np.random.default_rng(0)
    n = 900
    df = pd.DataFrame({"지역": rng.choice(values, n), "x": rng.normal(size=n)})
    df[label] = df["x"] + rng.normal(size=n)
    est = MomentMulticalibrator(n_moments=2, calibration_fraction=0.3).fit(
        df, df[label], GroupSet.from_columns(df, ["지역"]), label_name=label
    )
    return R.build_report_pdf(est.model_, df, df[label].to_numpy(), label=label, data_name="k.csv")


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def test_the_charts_show_a_label_s_bidi_controls_and_markup_as_text(monkeypatch):
    """The label's name reached the charts' axis titles as it was: U+202E reversed them, "<b>" made them bold."""
    figures = _report_figures(monkeypatch, "in\u202ecome<b>", ["a", "b\u2067c"])
    assert figures
    texts = [s for f in figures for s in _strings(f.to_plotly_json()["layout"])]
    assert any("in[U+202E]come&lt;b&gt;" in s for s in texts)
    assert not any(c in s for s in texts for c in "\u202e\u2067")
    assert not any("<b>" in s and "come" in s and "&lt;b&gt;" not in s for s in texts)


def test_the_charts_shorten_a_label_of_7000_characters(monkeypatch):
    """A 7,000-character label ran over the neighbouring panel and off the figure: cut to LABEL_CHARS."""
    figures = _report_figures(monkeypatch, "y" * 7000, ["a", "b"])
    texts = [s for f in figures for s in _strings(f.to_plotly_json()["layout"])]
    assert any("y" * (LABEL_CHARS - 1) + "…" in s for s in texts)
    assert not any("y" * (LABEL_CHARS + 1) in s for s in texts)


def test_display_text_is_the_one_rule():
    assert display_text("a\u202eb") == "a[U+202E]b" and display_text("abcd", 3) == "ab…"
    assert display_text("\u202e" * 3, 10) == "[U+202E]…"  # never half a code

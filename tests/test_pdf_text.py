"""User text in the PDF and the charts: Korean drawn with the installed fallback font (not as \\uXXXX codes),
bidirectional controls shown as their code (never applied: U+202E reversed chart labels), and a label of
thousands of characters shortened instead of crashing the report (issue 38)."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from app import pdf_doc
from app import report as R
from app.display import shorten, visible_controls
from mmc_core import GroupSet, MomentMulticalibrator
from tests.test_report import stand_in_renderer

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
    assert "y" * 100 in text and "y" * 200 not in text.replace("\n", "")


def test_one_rule_for_every_page():
    from app.figure_style import _hover_safe
    from app.ui.common import esc

    s = "a\u202eb\u2066c"
    assert visible_controls(s) == "a[U+202E]b[U+2066]c"
    assert "[U+202E]" in _hover_safe(s) and "\u202e" not in _hover_safe(s)
    assert "\u202e" not in esc(s) and "U+202E" in esc(s)
    assert shorten("abc", 3) == "abc" and shorten("abcd", 3) == "ab…"
    pdf = pdf_doc._make_pdf("t")
    assert "\u202e" not in pdf.text_(s)

"""`mmc report --format html` and `mmc compare --report X.html`: one self-contained file (plotly.js inline, nothing
fetched), the same figures as the PDF, and user text shown literally (a group named with a markdown link or an
HTML tag is never a link or a tag)."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from app.cli.entry import main

EVIL_LINK, EVIL_TAG = "[x](http://example.com)", "<img src=http://203.0.113.9/i.png>"


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    df = pd.read_csv("demo_datasets/synthetic_scores.csv")
    df["race"] = df["race"].replace({"A": EVIL_LINK, "B": EVIL_TAG})
    df.to_csv(d / "evil.csv", index=False)
    fit = [
        "fit",
        "--data",
        str(d / "evil.csv"),
        "--label",
        "outcome",
        "--pred",
        "base_pred",
        "--group-cols",
        "sex,race",
    ]
    assert main([*fit, "--out", str(d / "m.json")]) == 0
    return d


def _check_inert(page: str):
    assert page.startswith("<!DOCTYPE html>")
    assert EVIL_TAG not in page and "&lt;img src=http://203.0.113.9/i.png&gt;" in page
    assert EVIL_LINK in page and '<a href="http://example.com"' not in page  # shown as written, not a link
    assert not re.search(r"<script[^>]+src=", page) and not re.search(
        r"<(img|link|iframe)[^>]+(src|href)=\"?http", page
    )


def test_audit_report_as_html(evil, capsys):
    out = evil / "r.html"
    args = ["report", "--data", str(evil / "evil.csv"), "--model", str(evil / "m.json"), "--label", "outcome"]
    assert main([*args, "--pred", "base_pred", "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    _check_inert(page)
    assert "Group scorecard" in page and page.count('class="plotly-graph-div"') >= 4


def test_comparison_report_as_html(evil):
    out, rep = evil / "c.json", evil / "c.html"
    args = ["compare", "--data", str(evil / "evil.csv"), "--label", "outcome", "--pred-a", "base_pred"]
    assert main([*args, "--pred-b", "base_pred", "--name-a", "a", "--name-b", "b",
                 "--group-cols", "race", "--out", str(out), "--report", str(rep)]) == 0  # fmt: skip
    page = rep.read_text(encoding="utf-8")
    _check_inert(page)
    assert "Comparison: b against a" in page

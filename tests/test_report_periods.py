"""`mmc report --period COLUMN` (issue 37): the audit over time in the PDF and HTML reports. A model fitted on one
table is reported on a second one split into two quarters, where group g=3's noise was planted larger in the
second quarter (its variance doubled): the reports' section "Over time" names that group's change of spread. A
classifier's section names the group whose selection rate was planted higher in the second quarter."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from app.report.pdf import chromium_available

needs_browser = pytest.mark.skipif(chromium_available() is None, reason="the PDF's figures need Chromium")
needs_poppler = pytest.mark.skipif(shutil.which("pdftotext") is None, reason="needs poppler-utils (pdftotext)")


def world(rng, n: int) -> pd.DataFrame:
    """The truth: y = x + sd(g) * noise, sd(g) = 1 + 0.5 g, four groups."""
    df = pd.DataFrame({"g": rng.integers(0, 4, n), "x": rng.normal(size=n)})
    df["y"] = df["x"] + (1 + 0.5 * df["g"]) * rng.normal(size=n)
    return df


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("periods")
    fit_table = d / "fit.csv"
    world(np.random.default_rng(1), 6000).to_csv(fit_table, index=False)
    rng = np.random.default_rng(2)
    df = world(rng, 12000)
    df["quarter"] = np.array(["2026Q1", "2026Q2"])[rng.integers(0, 2, len(df))]
    late = (df["quarter"] == "2026Q2") & (df["g"] == 3)
    df.loc[late, "y"] += (1 + 0.5 * 3) * rng.normal(size=int(late.sum()))  # g=3's variance doubled in 2026Q2
    data = d / "new.csv"
    df.to_csv(data, index=False)
    model = d / "model.json"
    fit = ["fit", "--data", str(fit_table), "--label", "y", "--pred", "x", "--group-cols", "g", "--out", str(model)]
    assert main(fit) == 0
    return {"dir": d, "data": data, "model": model}


def report_args(files, out, *extra) -> list:
    args = ["report", "--model", str(files["model"]), "--data", str(files["data"]), "--label", "y", "--pred", "x"]
    return [*args, *extra, "--out", str(out)]


def test_html_report_has_the_over_time_section(files, capsys):
    out = files["dir"] / "report.html"
    assert main(report_args(files, out, "--period", "quarter")) == 0
    assert "spread for g=3 changed from" in capsys.readouterr().err  # the findings on stderr, as mmc audit says them
    page = out.read_text()
    section = page[page.index("<h2>Over time: quarter</h2>") :]
    assert "in sorted order: 2026Q1, 2026Q2" in section
    table = section[section.index("<table>") : section.index("</table>")]
    rows = [r for r in table.split("<tr>")[2:]]
    spread_rows = [r for r in rows if "<td>spread ratio</td>" in r]
    assert any("<td>g=3</td>" in r and "2026Q1 → 2026Q2" in r for r in spread_rows), table
    assert not any(f"<td>g={k}</td>" in r for r in rows for k in (0, 1, 2)), table  # no group unchanged is named
    assert "Spread ratio (observed \\u002f predicted variance) by period" in section  # the trend chart (period_figure)
    assert main(report_args(files, files["dir"] / "plain.html")) == 0
    assert "Over time" not in (files["dir"] / "plain.html").read_text()  # without --period, no such section


@needs_browser
@needs_poppler
def test_pdf_report_has_the_over_time_section(files, capsys):
    out = files["dir"] / "report.pdf"
    assert main(report_args(files, out, "--period", "quarter")) == 0
    text = subprocess.run(["pdftotext", "-layout", str(out), "-"], capture_output=True, text=True, check=True).stdout
    section = text[text.index("Over time: quarter") :]
    assert "Changes found between periods" in section
    lines = [ln for ln in section.splitlines() if "spread ratio" in ln and "2026Q1 → 2026Q2" in ln]
    assert any(ln.split()[0] == "g=3" for ln in lines), section[:3000]
    assert "group(s): g=3" in " ".join(section.split())  # the headline names it first (the surest change)
    assert not any(ln.split()[0] in ("g=0", "g=1", "g=2") for ln in lines)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--period", "nope"], "period column 'nope' is not in the data"),
        (["--period", "quarter", "--format", "html"], None),  # the control: the same call with a column that exists
    ],
)
def test_a_missing_period_column_is_one_line_and_writes_nothing(files, capsys, extra, message):
    out = files["dir"] / "never.html"
    capsys.readouterr()
    code = main(report_args(files, out, *extra))
    err = capsys.readouterr().err
    if message is None:
        assert code == 0 and out.exists()
        out.unlink()
        return
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("mmc: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert not out.exists()


@pytest.fixture(scope="module")
def classifier_files(tmp_path_factory):
    """A classifier fitted on one table (its base score the true probability) and reported on a second split into
    two quarters, where the scorer drifted for g=2 in the second quarter (its score raised by 0.25, the truth
    unchanged): g=2's selection rate rises from about half to most of its rows."""
    d = tmp_path_factory.mktemp("classifier_periods")
    rng = np.random.default_rng(1)

    def table(n):
        df = pd.DataFrame({"g": rng.integers(0, 3, n), "x": rng.normal(size=n)})
        df["score"] = 1 / (1 + np.exp(-df["x"]))
        return df

    fit = table(4000)
    fit["hired"] = np.where(rng.random(len(fit)) < fit["score"], "yes", "no")
    fit.to_csv(d / "fit.csv", index=False)
    df = table(6000)
    df["quarter"] = np.array(["2026Q1", "2026Q2"])[rng.integers(0, 2, len(df))]
    df["hired"] = np.where(rng.random(len(df)) < df["score"], "yes", "no")
    late = (df["quarter"] == "2026Q2") & (df["g"] == 2)
    df.loc[late, "score"] = np.clip(df.loc[late, "score"] + 0.25, 0, 1)
    df.to_csv(d / "new.csv", index=False)
    model = d / "model.json"
    args = ["fit", "--data", str(d / "fit.csv"), "--label", "hired", "--positive", "yes", "--pred", "score"]
    assert main([*args, "--group-cols", "g", "--out", str(model)]) == 0
    common = ["--model", str(model), "--data", str(d / "new.csv"), "--label", "hired", "--pred", "score"]
    return {"dir": d, "common": [*common, "--period", "quarter"]}


def test_a_classifier_html_report_has_the_over_time_section_with_its_rates(classifier_files, capsys):
    d, common = classifier_files["dir"], classifier_files["common"]
    capsys.readouterr()
    out = d / "r.html"
    assert main(["report", *common, "--out", str(out)]) == 0
    assert "selection rate for g=2 changed from" in capsys.readouterr().err
    page = out.read_text()
    section = page[page.index("<h2>Over time: quarter</h2>") :]
    assert "Rates are at the decision threshold 0.5" in section
    table = section[section.index("<table>") : section.index("</table>")]
    rows = table.split("<tr>")[2:]
    rate_rows = [r for r in rows if "<td>selection rate</td>" in r]
    assert rows[0] in rate_rows and "<td>g=2</td>" in rows[0] and "2026Q1 → 2026Q2" in rows[0], table
    assert " pts (" in rows[0]  # a rate's change in percentage points
    assert not any(f"<td>g={k}</td>" in r for r in rows for k in (0, 1)), table  # no group unchanged is named
    assert "Selection rate (share decided positive) by period" in section  # the trend chart of the rate
    assert main(["audit", *common, "--out", str(d / "a.json")]) == 0  # the same rates per period in the JSON


@needs_browser
@needs_poppler
def test_a_classifier_pdf_report_has_the_over_time_section_with_its_rates(classifier_files, capsys):
    out = classifier_files["dir"] / "r.pdf"
    assert main(["report", *classifier_files["common"], "--threshold", "0.5", "--out", str(out)]) == 0
    text = subprocess.run(["pdftotext", "-layout", str(out), "-"], capture_output=True, text=True, check=True).stdout
    section = text[text.index("4. Over time: quarter") :]
    assert "group(s): g=2" in " ".join(section.split())  # the headline names it first (the surest change)
    lines = [ln for ln in section.splitlines() if "selection rate" in ln and "2026Q1 → 2026Q2" in ln]
    assert lines and lines[0].split()[0] == "g=2" and " pts (" in lines[0], section[:3000]
    assert "Over time: selection rate by period" in section


def test_results_over_time_offers_the_reports_with_its_section():
    """The Results page's Over time view, once a period column is picked, offers the audit's HTML (and PDF) report
    with that view as its section "Over time": the group whose spread was planted larger in one quarter named."""
    from tests.apptest_helpers import run_quarters_world
    from tests.apptest_helpers import switch as _page

    at = run_quarters_world()
    labels = [b.proto.label for b in at.get("download_button")]
    assert not any("Over time" in x for x in labels)  # no period column chosen: no such report
    at.selectbox(key="res_period").select("quarter").run()
    assert not at.exception, [e.value for e in at.exception]
    buttons = {b.proto.label: b.proto for b in at.get("download_button")}
    assert "Report with Over time (HTML)" in buttons
    assert buttons["Report with Over time (HTML)"].HasField("deferred_file_id")  # built on click, not on each run
    if chromium_available() is not None:
        assert "Report with Over time (PDF)" in buttons
    # what the button builds on click: the view's period audit in the report (the same cached function)
    from app.ui.results_over_time import _period_report

    run, frame = at.session_state["run"], at.session_state["data"]["df"]
    (res,) = at.session_state["_period_memo"].values()
    page = _period_report("html", "k", "quarter", "", "", run, frame, res).decode()
    section = page[page.index("<h2>Over time: quarter</h2>") :]
    assert "(test rows)" in page and "race=D" in section and "<td>spread ratio</td>" in section
    assert "Spread ratio (observed \\u002f predicted variance) by period" in section
    # the Export page's PDF carries the same section while the view has a column chosen
    at = _page(at, "export")
    assert any("Over time of **quarter**" in c.value for c in at.caption), [c.value for c in at.caption]
    if chromium_available() is not None:
        import subprocess

        from app.ui.export_page import build_pdf

        pdf = build_pdf(run, frame, periods=res, period_column="quarter")
        text = subprocess.run(["pdftotext", "-", "-"], input=pdf, capture_output=True, check=True).stdout.decode()
        assert "Over time: quarter" in text and "race=D" in text[text.index("Over time: quarter") :]


def test_without_a_change_the_section_says_none_was_found_and_how_many_tests_ran():
    from app.report.html import _over_time
    from app.services.compare_service import period_chart_values, period_findings_table, period_headline
    from mmc_core import GroupSet
    from mmc_core.comparison.compare_models import Side, compare_periods

    rng = np.random.default_rng(7)
    df = world(rng, 4000)
    sd = 1 + 0.5 * df["g"].to_numpy()
    mu = df["x"].to_numpy()
    s = Side("the model", mu, sd * sd, mu - 1.645 * sd, mu + 1.645 * sd)
    res = compare_periods(df, df["y"], s, GroupSet.from_columns(df, ["g"]), rng.integers(0, 3, len(df)))
    assert not res.findings and res.n_tests > 0
    assert period_headline(res, "batch") == (
        f"No group's values change between periods of 'batch' beyond chance ({res.n_tests} tests of change)."
    )
    assert period_findings_table(res).empty and period_chart_values(res) == ["spread"]
    html = "".join(_over_time(res, "batch"))
    assert "<table>" not in html and f"({res.n_tests} tests of change)" in html and html.count("plotly-graph-div") == 1

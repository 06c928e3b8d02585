"""app/report/pdf.py: the PDF audit report.

* fast: the layout with a stand-in figure renderer (no browser), and the one-line error when Chromium
  is missing (``mmc report`` exits 2);
* slow (``-m slow``): a real report through kaleido and the system Chromium, rendered with poppler to
  check that the figure pages really carry figures, and the ``mmc report`` command end to end.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from app.report import pdf as R
from app.report import text as RT
from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.common.synthetic import demo_distribution
from tests.report_stand_in import stand_in_renderer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_CHROMIUM = os.path.exists("/usr/bin/chromium") or R.chromium_available() is not None
HAVE_POPPLER = all(shutil.which(t) for t in ("pdftoppm", "pdfinfo", "pdfimages"))
needs_browser = pytest.mark.skipif(
    not HAVE_CHROMIUM,
    reason="no Chromium (apt-get install chromium): the PDF report exports its figures with kaleido + Chromium",
)
needs_poppler = pytest.mark.skipif(
    not HAVE_POPPLER, reason="poppler-utils (pdftoppm, pdfinfo, pdfimages) missing: apt-get install poppler-utils"
)
N_FIGURES = 8  # convergence, variance, coverage, coverage by bucket, width, calibration, moment 2, moment 4


@pytest.fixture(scope="module")
def demo():
    """The demo-size setting of the brief: 4000 rows, 36 groups, moments 2..4, a base prediction."""
    from mmc_core.auditing.metrics import audit

    t = demo_distribution().sample_table(4000, np.random.default_rng(0))
    est = MomentMulticalibrator(n_moments=4, label_range=(0, 100), calibration_fraction=0.25).fit(
        t,
        t["outcome"],
        GroupSet.from_columns(t, ["sex", "race", "age"], 2),
        base_prediction=t["base_pred"],
        label_name="outcome",
        base_name="base_pred",
    )
    new = demo_distribution().sample_table(3000, np.random.default_rng(1))
    y, base = np.asarray(new["outcome"], float), np.asarray(new["base_pred"], float)
    res = audit(est.model_, new, y, base=base, delta=0.1, gamma=0.05)
    return dict(model=est.model_, table=new, y=y, base=base, audit=res)


def pdf_pages(data: bytes, tmp_path) -> int:
    path = tmp_path / "r.pdf"
    path.write_bytes(data)
    out = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, check=True).stdout
    return int(next(line.split()[-1] for line in out.splitlines() if line.startswith("Pages:")))


def pdf_text(data: bytes, tmp_path) -> str:
    path = tmp_path / "t.pdf"
    path.write_bytes(data)
    return subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout


# ---- fast --------------------------------------------------------------------------------------------
@needs_poppler
def test_layout_with_stand_in_renderer(demo, tmp_path, monkeypatch):
    """The whole layout (text, tables, figure placement) without a browser: figures become grey boxes."""
    rendered = stand_in_renderer(monkeypatch)
    data = R.build_report_pdf(
        demo["model"],
        demo["table"],
        demo["y"],
        base=demo["base"],
        label="outcome",
        data_name="fresh.csv",
        audit=demo["audit"],
        data_note="Rows of fresh.csv dropped on the Data page before the run: 2 row(s) without a numeric 'y' dropped.",
    )
    assert data[:5] == b"%PDF-"
    assert len(rendered) == N_FIGURES
    assert 7 <= pdf_pages(data, tmp_path) <= 12
    text = pdf_text(data, tmp_path)
    for needle in (
        "Moment multicalibration audit: outcome",
        "Key findings",
        "Model and run",
        "Converged",
        "How to read this report",
        "What it promises",
        "What it does not promise",
        "Convergence of the fit",
        "Variance disparities",
        "Interval coverage",
        "Interval widths",
        "Mean calibration before and after",
        "Variance reliability",
        "Interval coverage by method",
        "Groups below",
        "fresh.csv",
        "[0; 100]",
        "declared",
        "dropped on the Data page before the run",
    ):
        assert needle in text, needle
    flat = " ".join(text.split())
    # the default per-cell test ends the descent with cells above alpha that are not significant: said so
    assert "or when no cell's error is significant against its own standard error" in flat
    summary = R.findings_summary(demo["audit"])
    assert f"{summary['n_tests']} tests of the model's means" in flat
    # the demo model is right on fresh rows of its own distribution: no finding, and the PDF says so; its
    # descriptive disparities (race D is the noisiest group of the ground truth) are printed in full
    assert summary["n_found"] == 0 and "No defect found" in flat
    assert len(summary["disparities"]) == 3
    for f in summary["disparities"]:
        assert " ".join(f["text"].split()) in flat, f["text"]


@needs_poppler
def test_findings_of_a_wrong_model_are_printed_in_full(demo, tmp_path, monkeypatch):
    """A planted defect (the labels of race D raised by 10 points after the fit): the audit reports findings,
    and the PDF prints each shown finding's whole sentence, the count of the ones left out, and no
    'No defect found'."""
    from mmc_core.auditing.metrics import audit

    stand_in_renderer(monkeypatch)
    y = demo["y"] + 10.0 * (np.asarray(demo["table"]["race"]) == "D")
    res = audit(demo["model"], demo["table"], y, base=demo["base"], delta=0.1, gamma=0.05)
    summary = R.findings_summary(res)
    assert summary["shown"] and any("race=D" in f["text"] for f in summary["shown"])
    data = R.build_report_pdf(
        demo["model"], demo["table"], y, base=demo["base"], label="outcome", data_name="shifted.csv", audit=res
    )
    flat = " ".join(pdf_text(data, tmp_path).split())
    for f in summary["shown"]:
        assert " ".join(f["text"].split()) in flat, f["text"]
    more = summary["n_found"] - len(summary["shown"])
    assert (f"{more} further finding(s) are not listed here: `mmc audit` writes every finding" in flat) == (more > 0)
    assert "No defect found" not in flat
    # the intervals allow for the selection, and the PDF says how, with each interval's miss probability (a
    # confidence of 1 - 0.05 / 1500 used to print as "each at 1")
    assert all("selection-adjusted 95% CI" in f["text"] for f in summary["shown"] if f["kind"] != "coverage")
    miss = summary["shown"][0]["interval_miss"]
    assert miss == pytest.approx(summary["n_found"] * 0.05 / summary["n_tests"])
    note = f"each missing with probability {miss:.2g}): on average at most 5% of the findings' intervals miss"
    assert note in flat and note in summary["interval_note"]


@needs_poppler
def test_mean_only_model_skips_empty_sections(tmp_path, monkeypatch):
    """A mean-only model has no variances, moments or intervals: those sections are left out and listed."""
    rendered = stand_in_renderer(monkeypatch)
    t = demo_distribution().sample_table(1500, np.random.default_rng(4))
    est = MomentMulticalibrator(n_moments=1, label_range=(0, 100), calibration_fraction=0).fit(
        t, t["outcome"], GroupSet.from_columns(t, ["sex", "race"], 2), label_name="outcome"
    )
    data = R.build_report_pdf(est.model_, t, np.asarray(t["outcome"], float), label="outcome", data_name="d.csv")
    assert data[:5] == b"%PDF-" and len(rendered) == 2  # convergence, calibration
    text = pdf_text(data, tmp_path)
    assert "Not in this report" in text and "mean only" in text
    assert "Variance reliability" not in text
    # no moment threshold, moment updates or variance tests are claimed for a model without moments (found in
    # an exploratory session: "β = 0.01 (moments)", "bound 1/β² − 1 = 9,999", "tests of ... variances")
    flat = " ".join(text.split())
    assert "β =" not in flat and "Moment updates" not in flat and "variances" not in flat
    assert "tests of the model's means and bucket calibration on every group" in flat  # not "interval coverage"
    # nor in the "how to read" notes: no moments, no β, no intervals (the notes promised all three, found in a
    # review of the PDF of a mean-only model)
    assert "β" not in flat and "central moments" not in flat and "intervals" not in flat, flat
    assert "the mean of the label (no variance" in flat and "Notation: α is the mean threshold" in flat


def test_missing_chromium_is_one_actionable_line(tmp_path):
    """`mmc report` without a browser: exit 2 and one line saying what to install; no file written."""
    t = pd.DataFrame(demo_distribution().sample_table(600, np.random.default_rng(3)))
    t.to_csv(tmp_path / "d.csv", index=False)
    env = dict(os.environ, BROWSER_PATH=str(tmp_path / "no-such-chromium"), PYTHONPATH=ROOT)
    fit = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "fit",
            "--data",
            str(tmp_path / "d.csv"),
            "--label",
            "outcome",
            "--group-cols",
            "sex,race",
            "--label-range",
            "0,100",
            "--out",
            str(tmp_path / "m.json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert fit.returncode == 0, fit.stderr
    out = tmp_path / "r.pdf"
    rep = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "report",
            "--model",
            str(tmp_path / "m.json"),
            "--data",
            str(tmp_path / "d.csv"),
            "--label",
            "outcome",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert rep.returncode == 2
    lines = [ln for ln in rep.stderr.splitlines() if ln.startswith("mmc:")]
    assert len(lines) == 1 and "apt-get install chromium" in lines[0], rep.stderr
    assert not out.exists()


def test_missing_chromium_raises_mmcerror():
    # in a fresh process: a kaleido server started by an earlier test would otherwise short-cut the check
    code = (
        "import app.report.pdf as R\n"
        "R.chromium_available = lambda: None\n"
        "try:\n    R._ensure_kaleido()\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.stdout.startswith("MMCError") and "apt-get install chromium" in r.stdout, r.stdout + r.stderr


# ---- slow: real browser --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_report(demo):
    t0 = time.perf_counter()
    data = R.build_report_pdf(
        demo["model"], demo["table"], demo["y"], base=demo["base"], label="outcome", data_name="fresh.csv"
    )  # computes the audit itself
    return data, time.perf_counter() - t0


@pytest.mark.slow
@needs_browser
@needs_poppler
def test_real_report_pages_carry_figures(real_report, tmp_path):
    from PIL import Image

    data, seconds = real_report
    assert data[:5] == b"%PDF-"
    n_pages = pdf_pages(data, tmp_path)
    assert 7 <= n_pages <= 12
    print(f"report took {seconds:.1f} s")  # timings belong in benchmarks
    pdf = tmp_path / "r.pdf"
    listing = subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True, check=True).stdout
    images = [ln.split() for ln in listing.splitlines()[2:] if ln.strip()]
    assert len(images) >= N_FIGURES
    fig_pages = sorted({int(r[0]) for r in images})
    # the embedded images are real exports: at least 900 px wide (scale 2)
    assert min(int(r[3]) for r in images) >= 900
    # every embedded figure has real content: ink and coloured marks, not a blank or failed export
    subprocess.run(["pdfimages", "-png", str(pdf), str(tmp_path / "img")], check=True)
    for path in sorted(tmp_path.glob("img-*.png")):
        im = Image.open(path).convert("RGB")
        im.thumbnail((450, 450))
        c = np.asarray(im, dtype=float)
        ink, chroma = float(np.mean(c.mean(axis=2) < 235)), float(np.mean(c.max(axis=2) - c.min(axis=2) > 40))
        assert ink > 0.03 and chroma > 0.003, f"{path.name}: ink {ink:.1%}, colour {chroma:.2%}"
    # and the rendered pages that carry them are not blank
    subprocess.run(["pdftoppm", "-r", "50", "-png", str(pdf), str(tmp_path / "p")], check=True)
    pngs = sorted(tmp_path.glob("p-*.png"))
    assert len(pngs) == n_pages
    for page in fig_pages:
        img = np.asarray(Image.open(pngs[page - 1]).convert("L"), dtype=float)
        ink = float(np.mean(img < 235))
        assert ink > 0.02, f"page {page}: only {ink:.1%} non-white pixels"


@pytest.mark.slow
@needs_browser
def test_cli_report_end_to_end(tmp_path, capsys):
    from app.cli.entry import main

    data = os.path.join(ROOT, "demo_datasets", "synthetic_scores.csv")
    model = tmp_path / "m.json"
    assert (
        main(
            [
                "fit",
                "--data",
                data,
                "--label",
                "outcome",
                "--pred",
                "base_pred",
                "--group-cols",
                "sex,race,age",
                "--max-order",
                "2",
                "--moments",
                "4",
                "--label-range",
                "0,100",
                "--out",
                str(model),
            ]
        )
        == 0
    )
    out = tmp_path / "report.pdf"
    code = main(
        [
            "report",
            "--model",
            str(model),
            "--data",
            data,
            "--label",
            "outcome",
            "--pred",
            "base_pred",
            "--delta",
            "0.2",
            "--gamma",
            "0.02",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert out.read_bytes()[:5] == b"%PDF-" and out.stat().st_size > 50_000


def test_robust_label_range_is_named_as_such(demo):
    """A range clipped at quantiles (the dashboard's 'robust' scaling) is not described as the observed min/max."""
    import copy

    from mmc_core import LabelScale

    model = copy.deepcopy(demo["model"])
    model.scale = LabelScale(model.scale.lo, model.scale.hi, "robust")
    model.info["label_note"] = "clipped at the 1% and 99% quantiles (12 rows clipped)"
    rows = dict((k, v) for k, v in RT.param_rows(model, demo["audit"], 0.1, 0.05, "outcome"))
    text = " ".join(str(v) for v in rows.values())
    assert "robust: clipped at quantiles" in text and "12 rows clipped" in text and "observed min/max" not in text
    # the dashboard's observed range is of all the table's rows (the mroz report said "of the fitting data")
    model.scale = LabelScale(model.scale.lo, model.scale.hi, "observed")
    model.info["label_note"] = "observed range of all 753 rows"
    rows = dict((k, v) for k, v in RT.param_rows(model, demo["audit"], 0.1, 0.05, "outcome"))
    text = " ".join(str(v) for v in rows.values())
    assert "observed range of all 753 rows (not declared)" in text and "fitting data" not in text


def test_characters_no_font_has_are_written_as_codes_never_dropped(monkeypatch):
    """Regression (found in a browser session): without a font for Chinese characters the PDF dropped them, so
    the groups "性别=女" and "性别=男" were both printed as "=". Such characters are now written as their
    codes ("[U+5973]", not a Python escape: issue 38); with a fallback font installed (fonts-droid-fallback,
    which scripts/test.sh installs) they are printed as they are."""
    from app.report import pdf_doc

    monkeypatch.setattr(pdf_doc, "FALLBACK_FONTS", ())
    pdf = pdf_doc._make_pdf("t")
    if not pdf.unicode:
        pytest.skip("DejaVu fonts not installed")
    assert pdf.text_("性别=女") == "[U+6027][U+522B]=[U+5973]" and pdf.text_("性别=男") == "[U+6027][U+522B]=[U+7537]"
    assert pdf.text_("Zürich ≥ 2σ") == "Zürich ≥ 2σ"  # DejaVu has these
    monkeypatch.undo()
    pdf = pdf_doc._make_pdf("t")
    if not any(os.path.isfile(p) for p in pdf_doc.FALLBACK_FONTS):
        pytest.skip("no fallback font for CJK installed (fonts-droid-fallback)")
    assert pdf.text_("性别=女") == "性别=女"
    if shutil.which("pdftotext") is None:
        return
    pdf.add_page()
    pdf.set_font(pdf.family, "", 10)
    pdf.multi_cell(0, 5, pdf.text_("性别=女 / 性别=男"))
    out = subprocess.run(["pdftotext", "-", "-"], input=bytes(pdf.output()), capture_output=True, check=True)
    assert "性别=女 / 性别=男" in out.stdout.decode()


@needs_poppler
def test_rows_of_a_category_no_group_lists_are_noted_in_the_pdf(demo, tmp_path, monkeypatch):
    """`mmc report` printed the note on categories new since the fit to stderr only; the PDF said nothing, so
    its reader could take those rows for corrected. The Data section now carries the same sentence."""
    stand_in_renderer(monkeypatch)
    new = pd.DataFrame(demo["table"]).copy()
    new.loc[new.index[:7], "race"] = "Z"
    data = R.build_report_pdf(demo["model"], new, demo["y"], base=demo["base"], label="outcome", data_name="n.csv")
    flat = " ".join(pdf_text(data, tmp_path).split())
    assert "7 row(s) have a value of group column 'race' that no group of the model lists (e.g. 'Z')" in flat
    clean = R.build_report_pdf(
        demo["model"], demo["table"], demo["y"], base=demo["base"], label="outcome", data_name="n.csv"
    )
    assert "no group of the model lists" not in " ".join(pdf_text(clean, tmp_path).split())


@needs_poppler
def test_a_table_too_small_to_test_anything_is_not_reported_as_clean(tmp_path, monkeypatch):
    """Found in an exploratory session: the PDF of a 5-row audit read "No defect found: 0 tests ...", which
    sounds like a clean result. With no test possible it now says so, in red."""
    from mmc_core import GroupSet, MomentMulticalibrator

    stand_in_renderer(monkeypatch)
    t = pd.DataFrame(demo_distribution().sample_table(40, np.random.default_rng(4)))
    est = MomentMulticalibrator(label_range=(0, 100)).fit(t, t["outcome"], GroupSet.from_columns(t, ["sex"]))
    new = pd.DataFrame(demo_distribution().sample_table(6, np.random.default_rng(5)))
    data = R.build_report_pdf(est.model_, new, new["outcome"].to_numpy(float), label="outcome", data_name="tiny.csv")
    flat = " ".join(pdf_text(data, tmp_path).split())
    from mmc_core.auditing.metrics import audit as run_audit

    assert R.findings_summary(run_audit(est.model_, new, new["outcome"].to_numpy(float)))["n_tests"] == 0
    assert "Nothing could be tested" in flat and "No defect found" not in flat


@needs_poppler
def test_a_kept_round_that_misses_the_given_alpha_is_said_and_drawn_at_the_alpha_used(tmp_path, monkeypatch):
    """Found reviewing the stated-alpha fix: with a given alpha and early stopping, the PDF stated the kept
    model's (larger) alpha, but its convergence figure drew that value as the threshold the fit stopped at and
    the bound 1/alpha^2 - 1 used it too. The figure and the bound use the alpha the descent used; the
    Thresholds row says both."""
    from app.services.specs import descent_thresholds

    stand_in_renderer(monkeypatch)
    t = demo_distribution().sample_table(8000, np.random.default_rng(0))
    # a given alpha is met unless the run is stopped or capped (issue 34): one round, capped, misses it
    est = MomentMulticalibrator(
        alpha=3e-4, beta=1e-4, label_range=(0, 100), base_recalibration="affine", max_rounds=1
    ).fit(t, t["outcome"], GroupSet.from_columns(t, ["sex", "race", "age"]), base_prediction=t["base_pred"])
    m = est.model_
    assert not m.info["run_converged"] and m.params.alpha > 3e-4  # the kept round misses the given alpha
    assert descent_thresholds(m)[0] == 3e-4
    drawn = []
    real = R.F.convergence_figure
    monkeypatch.setattr(R.F, "convergence_figure", lambda *a, **k: drawn.append(a) or real(*a, **k))
    data = R.build_report_pdf(m, t, np.asarray(t["outcome"], float), base=np.asarray(t["base_pred"], float))
    assert drawn and drawn[0][1] == 3e-4 and drawn[0][3] == pytest.approx(1 / 3e-4**2 - 1)
    flat = " ".join(pdf_text(data, tmp_path).split())
    assert f"α = {m.params.alpha:.3g} (means)" in flat  # the stated (achieved) value
    assert "used α = 0.0003" in flat and "achieves the values stated here (" in flat and "the run was capped" in flat
    assert f"1/α² − 1 = {1 / 3e-4**2 - 1:,.0f}" in flat


@pytest.mark.slow
@needs_browser
def test_a_figure_with_a_long_title_exports(tmp_path, monkeypatch):
    """kaleido 1.1 (the minimum version) names even an in-memory export after the figure's title and looks for
    that file in the working directory: a 300-character title with its subtitle failed with "File name too
    long" and the PDF export crashed (CI on the minimum versions). Such versions now get a path of our naming."""

    import plotly.graph_objects as go
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
    fig.update_layout(title="Variance disparities " + "with a very long subtitle " * 12, height=300)
    png = R.figure_to_png(fig)
    assert Image.open(io.BytesIO(png)).size[0] > 100
    assert list(tmp_path.iterdir()) == []  # nothing left in the working directory


def test_mean_only_reading_notes_promise_only_the_intervals_it_has():
    """A mean-only model with held-out rows has calibrated intervals but no guaranteed ones (they need the
    moments); the notes promised both (seen on a rendered page)."""
    from mmc_core.auditing.metrics import audit

    t = demo_distribution().sample_table(1500, np.random.default_rng(8))
    est = MomentMulticalibrator(n_moments=1, label_range=(0, 100)).fit(
        t, t["outcome"], GroupSet.from_columns(t, ["sex", "race"], 1)
    )
    cols = tuple(audit(est.model_, t, t["outcome"], n_boot=0).coverage.columns)
    assert cols and "guaranteed" not in cols
    _, promises, _ = RT.reading_notes(False, True, cols)
    assert "'calibrated' intervals aim at 1 − δ" in promises and "'guaranteed' intervals cover" not in promises
    _, promises, _ = RT.reading_notes(True, True, ("guaranteed", "calibrated"))
    assert "'guaranteed' intervals cover" in promises


def test_report_label_row_says_when_audited_labels_lie_outside_the_range():
    from types import SimpleNamespace

    from app.report.text import outside_note

    params = {"n": 500, "label_outside_range": 3, "label": {"lo": -20.0, "hi": 140.0, "source": "declared"}}
    text = outside_note(SimpleNamespace(params=params))
    assert "3 of the 500 audited labels lie outside the model's declared label range [-20; 140]" in text
    assert outside_note(SimpleNamespace(params={**params, "label_outside_range": 0})) == ""
    assert outside_note(None) == ""


def test_the_worst_group_coverage_is_read_only_where_the_heatmap_colours_it(demo):
    """A 601-row table's Results headline named an 11-row group (mass >= gamma on the test rows, but fewer than
    the audit's 30-row minimum, left uncoloured as "not tested" by the heatmap) as the worst-covered group, at
    81.8%. The headline and the PDF's coverage table now read the same groups the heatmaps colour."""
    from app.figures.figure_style import below_gamma, coverage_tested
    from app.report.tables import coverage_table
    from mmc_core.auditing.metrics import audit

    new = demo_distribution().sample_table(400, np.random.default_rng(3))
    res = audit(demo["model"], new, np.asarray(new["outcome"], float), base=np.asarray(new["base_pred"], float))
    names = res.coverage.index
    counts = res.by_group["count"].reindex(names).to_numpy(float)
    min_n = res.params["min_group_count"]
    big = ~np.asarray(below_gamma(res, names), dtype=bool)
    small_big = big & (counts < min_n)
    assert small_big.any()  # the case: groups of mass >= gamma with fewer test rows than the audit tests
    tested = coverage_tested(res, names)
    assert not tested[small_big].any() and tested[big & (counts >= min_n)].all()
    cal = res.coverage["calibrated"].astype(float)
    worst_tested = cal[tested].idxmin()
    from app.figures.charts import METHOD_LABELS

    row = coverage_table(res, 0.1).set_index("method").loc[METHOD_LABELS["calibrated"]]
    assert str(row["worst group (mass ≥ γ)"]).startswith(worst_tested[:20])

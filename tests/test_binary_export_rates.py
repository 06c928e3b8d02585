"""A classifier audit's exports and rate intervals (a user's audit of loanapp's `approve`):

- predictions.csv's ``mmc_decision`` is at the decision threshold chosen on the Results page, the one the PDF's
  rates are at (it was at the audit's 0.5 while the PDF said 0.95), and the Export page says which;
- predictions.csv writes its numbers at full precision, so the exported model re-predicts the exported
  ``mmc_mean`` from the exported ``mmc_base`` (6 significant digits moved rows near bucket edges by up to 0.23);
- the rates' intervals are Wilson score intervals from the groups' counts, never a point for a small group
  (the percentile bootstrap gave "black=1 TPR 1.000 [1.000, 1.000]" on 50 rows);
- no empty column in the Export page's CSV section of a classifier (there is no interval picker).
"""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd
import pytest

from app.figures import binary as FB
from app.services.io import CSV_EXACT
from mmc_core import GroupSet, MomentMulticalibrator

# ---------------------------------------------------------------------------------------------------
# the interval function


def test_wilson_interval_known_values_and_statsmodels():
    lo, hi = FB.wilson_interval([0, 50, 8, 0], [16, 50, 20, 0])
    z2 = 1.959963984540054**2
    assert lo[0] == 0.0 and hi[0] == pytest.approx(z2 / (16 + z2), rel=1e-12)  # 0 of 16: [0, 0.194]
    assert hi[1] == 1.0 and lo[1] == pytest.approx(50 / (50 + z2), rel=1e-12)  # 50 of 50: [0.929, 1]
    assert np.isnan(lo[3]) and np.isnan(hi[3])  # no rows: no interval
    sm = pytest.importorskip("statsmodels.stats.proportion")
    for level in (0.95, 0.9):
        k, n = np.array([0, 1, 8, 15, 50]), np.array([16, 16, 20, 16, 50])
        lo, hi = FB.wilson_interval(k, n, level)
        ref_lo, ref_hi = sm.proportion_confint(k, n, alpha=1 - level, method="wilson")
        np.testing.assert_allclose(lo, ref_lo, atol=1e-12)
        np.testing.assert_allclose(hi, ref_hi, atol=1e-12)
    lo90, hi90 = FB.wilson_interval(8, 20, 0.9)
    lo95, hi95 = FB.wilson_interval(8, 20, 0.95)
    assert lo95 < lo90 < 0.4 < hi90 < hi95
    with pytest.raises(ValueError, match="level"):
        FB.wilson_interval(1, 2, 95)


def _small_group_data(n=900, seed=5):
    """A table with a 16-row group whose decisions are perfect (TPR 1, FPR 0) and a 6-row group without
    positives (TPR undefined)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"race": rng.choice(["A", "B"], n), "sex": rng.choice(["F", "M"], n)})
    df.loc[:15, "race"] = "C"
    df.loc[16:21, "race"] = "D"
    p = np.where(df["race"] == "B", 0.6, 0.35)
    y = (rng.random(n) < p).astype(float)
    y[16:22] = 0.0
    score = np.clip(p + rng.normal(0, 0.2, n), 0.01, 0.99)
    score[:16] = np.where(y[:16] == 1, 0.9, 0.1)  # group C: every positive decided positive, no negative
    base = np.clip(score + rng.normal(0, 0.1, n), 0.01, 0.99)
    return df, y, score, base


def test_rate_intervals_are_wilson_from_the_true_counts_and_never_a_point():
    from mmc_core.auditing.binary import classifier_audit, threshold_rates

    df, y, score, base = _small_group_data()
    gs = GroupSet.from_columns(df, ["race", "sex"], 1)
    thr = 0.5
    rates, _ = threshold_rates(score, y, gs, df, thr, base=base, n_boot=200, seed=1)
    # the bootstrap collapses for the small group: the reason for the change
    assert rates.loc["race=C", "tpr"] == 1.0 and rates.loc["race=C", "tpr_lo"] == 1.0
    assert rates.loc["race=C", "fpr"] == 0.0 and rates.loc["race=C", "fpr_hi"] == 0.0
    share = classifier_audit(score, y, gs, df, base=base, threshold=thr, n_boot=0).by_group["base_rate"]
    masks = {
        "all": np.ones(len(df), bool),
        **{f"race={v}": (df["race"] == v).to_numpy() for v in "ABCD"},
        **{f"sex={v}": (df["sex"] == v).to_numpy() for v in "FM"},
    }
    assert set(masks) == set(rates.index)
    for suffix, s in (("", score), ("_base", base)):
        d = s >= thr
        expected = {
            g: {
                "selection_rate": (d[m].sum(), m.sum()),
                "tpr": ((d & (y == 1))[m].sum(), (y == 1)[m].sum()),
                "fpr": ((d & (y == 0))[m].sum(), (y == 0)[m].sum()),
                "precision": ((d & (y == 1))[m].sum(), d[m].sum()),
            }
            for g, m in masks.items()
        }
        # from the audit's shares of positives, and from the rates alone (where they determine them)
        for got in (FB.rate_counts(rates, share, suffix), FB.rate_counts(rates, None, suffix)):
            for k, (hits, total) in got.items():
                for i, g in enumerate(rates.index):
                    if np.isnan(total[i]):
                        continue  # the rates alone do not say (e.g. nothing decided positive)
                    assert (hits[i], total[i]) == expected[g][k], (suffix, k, g)
        assert not np.isnan(FB.rate_counts(rates, share, suffix)["tpr"][1]).any()
    w = FB.wilson_rates(rates, share)
    assert w.attrs["rate_intervals"] == "wilson" and FB.wilson_rates(w) is w
    pos_c = (y[:16] == 1).sum()
    lo, hi = FB.wilson_interval(pos_c, pos_c)
    assert w.loc["race=C", "tpr_lo"] == pytest.approx(float(lo)) and w.loc["race=C", "tpr_hi"] == 1.0
    assert w.loc["race=C", "fpr_lo"] == 0.0 and w.loc["race=C", "fpr_hi"] > 0.15
    assert np.isnan(w.loc["race=D", "tpr_lo"])  # no positives: no TPR, no interval
    for col in ("selection_rate", "tpr", "fpr", "precision"):
        for suffix in ("", "_base"):
            v, a, b = (w[f"{col}{suffix}{e}"].astype(float) for e in ("", "_lo", "_hi"))
            ok = v.notna()
            assert ((a[ok] <= v[ok] + 1e-12) & (v[ok] <= b[ok] + 1e-12) & (a[ok] < b[ok])).all(), (col, suffix)
    text = FB.classifier_rate_table(rates, base_rate=share).set_index("group")
    assert text.loc["race=C", "true positive rate"] != "1.000 [1.000; 1.000]"
    assert text.loc["race=C", "false positive rate"].startswith("0.000 [0.000; 0.")
    assert "[0.000; 0.000]" not in " ".join(text.astype(str).to_numpy().ravel())
    # the calibration table's positive share is a proportion too
    bg = classifier_audit(score, y, gs, df, base=base, threshold=thr, n_boot=50).by_group
    cal = FB.classifier_calibration_table(bg).set_index("group")
    assert cal.loc["race=D", "positive share"] != "0.000 [0.000; 0.000]"
    assert cal.loc["race=D", "positive share"].startswith("0.000 [0.000; 0.")
    fig = FB.rate_figure(rates, thr, base_rate=share)
    assert "Wilson" in fig.layout.title.text or "Wilson" in str(fig.layout)


def test_pdf_says_how_the_rate_intervals_are_computed(tmp_path, monkeypatch):
    import shutil
    import subprocess

    from app.report import pdf as R
    from tests.test_report import stand_in_renderer

    if not shutil.which("pdftotext"):
        pytest.skip("poppler-utils missing")
    stand_in_renderer(monkeypatch)
    df, y, score, base = _small_group_data(1400, 7)
    gs = GroupSet.from_columns(df, ["race", "sex"], 1)
    est = MomentMulticalibrator(n_buckets=10).fit(df.iloc[400:], y[400:], gs, base_prediction=base[400:])
    pdf = R.build_report_pdf(est.model_, df.iloc[:400], y[:400], base=base[:400], data_name="t.csv", threshold=0.5)
    path = tmp_path / "r.pdf"
    path.write_bytes(pdf)
    text = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout
    flat = " ".join(text.split())
    assert "Wilson score 95% intervals" in flat and "Intervals of the rates: Wilson score" in flat
    assert "percentile bootstrap" in flat
    assert "[1.000; 1.000]" not in flat and "[0.000; 0.000]" not in flat


# ---------------------------------------------------------------------------------------------------
# predictions.csv: full precision, decisions at a given threshold


@pytest.fixture(scope="module")
def loan_run():
    from tests.test_binary_wiring import loanapp_run

    return loanapp_run(max_order=2, n_boot=10)


def test_predictions_csv_round_trips_and_the_model_repredicts_it_exactly(loan_run):
    from app.services.io import csv_bytes, read_table_bytes
    from app.services.pipeline import predictions_table
    from mmc_core import FittedModel

    df, run = loan_run
    out = predictions_table(df, run, threshold=0.95)
    back = read_table_bytes(csv_bytes(out), "predictions.csv")
    np.testing.assert_array_equal(back["mmc_base"].to_numpy(), run.base)  # bit for bit
    np.testing.assert_array_equal(back["mmc_mean"].to_numpy(), out["mmc_mean"].to_numpy())
    # what `mmc predict --model model.json --pred mmc_base` computes from the exported files
    model = FittedModel.from_json(run.model.to_json())
    again = model.predict(back[list(df.columns)], back["mmc_base"].to_numpy())["mean"]
    np.testing.assert_array_equal(again, back["mmc_mean"].to_numpy())
    assert (back["mmc_decision"] == (back["mmc_mean"] >= 0.95).astype(int)).all()
    assert (predictions_table(df, run)["mmc_decision"] == (out["mmc_mean"] >= 0.5).astype(int)).all()  # default
    assert back["mmc_decision"].mean() < predictions_table(df, run)["mmc_decision"].mean()


# ---------------------------------------------------------------------------------------------------
# the dashboard: Results slider -> Export page (CSV and PDF at the same threshold)


def test_export_csv_decisions_are_at_the_results_page_threshold(monkeypatch):
    import app.report.pdf
    from app.services.pipeline import classifier_rates
    from tests.apptest_helpers import new_session as _new
    from tests.apptest_helpers import switch as _page
    from tests.apptest_helpers import wait_job as _wait_job

    built = []

    def fake_pdf(*a, **k):
        built.append(k.get("rates"))
        return b"%PDF-1.4 stand-in report"

    monkeypatch.setattr(app.report.pdf, "build_report_pdf", fake_pdf)
    monkeypatch.setattr(app.report.pdf, "chromium_available", lambda: "/usr/bin/chromium")
    at = _new()
    at.selectbox(key="demo_name").set_value("loanapp").run()
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait_job(at)
    ss = at.session_state
    run = ss["run"]
    assert run.model.task == "binary" and run.settings.threshold == 0.5

    # Results: at 0.1 a small group's TPR is 1 (the bootstrap said 1.000 [1.000; 1.000]); Wilson is not a point
    _page(at, "results")
    at.slider(key="res_threshold").set_value(0.1).run()
    assert not at.exception
    table = next(t.value for t in at.table if "true positive rate" in t.value.columns)
    tpr = table.loc["black=1", "true positive rate"]
    assert tpr.startswith("1.000 [") and tpr != "1.000 [1.000; 1.000]", tpr
    lo = float(re.search(r"\[([0-9.]+);", tpr).group(1))
    assert 0.85 < lo < 0.99  # 35 or so positives, all decided positive
    assert any("Wilson score" in c.value for c in at.caption)
    assert any("Wilson score" in m.value for m in at.markdown)

    at.slider(key="res_threshold").set_value(0.95).run()
    _page(at, "export")
    csv = pd.read_csv(io.BytesIO(ss["export_csv"]), **CSV_EXACT)
    assert (csv["mmc_decision"] == (csv["mmc_mean"] >= 0.95).astype(int)).all()
    np.testing.assert_array_equal(csv["mmc_base"].to_numpy(), run.base)  # full precision
    frame = ss["data"]["df"]
    rates, _ = classifier_rates(frame, run, 0.95)
    test = csv["mmc_split"] == "test"
    assert csv.loc[test, "mmc_decision"].mean() == pytest.approx(rates.loc["all", "selection_rate"], abs=1e-12)
    caption = " ".join(c.value for c in at.caption)
    assert "`mmc_decision` (1 when `mmc_mean` ≥ 0.95, the decision threshold set on the Results page" in caption
    assert "the audit ran at 0.5" in caption and "`--threshold 0.95`" in caption
    # the PDF is at the same threshold
    at.button(key="pdf_build").click().run()
    assert built and built[-1][0] == 0.95
    # no empty column where a regression's interval picker would be (the PDF's download slot is the only one)
    assert sum(1 for c in at.columns if not c.children) <= 1

    # another threshold: the CSV is rebuilt at it
    _page(at, "results")
    at.slider(key="res_threshold").set_value(0.3).run()
    _page(at, "export")
    csv = pd.read_csv(io.BytesIO(ss["export_csv"]), **CSV_EXACT)
    assert (csv["mmc_decision"] == (csv["mmc_mean"] >= 0.3).astype(int)).all()
    assert any("`mmc_mean` ≥ 0.3," in c.value for c in at.caption)

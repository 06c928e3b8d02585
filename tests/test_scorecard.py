"""The audit's group scorecard (mmc_core.auditing.scorecard): every listed group in it, and per-group power checked by
simulation. The 'model' predicts the TRUE mean and variance of the demo distribution (its intervals truly cover
90% of every row); a defect planted on race=D at the size the scorecard states as detectable (80% power at the
audit's error control) must be found in 70-90% of audits, one at half that size far less often."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.auditing import audit_findings, metrics
from mmc_core.auditing.scorecard import detectable_z, scorecard
from mmc_core.common.synthetic import demo_distribution
from mmc_core.paper.buckets import mean_grid
from mmc_core.paper.moments import LabelScale

DIST = dataclasses.replace(demo_distribution(), base_bias={})
UNIT = LabelScale(0.0, 1.0)
N = 2000


def _audit(seed, shift=0.0, var_ratio=1.0, cover_drop=0.0):
    """(findings, scorecard) of an audit of the truth with a defect on race=D: the predicted mean off by ``shift``,
    the observed / predicted variance ``var_ratio``, the interval coverage ``cover_drop`` below 90%."""
    rng = np.random.default_rng(seed)
    tab, y = DIST.sample(N, rng)
    memb = GroupSet.from_columns(pd.DataFrame(tab), ["sex", "race", "age"], 2).evaluate(pd.DataFrame(tab))
    d = np.asarray(tab["race"]) == "D"
    mu = DIST.true_mean(tab) + shift * d
    v = np.where(d, DIST.true_moment(tab, 2) / var_ratio, DIST.true_moment(tab, 2))
    inside = (rng.random(N) < np.where(d, 0.9 - cover_drop, 0.9)).astype(float)
    tests: list = []
    names = list(memb.names)
    found, n_tests = audit_findings.group_findings(
        memb.sums(), names, UNIT, mu, y, v, mean_grid(5), inside, "calibrated", 0.9, 30, "holm", 0.05, 0.1,
        collect=tests,
    )  # fmt: skip
    card = scorecard(tests, names, memb.sums().group_sums(), n_tests, 0.05, 30)
    return found, card


def _found(found, kinds) -> bool:
    return any(f["group"] == "race=D" and f["kind"] in kinds for f in found)


def _stated(column: str) -> float:
    """The scorecard's stated detectable size for race=D (~205 rows), averaged over 20 audits of the truth: one
    audit's value moves with its sample's residual spread and group size (sd ~10% at this size)."""
    return float(np.mean([_audit(500 + j)[1].loc["race=D", column] for j in range(20)]))


def _rate(n_audits, kinds, **planted) -> float:
    return float(np.mean([_found(_audit(1000 + s, **planted)[0], kinds) for s in range(n_audits)]))


def test_every_listed_group_is_in_the_scorecard_sorted_by_harm():
    rng = np.random.default_rng(0)
    df = pd.DataFrame(DIST.sample_table(3000, rng, truth=False))
    gs = GroupSet.from_columns(df, ["sex", "race", "age"], 2)
    est = MomentMulticalibrator(n_moments=2, label_range=(0, 100)).fit(df, df["outcome"], gs)
    test = pd.DataFrame(DIST.sample_table(1500, rng, truth=False))
    test.loc[test["race"] == "D", "outcome"] += 8.0  # a defect the audit finds
    res = metrics.audit(est.model_, test, test["outcome"].to_numpy())
    card = res.scorecard
    names = list(est.model_.groups.names)
    assert sorted(card.index) == sorted(names)  # every listed group, small or not
    assert card.index[0].startswith("race=D") and "mean" in card.iloc[0]["findings"]
    small = card[~card["tested"]]
    assert (small["n"] < 30).all() and small["mean_error_detectable"].isna().all()
    tested = card[card["tested"]]
    assert tested["mean_error_detectable"].notna().all() and (tested["mean_error_detectable"] > 0).all()
    # bigger groups can detect smaller errors (same residual spread up to noise)
    big, little = tested["n"].idxmax(), tested["n"].idxmin()
    assert tested.loc[big, "mean_error_detectable"] < tested.loc[little, "mean_error_detectable"]
    assert "scorecard" in res.to_json() and len(res.to_json()["scorecard"]["data"]) == len(card)


def test_detectable_z_is_holms_first_step_plus_the_power_quantile():
    assert detectable_z(1, 0.05) == pytest.approx(1.959964 + 0.841621, rel=1e-5)
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    assert detectable_z(200, 0.05) == pytest.approx(z(1 - 0.05 / 400) + z(0.8), rel=1e-9)
    assert np.isnan(detectable_z(0, 0.05))


@pytest.mark.slow
def test_a_mean_error_at_the_stated_detectable_size_is_found_80_percent_of_the_time():
    d_star = _stated("mean_error_detectable")  # the mean test's se does not depend on the shift
    full, half = _rate(200, ("mean",), shift=-d_star), _rate(200, ("mean",), shift=-d_star / 2)
    assert 0.70 <= full <= 0.90 and half <= 0.30, (full, half)


@pytest.mark.slow
def test_a_coverage_shortfall_at_the_stated_detectable_size_is_found_80_percent_of_the_time():
    drop = 0.9 - _stated("coverage_detectable")
    full, half = _rate(200, ("coverage",), cover_drop=drop), _rate(200, ("coverage",), cover_drop=drop / 2)
    assert 0.70 <= full <= 0.90 and half <= 0.30, (full, half)


@pytest.mark.slow
def test_a_spread_misstatement_at_the_stated_detectable_size_is_found_80_percent_of_the_time():
    ratio = _stated("spread_detectable_high")
    full = _rate(200, ("variance",), var_ratio=ratio)
    half = _rate(200, ("variance",), var_ratio=1.1 + (ratio - 1.1) / 2)  # half the distance beyond the band
    assert 0.70 <= full <= 0.90 and half <= 0.30, (ratio, full, half)


def test_the_scorecard_is_on_the_pdfs_first_page_and_on_results(tmp_path, monkeypatch):
    import shutil
    import subprocess

    from app.report import pdf as R
    from app.report.tables import scorecard_table
    from tests.apptest_helpers import new_session as _new
    from tests.apptest_helpers import switch as _page
    from tests.test_report import stand_in_renderer

    rng = np.random.default_rng(3)
    df = pd.DataFrame(DIST.sample_table(3000, rng, truth=False))
    gs = GroupSet.from_columns(df, ["sex", "race", "age"], 2)
    est = MomentMulticalibrator(n_moments=2, label_range=(0, 100)).fit(df, df["outcome"], gs)
    res = metrics.audit(est.model_, df, df["outcome"].to_numpy())
    table = scorecard_table(res)
    assert len(table) == len(gs) and list(table["group"])[0] == res.scorecard.index[0]
    if shutil.which("pdftotext"):
        stand_in_renderer(monkeypatch)
        pdf = R.build_report_pdf(est.model_, df, df["outcome"].to_numpy(), audit=res, label="outcome")
        path = tmp_path / "r.pdf"
        path.write_bytes(pdf)
        first = subprocess.run(["pdftotext", "-l", "1", str(path), "-"], capture_output=True, text=True).stdout
        assert f"Group scorecard (the first 10 of {len(gs)} groups" in " ".join(first.split())
    at = _page(_new(), "results")
    frames = [d.value for d in at.dataframe]
    assert any("detectable" in f.columns and len(f) == len(at.session_state["run"].model.groups.names) for f in frames)


def test_classifier_charts_show_flagged_minority_groups_before_large_ones():
    """Issue 35: the classifier charts showed 'all' and the largest groups only, so the group the four-fifths rule
    flags (a minority) never appeared. Groups with findings or flags now come first."""
    from app.figures import binary as FB
    from app.report.tables import priority_groups

    df = pd.read_csv("demo_datasets/loanapp.csv").dropna(subset=["male"])
    cols = ["black", "hispan", "male", "married", "self", "dep", "unit"]
    gs = GroupSet.from_columns(df, cols, 2)
    est = MomentMulticalibrator(n_moments=1, task="binary").fit(df, df["approve"], gs)
    res = metrics.audit(est.model_, df, df["approve"].to_numpy(), threshold=0.8)
    assert res.scorecard is not None and len(res.scorecard) == len(gs)
    first = priority_groups(res)
    flagged = [g for fl in res.classifier.disparities["four_fifths_flagged"] for g in (fl or [])]
    assert flagged and set(flagged) <= set(first)
    shown = set(FB.rate_figure(res.by_group, 0.8, top=6, first=first).layout.yaxis.ticktext)
    largest = set(FB.rate_figure(res.by_group, 0.8, top=6).layout.yaxis.ticktext)
    minority = next(g for g in flagged)
    assert any(minority in str(s) for s in shown)
    assert not any(minority in str(s) for s in largest)  # the size order alone left it out


def test_the_classifier_scorecard_is_on_results_and_the_pdf(tmp_path, monkeypatch):
    """Issue 35, found in a browser on a table new to the tests (cps91, inlf): the classifier Results page and PDF
    had no scorecard, so a group was listed only when a chart had room for it. Both now show it: every group, the
    probability's observed - predicted with its interval, no spread or coverage columns (a 0/1 label has none)."""
    import shutil
    import subprocess

    from app.report import pdf as R
    from app.report.tables import scorecard_table
    from tests.apptest_helpers import run_uploaded, switch
    from tests.test_report import stand_in_renderer

    rng = np.random.default_rng(7)
    n = 1500
    df = pd.DataFrame({"x": rng.normal(size=n), "grp": rng.choice(["a", "b", "c"], n, p=[0.6, 0.33, 0.07])})
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-df["x"] - 0.8 * (df["grp"] == "c")))).astype(int)
    gs = GroupSet.from_columns(df, ["grp"], 1)
    est = MomentMulticalibrator(n_moments=1, task="binary").fit(df, df["y"], gs)
    res = metrics.audit(est.model_, df, df["y"].to_numpy())
    table = scorecard_table(res)
    assert sorted(table["group"]) == sorted(gs.names)
    assert "observed − predicted probability [95% CI]" in table and "coverage [95% CI]" not in table
    if shutil.which("pdftotext"):
        stand_in_renderer(monkeypatch)
        path = tmp_path / "c.pdf"
        path.write_bytes(R.build_report_pdf(est.model_, df, df["y"].to_numpy(), audit=res, label="y"))
        first = subprocess.run(["pdftotext", "-l", "1", str(path), "-"], capture_output=True, text=True).stdout
        assert f"Group scorecard (the first {len(gs)} of {len(gs)} groups" in " ".join(first.split())
    at = switch(run_uploaded(df, "clf.csv", "y"), "results")
    run = at.session_state["run"]
    frames = [d.value for d in at.dataframe]
    assert any("detectable" in f.columns and len(f) == len(run.model.groups.names) for f in frames)


def test_confidence_intervals_in_tables_separate_their_ends_with_a_semicolon():
    """Issue 35: "-3,520 [-4,300, -2,700]" (the scorecard) used the comma both inside the numbers and between the
    ends; every interval's ends are now separated as figure_style.interval_text does: "[-4,300; -2,700]"."""
    from types import SimpleNamespace

    from app.figures.binary import _ci_text
    from app.report.tables import scorecard_table

    _, card = _audit(1, shift=0.05)
    table = scorecard_table(SimpleNamespace(scorecard=card, params={}, by_group=pd.DataFrame(index=card.index)))
    cells = [c for c in table.astype(str).to_numpy().ravel() if "[" in c and "%" not in c]
    assert cells and all(";" in c and ", " not in c for c in cells)
    assert _ci_text(0.5, 0.25, 0.75) == "0.500 [0.250; 0.750]"

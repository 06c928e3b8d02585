"""Findings (mmc_core.auditing.findings): the distributions against scipy, the adjustment against statsmodels, the error
control under an exact null (the model IS the truth), power against planted defects, and the audit's
handling of failures, tiny groups and zero variances."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mmc_core import GroupSet
from mmc_core.auditing import audit_findings, metrics
from mmc_core.auditing import findings as fnd
from mmc_core.common.errors import MMCError
from mmc_core.common.synthetic import demo_distribution
from mmc_core.paper.buckets import mean_grid
from mmc_core.paper.moments import LabelScale

UNIT_SCALE = LabelScale(0.0, 1.0)  # the label on [0, 1]: unit values are label values


# ---- numbers -----------------------------------------------------------------------------------------------
def test_binom_cdf_matches_scipy():
    rng = np.random.default_rng(0)
    n = np.concatenate([rng.integers(1, 60, 200), rng.integers(60, 5000, 200), [10**6, 3 * 10**6, 1, 2]])
    k = np.floor(rng.random(n.size) * (n + 1)).astype(int)
    k[-4:] = [899_000, 2_699_000, 0, 2]
    for p in (0.9, 0.5, 0.05):
        kk = np.where(rng.random(n.size) < 0.5, k, np.round(n * p - 2 * np.sqrt(n * p * (1 - p)))).astype(int)
        # rtol: the log-prefactor is a difference of lgamma values ~1e7 at n ~ 1e6, exact to ~1e-16 relative each
        np.testing.assert_allclose(fnd.binom_cdf(kk, n, p), stats.binom.cdf(kk, n, p), rtol=1e-7, atol=1e-300)
    assert fnd.binom_cdf(-1, 5, 0.9) == 0 and fnd.binom_cdf(5, 5, 0.9) == 1


def test_t_and_normal_tails_match_scipy():
    t = np.array([0.0, 0.5, 2.0, 3.7, 6.0, 12.0, np.inf])
    for df in (1, 5, 29, 300, 2e4, 5e6):
        np.testing.assert_allclose(fnd.t_sf2(t, df), 2 * stats.t.sf(t, df), rtol=1e-7, atol=1e-300)
    np.testing.assert_allclose(fnd.t_sf2(t[:-1], 3e7), 2 * stats.t.sf(t[:-1], 3e7), rtol=1e-3)
    np.testing.assert_allclose(fnd.norm_sf(t), stats.norm.sf(t), rtol=1e-12)


def test_t_and_normal_quantiles_match_scipy():
    for df in (1, 4, 29, 300, 2e4):
        for p in (0.5, 0.05, 1e-4, 1e-9):
            # t_sf2 is exact to ~1e-7 relative in the tail probability (test above), far less in the quantile
            assert fnd.t_isf2(p, df)[0] == pytest.approx(stats.t.isf(p / 2, df), rel=1e-8)
    np.testing.assert_allclose(fnd.t_isf2(1e-3, [5, 50]), stats.t.isf(5e-4, [5, 50]), rtol=1e-8)
    for p in (0.5, 0.05, 1e-6):
        assert fnd.normal_isf2(p) == pytest.approx(stats.norm.isf(p / 2), rel=1e-9)
    assert fnd.fcr_miss(3, 600, 0.05) == pytest.approx(3 * 0.05 / 600) and fnd.fcr_miss(0, 600, 0.05) == 0.05


def test_hall_interval_inverts_the_skewness_corrected_test():
    """The mean-finding interval is the set of means the test itself does not reject at the critical value: at
    each endpoint the test of (x - endpoint) sits exactly at it (a symmetric mean -+ q se around a skewed
    sample's mean did not: a finding "under-predicts ... 95% CI -0.00164 to 0.0311")."""
    rng = np.random.default_rng(3)
    for n, q in ((40, 2.5), (200, 3.4), (5000, 4.0)):
        x = rng.lognormal(0.0, 1.0, n) - 1.3
        mean, se, p, g = fnd._t_test(x.sum(), (x * x).sum(), n, (x**3).sum(), 30, with_skew=True)
        assert g != 0
        lo, hi = fnd.hall_interval(float(mean), float(se), n, float(g), q)
        assert lo < mean < hi and (mean - lo) != pytest.approx(hi - mean)  # asymmetric, as the data
        for end in (lo, hi):
            d = x - end
            _, _, p_end = fnd._t_test(d.sum(), (d * d).sum(), n, (d**3).sum(), 30)
            assert p_end == pytest.approx(fnd.t_sf2(q, n - 1), rel=1e-6)
    assert fnd.hall_interval(1.0, 0.5, 50, 0.0, 2.0) == (0.0, 2.0)  # the plain t: mean -+ q se
    assert fnd.percent(0.95) == "95%" and fnd.percent(0.975) == "97.5%" and fnd.percent(0.999) == "99.9%"


def test_mean_and_rate_findings_intervals_exclude_zero():
    """A finding's interval inverts its own test, so a group reported as over- or under-predicted never has 0
    inside its interval: with skewed (log-normal) residuals (Hall's test) and for a classifier (the score test
    with the predictions' own variance; Wilson's interval used the binomial variance at the observed rate and
    held 0 in every such finding)."""
    n_found = {"skewed": 0, "binary": 0}
    for seed in range(10):
        rng = np.random.default_rng(seed)
        g = rng.integers(0, 10, 4000)
        memb = GroupSet.from_columns(pd.DataFrame({"g": g.astype(str)}), ["g"], 1).evaluate(
            pd.DataFrame({"g": g.astype(str)})
        )
        mu = np.full(4000, 0.3)
        y = 0.3 + 0.08 * (rng.lognormal(0.0, 1.0, 4000) - np.exp(0.5)) + 0.02 * (g == 0)
        found, _ = audit_findings.group_findings(
            memb.sums(), list(memb.names), UNIT_SCALE, mu, y, None, mean_grid(1), None, None, 0.9, 30, "holm",
            0.05, 0.0,
        )  # fmt: skip
        mu = np.where(rng.random(4000) < 0.5, 0.02, 0.98)
        yb = (rng.random(4000) < np.where(g == 0, np.where(mu < 0.5, 0.09, 0.98), mu)).astype(float)
        found_b, _ = audit_findings.group_findings(
            memb.sums(), list(memb.names), UNIT_SCALE, mu, yb, None, mean_grid(1), None, None, 0.9, 30, "holm",
            0.05, 0.0, True,
        )  # fmt: skip
        for kind, fs in (("skewed", found), ("binary", found_b)):
            for f in fs:
                lo, hi = f["interval"]
                assert lo * hi > 0 and lo < f["estimate"] < hi, f["text"]
                if kind == "binary":  # a rate minus the mean prediction
                    assert -f["predicted"] <= lo and hi <= 1 - f["predicted"], f["text"]
                n_found[kind] += 1
    assert n_found["skewed"] >= 5 and n_found["binary"] >= 5, n_found


@pytest.mark.parametrize("ours,theirs", [("holm", "holm"), ("bh", "fdr_bh")])
def test_adjustment_matches_statsmodels(ours, theirs):
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(1)
    for m in (1, 2, 7, 250):
        p = np.concatenate([rng.random(m // 2 + 1) ** 4, rng.random(m - m // 2 - 1)])
        p[rng.integers(0, m)] = p[0]  # ties
        np.testing.assert_allclose(fnd.adjust_pvalues(p, ours), multipletests(p, method=theirs)[1], rtol=1e-12)
    with pytest.raises(MMCError, match="error control"):
        fnd.adjust_pvalues(np.array([0.1]), "bonferroni")
    with pytest.raises(MMCError, match="p-values"):
        fnd.adjust_pvalues(np.array([0.1, np.nan]))


def test_wilson_interval_contains_the_estimate():
    lo, hi = fnd.wilson_interval(np.array([0, 27, 30]), np.array([30, 30, 30]))
    assert lo[0] == 0 and hi[2] == pytest.approx(1.0) and lo[1] < 0.9 < hi[1]


# ---- error control and power on data with known truth --------------------------------------------------------


DIST = dataclasses.replace(demo_distribution(), base_bias={})


def _exact_findings(
    seed, n, shift=None, var_factor=None, cover_drop=None, control="holm", var_tol=0.0, everywhere=False
):
    """Findings for a 'model' that predicts the TRUE mean and variance, with 90% intervals that truly cover
    90% of every row (Bernoulli(0.9) indicators); optional planted defects on race=D."""
    rng = np.random.default_rng(seed)
    tab, y = DIST.sample(n, rng)
    memb = GroupSet.from_columns(pd.DataFrame(tab), ["sex", "race", "age"], 2).evaluate(pd.DataFrame(tab))
    mu, v = DIST.true_mean(tab), DIST.true_moment(tab, 2)
    d = np.ones(n, dtype=bool) if everywhere else np.asarray(tab["race"]) == "D"
    p_in = np.full(n, 0.9)
    if shift is not None:
        mu = mu + shift * d
    if var_factor is not None:
        v = np.where(d, v * var_factor, v)
    if cover_drop is not None:
        p_in = np.where(d, 0.9 - cover_drop, p_in)
    inside = (rng.random(n) < p_in).astype(float)
    found, n_tests = audit_findings.group_findings(
        memb.sums(),
        list(memb.names),
        UNIT_SCALE,
        mu,
        y,
        v,
        mean_grid(5),
        inside,
        "calibrated",
        0.9,
        30,
        control,
        0.05,
        var_tol,
    )
    return found, n_tests


@pytest.mark.slow
def test_family_wise_error_under_the_exact_null():
    """Holm at 0.05 over ~180 tests per audit: if every test is valid, at most 5% of audits of a correct model
    report anything. 200 audits: the count of audits with a finding is Binomial(200, <= 0.05), whose 99.9%
    quantile is 21. A plain z (or t) test of the squared residuals is ~7x too liberal in the far tail and gave
    16-18 such audits here, mostly variance findings; the variance tests alone must stay near their share."""
    n_with, var_found = 0, 0
    for seed in range(200):
        found, n_tests = _exact_findings(seed, 1500)
        n_with += bool(found)
        var_found += sum(f["kind"] == "variance" for f in found)
    assert n_tests > 150
    assert n_with <= int(stats.binom.ppf(0.999, 200, 0.05))
    # ~36 of the ~185 tests are variance tests: their share of a 5% family-wise error is ~1% of audits, i.e.
    # about 2 in 200; the 99.9% Poisson quantile of 2 is 8.
    assert var_found <= int(stats.poisson.ppf(0.999, 200 * 0.05 * 36 / n_tests))


@pytest.mark.slow
@pytest.mark.parametrize("factor", [1 / 1.1, 1.1])
def test_variance_tolerance_holds_its_level_at_the_boundary(factor):
    """With a tolerance of 0.1 the null is 'the variance is right within 1.1x'. At its boundary -- every group's
    predicted variance exactly 1.1x too small (or too large) -- each variance test must still hold its level:
    over 100 audits at most a binomial 99.9% quantile of 5% may report a variance finding (Holm at 5% over all
    ~185 tests bounds the family-wise error, so the variance share is at most that)."""
    n_with = 0
    for seed in range(100):
        found, _ = _exact_findings(1000 + seed, 1500, var_factor=factor, var_tol=0.1, everywhere=True)
        n_with += any(f["kind"] == "variance" for f in found)
    assert n_with <= int(stats.binom.ppf(0.999, 100, 0.05))


def test_variance_tolerance_separates_material_from_immaterial_errors():
    """A 5% variance error on every row is real but immaterial: at n = 60k the plain test (tolerance 0) finds it
    on the big groups, the default margin (1.1x) does not; a 1.6x error is found either way, and its record
    carries the tolerance."""
    plain, _ = _exact_findings(7, 60000, var_factor=1 / 1.05, everywhere=True)
    assert sum(f["kind"] == "variance" for f in plain) >= 3
    material, _ = _exact_findings(7, 60000, var_factor=1 / 1.05, everywhere=True, var_tol=0.1)
    assert not any(f["kind"] == "variance" for f in material)
    big, _ = _exact_findings(7, 6000, var_factor=1 / 1.6, var_tol=0.1)
    var_d = [f for f in big if f["kind"] == "variance" and f["group"] == "race=D"]
    assert var_d and var_d[0]["tolerance"] == 0.1 and "by more than 1.1x" in var_d[0]["text"]


@pytest.mark.slow
def test_null_world_fit_then_audit_on_fresh_rows():
    """Issue 9's null world: the base IS the true mean and only the spread differs by group; the default fit on
    4000 rows, the default audit on 4000 fresh rows. A trustworthy tool reports nothing in at least 9 of 10
    seeds (benchmarks/null_world.py prints the same for more seeds; 5/40 on seeds 100-139 and 1/40 on seeds
    200-239 with the max interval rule, none of them a coverage finding)."""
    from mmc_core import MomentMulticalibrator

    with_findings = 0
    for seed in range(100, 110):
        rng = np.random.default_rng(seed)
        tr = pd.DataFrame(DIST.sample_table(4000, rng, truth=False))
        te = pd.DataFrame(DIST.sample_table(4000, rng, truth=False))
        est = MomentMulticalibrator(n_moments=2, label_range=(0, 100)).fit(
            tr, tr["outcome"], GroupSet.from_columns(tr, ["sex", "race", "age"], 2), base_prediction=tr["base_pred"]
        )
        r = metrics.audit(est.model_, te, te["outcome"], base=te["base_pred"], n_boot=0)
        assert r.findings_status == "ok"
        with_findings += bool(r.findings)
    assert with_findings <= 1


def test_no_findings_for_a_correct_model_in_most_seeds():
    """Holm at 5% per audit: the count of 20 audits with a finding is at most Binomial(20, 0.05); P(>= 4) =
    1.6%. (10 seeds with at most 1 failed with P = 8.6% for a valid test, and did when the mean tests gained
    their skewness correction: seeds 0 and 4; the slow test above checks the rate over 200 audits.)"""
    hits = sum(bool(_exact_findings(seed, 3000)[0]) for seed in range(20))
    assert hits <= 3


def _race_age_world(seed: int, lo: float, hi: float, n: int = 2000):
    """A demo-distribution sample and an effect of random sign and size in [lo, hi] on each race x age cell
    (per row): (rng, table, label, memberships, effect)."""
    rng = np.random.default_rng(seed)
    tab, y = DIST.sample(n, rng)
    df = pd.DataFrame(tab)
    memb = GroupSet.from_columns(df, ["sex", "race", "age"], 2).evaluate(df)
    cell = (df["race"].astype(str) + "/" + df["age"].astype(str)).to_numpy()
    keys = np.unique(cell)
    r2 = np.random.default_rng(1000 + seed)
    effect = (r2.choice([-1.0, 1.0], keys.size) * r2.uniform(lo, hi, keys.size))[np.searchsorted(keys, cell)]
    return rng, tab, y, memb, effect


@pytest.mark.slow
@pytest.mark.parametrize("control", ["holm", "bh"])
def test_the_findings_intervals_cover_the_truth_after_selection(control):
    """A finding is selected because its estimate is far from 0, so its estimate overshoots the truth and a
    plain 95% interval around it misses more often than 5% (here the share of findings whose interval missed
    was 0.28 on average with the plain intervals, 0.01 with these). The intervals at 1 - R 0.05 / m (Benjamini
    and Yekutieli's false-coverage-rate intervals) keep the expected share of findings whose interval misses at
    most 0.05. World: the model is the truth except a shift of 0.005-0.015 (random sign) on each race x age
    cell, near what 2,000 rows can detect; the truth of a finding is its rows' mean shift. 100 audits: the mean
    share must stay below 0.05 plus 3 standard errors of that mean."""
    fcp, stated = [], []
    for seed in range(100):
        _, tab, y, memb, shift = _race_age_world(seed, 0.005, 0.015)
        mu = DIST.true_mean(tab) - shift
        found, n_tests = audit_findings.group_findings(
            memb.sums(), list(memb.names), UNIT_SCALE, mu, y, DIST.true_moment(tab, 2), mean_grid(5), None,
            None, 0.9, 30, control, 0.05, 0.1,
        )  # fmt: skip
        dense, names = memb.to_dense().astype(bool), list(memb.names)
        missed = []
        for f in found:
            assert f["kind"] in ("mean", "calibration", "variance")
            if f["kind"] == "variance":
                continue
            stated.append((f.get("interval_miss"), len(found) * 0.05 / n_tests, f["text"]))
            rows = dense[:, names.index(f["group"])].copy()
            if f["kind"] == "calibration":
                rows &= (mu >= f["bucket"][0]) & (mu < f["bucket"][1])
            lo, hi = f["interval"]
            missed.append(not lo <= shift[rows].mean() <= hi)
        if missed:
            fcp.append(np.mean(missed))
    fcp = np.asarray(fcp)
    assert len(fcp) >= 50  # the shifts are found in most audits
    assert fcp.mean() <= 0.05 + 3 * fcp.std(ddof=1) / np.sqrt(len(fcp)), fcp
    for miss, expected, text in stated:  # each interval's own miss probability, and the sentence says so
        assert miss == pytest.approx(expected) and "selection-adjusted 95% CI" in text, text


@pytest.mark.slow
def test_variance_findings_intervals_cover_the_truth_with_skewed_residuals():
    """Variance findings' selection-adjusted intervals on skewed residuals (centred exponential noise with each
    row's true variance; the predicted variance off by a factor exp(+-0.15 to 0.45) on each race x age cell,
    truth: the mean true variance / the mean predicted variance over the finding's rows). A group's own sample
    kurtosis understates the tail when no large residual was drawn, exactly when its variance looks low, so
    with the group's own standard deviation in the test (and the interval that inverts it) 7 of 26 intervals
    missed their truth (0.27) and 4 of 100 audits with the variance right carried a variance finding. The test's
    variance is now floored by the kurtosis pooled over the membership signatures (findings.ratio_stat): 1 of 19
    missed. Bound: 0.05 plus 3 binomial standard errors of the share missed."""
    missed = []
    for seed in range(100):
        rng, tab, _, memb, log_factor = _race_age_world(seed, 0.15, 0.45)
        mu, true_var = DIST.true_mean(tab), DIST.true_moment(tab, 2)
        y = mu + np.sqrt(true_var) * (rng.exponential(1.0, mu.size) - 1.0)
        var_pred = true_var / np.exp(log_factor)
        found, _ = audit_findings.group_findings(
            memb.sums(), list(memb.names), UNIT_SCALE, mu, y, var_pred, mean_grid(5), None, None, 0.9, 30,
            "holm", 0.05, 0.1,
        )  # fmt: skip
        dense, names = memb.to_dense().astype(bool), list(memb.names)
        for f in found:
            if f["kind"] == "variance":
                rows = dense[:, names.index(f["group"])]
                truth = true_var[rows].mean() / var_pred[rows].mean()
                missed.append(not f["interval"][0] <= truth <= f["interval"][1])
    assert len(missed) >= 15, len(missed)
    assert np.mean(missed) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(missed)), (np.mean(missed), len(missed))


def test_a_variance_findings_sentence_says_when_its_interval_reaches_the_tolerance():
    """A finding's interval inverts its own test (tests/test_findings_agree.py), so the audit's variance findings
    are clear of the 1.1x band; a record whose interval is not (made elsewhere, or by the audit before issue 34,
    whose interval allowed for the tails pooled over the groups while the test used the group's own) is said to
    be no finding by its own interval, never passed off as "by more than 1.1x"."""
    rec = {
        "kind": "variance", "group": "race=A", "n": 300, "estimate": 0.62, "tolerance": 0.1, "predicted": 10.0,
        "observed": 6.2, "p_adjusted": 0.01, "adjustment": "Holm", "interval_miss": 0.001, "interval_fcr": 0.05,
    }  # fmt: skip
    inside = fnd.describe({**rec, "interval": [0.40, 0.95]})
    clear = fnd.describe({**rec, "interval": [0.40, 0.85]})
    assert "reaches within 1.1x: not a finding by its own interval" in inside and "by more than" not in inside
    assert "by more than 1.1x;" in clear and "reaches within" not in clear
    up = fnd.describe({**rec, "estimate": 1.6, "interval": [1.05, 2.4]})
    assert "understates" in up and "reaches within 1.1x" in up
    wide = fnd.describe({**rec, "estimate": 0.41, "interval": [0.14, 1.30]})
    assert "reaches within 1.1x" in wide and "is uncertain" not in wide


def test_planted_defects_are_found():
    found, _ = _exact_findings(0, 6000, shift=-0.03)  # the model predicts 3 points too low on race=D
    mean_d = [f for f in found if f["kind"] == "mean" and f["group"] == "race=D"]
    assert mean_d and mean_d[0]["estimate"] > 0 and "under-predicts" in mean_d[0]["text"]
    lo, hi = mean_d[0]["interval"]
    assert lo < 0.03 < hi  # the CI covers the planted shift
    found, _ = _exact_findings(0, 6000, var_factor=0.5)  # the model claims half the true variance on race=D
    var_d = [f for f in found if f["kind"] == "variance" and f["group"] == "race=D"]
    assert var_d and var_d[0]["interval"][0] < 2.0 < var_d[0]["interval"][1] and "understates" in var_d[0]["text"]
    found, _ = _exact_findings(0, 6000, cover_drop=0.1)  # 80% instead of 90% on race=D
    cov_d = [f for f in found if f["kind"] == "coverage" and f["group"] == "race=D"]
    assert cov_d and cov_d[0]["interval"][0] < 0.8 < cov_d[0]["interval"][1]
    assert all(f["p_adjusted"] < 0.05 and f["adjustment"] == "holm" for f in mean_d + var_d + cov_d)


def test_a_mean_error_alone_is_not_also_a_variance_finding():
    """The model's mean is 0.08 too low on race=D (its variance is right): that is a mean finding, not a
    variance one. Squared residuals around the prediction carry the bias (sd 0.139, bias 0.08: 1.33x the
    variance), and the uncentered test reported "understates its uncertainty" on race=D in seeds 0 and 1;
    around each group's own mean residual the variance is the true one."""
    for seed in range(3):
        found, _ = _exact_findings(seed, 6000, shift=-0.08, var_tol=metrics.VARIANCE_TOLERANCE)
        assert any(f["kind"] == "mean" and f["group"] == "race=D" for f in found)
        assert not [f["group"] for f in found if f["kind"] == "variance"], seed


def test_a_variance_finding_names_the_mean_errors_that_spread_it():
    """race=D's mean off by 1.4 SD (every variance right): groups that hold D's rows among others have a real
    residual spread beyond their variance, and said "understates its uncertainty" with no word of the cause.
    Each such finding now names the mean findings on part of its rows."""
    found, _ = _exact_findings(0, 6000, shift=-0.2, var_tol=metrics.VARIANCE_TOLERANCE)
    var = [f for f in found if f["kind"] == "variance"]
    assert var and all(f["estimate"] > 1 for f in var)
    for f in var:
        assert "race=D" in f["mean_findings_within"], f["group"]
        assert "Part of this spread may be the mean error found on race=D" in f["text"]
    assert "mean_findings_within" not in next(f for f in found if f["kind"] == "mean" and f["group"] == "race=D")


def test_a_cell_holding_the_whole_group_is_not_tested_twice():
    """Every prediction in one mean bucket: each group's only cell is the group itself, so its calibration test
    is the mean test again. Both were reported (same n, estimate and p: one finding twice, 4 of the PDF's 8
    key findings) and the family counted each test twice."""
    rng = np.random.default_rng(3)
    n = 4000
    tab = pd.DataFrame({"sex": rng.choice(["F", "M"], n), "race": rng.choice(["A", "B", "D"], n)})
    memb = GroupSet.from_columns(tab, ["sex", "race"], 2).evaluate(tab)
    y = 0.5 + 0.05 * rng.standard_normal(n)
    mu = np.where(tab["race"] == "D", 0.48, 0.5)  # D under-predicted by 0.02; every prediction in [0.4, 0.6)
    found, n_tests = audit_findings.group_findings(
        memb.sums(),
        list(memb.names),
        UNIT_SCALE,
        mu,
        y,
        None,
        mean_grid(5),
        None,
        "calibrated",
        0.9,
        30,
        "holm",
        0.05,
    )
    assert n_tests == memb.n_groups  # the mean tests only
    assert any(f["kind"] == "mean" and f["group"] == "race=D" for f in found)
    assert not [f for f in found if f["kind"] == "calibration"]


def test_small_groups_are_never_tested():
    rng = np.random.default_rng(3)
    tab, y = DIST.sample(3000, rng)
    df = pd.DataFrame(tab)
    df.loc[:9, "race"] = "Z"  # a 10-row group
    memb = GroupSet.from_columns(df, ["race"], 1).evaluate(df)
    mu = DIST.true_mean(tab) + 0.5 * (df["race"] == "Z").to_numpy()  # wildly wrong on the tiny group
    v = DIST.true_moment(tab, 2)
    found, _ = audit_findings.group_findings(
        memb.sums(), list(memb.names), UNIT_SCALE, mu, y, v, mean_grid(5), None, None, 0.9, 30, "holm", 0.05
    )
    assert not any(f["group"] == "race=Z" for f in found)
    found, _ = audit_findings.group_findings(
        memb.sums(), list(memb.names), UNIT_SCALE, mu, y, v, mean_grid(5), None, None, 0.9, 5, "holm", 0.05
    )
    assert any(f["group"] == "race=Z" and f["kind"] == "mean" for f in found)


# ---- the audit -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fitted():
    from mmc_core import MomentMulticalibrator

    df = pd.DataFrame(demo_distribution().sample_table(5000, np.random.default_rng(5), truth=False))
    tr, te = df.iloc[:3000], df.iloc[3000:].reset_index(drop=True)
    est = MomentMulticalibrator(label_range=(0, 100), n_moments=2).fit(
        tr, tr["outcome"], GroupSet.from_columns(tr, ["sex", "race", "age"], 2), base_prediction=tr["base_pred"]
    )
    return est, te


def test_audit_findings_are_records(fitted):
    est, te = fitted
    r = metrics.audit(est.model_, te, te["outcome"], base=te["base_pred"], n_boot=50)
    assert r.findings_status == "ok" and r.params["n_tests"] > 100 and r.params["error_control"] == "holm"
    keys = {
        "kind",
        "group",
        "n",
        "method",
        "predicted",
        "observed",
        "estimate",
        "interval",
        "p_value",
        "p_adjusted",
        "adjustment",
        "text",
    }
    for f in r.findings:
        assert keys <= set(f) and f["n"] >= 30 and f["p_adjusted"] < 0.05 and f["p_value"] <= f["p_adjusted"]
    # race D is the noisiest group of the truth: a descriptive disparity, not a defect
    d = [x for x in r.disparities if x["group"] == "race=D"]
    assert d and d[0]["estimate"] > 1 and d[0]["interval"][0] > 1 and "less certain" in d[0]["text"]
    j = json.loads(json.dumps(r.to_json(), allow_nan=False))
    assert j["findings_status"] == "ok" and len(j["findings"]) == len(r.findings)
    assert len(j["disparities"]) == len(r.disparities)
    bh = metrics.audit(est.model_, te, te["outcome"], base=te["base_pred"], n_boot=0, error_control="bh")
    assert len(bh.findings) >= len(
        metrics.audit(est.model_, te, te["outcome"], base=te["base_pred"], n_boot=0).findings
    )  # BH rejects a superset of Holm's


def test_audit_parameters_are_validated(fitted):
    est, te = fitted
    for kw, msg in [
        ({"min_group_count": 1}, "min_group_count"),
        ({"error_control": "fdr"}, "error_control"),
        ({"findings_level": 0}, "findings_level"),
    ]:
        with pytest.raises(MMCError, match=msg):
            metrics.audit(est.model_, te, te["outcome"], base=te["base_pred"], n_boot=0, **kw)


def test_zero_predicted_variance_does_not_crash(fitted):
    """A model whose variance prediction is 0 on a group (it happened at realistic label scales) is audited:
    the variance findings say so and the disparities skip the undefined ratio."""
    est, te = fitted
    model = dataclasses.replace(est.model_, init_moments={2: 0.0}, log=[], round_ends=[])
    model.extras = dict(est.model_.extras)
    r = metrics.audit(model, te, te["outcome"], base=te["base_pred"], n_boot=20, methods=("split-conformal",))
    assert r.findings_status == "ok"
    assert any(f["kind"] == "variance" and f["group"] == "all" for f in r.findings)
    json.dumps(r.to_json(), allow_nan=False)


def test_a_failure_is_reported_as_a_failure(fitted, monkeypatch):
    est, te = fitted

    def broken(*a, **k):
        raise FloatingPointError("injected")

    monkeypatch.setattr(fnd, "select_findings", broken)
    r = metrics.audit(est.model_, te, te["outcome"], base=te["base_pred"], n_boot=0)
    assert r.findings == [] and r.findings_status.startswith("failed: FloatingPointError")
    from app.report.pdf import findings_summary

    s = findings_summary(r)
    assert s["failed"] and not s["shown"]


def test_disparities_skip_intersections_repeating_a_parent():
    names = ["all", "race=D", "race=D & age=55+", "race=C & sex=F", "race=C", "tiny"]
    cnt = np.array([1000, 160, 40, 90, 150, 10])
    ratio = np.array([1.0, 2.9, 3.3, 3.0, 1.3, 9.0])
    lo, hi = ratio * 0.9, ratio * 1.1
    d = fnd.variance_disparities(names, cnt, ratio, lo, hi, 30)
    assert [x["group"] for x in d] == ["race=C & sex=F", "race=D", "race=C"]  # no repeat, no tiny group
    ratio[1] = 0.0  # a zero predicted variance is skipped, not a crash
    assert "race=D" not in [x["group"] for x in fnd.variance_disparities(names, cnt, ratio, lo, hi, 30)]


def test_disparity_text_states_the_ratio_at_the_precision_of_its_interval():
    """A ratio of 1.344 with a 95% CI of 1.336-1.352 read "1.3 times ... (95% CI 1.34-1.34)": the printed ratio
    now carries the interval's two decimals (and lies inside the printed interval)."""
    import re

    names = ["all", "black=1", "black=0"]
    d = fnd.variance_disparities(
        names,
        np.array([30000, 3077, 26923]),
        np.array([1.0, 1.344, 0.962]),
        np.array([1.0, 1.336, 0.958]),
        np.array([1.0, 1.352, 0.966]),
        30,
    )
    for x in d:
        shown, lo, hi = (float(v) for v in re.search(r"is ([\d.]+) times.*CI ([\d.]+)-([\d.]+)", x["text"]).groups())
        assert lo <= shown <= hi, x["text"]
    assert "0.96 times (about 1/1.04 of)" in d[1]["text"]
    # an interval narrower than the second decimal (a large group) gets the digits that show its width
    d = fnd.variance_disparities(
        names,
        np.array([30000, 3077, 26923]),
        np.array([1.0, 1.3425, 0.962]),
        np.array([1.0, 1.3401, 0.958]),
        np.array([1.0, 1.3449, 0.966]),
        30,
    )
    assert "is 1.343 times the overall level (95% CI 1.340-1.345)" in d[0]["text"], d[0]["text"]


# ---- 0/1 outcomes and skewed residuals (an exploratory review found false findings in both) --------------------
def test_binary_tests_hold_their_level_for_rare_and_common_outcomes():
    """The score test of a rate (variance from the predictions, continuity-corrected) on groups whose every
    prediction is right: 20,000 groups per setting, rejections at 0.01 at most the 99.9% binomial quantile of
    Binomial(20,000, 0.01) (= 246). The t test of the residuals it replaces rejected every group of the rare
    setting that happened to hold no positive (18% of them): p ~ 1e-45."""
    rng = np.random.default_rng(0)
    bar = stats.binom.ppf(0.999, 20_000, 0.01)
    for n, p in ((138, 0.0124), (200, 0.3), (40, 0.05)):
        pi = np.clip(rng.normal(p, p / 4, (20_000, n)), 1e-4, 1 - 1e-4)
        y = (rng.random(pi.shape) < pi).astype(float)
        recs = fnd.binary_tests(
            "mean", list(range(20_000)), np.full(20_000, n), y.sum(1), pi.sum(1), (pi * (1 - pi)).sum(1), 30
        )
        pv = np.array([r["p_value"] for r in recs])
        assert np.sum(pv < 0.01) <= bar, (n, p, np.sum(pv < 0.01))
    # a 138-row group without a positive at p = 0.0124 each: the exact chance is (1 - 0.0124)^138 = 0.18
    (rec,) = fnd.binary_tests("mean", ["g"], [138], [0.0], [138 * 0.0124], [138 * 0.0124 * 0.9876], 30)
    assert rec["p_value"] > 0.2 and rec["interval"][0] < 0 < rec["interval"][1]
    # predictions of exactly 0 (a model file without the probability floor): 40 positives are certain evidence
    (rec,) = fnd.binary_tests("mean", ["g"], [200], [40.0], [0.0], [0.0], 30)
    assert rec["p_value"] == 0.0
    (rec,) = fnd.binary_tests("mean", ["g"], [200], [0.0], [0.0], [0.0], 30)
    assert rec["p_value"] == 1.0
    # and a real shift is found: rate 0.15 against a predicted 0.10 in 1,000 rows (z = 4.7)
    (rec,) = fnd.binary_tests("mean", ["g"], [1000], [150.0], [100.0], [90.0], 30)
    assert rec["p_value"] < 1e-4 and rec["statistic_mean"] > 0


def test_a_classifier_audit_does_not_flag_a_group_without_positives():
    """A 'model' that predicts the true probability; on the audit rows one 138-row group has no positive (as
    happens 18% of the time at a rate of 1.2%). The t test of y - p reported it with adjusted p = 8.7e-46."""
    rng = np.random.default_rng(1)
    n = 4000
    g = rng.choice(["A", "B", "C"], n)
    p = np.where(g == "C", 0.0124, 0.3)
    c_rows = np.flatnonzero(g == "C")[:138]
    g[(g == "C")] = "B"
    g[c_rows] = "C"
    p = np.where(g == "C", 0.0124, 0.3)
    y = (rng.random(n) < p).astype(float)
    y[c_rows] = 0.0
    memb = GroupSet.from_columns(pd.DataFrame({"g": g}), ["g"]).evaluate(pd.DataFrame({"g": g}))
    args = (memb.sums(), list(memb.names), UNIT_SCALE, p, y, None, mean_grid(5), None, None, 0.0, 30, "holm", 0.05)
    found, _ = audit_findings.group_findings(*args, binary=True)
    assert found == [], [f["text"] for f in found]


def test_mean_tests_correct_for_skewed_residuals(monkeypatch):
    """Log-normal residuals (skewness 6) of a correct mean, 100 rows a group: the plain t test rejects 13x as
    often as its level at 0.001 (the far tail is where Holm decides); with Hall's correction, as the audit's
    mean and calibration tests use it, 2.6x (measured over 200,000 groups). 100,000 groups here: the bar of
    4x is 7 standard errors above 2.6x and far below 13x. The audit's mean test is this corrected test."""
    rng = np.random.default_rng(2)
    x = rng.lognormal(0, 1, (100_000, 100)) - np.exp(0.5)
    s1, s2, s3, cnt = x.sum(1), (x * x).sum(1), (x**3).sum(1), np.full(100_000, 100.0)
    plain = np.mean(fnd._t_test(s1, s2, cnt)[2] < 1e-3) / 1e-3
    hall = np.mean(fnd._t_test(s1, s2, cnt, s3)[2] < 1e-3) / 1e-3
    assert plain > 8 and hall < 4, (plain, hall)
    # the audit uses it: its mean-test p-values are the corrected ones (every test kept, not only findings)
    g = np.repeat(["A", "B"], 50)
    r = x[0]
    memb = GroupSet.from_columns(pd.DataFrame({"g": g}), ["g"]).evaluate(pd.DataFrame({"g": g}))
    seen = []
    monkeypatch.setattr(fnd, "select_findings", lambda tests, *a: seen.extend(tests) or [])
    audit_findings.group_findings(
        memb.sums(),
        list(memb.names),
        UNIT_SCALE,
        np.zeros(100),
        r,
        None,
        mean_grid(5),
        None,
        None,
        0.0,
        1,
        "holm",
        0.05,
    )
    by = {t["group"]: t for t in seen if t["kind"] == "mean"}
    for name, m in (("g=A", g == "A"), ("g=B", g == "B")):
        want = fnd._t_test(r[m].sum(), (r[m] ** 2).sum(), m.sum(), (r[m] ** 3).sum(), fnd.HALL_MIN_ROWS)[2]
        assert by[name]["p_value"] == pytest.approx(float(want))


def _lognormal(rng, n: int, s: float) -> np.ndarray:
    """Standardized log-normal draws (mean 0, variance 1; sigma ``s``: kurtosis 111 at 1, 10,000 at 1.5)."""
    return (np.exp(s * rng.normal(size=n)) - np.exp(s * s / 2)) / np.sqrt((np.exp(s * s) - 1) * np.exp(s * s))


def _tailless_group_world(seed: int, shift_sd: float, n: int = 2000, k: int = 40):
    """Right-skewed residuals (standardized log-normal, sigma 1) of a model whose mean and variance (1) are right,
    except that one group's ``k`` rows drew none of the tail: their residuals are the noise's values below its 90th
    percentile (a sample that missed the rare large ones, as 1.5% of 40-row samples do; moved by ``shift_sd``
    standard deviations)."""
    rng = np.random.default_rng(seed)
    e = _lognormal(rng, n, 1.0)
    g = np.where(np.arange(n) < k, "Q", rng.choice(["A", "B", "C"], n))
    low = e[e < np.quantile(e, 0.9)][:k]
    e[:k] = low + shift_sd
    tab = pd.DataFrame({"g": g})
    memb = GroupSet.from_columns(tab, ["g"]).evaluate(tab)
    mu = np.full(n, 0.5)
    return memb, mu, mu + 0.05 * e, np.full(n, 0.05**2)


def test_a_small_group_that_missed_a_right_tail_is_not_a_mean_finding():
    """40 rows of right-skewed residuals that missed the tail (six draws): their mean is -0.2 to -0.35 sd and
    their own sd a third of the noise's, so each group's own t statistic put it at adjusted p 0.0004-0.04, a
    false "over-predicts" on a group whose true error is 0 (on null worlds from real tables such small groups
    carried most false mean findings). The mean test's variance is floored at the model's variance of the group
    less two standard errors of a Gaussian sample variance (``MEAN_FLOOR_Z``; 0.55x at 40 rows): at most one
    of the six is a finding, and the same groups 1 sd off all are."""
    flagged = {0.0: 0, 1.0: 0}
    for seed in range(6):
        for shift in flagged:
            memb, mu, y, v = _tailless_group_world(seed, shift)
            r = (y - mu)[:40] / 0.05 - shift
            assert -0.35 < r.mean() < -0.2 and r.std() < 0.4  # the world is what the test says
            args = (memb.sums(), list(memb.names), UNIT_SCALE, mu, y, v, mean_grid(5), None, None, 0.0, 30)
            found, _ = audit_findings.group_findings(*args, "holm", 0.05)
            flagged[shift] += any(f["group"] == "g=Q" and f["kind"] == "mean" for f in found)
    assert flagged == {0.0: flagged[0.0], 1.0: 6} and flagged[0.0] <= 1, flagged


@pytest.mark.slow
def test_mean_findings_hold_their_level_with_right_skewed_residuals():
    """200 audits of a model whose mean and variance are right, residuals standardized log-normal (sigma 1,
    skewness 6), 1,500 rows, three columns and their pairs (~100 mean and calibration tests each, Holm at 5%):
    audits with a mean or calibration finding at most 5%, one-sided 95% upper bound at most 8% (15 of 200 =
    7.5% with each group's own variance; 1 of 200 with the floor)."""
    hits = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        n, s = 1500, 1.0
        tab = pd.DataFrame({"a": rng.integers(0, 4, n), "b": rng.integers(0, 3, n), "c": rng.integers(0, 5, n)})
        memb = GroupSet.from_columns(tab, ["a", "b", "c"], 2).evaluate(tab)
        e = _lognormal(rng, n, s)
        mu = np.full(n, 0.5)
        found, _ = audit_findings.group_findings(
            memb.sums(), list(memb.names), UNIT_SCALE, mu, mu + 0.05 * e, np.full(n, 0.05**2), mean_grid(5),
            None, None, 0.9, 30, "holm", 0.05, 0.1,
        )  # fmt: skip
        hits += any(f["kind"] in ("mean", "calibration") for f in found)
    upper = float(stats.beta.ppf(0.95, hits + 1, 200 - hits))
    assert hits <= 10 and upper <= 0.08, (hits, upper)


def test_no_disparity_from_rounding_of_equal_variances():
    """A model stopped before its first update predicts one variance for every row: the ratios are 1 up to
    rounding and their bootstrap intervals collapse, and the audit listed "1.0000 times (95% CI 1.0000-1.0000):
    the model is more certain about this group"."""
    names = ["all", "race=A", "race=B"]
    cnt = np.array([2000, 1000, 1000])
    ratio = np.array([1.0, 1 - 3e-12, 1.3])
    lo, hi = np.array([1.0, 1 - 5e-12, 1.2]), np.array([1.0, 1 - 1e-12, 1.4])
    d = fnd.variance_disparities(names, cnt, ratio, lo, hi, 30)
    assert [x["group"] for x in d] == ["race=B"]


@pytest.mark.slow
def test_variance_interval_covers_the_true_ratio_with_heavy_tails():
    """The variance finding's 95% interval for observed / predicted, on residuals with the TRUE variance (ratio
    1), groups of 30-150 rows. The delta-method interval is asymptotic: with Student-t(5) noise the symmetric
    one covered 1 in 83.6% of these 1,344 group intervals, the log-scale one (a variance ratio is right-skewed)
    in 87.0%, in the form of Bonett's interval (centred at log(c R), widened by c = n / (n - z)) 89.3%, and
    85.6% with skewed (centred exponential) noise: a group's own sample kurtosis is low exactly when its
    sample variance is. With the standard error floored by the kurtosis pooled over the groups
    (audit_findings._pooled_sd): t5 95.6%, exponential 93.7%, normal 95.6% (93.9% before). Each must reach
    93%: the 95% target less about 3 standard errors of a coverage over 1,344 intervals (0.6 points each)."""
    cover = {"t5": [], "normal": [], "exponential": []}
    for rep in range(150):
        rng = np.random.default_rng(rep)
        n = 600
        tab = pd.DataFrame({"g1": rng.choice(list("ABCD"), n, p=[0.4, 0.3, 0.2, 0.1]), "g2": rng.choice(["X", "Y"], n)})
        sd = tab["g1"].map({"A": 1.0, "B": 2.0, "C": 0.5, "D": 3.0}).to_numpy() * np.where(tab["g2"] == "X", 1.0, 1.5)
        memb = GroupSet.from_columns(tab, ["g1", "g2"], 2).evaluate(tab)
        pairs = memb.sums()
        noise = (
            ("t5", rng.standard_t(5, n) / np.sqrt(5 / 3)),
            ("normal", rng.standard_normal(n)),
            ("exponential", rng.exponential(1.0, n) - 1.0),
        )
        for kind, e in noise:
            tests = audit_findings._variance_tests(
                pairs, list(memb.names), pairs.group_sums(), sd * e, sd**2, UNIT_SCALE, 30, 0.0
            )
            cover[kind] += [t["interval"][0] <= 1 <= t["interval"][1] for t in tests if t["n"] < 150]
    assert len(cover["t5"]) > 1000
    for kind, hits in cover.items():
        assert np.mean(hits) >= 0.93, (kind, np.mean(hits))


def test_a_p_value_beyond_what_the_data_can_vouch_for_is_stated_as_a_bound():
    """A 31-row group of a zero-inflated count (affairs) read "adjusted p = 2.2e-37": Hall's skewness-corrected
    statistic grows with the cube of the standardized mean, far past the tail any few dozen rows can support.
    The sentence states a bound below ``P_FLOOR``; the record keeps the computed value (for sorting, and for
    whoever wants it)."""
    rec = {
        "kind": "calibration",
        "group": "kids=1",
        "n": 31,
        "interval": [0.5, 2.0],
        "bucket": [0.0, 1.0],
        "estimate": 1.2,
        "observed": 2.0,
        "predicted": 0.8,
        "p_adjusted": 2.2e-37,
        "adjustment": "holm",
    }
    assert "adjusted p < 0.000001, holm" in fnd.describe(rec) and "e-37" not in fnd.describe(rec)
    assert "adjusted p = 0.0033, holm" in fnd.describe({**rec, "p_adjusted": 0.0033})
    assert fnd.p_words(fnd.P_FLOOR / 2) == "p < 0.000001" and fnd.p_words(0.04) == "p = 0.04"
    # no scientific notation below the floor either (issue 35): "p = 7.6e-06" is written out
    assert fnd.p_words(7.6e-6) == "p = 0.0000076" and fnd.p_words(3.02e-5) == "p = 0.00003"
    assert fnd.p_words(1e-4) == "p = 0.0001" and fnd.p_words(0.5) == "p = 0.5" and fnd.p_words(1.0) == "p = 1"


def test_a_calibration_findings_bucket_separates_its_ends_with_a_semicolon():
    """Issue 35: "with predictions in [16,400, 119,000)" read as three numbers; the ends are now separated by ";"
    as every interval shown (app.figures.figure_style.interval_text)."""
    rec = {
        "kind": "calibration", "group": "union=1", "n": 88, "interval": [500.0, 2000.0],
        "bucket": [16400.0, 119000.0], "estimate": 1200.0, "observed": 30000.0, "predicted": 28800.0,
        "p_adjusted": 0.001, "adjustment": "holm",
    }  # fmt: skip
    assert "group union=1 with predictions in [16,400; 119,000) (n=88)" in fnd.describe(rec)


def test_the_pooled_kurtosis_is_the_noises_own_whatever_the_groups_misstatement():
    """The variance test's floor uses the kurtosis of the standardized residual pooled over membership
    signatures (audit_findings._pooled_kurtosis). Known truth: normal noise has kurtosis 3, centred exponential
    noise 9. The predicted variance is off by its own factor exp(+-0.45) on every 3-way cell: pooled over the
    groups (each group's ratio divided out) the kurtosis takes in that spread of factors (the floor then cost
    most of the tests' power); over the signatures it does not. Tolerances (the row variances vary little, so
    about 20,000 rows count): the sample kurtosis of normal draws has standard error sqrt(24 / n) = 0.035, 0.15
    is 4 of them; the centred exponential's has sqrt((mu8 - mu4^2) / n) = sqrt((14833 - 81) / n) = 0.86, so
    9 +- 3 (3.5 of them)."""
    rng = np.random.default_rng(5)
    n = 20_000
    tab = pd.DataFrame({c: rng.choice(list("PQR"), n) for c in ("a", "b", "c")})
    memb = GroupSet.from_columns(tab, ["a", "b", "c"], 2).evaluate(tab)
    cell = (tab["a"] + tab["b"] + tab["c"]).to_numpy()
    keys = np.unique(cell)
    factor = np.exp(rng.choice([-0.45, 0.45], keys.size))[np.searchsorted(keys, cell)]
    sd = rng.uniform(0.8, 1.25, n)
    pairs = memb.sums()
    cnt = pairs.group_sums()
    for noise, truth, tol in (("normal", 3.0, 0.15), ("exponential", 9.0, 3.0)):
        e = rng.standard_normal(n) if noise == "normal" else rng.exponential(1.0, n) - 1.0
        r = sd * e
        kappas = []
        for v in (sd**2, sd**2 / factor):  # right, and misstated per cell
            sums, (u2, vv, _) = audit_findings._ratio_sums(pairs, cnt, r, v, 30)
            kappas.append(sums[9, 0])
            assert abs(sums[9, 0] - truth) <= tol, (noise, sums[9, 0])
        assert kappas[1] == pytest.approx(kappas[0], rel=0.02), (noise, kappas)
        ratio = audit_findings.div(sums[0], sums[1])
        by_group = audit_findings._group_kurtosis(u2, vv, pairs.pg, cnt, ratio, 30)
        assert by_group > kappas[1] * 1.1, (noise, by_group, kappas)  # what the groups' pooling took in


def _kurtosis(r, v):
    """The plain E z^4 / (E z^2)^2 of residuals ``r`` standardized by ``v``."""
    z2 = np.asarray(r, dtype=float) ** 2 / v
    return float(np.mean(z2 * z2) / np.mean(z2) ** 2)


def _fitted_kurtosis(table, cols, r, v):
    from mmc_core.auditing.audit_findings import kurtosis_of_parts, kurtosis_parts

    return kurtosis_of_parts(kurtosis_parts(GroupSet.from_columns(table, cols).evaluate(table).sums(), r, v))


def test_the_fitting_rows_kurtosis_is_the_audits_pooled_estimate():
    """By hand on two membership signatures (a=0, a=1; 200 rows each): each signature's residuals centred, their
    squares times n / (n - 1), the sum of their squares over the sum of each signature's cross-product estimate
    of R^2 times its sum of v^2. A variance misstated by a constant factor on a signature, however small (a
    model predicting 1e-12 there), does not pass for a heavier tail (the plain ratio of z^2 = r^2 / v doubles)."""
    rng = np.random.default_rng(0)
    tab = pd.DataFrame({"a": np.repeat([0, 1], 200)})
    r = rng.standard_t(5, 400) * np.repeat([1.0, 3.0], 200) + np.repeat([0.5, -1.0], 200)
    v = np.repeat([1.0, 9.0], 200)
    num = den = 0.0
    for s in (slice(0, 200), slice(200, 400)):
        n = 200
        cu2 = (r[s] - r[s].mean()) ** 2 * n / (n - 1)
        a1, a2, b1, b2 = cu2.sum(), (cu2**2).sum(), v[s].sum(), (v[s] ** 2).sum()
        num += a2
        den += (a1 * a1 - a2) / (b1 * b1 - b2) * b2
    got = _fitted_kurtosis(tab, ["a"], r, v)
    assert got == pytest.approx(num / den, rel=1e-12) and 3 < got < 12
    v_bad = np.where(tab["a"] == 1, 1e-12, v)
    assert _fitted_kurtosis(tab, ["a"], r, v_bad) == pytest.approx(got, rel=1e-9)
    assert _kurtosis(r, v_bad) > 1.5 * got  # the plain moment ratio of z^2 = r^2 / v mixes the two scales


def test_the_audit_allows_for_the_tail_of_the_models_fitting_rows(monkeypatch, tmp_path):
    """A fit records the kurtosis of its fitting rows' standardized residuals (the saved file keeps it) and the
    audit's variance tests get it as their kurtosis floor."""
    from mmc_core import MomentMulticalibrator

    rng = np.random.default_rng(3)
    n = 3000
    X = pd.DataFrame({"a": rng.integers(0, 3, n)})
    y = 100 + 20 * _lognormal(rng, n, 1.0)
    base = np.full(n, 100.0)
    groups = GroupSet.from_columns(X, ["a"])
    est = MomentMulticalibrator(label_range=(0.0, 2000.0), random_state=0).fit(X, y, groups, base_prediction=base)
    k = est.model_.info["residual_kurtosis"]
    idx = est.fit_index_
    pm = est.predict_moments(X.iloc[idx], base_prediction=base[idx])
    span = est.model_.scale.span
    fit_rows = X.iloc[idx].reset_index(drop=True)
    want = _fitted_kurtosis(fit_rows, ["a"], (y[idx] - pm["mean"]) / span, pm["moment_2"] / span**2)
    assert k == pytest.approx(want, rel=1e-6) and k > 10
    path = tmp_path / "m.json"
    est.save(path)
    assert MomentMulticalibrator.load(path).model_.info["residual_kurtosis"] == k
    seen = {}
    real = metrics.group_findings

    def spy(*args, **kw):
        seen.update(kw)
        return real(*args, **kw)

    monkeypatch.setattr(metrics, "group_findings", spy)
    metrics.audit(est.model_, X, y, base=base, methods=(), n_boot=0)
    assert seen["kurtosis_floor"] == k


@pytest.mark.slow
def test_variance_findings_hold_their_level_when_the_audit_rows_miss_the_tail():
    """200 audits of a correct model, residuals standardized log-normal with sigma 1.5 (kurtosis ~10,000): 1,500
    audit rows rarely draw the largest residuals, so their own pooled kurtosis is far below the truth and 69 of
    200 audits carried a variance finding ("overstates"). With the kurtosis of 4,000 fitting rows of the same
    noise as the floor (the moment ratio; what a fit records for noise of one scale): at most 5% of audits, upper bound at most
    8% (8 of 200 measured)."""
    hits = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        floor = _kurtosis(_lognormal(rng, 4000, 1.5), np.ones(4000))
        n = 1500
        tab = pd.DataFrame({"a": rng.integers(0, 4, n), "b": rng.integers(0, 3, n), "c": rng.integers(0, 5, n)})
        memb = GroupSet.from_columns(tab, ["a", "b", "c"], 2).evaluate(tab)
        mu = np.full(n, 0.5)
        found, _ = audit_findings.group_findings(
            memb.sums(), list(memb.names), UNIT_SCALE, mu, mu + 0.05 * _lognormal(rng, n, 1.5), np.full(n, 0.05**2),
            mean_grid(5), None, None, 0.9, 30, "holm", 0.05, 0.1, kurtosis_floor=floor,
        )  # fmt: skip
        hits += any(f["kind"] == "variance" for f in found)
    upper = float(stats.beta.ppf(0.95, hits + 1, 200 - hits))
    assert hits <= 10 and upper <= 0.08, (hits, upper)

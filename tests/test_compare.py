"""Paired model comparison and audits over periods (mmc_core.comparison.compare_models), on worlds whose per-group truth is known.

The guarantees checked: two sides that differ only by estimation noise give a finding in at most `level` of the
comparisons (Holm, family-wise); the 95% intervals of the differences cover the true population difference at
their level; a difference planted at the stated detectable size is found with about the stated power (80%), one
at half of it far less often; the same for changes between periods.
"""

import re
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from mmc_core import GroupSet
from mmc_core.common.errors import DataError, MMCError
from mmc_core.comparison.compare_models import Side, compare, compare_periods, detectable, side

PHI = np.vectorize(NormalDist().cdf)
Z90 = NormalDist().inv_cdf(0.95)  # 90% central intervals


def world(rng, n, k=4):
    df = pd.DataFrame({"g": rng.integers(0, k, n), "x": rng.normal(size=n)})
    sd = 1 + 0.5 * df["g"].to_numpy()
    y = df["x"].to_numpy() + sd * rng.normal(size=n)
    return df, y, sd


def gaussian_side(name, mu, s):
    return Side(name, mu, s * s, mu - Z90 * s, mu + Z90 * s)


def noisy_estimate(name, df, sd, rng, noise=0.05):
    """A model fitted on its own sample: the truth plus estimation noise (the same noise law for every side)."""
    mu = df["x"].to_numpy() + noise * rng.normal(size=len(df))
    return gaussian_side(name, mu, sd * np.exp(noise * rng.normal(size=len(df))))


def test_identical_sides_differ_by_nothing():
    rng = np.random.default_rng(0)
    df, y, sd = world(rng, 3000)
    a = noisy_estimate("A", df, sd, rng)
    res = compare(df, y, a, Side("B", a.mean.copy(), a.variance.copy(), a.lower.copy(), a.upper.copy()), _groups(df))
    assert res.findings == [] and res.n_tests == 4 * 5  # 4 values x (all + 4 groups)
    diffs = res.by_group[[c for c in res.by_group.columns if c.endswith("_diff")]].to_numpy()
    assert np.nanmax(np.abs(diffs)) < 1e-12 and np.isnan(res.by_group["tpr_diff"]).all()  # no decisions: no rates


def _groups(df):
    return GroupSet.from_columns(df, ["g"])


def test_noise_only_sides_find_at_most_level_of_the_time():
    """A and B are two estimates of the truth with the same estimation noise: every population difference is 0,
    so any finding is false. Holm at 0.05 over all tests: at most 5% of comparisons may carry one (binomial upper
    bound over 200 comparisons: 17)."""
    hits = 0
    for i in range(200):
        rng = np.random.default_rng(1000 + i)
        df, y, sd = world(rng, 3000)
        df["h"] = rng.integers(0, 3, len(df))
        gs = GroupSet.from_columns(df, ["g", "h"], 2)
        res = compare(df, y, noisy_estimate("A", df, sd, rng), noisy_estimate("B", df, sd, rng), gs)
        hits += bool(res.findings)
    assert hits <= 17, hits


def _truth(sd, bias_a, slope_b, c_a, c_b):
    """Population values of the analytic world: A = x + bias_a (per group), sd c_a * sd; B = (1 + slope_b) x,
    sd c_b * sd; y = x + sd * eps."""
    vb = sd**2 + slope_b**2
    out = {
        "rmse": np.sqrt(vb) - np.sqrt(sd**2 + bias_a**2),
        "mean_error": 0.0 - np.abs(bias_a),
        "spread": np.abs(np.log(vb / (c_b * sd) ** 2)) - np.abs(np.log(1 / c_a**2)),
        "coverage": np.abs(2 * PHI(Z90 * c_b * sd / np.sqrt(vb)) - 1 - 0.9)
        - np.abs(PHI(Z90 * c_a + bias_a / sd) - PHI(-Z90 * c_a + bias_a / sd) - 0.9),
    }
    return out


def test_paired_intervals_cover_the_true_difference():
    """Each group's 95% interval of B - A covers the population difference (computed in closed form) in about
    95% of 300 samples; with 300 draws a rate below 92% would be 2.4 binomial sd short."""
    sdg = 1 + 0.5 * np.arange(4)
    bias = np.array([0.3, -0.2, 0.5, 0.25])
    truth = _truth(sdg, bias, 0.3, 1.1, 0.9)
    covered = {w: np.zeros(4) for w in truth}
    reps = 300
    for i in range(reps):
        rng = np.random.default_rng(5000 + i)
        df, y, sd = world(rng, 4000)
        g = df["g"].to_numpy()
        a = gaussian_side("A", df["x"].to_numpy() + bias[g], 1.1 * sd)
        b = gaussian_side("B", 1.3 * df["x"].to_numpy(), 0.9 * sd)
        tab = compare(df, y, a, b, _groups(df)).by_group.iloc[1:]  # g=0..3 (not 'all', a mixture)
        for w, t in truth.items():
            covered[w] += (tab[f"{w}_lo"].to_numpy() <= t) & (t <= tab[f"{w}_hi"].to_numpy())
    rates = {w: c / reps for w, c in covered.items()}
    assert all(r.min() >= 0.92 for r in rates.values()), rates


def test_a_planted_degradation_is_found_at_its_detectable_size():
    """B adds noise of sd s to one group's predictions: its RMSE there is sqrt(sd^2 + s^2) against sd. Sized so the
    difference equals the comparison's stated detectable size, it is found in 70-90% of 200 comparisons (the
    stated power, 80%); at half that size far less often."""

    def run(size, seed):
        rng = np.random.default_rng(seed)
        df, y, sd = world(rng, 4000)
        mu = df["x"].to_numpy()
        s = np.sqrt((1.5 + size) ** 2 - 1.5**2)  # group g=1 (sd 1.5): RMSE 1.5 -> 1.5 + size
        bmu = mu + np.where(df["g"].to_numpy() == 1, s * rng.normal(size=len(df)), 0.0)
        return compare(df, y, gaussian_side("A", mu, sd), gaussian_side("B", bmu, sd), _groups(df))

    # the standard error of a paired difference grows with the difference: the size the comparison states as
    # detectable for this alternative, found by iterating on pilot samples (a fixed point)
    size = 0.1
    for k in range(6):
        size = float(np.mean([run(size, 100 * k + j).by_group.loc["g=1", "rmse_detectable"] for j in range(20)]))
    rates = []
    for planted in (size, size / 2):
        hits = 0
        for i in range(200):
            res = run(planted, 9000 + i)
            hits += any(f["kind"] == "rmse" and f["group"] == "g=1" for f in res.worse())
        rates.append(hits / 200)
    # at half the RMSE difference the noise added is 1/sqrt(2) as large, and so is the paired standard error:
    # z falls by 1/sqrt(2), not 1/2 (~40% power by the normal approximation), so "far fewer" is < 65%
    assert 0.70 <= rates[0] <= 0.90 and rates[1] <= 0.65 and rates[1] < rates[0] - 0.2, rates


def test_findings_name_the_worse_side_first_and_json_is_strict():
    import json

    rng = np.random.default_rng(3)
    df, y, sd = world(rng, 6000)
    mu = df["x"].to_numpy()
    g = df["g"].to_numpy()
    a = gaussian_side("champion", mu, sd)
    b = gaussian_side("challenger", mu + np.where(g == 2, 0.8, 0.0), np.where(g == 0, 0.5, 1.0) * sd)
    res = compare(df, y, a, b, _groups(df))
    worse = res.worse()
    assert worse and res.findings[: len(worse)] == worse
    named = {(f["group"], f["kind"]) for f in worse}
    assert ("g=2", "mean_error") in named and ("g=0", "spread") in named and ("g=0", "coverage") in named
    assert all(f["text"].startswith("challenger is worse than champion for ") for f in worse)
    assert all(f["interval"][0] > 0 for f in worse)  # a worsening's selection-adjusted interval excludes 0
    text = json.dumps(res.to_json(), allow_nan=False)
    assert json.loads(text)["names"] == ["champion", "challenger"]


def test_sides_from_models_and_columns():
    from mmc_core import MomentMulticalibrator

    rng = np.random.default_rng(4)
    df, y, sd = world(rng, 3000)
    gs = _groups(df)
    est = MomentMulticalibrator(n_moments=2, calibration_fraction=0.3, random_state=0).fit(df, y, gs)
    a = side(est, df, name="model")
    assert a.variance is not None and a.lower is not None
    b = side(df["x"].to_numpy(), name="column")
    res = compare(df, y, a, b, gs)
    assert np.isnan(res.by_group["spread_diff"]).all() and res.params["compared"] == ["rmse", "mean_error"]
    with pytest.raises(MMCError, match="different names"):
        compare(df, y, a, side(df["x"].to_numpy(), name="model"), gs)
    with pytest.raises(DataError, match="side 'v': variance has 1 missing or infinite"):
        compare(df, y, a, Side("v", np.zeros(3000), np.where(np.arange(3000) == 9, np.inf, 1.0)), gs)
    with pytest.raises(DataError, match="side 'short': mean has 10 values for 3000 rows"):
        compare(df, y, a, Side("short", np.zeros(10)), gs)
    with pytest.raises(DataError, match=r"side 'c': mean has 1 missing or infinite"):
        side(np.where(np.arange(3000) == 5, np.nan, 0.0), name="c")
    with pytest.raises(MMCError, match="interval ends come in pairs"):
        side({"mean": np.zeros(3000), "lower": np.zeros(3000)}, name="d")
    with pytest.raises(MMCError, match="min_group_count"):
        compare(df, y, a, b, gs, min_group_count=1)


# ---- classifiers --------------------------------------------------------------------------------------------
def _classifier_world(rng, n):
    df = pd.DataFrame({"g": rng.integers(0, 3, n), "x": rng.normal(size=n)})
    p = 1 / (1 + np.exp(-(df["x"].to_numpy() + 0.5 * (df["g"].to_numpy() - 1))))
    return df, (rng.random(n) < p).astype(float), p


def test_classifier_rates_have_paired_intervals_that_cover_the_truth():
    """A is the true probability, B ignores the group effect; decisions at 0.5. Per group the true TPR / FPR /
    selection-rate differences are computed directly on 2,000,000 rows; the 95% intervals from 4,000-row samples
    cover them in >= 92% of 300 samples (2.4 binomial sd below 95%)."""
    rng = np.random.default_rng(0)
    big, yb, pb = _classifier_world(rng, 2_000_000)
    xb, gb = big["x"].to_numpy(), big["g"].to_numpy()
    pb_b = 1 / (1 + np.exp(-xb))
    da, db = pb >= 0.5, pb_b >= 0.5
    truth = {}
    for g in range(3):
        m = gb == g
        truth[g] = {
            "selection_rate": db[m].mean() - da[m].mean(),
            "tpr": db[m & (yb == 1)].mean() - da[m & (yb == 1)].mean(),
            "fpr": db[m & (yb == 0)].mean() - da[m & (yb == 0)].mean(),
        }
    hits = {w: 0 for w in ("selection_rate", "tpr", "fpr")}
    reps = 300
    for i in range(reps):
        r = np.random.default_rng(100 + i)
        df, y, p = _classifier_world(r, 4000)
        pB = 1 / (1 + np.exp(-df["x"].to_numpy()))
        res = compare(df, y, side(p, name="A", threshold=0.5), side(pB, name="B", threshold=0.5), _groups(df))
        tab = res.by_group
        for g in range(3):
            row = tab.loc[f"g={g}"]
            for w in hits:
                hits[w] += row[f"{w}_lo"] <= truth[g][w] <= row[f"{w}_hi"]
    rates = {w: h / (reps * 3) for w, h in hits.items()}
    assert min(rates.values()) >= 0.92, rates


def test_a_worse_classifier_is_named_by_its_brier_score():
    rng = np.random.default_rng(2)
    df, y, p = _classifier_world(rng, 20000)
    blurred = np.clip(p + np.where(df["g"].to_numpy() == 2, 0.25, 0.0), 0, 1)
    res = compare(
        df, y, side(p, name="truth", threshold=0.5), side(blurred, name="blurred", threshold=0.5), _groups(df)
    )
    worse = res.worse()
    assert worse and worse[0]["group"] in ("g=2", "all") and {f["kind"] for f in worse} <= {"rmse", "mean_error"}
    assert "g=2" in {f["group"] for f in worse}
    assert res.by_group.loc["g=2", "selection_rate_diff"] > 0  # B says yes more often in g=2


# ---- periods ------------------------------------------------------------------------------------------------
def test_periods_from_one_distribution_rarely_drift():
    hits = 0
    for i in range(200):
        rng = np.random.default_rng(20000 + i)
        df, y, sd = world(rng, 4000)
        res = compare_periods(
            df, y, gaussian_side("M", df["x"].to_numpy(), sd), _groups(df), rng.integers(0, 3, len(df))
        )
        hits += bool(res.findings)
    assert hits <= 17, hits  # <= 5% of 200, binomial upper bound


def test_a_planted_spread_change_is_found_and_named():
    rng = np.random.default_rng(11)
    df, y, sd = world(rng, 20000)
    quarter = np.array(["2026Q1", "2026Q2"])[rng.integers(0, 2, len(df))]
    g = df["g"].to_numpy()
    y = y + np.where((quarter == "2026Q2") & (g == 3), 1.0 * sd * rng.normal(size=len(df)), 0.0)  # var x 2
    res = compare_periods(df, y, gaussian_side("M", df["x"].to_numpy(), sd), _groups(df), quarter)
    assert res.periods == ["2026Q1", "2026Q2"]
    first = res.findings[0]
    assert (first["group"], first["kind"], first["period"], first["reference"]) == ("g=3", "spread", "2026Q2", "2026Q1")
    assert 1.7 < first["after"] / first["before"] < 2.3
    assert "changed from" in first["text"]
    row = res.changes.set_index(["group", "period"]).loc[("g=3", "2026Q2")]
    assert row["spread_change_lo"] <= np.log(2) <= row["spread_change_hi"]
    with pytest.raises(DataError, match="one value"):
        compare_periods(df, y, gaussian_side("M", df["x"].to_numpy(), sd), _groups(df), np.zeros(len(df)))
    with pytest.raises(DataError, match="missing"):
        compare_periods(df, y, gaussian_side("M", df["x"].to_numpy(), sd), _groups(df), np.where(g == 0, None, "a"))


POINTS_RE = re.compile(r"([+-]\d+\.\d+) points, CI ([+-]\d+\.\d+) to ([+-]\d+\.\d+)\)")


def _says_points(f: dict) -> None:
    """The finding's sentence states its change of a share in percentage points: the numeric fields (fractions)
    x 100, to the sentence's last decimal."""
    m = POINTS_RE.search(f["text"])
    assert m, f["text"]
    for said, value in zip(m.groups(), (f["estimate"], *f["interval"])):
        step = 10.0 ** -len(said.split(".")[1])
        assert abs(float(said) - 100 * value) <= step / 2 + 1e-9, (said, value, f["text"])
    assert f"{f['estimate']:+.3g}," not in f["text"]  # not the fraction as well


def test_rate_and_coverage_changes_are_said_in_percentage_points():
    """A planted rise of one group's selection rate between periods, a planted drop of one group's interval
    coverage between periods and between two models: each finding's sentence says it in points, equal to its
    numeric field (a fraction) x 100."""
    rng = np.random.default_rng(37)
    n = 6000
    df = pd.DataFrame({"g": rng.integers(0, 2, n), "x": rng.normal(size=n)})
    q = np.array(["2026Q1", "2026Q2"])[rng.integers(0, 2, n)]
    df.loc[(df["g"] == 1) & (q == "2026Q2"), "x"] += 1.0  # more of g=1 decided positive in Q2
    p = 1 / (1 + np.exp(-1.5 * df["x"].to_numpy()))
    y = (rng.random(n) < p).astype(float)
    res = compare_periods(df, y, side(p, name="M", threshold=0.5), _groups(df), q)
    f = next(f for f in res.findings if (f["kind"], f["group"]) == ("selection_rate", "g=1"))
    assert f["after"] - f["before"] > 0.2 and "M's selection rate for g=1 changed from" in f["text"]
    _says_points(f)

    df, y, sd = world(rng, n, k=2)
    y = y + np.where((q == "2026Q2") & (df["g"] == 1), 1.5 * sd * rng.normal(size=n), 0.0)  # g=1's noise grows
    m = gaussian_side("M", df["x"].to_numpy(), sd)
    cov = next(f for f in compare_periods(df, y, m, _groups(df), q).findings if f["kind"] == "coverage")
    assert cov["estimate"] < -0.1 and "interval coverage" in cov["text"]
    _says_points(cov)
    narrow = gaussian_side("narrow", m.mean, np.where(df["g"] == 1, 0.5, 1.0) * sd)  # under-covers g=1
    paired = next(f for f in compare(df, y, m, narrow, _groups(df)).findings if f["kind"] == "coverage")
    _says_points(paired)


def test_points_keep_small_changes_readable():
    from mmc_core.comparison.compare_models import points_text

    assert points_text(0.343, 0.201, 0.485) == ("+34.3", "+20.1", "+48.5")
    assert points_text(-0.0004, -0.0009, 0.0001) == ("-0.040", "-0.090", "+0.010")  # not "-0.0 points"


def test_detectable_size_formula():
    # one test at 0.05: (1.96 + 0.84) se
    assert detectable(np.array([1.0]), 1, 0.05)[0] == pytest.approx(1.959964 + 0.841621, rel=1e-5)
    assert detectable(np.array([2.0]), 10, 0.05)[0] > 2 * detectable(np.array([1.0]), 1, 0.05)[0]

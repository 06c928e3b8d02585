"""The benchmarks' ground truth is what it says: the known-truth worlds' stated moments of the rows they keep, and
the held-out protocol's base split."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.heldout_protocol import base_split, split
from benchmarks.variance_worlds import SKEW_S, kept_moments
from mmc_core import MomentMulticalibrator


def _draw(world: str, n: int, rng) -> np.ndarray:
    if world == "skewed":
        s = SKEW_S
        return (np.exp(s * rng.normal(size=n)) - np.exp(s * s / 2)) / np.sqrt((np.exp(s * s) - 1) * np.exp(s * s))
    return rng.normal(size=n)


@pytest.mark.parametrize("world", ["wage", "skewed"])
@pytest.mark.parametrize("mean,sd", [(150.0, 30.0), (20.0, 15.0), (100.0, 10.0)])
def test_kept_moments_are_the_truncated_draws_moments(world, mean, sd):
    """The mean and sd of the rows a world keeps (0 <= y <= 200), against 400,000 draws: within 4 Monte Carlo
    standard errors (the sd's from the squared deviations' own spread)."""
    rng = np.random.default_rng(7)
    y = mean + sd * _draw(world, 400_000, rng)
    y = y[(y >= 0) & (y <= 200)]
    m, s = kept_moments(np.array([mean]), np.array([sd]), world)
    se_mean = y.std() / np.sqrt(y.size)
    d2 = (y - y.mean()) ** 2
    se_var = d2.std() / np.sqrt(y.size)
    assert abs(y.mean() - m[0]) <= 4 * se_mean
    assert abs(d2.mean() - s[0] ** 2) <= 4 * se_var


def test_a_range_far_from_the_draws_leaves_the_moments_alone():
    m, s = kept_moments(np.array([100.0]), np.array([1.0]), "skewed")  # the range is 100 sd away
    assert m[0] == pytest.approx(100.0, abs=1e-9) and s[0] == pytest.approx(1.0, rel=1e-7)
    m, s = kept_moments(np.array([100.0]), np.array([5.0]), "wage")
    assert m[0] == pytest.approx(100.0, abs=1e-9) and s[0] == pytest.approx(5.0, rel=1e-9)


def test_the_skewed_worlds_truncation_is_not_negligible():
    """Why the correction exists: a high-variance row near the top of the range loses a visible share of its
    variance to the dropped right tail (the stated truth was sd**2 before)."""
    _, s = kept_moments(np.array([120.0]), np.array([34.0]), "skewed")
    assert s[0] ** 2 < 0.9 * 34.0**2


def test_base_split_fits_the_base_on_the_base_rows_only():
    from sklearn.ensemble import HistGradientBoostingRegressor

    sp = base_split("synthetic_scores", 3, clip=(0.0, 50.0))
    tr, po, te = split(len(sp.df), 3)
    assert all(np.array_equal(a, b) for a, b in ((sp.tr, tr), (sp.po, po), (sp.te, te)))
    y = sp.df[sp.label].to_numpy(float)
    hgb = HistGradientBoostingRegressor(random_state=3).fit(sp.X.iloc[tr], y[tr])
    assert np.array_equal(sp.base, np.clip(hgb.predict(sp.X), 0.0, 50.0))
    assert sp.label not in sp.X.columns and set(sp.gcols) <= set(sp.df.columns)


def test_a_null_audits_coverage_truth_counts_the_pool_inside_each_rows_interval():
    """P(lo <= base + e <= hi) over a pool of noise, by hand: both ends inclusive."""
    from benchmarks.null_audits import _coverage_truth

    pool = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    p = _coverage_truth(np.array([10.0, 10.0, 0.0]), np.array([9.0, 11.5, -5.0]), np.array([11.0, 20.0, -4.0]), pool)
    assert p.tolist() == [3 / 5, 1 / 5, 0.0]  # e in [-1, 1]; e in [1.5, 10]; e in [-5, -4]


@pytest.mark.parametrize(
    "finding,false",
    [
        ({"kind": "mean", "estimate": -1.1, "interval": [-2.0, -0.2]}, True),  # true error +0.5: the other sign
        ({"kind": "mean", "estimate": 0.9, "interval": [0.2, 2.0]}, False),
        ({"kind": "variance", "estimate": 1.5, "interval": [1.2, 1.9], "tolerance": 0.1}, True),  # truth 1.05: in band
        ({"kind": "variance", "estimate": 0.5, "interval": [0.3, 0.8], "tolerance": 0.1}, False),  # truth 0.84
        ({"kind": "coverage", "estimate": 0.8, "interval": [0.7, 0.88]}, False),  # truth 0.85 < 0.9
        ({"kind": "coverage", "estimate": 0.97, "interval": [0.92, 0.99]}, True),  # truth 0.85: not above
    ],
)
def test_a_null_audit_finding_is_false_when_its_truth_lies_in_its_tests_null(finding, false):
    """The scoring of ``null_audits.py`` on a hand-made group: gap (true mean - prediction) 0.5 on every row,
    noise variance 2.1 against a predicted 2 (ratio 1.05) or 2.5 (0.84), true coverage 0.85 against 0.9."""
    from benchmarks.null_audits import _score

    sel = np.ones(4, dtype=bool)
    gap = np.full(4, 0.5)
    var = np.full(4, 2.0 if finding["estimate"] > 1 else 2.5)
    out = _score(finding, sel, gap, 2.1, var, np.full(4, 0.85), 0.9)
    assert out["false"] is false
    assert out["missed"] is (not finding["interval"][0] <= out["truth"] <= finding["interval"][1])


def test_dataset_names_expand_the_sets_and_refuse_an_unknown_table():
    from benchmarks.heldout_protocol import DATASETS, dataset_names

    first = next(iter(DATASETS))
    assert dataset_names(f"{first},,{first}") == [first, first]
    with pytest.raises(SystemExit, match="unknown dataset 'no_such_table'; valid: "):
        dataset_names("no_such_table")


def test_a_mean_finding_where_the_prediction_is_the_base_is_false_whatever_the_rounding():
    from benchmarks.null_audits import _score

    f = {"kind": "mean", "estimate": -0.5, "interval": [-0.9, -0.1]}
    out = _score(f, np.ones(3, dtype=bool), np.full(3, -1.9e-17), 1.0, np.ones(3), np.ones(3), 0.9, span=10.0)
    assert out["false"] is True


def _shrunk_table(ratios, n_per, rng):
    """Post-processing rows of disjoint groups (plus the whole table), predicted variance 1, squared residuals
    ratio x chi-square(1) draws: (indicators, s)."""
    k = len(ratios)
    g = np.repeat(np.arange(k), n_per)
    d = np.column_stack([np.ones(g.size)] + [(g == j).astype(float) for j in range(k)])
    s = np.asarray(ratios)[g] * rng.normal(size=g.size) ** 2
    return d, s


def test_shrunk_groups_keeps_the_level_and_moves_real_differences_toward_each_groups_own():
    from benchmarks.variance_protocol import shrunk_groups

    d, s = _shrunk_table([4.0, 1.0, 0.25], 3000, np.random.default_rng(3))
    v = np.ones(s.size)
    out = shrunk_groups(d, s, v, d, v)
    assert out.sum() == pytest.approx(s.sum(), rel=1e-9)  # re-levelled to the rows' mean squared residual
    own = np.log((d.T @ s) / d.sum(axis=0))[1:]
    got = np.log((d.T @ out) / d.sum(axis=0))[1:]
    pooled = np.log(s.mean())
    assert np.all(np.diff(got) < 0)  # the groups' order kept
    # a log-scale gap of 1.4 per group at 3,000 rows each (se about 0.026): most of each group's own way
    assert np.all(np.abs(got - pooled) >= 0.5 * np.abs(own - pooled))


def test_shrunk_groups_leaves_groups_that_do_not_differ_alone():
    from benchmarks.variance_protocol import shrunk_groups

    # every group holds the same squared residuals: X'e = 0, so no penalty beats no change
    base = np.random.default_rng(4).normal(size=500) ** 2
    d, _ = _shrunk_table([1.0, 1.0], 500, np.random.default_rng(0))
    s = np.concatenate([base, base])
    v = np.full(s.size, 0.7)
    assert np.array_equal(shrunk_groups(d, s, v, d, v), v)


def test_variance_worlds_by_seed_names_the_worst_group(capsys):
    """``--by-seed``: one row per seed naming the group whose |log(predicted / true variance)| is the seed's
    worst (the summary's worst, recomputed here from the printed log ratio), its test rows >= 2% of them, the
    mean error's share of its predicted variance in [0, 1], and the seed's worst group against the variance
    around the fit's mean (the summary's "worst around", averaged over the seeds)."""
    from benchmarks.variance_worlds import main

    assert main(["--worlds", "wage", "--seeds", "2", "--n", "4000", "--by-seed"]) == 0
    out = capsys.readouterr().out.splitlines()
    summary = next(line for line in out if line.startswith("| wage | ") and line.count("|") == 10)
    rows = [line.split("|")[1:-1] for line in out if line.startswith("| wage | ") and line.count("|") == 8]
    assert [r[1].strip() for r in rows] == ["0", "1"]
    worst = [abs(float(r[4])) for r in rows]
    mean_max = [float(x) for x in summary.split("|")[2].split(",")]
    assert mean_max == pytest.approx([round(np.mean(worst), 3), round(max(worst), 3)], abs=1.5e-3)
    around = float(summary.split("|")[4])
    assert around == pytest.approx(round(np.mean([float(r[6]) for r in rows]), 3), abs=1.5e-3)
    for r in rows:
        assert "=" in r[2] and int(r[3]) >= 0.02 * 3_000 and 0.0 <= float(r[5]) <= 1.0 and float(r[6]) >= 0.0


@pytest.mark.slow
def test_the_corr_limit_of_the_feature_world_is_its_closed_form():
    """``--corr-limit``: in ``feature`` the sd (4 + 20 x) follows x alone and the mean is the groups' part plus
    30 x + 5 tanh(w), so given the groups and the true mean, u = 30 x + 5 tanh(w) is known and E[sd | u] has a
    closed form (x uniform on [0, 1] and w standard normal: an integral over w). The boosted estimate of the
    limit is that corr on the same rows, up to its fit: never above (E[sd | groups, mean] is the best any
    function reaches) beyond the rows' noise, and not far below. The limit with the fit's own mean bounds the
    fit's corr(sd) the same way (its corrections are functions of its groups and its mean)."""
    from benchmarks.variance_worlds import corr_limits, draw, groups_for

    n, seed = 4000, 3
    rng = np.random.default_rng(seed)
    tr, te = draw("feature", n, rng), draw("feature", n, rng)
    est = MomentMulticalibrator(label_range=(0, 200)).fit(tr, tr["y"], groups_for(tr), base_prediction=tr["base"])
    mu = est.predict(te, base_prediction=te["base"])
    got = corr_limits("feature", seed, n, est, te, mu)
    u = 30.0 * te["x"].to_numpy() + 5.0 * np.tanh(te["w"].to_numpy())
    w = np.linspace(-6.0, 6.0, 1201)
    xs = (u[:, None] - 5.0 * np.tanh(w)[None, :]) / 30.0
    weight = np.exp(-(w**2) / 2)[None, :] * ((xs >= 0.0) & (xs <= 1.0))
    best = 4.0 + 20.0 * (xs * weight).sum(axis=1) / weight.sum(axis=1)
    exact = float(np.corrcoef(best, te["true_sd"])[0, 1])
    assert exact - 0.01 <= got["corr_limit_true_mean"] <= exact + 0.003, (got, exact)
    fit_sd = np.sqrt(est.predict_moments(te, base_prediction=te["base"])["moment_2"])
    assert got["corr_limit_fit_mean"] >= float(np.corrcoef(fit_sd, te["true_sd"])[0, 1]) - 0.01, got


def test_variance_worlds_right_structure_scores_the_fit_and_four_glms(capsys):
    """``--right-structure``: per seed, the fit's worst group (the summary's) and the worst group of four gamma
    GLMs of the squared residuals, each a finite |log ratio|."""
    from benchmarks.variance_worlds import main

    assert main(["--worlds", "wage", "--seeds", "1", "--n", "3000", "--right-structure"]) == 0
    out = capsys.readouterr().out.splitlines()
    summary = next(line for line in out if line.startswith("| wage | ") and line.count("|") == 10)
    row = next(line for line in out if line.startswith("| wage | 0 |") and line.count("|") == 8).split("|")[3:-1]
    values = [float(v) for v in row]
    assert values[0] == pytest.approx(float(summary.split("|")[2].split(",")[1]), abs=1.5e-3)
    assert all(np.isfinite(v) and v >= 0.0 for v in values)

"""Issue 10: moments at the data's own scale, strictly positive moments, validated ("se") updates, data-chosen
grids in the model file (format 2) and the old format still loading and replaying unchanged."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from mmc_core import FittedModel, GroupSet, MomentMulticalibrator
from mmc_core.common.errors import MMCError, ModelFormatError
from mmc_core.fit import bonferroni_z
from mmc_core.paper.buckets import BucketGrid, fill_edges, geometric_edges, quantile_edges
from mmc_core.paper.cell_state import cell_violated


def known_variance_table(n: int, seed: int):
    """Label on 0-200 with a conditional sd of 3-25 set by three group columns (uniform noise, so the
    variance is exactly sd^2 and the label stays inside [0, 200]); the base model knows the mean's shape
    but is biased on two groups (an error the mean calibration can remove)."""
    rng = np.random.default_rng(seed)
    a = rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])
    b = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    c = rng.choice(5, n)
    x = rng.standard_normal(n)
    ea, eb, ec = np.array([0, 0.35, 0.6, 1.0]), np.array([0, 0.5, 0.2]), np.array([0, 0.1, 0.25, 0.45, 0.3])
    score = (ea[a] + eb[b] + ec[c] + 0.3 * (a == 3) * (b == 1)) / 2.05
    sd = 3 * (25 / 3) ** np.clip(score, 0, 1)
    mean = 100 + 8 * a - 6 * b + 3 * c + 15 * np.tanh(x)
    y = mean + sd * rng.uniform(-math.sqrt(3), math.sqrt(3), n)
    base = mean + 4 * (b == 2) - 3 * (a == 1)
    return {"a": a, "b": b, "c": c}, y, base, sd**2


def _sub(t, idx):
    return {k: v[idx] for k, v in t.items()}


# ---- grids ---------------------------------------------------------------------------------------------
def test_non_uniform_grid_is_the_edge_comparison():
    g = BucketGrid(0.0, 1.0, 4, (0.1, 0.2, 0.7))
    v = np.array([-1.0, 0.0, 0.0999, 0.1, 0.15, 0.2, 0.69, 0.7, 1.0, 3.0])
    assert g.index(v).tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
    assert g.width == pytest.approx(0.5) and g.max_width == pytest.approx(0.5)
    assert BucketGrid(0.0, 1.0, 4).width == 0.25
    with pytest.raises(ValueError):
        BucketGrid(0.0, 1.0, 3, (0.5, 0.4))
    e = geometric_edges(1e-4, 1e-2, 5)
    assert len(e) == 4 and np.allclose(np.diff(np.log(e)), np.log(100) / 3)
    assert quantile_edges(np.full(100, 0.3), 5) == ()
    assert len(fill_edges(quantile_edges(np.r_[np.zeros(50), np.ones(50) * 0.5], 5), 5, 0.0, 1.0)) == 4


def test_cell_violated_is_the_t_test():
    rng = np.random.default_rng(0)
    r = rng.normal(0.3, 1.0, 50)
    S, C, Q = np.array([r.sum()]), np.array([50.0]), np.array([(r * r).sum()])
    t = r.mean() / (r.std(ddof=1) / math.sqrt(50))
    assert cell_violated(S, C, Q, 0.0, t - 1e-6)[0] and not cell_violated(S, C, Q, 0.0, t + 1e-6)[0]
    assert not cell_violated(S, C, Q, 0.0, 0.1, min_count=51)[0]
    assert bonferroni_z(1, 0.05) == pytest.approx(NormalDist().inv_cdf(0.975))


# ---- the ground truth ----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0])
def test_group_variance_at_realistic_scale_matches_the_truth_on_fresh_rows(seed):
    """sd 3-25 on a 0-200 label. On fresh rows: every group with >= 2% of the rows gets an average predicted
    variance within 10% of its true average variance, corr(predicted sd, true sd) >= 0.95, and no predicted
    variance is <= 0.

    Why 10%: it is issue 34's criterion for the worst listed group, and at this n sampling alone cannot
    explain a miss that large: the test checks that 5 standard errors of the smallest such group's mean squared
    residual (relative to its variance) stay below 10%. Whole groups' variances are the moments' cell step's
    (shrunk by their rows, judged on the held-out rows), no longer bounded by the descent's own test."""
    n = 600_000  # at 500k rows 5 standard errors are 10.05%
    t, y, base, var = known_variance_table(n, seed)
    tr, te = np.arange(int(0.7 * n)), np.arange(int(0.7 * n), n)
    groups = GroupSet.from_columns(_sub(t, tr), ["a", "b", "c"], 2)
    est = MomentMulticalibrator(n_moments=2, label_range=(0, 200), random_state=seed)
    est.fit(_sub(t, tr), y[tr], groups, base_prediction=base[tr])
    pred = est.predict_moments(_sub(t, te), base_prediction=base[te])
    v = pred["moment_2"]
    assert v.min() > 0
    assert np.corrcoef(np.sqrt(v), np.sqrt(var[te]))[0, 1] >= 0.95

    dense = groups.evaluate(_sub(t, te)).to_dense()
    cnt = dense.sum(axis=0)
    big = cnt >= 0.02 * te.size
    rel = (dense.T @ v) / (dense.T @ var[te]) - 1
    assert big.sum() >= 20
    # the derived bound at this sample size (fitting rows of the smallest big group, its noise)
    fit_rows = tr[est.fit_index_]
    dfit = groups.evaluate(_sub(t, fit_rows)).to_dense()
    r2 = (y[fit_rows] - base[fit_rows]) ** 2
    worst_rel_se = max(
        np.std(r2[dfit[:, g]]) / math.sqrt(dfit[:, g].sum()) / np.mean(var[fit_rows][dfit[:, g]])
        for g in np.flatnonzero(big)
    )
    assert 5 * worst_rel_se < 0.10
    assert np.max(np.abs(rel[big])) <= 0.10, {groups.names[g]: round(float(rel[g]), 3) for g in np.flatnonzero(big)}


def test_variance_predictions_stay_positive_and_spread_over_the_buckets():
    """The old grid put every variance of a 0-200 label with sd <= 25 into the first of 5 buckets."""
    t, y, base, var = known_variance_table(20_000, 3)
    groups = GroupSet.from_columns(t, ["a", "b", "c"], 2)
    est = MomentMulticalibrator(n_moments=2, label_range=(0, 200)).fit(t, y, groups, base_prediction=base)
    m2 = est.fit_moments_unit_[2]
    p = est.model_.params
    assert m2.min() > 0 and p.projection(2)[0] > 0
    assert np.unique(p.grid(2).index(m2)).size >= 3
    old = MomentMulticalibrator(
        alpha="auto", beta="auto", n_moments=2, label_range=(0, 200), moment_buckets="range"
    ).fit(t, y, groups, base_prediction=base)
    assert np.unique(old.model_.params.grid(2).index(old.fit_moments_unit_[2])).size == 1


# ---- validated updates ---------------------------------------------------------------------------------
def _noise(n, seed):
    rng = np.random.default_rng(seed)
    t = {c: rng.integers(0, k, n) for c, k in (("a", 4), ("b", 3), ("c", 5), ("d", 2))}
    base = 0.3 + 0.4 * rng.random(n)
    y = np.clip(base + 0.12 * rng.standard_normal(n), 0, 1)
    return t, y, base


def test_se_rule_leaves_a_correct_base_model_almost_untouched():
    """Groups carry no signal and the base prediction is the true mean. At family-wise level 0.1 the "se" rule
    flags a noise cell with probability <= 0.1 per audit, so over a few seeds the descent almost never moves
    the base (checked without the base map). The base map, a separate step, is applied at the share of its
    out-of-sample change that the labels bear out times min(1, z / 2), z a standard normal's on a calibrated
    base: a soft gate, so it moves the base a little in about half the fits (here in all four, and in all of
    seeds 0-7: mean |move| at most 0.0025 on this 0-1 label with noise sd 0.12, 2% of the noise), where the
    squared-error gate it replaced (z centred near -1.3) moved it in 2 of 8 seeds."""
    moved, descent_moved = [], []
    for seed in range(4):
        t, y, base = _noise(3000, seed)
        groups = GroupSet.from_columns(t, list(t), 2)
        for recal, out in (("auto", moved), ("none", descent_moved)):
            est = MomentMulticalibrator(
                n_moments=1, label_range=(0, 1), calibration_fraction=0, base_recalibration=recal
            ).fit(t, y, groups, base)
            out.append(np.mean(np.abs(est.fit_mean_unit_ - base)))
    # a whole-group correction on noise moves a group by ~z_group standard errors: at most ~0.01 here
    assert sum(m > 0 for m in descent_moved) <= 2 and max(descent_moved) < 0.01
    assert max(moved) < 0.01


def test_achieved_thresholds_hold_exactly_on_the_fitting_rows():
    from tests.reference import audit_sample

    t, y, base, var = known_variance_table(8000, 5)
    groups = GroupSet.from_columns(t, ["a", "b", "c"], 2)
    est = MomentMulticalibrator(n_moments=3, label_range=(0, 200)).fit(t, y, groups, base_prediction=base)
    p = est.model_.params
    rows = est.fit_index_
    dense = groups.evaluate(_sub(t, rows)).to_dense()
    yu = y[rows] / 200
    audit = audit_sample(p, dense, yu, est.fit_mean_unit_, est.fit_moments_unit_)
    assert max(abs(r[3]) for r in audit["mean"]) < p.alpha
    for r in audit["joint"]:
        assert abs(r["v_mean"]) < p.alpha and abs(r["v_moment"]) < p.beta_for(r["a"])
    assert est.model_.info["achieved"]["alpha"] == p.alpha


def test_early_stopping_is_on_by_default_with_held_out_rows():
    t, y, base, var = known_variance_table(6000, 1)
    groups = GroupSet.from_columns(t, ["a", "b"], 2)
    est = MomentMulticalibrator(label_range=(0, 200)).fit(t, y, groups, base_prediction=base)
    assert est.model_.info["early_stopping"]
    losses = [h["holdout_mse"] for h in est.history_]
    assert losses[est.model_.info["kept_round"]] == min(losses)
    est0 = MomentMulticalibrator(label_range=(0, 200), calibration_fraction=0).fit(t, y, groups, base_prediction=base)
    assert not est0.model_.info["early_stopping"]


# ---- model files ---------------------------------------------------------------------------------------
def test_format2_round_trip_and_bit_identical_replay(tmp_path):
    t, y, base, var = known_variance_table(6000, 2)
    groups = GroupSet.from_columns(t, ["a", "b", "c"], 2)
    est = MomentMulticalibrator(
        n_moments=3, label_range=(0, 200), mean_buckets="quantile", n_buckets="auto", calibration_fraction=0.25
    ).fit(t, y, groups, base_prediction=base)
    d = json.loads(est.model_.to_json())
    assert (
        # 10: the descent left the moments to the cell step; 7: the moments have cell corrections; 6: the base
        # map has its group part; 3: it bends
        d["version"]
        == (
            10
            if d["params"].get("z_moment", -1) >= 0
            else 7
            if d.get("moment_cells")
            else 6
            if d["init"]["mean"].get("group_part")
            else 3
            if any(d["init"]["mean"].get("bends") or [])
            else 2
        )
        and d["params"]["moment_step"] == "ratio"
        and len(d["params"]["mean_edges"]) == est.model_.params.m - 1
    )
    est.save(tmp_path / "m.json")
    again = FittedModel.load(tmp_path / "m.json")
    assert again.to_json() == est.model_.to_json()
    rows = est.fit_index_
    mu, moms = again.predict_unit(_sub(t, rows), base[rows] / 200, rows.size)
    assert np.array_equal(mu, est.fit_mean_unit_)
    for a in (2, 3):
        assert np.array_equal(moms[a], est.fit_moments_unit_[a])


def test_format1_models_still_load_and_replay_unchanged():
    t, y, base = _noise(2000, 0)
    groups = GroupSet.from_columns(t, list(t), 2)
    est = MomentMulticalibrator(
        alpha=0.003,
        beta=0.001,
        label_range=(0, 1),
        calibration_fraction=0,
        moment_buckets="range",
        mean_buckets="uniform",
        early_stopping=False,
    )
    est.fit(t, y, groups, base)
    d = json.loads(est.model_.to_json())
    assert d["version"] == 1 and "z" not in d["params"]
    again = FittedModel.from_json(json.dumps(d))
    mu, moms = again.predict_unit(t, base, len(y))
    assert np.array_equal(mu, est.fit_mean_unit_) and np.array_equal(moms[2], est.fit_moments_unit_[2])


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (lambda p: p.update(mean_edges=[0.5, 0.2, 0.3, 0.4]), "mean_edges"),
        (lambda p: p.update(moment_floors={"2": 0.0}), "moment_floors"),
        (lambda p: p.update(moment_step="mult"), "moment_step"),
        (lambda p: p.update(z=-1), "z"),
    ],
)
def test_malformed_format2_params_are_rejected(mutate, msg):
    t, y, base, var = known_variance_table(3000, 0)
    groups = GroupSet.from_columns(t, ["a", "b"], 2)
    est = MomentMulticalibrator(label_range=(0, 200), mean_buckets="quantile").fit(t, y, groups, base_prediction=base)
    d = json.loads(est.model_.to_json())
    mutate(d["params"])
    with pytest.raises(ModelFormatError, match=msg):
        FittedModel.from_dict(d)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"alpha": "fast"}, "alpha"),
        ({"mean_buckets": "log"}, "mean_buckets"),
        ({"moment_buckets": "quantile"}, "moment_buckets"),
        ({"early_stopping": "yes"}, "early_stopping"),
        ({"n_buckets": "many"}, "buckets"),
    ],
)
def test_bad_new_parameters_name_the_parameter(kw, match):
    t, y, base = _noise(200, 0)
    with pytest.raises(MMCError, match=match):
        MomentMulticalibrator(**kw).fit(t, y, GroupSet.from_columns(t, ["a"], 1), base)


def test_buckets_auto_needs_held_out_rows():
    t, y, base = _noise(500, 0)
    with pytest.raises(MMCError, match="buckets"):
        MomentMulticalibrator(n_buckets="auto", calibration_fraction=0).fit(
            t, y, GroupSet.from_columns(t, ["a"], 1), base
        )


def test_audit_of_every_model_it_fits_matches_a_direct_computation():
    """No predicted variance <= 0 (the audit's logarithms of variance ratios never fail), and the audit's per-group
    numbers agree with a direct computation."""
    from mmc_core.auditing.metrics import audit

    t, y, base, var = known_variance_table(4000, 4)
    groups = GroupSet.from_columns(t, ["a", "b", "c"], 2)
    tr, te = np.arange(3000), np.arange(3000, 4000)
    for kw in ({}, {"n_moments": 4}, {"n_moments": 3, "odd_moments": "signed"}, {"mean_buckets": "quantile"}):
        est = MomentMulticalibrator(label_range=(0, 200), **kw).fit(
            _sub(t, tr), y[tr], groups, base_prediction=base[tr]
        )
        pred = est.predict_moments(_sub(t, te), base[te])
        assert pred["moment_2"].min() > 0
        res = audit(est.model_, _sub(t, te), y[te], base=base[te])
        assert len(res.by_group) == len(groups)
        # the audit's numbers are the predictions' and the labels' own (its sums over the membership, against a
        # direct computation on the rows of each group)
        memb = groups.evaluate(_sub(t, te), len(te))
        r = y[te] - pred["mean"]
        for g in (0, 5, len(groups) - 1):
            rows = memb.group_rows(g)
            row = res.by_group.iloc[g]
            assert row["count"] == rows.size
            np.testing.assert_allclose(row["mean_pred"], pred["mean"][rows].mean(), rtol=1e-9)
            np.testing.assert_allclose(row["pred_var"], pred["moment_2"][rows].mean(), rtol=1e-9)
            if rows.size > 1:
                np.testing.assert_allclose(row["emp_var"], np.var(r[rows], ddof=1), rtol=1e-9)
        assert np.isfinite(res.by_group["var_ratio"].astype(float)).all()


def test_early_stopped_fit_predictions_equal_the_replayed_kept_log():
    """The fitting-row predictions of the kept round are snapshotted during the descent (no replay); they must
    be exactly what replaying the kept log gives."""
    from mmc_core.common.synthetic import demo_distribution

    d = demo_distribution()
    # the first draw whose fit stops early (which draws do depends on the fit's details; 2 of the first 8 did
    # on 2026-12-05): the snapshot is what is tested, on whatever fit takes it
    for seed in range(2, 22):
        t, y = d.sample(3000, np.random.default_rng(seed))
        est = MomentMulticalibrator(alpha=0.0005, label_range=(0, 1), calibration_fraction=0.3, n_moments=3).fit(
            t, y, GroupSet.from_columns(t, ["sex", "race", "age", "score"], 2)
        )
        if est.model_.info["early_stopped"]:
            break
    assert est.model_.info["early_stopped"]
    rows = est.fit_index_
    mu, moms = est.model_.predict_unit(_sub(t, rows), n=rows.size)
    assert np.array_equal(mu, est.fit_mean_unit_)
    assert all(np.array_equal(moms[a], est.fit_moments_unit_[a]) for a in (2, 3))


def test_label_ranges_whose_moment_powers_overflow_are_refused(tmp_path):
    """Found in an exploratory session: `mmc fit --label-range=0,1e308` fitted, then every predict and audit
    of the model died in `span ** a` (OverflowError). Such a range is refused when declared, observed or
    loaded from an edited model file, with what to do instead."""
    from mmc_core.common.errors import DataError
    from mmc_core.paper.moments import LabelScale

    with pytest.raises(DataError, match="rescale the label"):
        LabelScale.declared((0, 1e308))
    with pytest.raises(DataError, match="rescale the label"):
        LabelScale.declared((0, 1e-40))
    big = LabelScale.declared((0, 1e30))
    assert math.isfinite(float(big.moment_from_unit(np.array([1.0]), 8)[0]))
    rng = np.random.default_rng(0)
    t = {"g": rng.choice(["a", "b"], 200)}
    y = rng.normal(0, 1, 200)
    with pytest.raises(DataError, match="rescale the label"):
        MomentMulticalibrator(label_range=(0, 1e308)).fit(t, y, GroupSet.from_columns(t, ["g"]))
    with pytest.raises(DataError, match="rescale the label"):
        MomentMulticalibrator().fit(t, y * 1e35, GroupSet.from_columns(t, ["g"]))
    est = MomentMulticalibrator().fit(t, y, GroupSet.from_columns(t, ["g"]))
    path = tmp_path / "m.json"
    est.model_.save(path)
    rec = json.loads(path.read_text())
    rec["label_scale"]["hi"] = 1e308
    path.write_text(json.dumps(rec))
    with pytest.raises(ModelFormatError, match="rescale the label"):
        FittedModel.load(path)


@pytest.mark.parametrize("seed", [-1, True, 1.5, "3"])
def test_a_bad_seed_is_refused_naming_the_parameter(seed):
    """A negative seed ended in numpy's 'expected non-negative integer' from deep inside SeedSequence."""
    from mmc_core.discovery.discover_groups import discover

    rng = np.random.default_rng(0)
    t = {"g": rng.choice(["a", "b"], 100), "x": rng.normal(size=100)}
    y = rng.normal(size=100)
    with pytest.raises(MMCError, match="random_state must be a non-negative integer"):
        MomentMulticalibrator(random_state=seed).fit(t, y, GroupSet.from_columns(t, ["g"]))
    with pytest.raises(MMCError, match="seed must be a non-negative integer"):
        discover(t, y, prediction=np.zeros(100), features=["x"], seed=seed)


def test_se_rule_with_the_paper_step_is_named_as_the_auto_rule_it_falls_back_to():
    """Found in an exploratory browser session: with the paper's step the "se" thresholds fall back to the
    "auto" noise rule (z = 0), but the model's info kept alpha_rule "se", so the Run page, the Results header and
    the PDF said 'cells were corrected only when |t| >= 0.00 against their own standard error'."""
    rng = np.random.default_rng(0)
    t = {"g": rng.choice(["a", "b", "c"], 2000)}
    y = rng.normal(50, 10, 2000)
    est = MomentMulticalibrator(step="paper", label_range=(0, 100)).fit(t, y, GroupSet.from_columns(t, ["g"]))
    info = est.model_.info
    assert est.z_ == 0 and info["alpha_rule"] == info["beta_rule"] == "auto"
    assert est.planned_thresholds(t, y, GroupSet.from_columns(t, ["g"]))["rule"] == "auto"
    exact = MomentMulticalibrator(label_range=(0, 100)).fit(t, y, GroupSet.from_columns(t, ["g"]))
    assert exact.z_ > 0 and exact.model_.info["alpha_rule"] == "se"

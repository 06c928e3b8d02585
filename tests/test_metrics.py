"""The audit (mmc_core.auditing.metrics): every table checked against hand-computed values on a tiny table, the
bootstrap against a direct loop, the JSON form, and the MetricFrame-style views."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core import intervals as iv
from mmc_core.auditing.metrics import AuditResult, audit
from mmc_core.common.errors import DataError, MMCError
from mmc_core.common.synthetic import demo_distribution
from mmc_core.fit.model import FittedModel
from mmc_core.paper.descent import DescentParams, Update
from mmc_core.paper.moments import LabelScale


def tiny():
    """6 rows, groups all / g=a / g=b, label range [0, 10], mu = the base, m_2 = 0.01 (unit) except group b,
    whose moment is raised to 0.04 by one logged update. Two buckets per predictor."""
    table = {"g": np.array(["a", "a", "a", "b", "b", "b"], dtype=object)}
    y = np.array([1.0, 3.0, 5.0, 6.0, 8.0, 9.0])
    base = np.array([2.0, 3.0, 4.0, 7.0, 7.0, 8.0])
    groups = GroupSet.from_columns(table, ["g"], 1)
    params = DescentParams(alpha=0.01, beta=0.01, m=2, moments=(2,), step="exact")
    # group b (index 2): joint cells i * 2 + j with moment bucket j = 0 (0.01 < 0.125); subtract -0.03
    log = [Update(2, 2, 2, np.array([0, 2]), np.array([-0.03, -0.03]))]
    model = FittedModel(params, LabelScale(0.0, 10.0), groups, {"kind": "base", "column": "base"}, {2: 0.01}, log, [1])
    model.extras["intervals"] = {
        "format": "mmc-intervals",
        "version": 1,
        "deltas": [0.1],
        "center": "base",
        "split_conformal": [0.08],
        "gaussian": {"sd": 0.1},
    }
    return model, table, y, base


def test_tiny_table_by_hand():
    model, table, y, base = tiny()
    r = audit(
        model,
        table,
        y,
        base=base,
        delta=0.1,
        gamma=0.4,
        methods=("split-conformal", "gaussian"),
        n_boot=50,
        min_cell_count=1,
    )
    bg = r.by_group
    assert list(bg.index) == ["all", "g=a", "g=b"]
    # with the default minimum of 20 rows per cell, no cell of this tiny table counts for the unweighted worst
    assert audit(model, table, y, base=base, methods=("gaussian",), n_boot=5).by_group["calib_error_worst"].isna().all()
    assert bg["count"].tolist() == [6, 3, 3]
    np.testing.assert_allclose(bg["mass"], [1, 0.5, 0.5])
    np.testing.assert_allclose(bg["mean_label"], [32 / 6, 3, 23 / 3])
    np.testing.assert_allclose(bg["mean_pred"], [31 / 6, 3, 22 / 3])
    np.testing.assert_allclose(bg["mean_pred_base"], [31 / 6, 3, 22 / 3])
    # mean buckets (m = 2, unit scale): rows of a in bucket 0 (error 0), rows of b in bucket 1 (error -1/3)
    np.testing.assert_allclose(bg["calib_error_worst"], [1 / 3, 0, 1 / 3], atol=1e-12)
    np.testing.assert_allclose(bg["calib_error_worst_weighted"], [(3 / 6) / 3, 0, (3 / 6) / 3], atol=1e-12)
    np.testing.assert_allclose(bg["calib_error_worst_base"], bg["calib_error_worst"])  # mu is the base here
    # variances in label units (span 10: unit moment x 100)
    np.testing.assert_allclose(bg["pred_var"], [2.5, 1.0, 4.0])
    # residuals y - mu: a (-1, 0, 1), b (-1, 1, 1); each group's variance around its own mean residual, n - 1
    # denominator: all (5 - 1 / 6) / 5, a 2 / 2, b (3 - 1 / 3) / 2
    np.testing.assert_allclose(bg["emp_var"], [29 / 30, 1.0, 4 / 3])
    np.testing.assert_allclose(bg["label_var"], [np.var(y), np.var(y[:3]), np.var(y[3:])])
    np.testing.assert_allclose(bg["var_ratio"], [1.0, 0.4, 1.6])
    np.testing.assert_allclose(bg["emp_var_ratio"], [1.0, 30 / 29, 40 / 29])
    assert bg["large_enough"].tolist() == [True, True, True]
    # split conformal: base +- 0.8 covers rows 2 (y=3 in [2.2, 3.8]) only
    np.testing.assert_allclose(r.coverage["split-conformal"], [1 / 6, 1 / 3, 0.0])
    np.testing.assert_allclose(r.width["split-conformal"], [1.6, 1.6, 1.6])
    z = iv.normal_ppf(0.95)
    inside = np.abs(y - base) <= z * 1.0
    np.testing.assert_allclose(r.coverage["gaussian"], [inside.mean(), inside[:3].mean(), inside[3:].mean()])
    np.testing.assert_allclose(r.width["gaussian"], 2 * z)
    # calibration cells
    cc = r.calibration_cells.set_index(["group", "bucket"])
    assert cc.loc[("g=b", 1), "count"] == 3 and ("g=b", 0) not in cc.index
    assert cc.loc[("g=b", 1), "mean_pred"] == pytest.approx(22 / 3)
    assert cc.loc[("g=b", 1), "error"] == pytest.approx(22 / 3 - 23 / 3)
    assert cc.loc[("all", 0), "bucket_lo"] == 0 and cc.loc[("all", 0), "bucket_hi"] == 5
    assert cc.loc[("all", 1), "error_base"] == pytest.approx(-1 / 3)
    # moment cells: central moment around the cell's own label mean
    mc = r.moment_cells.set_index(["group", "moment", "mean_bucket", "moment_bucket"])
    row = mc.loc[("g=b", 2, 1, 0)]
    assert row["count"] == 3
    assert row["predicted"] == pytest.approx(4.0)
    assert row["empirical"] == pytest.approx(np.var(y[3:]))
    assert row["error"] == pytest.approx(4.0 - np.var(y[3:]))
    assert mc.loc[("g=a", 2, 0, 0), "empirical"] == pytest.approx(np.var(y[:3]))
    # coverage by bucket (bucket_method = the first computed one here)
    assert r.params["bucket_method"] == "split-conformal"
    np.testing.assert_allclose(r.coverage_by_bucket.loc["all"].to_numpy(), [1 / 3, 0.0])
    # overall and views
    assert r.overall["count"] == 6 and r.overall["coverage:split-conformal"] == pytest.approx(1 / 6)
    np.testing.assert_allclose(r.difference("pred_var"), [0, -1.5, 1.5])
    np.testing.assert_allclose(r.ratio("pred_var"), [1, 0.4, 1.6])
    np.testing.assert_allclose(r.difference("coverage:split-conformal"), [0, 1 / 6, -1 / 6])
    with pytest.raises(MMCError):
        r.difference("nope")
    # the methods the hand record cannot serve are reported, not silently dropped
    assert r.params["methods"] == ["split-conformal", "gaussian"]


def test_unavailable_methods_and_guarantee_share():
    model, table, y, base = tiny()
    r = audit(model, table, y, base=base, gamma=0.4, methods=("guaranteed", "split-conformal"), n_boot=0)
    assert set(r.coverage.columns) == {"guaranteed", "split-conformal"}
    # cells G(mu, m_2, i, j): all has (0, 0) with 3 rows and (1, 0) with 3 rows: mass 0.5 >= 0.4
    np.testing.assert_allclose(r.by_group["guarantee_share"], [1, 1, 1])
    r2 = audit(model, table, y, base=base, gamma=0.6, methods=("guaranteed",), n_boot=0)
    np.testing.assert_allclose(r2.by_group["guarantee_share"], [0, 0, 0])
    assert r2.by_group["large_enough"].tolist() == [True, False, False]
    model.extras.pop("intervals")
    r3 = audit(model, table, y, base=base, methods=iv.METHODS, n_boot=0)
    assert "calibrated" in r3.params["methods_unavailable"]
    assert "calibration-fraction" in r3.params["methods_unavailable"]["calibrated"]
    assert "guaranteed" in r3.coverage.columns


def test_bootstrap_matches_direct_loop():
    model, table, y, base = tiny()
    B, seed = 40, 7
    r = audit(model, table, y, base=base, methods=(), n_boot=B, seed=seed)
    # the same draws, in a plain loop
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, 6, size=(B, 6))
    mu, moms = model.predict_unit(table, (base - 0) / 10)
    groups = [np.ones(6, bool), table["g"] == "a", table["g"] == "b"]
    ratios = np.empty((B, 3))
    for b in range(B):
        w = np.bincount(idx[b], minlength=6)
        means = [np.sum(w[m] * moms[2][m]) / np.sum(w[m]) if w[m].sum() else np.nan for m in groups]
        ratios[b] = np.array(means) / means[0]
    lo = np.nanquantile(ratios, 0.025, axis=0)
    hi = np.nanquantile(ratios, 0.975, axis=0)
    np.testing.assert_allclose(r.by_group["var_ratio_lo"], lo)
    np.testing.assert_allclose(r.by_group["var_ratio_hi"], hi)


def test_bootstrap_paths_agree():
    """The signature path (rows with the same groups summed first) and the membership-pairs path."""
    from mmc_core.auditing.audit_tables import bootstrap_ratios
    from mmc_core.groups.sums import MembershipSums

    rng = np.random.default_rng(3)
    table = {"a": rng.choice(["x", "y", "z"], 300), "b": rng.choice(["u", "v"], 300)}
    memb = GroupSet.from_columns(table, ["a", "b"], 2).evaluate(table, 300)
    vals = {"v": rng.exponential(size=300)}
    fast = bootstrap_ratios(MembershipSums(memb, by_signature=True), vals, 30, 5)
    slow = bootstrap_ratios(MembershipSums(memb, by_signature=False), vals, 30, 5)
    np.testing.assert_allclose(fast["v"][0], slow["v"][0], rtol=1e-12)
    np.testing.assert_allclose(fast["v"][1], slow["v"][1], rtol=1e-12)


def test_no_bootstrap_gives_nan_ci():
    model, table, y, base = tiny()
    r = audit(model, table, y, base=base, methods=(), n_boot=0)
    assert r.by_group["var_ratio_lo"].isna().all()
    with pytest.raises(MMCError):
        audit(model, table, y, base=base, n_boot=-1)


def test_json_strict_and_readable():
    model, table, y, base = tiny()
    r = audit(model, table, y, base=base, methods=("split-conformal",), n_boot=0)
    d = r.to_json()
    text = json.dumps(d, allow_nan=False)  # strict JSON: NaN -> null
    d2 = json.loads(text)
    assert d2["format"] == "mmc-audit-audit" and d2["version"] == 1
    for key in ("by_group", "coverage", "width", "calibration_cells", "moment_cells", "coverage_by_bucket"):
        frame = pd.DataFrame(**d2[key])
        assert frame.shape == getattr(r, key).shape
    bg = pd.DataFrame(**d2["by_group"])
    assert bg["var_ratio_lo"].isna().all()
    np.testing.assert_allclose(bg["pred_var"].astype(float), r.by_group["pred_var"])
    assert d2["params"]["delta"] == 0.1 and isinstance(d2["findings"], list)
    assert d2["overall"]["count"] == 6


def test_errors():
    model, table, y, base = tiny()
    with pytest.raises(DataError):
        audit(model, table, y[:5], base=base)
    with pytest.raises(DataError):
        audit(model, table, np.array([1, 2, np.nan, 4, 5, 6.0]), base=base)
    with pytest.raises(MMCError, match="base prediction"):
        audit(model, table, y)
    with pytest.raises(MMCError):
        audit(model, table, y, base=base, delta=1.5)
    with pytest.raises(MMCError, match="unknown interval method"):
        audit(model, table, y, base=base, methods=("nope",))


@pytest.fixture(scope="module")
def synthetic_audit():
    dist = demo_distribution()
    t = dist.sample_table(4000, np.random.default_rng(2))
    df = pd.DataFrame(t)
    tr, te = df.iloc[:2500], df.iloc[2500:].reset_index(drop=True)
    est = MomentMulticalibrator(label_range=(0, 100), calibration_fraction=0.3, n_moments=3).fit(
        tr,
        tr["outcome"].to_numpy(),
        GroupSet.from_columns(tr, ["sex", "race", "age"], 2),
        base_prediction=tr["base_pred"].to_numpy(),
    )
    return est, te, audit(est.model_, te, te["outcome"].to_numpy(), base=te["base_pred"].to_numpy())


def test_synthetic_audit_consistency(synthetic_audit):
    est, te, r = synthetic_audit
    assert isinstance(r, AuditResult)
    assert list(r.coverage.columns) == list(iv.METHODS)
    # coverage agrees with predict_intervals
    lo, hi = iv.predict_intervals(est.model_, te, base=te["base_pred"].to_numpy(), method="calibrated")
    y = te["outcome"].to_numpy()
    assert r.coverage.loc["all", "calibrated"] == pytest.approx(np.mean((y >= lo) & (y <= hi)))
    assert r.width.loc["all", "calibrated"] == pytest.approx(np.mean(hi - lo))
    d = (te["race"] == "D").to_numpy()
    assert r.coverage.loc["race=D", "calibrated"] == pytest.approx(np.mean(((y >= lo) & (y <= hi))[d]))
    # race D is the noisiest group of the ground truth: the model says so, with a CI above 1
    assert r.by_group.loc["race=D", "var_ratio_lo"] > 1
    assert (
        r.by_group.loc["race=D", "var_ratio_lo"]
        <= r.by_group.loc["race=D", "var_ratio"]
        <= r.by_group.loc["race=D", "var_ratio_hi"]
    )
    # the multicalibrated mean fixes the base's bias on race D (the base misses +8 points there)
    assert (
        r.by_group.loc["race=D", "calib_error_worst_weighted"]
        < r.by_group.loc["race=D", "calib_error_worst_weighted_base"]
    )
    # moment cells cover moments 2 and 3 and their counts add up per group and moment
    mc = r.moment_cells
    assert set(mc["moment"]) == {2, 3}
    sums = mc.groupby(["group", "moment"])["count"].sum().unstack()
    np.testing.assert_array_equal(sums[2].reindex(r.by_group.index).to_numpy(), r.by_group["count"].to_numpy())
    # the calibration cells of each group add up to its count, for the model and for the base
    cc = r.calibration_cells.groupby("group")[["count", "count_base"]].sum().reindex(r.by_group.index)
    np.testing.assert_array_equal(cc["count"].to_numpy(), r.by_group["count"].to_numpy())
    np.testing.assert_array_equal(cc["count_base"].to_numpy(), r.by_group["count"].to_numpy())


def test_findings(synthetic_audit):
    est, te, r = synthetic_audit
    assert r.findings_status == "ok"
    # (the model is right on fresh rows here: no findings, so the per-finding checks run on a planted defect)
    assert r.findings == []
    race_d = (te["race"] == "D").to_numpy()
    y = te["outcome"].to_numpy() + 10.0 * race_d  # race D's labels 10 points above what the model predicts
    planted = audit(est.model_, te, y, base=te["base_pred"].to_numpy(), n_boot=0)
    assert planted.findings_status == "ok" and planted.findings
    for f in planted.findings:
        assert f["n"] >= planted.params["min_group_count"] and f["text"].endswith(").")
    # the defect is found where it was planted, in the right direction
    assert any("race=D" in f["text"] and "under-predicts the mean" in f["text"] for f in planted.findings)
    assert not any("over-predicts the mean" in f["text"] and "race=D" in f["text"] for f in planted.findings)
    # race D is the noisiest group of the ground truth: reported as a disparity (descriptive), with its CI
    d = {x["group"]: x for x in r.disparities}
    assert "race=D" in d and d["race=D"]["interval"][0] > 1
    assert "predicted variance for group race=D" in d["race=D"]["text"] and "95% CI" in d["race=D"]["text"]


def test_audit_uses_the_models_own_mean_buckets():
    """A model with quantile mean buckets is audited on those buckets (the uniform grid would mix cells)."""
    df = pd.DataFrame(demo_distribution().sample_table(3000, np.random.default_rng(4), truth=False))
    tr, te = df.iloc[:2000], df.iloc[2000:].reset_index(drop=True)
    est = MomentMulticalibrator(label_range=(0, 100), mean_buckets="quantile").fit(
        tr, tr["outcome"], GroupSet.from_columns(tr, ["race"], 1), base_prediction=tr["base_pred"]
    )
    grid = est.model_.params.mean_grid
    assert not grid.uniform
    r = audit(est.model_, te, te["outcome"], base=te["base_pred"], n_boot=0)
    edges = np.asarray(r.params["mean_buckets"])
    np.testing.assert_allclose(edges, est.model_.scale.mean_from_unit(grid.edges()))
    mu = est.predict(te, base_prediction=te["base_pred"])
    b = np.searchsorted(edges[1:-1], mu, side="right")
    np.testing.assert_array_equal(
        r.calibration_cells.query("group == 'all'").set_index("bucket")["count"],
        np.bincount(b, minlength=grid.m)[np.bincount(b, minlength=grid.m) > 0],
    )


def test_audit_errors_name_what_is_wrong():
    """A label column one row short was reported as "the base prediction must be 999 finite numbers"; text labels
    raised numpy's "could not convert string to float"; a Series' own name was not used."""
    model, table, y, base = tiny()
    with pytest.raises(DataError, match="the table has 6 rows but there are 5 labels"):
        audit(model, table, y[:5], base=base)
    with pytest.raises(DataError, match="label 'grade' must be numeric"):
        audit(model, table, pd.Series(list("abcdef"), name="grade"), base=base)
    with pytest.raises(DataError, match="the base prediction has 1 missing or infinite value"):
        audit(model, table, y, base=np.where(np.arange(6) == 2, np.nan, base))


def test_fit_names_a_label_series_by_its_own_name():
    df = pd.DataFrame({"g": ["a", "b"] * 30, "y": np.linspace(0, 1, 60)})
    y = df["y"].where(df.index != 5)
    with pytest.raises(DataError, match="label 'y' has 1 missing or infinite value"):
        MomentMulticalibrator(label_range=(0, 1)).fit(df, y, GroupSet.from_columns(df, ["g"]))


def test_no_interval_around_an_undefined_variance_ratio():
    """A 1-row group has no residual variance (ratio NaN) and its bootstrap interval read [0, 0]."""
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"g": ["a"] * 199 + ["solo"], "x": rng.normal(size=200)})
    y = df["x"].to_numpy() + rng.normal(size=200)
    groups = GroupSet.from_columns(df, ["g"])
    est = MomentMulticalibrator(label_range=(-10, 10)).fit(df, y, groups, base_prediction=df["x"])
    bg = audit(est.model_, df, y, base=df["x"], n_boot=50).by_group
    solo = bg.loc["g=solo"]
    assert solo["count"] == 1 and np.isnan(solo["emp_var_ratio"])
    assert np.isnan(solo["emp_var_ratio_lo"]) and np.isnan(solo["emp_var_ratio_hi"])
    assert np.isfinite(bg.loc["g=a", ["emp_var_ratio_lo", "emp_var_ratio_hi"]].astype(float)).all()

"""Cross-fitted interval calibration (``interval_calibration="cross-fit"``, mmc_core.estimator.crossfit).

What is checked, against the statements of the mmc_core.intervals docstring ("Cross-fitted calibration"):

1. Deterministic: every group with n_g rows has at least k_g of its OUT-OF-FOLD scores inside the interval the
   record gives (the count guarantee of ``cc``, now on all n rows with the out-of-fold predictions).
2. The record is computed on every row with the out-of-fold predictions by the same code path as the held-out
   record (``calibrate(..., predictions=...)`` equals ``calibrate`` without them when the predictions are the
   model's own), and a model saved to JSON and loaded predicts the same intervals.
3. Parameter handling: the default is "held-out"; "auto" cross-fits in memory (the Dask engine keeps held-out calibration:
   tests/test_dask_engine.py); a bad value is an MMCError naming the parameter; the Dask engine refuses
   "cross-fit".
4. Statistical (slow): on a distribution with known ground truth (finite feature support, Beta labels: the
   population coverage of any interval is an exact finite sum of Beta probabilities), the per-group population
   coverage of the final model's cross-fit-calibrated intervals, averaged over R independent training samples,
   is at least 1 - delta up to 3 Monte Carlo standard errors: the in-expectation statement, which for
   cross-fitting is approximate (not a theorem) and therefore checked.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core import intervals as iv
from mmc_core.common.errors import MMCError
from mmc_core.common.synthetic import demo_distribution
from mmc_core.estimator.crossfit import CROSS_FIT_FOLDS, fold_ids

DIST = demo_distribution()
COLS = ["sex", "race", "age"]


def _sample(n, seed):
    rng = np.random.default_rng(seed)
    tr = pd.DataFrame(DIST.sample_table(n, rng, truth=False))
    return tr, GroupSet.from_columns(tr, COLS, 2)


def _fit(tr, gs, **kw):
    return MomentMulticalibrator(n_moments=2, label_range=(0, 100), interval_calibration="cross-fit", **kw).fit(
        tr, tr["outcome"], gs, base_prediction=tr["base_pred"]
    )


@pytest.fixture(scope="module")
def fitted():
    tr, gs = _sample(1500, 11)
    return tr, gs, _fit(tr, gs, random_state=3)


def test_folds_partition_rows():
    f = fold_ids(103, 5)
    assert set(np.unique(f)) == set(range(CROSS_FIT_FOLDS))
    assert np.bincount(f).max() - np.bincount(f).min() <= 1
    assert np.array_equal(f, fold_ids(103, 5)) and not np.array_equal(f, fold_ids(103, 6))


def test_record_uses_every_row(fitted):
    tr, gs, est = fitted
    rec = est.model_.extras["intervals"]
    assert rec["rows"] == "cross-fit" and rec["folds"] == CROSS_FIT_FOLDS and rec["n"] == len(tr)
    assert rec["calibrated"]["options"]["margin"] == iv.CC_MARGIN_CROSS_FIT
    oof = est.oof_predictions_unit_
    assert oof["mean"].shape == (len(tr),) and set(oof["moments"]) == {2}
    assert np.array_equal(np.sort(np.unique(oof["fold"])), np.arange(CROSS_FIT_FOLDS))
    # the final model is the held-out fit's: same parameters, same split, same log
    ho = MomentMulticalibrator(n_moments=2, label_range=(0, 100), random_state=3, interval_calibration="held-out").fit(
        tr, tr["outcome"], gs, base_prediction=tr["base_pred"]
    )
    assert ho.model_.extras["intervals"]["rows"] == "held-out"
    assert np.array_equal(ho.predict(tr, tr["base_pred"]), est.predict(tr, tr["base_pred"]))
    # out-of-fold predictions differ from the final model's own (they come from other fits)
    own_mu, _ = est.model_.predict_unit(tr, (tr["base_pred"].to_numpy() - 0) / 100, len(tr))
    assert not np.allclose(own_mu, oof["mean"])


@pytest.mark.parametrize("delta", [0.05, 0.1, 0.2])
def test_count_guarantee_on_out_of_fold_scores(fitted, delta):
    """Every group (n_g rows, all of them calibration rows) has >= k_g rows whose out-of-fold score is inside."""
    tr, gs, est = fitted
    model, oof = est.model_, est.oof_predictions_unit_
    ctx = iv.IntervalContext(model, tr, tr["base_pred"].to_numpy())
    ctx.mu, ctx.moms = oof["mean"], oof["moments"]  # the out-of-fold predictions in place of the final model's
    mu, (h_lo, h_up), _ = iv.half_calibrated(ctx, delta, 0.05)
    y = model.scale.to_unit(tr["outcome"].to_numpy())
    inside = (y >= mu - h_lo) & (y <= mu + h_up)
    dense = ctx.memb.to_dense()
    n_g = dense.sum(0).astype(float)
    cnt = (dense & inside[:, None]).sum(0)
    tau = (
        1
        - delta
        + est.model_.extras["intervals"]["calibrated"]["options"]["margin"]
        * np.sqrt(delta * (1 - delta) / np.maximum(n_g, 1))
    )
    k = np.minimum(np.ceil((n_g + 1) * tau - 1e-9), n_g)
    assert np.all(cnt[n_g > 0] >= k[n_g > 0]), (delta, cnt, k)


def test_one_code_path(fitted):
    """calibrate with the model's own predictions passed in equals calibrate computing them."""
    tr, gs, est = fitted
    model = est.model_
    idx = est.calibration_index_
    sub = tr.iloc[idx].reset_index(drop=True)
    yu, bu = model.scale.to_unit(sub["outcome"].to_numpy()), model.scale.to_unit(sub["base_pred"].to_numpy())
    a = iv.calibrate(model, sub, yu, bu)
    mu, moms = model.predict_unit(sub, bu, len(sub))
    b = iv.calibrate(model, sub, yu, bu, predictions=(mu, moms))
    assert a == b
    with pytest.raises(MMCError, match="predictions"):
        iv.calibrate(model, sub, yu, bu, predictions=(mu[:-1], moms))


def test_save_load_same_intervals(fitted, tmp_path):
    tr, gs, est = fitted
    te, _ = _sample(400, 12)
    path = tmp_path / "m.json"
    est.save(path)
    back = MomentMulticalibrator.load(path)
    assert back.interval_calibration == "cross-fit" and back.oof_predictions_unit_ is None
    for method in ("calibrated", "mondrian", "split-conformal", "plugin"):
        a = est.predict_interval(te, te["base_pred"], method=method)
        b = back.predict_interval(te, te["base_pred"], method=method)
        assert np.array_equal(a, b), method


def test_default_is_held_out_and_auto_cross_fits_in_memory():
    """Held-out is the default: cross-fitted records under-covered groups of two unseen tables (issue 9)."""
    tr, gs = _sample(300, 2)
    est = MomentMulticalibrator(n_moments=2, label_range=(0, 100)).fit(tr, tr["outcome"], gs)
    assert est.interval_calibration == "held-out" and est.model_.extras["intervals"]["rows"] == "held-out"
    assert est.oof_predictions_unit_ is None
    est = MomentMulticalibrator(n_moments=2, label_range=(0, 100), interval_calibration="auto").fit(
        tr, tr["outcome"], gs
    )
    assert est.model_.extras["intervals"]["rows"] == "cross-fit" and est.model_.extras["intervals"]["n"] == 300
    # no held-out rows: nothing to calibrate on, whichever mode
    est0 = MomentMulticalibrator(n_moments=2, calibration_fraction=0.0).fit(tr, tr["outcome"], gs)
    assert "intervals" not in est0.model_.extras and est0.oof_predictions_unit_ is None


def test_auto_calibrates_on_the_held_out_rows_above_the_size_limit_and_after_a_stop(monkeypatch):
    """Large tables: five more fits cost minutes while every group already has many held-out rows. A stopped
    fit: its fold models would be as partial as it is, and the analyst is waiting."""
    import mmc_core.estimator.crossfit as cf

    tr, gs = _sample(400, 5)
    auto = dict(n_moments=2, label_range=(0, 100), interval_calibration="auto")
    monkeypatch.setattr(cf, "CROSS_FIT_MAX_ROWS", 399)
    est = MomentMulticalibrator(**auto).fit(tr, tr["outcome"], gs)
    assert est.model_.extras["intervals"]["rows"] == "held-out" and est.oof_predictions_unit_ is None
    monkeypatch.setattr(cf, "CROSS_FIT_MAX_ROWS", 400)
    est = MomentMulticalibrator(**auto).fit(tr, tr["outcome"], gs)
    assert est.model_.extras["intervals"]["rows"] == "cross-fit"
    # an explicit "cross-fit" ignores the size limit
    monkeypatch.setattr(cf, "CROSS_FIT_MAX_ROWS", 10)
    est = _fit(tr, gs)
    assert est.model_.extras["intervals"]["rows"] == "cross-fit"
    stopped = _fit(tr, gs, random_state=0)
    stopped.fit(tr, tr["outcome"], gs, base_prediction=tr["base_pred"], stop=lambda: True)
    assert stopped.model_.info["stopped_by_user"] is True
    assert stopped.model_.extras["intervals"]["rows"] == "held-out" and stopped.oof_predictions_unit_ is None


@pytest.mark.parametrize("bad", ["crossfit", "", None, 5, "cross-fit "])
def test_bad_value_names_parameter(bad):
    tr, gs = _sample(200, 1)
    with pytest.raises(MMCError, match="interval_calibration"):
        MomentMulticalibrator(interval_calibration=bad).fit(tr, tr["outcome"], gs)


def test_table_without_columns():
    """Only the whole population: the fold models get the rows without any column (as the final fit does)."""
    tr, _ = _sample(300, 4)
    est = MomentMulticalibrator(n_moments=2, interval_calibration="cross-fit").fit(
        pd.DataFrame(index=range(300)), tr["outcome"].to_numpy(), None
    )
    assert est.model_.extras["intervals"]["rows"] == "cross-fit"


def test_dask_engine_refuses_cross_fit():
    pytest.importorskip("dask.dataframe")
    from mmc_core.engines import dask_engine

    tr, gs = _sample(200, 1)
    est = MomentMulticalibrator(interval_calibration="cross-fit")
    with pytest.raises(MMCError, match="interval_calibration='cross-fit' is not supported by the Dask engine"):
        dask_engine.fit_dask(est, tr, "outcome", gs)


@pytest.mark.slow
def test_population_coverage_in_expectation():
    stats = pytest.importorskip("scipy.stats")
    delta, n, R = 0.1, 2000, 30
    support, prob = DIST.support()
    sup = pd.DataFrame(support)
    mu_t, sd_t = DIST.true_mean(support), DIST.true_sd(support)
    kappa = mu_t * (1 - mu_t) / sd_t**2 - 1
    pa, pb = mu_t * kappa, (1 - mu_t) * kappa
    base_sup = 100 * DIST.base_prediction(support)
    covs = []
    names = None
    for r in range(R):
        tr, gs = _sample(n, 1000 + r)
        est = _fit(tr, gs, random_state=r)
        lo, hi = est.predict_interval(sup, base_sup, delta=delta).T
        cov_cell = stats.beta.cdf(np.clip(hi / 100, 0, 1), pa, pb) - stats.beta.cdf(np.clip(lo / 100, 0, 1), pa, pb)
        dense = gs.evaluate(support, len(prob)).to_dense()
        w = dense * prob[:, None]
        covs.append((w * cov_cell[:, None]).sum(0) / w.sum(0))
        names = gs.names
    covs = np.array(covs)
    mean, sd = covs.mean(0), covs.std(0, ddof=1)
    assert np.all(mean >= 1 - delta - 3 * sd / math.sqrt(R)), dict(zip(names, mean.round(3)))

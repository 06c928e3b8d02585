"""``base_recalibration="affine"``: an over-spread base prediction is mapped to a + b x base before the descent,
the map travels in the model file, and predict applies it to the base it is given."""

import json

import numpy as np
import pytest

from mmc_core import FittedModel, GroupSet, MomentMulticalibrator
from mmc_core.errors import MMCError, ModelFormatError
from mmc_core.estimator import fit_affine


def _world(n, seed, spread=1.8):
    """True mean 50 + 10 g + 8 z on a 0-100 label with noise sd 10; the base over-spreads around the mean by
    ``spread`` (an over-fitted model): the least-squares slope of y on the base is 1 / spread."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 3, n)
    z = rng.normal(size=n)
    truth = 50 + 10 * (g - 1) + 8 * z
    y = np.clip(truth + rng.normal(0, 10, n), 0, 100)
    base = np.clip(50 + spread * (truth - 50), 0, 100)
    return {"g": g.astype(str)}, y, base, truth


def test_fit_affine_recovers_the_line_and_handles_a_constant_base():
    rng = np.random.default_rng(0)
    b = rng.random(5000)
    a_, s_ = fit_affine(0.1 + 0.5 * b, b)
    assert a_ == pytest.approx(0.1, abs=1e-12) and s_ == pytest.approx(0.5, abs=1e-12)
    a_, s_ = fit_affine(np.array([0.2, 0.4, 0.6]), np.full(3, 0.3))
    assert s_ == 1.0 and a_ == pytest.approx(0.1)


def test_affine_recalibration_removes_the_spread_and_beats_the_plain_fit_on_fresh_rows():
    X, y, base, _ = _world(20_000, 1)
    groups = GroupSet.from_columns(X, ["g"])
    plain = MomentMulticalibrator(label_range=(0, 100), random_state=0).fit(X, y, groups, base_prediction=base)
    aff = MomentMulticalibrator(label_range=(0, 100), random_state=0, base_recalibration="affine")
    aff.fit(X, y, groups, base_prediction=base)
    init = aff.model_.init_mean
    # the slope of y on the base is 1 / 1.8 = 0.556 (sampling error of the slope here ~0.005)
    assert init["kind"] == "base-affine" and init["slope"] == pytest.approx(1 / 1.8, abs=0.02)
    Xt, yt, bt, truth = _world(20_000, 2)
    err_plain = np.mean((plain.predict(Xt, base_prediction=bt) - truth) ** 2)
    err_aff = np.mean((aff.predict(Xt, base_prediction=bt) - truth) ** 2)
    # the plain fit can only shift 5 mean buckets: a residual slope is left within each bucket
    assert err_aff < 0.5 * err_plain, (err_aff, err_plain)


def test_the_map_is_saved_applied_on_predict_and_refused_by_a_reader_that_does_not_know_it(tmp_path):
    X, y, base, _ = _world(4_000, 3)
    est = MomentMulticalibrator(label_range=(0, 100), random_state=0, base_recalibration="affine")
    est.fit(X, y, GroupSet.from_columns(X, ["g"]), base_prediction=base)
    path = tmp_path / "m.json"
    est.save(path)
    loaded = FittedModel.load(path)
    np.testing.assert_array_equal(loaded.predict(X, base)["mean"], est.predict(X, base_prediction=base))
    # the fitting rows' predictions replay exactly from the file (the map is applied to the base as given)
    fit_rows = est.fit_index_
    mu_fit = loaded.predict_unit({"g": X["g"][fit_rows]}, (base[fit_rows] - 0) / 100)[0]
    np.testing.assert_array_equal(mu_fit, est.fit_mean_unit_)
    d = json.loads(path.read_text())
    # a new kind, not a new key of "base": a reader that knows only "constant" / "base" refuses the file
    # instead of silently predicting without the map
    assert d["init"]["mean"]["kind"] == "base-affine"
    d["init"]["mean"]["slope"] = "steep"
    with pytest.raises(ModelFormatError, match="slope"):
        FittedModel.from_dict(d)


def test_bad_setting_and_no_base():
    X, y, base, _ = _world(500, 4)
    with pytest.raises(MMCError, match="base_recalibration"):
        MomentMulticalibrator(base_recalibration="linear").fit(
            X, y, GroupSet.from_columns(X, ["g"]), base_prediction=base
        )
    # without a base prediction there is nothing to map: the constant start is kept
    est = MomentMulticalibrator(label_range=(0, 100), base_recalibration="affine").fit(
        X, y, GroupSet.from_columns(X, ["g"])
    )
    assert est.model_.init_mean["kind"] == "constant"

"""The moment's level after the cells (mmc_core.fit.cells._level_round via gated_moment_cells): every row's moment is
multiplied by the factor that makes its sum equal the pseudo-labels' over the fitting and held-out rows together.
In-sample residuals are smaller than new rows' (the mean was fitted on them), so the level from the fitting rows
alone is too low; checked on a world whose true residual variance on new rows is known."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from mmc_core import FittedModel, GroupSet, MomentMulticalibrator
from mmc_core.estimator.cells_text import describe_cells
from mmc_core.fit import cells
from mmc_core.groups.sums import MembershipSums  # noqa: F401 - the type gated_moment_cells takes

SIGMA = 10.0


def _world(n: int, seed: int):
    """30 groups with no real mean difference: whatever the fit moves per group is noise that new rows do not
    share; the label's true variance around any fixed prediction is SIGMA^2 plus that prediction's squared error."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.choice([f"a{i}" for i in range(15)], n), "b": rng.choice(list("pq"), n)})
    y = 50 + SIGMA * rng.standard_normal(n)
    return X, y


def test_the_level_round_matches_the_sums_it_is_fitted_to():
    rng = np.random.default_rng(0)
    s, s_h = rng.exponential(2.0, 300), rng.exponential(2.5, 100)
    v, v_h = np.full(300, 1.5), np.full(100, 1.5)
    rd = cells._level_round(s, v, s_h, v_h, 4, 100)
    c = np.exp(rd["values"][0][0])
    assert np.isclose(c * (v.sum() + v_h.sum()), s.sum() + s_h.sum())
    assert np.all(np.asarray(rd["values"])[1:] == 0) and rd["edges"] == []
    assert cells._level_round(s, v, s_h[:5], v_h[:5], 4, 5) is None  # too few held-out rows to trust


@pytest.mark.slow
def test_the_level_brings_the_variance_to_new_rows_level(monkeypatch):
    """Over 6 seeds, |log(mean predicted variance / mean squared residual on 20,000 new rows)|: the level makes
    it smaller on average than the fit without it (the in-sample residuals' level is too low by the share of the
    mean's noise the fit took in)."""
    errs = {"level": [], "without": []}
    fresh_X, fresh_y = _world(20000, 99)
    for seed in range(6):
        X, y = _world(2000, seed)
        groups = GroupSet.from_columns(X, ["a", "b"], 2)
        for what in errs:
            if what == "without":
                monkeypatch.setattr(cells, "LEVEL_MIN_HELD_OUT", 10**9)
            else:
                monkeypatch.setattr(cells, "LEVEL_MIN_HELD_OUT", 20)
            est = MomentMulticalibrator(random_state=seed).fit(X, y, groups)
            pm = est.predict_moments(fresh_X)
            errs[what].append(abs(np.log(pm["moment_2"].mean() / np.mean((fresh_y - pm["mean"]) ** 2))))
    assert np.mean(errs["level"]) < np.mean(errs["without"]), errs


def test_a_model_with_a_level_round_trips_and_says_so(tmp_path):
    X, y = _world(3000, 1)
    est = MomentMulticalibrator(random_state=1).fit(X, y, GroupSet.from_columns(X, ["a", "b"], 2))
    mc = est.model_.info["moment_cells"]["2"]
    assert mc.get("level", 0) > 0
    rounds = est.model_.moment_cells[2]["rounds"]
    assert rounds[-1]["edges"] == [] and rounds[-1]["penalty"] == 0.0
    path = tmp_path / "m.json"
    est.save(path)
    back = FittedModel.load(path)
    np.testing.assert_allclose(back.predict(X)["moment_2"], est.predict_moments(X)["moment_2"], rtol=1e-12)
    assert "its level set to the fitting and held-out rows'" in describe_cells(json.loads(path.read_text())["info"])

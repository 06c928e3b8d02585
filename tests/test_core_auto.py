"""The "auto" thresholds: set from the sampling noise, they keep the descent from fitting noise."""

from __future__ import annotations

import numpy as np
import pytest

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.fit import auto_threshold


def _noise_problem(n, seed):
    rng = np.random.default_rng(seed)
    t = {c: rng.integers(0, k, n) for c, k in (("a", 4), ("b", 3), ("c", 5), ("d", 2))}
    base = 0.3 + 0.4 * rng.random(n)
    y = np.clip(base + 0.12 * rng.standard_normal(n), 0, 1)
    return t, y, base


def _heldout_excess(alpha, beta, seed=0):
    """Held-out squared error of the fit relative to the base prediction's: (excess, its standard error), both
    as a fraction of the base's held-out mean squared error. The excess is the mean over held-out rows of
    d_i = (pred_i - y_i)^2 - (base_i - y_i)^2 (paired), its standard error std(d) / sqrt(n_test)."""
    t, y, base = _noise_problem(3000, seed)
    tr, te = np.arange(1500), np.arange(1500, 3000)
    sub = lambda idx: {c: v[idx] for c, v in t.items()}  # noqa: E731
    groups = GroupSet.from_columns(sub(tr), list(t), 2)
    est = MomentMulticalibrator(alpha=alpha, beta=beta, label_range=(0, 1), calibration_fraction=0).fit(
        sub(tr), y[tr], groups, base[tr]
    )
    pred = est.predict(sub(te), base[te])
    d = (pred - y[te]) ** 2 - (base[te] - y[te]) ** 2
    scale = np.mean((base[te] - y[te]) ** 2)
    return d.mean() / scale, d.std(ddof=1) / np.sqrt(d.size) / scale, est


def test_auto_threshold_scales_with_noise_and_sample_size():
    # proportional to the noise spread and to 1 / sqrt(n) (values far from the safety clip of the range)
    assert auto_threshold(0.1, 1000, 40_000) == pytest.approx(auto_threshold(0.1, 1000, 10_000) / 2, rel=1e-12)
    assert auto_threshold(0.2, 1000, 10_000) == pytest.approx(2 * auto_threshold(0.1, 1000, 10_000), rel=1e-12)
    assert auto_threshold(0.1, 10_000, 10_000) > auto_threshold(0.1, 100, 10_000)


def test_auto_threshold_does_not_flag_pure_noise_cells():
    """The documented promise, on data whose truth is known: K disjoint cells of 5% of the rows each, labels pure
    noise around a correct prediction (sd = the spread passed in). A cell is flagged when its mass-weighted
    residual |sum_cell r| / n reaches the threshold; over R independent tables the share of tables with any flagged
    cell (family-wise false flags) is at most the level 0.1, up to 3 binomial standard errors over R."""
    from mmc_core.fit import AUTO_LEVEL

    rng = np.random.default_rng(0)
    K, rows_per_cell, sd, R = 20, 500, 0.15, 1500
    n = K * rows_per_cell  # every cell holds 5% of the rows
    thr = auto_threshold(sd, K, n)
    cell = np.repeat(np.arange(K), rows_per_cell)
    any_flag = 0
    for _ in range(R):
        r = sd * rng.standard_normal(n)
        any_flag += bool(np.any(np.abs(np.bincount(cell, weights=r, minlength=K)) / n >= thr))
    rate = any_flag / R
    assert rate <= AUTO_LEVEL + 3 * np.sqrt(AUTO_LEVEL * (1 - AUTO_LEVEL) / R), rate


def test_auto_does_not_fit_noise_where_a_tiny_alpha_does():
    """Groups carry no signal and the base prediction is the true mean: any change is fitted noise."""
    # the unguarded descent hurts the held-out error beyond sampling noise (3 paired standard errors), so the
    # problem can show fitted noise; the "auto" fit does not: its excess is within 3 standard errors of zero
    tiny, tiny_se, _ = _heldout_excess(0.0005, 0.0001)
    auto, auto_se, est = _heldout_excess("auto", "auto")
    assert tiny > 3 * tiny_se, (tiny, tiny_se)
    assert auto <= 3 * auto_se, (auto, auto_se)
    assert est.model_.info["alpha_rule"] == "auto" and est.alpha_ == est.model_.params.alpha


def test_auto_beta_is_per_moment_and_saved():
    from mmc_core import FittedModel
    from mmc_core.common.synthetic import demo_distribution

    t = demo_distribution().sample_table(4000, np.random.default_rng(0))
    est = MomentMulticalibrator(n_moments=4, label_range=(0, 100)).fit(
        t, t["outcome"], GroupSet.from_columns(t, ["race", "age"], 2), base_prediction=t["base_pred"]
    )
    b = est.moment_betas_
    assert set(b) == {2, 3, 4} and b[4] < b[2]  # the fourth moment lives on a far smaller scale
    again = FittedModel.from_json(est.model_.to_json())
    assert {a: again.params.beta_for(a) for a in (2, 3, 4)} == b

"""The thresholds contract (issue 34): a threshold given as a number is met on the fitting rows whatever the other
one is, with and without held-out rows, for the mean alone and with moments; the per-cell test gates only the
family whose threshold is "se"."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mmc_core import GroupSet, MomentMulticalibrator


def _table(n: int, seed: int):
    """A label on [0, 1] whose noise is wide against its range, every prediction in one mean bucket, and a base
    0.006 off on the groups h = 0, 1 (up) and 3, 4 (down): each such group's mass-weighted error (1.2e-3) is
    above 1.06e-3 while its t statistic (about 2.4) is below the per-cell test's critical values (3.3-4.2),
    which is where a given alpha used to be missed."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"g": rng.integers(0, 8, n), "h": rng.integers(0, 5, n), "x": rng.uniform(size=n)})
    truth = 0.5 + 0.05 * df["x"].to_numpy()
    y = truth + rng.uniform(-0.45, 0.45, n)
    df["base"] = truth + 0.006 * np.sign(df["h"].to_numpy() - 2)
    return df, y, GroupSet.from_columns(df, ["g", "h"], max_order=2)


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("fraction", [0.25, 0.0])
def test_a_given_alpha_is_met_on_the_fitting_rows(k, fraction):
    # 100,000 rows, as the case: with beta "se" the per-cell test used to gate the mean's cells too, and
    # the fit stopped at alpha_ = 1.35e-3 for a requested 1.06e-3
    df, y, groups = _table(100_000, 0)
    est = MomentMulticalibrator(alpha=1.06e-3, n_moments=k, calibration_fraction=fraction, label_range=(0, 1))
    est.fit(df, y, groups, base_prediction=df["base"])
    assert est.alpha_ <= 1.06e-3
    assert est.model_.params.se_scope == "moments"


def test_a_given_beta_is_met_and_the_mean_keeps_its_test():
    df, y, groups = _table(30_000, 1)
    est = MomentMulticalibrator(beta=2e-4, n_moments=2, label_range=(0, 1))
    est.fit(df, y, groups, base_prediction=df["base"])
    assert est.beta_ <= 2e-4
    assert est.model_.params.se_scope == "mean" and est.z_ > 0


def test_both_se_keep_one_test_for_all_cells():
    df, y, groups = _table(5_000, 2)
    est = MomentMulticalibrator().fit(df, y, groups, base_prediction=df["base"])
    assert est.model_.params.se_scope == "all"


def test_early_stopping_keeps_a_round_that_meets_a_given_alpha():
    # whatever round has the lowest held-out error, the kept one's fitting-row violation meets the given alpha
    for seed in range(3):
        df, y, groups = _table(20_000, 10 + seed)
        est = MomentMulticalibrator(alpha=1e-3, early_stopping=True, shrunken_cells=False, label_range=(0, 1))
        est.fit(df, y, groups, base_prediction=df["base"])
        kept = est.history_[est.model_.info["kept_round"]]
        assert kept["max_mean_violation"] <= 1e-3 and est.alpha_ <= 1e-3

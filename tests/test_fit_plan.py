"""The fit as a plan (issue 36): one table of parameter constraints, checked once, and one record of what a fit
does (rows, bucket counts, thresholds, stages) that the fit follows and the threshold preview reads."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

from mmc_core import MomentMulticalibrator
from mmc_core.common import MMCError
from mmc_core.fit import AUTO_BUCKETS, PARAMETERS, STAGES, FitPlan, check_parameters
from mmc_core.groups import GroupSet


def _world(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.integers(0, 3, n), "c": rng.choice(list("xy"), n), "x": rng.random(n)})
    mu = 1 + 0.3 * X["a"] + X["x"]
    y = (mu + rng.normal(0, 0.4 + 0.4 * (X["c"] == "x"), n)).to_numpy()
    return X, y, (mu + 0.1).to_numpy(), GroupSet.from_columns(X, ["a", "c"])


def test_the_plan_names_its_stages_as_the_fit_summary_does():
    from mmc_core.estimator.stages import STAGE_LABELS

    assert set(STAGES) - {"intervals"} <= set(STAGE_LABELS)


def test_the_table_lists_every_constructor_parameter_in_order():
    sig = [p for p in inspect.signature(MomentMulticalibrator.__init__).parameters if p != "self"]
    assert [p.name for p in PARAMETERS] == sig
    for p in PARAMETERS:  # a parameter the table cannot check says where it is checked instead
        assert p.must is not None or p.checked_with


# one bad value for every parameter the table checks; its message must name the parameter first
BAD = {
    "alpha": "often",
    "beta": 1e-9,
    "n_buckets": 0,
    "n_moments": 9,
    "step": "fast",
    "odd_moments": "signed-ish",
    "calibration_fraction": 1.0,
    "early_stopping": "sometimes",
    "max_rounds": -1,
    "random_state": -3,
    "mean_buckets": "deciles",
    "moment_buckets": "fine",
    "mean_group_z": 0.5,
    "task": "ranking",
    "base_recalibration": "isotonic",
    "interval_calibration": "both",
    "shrunken_cells": "yes",
    "max_order": 0,
    "variance_column": "",
}


def test_every_checked_parameter_has_a_bad_value_here():
    assert sorted(BAD) == sorted(p.name for p in PARAMETERS if p.must is not None)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_refused_before_the_data_is_read(name):
    """Refused by the one check at the top of the fit, before any row is looked at (X is not even a table)."""
    est = MomentMulticalibrator(**{name: BAD[name]})
    with pytest.raises(MMCError, match=rf"^{name} must be .*, got {BAD[name]!r}$"):
        check_parameters(est)
    with pytest.raises(MMCError, match=rf"^{name} must be "):
        est.fit(object(), np.zeros(3))


def test_the_defaults_pass_and_numbers_at_the_edges():
    check_parameters(MomentMulticalibrator())
    check_parameters(MomentMulticalibrator(alpha=1e-6, beta=0.999, n_buckets=1000, mean_group_z=10, max_rounds=0))


def test_the_fit_keeps_the_plan_it_followed():
    X, y, base, groups = _world()
    est = MomentMulticalibrator().fit(X, y, groups, base_prediction=base)
    plan = est.plan_
    assert isinstance(plan, FitPlan)
    assert plan.stages == ("base map", "descent", "mean cells", "moment cells", "intervals") == STAGES
    assert plan.n_fit == est.fit_index_.size and plan.n_held_out == est.calibration_index_.size
    assert plan.n_groups == len(groups) and plan.moments == (2,) and plan.bucket_counts == (5,)
    # the thresholds the plan holds are the ones the descent used (the model states them as thresholds_used)
    params, init = plan.descent(5)
    used = est.model_.info["thresholds_used"]
    assert used["alpha"] == params.alpha and used["betas"]["2"] == params.beta
    assert est.model_.init_moments == init  # the moments start where the plan says
    # the preview reads the same plan
    preview = MomentMulticalibrator().planned_thresholds(X, y, groups, base)
    assert preview["alpha"] == params.alpha and preview["beta"] == params.beta


def test_the_plan_lists_only_the_stages_the_fit_runs():
    X, y, base, groups = _world()
    assert MomentMulticalibrator(calibration_fraction=0.0).fit(X, y, groups, base_prediction=base).plan_.stages == (
        "base map",
        "descent",
    )
    assert MomentMulticalibrator(shrunken_cells=False).fit(X, y, groups).plan_.stages == ("descent", "intervals")
    none = MomentMulticalibrator(base_recalibration="none").fit(X, y, groups, base_prediction=base).plan_
    assert none.base_map == "none" and "base map" not in none.stages
    yb = (y > np.median(y)).astype(int)
    binary = MomentMulticalibrator().fit(X, yb, groups).plan_
    assert binary.task == "binary" and binary.moments == ()
    assert binary.stages == ("descent", "mean cells")  # no variance to correct, no interval to calibrate
    with pytest.raises(ValueError, match="unknown stage"):
        binary.has("level")


def test_auto_buckets_plan_every_candidate_and_the_model_is_one_of_them():
    X, y, base, groups = _world()
    est = MomentMulticalibrator(n_buckets="auto").fit(X, y, groups, base_prediction=base)
    assert est.plan_.bucket_counts == AUTO_BUCKETS
    assert est.n_buckets_ in AUTO_BUCKETS
    chosen, _ = est.plan_.descent(est.n_buckets_)
    assert est.model_.info["thresholds_used"]["alpha"] == chosen.alpha
    d = est.plan_.as_dict()
    assert sorted(d["thresholds"]) == sorted(str(m) for m in AUTO_BUCKETS) and d["threshold_rules"]["alpha"] == "se"


def test_a_loaded_model_has_no_plan(tmp_path):
    X, y, base, groups = _world()
    est = MomentMulticalibrator().fit(X, y, groups, base_prediction=base)
    est.save(tmp_path / "m.json")
    assert MomentMulticalibrator.load(tmp_path / "m.json").plan_ is None


def test_the_command_line_names_its_own_flag_for_every_parameter_it_passes():
    """`mmc fit` checks the same table before reading the data and says the flag, not the Python name."""
    from app.cli.common import FIT_PARAMS, FLAG_OF

    checked = {p.name for p in PARAMETERS if p.must is not None}
    passed = set(FIT_PARAMS) | {"shrunken_cells", "task", "variance_column"}  # estimator_from_args and cmd_fit
    assert not (passed & checked) - set(FLAG_OF)

"""Model replay, JSON round trip, determinism, label scaling, and the estimator's contract."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from mmc_core import FittedModel, GroupSet, ModelFormatError, MomentMulticalibrator, max_central_moment
from mmc_core.common.errors import DataError, MMCError
from mmc_core.common.synthetic import demo_distribution


@pytest.fixture(scope="module")
def fitted():
    d = demo_distribution()
    t = d.sample_table(5000, np.random.default_rng(3))
    groups = GroupSet.from_columns(t, ["sex", "race", "age"], 2)
    est = MomentMulticalibrator(
        alpha=0.002, beta=0.0003, n_moments=4, label_range=(0, 100), calibration_fraction=0.2, random_state=5
    )
    est.fit(t, t["outcome"], groups, base_prediction=t["base_pred"], label_name="outcome", base_name="base_pred")
    return est, t


def test_replay_on_fitting_rows_is_bit_identical(fitted):
    est, t = fitted
    assert est.model_.log, "the fixture should need updates"
    rows = est.fit_index_
    sub = {c: np.asarray(v)[rows] for c, v in t.items()}
    base_u = np.asarray(t["base_pred"])[rows] / 100.0
    mu, moms = est.model_.predict_unit(sub, base_u)
    assert np.array_equal(mu, est.fit_mean_unit_)
    for a in (2, 3, 4):
        assert np.array_equal(moms[a], est.fit_moments_unit_[a])


def test_json_round_trip_is_exact(fitted, tmp_path):
    est, t = fitted
    path = tmp_path / "m.json"
    est.save(path)
    again = MomentMulticalibrator.load(path)
    p1 = est.predict_moments(t, t["base_pred"])
    p2 = again.predict_moments(t, t["base_pred"])
    assert p1.keys() == p2.keys() == {"mean", "moment_2", "moment_3", "moment_4"}
    for k in p1:
        assert np.array_equal(p1[k], p2[k])
    assert again.model_.to_json() == est.model_.to_json()


def test_outputs_are_in_label_units(fitted):
    """Label range (0, 100): the mean maps back as 100 u and the a-th central moment as 100^a u (exactly, up to
    rounding), so every prediction lies inside its attainable range; and on the fitting rows the average
    predicted variance is the true average variance up to a bound derived from the guarantee."""
    import math

    from tests.reference import cells

    est, t = fitted
    p = est.predict_moments(t, t["base_pred"])
    mu_u, moms_u = est.model_.predict_unit(t, np.asarray(t["base_pred"]) / 100.0)
    np.testing.assert_allclose(p["mean"], 100.0 * mu_u, rtol=1e-13, atol=0)
    for a in (2, 3, 4):
        np.testing.assert_allclose(p[f"moment_{a}"], 100.0**a * moms_u[a], rtol=1e-13, atol=0)
        # the a-th absolute central moment of a label in [0, 100] is at most max_central_moment(a) 100^a
        assert np.all(p[f"moment_{a}"] >= 0) and p[f"moment_{a}"].max() <= max_central_moment(a) * 100.0**a * (
            1 + 1e-12
        )
    assert p["mean"].min() >= 0 and p["mean"].max() <= 100
    # Unit scale, fitting rows (n of them; the fit converged, so the guarantee holds there exactly), with the
    # truth m = E[y | x], sigma^2 = Var(y | x) known:
    #   mean m2 - mean sigma^2 = [mean m2 - mean (y - mu)^2]            |.| <= (joint cells of "all") beta
    #                          + [mean (y - m)^2 - mean sigma^2]        noise, independent of the fit
    #                          + D,   D = mean (y - mu)^2 - mean (y - m)^2   (computed exactly: mu and m known)
    # The noise term has mean 0 and variance mean(m4 - sigma^4) / n, exact from the truth (true_m4): 5 of its
    # standard errors (two-sided normal tail 6e-7; n = 4000 rows, so the normal approximation is fair).
    assert est.converged_
    rows = est.fit_index_
    prm = est.model_.params
    y = np.asarray(t["outcome"])[rows] / 100
    m, var = np.asarray(t["true_mean"])[rows] / 100, np.asarray(t["true_var"])[rows] / 100**2
    m4 = np.asarray(t["true_m4"])[rows] / 100**4
    mu, m2 = est.fit_mean_unit_, est.fit_moments_unit_[2]
    _, joint = cells(prm, mu, est.fit_moments_unit_)
    pseudo = np.unique(joint[2]).size * prm.beta_for(2)
    noise = 5 * math.sqrt(np.mean(m4 - var**2) / rows.size)
    D = np.mean((y - mu) ** 2) - np.mean((y - m) ** 2)
    assert abs(m2.mean() - var.mean() - D) <= pseudo + noise, (m2.mean(), var.mean(), D, pseudo, noise)


def test_same_seed_same_bytes_in_a_new_process(tmp_path):
    code = (
        "import numpy as np, sys\n"
        "from mmc_core import GroupSet, MomentMulticalibrator\n"
        "from mmc_core.common.synthetic import demo_distribution\n"
        "t = demo_distribution().sample_table(3000, np.random.default_rng(1))\n"
        "g = GroupSet.from_columns(t, ['sex', 'race'], 2)\n"
        "e = MomentMulticalibrator(alpha=0.002, beta=0.0005, n_moments=3, calibration_fraction=0.25, random_state=4)\n"
        "e.fit(t, t['outcome'], g, base_prediction=t['base_pred'])\n"
        "e.model_.info.pop('history'); e.model_.info.pop('seconds')\n"
        "sys.stdout.write(e.model_.to_json())\n"
    )
    outs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    assert outs[0] == outs[1] and len(outs[0]) > 100


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (lambda d: d.update(version=99), "version"),
        (lambda d: d.update(format="x"), "not an mmc-audit model"),
        (lambda d: d["params"].update(alpha=2.0), "alpha"),
        (lambda d: d["params"].update(buckets=0), "buckets"),
        (lambda d: d["log"].append([1, 0, 10**6, [0], [0.1]]), "log entry"),
        (lambda d: d["log"].append([1, 0, 0, [99], [0.1]]), "log entry"),
        (lambda d: d["log"].append([1, 0, 0, [0], [1e9]]), "log entry"),
        (lambda d: d["init"]["moments"].update({"2": 7.0}), "init.moments"),
        (lambda d: d["groups"]["groups"].append({"name": "x", "where": [{"column": "c", "op": "__import__"}]}), "op"),
        (lambda d: d.pop("log"), "missing field"),
    ],
)
def test_edited_model_files_are_rejected_clearly(fitted, mutate, msg):
    est, _ = fitted
    d = json.loads(est.model_.to_json())
    mutate(d)
    with pytest.raises(ModelFormatError, match=msg):
        FittedModel.from_dict(d)


def test_truncated_model_file(fitted, tmp_path):
    est, _ = fitted
    path = tmp_path / "m.json"
    path.write_text(est.model_.to_json()[:500])
    with pytest.raises(ModelFormatError, match="not valid JSON"):
        FittedModel.load(path)


def test_attainable_moment_ranges():
    assert max_central_moment(2) == pytest.approx(0.25, abs=1e-12)
    assert max_central_moment(4) == pytest.approx(1 / 12, abs=1e-12)
    assert max_central_moment(3) == pytest.approx(1 / 8, abs=1e-12)
    # brute force over two-point distributions on {0, 1} agrees for a = 5, 6
    p = np.linspace(0, 1, 200001)
    for a in (5, 6):
        assert max_central_moment(a) == pytest.approx(np.max(p * (1 - p) ** a + (1 - p) * p**a), rel=1e-8)


def test_sklearn_contract():
    est = MomentMulticalibrator(alpha=0.01, beta=0.002)
    assert est.get_params()["alpha"] == 0.01 and est.set_params(beta=0.003).beta == 0.003
    assert repr(est) == "MomentMulticalibrator(alpha=0.01, beta=0.003)"
    assert not hasattr(est, "model_")
    for call in (est.predict, est.predict_moments, est.predict_interval):  # predict_interval: AttributeError before
        with pytest.raises(MMCError, match="not fitted"):
            call({"a": np.zeros(3)})
    t = {"g": np.array(["a", "b"] * 50), "y": np.linspace(0, 1, 100)}
    assert est.fit(t, t["y"], GroupSet.from_columns(t, ["g"])) is est
    assert hasattr(est, "history_") and est.history_[0]["round"] == 0


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"alpha": 0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"beta": -1}, "beta"),
        ({"n_buckets": 0}, "n_buckets"),
        ({"n_moments": 0}, "n_moments"),
        ({"n_moments": 50}, "n_moments"),
        ({"step": "fast"}, "step"),
        ({"calibration_fraction": 1.0}, "calibration_fraction"),
        ({"odd_moments": "x"}, "odd_moments"),
    ],
)
def test_bad_parameters_name_the_parameter(kw, match):
    """The message starts with the Python parameter's own name (not a flag of the command line, not a word that
    merely occurs in it)."""
    t = {"g": np.array(["a", "b"] * 10), "y": np.linspace(0, 1, 20)}
    with pytest.raises(MMCError, match=rf"^{match} "):
        MomentMulticalibrator(**kw).fit(t, t["y"], GroupSet.from_columns(t, ["g"]))


def test_bad_labels():
    t = {"g": np.array(["a", "b"] * 10)}
    y = np.linspace(0, 1, 20)
    with pytest.raises(DataError, match="missing or infinite"):
        MomentMulticalibrator().fit(t, np.where(y > 0.5, np.nan, y))
    with pytest.raises(DataError, match="constant"):
        MomentMulticalibrator().fit(t, np.ones(20))
    with pytest.raises(DataError, match="outside the label range"):
        MomentMulticalibrator(label_range=(0, 0.5)).fit(t, y)
    est = MomentMulticalibrator(label_range=(0, 1)).fit(t, y, base_prediction=y + 0.3)
    assert est.model_.info["base_clipped"] == int(np.sum(y + 0.3 > 1))  # clipped to the range, and counted


def test_iteration_cap_reports_not_converged():
    d = demo_distribution()
    t, y = d.sample(4000, np.random.default_rng(0))
    est = MomentMulticalibrator(alpha=0.0005, beta=0.0001, max_rounds=1, label_range=(0, 1))
    est.fit(t, y, GroupSet.from_columns(t, ["race", "age"], 2))
    assert est.converged_ is False and est.n_rounds_ <= 1


def test_callback_can_stop_the_run():
    d = demo_distribution()
    t, y = d.sample(4000, np.random.default_rng(0))
    seen = []
    est = MomentMulticalibrator(alpha=0.0005, beta=0.0001, label_range=(0, 1))
    est.fit(t, y, GroupSet.from_columns(t, ["race", "age"], 2), callback=lambda row: seen.append(row) or len(seen) >= 2)
    assert len(seen) == 2 and est.converged_ is False and est.model_.info["stopped_by_user"]


def test_early_stopping_keeps_the_best_held_out_round():
    d = demo_distribution()
    t, y = d.sample(3000, np.random.default_rng(2))
    est = MomentMulticalibrator(
        alpha=0.0003, beta=0.0001, label_range=(0, 1), calibration_fraction=0.3, early_stopping=True
    )
    est.fit(t, y, GroupSet.from_columns(t, ["sex", "race", "age", "score"], 2))
    # the best held-out round among those meeting the given alpha and beta on the fitting rows (issue 34)
    ok = [h["max_mean_violation"] <= 3e-4 and h["max_moment_violation"] <= 1e-4 for h in est.history_]
    losses = [h["holdout_mse"] for h, good in zip(est.history_, ok) if good]
    kept = est.model_.info["kept_round"]
    assert ok[kept] and est.history_[kept]["holdout_mse"] == min(losses)
    assert len(est.model_.round_ends) == kept + 1


def test_stop_is_polled_inside_moment_passes():
    """A stop request is honoured before the next single update, not only between rounds."""
    d = demo_distribution()
    t, y = d.sample(4000, np.random.default_rng(0))
    calls = []

    def stop():
        calls.append(1)
        return len(calls) > 3

    est = MomentMulticalibrator(alpha=0.0005, beta=0.00002, step="paper", label_range=(0, 1), calibration_fraction=0)
    est.fit(t, y, GroupSet.from_columns(t, ["race", "age"], 2), stop=stop)
    assert est.model_.info["stopped_by_user"] and not est.converged_
    assert len(est.model_.log) <= 3  # at most one update per poll before the stop
    mu, moms = est.model_.predict_unit(t, n=len(y))  # the kept log replays to the state it stopped in
    assert np.array_equal(mu, est.fit_mean_unit_) and np.array_equal(moms[2], est.fit_moments_unit_[2])


def test_column_names_given_as_groups_get_a_hint():
    """Found in an exploratory session: fit(X, y, groups=["sex", "race"]), natural for a pandas user, said
    only "a group must be a JSON object"; the message now names the way to make groups from columns."""
    t = {"sex": np.array(["a", "b"] * 50), "y": np.linspace(0, 1, 100)}
    with pytest.raises(MMCError, match=r"GroupSet.from_columns\(X, \['sex'"):
        MomentMulticalibrator().fit(t, t["y"], groups=["sex"])

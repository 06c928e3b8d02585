"""The per-group logistic map of a 0/1 label's base (mmc_core.fit.logistic_map), on worlds with known truth."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.common.errors import MMCError, ModelFormatError
from mmc_core.estimator.base_map_text import describe
from mmc_core.fit.logistic_map import EPS, KEEP_Z, fit_group_logistic, group_logistic_base, logit_stack
from mmc_core.fit.model import FittedModel


def _world(seed: int, n: int, miscalibrated: bool = True):
    """Two group columns; the base is logistic in a feature x; the truth bends it per group: a steeper logit in
    a=1, a shift in b=2 (or, ``miscalibrated=False``, the truth is the base)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.integers(0, 4, n).astype(str), "b": rng.integers(0, 3, n).astype(str)})
    x = rng.normal(size=n) * 1.5
    base = 1 / (1 + np.exp(-x))
    logit = x * (1 + 0.6 * (df["a"] == "1")) + 0.5 * (df["b"] == "2") if miscalibrated else x
    p = 1 / (1 + np.exp(-np.asarray(logit, dtype=float)))
    y = (rng.random(n) < p).astype(float)
    return df, base, p, y


def _kl(q, p):
    q, p = np.clip(q, 1e-9, 1 - 1e-9), np.clip(p, 1e-9, 1 - 1e-9)
    return float(np.mean(p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))))


def test_the_map_recovers_per_group_curves_on_fresh_rows():
    df, base, p, y = _world(0, 40_000)
    gs = GroupSet.from_columns(df.iloc[:20_000], ["a", "b"], 2)
    fit, new = df.iloc[:20_000].reset_index(drop=True), df.iloc[20_000:].reset_index(drop=True)
    m = fit_group_logistic(y[:20_000], base[:20_000], gs.evaluate(fit).sums(), seed=0)
    v = m["validation"]
    assert v["kept"] and v["z"] > 5
    # the stacked scale of a right map is 1 up to its standard error (1 / z): 3 of them
    assert v["weight"] >= 1 - 3 / v["z"]
    pm = group_logistic_base(base[20_000:], gs.evaluate(new).sums(), m)
    # a penalized logistic regression with P coefficients is off the truth by about P / (2 n) in expected
    # Kullback-Leibler divergence on fresh rows; the bound allows twice that
    P = 3 + 3 * len(gs)
    assert _kl(pm, p[20_000:]) <= P / 20_000
    assert _kl(base[20_000:], p[20_000:]) > 3 * P / 20_000  # the world's miscalibration is well above that


@pytest.mark.slow
def test_a_calibrated_base_is_left_nearly_as_given():
    zs, ws = [], []
    for seed in range(40):
        df, base, _, y = _world(100 + seed, 3000, miscalibrated=False)
        gs = GroupSet.from_columns(df, ["a", "b"], 2)
        m = fit_group_logistic(y, base, gs.evaluate(df).sums(), seed=seed)
        zs.append(m["validation"]["z"])
        ws.append(m["validation"]["weight"])
    # the gate's z is a standard normal's or smaller under the null: z >= 2 in about 2.3% of fits, so at
    # most 4 of 40 (P(Binomial(40, 0.023) >= 5) < 1%)
    assert sum(z >= 2 for z in zs) <= 4
    # a full map needs z >= 2 and a scale of 1: the applied share stays a small fraction on average
    assert np.mean(ws) < 0.25


def test_logit_stack_bears_out_a_right_change_and_not_noise():
    rng = np.random.default_rng(3)
    n = 20_000
    off = rng.normal(size=n)
    change = 0.8 * rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(off + change)))).astype(float)
    s, z, w = logit_stack(y, off, change, np.zeros(n, dtype=bool))
    assert abs(s - 1) < 3 * s / z and w > 0.9
    y0 = (rng.random(n) < 1 / (1 + np.exp(-off))).astype(float)
    s0, z0, w0 = logit_stack(y0, off, change, np.zeros(n, dtype=bool))
    assert abs(z0) < 3.5 and w0 < 1.0
    # paired rows count twice: the same evidence gives z smaller by sqrt(2)
    _, zp, _ = logit_stack(y, off, change, np.ones(n, dtype=bool))
    assert zp == pytest.approx(z / np.sqrt(2), rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 10_000),
    st.floats(-3, 3),
    st.floats(-2, 2),
)
def test_the_map_keeps_probabilities_inside_zero_and_one(seed, a, d):
    rng = np.random.default_rng(seed)
    n = 50
    df = pd.DataFrame({"a": rng.integers(0, 3, n).astype(str)})
    gs = GroupSet.from_columns(df, ["a"], 1)
    G = len(gs)
    base = rng.choice([0.0, 1e-9, 0.3, 0.7, 1.0], size=n)
    m = {
        "knot": 0.0,
        "intercept": a,
        "slope": d,
        "bend": -d,
        "groups": list(rng.normal(size=G)),
        "group_slopes": list(rng.normal(size=G)),
        "group_bends": list(rng.normal(size=G)),
    }
    p = group_logistic_base(base, gs.evaluate(df).sums(), m)
    assert np.all((p >= EPS) & (p <= 1 - EPS))
    zero = {**m, "intercept": 0.0, "slope": 0.0, "bend": 0.0, "groups": [0.0] * G}
    zero.update(group_slopes=[0.0] * G, group_bends=[0.0] * G)
    assert np.array_equal(group_logistic_base(base, gs.evaluate(df).sums(), zero), base)


def test_the_estimator_maps_a_classifiers_base_saves_it_and_says_so(tmp_path):
    df, base, p, y = _world(1, 12_000)
    gs = GroupSet.from_columns(df, ["a", "b"], 2)
    fit, new = df.iloc[:8000].reset_index(drop=True), df.iloc[8000:].reset_index(drop=True)
    est = MomentMulticalibrator(random_state=0, base_recalibration="group-logistic")
    est.fit(fit, y[:8000], gs, base_prediction=base[:8000])
    assert est.model_.task == "binary"
    assert est.model_.init_mean.get("logistic")
    pred = est.predict(new, base_prediction=base[8000:])
    plain = MomentMulticalibrator(random_state=0, base_recalibration="group-linear")
    plain.fit(fit, y[:8000], gs, base_prediction=base[:8000])
    assert not plain.model_.init_mean.get("logistic")
    assert _kl(pred, p[8000:]) < _kl(plain.predict(new, base_prediction=base[8000:]), p[8000:])
    text = describe(est.model_.init_mean, est.model_.info)
    assert "mapped per group on the logit scale" in text and "bear out" in text
    path = tmp_path / "m.json"
    est.model_.save(path)
    doc = json.loads(path.read_text())
    assert doc["version"] == 9
    est.model_ = FittedModel.load(path)
    assert np.array_equal(est.predict(new, base_prediction=base[8000:]), pred)
    # a file that claims an older version, or whose map lost a group, is refused
    old = dict(doc, version=8)
    with pytest.raises(ModelFormatError, match="version 9"):
        FittedModel.from_json(json.dumps(old))
    short = json.loads(path.read_text())
    short["init"]["mean"]["logistic"]["group_slopes"].pop()
    with pytest.raises(ModelFormatError, match="group_slopes"):
        FittedModel.from_json(json.dumps(short))


def test_a_regression_label_is_refused_the_logistic_map_by_name():
    df, base, p, _ = _world(2, 3000)
    y = p + np.random.default_rng(2).normal(0, 0.1, p.size)
    gs = GroupSet.from_columns(df, ["a", "b"], 2)
    est = MomentMulticalibrator(random_state=0, task="regression", base_recalibration="group-logistic")
    with pytest.raises(MMCError, match="group-logistic.*0/1 label"):
        est.fit(df, y, gs, base_prediction=base)


def test_the_command_line_fits_and_applies_the_logistic_map(tmp_path):
    from app.cli.entry import main

    df, base, _, y = _world(4, 4000)
    df["y"], df["pred"] = y, base
    data = tmp_path / "d.csv"
    df.to_csv(data, index=False)
    model = tmp_path / "m.json"
    args = ["fit", "--data", str(data), "--label", "y", "--pred", "pred", "--group-cols", "a,b", "--out", str(model)]
    assert main([*args, "--base-recalibration", "group-logistic"]) == 0
    doc = json.loads(model.read_text())
    assert doc["version"] == 9 and doc["init"]["mean"]["logistic"]


def test_by_default_the_map_is_kept_only_when_the_whole_fit_is_better_with_it(monkeypatch):
    from mmc_core.estimator import fit_memory

    df, base, p, y = _world(0, 12_000)
    gs = GroupSet.from_columns(df, ["a", "b"], 2)
    fit, new = df.iloc[:8000].reset_index(drop=True), df.iloc[8000:].reset_index(drop=True)
    runs = []
    real = fit_memory._run_stages
    monkeypatch.setattr(fit_memory, "_run_stages", lambda *a, **k: runs.append(a[4]) or real(*a, **k))
    est = MomentMulticalibrator(random_state=0).fit(fit, y[:8000], gs, base_prediction=base[:8000])
    # the default fits both pipelines (the second one not shown live: no callback) and keeps the map here
    assert len(runs) == 2
    final = est.model_.info["base_recalibration"]["logistic"]["final"]
    assert final["kept"] and final["without"] - final["with"] >= KEEP_Z * final["se"]
    assert est.model_.init_mean.get("logistic")
    assert "the whole fit with it: held-out log loss" in describe(est.model_.init_mean, est.model_.info)
    from mmc_core.estimator import stage_sentences

    info = est.model_.info
    assert any("a logistic curve per group" in t for t in stage_sentences(info["stages"], info, 0, 0))
    kept = est.predict(new, base_prediction=base[8000:])

    # when the fit without the map predicts the held-out rows better, that fit is the model
    real_loss = fit_memory._held_out_log_loss
    monkeypatch.setattr(
        fit_memory,
        "_held_out_log_loss",
        lambda d, model, memb_h: real_loss(d, model, memb_h) + (1.0 if model.init_mean.get("logistic") else 0.0),
    )
    est2 = MomentMulticalibrator(random_state=0).fit(fit, y[:8000], gs, base_prediction=base[:8000])
    assert not est2.model_.init_mean.get("logistic")
    lg = est2.model_.info["base_recalibration"]["logistic"]
    assert not lg["kept"] and not lg["final"]["kept"]
    assert "did not predict the held-out rows clearly better" in describe(est2.model_.init_mean, est2.model_.info)
    plain = MomentMulticalibrator(random_state=0, base_recalibration="group-linear")
    plain.fit(fit, y[:8000], gs, base_prediction=base[:8000])
    dropped = est2.predict(new, base_prediction=base[8000:])
    assert np.array_equal(dropped, plain.predict(new, base_prediction=base[8000:]))
    assert not np.array_equal(dropped, kept)


def test_no_map_with_fewer_rows_of_the_rarer_label_than_coefficients():
    df, base, _, y = _world(6, 3000)
    gs = GroupSet.from_columns(df, ["a", "b"], 2)
    y = y.copy()
    y[:] = 0.0
    y[: 3 + 3 * len(gs) - 1] = 1.0  # one row of the rarer label short of the map's coefficients
    m = fit_group_logistic(y, base, gs.evaluate(df).sums(), seed=0)
    assert m["validation"]["too_few"] and not m["validation"]["kept"]
    assert not any(m["groups"]) and m["slope"] == 0.0
    y[3 + 3 * len(gs) - 1] = 1.0  # enough: fitted (kept or not, it has a record of its check)
    assert "too_few" not in fit_group_logistic(y, base, gs.evaluate(df).sums(), seed=0)["validation"]


def test_without_held_out_rows_the_default_does_not_use_the_map():
    df, base, _, y = _world(0, 8000)
    gs = GroupSet.from_columns(df, ["a", "b"], 2)
    est = MomentMulticalibrator(random_state=0, calibration_fraction=0.0).fit(df, y, gs, base_prediction=base)
    lg = est.model_.info["base_recalibration"]["logistic"]
    assert lg["no_held_out"] and not lg["kept"] and not est.model_.init_mean.get("logistic")
    assert "no held-out rows" in describe(est.model_.init_mean, est.model_.info)
    own = MomentMulticalibrator(random_state=0, calibration_fraction=0.0, base_recalibration="group-logistic")
    assert own.fit(df, y, gs, base_prediction=base).model_.init_mean.get("logistic")  # its own gate only

"""Classifier audits (mmc_core.auditing.binary): label detection, per-group metrics against fairlearn and scikit-learn,
calibration errors against a direct loop, and the bootstrap intervals' coverage on data with known rates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mmc_core import GroupSet
from mmc_core.auditing.binary import METRICS, as_binary, classifier_audit, is_binary
from mmc_core.common.errors import DataError, MMCError


def test_as_binary():
    y, info = as_binary(np.array([0, 1, 1, 0]))
    assert y.tolist() == [0, 1, 1, 0] and info["positive"] == 1
    y, _ = as_binary(np.array([True, False, True]))
    assert y.tolist() == [1, 0, 1]
    y, info = as_binary(np.array(["yes", "no", "yes"], dtype=object), positive="yes")
    assert y.tolist() == [1, 0, 1] and info["classes"] == ["no", "yes"]
    y, _ = as_binary(np.array([1, 2, 2]), positive=2)
    assert y.tolist() == [0, 1, 1]
    with pytest.raises(DataError, match="positive class"):
        as_binary(np.array(["yes", "no"], dtype=object), name="hired")
    # two numbers that are not 0/1 may as well be a tiny continuous label: the message says how to fit that
    with pytest.raises(DataError, match=r"or that it is a number to predict \(task='regression', --task regression\)"):
        as_binary(np.array([54.22, 67.99]), name="label 'y'")
    with pytest.raises(DataError, match="hired is not binary"):
        as_binary(np.array([0, 1, 2]), name="hired")
    with pytest.raises(DataError, match="missing"):
        as_binary(np.array([0, 1, None], dtype=object))
    with pytest.raises(DataError, match="'maybe' is not a value"):
        as_binary(np.array(["yes", "no"], dtype=object), positive="maybe")
    assert is_binary([0, 1, 1]) and not is_binary([0, 1, 2]) and not is_binary([1, 1])


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"race": rng.choice(["A", "B", "C"], n, p=[0.6, 0.3, 0.1]), "sex": rng.choice(["F", "M"], n)})
    p = 0.2 + 0.3 * (df["race"] == "B") + 0.1 * (df["sex"] == "F")
    y = (rng.random(n) < p).astype(float)
    score = np.clip(p + rng.normal(0, 0.15, n), 0, 1)
    score[:5] = [0.0, 1.0, 0.5, 0.0, 1.0]  # exact ends and the threshold itself
    return df, y, score.to_numpy() if hasattr(score, "to_numpy") else score, p.to_numpy()


def test_rates_match_fairlearn_and_sklearn():
    from fairlearn.metrics import (
        MetricFrame,
        demographic_parity_difference,
        demographic_parity_ratio,
        equalized_odds_difference,
        equalized_odds_ratio,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )
    from sklearn.metrics import brier_score_loss, log_loss, precision_score

    df, y, s, _ = _data()
    gs = GroupSet.from_columns(df, ["race", "sex"], 2)
    r = classifier_audit(s, y, gs, df, threshold=0.5, n_boot=0)
    pred = (s >= 0.5).astype(int)
    bg = r.by_group
    for col in ("race", "sex"):
        mf = MetricFrame(
            metrics={
                "selection_rate": selection_rate,
                "tpr": true_positive_rate,
                "fpr": false_positive_rate,
                "precision": precision_score,
            },
            y_true=y,
            y_pred=pred,
            sensitive_features=df[col],
        )
        for g, row in mf.by_group.iterrows():
            for k in ("selection_rate", "tpr", "fpr", "precision"):
                assert bg.loc[f"{col}={g}", k] == pytest.approx(row[k], abs=1e-12), (col, g, k)
        d = r.disparities.loc[col]
        assert d["demographic_parity_difference"] == pytest.approx(
            demographic_parity_difference(y, pred, sensitive_features=df[col]), abs=1e-12
        )
        assert d["demographic_parity_ratio"] == pytest.approx(
            demographic_parity_ratio(y, pred, sensitive_features=df[col]), abs=1e-12
        )
        assert d["equalized_odds_difference"] == pytest.approx(
            equalized_odds_difference(y, pred, sensitive_features=df[col]), abs=1e-12
        )
        assert d["equalized_odds_ratio"] == pytest.approx(
            equalized_odds_ratio(y, pred, sensitive_features=df[col]), abs=1e-12
        )
    m = (df["race"] == "B").to_numpy() & (df["sex"] == "F").to_numpy()  # an intersection
    assert bg.loc["race=B & sex=F", "brier"] == pytest.approx(brier_score_loss(y[m], s[m]), abs=1e-12)
    assert bg.loc["race=B & sex=F", "log_loss"] == pytest.approx(
        log_loss(y[m], np.clip(s[m], 1e-15, 1 - 1e-15), labels=[0, 1]), abs=1e-12
    )
    assert bg.loc["all", "base_rate"] == pytest.approx(y.mean(), abs=1e-12)


def test_calibration_errors_against_a_loop():
    df, y, s, _ = _data(800, 1)
    gs = GroupSet.from_columns(df, ["race"], 1)
    r = classifier_audit(s, y, gs, df, n_buckets=5, min_cell_count=20, n_boot=0, base=np.full(y.size, 0.3))
    for g in ["all", "race=A", "race=B", "race=C"]:
        m = np.ones(y.size, bool) if g == "all" else (df["race"] == g.split("=")[1]).to_numpy()
        b = np.minimum((s[m] * 5).astype(int), 4)
        ece, worst, worst_abs = 0.0, np.nan, -1
        for k in range(5):
            c = b == k
            if c.any():
                ece += abs(y[m][c].sum() - s[m][c].sum()) / m.sum()
            if c.sum() >= 20 and abs(y[m][c].mean() - s[m][c].mean()) > worst_abs:
                worst_abs, worst = abs(y[m][c].mean() - s[m][c].mean()), y[m][c].mean() - s[m][c].mean()
        assert r.by_group.loc[g, "ece"] == pytest.approx(ece, abs=1e-12)
        assert r.by_group.loc[g, "calib_error_worst"] == pytest.approx(worst, abs=1e-12, nan_ok=True)
        assert r.by_group.loc[g, "calib_error_base"] == pytest.approx(y[m].mean() - 0.3, abs=1e-12)
    assert r.difference("base_rate").loc["all"] == 0 and r.ratio("base_rate", "race=A").loc["race=A"] == 1
    with pytest.raises(MMCError, match="unknown metric"):
        r.difference("accuracy")


def test_bootstrap_intervals_cover_the_true_rate():
    """The 95% interval of the base rate of race=C (p = 0.2 or 0.3 by sex, known) covers the true group rate in
    at least the Binomial(40, 0.95) 0.1% quantile of 40 fresh samples."""
    hits = 0
    for seed in range(40):
        df, y, s, p = _data(1500, 100 + seed)
        gs = GroupSet.from_columns(df, ["race"], 1)
        r = classifier_audit(s, y, gs, df, n_boot=200, seed=seed)
        m = (df["race"] == "C").to_numpy()
        true_rate = p[m].mean()  # the rate of these rows' distribution (the sex mix is the sample's)
        hits += r.by_group.loc["race=C", "base_rate_lo"] <= true_rate <= r.by_group.loc["race=C", "base_rate_hi"]
        for k in METRICS:
            lo, hi, v = (r.by_group.loc["all", k + x] for x in ("_lo", "_hi", ""))
            assert lo <= v + 1e-12 and v <= hi + 1e-12, k
    assert hits >= stats.binom.ppf(0.001, 40, 0.95)


def test_bad_input():
    df, y, s, _ = _data(100)
    gs = GroupSet.from_columns(df, ["race"], 1)
    with pytest.raises(DataError, match="probabilities"):
        classifier_audit(s * 2, y, gs, df)
    with pytest.raises(DataError, match="0/1"):
        classifier_audit(s, y * 2, gs, df)
    with pytest.raises(DataError, match="base score"):
        classifier_audit(s, y, gs, df, base=s[:10])
    with pytest.raises(MMCError, match="threshold"):
        classifier_audit(s, y, gs, df, threshold=1.5)

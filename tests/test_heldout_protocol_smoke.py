"""The held-out protocol benchmark runs (one table, one split, no MCGrad) and its metrics mean what they say."""

from __future__ import annotations

import numpy as np

from benchmarks.heldout_protocol import group_errors, run_split, split, summarize


def test_split_is_40_30_30_and_disjoint():
    a, b, c = split(1000, 0)
    assert (a.size, b.size, c.size) == (400, 300, 300)
    assert np.unique(np.concatenate([a, b, c])).size == 1000


def test_group_errors_on_a_hand_computed_case():
    dense = np.array([[1, 0], [1, 1], [0, 1], [0, 1]], dtype=float)
    pred, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 2.0, 3.0, 6.0])
    gbias, cell = group_errors(dense, pred, y)
    # group 0: |1 + 0| over 2 rows; group 1: |0 + 0 - 2| over 3 rows -> (1 + 2) / 5
    assert gbias == 3 / 5
    # cells: deciles of pred (one row each here) x groups: every (row, group) pair its own cell
    assert cell == (1 + 0 + 0 + 0 + 2) / 5


def test_one_split_runs():
    res = run_split("synthetic_scores", 0, ["base", "mmc"])
    assert set(res) == {"base", "mmc"} and res["mmc"]["min_var"] > 0
    txt = summarize({"synthetic_scores": {0: res}}, ["base", "mmc"])
    assert "synthetic_scores" in txt and "[base]" in txt


def test_mcgrad_at_fit_gets_the_rows_the_mmc_fit_fits_its_mean_on(monkeypatch):
    """``mcgrad@fit`` is MCGrad at equal rows: given exactly the default mmc fit's fitting rows (its own split),
    while ``mcgrad`` gets every post-processing row. A stand-in for the mcgrad package records what each fit saw
    (mcgrad is a bench extra, not installed for the tests)."""
    import sys
    import types

    from mmc_core import GroupSet, MomentMulticalibrator

    seen = []

    class Fake:
        def __init__(self, **kw):
            pass

        def fit(self, df, pred, y, categorical_feature_column_names=()):
            seen.append(df["_y"].to_numpy().copy())

        def predict(self, df, pred, categorical_feature_column_names=()):
            return df[pred].to_numpy()

    mod = types.ModuleType("mcgrad.methods")
    mod.MCGrad = mod.RegressionMCGrad = Fake
    monkeypatch.setitem(sys.modules, "mcgrad", types.ModuleType("mcgrad"))
    monkeypatch.setitem(sys.modules, "mcgrad.methods", mod)
    res = run_split("synthetic_scores", 3, ["mcgrad", "mcgrad@fit"])
    assert set(res) == {"mcgrad", "mcgrad@fit"}
    from benchmarks.heldout_protocol import load_table

    df, label, gcols, _ = load_table("synthetic_scores")
    post = df.iloc[split(len(df), 3)[1]].reset_index(drop=True)
    y = post[label].to_numpy(float)
    est = MomentMulticalibrator(label_range=(float(df[label].min()), float(df[label].max())), random_state=3)
    est.fit(post, y, GroupSet.from_columns(post, gcols, 2), base_prediction=np.zeros(len(post)) + y.mean())
    np.testing.assert_array_equal(seen[0], y)
    np.testing.assert_array_equal(seen[1], y[est.fit_index_])
    assert len(seen[1]) == len(y) - round(0.25 * len(y))

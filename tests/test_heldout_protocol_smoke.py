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

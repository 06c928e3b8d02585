"""Wherever a metric gets worse after multicalibration the Results page says by how much, whether beyond chance
and why (issue 35): app.services.pipeline.worse_note on per-row losses of the same rows."""

from __future__ import annotations

import numpy as np
import pytest

from app.services.pipeline import worse_note


def test_no_note_when_the_loss_is_not_higher():
    rng = np.random.default_rng(0)
    before = rng.exponential(size=500)
    assert worse_note("log loss", before, before) is None
    assert worse_note("log loss", before, before * 0.9) is None
    assert worse_note("log loss", before[:1], before[:1] + 1) is None  # one row cannot say


@pytest.mark.parametrize("shift, beyond", [(0.2, True), (0.002, False)])
def test_the_note_says_whether_the_rise_is_beyond_chance(shift, beyond):
    """Squared errors of a prediction moved by ``shift`` on 2,000 rows of unit noise: the paired z of the rise in
    squared error is about shift^2 sqrt(n) / sqrt(var(2 shift e)) = shift sqrt(n) / 2 (22 and 0.02 here)."""
    rng = np.random.default_rng(1)
    e = rng.normal(size=2000)
    note = worse_note("root mean squared error", e**2, (e - shift) ** 2)
    assert note is not None and note.startswith("The root mean squared error is higher after multicalibration")
    d = (e - shift) ** 2 - e**2
    z = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
    assert f"paired z = {z:.1f}" in note
    assert ("beyond chance" in note) is beyond and ("within sampling noise" in note) is (not beyond)
    assert "stage summary" in note  # and where to look


def test_the_results_pages_notes_read_the_runs_own_rows():
    """The Results pages' notes on a dashboard run: a base moved towards the test labels makes the multicalibrated
    RMSE worse beyond chance, and the note says so; the classifier's log-loss note reads its rows too."""
    from dataclasses import replace

    import pandas as pd
    from apptest_helpers import run_uploaded

    from app.ui.binary_results import log_loss_worse_note
    from app.ui.results_page import rmse_worse_note

    rng = np.random.default_rng(3)
    n = 1500
    df = pd.DataFrame({"a": rng.choice(list("pqrstuvw"), n), "truth": rng.normal(50, 10, n)})
    df["y"] = df["truth"] + rng.normal(0, 20, n)
    run = run_uploaded(df, "t.csv", "y").session_state["run"]
    test = run.split["test"]
    near = run.base.copy()
    near[test] = run.label.y[test]  # a base with no error: whatever the fit does on top of it adds some
    note = rmse_worse_note(replace(run, base=near, finished_at=run.finished_at + 1), df)
    assert note is not None and "beyond chance" in note
    df["yb"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-(df["truth"] - 50) / 10))).astype(int)
    run = run_uploaded(df.drop(columns="y"), "b.csv", "yb").session_state["run"]
    assert run.model.task == "binary" and run.base is not None
    note = log_loss_worse_note(run, df)
    assert note is None or note.startswith("The log loss is higher")

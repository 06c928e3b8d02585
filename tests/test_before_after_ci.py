"""The before / after calibration chart (issue 35): each group's worst cell is one the findings would test (at least
``min_group_count`` rows unless asked otherwise), and both markers carry the 95% interval of that cell's error,
from the cell's own standard error; checked against a direct computation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mmc_core import MomentMulticalibrator
from mmc_core.auditing.metrics import audit


@pytest.fixture(scope="module")
def result():
    rng = np.random.default_rng(7)
    n = 3000
    X = pd.DataFrame({"g": rng.choice(["a", "b", "c"], n, p=[0.6, 0.39, 0.01])})
    mean = 50 + 10 * (X["g"] == "b")
    X["base"] = mean + rng.normal(0, 3, n)  # a noisy base: cells differ
    y = mean + rng.normal(0, 8, n)
    est = MomentMulticalibrator(base_column="base", groups=["g"]).fit(X.iloc[:1500], y[:1500])
    Xa, ya = X.iloc[1500:].reset_index(drop=True), y[1500:]
    return est.model_, Xa, ya, audit(est.model_, Xa, ya, base=Xa["base"].to_numpy())


def _direct(model, y, pred, group_rows, min_count):
    """The worst |mean pred - mean label| over the group's cells of >= min_count rows, and that cell's SE (the
    cells: the model's own mean buckets, on the unit scale as the audit indexes them)."""
    cell = model.params.mean_grid.index(model.scale.to_unit(pred))
    best = (-1.0, np.nan)
    for k in np.unique(cell[group_rows]):
        r = (y - pred)[group_rows & (cell == k)]
        if r.size >= min_count and abs(r.mean()) > best[0]:
            best = (abs(r.mean()), r.std(ddof=1) / np.sqrt(r.size))
    return best


def test_worst_cells_are_tested_cells_with_their_standard_error(result):
    model, X, y, res = result
    bg = res.by_group
    assert res.params["min_cell_count"] == res.params["min_group_count"] == 30
    mu = model.predict(X, X["base"].to_numpy())["mean"]
    for g in ("a", "b"):
        rows = (X["g"] == g).to_numpy()
        for pred, col in ((mu, "calib_error_worst"), (X["base"].to_numpy(), "calib_error_worst_base")):
            worst, se = _direct(model, y, pred, rows, 30)
            assert bg.loc[f"g={g}", col] == pytest.approx(worst, rel=1e-9)
            assert bg.loc[f"g={g}", col.replace("worst", "worst_se")] == pytest.approx(se, rel=1e-9)
    # group c has ~15 audit rows: no cell the findings would test, so no worst cell (it used to take 20-row cells)
    assert np.isnan(bg.loc["g=c", "calib_error_worst"]) and np.isnan(bg.loc["g=c", "calib_error_worst_se"])


def test_the_chart_draws_each_markers_interval(result):
    from app.figures.charts import calibration_before_after_figure

    _, _, _, res = result
    fig = calibration_before_after_figure(res, label="y")
    bg = res.by_group
    for tr, col in zip(fig.data[1:], ("calib_error_worst_se_base", "calib_error_worst_se")):
        names = list(tr.y)
        half = 1.959963984540054 * bg[col].loc[[n.rstrip(" †") for n in names]].to_numpy(float)
        np.testing.assert_allclose(tr.error_x.array, np.where(np.isfinite(half), half, 0.0))
        assert np.all(np.asarray(tr.x) - np.asarray(tr.error_x.arrayminus) >= -1e-12)  # |error| bars stay >= 0
    assert "95% CI" in fig.layout.title.text or "95% CI" in str(fig.layout.annotations) or "95% CI" in str(fig.layout)

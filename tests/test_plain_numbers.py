"""Issue 35: numbers in the analyst's notation on the Results page (no scientific notation below 1e9). Found in a
browser on a generated money label: "root mean squared error 1.696e+04 (base) → 1.696e+04"."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

SCI = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?e[-+]?\d+(?![\w.])")


def test_results_captions_write_out_numbers_in_label_units():
    from tests.apptest_helpers import run_uploaded, switch

    rng = np.random.default_rng(4)
    n = 1200
    df = pd.DataFrame({"x": rng.normal(size=n), "grp": rng.choice(["a", "b"], n)})
    df["claims"] = np.exp(9.5 + 0.5 * df["x"] + rng.normal(0, 0.8, n)).round(2)  # tens of thousands of dollars
    at = switch(run_uploaded(df, "claims.csv", "claims"), "results")
    assert not at.exception
    text = " ".join(str(c.value) for c in at.caption)
    assert "root mean squared error" in text
    rmse = re.search(r"root mean squared error ([\d,.]+)", text).group(1)
    assert "," in rmse and float(rmse.replace(",", "")) > 1000  # "16,960", not "1.696e+04"
    assert not SCI.findall(text), SCI.findall(text)


def test_the_pdf_settings_write_out_numbers_in_label_units():
    """The same table's PDF: "mean bucket width 5.2e+04 claims units" in the settings table (and the label's range,
    alpha and beta in "g" format): written out, in the units the analyst stated."""
    from app.report import text as RT
    from mmc_core.auditing import metrics
    from mmc_core.estimator.multicalibrator import MomentMulticalibrator
    from mmc_core.groups.group_set import GroupSet

    rng = np.random.default_rng(5)
    n = 1500
    df = pd.DataFrame({"x": rng.normal(size=n), "grp": rng.choice(["a", "b"], n)})
    df["claims"] = np.exp(10 + 0.6 * df["x"] + rng.normal(0, 0.8, n)).round(2)
    gs = GroupSet.from_columns(df, ["grp"], 1)
    est = MomentMulticalibrator(n_moments=2, alpha=1e-5, beta=2e-5).fit(df, df["claims"], gs)
    res = metrics.audit(est.model_, df, df["claims"].to_numpy())
    rows = dict(RT.param_rows(est.model_, res, 0.1, 0.05, "claims", "USD"))
    text = " ".join(str(v) for v in rows.values())
    assert not SCI.findall(text), SCI.findall(text)
    assert re.search(r"mean bucket width [\d,]+ USD\)", rows["Predictors"]), rows["Predictors"]

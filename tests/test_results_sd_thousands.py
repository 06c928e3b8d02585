"""Issue 35: the Variance tab's table of groups by SD read "10700" and "13300" for a dollar label (fringe annual
earnings, tests/data) while every other number on the page reads "10,700". SDs of 1 and more are shown with the
browser's thousands separators, rounded to 3 significant digits; smaller ones keep "%.3g" (the browser's separators
would round 0.00123 to 0)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parent / "data"


def _sd_table(at):
    d = next(d for d in at.dataframe if "predicted SD" in d.value.columns)
    return d.value, json.loads(d.proto.columns)


def test_a_dollar_labels_sd_table_separates_thousands():
    from tests.apptest_helpers import run_uploaded, switch

    df = pd.read_csv(DATA / "fringe_annearn.csv")
    at = switch(run_uploaded(df, "fringe_annearn.csv", "annearn"), "results")
    table, cols = _sd_table(at)
    assert cols["predicted SD"]["type_config"]["format"] == "localized"
    assert cols["observed SD"]["type_config"]["format"] == "localized"
    sd = table[["predicted SD", "observed SD"]].to_numpy(float)
    assert (sd >= 1000).any() and np.array_equal(sd, np.vectorize(lambda v: float(f"{v:.3g}"))(sd))

    small = df.assign(annearn=df["annearn"] / 1e6)  # millions of dollars: SDs of 0.01, shown as before
    table, cols = _sd_table(switch(run_uploaded(small, "fringe_millions.csv", "annearn"), "results"))
    assert cols["predicted SD"]["type_config"]["format"] == "%.3g"
    assert (table["observed SD"].astype(float) < 1).all()

"""Regression tests of the base-model feature leak check (app.services.validate.feature_flags) and of the Data page's
pre-selection on a label change (app.ui.data_page._on_label_change).

The leaks are those a user found on Wooldridge tables (mroz, loanapp, affairs), rebuilt here on small synthetic
frames: a column of few values that determines the label (loanapp `action` for `approve`), an indicator of the
label (affairs `affair` = `naffairs` > 0, mroz `inlf` = `hours` > 0), columns missing exactly when the label is 0
(mroz `wage`, `lwage`), and integer id columns (affairs `id`). Each was missed by the |r| >= 0.98 rule alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.services import demo_data
from app.services.validate import feature_flags

APP = str(Path(__file__).resolve().parents[1] / "app" / "dashboard.py")
ORDINARY = ("age", "educ", "kids", "female", "income")


def ordinary(n: int = 600, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "age": rng.integers(18, 65, n),
            "educ": rng.integers(8, 19, n),
            "kids": rng.integers(0, 4, n),
            "female": rng.integers(0, 2, n),
            "income": rng.lognormal(10, 0.6, n).round(2),
        }
    )
    df["y"] = 0.3 * df["educ"] + 0.02 * df["age"] - 0.5 * df["female"] + rng.normal(0, 2, n)
    df["approved"] = (df["y"] + rng.normal(0, 2, n) > df["y"].median()).astype(int)
    return df


# ------------------------------------------------------------------------------------------------------------
# (a) a column of few values of which the label is a function
# ------------------------------------------------------------------------------------------------------------
def test_a_label_determined_by_a_decision_code():
    rng = np.random.default_rng(1)
    df = ordinary(seed=1)
    df["action"] = rng.choice([1, 2, 3], len(df), p=[0.6, 0.25, 0.15])
    df["approve"] = (df["action"] != 2).astype(int)  # not monotone in action: |r| is far below 0.98
    assert abs(np.corrcoef(df["action"], df["approve"])[0, 1]) < 0.98
    flags = feature_flags(df, "approve")
    assert "action" in flags and "leaks the label 'approve'" in flags["action"]
    assert "each value of 'action'" in flags["action"]


def test_a_text_code_and_a_many_valued_column_are_judged_as_they_are():
    rng = np.random.default_rng(2)
    df = ordinary(seed=2)
    df["status"] = rng.choice(["granted", "modified", "denied"], len(df))
    df["ok"] = df["status"].isin(["granted", "modified"]).astype(int)
    df["branch"] = rng.integers(0, 40, len(df))  # 40 values, the label is not a function of it
    flags = feature_flags(df, "ok")
    assert "status" in flags and "leaks the label 'ok'" in flags["status"]
    assert "branch" not in flags


# ------------------------------------------------------------------------------------------------------------
# (b) a column of few values that is a step function of the label (an indicator label > 0, a banding)
# ------------------------------------------------------------------------------------------------------------
def test_b_indicator_of_the_label_is_flagged_with_its_cut():
    rng = np.random.default_rng(3)
    df = ordinary(seed=3)
    n = len(df)
    df["naffairs"] = np.where(rng.random(n) < 0.75, 0, rng.choice([1, 2, 3, 7, 12], n))
    df["affair"] = (df["naffairs"] > 0).astype(int)
    assert abs(np.corrcoef(df["naffairs"], df["affair"])[0, 1]) < 0.98
    flags = feature_flags(df, "naffairs")
    assert flags.get("affair") == "leaks the label 'naffairs' (it is 0 exactly when 'naffairs' is 0, else 1)"
    # the other way round: the label affair is a function of naffairs (few values)
    assert "naffairs" in feature_flags(df, "affair")


def test_b_banding_of_a_continuous_label():
    df = ordinary(seed=4)
    df["bracket"] = pd.cut(df["y"], [-np.inf, 2, 4, 6, np.inf], labels=False)
    assert abs(np.corrcoef(df["y"], df["bracket"])[0, 1]) < 0.98
    flags = feature_flags(df, "y")
    assert "bracket" in flags and "step function" in flags["bracket"]


def test_b_label_is_an_indicator_of_a_continuous_column():
    rng = np.random.default_rng(5)
    df = ordinary(seed=5)
    df["hours"] = np.where(rng.random(len(df)) < 0.4, 0, rng.integers(100, 3000, len(df)))
    df["inlf"] = (df["hours"] > 0).astype(int)
    assert abs(np.corrcoef(df["hours"], df["inlf"])[0, 1]) < 0.98
    assert "inlf" in feature_flags(df, "hours")
    flags = feature_flags(df, "inlf")
    assert "hours" in flags and "the label is 0 exactly when 'hours' is at most 0" in flags["hours"]


# ------------------------------------------------------------------------------------------------------------
# (c) a column whose missingness is a step function of the label
# ------------------------------------------------------------------------------------------------------------
def test_c_missing_exactly_when_the_label_is_zero():
    rng = np.random.default_rng(6)
    df = ordinary(seed=6)
    n = len(df)
    df["hours"] = np.where(rng.random(n) < 0.4, 0, rng.integers(100, 3000, n))
    wage = rng.lognormal(2, 0.5, n)
    df["wage"] = np.where(df["hours"] > 0, wage, np.nan)  # uncorrelated with hours where present
    df["lwage"] = np.log(df["wage"])
    df["survey_gap"] = np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n))  # missing at random
    flags = feature_flags(df, "hours")
    assert flags.get("wage") == "leaks the label 'hours' (missing exactly when 'hours' is 0)"
    assert "lwage" in flags and "survey_gap" not in flags
    # a text column missing on the top of the label
    df["note"] = np.where(df["y"] > df["y"].quantile(0.8), None, rng.choice(["seen", "asked"], n))
    assert "missing exactly when 'y' is at least" in feature_flags(df, "y").get("note", "")


# ------------------------------------------------------------------------------------------------------------
# (d) integer id columns
# ------------------------------------------------------------------------------------------------------------
def test_d_integer_identifiers():
    rng = np.random.default_rng(7)
    df = ordinary(seed=7)
    n = len(df)
    df["id"] = rng.choice(10_000, n, replace=False)  # unique, not a range (affairs: 4 .. 9029)
    df["personId"] = rng.choice(10_000, n, replace=False) + 10_000
    df["rec"] = rng.permutation(n) + 1  # 1..n shuffled: a row number, whatever the name
    df["salary"] = rng.choice(200_000, n, replace=False)  # unique whole numbers, an ordinary name
    df["year"] = np.arange(1913, 1913 + n)  # a range, not from 0 or 1
    for label in (None, "y"):
        flags = feature_flags(df, label)
        assert "identifier" in flags.get("id", "") and "identifier" in flags.get("personId", "")
        assert "numbers the rows" in flags.get("rec", "")
        assert "salary" not in flags and "year" not in flags


# ------------------------------------------------------------------------------------------------------------
# no false alarm on ordinary columns
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("label", ["y", "approved", "kids", "educ", "female", None])
def test_no_false_alarm_on_ordinary_columns(label):
    df = ordinary(seed=8)
    df.loc[df.sample(frac=0.05, random_state=1).index, "income"] = np.nan
    assert feature_flags(df, label) == {}


def test_small_rare_groups_are_not_taken_for_leaks():
    # two rows of a rare value at the top of the label, one rare label value alone in a row: chance, not leaks
    rng = np.random.default_rng(9)
    df = ordinary(n=300, seed=9)
    df["rare"] = 0
    df.loc[df["y"].nlargest(2).index, "rare"] = 1
    df["flag1"] = 0
    df.loc[df.index[:1], "flag1"] = 1
    df["region"] = rng.integers(0, 30, len(df))
    assert not set(feature_flags(df, "y")) & {"rare", "region"}
    assert "region" not in feature_flags(df, "flag1")


@pytest.mark.parametrize("ds", demo_data.list_datasets(), ids=lambda d: d.name)
def test_demo_tables_keep_their_flags(ds):
    flags = feature_flags(ds.load(), ds.label)
    expected = {"loanapp": {"msa"}}.get(ds.name, set())  # msa is constant
    assert set(flags) == expected, flags


# ------------------------------------------------------------------------------------------------------------
# the Data page: a label change re-does the pre-selection
# ------------------------------------------------------------------------------------------------------------
def mroz_like(n: int = 500, seed: int = 0) -> pd.DataFrame:
    """Columns as in Wooldridge's mroz: the last numeric column, `expersq`, is the guessed label."""
    rng = np.random.default_rng(seed)
    hours = np.where(rng.random(n) < 0.43, 0, rng.integers(100, 3000, n))
    exper = rng.integers(0, 40, n)
    wage = np.where(hours > 0, rng.lognormal(1.2, 0.6, n).round(4), np.nan)
    return pd.DataFrame(
        {
            "id": rng.choice(50_000, n, replace=False),
            "inlf": (hours > 0).astype(int),
            "hours": hours,
            "kidslt6": rng.integers(0, 3, n),
            "age": rng.integers(30, 61, n),
            "educ": rng.integers(5, 18, n),
            "wage": wage,
            "huswage": rng.lognormal(2, 0.5, n).round(4),
            "exper": exper,
            "lwage": np.log(wage),
            "expersq": exper**2,
        }
    )


def _app_with(df: pd.DataFrame) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.run()
    at.radio(key="src_kind").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value(("mroz.csv", df.to_csv(index=False).encode(), "text/csv")).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_label_change_restores_features_left_out_for_the_guessed_label():
    at = _app_with(mroz_like())
    ss = at.session_state
    assert ss["label_col"] == "expersq" and ss["base_kind"] == "model"
    assert "exper" not in ss["base_features"]  # a monotone transform of the guessed label
    at.selectbox(key="label_col").select("hours").run()
    assert not at.exception, [e.value for e in at.exception]
    feats = at.session_state["base_features"]
    assert {"exper", "expersq", "age", "educ", "kidslt6", "huswage"} <= set(feats)
    assert not {"hours", "inlf", "wage", "lwage", "id"} & set(feats)
    assert at.multiselect(key="base_features").value == feats
    caption = next(c.value for c in at.caption if c.value.startswith("Not pre-selected"))
    assert "inlf (leaks the label 'hours'" in caption
    assert "wage (leaks the label 'hours' (missing exactly when 'hours' is 0))" in caption
    assert "id (an identifier" in caption
    # still selectable by hand
    assert {"inlf", "wage", "id"} <= set(at.multiselect(key="base_features").options)


def test_label_change_keeps_features_removed_or_added_by_hand():
    at = _app_with(mroz_like(seed=1))
    feats = list(at.session_state["base_features"])
    assert "age" in feats and "id" not in feats
    by_hand = [c for c in feats if c != "age"] + ["id"]  # age removed, the id column added
    at.multiselect(key="base_features").set_value(by_hand).run()
    at.selectbox(key="label_col").select("hours").run()
    assert not at.exception, [e.value for e in at.exception]
    feats = at.session_state["base_features"]
    assert "age" not in feats and "id" in feats
    assert "exper" in feats and not {"hours", "inlf", "wage", "lwage"} & set(feats)
    # and back: the guessed label's leak is taken out again, the hand edits stay
    at.selectbox(key="label_col").select("expersq").run()
    feats = at.session_state["base_features"]
    assert "exper" not in feats and "expersq" not in feats and "age" not in feats and "id" in feats
    assert {"hours", "inlf", "wage", "lwage"} <= set(feats)

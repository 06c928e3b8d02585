"""Group definitions: grammar, evaluation on new rows, generated intersections, limits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mmc_core import GroupDefinitionError, GroupSet
from mmc_core.groups.group_set import MAX_GROUPS, Condition, Group

TABLE = {
    "sex": np.array(["F", "M", "F", "M", "F", None], dtype=object),
    "race": np.array(["A", "A", "B", "C", "B", "A"], dtype=object),
    "age": np.array([20.0, 35.0, 50.0, np.nan, 65.0, 41.0]),
    "female": np.array([1, 0, 1, 0, 1, 0]),
}


def test_whole_population_is_always_first():
    gs = GroupSet([])
    assert gs.names == ["all"]
    assert gs.evaluate(TABLE).sizes.tolist() == [6]


def test_conditions_and_conjunctions():
    spec = {
        "format": "mmc-groups",
        "version": 1,
        "groups": [
            {"name": "women", "where": [{"column": "sex", "op": "==", "value": "F"}]},
            {"name": "not women", "where": [{"column": "sex", "op": "!=", "value": "F"}]},
            {"name": "A or C", "where": [{"column": "race", "op": "in", "values": ["A", "C"]}]},
            {"name": "40-65", "where": [{"column": "age", "op": "between", "lo": 40, "hi": 65}]},
            {"name": ">=50", "where": [{"column": "age", "op": ">=", "value": 50}]},
            {
                "name": "female==1 & B",
                "where": [{"column": "female", "op": "==", "value": 1}, {"column": "race", "op": "==", "value": "B"}],
            },
            {"name": "female text 1", "where": [{"column": "female", "op": "==", "value": "1"}]},
        ],
    }
    gs = GroupSet.from_json(json.dumps(spec))
    dense = gs.evaluate(TABLE).to_dense()
    col = {n: dense[:, i].nonzero()[0].tolist() for i, n in enumerate(gs.names)}
    assert col["women"] == [0, 2, 4]
    assert col["not women"] == [1, 3, 5]  # a missing value is "not F"
    assert col["A or C"] == [0, 1, 3, 5]
    assert col["40-65"] == [2, 5]  # half-open: 65 excluded; NaN in no range
    assert col[">=50"] == [2, 4]
    assert col["female==1 & B"] == [2, 4]
    assert col["female text 1"] == [0, 2, 4]
    assert GroupSet.from_json(gs.to_json()).to_json() == gs.to_json()


def test_generated_groups_and_intersections():
    gs = GroupSet.from_columns(TABLE, ["sex", "race"], max_order=2)
    # all + 2 sexes + 3 races + 6 intersections
    assert len(gs) == 1 + 2 + 3 + 6
    assert "sex=F & race=B" in gs.names
    sizes = dict(zip(gs.names, gs.evaluate(TABLE).sizes))
    assert sizes["sex=F & race=B"] == 2 and sizes["sex=M & race=B"] == 0  # empty groups are kept, reported


def test_numeric_columns_with_many_values_are_cut_at_quartiles():
    t = {"x": np.arange(100.0)}
    gs = GroupSet.from_columns(t, ["x"])
    assert len(gs) == 5
    assert gs.evaluate(t).sizes.tolist() == [100, 25, 25, 25, 25]
    # the cut points are stored in the definitions and reused on new rows
    new = {"x": np.array([-5.0, 30.0, 1000.0])}
    dense = gs.evaluate(new).to_dense()
    assert dense[0, 1] and dense[2, 4] and dense.sum(axis=1).tolist() == [2, 2, 2]


def test_unseen_category_at_predict_time_has_no_members():
    gs = GroupSet.from_columns(TABLE, ["race"])
    new = {"race": np.array(["Z", "A"], dtype=object)}
    assert gs.evaluate(new).sizes.tolist() == [2, 1, 0, 0]


def test_missing_column_is_a_clear_error():
    gs = GroupSet.from_columns(TABLE, ["race"])
    with pytest.raises(GroupDefinitionError, match="'race' is not in the data"):
        gs.evaluate({"sex": TABLE["sex"]})


@pytest.mark.parametrize(
    "bad,match",
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "not a group definition"),
        ('[{"name": "x", "where": [{"column": "age", "op": "__import__(\'os\')", "value": 1}]}]', "unknown op"),
        ('[{"name": "x", "where": [{"column": "age", "op": "==", "value": {"$gt": 1}}]}]', "string or a number"),
        ('[{"name": "x", "where": "age > 3"}]', "must be a list"),
        ('[{"name": "x", "where": [{"column": "age", "op": ">", "value": "3; rm -rf"}]}]', "numeric"),
        ('[{"name": "", "where": []}]', "name"),
        ('[{"name": "a", "where": []}, {"name": "a", "where": []}]', "duplicate"),
        ('[{"name": "x", "where": [{"column": "age", "op": "between", "lo": 5, "hi": 1}]}]', "lo < hi"),
        ('[{"name": "x", "where": [{"column": "age", "op": "==", "value": 1, "eval": "x"}]}]', "unknown key"),
    ],
)
def test_malformed_or_hostile_definitions_are_rejected(bad, match):
    with pytest.raises(GroupDefinitionError, match=match):
        GroupSet.from_json(bad)


def test_text_compared_with_numeric_column_is_an_error():
    gs = GroupSet.from_json('[{"name": "x", "where": [{"column": "age", "op": "==", "value": "old"}]}]')
    with pytest.raises(GroupDefinitionError, match="numeric"):
        gs.evaluate(TABLE)


def test_too_many_groups_are_refused_with_the_count():
    t = {f"c{i}": np.arange(40) % 10 for i in range(4)}
    with pytest.raises(GroupDefinitionError, match=r"give \d+ groups; the limit is " + str(MAX_GROUPS)):
        GroupSet.from_columns(t, list(t), max_order=4)


def test_pairs_for_rows_and_signatures_match_dense_membership():
    rng = np.random.default_rng(0)
    t = {"a": rng.integers(0, 3, 500), "b": rng.integers(0, 4, 500)}
    memb = GroupSet.from_columns(t, ["a", "b"], 2).evaluate(t)
    dense = memb.to_dense()
    for rows in (np.array([3, 7, 11]), np.arange(0, 500, 2)):  # both code paths (few rows / many rows)
        loc, g = memb.pairs_for_rows(rows)
        got = np.zeros((rows.size, memb.n_groups), bool)
        got[loc, g] = True
        assert np.array_equal(got, dense[rows])
    sig, n_sig = memb.signatures()
    A = memb.signature_matrix(sig, n_sig)
    assert n_sig == 12 and np.array_equal(A[sig].astype(bool), dense)


def test_unlisted_values_names_new_categories_only():
    fit = {"race": np.array(["A", "B", "A"], dtype=object), "n": np.array([1.0, 2.0, 2.0]), "x": np.array([0.1, 5, 9])}
    gset = GroupSet.from_columns(fit, ["race", "n", "x"], max_order=2, max_values=2)
    new = {
        "race": np.array(["A", "C", None, "C", "D"], dtype=object),
        "n": np.array([1.0, 3.0, np.nan, 2.0, 7.0]),
        "x": np.array([-100.0, 0, 1, 2, 1e9]),  # numeric cuts cover every value: never "unlisted"
    }
    out = {c: (k, ex) for c, k, ex in gset.unlisted_values(new)}
    assert out == {"race": (3, ["C", "D"]), "n": (2, ["3", "7"])}  # missing values are not counted
    assert GroupSet.from_columns(fit, ["race"]).unlisted_values(fit) == []
    # a single listed value is a chosen group, not an enumeration: rows outside it are expected
    one = GroupSet([Group("a", (Condition("race", "==", value="A"),))])
    assert one.unlisted_values(new) == []
    both = GroupSet([Group("ab", (Condition("race", "in", values=("A", "B")),))])
    assert both.unlisted_values(new) == [("race", 3, ["C", "D"])]


def test_numeric_bins_are_named_with_inequalities_and_one_number_format():
    """An audit of a zip-code column listed "zip in [-inf, 1.008e+04)" next to "zip in [1.008e+04, 10152)": the
    open ends now read as inequalities and a cut keeps its digits instead of switching to exponent form."""
    import pandas as pd

    from mmc_core import GroupSet

    df = pd.DataFrame({"zip": np.r_[np.arange(10000.0, 10100.0), np.arange(10100.5, 10200.5)]})
    names = [n for n in GroupSet.from_columns(df, ["zip"]).names if n != "all"]
    assert names[0].startswith("zip < ") and names[-1].startswith("zip >= ")
    assert not any("inf" in n or "e+" in n for n in names), names
    inner = [n for n in names if " in [" in n]
    assert inner and all(n.count(",") == 1 for n in inner)

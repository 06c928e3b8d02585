"""Groups files and group names (issue 38): hostile JSON refused in one line; a huge file refused by its count
before any group is parsed; user names with bidi controls refused; names made from data values always read back
(what `mmc fit` writes, every later command loads)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from mmc_core import GroupSet
from mmc_core.common.errors import GroupDefinitionError
from mmc_core.groups.conditions import MAX_IN_VALUES
from mmc_core.groups.group_set import MAX_GROUPS, loadable_name


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('[{"name": "a", "where": [{"column": "x", "value": ' + "7" * 5000 + "}]}]", "number too long"),
        (json.dumps([{"name": "x\u202eevil", "where": [{"column": "g", "value": 1}]}]), "bidirectional control"),
        (
            json.dumps(
                [{"name": "big", "where": [{"column": "g", "op": "in", "values": list(range(MAX_IN_VALUES + 1))}]}]
            ),
            f"the limit is {MAX_IN_VALUES:,}",
        ),
    ],
)
def test_hostile_groups_files_are_one_error(text, message):
    with pytest.raises(GroupDefinitionError, match=message):
        GroupSet.from_json(text)


def test_too_many_groups_are_refused_by_their_count_before_parsing(monkeypatch):
    from mmc_core.groups import group_set as G

    parsed = []
    real = G.Group.from_dict.__func__

    def counting(cls, d, where="group"):
        parsed.append(1)
        return real(cls, d, where)

    monkeypatch.setattr(G.Group, "from_dict", classmethod(counting))
    many = [{"name": f"n{i}", "where": [{"column": "g", "value": i}]} for i in range(200_000)]
    with pytest.raises(GroupDefinitionError, match=f"the limit is {MAX_GROUPS}"):
        GroupSet.from_json(many)
    assert parsed == []


def test_duplicate_names_are_found_in_linear_time():
    groups = [{"name": f"n{i % 4000}", "where": [{"column": "g", "value": i}]} for i in range(4500)]
    with pytest.raises(GroupDefinitionError, match="duplicate group name"):
        GroupSet.from_json(groups)


def test_loadable_names():
    assert loadable_name("a\nb\tc\x00") == "a\\nb\\tc\\x00"
    assert loadable_name("r\u202el") == "r[U+202E]l"
    a, b = loadable_name("x" * 300), loadable_name("x" * 299 + "y")
    assert len(a) == len(b) == 200 and a != b and a.endswith(a[-8:])


def test_names_made_from_any_value_read_back(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 900
    vals = np.array(["plain", "a" * 300, "a" * 300 + "b", "line\nbreak", "tab\there", "nul\x00x", "rl\u202eo"])
    df = pd.DataFrame({"g": rng.choice(vals, n), "x": rng.normal(size=n)})
    df["y"] = df["x"] + rng.normal(size=n)
    data = tmp_path / "d.parquet"
    df.to_parquet(data, index=False)
    model = tmp_path / "m.json"
    assert main(["fit", "--data", str(data), "--label", "y", "--group-cols", "g", "--out", str(model)]) == 0
    for cmd in (["predict"], ["audit", "--label", "y"]):
        out = tmp_path / ("p.csv" if cmd[0] == "predict" else "a.json")
        assert main([cmd[0], "--data", str(data), "--model", str(model), *cmd[1:], "--out", str(out)]) == 0, (
            capsys.readouterr().err
        )
    names = GroupSet.from_json(json.loads(model.read_text())["groups"]).names
    assert len(names) == 8 and "g=line\\nbreak" in names and "g=rl[U+202E]o" in names


def test_the_schema_catches_what_the_parser_would_ignore():
    """A field the parser does not read for this operator (lo on '==') is still typed by the schema, and the error
    names its key path."""
    bad = [{"name": "a", "where": [{"column": "g", "op": "==", "value": 1, "lo": "x"}]}]
    with pytest.raises(
        GroupDefinitionError, match=r"at \[0\]\.where\[0\]\.lo \(group 'a'\): must be a number or null, got a string"
    ):
        GroupSet.from_json(bad)


def test_discovery_on_a_0_1_label_looks_for_mean_errors_only():
    from mmc_core.discovery.discover_groups import discover

    rng = np.random.default_rng(0)
    n = 3000
    df = pd.DataFrame({"a": rng.integers(0, 4, n), "b": rng.normal(size=n)})
    p = 1 / (1 + np.exp(-(df["b"] + (df["a"] == 2))))
    y = (rng.random(n) < p).astype(float)
    res = discover(df, y, prediction=1 / (1 + np.exp(-df["b"])), features=["a", "b"], n_moments=2, seed=1)
    assert {f.kind for f in res.findings} <= {"mean"} and res.findings

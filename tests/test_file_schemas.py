"""Model and groups files validated on load (issue 38): read through one bounded JSON reader (size from the file's
metadata before it is read, nesting depth, number length, non-finite numbers, duplicate keys), checked against
their JSON Schemas (mmc_core/schemas) and then by the loaders' own rules. Every bad file gets one line naming the
key path and exit 2, never a traceback, and no tampered value is accepted; everything `mmc fit` writes reads back.
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from mmc_core import FittedModel, GroupSet, MomentMulticalibrator
from mmc_core.common.errors import GroupDefinitionError, ModelFormatError

REPO = Path(__file__).resolve().parents[1]
DATA = str(REPO / "demo_datasets" / "synthetic_scores.csv")


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A model file with everything a tampered file may touch: log, cells, moment cells, interval records."""
    d = tmp_path_factory.mktemp("schemas")
    out = d / "m.json"
    args = ["fit", "--data", DATA, "--label", "outcome", "--group-cols", "sex,race,age", "--max-order", "2"]
    assert main([*args, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["log"] and doc["cells"]["rounds"] and doc["moment_cells"] and doc["extras"]["intervals"]
    return doc


def _run(args, capsys):
    """(exit code, the stderr lines starting with 'mmc: ', all of stderr)."""
    capsys.readouterr()
    rc = main(args)
    err = capsys.readouterr().err
    return rc, [ln for ln in err.splitlines() if ln.startswith("mmc: ")], err


def _command(command, model, tmp_path):
    out = tmp_path / {"predict": "o.csv", "report": "o.pdf", "audit": "o.json"}[command]
    args = [command, "--model", str(model), "--data", DATA, "--out", str(out)]
    return args + ([] if command == "predict" else ["--label", "outcome"]), out


def _refused(args, out, capsys, *needles):
    rc, lines, err = _run(args, capsys)
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith("mmc: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert out is None or not out.exists()
    return lines[0]


# ---- tampered model files: refused in one line naming the key path, from every command --------------------------
def _set(path, value):
    def edit(m):
        node = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


TAMPERED = {
    # name: (edit, the key path the message names, what it says)
    "alpha as a string": (_set(["params", "alpha"], "0.001"), "at params.alpha:", "must be a number, got a string"),
    "a fractional group index": (_set(["log", 0, 2], 1.5), "at log[0][2]:", "must be an integer"),
    "a group index written 1.0": (_set(["log", 0, 2], 1.0), "at log[0][2]:", "must be an integer"),
    "a fractional cell index": (_set(["log", 0, 3, 0], 0.5), "at log[0][3][0]:", "must be an integer"),
    "a boolean in round_ends": (_set(["round_ends", 0], True), "at round_ends[0]:", "got a boolean"),
    "a negative cell penalty": (_set(["cells", "rounds", 0, "penalty"], -3.0), "at cells.rounds[0].penalty:", "> 0"),
    "a negative moment cell penalty": (
        _set(["moment_cells", "2", "rounds", 0, "penalty"], -3.0),
        "at moment_cells.2.rounds[0].penalty:",
        ">= 0",
    ),
    "a cell weight over 1": (_set(["cells", "rounds", 0, "weight"], 5.0), "at cells.rounds[0].weight:", "<= 1"),
    "a string among the calibrated thresholds": (
        _set(["extras", "intervals", "calibrated", "theta", 0, 0], "0.5"),
        "at extras.intervals.calibrated.theta[0][0]:",
        "got a string",
    ),
    "info.history as a string": (_set(["info", "history"], "lots"), "at info.history:", "must be a list"),
    "info.seconds as a string": (_set(["info", "seconds"], "ten"), "at info.seconds:", "got a string"),
    "extras.intervals as a list": (_set(["extras", "intervals"], [1, 2]), "at extras.intervals:", "an object"),
    "an unknown top-level key": (_set(["payload"], "x"), "at the top level:", "unknown key(s) ['payload']"),
    "a label range bound as a string": (_set(["label_scale", "lo"], "0"), "at label_scale.lo:", "got a string"),
}


@pytest.mark.parametrize("what", list(TAMPERED))
def test_a_tampered_model_is_refused_in_one_line_naming_the_key_path(fitted, tmp_path, capsys, what):
    edit, where, says = TAMPERED[what]
    m = copy.deepcopy(fitted)
    edit(m)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(m))
    args, out = _command("predict", path, tmp_path)
    line = _refused(args, out, capsys, f"{path}: {where}", says)
    assert len(line) < 400


@pytest.mark.parametrize("command", ["audit", "report"])
@pytest.mark.parametrize("what", ["info.history as a string", "info.seconds as a string", "extras.intervals as a list"])
def test_the_records_that_crashed_audit_and_report_are_refused_there(fitted, tmp_path, capsys, command, what):
    edit, where, says = TAMPERED[what]
    m = copy.deepcopy(fitted)
    edit(m)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(m))
    args, out = _command(command, path, tmp_path)
    _refused(args, out, capsys, where, says)


# ---- hostile JSON: the bounded reader ---------------------------------------------------------------------------
def _literal(fitted, path, literal: str) -> str:
    """The model's JSON text with the value at ``path`` written as ``literal``, as an editor could."""
    m = copy.deepcopy(fitted)
    _set(path, "@@here@@")(m)
    return json.dumps(m).replace('"@@here@@"', literal)


@pytest.mark.parametrize(
    "make, needles",
    [
        (lambda m: _literal(m, ["params", "alpha"], "NaN"), ["at params.alpha:", "NaN is not allowed"]),
        (lambda m: _literal(m, ["info", "seconds"], "-Infinity"), ["at info.seconds:", "-Infinity is not allowed"]),
        (lambda m: _literal(m, ["params", "beta"], "1e400"), ["at params.beta:", "out of range"]),
        (lambda m: _literal(m, ["params", "buckets"], "9" * 5000), ["at params.buckets:", "number too long"]),
        (lambda m: _literal(m, ["params", "beta"], "0." + "1" * 500), ["at params.beta:", "number too long"]),
        (lambda m: _literal(m, ["params", "alpha"], '0.5, "alpha": 0.5'), ["at params:", "'alpha' appears twice"]),
        (lambda m: _literal(m, ["label_scale", "source"], '"\\udc00"'), ["at label_scale.source:", "surrogate"]),
        (lambda m: '{"format": ' + "[" * 50_000 + "]" * 50_000 + "}", ["nested too deeply"]),
    ],
    ids=["NaN", "Infinity", "1e400", "5000 digits", "500 decimals", "duplicate key", "lone surrogate", "deep"],
)
def test_hostile_json_in_a_model_file_is_one_line(fitted, tmp_path, capsys, make, needles):
    path = tmp_path / "h.json"
    path.write_text(make(fitted), encoding="utf-8")
    args, out = _command("predict", path, tmp_path)
    _refused(args, out, capsys, *needles)


def test_nesting_is_bounded_by_a_scan_before_parsing(monkeypatch):
    """The depth limit holds before the parser runs: a recursion limit raised elsewhere cannot turn deep nesting
    into a crash of the C parser. Brackets inside strings do not count."""
    from mmc_core.common import jsonfile

    def no_parse(*a, **k):
        raise AssertionError("parsed")

    monkeypatch.setattr(jsonfile.json, "loads", no_parse)
    with pytest.raises(GroupDefinitionError, match="nested too deeply"):
        GroupSet.from_json("[" * 40 + "]" * 40)
    assert jsonfile.nesting_depth('["[[[[", {"a": "]]]}"}, [[1]]]') == 3
    assert jsonfile.nesting_depth('"\\"' * 10_000) == 0  # an unterminated string of escaped quotes: linear, no depth


def test_a_model_file_over_the_limit_is_refused_from_its_size_before_it_is_opened(tmp_path, capsys, monkeypatch):
    from mmc_core.fit import model as M

    path = tmp_path / "big.json"
    path.write_text("{" + " " * 5000 + "}")
    monkeypatch.setattr(M, "MAX_MODEL_BYTES", 4000)
    real = open

    def guarded(file, *a, **k):
        assert str(file) != str(path), "the oversized model was opened"
        return real(file, *a, **k)

    monkeypatch.setattr("builtins.open", guarded)
    args, out = _command("predict", path, tmp_path)
    _refused(args, out, capsys, str(path), "a model file is at most 4,000 bytes")


def test_a_stream_without_a_size_is_read_only_up_to_the_limit(tmp_path, monkeypatch):
    """/dev/zero states size 0: it is refused from its stat (not a regular file) before a byte is read, and a
    regular file that states size 0 and streams (/proc) is read only one byte past the limit."""
    from mmc_core.fit import model as M

    monkeypatch.setattr(M, "MAX_MODEL_BYTES", 10_000)
    with pytest.raises(ModelFormatError, match="not a regular file"):
        FittedModel.load("/dev/zero")
    if os.path.exists("/proc/self/maps") and os.stat("/proc/self/maps").st_size == 0:
        monkeypatch.setattr(M, "MAX_MODEL_BYTES", 10)
        with pytest.raises(ModelFormatError, match="holds more than 10 bytes"):
            FittedModel.load("/proc/self/maps")


# ---- groups files ----------------------------------------------------------------------------------------------
def _groups_file(tmp_path, obj_or_text, name="g.json"):
    path = tmp_path / name
    path.write_text(obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text), encoding="utf-8")
    return path


def _fit_with_groups(path, tmp_path):
    out = tmp_path / "m.json"
    return ["fit", "--data", DATA, "--label", "outcome", "--groups", str(path), "--out", str(out)], out


def test_200k_groups_are_refused_by_their_count_before_any_is_checked(tmp_path, capsys, monkeypatch):
    """The count comes first: neither the schema nor the parser (nor the duplicate check) sees one group."""
    from mmc_core import schemas
    from mmc_core.groups import group_set as G

    def never(*a, **k):
        raise AssertionError("a group was checked before the count")

    monkeypatch.setattr(schemas, "check", never)
    monkeypatch.setattr(G.Group, "from_dict", classmethod(never))
    many = {"format": "mmc-groups", "version": 1, "groups": [{"name": "n", "where": []}] * 200_000}
    path = _groups_file(tmp_path, many)
    args, out = _fit_with_groups(path, tmp_path)
    _refused(args, out, capsys, "200,000 groups defined; the limit is 5000")


def test_a_model_with_the_most_groups_reads_back():
    """The whole population 'all' is not counted twice: 4,999 groups and 'all' (what a fit may write) load."""
    groups = [{"name": f"g{i}", "where": [{"column": "x", "value": i}]} for i in range(4999)]
    doc = GroupSet.from_json(groups).to_json()
    assert len(doc["groups"]) == 5000 and len(GroupSet.from_json(doc)) == 5000
    with pytest.raises(GroupDefinitionError, match="5,000 groups defined"):
        GroupSet.from_json([*groups, {"name": "one more", "where": []}])


def test_an_in_condition_over_the_limit_names_the_group(tmp_path, capsys):
    from mmc_core.groups.conditions import MAX_IN_VALUES

    big = [{"name": "big one", "where": [{"column": "race", "op": "in", "values": list(range(MAX_IN_VALUES + 1))}]}]
    path = _groups_file(tmp_path, big)
    args, out = _fit_with_groups(path, tmp_path)
    _refused(args, out, capsys, "at [0].where[0].values (group 'big one')", f"the limit is {MAX_IN_VALUES:,}")


@pytest.mark.parametrize("ch", ["\u202e", "\u2066", "\u200f", "\u061c"])
def test_bidi_controls_in_a_user_name_are_refused(tmp_path, capsys, ch):
    path = _groups_file(tmp_path, {"groups": [{"name": f"paid{ch}dius", "where": [{"column": "sex", "value": "F"}]}]})
    args, out = _fit_with_groups(path, tmp_path)
    line = _refused(args, out, capsys, "at groups[0].name", "bidirectional control character")
    assert ch not in line


@pytest.mark.parametrize(
    "text, needles",
    [
        ("[" * 40 + "]" * 40, ["nested too deeply"]),
        ('[{"name": "a", "where": [{"column": "age", "value": NaN}]}]', ["at [0].where[0].value:", "NaN"]),
        ('[{"name": "a", "where": [{"column": "age", "value": 1e999}]}]', ["at [0].where[0].value:", "out of range"]),
        ('[{"name": "a", "name": "b", "where": []}]', ["at [0]:", "'name' appears twice"]),
        ('{"groups": [{"name": "a", "where": [{"column": "age", "op": "in"}]}]}', ["at groups[0].where[0]", "values"]),
        ('{"groups": [{"name": "a", "where": [{"column": "age", "value": true}]}]}', ["where[0].value", "boolean"]),
        ('{"groups": [], "extra": 1}', ["at the top level:", "unknown key(s) ['extra']"]),
    ],
    ids=["deep", "NaN", "1e999", "duplicate key", "in without values", "boolean value", "unknown key"],
)
def test_hostile_groups_files_are_one_line(tmp_path, capsys, text, needles):
    path = _groups_file(tmp_path, text)
    args, out = _fit_with_groups(path, tmp_path)
    _refused(args, out, capsys, str(path), *needles)


def test_a_groups_file_over_the_limit_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    from mmc_core.groups import group_set as G

    path = _groups_file(tmp_path, "[" + " " * 3000 + "]")
    monkeypatch.setattr(G, "MAX_GROUPS_FILE_BYTES", 2000)
    real = open

    def guarded(file, *a, **k):
        assert str(file) != str(path), "the oversized groups file was opened"
        return real(file, *a, **k)

    monkeypatch.setattr("builtins.open", guarded)
    args, out = _fit_with_groups(path, tmp_path)
    _refused(args, out, capsys, "a groups file is at most 2,000 bytes")


# ---- what `mmc fit` writes reads back ----------------------------------------------------------------------------
ODD_VALUES = [
    "plain",
    "a" * 300,
    "a" * 300 + "b",  # cut alike: kept apart by the digest of the whole value
    "line\nbreak",
    "line\\nbreak",  # escapes to the same text as the line above: kept apart by the conditions' digest
    "tab\there",
    "nul\x00x",
    "cr\rx",
    "rl\u202eo",
    "iso\u2066x\u2069",
]


@pytest.fixture(scope="module")
def odd_table(tmp_path_factory):
    rng = np.random.default_rng(0)
    n = 1200
    df = pd.DataFrame({"g": rng.choice(ODD_VALUES, n), "x": rng.normal(size=n)})
    df["y"] = df["x"] + rng.normal(size=n)
    path = tmp_path_factory.mktemp("odd") / "d.parquet"
    df.to_parquet(path, index=False)
    return path


def _engines():
    try:
        import dask.dataframe  # noqa: F401
        import distributed  # noqa: F401
    except ImportError:
        return ["numpy"]
    return ["numpy", "dask"]


@pytest.mark.parametrize("engine", _engines())
def test_group_names_made_from_any_value_read_back(odd_table, tmp_path, capsys, engine):
    model = tmp_path / "m.json"
    args = ["fit", "--data", str(odd_table), "--label", "y", "--group-cols", "g", "--out", str(model)]
    extra = ["--engine", "dask", "--workers", "1"] if engine == "dask" else []
    rc, _, err = _run([*args, *extra], capsys)
    assert rc == 0, err
    rc, _, err = _run(
        ["predict", "--data", str(odd_table), "--model", str(model), "--out", str(tmp_path / "p.csv")], capsys
    )
    assert rc == 0, err
    names = FittedModel.load(model).groups.names
    assert len(names) == len(ODD_VALUES) + 1 == len(set(names))
    assert all(1 <= len(n) <= 200 and n.isprintable() for n in names)
    assert "g=tab\\there" in names and "g=nul\\x00x" in names and "g=rl[U+202E]o" in names
    assert sum(n.startswith("g=line\\nbreak#") for n in names) == 2
    assert sum(n.startswith("g=" + "a" * 150) for n in names) == 2


def test_names_are_stable_from_one_fit_to_the_next():
    t = {"g": np.array(["line\nbreak", "line\\nbreak", "x" * 400] * 4, dtype=object)}
    assert GroupSet.from_columns(t, ["g"]).names == GroupSet.from_columns(dict(t), ["g"]).names


# ---- every kind of model the code writes meets the schema --------------------------------------------------------
KINDS = {
    "k=1": {"n_moments": 1},
    "k=2": {"n_moments": 2},
    "k=3 signed": {"n_moments": 3, "odd_moments": "signed"},
    "k=4": {"n_moments": 4},
    "no held-out rows": {"n_moments": 2, "calibration_fraction": 0.0},
    "cross-fit intervals": {"n_moments": 2, "interval_calibration": "cross-fit"},
    "no cells": {"n_moments": 2, "shrunken_cells": False},
    "given thresholds": {"n_moments": 2, "alpha": 0.05, "beta": 0.05},
    "base, affine": {"n_moments": 2, "base_recalibration": "affine"},
    "base, group-linear": {"n_moments": 2, "base_recalibration": "group-linear"},
    "base as is": {"n_moments": 2, "base_recalibration": "none"},
    "binary": {"n_moments": 1, "task": "binary"},
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_model_meets_the_schema_and_reads_back(kind):
    from mmc_core.schemas import check

    df = pd.read_csv(DATA)
    kw = KINDS[kind]
    y = (df["outcome"] > df["outcome"].median()).astype(int) if kw.get("task") == "binary" else df["outcome"]
    base = df["base_pred"] if kind.startswith("base") else None
    est = MomentMulticalibrator(**kw).fit(df, y, GroupSet.from_columns(df, ["sex", "race", "age"], 2), base)
    text = est.model_.to_json()
    doc = json.loads(text)
    check(doc, "model", "model", ModelFormatError)
    assert FittedModel.from_json(text).to_json() == text


@pytest.mark.skipif(len(_engines()) < 2, reason="the Dask engine is not installed")
def test_a_dask_model_meets_the_schema(odd_table, tmp_path, capsys):
    from mmc_core.schemas import check

    model = tmp_path / "m.json"
    args = ["fit", "--engine", "dask", "--workers", "1", "--data", str(odd_table), "--label", "y", "--out", str(model)]
    rc, _, err = _run([*args, "--group-cols", "g", "--moments", "3"], capsys)
    assert rc == 0, err
    check(json.loads(model.read_text()), "model", "model", ModelFormatError)


def test_the_schemas_follow_the_code():
    """The versions the schema accepts are the ones the loader reads; the schema files ship in the wheel."""
    from mmc_core.fit.model_format import READABLE_VERSIONS
    from mmc_core.schemas import schema

    assert tuple(schema("model")["properties"]["version"]["enum"]) == READABLE_VERSIONS
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "mmc_core.schemas" in data["packages"] and data["package-data"]["mmc_core.schemas"] == ["*.schema.json"]
    assert {p.name for p in (REPO / "mmc_core" / "schemas").glob("*.schema.json")} == {
        "model.schema.json",
        "groups.schema.json",
    }


def test_the_fast_path_accepts_only_what_the_schema_accepts():
    """Arrays of plain items skip jsonschema's per-item work when every item passes a compiled test; that test
    may refuse more (the standard validation then decides) but never accept what the schema refuses."""
    from jsonschema import Draft202012Validator, validators

    from mmc_core.schemas import _fast_test, _is_integer, _is_number

    checker = Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
    strict = validators.extend(Draft202012Validator, type_checker=checker)
    schemas = [
        {"type": "number"},
        {"type": "integer", "minimum": 0, "maximum": 20},
        {"type": ["number", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        {"type": ["string", "number"], "maxLength": 3},
        {"type": "array", "items": {"type": "number"}},
        {
            "type": "array",
            "minItems": 3,
            "prefixItems": [{"type": "integer"}, {"type": "integer", "minimum": 1}],
            "items": {"type": "array", "maxItems": 2, "items": {"type": "integer", "minimum": 0}},
        },
        {"type": "array", "prefixItems": [{"type": "integer"}], "items": False},
    ]
    values = [0, 1, -1, 0.5, 1.0, 2, 21, True, False, None, "", "abc", "abcd", float("nan"), float("inf"), 1e400]
    values += [[], [1], [1, 2], [1, 2, [0]], [1, 2, [0, 1, 2]], [1, 0, []], [0.5], [1, "x"], [[1], [2]], [1, 2, 3]]
    for sub in schemas:
        test = _fast_test(sub)
        assert test is not None, sub
        for v in values:
            if test(v):
                assert strict(sub).is_valid(v), (sub, v)

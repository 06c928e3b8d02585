"""A model file edited by hand (or by an attacker) is refused when it is loaded, with one line naming the field,
exit 2 from every command, never a traceback or a silently wrong audit (issue 38)."""

from __future__ import annotations

import copy
import json

import pytest

from app.cli.entry import main

DATA = "demo_datasets/synthetic_scores.csv"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tamper")
    out = d / "m.json"
    args = ["fit", "--data", DATA, "--label", "outcome", "--pred", "base_pred", "--group-cols", "sex,race,age"]
    assert main([*args, "--max-order", "2", "--out", str(out)]) == 0
    return d, json.loads(out.read_text())


EDITS = {
    "params.alpha": lambda m: m["params"].__setitem__("alpha", "0.001"),
    "log[0][3][0]": lambda m: m["log"][0][3].__setitem__(0, 7.5),  # a fractional cell index
    "round_ends": lambda m: m["round_ends"].__setitem__(0, True),
    "extras.intervals.calibrated.theta": lambda m: m["extras"]["intervals"]["calibrated"]["theta"][0].__setitem__(
        0, "x"
    ),
    "info.history": lambda m: m["info"].__setitem__("history", "lots"),
    "info.seconds": lambda m: m["info"].__setitem__("seconds", "ten"),
    "at extras.intervals:": lambda m: m["extras"].__setitem__("intervals", [1, 2]),
}


@pytest.mark.parametrize("what", list(EDITS))
@pytest.mark.parametrize("command", ["audit", "report", "predict"])
def test_a_tampered_field_is_named_and_refused(model, capsys, tmp_path, what, command):
    d, good = model
    m = copy.deepcopy(good)
    EDITS[what](m)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(m))
    out = tmp_path / ("o.csv" if command == "predict" else "o.pdf" if command == "report" else "o.json")
    args = [command, "--model", str(path), "--data", DATA, "--pred", "base_pred", "--out", str(out)]
    args += [] if command == "predict" else ["--label", "outcome"]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("mmc: ")]
    assert len(lines) == 1 and "Traceback" not in err and what in lines[0], err
    assert not out.exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"format": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"format": "mmc-audit-model", "version": ' + "9" * 5000 + "}", "number too long"),
    ],
)
def test_hostile_json_is_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "t.json"
    path.write_text(text)
    assert main(["predict", "--model", str(path), "--data", DATA, "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_model_file_too_large_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    from mmc_core.fit import model as M

    path = tmp_path / "big.json"
    path.write_text("{" + " " * 2000 + "}")
    monkeypatch.setattr(M, "MAX_MODEL_BYTES", 1000)
    monkeypatch.setattr("builtins.open", _refuse_open(open, str(path)))
    assert main(["predict", "--model", str(path), "--data", DATA, "--out", str(tmp_path / "o.csv")]) == 2
    assert "a model file is at most" in capsys.readouterr().err


def _refuse_open(real, target):
    def guarded(file, *a, **k):
        if str(file) == target:
            raise AssertionError("the oversized model was opened")
        return real(file, *a, **k)

    return guarded


def test_the_schema_types_fields_the_loader_reads_loosely(model, tmp_path, capsys):
    d, good = model
    m = copy.deepcopy(good)
    m["label_scale"]["source"] = 5
    path = tmp_path / "t.json"
    path.write_text(json.dumps(m))
    assert (
        main(["predict", "--model", str(path), "--data", DATA, "--pred", "base_pred", "--out", str(tmp_path / "o.csv")])
        == 2
    )
    assert "at label_scale.source: must be a string, got an integer (5)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "kw",
    [
        {"n_moments": 1},
        {"n_moments": 4},
        {"n_moments": 2, "calibration_fraction": 0.0},
        {"n_moments": 3, "odd_moments": "signed"},
    ],
)
def test_every_kind_of_model_written_meets_the_schema(kw):
    import numpy as np
    import pandas as pd

    from mmc_core import FittedModel, GroupSet, MomentMulticalibrator
    from mmc_core.common.errors import ModelFormatError
    from mmc_core.schemas import check

    df = pd.read_csv(DATA)
    est = MomentMulticalibrator(**kw).fit(df, df["outcome"], GroupSet.from_columns(df, ["sex", "race"], 2))
    doc = json.loads(est.model_.to_json())
    check(doc, "model", "model", ModelFormatError)
    assert FittedModel.from_dict(doc).to_json() == est.model_.to_json()
    y = (df["outcome"] > np.median(df["outcome"])).astype(int)
    binary = MomentMulticalibrator(n_moments=1, task="binary").fit(df, y, GroupSet.from_columns(df, ["sex"]))
    check(json.loads(binary.model_.to_json()), "model", "model", ModelFormatError)

"""Issue 38, "nothing lost": an output path that is one of the command's inputs is refused before any work.

Each command writes its --out by a rename over the target, so `fit --out DATA.csv` used to exit 0 with the data
replaced by a model (and `report --out MODEL.json` turned the model into a PDF). Now every command, on both
engines, refuses it first: one line on stderr naming --out and the input's option, exit status 2, nothing
written, the input byte for byte as it was. "The same file" is after symlinks and relative paths.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import build_parser, main
from tests.file_snapshot import snapshot

ROWS = 300
# --engine dask cases name a scheduler nobody listens on: no cluster is ever started, and a guard that let the
# command through would fail on the connection instead of refusing the output
NO_SCHEDULER = ["--engine", "dask", "--scheduler", "tcp://127.0.0.1:9"]


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    d = tmp_path_factory.mktemp("guard")
    rng = np.random.default_rng(38)
    df = pd.DataFrame(
        {
            "sex": rng.choice(["F", "M"], ROWS),
            "age": rng.integers(18, 80, ROWS).astype(float),
            "y": rng.random(ROWS) * 100,
            "base": rng.random(ROWS) * 100,
        }
    )
    df.to_csv(d / "data.csv", index=False)
    (d / "pq").mkdir()
    df.iloc[: ROWS // 2].to_parquet(d / "pq" / "part-0.parquet", index=False)
    df.iloc[ROWS // 2 :].to_parquet(d / "pq" / "part-1.parquet", index=False)
    (d / "groups.json").write_text(json.dumps([{"name": "old", "where": [{"column": "age", "op": ">", "value": 60}]}]))
    fit = ["fit", "--data", str(d / "data.csv"), "--label", "y", "--pred", "base", "--group-cols", "sex"]
    assert main(fit + ["--label-range", "0,100", "--out", str(d / "model.json")]) == 0
    return d


# (name, the command with {input} placeholders, the placeholder --out names, the input option that reads it)
CASES = [
    ("fit data", ["fit", "--data", "{data}", "--label", "y"], "{data}", "--data"),
    ("fit groups", ["fit", "--data", "{data}", "--label", "y", "--groups", "{groups}"], "{groups}", "--groups"),
    ("predict data", ["predict", "--model", "{model}", "--data", "{data}", "--pred", "base"], "{data}", "--data"),
    ("predict model", ["predict", "--model", "{model}", "--data", "{data}", "--pred", "base"], "{model}", "--model"),
    ("audit data", ["audit", "--model", "{model}", "--data", "{data}", "--label", "y", "--pred", "base"], "{data}", "--data"),
    ("audit model", ["audit", "--model", "{model}", "--data", "{data}", "--label", "y", "--pred", "base"], "{model}", "--model"),
    ("report data", ["report", "--model", "{model}", "--data", "{data}", "--label", "y", "--pred", "base"], "{data}", "--data"),
    ("report model", ["report", "--model", "{model}", "--data", "{data}", "--label", "y", "--pred", "base"], "{model}", "--model"),
    ("discover data", ["discover", "--data", "{data}", "--label", "y", "--pred", "base"], "{data}", "--data"),
    ("discover model", ["discover", "--data", "{data}", "--label", "y", "--model", "{model}", "--pred", "base"], "{model}", "--model"),
    ("compare data", ["compare", "--data", "{data}", "--label", "y", "--pred-a", "base", "--pred-b", "base", "--name-a", "a"], "{data}", "--data"),
    ("compare model", ["compare", "--data", "{data}", "--label", "y", "--model", "{model}", "--pred-b", "base", "--pred", "base"], "{model}", "--model"),
    ("dask fit data", ["fit", "--data", "{pq}", "--label", "y", *NO_SCHEDULER], "{pqfile}", "--data"),
    ("dask fit groups", ["fit", "--data", "{pqglob}", "--label", "y", "--groups", "{groups}", *NO_SCHEDULER], "{groups}", "--groups"),
    ("dask predict data", ["predict", "--model", "{model}", "--data", "{pq}", "--pred", "base", *NO_SCHEDULER], "{pq}", "--data"),
    ("dask predict model", ["predict", "--model", "{model}", "--data", "{pqglob}", "--pred", "base", *NO_SCHEDULER], "{model}", "--model"),
    ("dask audit data", ["audit", "--model", "{model}", "--data", "{pqglob}", "--label", "y", "--pred", "base", *NO_SCHEDULER], "{pqfile}", "--data"),
    ("dask compare data", ["compare", "--data", "{pqglob}", "--label", "y", "--pred-a", "base", "--pred-b", "base", "--name-a", "a", *NO_SCHEDULER], "{pqfile}", "--data"),
    ("dask compare model", ["compare", "--data", "{pq}", "--label", "y", "--model", "{model}", "--pred-b", "base", "--pred", "base", *NO_SCHEDULER], "{model}", "--model"),
    ("dask audit model", ["audit", "--model", "{model}", "--data", "{pq}", "--label", "y", "--pred", "base", *NO_SCHEDULER], "{model}", "--model"),
]  # fmt: skip

# how --out names the input: as the command does, through a symlink to it, by a relative path from another
# folder, and as the real file while the command reads it through a symlink
FORMS = ["same path", "symlink out", "relative out", "symlink in"]


def _render(originals, tmp_path, args, out_token, form, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(originals, work, symlinks=True)
    (tmp_path / "elsewhere").mkdir()
    paths = {
        "{data}": str(work / "data.csv"),
        "{model}": str(work / "model.json"),
        "{groups}": str(work / "groups.json"),
        "{pq}": str(work / "pq"),
        "{pqglob}": str(work / "pq" / "*.parquet"),
        "{pqfile}": str(work / "pq" / "part-0.parquet"),
    }
    target = paths[out_token]
    out = target
    if form == "symlink out":
        out = str(tmp_path / "elsewhere" / "out")
        os.symlink(target, out)
    elif form == "relative out":
        monkeypatch.chdir(tmp_path / "elsewhere")
        out = os.path.join(".", os.path.relpath(target, tmp_path / "elsewhere"))
    elif form == "symlink in":
        # the input read through a link in another folder; --out the real path
        link = tmp_path / "elsewhere" / "in"
        real = str(work / "pq") if out_token == "{pqfile}" else target
        os.symlink(real, link)
        for token in ("{pq}", "{pqglob}") if real.endswith("pq") else [k for k, v in paths.items() if v == target]:
            paths[token] = paths[token].replace(real, str(link))
    rendered = [paths.get(a, a) for a in args]
    return rendered + ["--out", out], out


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name, args, out_token, in_option", CASES, ids=[c[0] for c in CASES])
def test_output_that_is_an_input_is_refused_first(
    originals, tmp_path, capsys, monkeypatch, name, args, out_token, in_option, form
):
    argv, out = _render(originals, tmp_path, args, out_token, form, monkeypatch)
    before = snapshot(tmp_path)
    code = main(argv)
    stdout, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (name, form, err)
    assert len(lines) == 1 and lines[0].startswith("mmc: error: --out "), err
    assert in_option in lines[0] and "Traceback" not in err, err
    assert stdout == ""
    assert snapshot(tmp_path) == before  # nothing written, every input byte for byte as it was


def test_every_command_that_writes_is_covered():
    """A new command with --out (or a new engine of one) needs its case above."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    writers = {
        name: {"--engine"} <= set(p._option_string_actions) for name, p in sub.choices.items()
        if "--out" in p._option_string_actions
    }  # fmt: skip
    covered = {c[1][0] for c in CASES}
    assert set(writers) == covered
    with_dask = {c[1][0] for c in CASES if "dask" in c[1]}
    assert {n for n, has_engine in writers.items() if has_engine} == with_dask


def test_a_different_file_in_the_same_folder_is_still_written(originals, tmp_path, capsys, monkeypatch):
    """The guard compares paths, not folders: an output beside its input, named relatively, is written."""
    shutil.copytree(originals, tmp_path / "work")
    monkeypatch.chdir(tmp_path / "work")
    before = (tmp_path / "work" / "data.csv").read_bytes()
    assert main(["predict", "--model", "model.json", "--data", "data.csv", "--pred", "base", "--out", "./p.csv"]) == 0
    capsys.readouterr()
    assert len(pd.read_csv(tmp_path / "work" / "p.csv")) == ROWS
    assert (tmp_path / "work" / "data.csv").read_bytes() == before

"""Issue 38: a missing or infinite value that only the Dask workers find (the Parquet footers carry no statistics)
is named as the in-memory engine names it, with the same count and the same data row of the whole table, not
"first at row 3" counted within the partition that held it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from tests.dask_cluster import quiet_cluster

pytest.importorskip("dask.dataframe", reason="the Dask engine needs dask[dataframe]")
distributed = pytest.importorskip("distributed", reason="the Dask engine needs distributed")

ROWS = 300


@pytest.fixture(scope="module")
def scheduler():
    with quiet_cluster() as address:
        yield address


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("rows")
    rng = np.random.default_rng(38)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], ROWS), "y": rng.random(ROWS) * 10, "p": rng.random(ROWS) * 10})
    df.to_csv(d / "good.csv", index=False)
    argv = ["fit", "--data", str(d / "good.csv"), "--label", "y", "--pred", "p", "--group-cols", "g"]
    assert main([*argv, "--label-range", "0,10", "--out", str(d / "model.json")]) == 0
    return d, df


def _bad(d, df, name, col, rows, value=np.nan):
    """The table with ``value`` in ``col`` at ``rows``: as one CSV, and as 3 Parquet files without statistics."""
    x = df.copy()
    x.loc[list(rows), col] = value
    x.to_csv(d / f"{name}.csv", index=False)
    folder = d / name
    folder.mkdir()
    for i, part in enumerate(np.array_split(np.arange(ROWS), 3)):
        x.iloc[part].to_parquet(folder / f"part-{i}.parquet", index=False, write_statistics=False)
    return str(d / f"{name}.csv"), str(folder)


def _line(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("command", "col", "value"),
    [("predict", "p", np.nan), ("audit", "p", np.inf), ("audit", "y", np.nan), ("fit", "y", -np.inf)],
)
def test_both_engines_name_the_same_row(work, scheduler, tmp_path, capsys, command, col, value):
    d, df = work
    # rows 150 and 170 are in the 2nd partition (rows 100-199): data rows 151 and 171 of the table
    csv, folder = _bad(d, df, f"{command}-{col}", col, [170, 150], value)
    out = str(tmp_path / ("out.json" if command != "predict" else "out.csv"))
    if command == "fit":
        tail = ["--label", "y", "--pred", "p", "--group-cols", "g", "--out", out]
    else:
        tail = ["--model", str(d / "model.json"), "--pred", "p", "--out", out]
        tail += ["--label", "y"] if command == "audit" else []
    memory = _line([command, "--data", csv, *tail], capsys)
    dask = _line([command, "--engine", "dask", "--scheduler", scheduler, "--data", folder, *tail], capsys)
    assert dask == memory, (dask, memory)
    assert f"'{col}' has 2 missing or infinite value(s) (first in data row 151)" in dask
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "out.csv").exists()

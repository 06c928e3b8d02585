"""Issue 38: `mmc predict --engine dask --out folder/` gives the folder the mode a plainly created folder gets
(0777 minus the umask), as the in-memory engine's files get 0666 minus the umask; it was mkdtemp's 0700."""

from __future__ import annotations

import os
import stat

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from tests.dask_cluster import quiet_cluster

pytest.importorskip("dask.dataframe", reason="the Dask engine needs dask[dataframe]")
pytest.importorskip("distributed", reason="the Dask engine needs distributed")


@pytest.fixture(scope="module")
def scheduler():
    with quiet_cluster(memory_limit=None) as address:
        yield address


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_prediction_folder_mode_follows_the_umask(tmp_path, scheduler, umask):
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 200), "y": rng.random(200), "p": rng.random(200)})
    df.to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "pq").mkdir()
    df.to_parquet(tmp_path / "pq" / "part-0.parquet", index=False)
    fit = ["fit", "--data", str(tmp_path / "d.csv"), "--label", "y", "--pred", "p", "--group-cols", "g"]
    assert main([*fit, "--label-range", "0,1", "--out", str(tmp_path / "m.json")]) == 0
    old = os.umask(umask)
    try:
        argv = ["predict", "--model", str(tmp_path / "m.json"), "--pred", "p", "--data"]
        # the in-memory engine's file, for the mode
        assert main([*argv, str(tmp_path / "d.csv"), "--out", str(tmp_path / "out.csv")]) == 0
        argv.append(str(tmp_path / "pq"))
        dask = ["--engine", "dask", "--scheduler", scheduler, "--out", str(tmp_path / "preds") + "/"]
        assert main([*argv, *dask]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "preds").st_mode) == 0o777 & ~umask
    assert stat.S_IMODE(os.stat(tmp_path / "out.csv").st_mode) == 0o666 & ~umask
    assert any(f.endswith(".parquet") for f in os.listdir(tmp_path / "preds"))

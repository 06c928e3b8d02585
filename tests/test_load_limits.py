"""Issue 38: table limits are checked from the file's metadata (Parquet footer) or a sample (CSV) before the
table is read, and the dashboard refuses an upload that would not fit its server's memory budget before it is
read. The files are those of the issue: small on disk, huge once decoded (a 2.3 MB Parquet file of 2.5M x 202
zeros took `mmc fit` to 11.9 GB; one of 60M rows was refused only after 3 GB).

No wall-clock or RSS assertions: pandas' readers are made to fail if called, which shows the refusal comes
first."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.cli import entry as cli
from app.services import io as mio
from mmc_core.common.errors import DataError


def _zeros_parquet(path, rows: int, names: list[str], chunk: int = 500_000, dtype="float64"):
    """A Parquet file of ``rows`` x ``names`` zeros, written a row group at a time from one shared array (the
    file is a few MB; the table it decodes to is never built here)."""
    zeros = pa.array(np.zeros(chunk, dtype=dtype))
    schema = pa.schema([(n, zeros.type) for n in names])
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        done = 0
        while done < rows:
            k = min(chunk, rows - done)
            col = zeros if k == chunk else zeros.slice(0, k)
            w.write_table(pa.Table.from_arrays([col] * len(names), schema=schema))
            done += k
    return path


@pytest.fixture(scope="module")
def wide_zeros(tmp_path_factory):
    """2.5M rows x 202 columns of zeros: 2.3 MB on disk, 4 GB as a DataFrame."""
    path = tmp_path_factory.mktemp("limits") / "zeros.parquet"
    return _zeros_parquet(path, 2_500_000, [f"c{i}" for i in range(200)] + ["y", "p"])


@pytest.fixture(scope="module")
def long_zeros(tmp_path_factory):
    """60M rows of zeros (a label and a prediction): under 1 MB on disk."""
    path = tmp_path_factory.mktemp("limits") / "long.parquet"
    return _zeros_parquet(path, 60_000_000, ["y", "p"], chunk=5_000_000, dtype="int8")


@pytest.fixture
def no_reading(monkeypatch):
    """pandas' and pyarrow's table readers fail if called: a refusal must come before them."""

    def forbidden(*a, **k):
        raise AssertionError("the table was read before its limits were checked")

    for mod, name in ((pd, "read_parquet"), (pd, "read_csv"), (pq, "read_table")):
        monkeypatch.setattr(mod, name, forbidden)


def _one_line(err: str) -> str:
    assert "Traceback" not in err and "AssertionError" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("mmc: error")]
    assert len(lines) == 1, err
    return lines[0]


def test_metadata_gives_the_shape_and_memory_of_the_issues_files(wide_zeros, long_zeros, no_reading):
    wide = mio.estimate_table(wide_zeros.read_bytes(), "zeros.parquet")
    assert (wide.rows, len(wide.columns)) == (2_500_000, 202) and wide.bytes == 2_500_000 * 202 * 8
    assert wide.read is None
    only = mio.estimate_table(wide_zeros.read_bytes(), "zeros.parquet", columns=["y", "p", "nope"])
    assert only.read == ["y", "p"] and only.bytes == 2_500_000 * 2 * 8
    long = mio.estimate_table(long_zeros.read_bytes(), "long.parquet")
    assert long.rows == 60_000_000
    with pytest.raises(DataError, match=r"long.parquet has 60000000 rows; the limit is 5,000,000"):
        long.check()
    with pytest.raises(DataError, match=r"zeros.parquet would take about 4.0 GB in memory .*the limit is 200 MB"):
        wide.check()
    only.check()  # 40 MB: within the limit


def test_rows_count_working_memory_beside_their_cells(tmp_path, no_reading):
    """`mmc audit` took 2.2 GB on 5M rows x 3 columns (a 6 MB file: 120 MB of cells): each row costs working
    memory beside its cells, so 5M such rows are refused, 3.9M (1.8 GB measured) are not."""
    big = _zeros_parquet(tmp_path / "big.parquet", 5_000_000, ["y", "p", "g"], chunk=1_000_000)
    with pytest.raises(DataError, match=r"big.parquet has 5,000,000 rows x 3 column\(s\) .*the limit is 600 MB"):
        mio.estimate_table(big.read_bytes(), "big.parquet").check()
    ok = _zeros_parquet(tmp_path / "ok.parquet", 3_900_000, ["y", "p", "g"], chunk=1_300_000)
    mio.estimate_table(ok.read_bytes(), "ok.parquet").check()


@pytest.mark.parametrize("command", ["fit_discover", "audit", "predict"])
def test_the_wide_file_is_refused_before_reading_one_line_exit_2(
    command, wide_zeros, tmp_path, no_reading, capsys, monkeypatch
):
    from mmc_core import FittedModel

    monkeypatch.setattr(FittedModel, "load", classmethod(lambda cls, path: _FakeModel()))
    argv = {
        "fit_discover": ["fit", "--label", "y", "--discover", "--out", str(tmp_path / "m.json")],
        "audit": ["audit", "--label", "y", "--model", str(tmp_path / "m.json"), "--out", str(tmp_path / "a.json")],
        "predict": ["predict", "--model", str(tmp_path / "m.json"), "--out", str(tmp_path / "p.csv")],
    }[command]
    rc = cli.main(argv + ["--data", str(wide_zeros)])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2
    assert "zeros.parquet" in line and "the limit is 200 MB" in line and "2,500,000 rows x 202" in line
    assert not any(p.name != "m.json" for p in tmp_path.iterdir())


class _FakeModel:
    """What the apply commands look at before they read the data (a model file's loader is not tested here)."""

    class groups:
        @staticmethod
        def text_columns():
            return ()

        @staticmethod
        def columns():
            return ["c0"]


def test_the_long_file_is_refused_before_reading(long_zeros, tmp_path, no_reading, capsys):
    rc = cli.main(["fit", "--data", str(long_zeros), "--label", "y", "--out", str(tmp_path / "m.json")])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "long.parquet has 60000000 rows; the limit is 5,000,000" in line


def test_fit_reads_only_the_columns_it_uses(wide_zeros, tmp_path, monkeypatch, capsys):
    """`mmc fit` reads the label, prediction and group columns only: the wide file's 2 used columns (40 MB) are
    read, not its 202 (it is refused for its constant label, after reading, not for its size)."""
    seen = []
    real = pd.read_parquet

    def spy(*a, **k):
        seen.append(k.get("columns"))
        return real(*a, **k)

    monkeypatch.setattr(pd, "read_parquet", spy)
    rc = cli.main(["fit", "--data", str(wide_zeros), "--label", "y", "--pred", "p", "--out", str(tmp_path / "m.json")])
    line = _one_line(capsys.readouterr().err)
    assert seen == [["y", "p"]]
    assert rc == 2 and "constant" in line and "limit" not in line


def test_a_column_not_in_a_partly_read_file_is_named_with_the_files_columns(tmp_path, capsys):
    path = tmp_path / "d.parquet"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [3.0, 1.0, 2.0]}).to_parquet(path, index=False)
    rc = cli.main(["fit", "--data", str(path), "--label", "nope", "--out", str(tmp_path / "m.json")])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "label column 'nope' is not in the data (columns: a, b)" in line


def _wide_csv(rows: int, cols: int) -> bytes:
    line = ",".join(["0"] * cols) + "\n"
    return (",".join(f"c{i}" for i in range(cols)) + "\n" + line * rows).encode()


def test_a_csv_is_refused_from_its_size_and_a_sample_before_reading(tmp_path, no_reading, capsys):
    """A 4 MB CSV of 1M rows x 2 columns is within limits; 200k rows x 200 columns (80 MB of bytes, 320 MB as a
    table) is not, nor one of 6.5M short rows."""
    data = _wide_csv(200_000, 200)
    est = mio.estimate_table(data, "w.csv")
    assert abs(est.rows - 200_000) <= 2_000 and len(est.columns) == 200
    with pytest.raises(DataError, match=r"w.csv would take about 3\d\d MB in memory .*the limit is 200 MB"):
        mio.read_table_bytes(data, "w.csv")
    with pytest.raises(DataError, match=r"t.csv has about 6,5\d\d,\d\d\d rows; the limit is 5,000,000"):
        mio.read_table_bytes(b"y\n" + b"0\n" * 6_500_000, "t.csv")
    path = tmp_path / "w.csv"
    path.write_bytes(data)
    rc = cli.main(["fit", "--data", str(path), "--label", "c0", "--discover", "--out", str(tmp_path / "m.json")])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "w.csv" in line and "limit is 200 MB" in line


def test_text_columns_count_more_than_numbers(no_reading):
    n = 20_000
    ids = "\n".join(f"{i},person-{i:08d}" for i in range(n))
    codes = "\n".join(f"{i},{'FM'[i % 2]}" for i in range(n))
    unique = mio.estimate_table(f"x,id\n{ids}\n".encode(), "u.csv")
    repeated = mio.estimate_table(f"x,sex\n{codes}\n".encode(), "r.csv")
    numbers = mio.estimate_table(f"x,z\n{ids.replace('person-', '')}\n".encode(), "n.csv")
    assert n * 16 <= numbers.bytes <= 1.1 * n * 16  # rows estimated from the shortest lines
    assert repeated.bytes < 1.1 * numbers.bytes  # one str object per distinct value
    assert unique.bytes > 4 * numbers.bytes


def test_a_table_within_limits_reads_as_before(tmp_path):
    df = pd.DataFrame({"g": ["01", "1", "2"], "x": [1.5, 2.5, np.nan], "s": ["a", "b", "c"]})
    data = df.to_csv(index=False).encode()
    back = mio.read_table_bytes(data, "d.csv")
    assert list(back["g"]) == ["01", "1", "2"] and back["x"].isna().sum() == 1
    pq_bytes = df.to_parquet()
    part = mio.read_table_bytes(pq_bytes, "d.parquet", columns=["x", "g", "nope"])
    assert list(part.columns) == ["g", "x"] and part.attrs["file_columns"] == ["g", "x", "s"]


# ------------------------------------------------------------------------------------------------------------
# the dashboard: a per-server budget, checked before an upload is read
# ------------------------------------------------------------------------------------------------------------
APP = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "app" / "dashboard.py")


@pytest.fixture
def dashboard():
    from streamlit.testing.v1 import AppTest

    from app.ui import persist

    persist.forget_all()
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    at.radio(key="src_kind").set_value("Upload a file").run()
    yield at
    persist.forget_all()


def _upload(at, name: str, data: bytes):
    at.file_uploader(key="upload").set_value((name, data, "application/octet-stream")).run()
    assert not at.exception, [e.value for e in at.exception]
    return " ".join(str(e.value) for e in at.error)


def test_a_small_upload_that_decodes_to_gigabytes_is_refused_before_it_is_read(dashboard, tmp_path, monkeypatch):
    """The issue's 0.9 MB upload (1M x 200 zeros: 1.6 GB as a table) took the server to 4 GB: now it is refused
    from its footer, the demo table stays, and the memory a refusal could leave is handed back."""
    from app.ui import budget

    data = _zeros_parquet(tmp_path / "up.parquet", 1_000_000, [f"c{i}" for i in range(200)]).read_bytes()
    assert len(data) < 2_000_000

    def forbidden(*a, **k):
        raise AssertionError("the upload was read before its size was checked")

    released = []
    monkeypatch.setattr(pd, "read_parquet", forbidden)
    monkeypatch.setattr(pq, "read_table", forbidden)
    monkeypatch.setattr(budget, "release_memory", lambda: released.append(True))
    err = _upload(dashboard, "up.parquet", data)
    assert "up.parquet would take about 1.6 GB in memory" in err and "the limit is 100 MB" in err
    assert "AssertionError" not in err and released
    assert dashboard.session_state["data"]["name"] != "up.parquet"


def _held_elsewhere(nbytes: int, session_id: str = "other-session") -> str:
    """A workspace of another session holding a table of ``nbytes``, as app.ui.persist.save keeps it."""
    import time

    from app.ui import persist

    frame = pd.DataFrame({"x": np.zeros(nbytes // 8)})
    work = {"data": {"df": frame, "key": "other", "name": "other.csv", "source": "upload"}}
    with persist._LOCK:
        persist._WORKSPACES["other-ws"] = (time.time() - 3600, work, nbytes, False, 1, "tok", None, session_id)
    return "other-ws"


def test_an_upload_that_would_not_fit_beside_the_other_sessions_tables_is_refused(dashboard, monkeypatch):
    from app.ui import persist

    monkeypatch.setenv("MMC_SERVER_MEMORY_MB", "12")
    wid = _held_elsewhere(8_000_000)
    data = pd.DataFrame({"y": np.arange(500_000) % 7, "g": np.arange(500_000) % 3}).to_parquet()  # 8 MB
    err = _upload(dashboard, "next.parquet", data)
    assert "next.parquet would take about 8 MB in memory and this server's sessions already hold" in err
    assert "the limit is 12 MB for all of them together" in err
    assert wid in persist._WORKSPACES and dashboard.session_state["data"]["name"] != "next.parquet"


def test_the_tables_of_sessions_that_ended_are_let_go_to_make_room(dashboard, monkeypatch):
    from app.ui import persist

    monkeypatch.setenv("MMC_SERVER_MEMORY_MB", "12")
    wid = _held_elsewhere(8_000_000, session_id="closed-tab")
    monkeypatch.setattr(persist, "session_active", lambda sid: sid != "closed-tab")
    data = pd.DataFrame({"y": np.arange(500_000) % 7, "g": np.arange(500_000) % 3}).to_parquet()
    assert _upload(dashboard, "next.parquet", data) == ""
    assert dashboard.session_state["data"]["name"] == "next.parquet"
    assert wid not in persist._WORKSPACES


def test_a_session_that_ended_is_let_go_after_the_grace_period_only(monkeypatch):
    import time

    from app.ui import persist

    persist.forget_all()
    monkeypatch.setattr(persist, "session_active", lambda sid: sid == "open")
    now = time.time()
    for wid, saved, sid in (("recent", now, "closed"), ("old", now - 3600, "closed"), ("live", now - 3600, "open")):
        persist._WORKSPACES[wid] = (saved, {}, 10, False, 1, "t", None, sid)
    persist._WORKSPACES["legacy"] = (now - 3600, {}, 10, False, 1, "t", None)  # no session id: kept
    assert persist.release_ended(older_than=persist.KEEP_ENDED_SECONDS) == 10
    assert set(persist._WORKSPACES) == {"recent", "live", "legacy"}
    persist.forget_all()


# ------------------------------------------------------------------------------------------------------------
# the Dask engine: a partition (a row group) bounded from the footers; fit reads the columns it uses
# ------------------------------------------------------------------------------------------------------------
def test_dask_refuses_a_row_group_too_big_for_a_worker_before_any_cluster(wide_zeros, tmp_path, capsys):
    pytest.importorskip("dask.dataframe")
    from mmc_core.engines import dask_engine as de

    with pytest.raises(DataError, match=r"zeros.parquet: row group 1 would take about 808 MB .*limit for one"):
        de.read_parquet(str(wide_zeros))
    parts = de.read_parquet(str(wide_zeros), columns=["y"])  # one column: 8 MB a row group
    assert parts.npartitions == 5  # a partition a row group (Dask joined them all: one 4 GB partition)
    out = tmp_path / "p"
    rc = cli.main(
        [
            "predict",
            "--engine",
            "dask",
            "--data",
            str(wide_zeros),
            "--model",
            str(_dask_model(tmp_path)),
            "--out",
            str(out),
        ]
    )
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and "row group 1 would take about 808 MB" in line and not out.exists()


def _dask_model(tmp_path):
    """A small model over column c0 (fitted on a tiny table) for `predict` to apply."""
    df = pd.DataFrame({"c0": [0.0, 1.0] * 50, "y": np.linspace(0, 1, 100)})
    df.to_csv(tmp_path / "small.csv", index=False)
    path = tmp_path / "m.json"
    assert (
        cli.main(
            ["fit", "--data", str(tmp_path / "small.csv"), "--label", "y", "--group-cols", "c0", "--out", str(path)]
        )
        == 0
    )
    return path


def test_dask_fit_reads_only_the_columns_it_uses(wide_zeros, tmp_path, monkeypatch):
    pytest.importorskip("dask.dataframe")
    import contextlib

    from app.cli import dask as cli_dask
    from mmc_core import MomentMulticalibrator

    seen = []

    class Stop(Exception):
        pass

    def fit(self, ddf, *a, **k):
        seen.append(list(ddf.columns))
        raise Stop

    monkeypatch.setattr(cli_dask, "dask_session", lambda args, lines=None: contextlib.nullcontext(None))
    monkeypatch.setattr(MomentMulticalibrator, "fit", fit)
    argv = ["fit", "--engine", "dask", "--data", str(wide_zeros), "--label", "y", "--pred", "p"]
    with pytest.raises(Stop):
        cli_dask.fit(cli.build_parser().parse_args(argv + ["--out", str(tmp_path / "m.json")]))
    assert seen == [["y", "p"]]

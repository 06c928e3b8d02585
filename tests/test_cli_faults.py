"""Faults the user does not cause through the data: a full disk, a folder that cannot be written, a bug.
Each is one line on stderr and an exit code, never a traceback, and nothing is left half-written."""

import errno
import os

import numpy as np
import pandas as pd
import pytest

from app.cli import common as cli_common
from app.cli import entry as cli
from tests.dask_cluster import quiet_cluster


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"g": rng.integers(0, 3, 300), "x": rng.normal(size=300)})
    df["y"] = df["x"] + rng.normal(size=300)
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    return path


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("mmc: ")]
    assert "Traceback" not in err
    assert len([ln for ln in lines if "error" in ln]) == 1, err
    return next(ln for ln in lines if "error" in ln)


def test_full_disk_is_one_line_exit_2_and_no_file(table, tmp_path, monkeypatch, capsys):
    real = os.replace

    def full(src, dst, *a, **k):  # the disk fills while the temporary file is moved into place
        if str(dst).endswith("m.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", full)
    out = tmp_path / "m.json"
    rc = cli.main(["fit", "--data", str(table), "--label", "y", "--group-cols", "g", "--out", str(out)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "No space left on device" in line and str(out) in line
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs a folder no one can create files in (/proc)")
def test_folder_that_cannot_be_written_is_one_line_exit_2(table, capsys):
    rc = cli.main(["fit", "--data", str(table), "--label", "y", "--out", "/proc/mmc-model.json"])
    assert rc == 2
    assert "/proc" in _one_error_line(capsys.readouterr().err)


def test_a_bug_is_one_line_exit_1_and_the_traceback_on_request(table, tmp_path, monkeypatch, capsys):
    def broken(args):
        raise ZeroDivisionError("float division by zero\nsecond line")

    monkeypatch.setitem(cli.COMMANDS, "fit", broken)
    args = ["fit", "--data", str(table), "--label", "y", "--out", str(tmp_path / "m.json")]
    monkeypatch.delenv("MMC_TRACEBACK", raising=False)
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: float division by zero" in err
    monkeypatch.setenv("MMC_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(args)


@pytest.fixture
def fitted(table, tmp_path):
    out = tmp_path / "m.json"
    assert cli.main(["fit", "--data", str(table), "--label", "y", "--group-cols", "g", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("rows", [1, 2, 29])
def test_an_audit_that_can_test_nothing_says_so(table, fitted, tmp_path, capsys, rows):
    import json

    small = tmp_path / "small.csv"
    pd.read_csv(table).head(rows).to_csv(small, index=False)
    out = tmp_path / "audit.json"
    capsys.readouterr()
    assert cli.main(["audit", "--data", str(small), "--model", str(fitted), "--label", "y", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    status = json.loads(out.read_text())["findings_status"]
    assert status.startswith("untestable: no group has 30 or more labelled rows")
    assert json.loads(cap.out.splitlines()[-1])["findings_status"] == status
    assert "warning: the findings are untestable" in cap.err


@pytest.mark.skipif(not __import__("shutil").which("pdftotext"), reason="needs poppler-utils (pdftotext)")
def test_the_report_of_an_untestable_audit_says_so_on_its_first_page(table, fitted, tmp_path, monkeypatch, capsys):
    import subprocess

    from tests.test_report import stand_in_renderer

    stand_in_renderer(monkeypatch)
    small = tmp_path / "small.csv"
    pd.read_csv(table).head(2).to_csv(small, index=False)
    out = tmp_path / "r.pdf"
    assert cli.main(["report", "--data", str(small), "--model", str(fitted), "--label", "y", "--out", str(out)]) == 0
    assert "warning: the findings are untestable" in capsys.readouterr().err
    first = subprocess.run(["pdftotext", "-l", "1", str(out), "-"], capture_output=True, text=True, check=True).stdout
    assert "Nothing could be tested" in " ".join(first.split())


def test_labels_that_would_overflow_are_refused(table, fitted, tmp_path, capsys):
    huge = tmp_path / "huge.csv"
    df = pd.read_csv(table)
    df.loc[3, "y"] = 1e300
    df.to_csv(huge, index=False)
    out = tmp_path / "audit.json"
    capsys.readouterr()
    assert cli.main(["audit", "--data", str(huge), "--model", str(fitted), "--label", "y", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "labels reach 1e+300" in _one_error_line(err) and "RuntimeWarning" not in err
    assert not out.exists()


def test_a_duplicate_column_behind_a_quoted_line_break_in_the_header_is_refused(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text('g,"note\nmore",g,y\n1,a,2,0.5\n2,b,1,0.7\n' * 1)
    out = tmp_path / "m.json"
    assert cli.main(["fit", "--data", str(data), "--label", "y", "--out", str(out)]) == 2
    assert "duplicate column name(s): g" in _one_error_line(capsys.readouterr().err)
    assert not out.exists()


def test_a_long_audit_says_what_it_is_doing(table, fitted, tmp_path, monkeypatch, capsys):
    """`mmc audit` passes a progress callback down to the core: each stage (and each block of bootstrap
    replicates) is announced; the CLI prints at most one line per PROGRESS_EVERY seconds (0 here: every one)."""
    from mmc_core import FittedModel
    from mmc_core.auditing.metrics import audit

    df = pd.read_csv(table)
    said: list = []
    audit(FittedModel.load(fitted), df, df["y"].to_numpy(), progress=said.append, n_boot=50)
    assert said[0] == "bootstrap intervals (50 replicates)" and said[-1] == "findings"
    assert "calibrated intervals" in said
    monkeypatch.setattr(cli_common, "PROGRESS_EVERY", 0.0)
    capsys.readouterr()
    out = tmp_path / "audit.json"
    assert cli.main(["audit", "--data", str(table), "--model", str(fitted), "--label", "y", "--out", str(out)]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("mmc: audit: ")]
    assert lines[0] == "mmc: audit: bootstrap intervals (200 replicates)..." and lines[-1] == "mmc: audit: findings..."


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_an_out_that_is_not_a_regular_file_is_refused_and_kept(table, tmp_path, capsys):
    """`--out /dev/full` (as root) replaced the device with the model: an --out that exists and is not a regular
    file (a device, FIFO or socket) is refused before any work, and left as it was."""
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    rc = cli.main(["fit", "--data", str(table), "--label", "y", "--group-cols", "g", "--out", str(fifo)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "not a regular file" in line and str(fifo) in line
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    from mmc_core.common.errors import MMCError
    from mmc_core.fit.model import atomic_write_text

    with pytest.raises(MMCError, match="not a regular file"):  # the writer refuses it too, whoever calls it
        atomic_write_text(fifo, "{}")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_bare_carriage_return_in_an_unquoted_cell_is_a_data_error(tmp_path, capsys):
    """A cell holding a bare CR, unquoted (pandas' to_csv writes it so): its rows would be split where it stands.
    It was `internal error` (exit 1); it is one line naming the file, exit 2, nothing written."""
    path = tmp_path / "cr.csv"
    rows = "".join(f"{'x' if i != 3 else 'a' + chr(13) + '=1+1'},{i},{i % 3}\n" for i in range(40))
    path.write_bytes(("name,y,g\n" + rows).encode())
    out = tmp_path / "m.json"
    rc = cli.main(["fit", "--data", str(path), "--label", "y", "--group-cols", "g", "--out", str(out)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "cr.csv is not a well-formed CSV" in line and "must be quoted" in line
    assert not out.exists()


# ---- the Dask engine: a bad input is one line, before any progress line (issue 38) --------------------------------
@pytest.fixture(scope="module")
def dask_scheduler():
    """The address of a one-worker cluster shared by the module's Dask cases; `--scheduler` holds its progress
    line back as `starting a local Dask cluster` is."""
    with quiet_cluster(processes=True) as address:
        yield address


@pytest.fixture
def parts(tmp_path):
    """A folder of three Parquet files (400 rows), a model fitted on them with a base prediction, and a helper to
    write a changed copy: ``parts.copy(name, change)`` with ``change(df)`` editing the pandas table in place."""
    pytest.importorskip("dask.dataframe", reason="the Dask engine needs dask[dataframe]")
    from mmc_core import GroupSet, MomentMulticalibrator

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"g": rng.integers(0, 2, 400), "k": rng.choice(["a", "b"], 400), "p": rng.normal(size=400)})
    df["y"] = df["p"] + rng.normal(size=400)
    model = tmp_path / "m.json"
    MomentMulticalibrator(n_moments=2, calibration_fraction=0.0, max_rounds=2).fit(
        df, df["y"], GroupSet.from_columns(df, ["g"]), base_prediction=df["p"].to_numpy()
    ).save(model)

    class Parts:
        table, model_path = df, model

        def copy(self, name, change=None, arrow=False):
            d = df.copy()
            if change is not None:
                change(d)
            folder = tmp_path / name
            folder.mkdir()
            for i, rows in enumerate(np.array_split(np.arange(len(d)), 3)):
                piece = d.iloc[rows]
                if arrow:  # a float NaN kept as NaN, not written as null: the footer's statistics do not show it
                    import pyarrow as pa
                    import pyarrow.parquet as pq

                    cols = {c: pa.array(piece[c].to_numpy(), from_pandas=False) for c in piece.columns}
                    pq.write_table(pa.table(cols), folder / f"part-{i}.parquet")
                else:
                    piece.to_parquet(folder / f"part-{i}.parquet", index=False)
            return folder

    return Parts()


def _only_one_line(err: str) -> str:
    """stderr is exactly one line, the error: no progress line before it."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mmc: error: "), err
    return lines[0]


def _no_cluster(monkeypatch):
    from mmc_core.engines import dask_engine

    def refuse(*a, **k):
        raise AssertionError("a Dask cluster was started before the input was checked")

    monkeypatch.setattr(dask_engine, "start_client", refuse)


def _set(col, row, value):
    def change(d):
        if value is None:
            d[col] = d[col].astype(object)
        d.loc[row, col] = value

    return change


@pytest.mark.parametrize(
    "command, change, expected",
    [
        ("fit", _set("y", 250, np.nan), "label column 'y' has 1 missing value(s) (part-1.parquet"),
        ("fit", _set("y", 5, -np.inf), "label column 'y' has infinite value(s) (part-0.parquet"),
        ("fit", _set("p", 390, np.nan), "prediction column 'p' has 1 missing value(s) (part-2.parquet"),
        ("predict", _set("p", 7, np.inf), "prediction column 'p' has infinite value(s)"),
        ("audit", _set("y", 7, np.nan), "label column 'y' has 1 missing value(s)"),
    ],
)
def test_dask_missing_values_are_refused_before_a_cluster_starts(
    parts, tmp_path, monkeypatch, capsys, command, change, expected
):
    """A label or base prediction with a missing or infinite value was found on the workers, after "starting a
    local Dask cluster" and "fitting ..." lines: it is read from the Parquet footers' statistics, before any
    cluster starts, and said in one line."""
    _no_cluster(monkeypatch)
    data = parts.copy("bad", change)
    out = tmp_path / ("pred.csv" if command == "predict" else "out.json")
    args = [command, "--engine", "dask", "--data", str(data), "--pred", "p", "--out", str(out)]
    args += ["--label", "y"] if command != "predict" else []
    args += ["--model", str(parts.model_path)] if command != "fit" else []
    assert cli.main(args) == 2
    assert expected in _only_one_line(capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--workers", "0", "expected a positive integer, got '0'"),
        ("--workers", "100000", "more than 4 per CPU"),
        ("--memory-limit", "1KB", "too little memory for a Dask worker"),
        ("--memory-limit", "100MB", "too little memory for a Dask worker"),
    ],
)
def test_dask_cluster_options_that_cannot_work_are_refused_when_parsed(
    parts, tmp_path, monkeypatch, capsys, option, value, expected
):
    """`--workers 0` printed "starting a local Dask cluster: 0 worker process(es)" before its error; with 1KB or
    100MB a worker the cluster never answered (killed after minutes, silent); 1,000 workers took the memory."""
    _no_cluster(monkeypatch)
    out = tmp_path / "fitted.json"
    args = ["fit", "--engine", "dask", "--data", str(parts.copy("d")), "--label", "y", "--out", str(out)]
    assert cli.main(args + [option, value]) == 2
    assert expected in _only_one_line(capsys.readouterr().err)
    assert not out.exists()


def _groups_file(tmp_path):
    import json

    path = tmp_path / "g.json"
    path.write_text(json.dumps({"groups": [{"name": "x", "where": [{"column": "g", "op": "==", "value": "abc"}]}]}))
    return path


@pytest.mark.parametrize(
    "case, expected",
    [
        ("label NaN (not null)", "label column 'y' has 1 missing or infinite value(s) (first in data row"),
        ("text base", "base prediction 'k' must be numeric"),
        ("label range", "lie outside the label range [0, 1]"),
        ("groups file", "column 'g' is numeric but the group compares it with the text 'abc'"),
        ("predict text base", "prediction column 'k' must be numeric"),
        ("audit NaN (not null)", "label column 'y' has 1 missing or infinite value(s) (first in data row"),
    ],
)
def test_dask_errors_found_on_the_cluster_are_the_only_line(
    parts, dask_scheduler, tmp_path, monkeypatch, capsys, case, expected
):
    """What only the workers can find (a NaN stored as a number, a text column used as numbers, a label outside a
    declared range, a groups file comparing a number with text) was printed after "connecting to the Dask
    scheduler" and "fitting ..." lines: the progress lines are held until the work has started (the descent's
    first round, or PROGRESS_HOLD seconds, set out of reach here: no clock in the test) and dropped on an error."""
    from app.cli import dask as cli_dask

    monkeypatch.setattr(cli_dask, "PROGRESS_HOLD", 1e6, raising=False)
    nan_label = case.endswith("(not null)")
    data = parts.copy("d", _set("y", 250, np.nan) if nan_label else None, arrow=nan_label)
    out = tmp_path / ("pred" if case.startswith("predict") else "out.json")
    command = case.split()[0] if case.split()[0] in ("predict", "audit") else "fit"
    args = [command, "--engine", "dask", "--scheduler", dask_scheduler, "--data", str(data), "--out", str(out)]
    if command != "fit":
        args += ["--model", str(parts.model_path)]
    args += ["--label", "y"] if command != "predict" else []
    args += ["--pred", "k" if "text base" in case else "p"]
    args += {"label range": ["--label-range", "0,1"], "groups file": ["--groups", str(_groups_file(tmp_path))]}.get(
        case, []
    )
    assert cli.main(args) == 2
    assert expected in _only_one_line(capsys.readouterr().err)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_dask_refuses_a_two_valued_label_the_default_engine_fits_as_a_classifier(
    parts, dask_scheduler, tmp_path, monkeypatch, capsys
):
    """A 0/1 label with the default --task auto: the in-memory engine fits a classifier, the Dask engine fitted a
    regression (variances of a 0/1 outcome, exit 0): two engines, two kinds of model for one table. Now one line
    saying so and what to pass; with --task regression the Dask fit runs and says it is a regression."""
    from app.cli import dask as cli_dask
    from mmc_core.fit.model import FittedModel

    monkeypatch.setattr(cli_dask, "PROGRESS_HOLD", 1e6, raising=False)

    def zero_one(df):
        df["y"] = (df["y"] > 0).astype(int)

    data = parts.copy("d", zero_one)
    out = tmp_path / "fitted.json"
    args = ["fit", "--engine", "dask", "--scheduler", dask_scheduler, "--data", str(data), "--label", "y"]
    assert cli.main(args + ["--group-cols", "g", "--out", str(out)]) == 2
    line = _only_one_line(capsys.readouterr().err)
    assert "label 'y' has two values (0 and 1)" in line and "--task regression" in line, line
    assert not out.exists()
    assert cli.main(args + ["--group-cols", "g", "--task", "regression", "--out", str(out)]) == 0
    assert FittedModel.load(out).task == "regression"


def test_dask_progress_lines_are_shown_once_the_descent_runs(parts, dask_scheduler, tmp_path, monkeypatch, capsys):
    """The held lines are not lost: a fit that starts says where it runs and what it fits, before its rounds."""
    from app.cli import dask as cli_dask

    monkeypatch.setattr(cli_dask, "PROGRESS_HOLD", 1e6, raising=False)
    out = tmp_path / "fitted.json"
    args = ["fit", "--engine", "dask", "--scheduler", dask_scheduler, "--data", str(parts.copy("d")), "--label", "y"]
    assert cli.main(args + ["--group-cols", "g", "--out", str(out)]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("mmc: ")]
    assert lines[0].startswith("mmc: connecting to the Dask scheduler at ")
    assert lines[1].startswith("mmc: fitting 3 partition(s) x 3 groups on Dask")
    assert lines[2].startswith("mmc: round 0: ")
    assert out.exists()


def test_dask_predict_to_a_csv_name_writes_the_in_memory_csv(parts, dask_scheduler, tmp_path, capsys):
    """`mmc predict --engine dask --out x.csv` wrote a folder of Parquet files named x.csv: it writes one CSV file,
    byte for byte what the in-memory engine writes (formula cells escaped, line breaks quoted, the header once),
    the partitions in order."""
    payload = ["=cmd|' /C calc'!A0", "x\r=1+1", "a\nb", " @SUM(A1)", "plain"]

    def add_text(d):
        d["note"] = [payload[i % len(payload)] for i in range(len(d))]

    data = parts.copy("d", add_text)
    one = tmp_path / "one.parquet"
    add_text(whole := parts.table.copy())
    whole.to_parquet(one, index=False)
    base = ["predict", "--model", str(parts.model_path), "--pred", "p"]
    ref, out = tmp_path / "ref.csv", tmp_path / "x.csv"
    assert cli.main([*base, "--data", str(one), "--out", str(ref)]) == 0
    dask = ["--engine", "dask", "--scheduler", dask_scheduler]
    assert cli.main([*base, *dask, "--data", str(data), "--out", str(out)]) == 0
    assert out.is_file() and out.read_bytes() == ref.read_bytes()
    back = pd.read_csv(out)
    assert len(back) == len(whole) and not back["note"].astype(str).str.match(r"^\s*[=+\-@]").any()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_dask_predict_to_csv_that_fails_writes_nothing(parts, dask_scheduler, tmp_path, monkeypatch, capsys):
    """An error in the last partition (found on the workers) leaves neither the CSV nor a temporary file, and the
    CSV that was there before is kept; a folder named x.csv is refused before any work."""
    from app.cli import dask as cli_dask

    monkeypatch.setattr(cli_dask, "PROGRESS_HOLD", 1e6, raising=False)
    data = parts.copy("d", _set("p", 395, np.nan), arrow=True)  # a NaN the footers do not show
    out = tmp_path / "x.csv"
    out.write_bytes(b"kept\r\n")
    args = ["predict", "--engine", "dask", "--scheduler", dask_scheduler, "--model", str(parts.model_path)]
    args += ["--data", str(data), "--pred", "p", "--out", str(out)]
    assert cli.main(args) == 2
    assert "prediction column 'p' has 1 missing or infinite value(s)" in _only_one_line(capsys.readouterr().err)
    assert out.read_bytes() == b"kept\r\n" and not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    folder = tmp_path / "f.csv"
    folder.mkdir()
    assert cli.main(args[:-1] + [str(folder)]) == 2
    assert "is a folder" in _only_one_line(capsys.readouterr().err)


BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"


def test_group_names_from_values_with_bidi_controls_are_escaped_alike_everywhere(parts, dask_scheduler, tmp_path):
    """A value holding a bidirectional control (U+202E and its kin) must not become part of a group name as it is:
    a groups file with such a name is refused, since the name would read as something else. Names built from
    values escape it as its code ("[U+202E]", mmc_core.groups.group_set.loadable_name, the rule the model loader agrees
    with): the same names from both engines' `mmc fit --group-cols`, each model read back by `mmc audit`, and
    from the dashboard's group builder, whose raw names were refused, so such a column gave no groups there."""
    import json

    from app.ui import groupbuild
    from mmc_core import FittedModel, GroupSet

    values = [f"a{ch}b" for ch in BIDI_CONTROLS]

    def bidi(d):
        d["g"] = [values[i % len(values)] for i in range(len(d))]

    data = parts.copy("d", bidi)
    one = tmp_path / "one.parquet"
    bidi(whole := parts.table.copy())
    whole.to_parquet(one, index=False)
    names = {}
    for engine, src in (("numpy", one), ("dask", data)):
        model = tmp_path / f"{engine}.json"
        extra = ["--engine", "dask", "--scheduler", dask_scheduler] if engine == "dask" else []
        args = ["fit", "--data", str(src), "--label", "y", "--group-cols", "g", "--max-rounds", "1", *extra]
        assert cli.main([*args, "--out", str(model)]) == 0
        names[engine] = FittedModel.load(model).groups.names  # the model written loads back
        audit = tmp_path / f"{engine}-audit.json"
        assert (
            cli.main(["audit", "--data", str(src), "--label", "y", "--model", str(model), *extra, "--out", str(audit)])
            == 0
        )
        assert json.loads(audit.read_text())
    built = groupbuild.suggest_groups(whole, ["g"])
    names["dashboard"] = groupbuild.validate_groups(built, whole.columns).names
    expected = ["all"] + sorted(f"g=a[U+{ord(ch):04X}]b" for ch in BIDI_CONTROLS)
    for engine, got in names.items():
        assert sorted(got) == sorted(expected), engine
        assert not any(ch in n for n in got for ch in BIDI_CONTROLS), engine
    # the escaped names and the raw values: the groups still hold the rows of their value
    gs = GroupSet.from_json(groupbuild.groups_file(built))
    memb = gs.evaluate(whole, len(whole)).to_dense()
    assert memb[:, 1:].sum(axis=0).tolist() == [sum(v == x for v in whole["g"]) for x in sorted(values)]


@pytest.mark.parametrize("option", [["--task", "binary"], ["--positive", "yes"]])
def test_dask_refuses_a_classifier_fit_instead_of_fitting_a_regression(parts, tmp_path, monkeypatch, capsys, option):
    """`fit --engine dask --task binary` on a continuous label wrote a regression model (exit 0) where the in-memory
    engine refuses the label; the Dask engine has no classifier fit, so asking for one is one line, exit 2."""
    _no_cluster(monkeypatch)
    out = tmp_path / "fitted.json"
    args = ["fit", "--engine", "dask", "--data", str(parts.copy("d")), "--label", "y", "--out", str(out)]
    assert cli.main(args + option) == 2
    assert "classifier fits run in memory only" in _only_one_line(capsys.readouterr().err)
    assert not out.exists()

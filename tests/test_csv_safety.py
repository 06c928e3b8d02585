"""Issue 38, "nothing lost, nothing injected": every CSV mmc exports reads back with the rows it was written
from, and no cell of it is one a spreadsheet would run as a formula.

A spreadsheet runs a text cell whose first character, after any leading blanks and line breaks, is = + - @, and
the OWASP list adds a leading tab or carriage return. A bare carriage return inside a cell splits the row for
pandas (and for spreadsheets) unless the cell is quoted.
"""

from __future__ import annotations

import io
import re
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from app.services.io import CSV_EXACT, csv_bytes, read_table_bytes

ROOT = Path(__file__).resolve().parents[1]
RUNS = re.compile(r"^(?:[\t\r]|\s*[=+\-@])")  # what a spreadsheet would execute (OWASP CSV injection)
CALC = "=cmd|' /C calc'!A0"

PAYLOADS = [
    CALC,
    "x\r" + CALC,  # the tester's bare carriage return: unquoted, it split the row
    "x\n" + CALC,
    "x\r\n" + CALC,
    "\r" + CALC,
    "\n" + CALC,
    "\r\n" + CALC,
    "\t" + CALC,
    "  " + CALC,
    " \t\n @SUM(A1)",
    "+1+1",
    "-1+1",
    "@SUM(A1:A9)",
    '"' + CALC + '"',
    "a," + CALC,
    "\tplain",
    "\rplain",
    "ok",
    "ends with\r",
    "ends with\n",
    '=HYPERLINK("http://x","y")\r=1+1',
]


def _read(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), **CSV_EXACT)


def _executable(df: pd.DataFrame) -> list:
    """The cells (and column names) of ``df`` a spreadsheet would run."""
    cells = [c for c in df.columns if isinstance(c, str) and RUNS.match(c)]
    for c in df.columns:
        s = df[c]
        if s.dtype == object:
            cells += [v for v in s if isinstance(v, str) and RUNS.match(v)]
    return cells


def _unescaped(v):
    """A read-back cell as it was before the writer's quote prefix."""
    return v[1:] if isinstance(v, str) and v.startswith("'") and RUNS.match(v[1:]) else v


@pytest.mark.parametrize(
    "payload, back",
    [
        ("x\r" + CALC, "x\r" + CALC),  # one text cell starting with x: nothing to run, nothing to escape
        ("\n" + CALC, "'\n" + CALC),  # was quoted but not escaped
        ("\r" + CALC, "'\r" + CALC),
        ("  " + CALC, "'  " + CALC),  # blanks before the = do not stop a spreadsheet
        (" \t\n @SUM(A1)", "' \t\n @SUM(A1)"),
    ],
)
def test_line_break_and_blank_led_payloads_stay_one_cell_and_are_escaped(payload, back):
    df = pd.DataFrame({"note": ["a", payload, "b", "c", "d"], "y": [1.5, 2.25, 0.1, 1e-300, -3.0]})
    out = _read(csv_bytes(df))
    assert len(out) == 5 and list(out.columns) == ["note", "y"]
    assert out.loc[1, "note"] == back
    assert not _executable(out)
    np.testing.assert_array_equal(out["y"].to_numpy(), df["y"].to_numpy())


def test_six_hundred_mixed_payload_rows_round_trip_whole_and_inert():
    rng = np.random.default_rng(38)
    n = 600
    df = pd.DataFrame(
        {
            "note": rng.choice(np.array(PAYLOADS, dtype=object), n),
            "other": rng.choice(np.array(PAYLOADS[::-1], dtype=object), n),
            "score": rng.normal(size=n) * 10.0 ** rng.integers(-20, 20, n),
            "count": rng.integers(-5, 5, n),
            "code": pd.Categorical(rng.choice(["-A", "@b", "=c", "d"], n)),
        }
    )
    data = csv_bytes(df)
    for back in (_read(data), read_table_bytes(data, "predictions.csv")):
        assert back.shape == df.shape
        assert not _executable(back)
        # nothing lost: each cell is the one written, bar the quote that makes a formula text
        for c in ("note", "other", "code"):
            assert back[c].map(_unescaped).tolist() == df[c].astype(object).tolist()
        np.testing.assert_array_equal(back["score"].to_numpy(), df["score"].to_numpy())  # bit for bit
        np.testing.assert_array_equal(back["count"].to_numpy(), df["count"].to_numpy())


def test_column_names_and_every_text_dtype_are_escaped():
    df = pd.DataFrame(
        {
            " =name": ["x", "y"],
            "\rplain": ["x", "y"],
            "cat": pd.Categorical([" =1+1", "ok"]),
            "string": pd.array(["\n@x", None], dtype="string"),
            "mixed": [3, "\t-1"],
        }
    )
    back = _read(csv_bytes(df))
    assert len(back) == 2 and not _executable(back)
    assert list(back.columns) == ["' =name", "'\rplain", "cat", "string", "mixed"]
    assert back.loc[0, "cat"] == "' =1+1" and back.loc[0, "string"] == "'\n@x" and back.loc[1, "mixed"] == "'\t-1"


def test_cli_predict_output_keeps_every_row_and_runs_no_formula(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame(
        {
            "sex": rng.choice(["F", "M"], n),
            "y": rng.random(n) * 100,
            "note": rng.choice(np.array(PAYLOADS, dtype=object), n),
        }
    )
    # the input itself quoted (RFC 4180 line ends), so that it reads back as the n rows it holds
    data = tmp_path / "d.csv"
    data.write_text(df.to_csv(index=False, lineterminator="\r\n"), newline="")
    assert len(pd.read_csv(data)) == n
    model, out = tmp_path / "m.json", tmp_path / "p.csv"
    fit = ["fit", "--data", str(data), "--label", "y", "--group-cols", "sex", "--label-range", "0,100"]
    assert main(fit + ["--out", str(model)]) == 0
    assert main(["predict", "--model", str(model), "--data", str(data), "--out", str(out)]) == 0
    capsys.readouterr()
    back = _read(out.read_bytes())
    assert len(back) == n and not _executable(back)
    assert back["note"].map(_unescaped).tolist() == df["note"].tolist()
    np.testing.assert_array_equal(back["y"].to_numpy(), df["y"].to_numpy())


# ---------------------------------------------------------------------------------------------------
# Streamlit's own "Download as CSV" of st.dataframe: built in the browser from the displayed values, which our
# writer never sees, so the dashboard turns it off (client.disableDataExport) and exports through the Export page


def test_dashboard_turns_off_streamlits_table_download():
    from streamlit import config

    assert "client.disableDataExport" in config.get_config_options()  # the installed Streamlit knows the option
    for path in (ROOT / ".streamlit" / "config.toml", ROOT / "app" / ".streamlit" / "config.toml"):
        assert tomllib.loads(path.read_text())["client"]["disableDataExport"] is True, path


def test_mmc_dashboard_passes_the_export_switch_to_streamlit(monkeypatch):
    import app.cli.entry as cli

    seen = []

    class FakeProc:
        def __init__(self, cmd):
            seen.append(cmd)

        def wait(self):
            return 0

        def send_signal(self, signum):
            pass

    monkeypatch.setattr(cli.subprocess, "Popen", FakeProc)
    assert main(["dashboard"]) == 0
    cmd = seen[0]
    assert cmd[cmd.index("--client.disableDataExport") + 1] == "true"

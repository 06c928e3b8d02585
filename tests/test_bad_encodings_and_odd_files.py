"""Issue 38, a third battery of files, paths and payloads, none of them in the earlier ones
(tests/test_bad_input_catalogue.py, tests/test_cli_faults.py, tests/test_bad_files_names_and_paths.py and the rest).

Each case runs one `mmc` command (with --engine dask too where the command has it). A bad input must end as every
bad input ends: exit status 2, exactly one printable line on stderr starting with "mmc: error:" and naming the
problem, no traceback, and the working folder byte for byte as it was (nothing written, no input changed, no
temporary file left). A valid input that merely looks odd (mixed line endings, a boolean label, CRLF in a model
file) must work: exit 0, no traceback, and nothing changed but the --out it names.
"""

from __future__ import annotations

import bz2
import contextlib
import json
import lzma
import os
import unicodedata
import zipfile

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from tests.dask_cluster import quiet_cluster
from tests.file_snapshot import snapshot

ROWS = 300
OK = None  # the case is a valid input: exit 0


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Good inputs (a CSV, a model fitted with a base prediction, a Parquet folder) and every case's file."""
    d = tmp_path_factory.mktemp("battery3")
    rng = np.random.default_rng(383)
    df = pd.DataFrame(
        {
            "sex": rng.choice(["F", "M"], ROWS),
            "race": rng.choice(["A", "B", "C"], ROWS),
            "age": rng.integers(18, 80, ROWS).astype(float),
            "y": np.round(rng.random(ROWS) * 100, 3),
            "base": np.round(rng.random(ROWS) * 100, 3),
        }
    )
    df.to_csv(d / "good.csv", index=False)
    (d / "pq").mkdir()
    df.iloc[:150].to_parquet(d / "pq" / "part-0.parquet", index=False)
    df.iloc[150:].to_parquet(d / "pq" / "part-1.parquet", index=False)
    fit = ["fit", "--data", str(d / "good.csv"), "--label", "y", "--pred", "base", "--group-cols", "sex,race"]
    assert main(fit + ["--label-range", "0,100", "--out", str(d / "model.json")]) == 0
    _files(d, df)
    return d, df


def _files(d, df):
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = (d / "good.csv").read_text()
    w = lambda name, content: (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())  # noqa: E731
    # --- CSV files
    w("bz2.csv", bz2.compress(text.encode()))
    w("xz.csv", lzma.compress(text.encode()))
    with zipfile.ZipFile(d / "zip.csv", "w") as z:
        z.writestr("good.csv", text)
    lines = text.splitlines()
    w("mixed_eol.csv", "".join(ln + ("\r\n" if i % 3 == 0 else "\n") for i, ln in enumerate(lines)))
    w("cr_only.csv", "\r".join(lines) + "\r")
    w("thousands.csv", "sex,y\n" + "".join(f'{"FM"[i % 2]},"{1000 + i:,}"\n' for i in range(60)))
    w("bool_label.csv", "sex,y\n" + "".join(f"{'FM'[i % 2]},{'True' if i % 3 else 'False'}\n" for i in range(90)))
    w("repeated_header.csv", text + lines[0] + "\n" + "\n".join(lines[1:20]) + "\n")
    w("empty_name.csv", text.replace("sex,", ",", 1))
    w("wide.csv", ",".join(f"c{i}" for i in range(2100)) + ",y\n" + ",".join(["1"] * 2101) + "\n")
    w("bom_mid.csv", text.replace(",age,", ",\ufeffage,", 1))
    w(
        "nfd_values.csv",
        "sex,y\n" + "".join(f"{unicodedata.normalize('NFD' if i % 2 else 'NFC', 'café')},{i}\n" for i in range(80)),
    )
    w("zwsp_label.csv", text.replace(",y,", ",y\u200b,", 1))
    w("only_header_crlf.csv", lines[0] + "\r\n\r\n")
    w("null_bytes_header.csv", text.replace("sex", "se\x00x", 1))
    w("pipe.csv", text.replace(",", "|"))
    w("latin_name.csv", text.encode("utf-8") + "F,A,30,\xe9,1\n".encode("latin-1"))
    w(
        "quoted_newline_group.csv",
        "sex,y,base\n" + "".join(f'"{"F" if i % 2 else "M"}\nx",{i},{i}\n' for i in range(60)),
    )
    w(
        "huge_exponent_text.csv",
        "sex,y\n" + "".join(f"{'FM'[i % 2]},{'1e400000' if i == 3 else i}\n" for i in range(60)),
    )
    w("hex_label.csv", "sex,y\n" + "".join(f"{'FM'[i % 2]},{hex(i)}\n" for i in range(60)))
    # --- Parquet files
    pq.write_table(
        pa.table({"s": pa.array([{"a": i % 3, "b": "x"} for i in range(ROWS)]), "y": pa.array(df["y"])}),
        d / "struct.parquet",
    )
    pq.write_table(
        pa.table({"y": pa.array([], pa.float64()), "sex": pa.array([], pa.string())}), d / "no_groups.parquet"
    )
    pq.write_table(
        pa.table({"sex": pa.array(df["sex"]).dictionary_encode(), "y": pa.array(df["y"])}), d / "dict.parquet"
    )
    pq.write_table(pa.table({"sex": pa.array(df["sex"]), "y": pa.array(df["y"] > 50)}), d / "bool_label.parquet")
    pq.write_table(
        pa.table({"sex": pa.array(df["sex"]), "y": pa.array([2**64 - 1 - i for i in range(ROWS)], pa.uint64())}),
        d / "uint64.parquet",
    )
    # pyarrow before 11 cannot write half floats to Parquet (then no user file holds them either)
    with contextlib.suppress(pa.ArrowNotImplementedError):
        pq.write_table(
            pa.table({"sex": pa.array(df["sex"]), "y": pa.array(df["y"].to_numpy().astype(np.float16))}),
            d / "float16.parquet",
        )
    pq.write_table(
        pa.table({"sex": pa.array(df["sex"]), "y": pa.array([{"v": 1.0}] * ROWS)}), d / "struct_label.parquet"
    )
    pq.write_table(
        pa.table({"m": pa.array([[("k", 1)]] * ROWS, pa.map_(pa.string(), pa.int64())), "y": pa.array(df["y"])}),
        d / "map.parquet",
    )
    pq.write_table(pa.table({"b": pa.array([b"\x00\xff"] * ROWS), "y": pa.array(df["y"])}), d / "binary.parquet")
    # --- groups files
    g = lambda name, obj: w(name, obj if isinstance(obj, (str, bytes)) else json.dumps(obj))  # noqa: E731
    old = {"column": "age", "op": ">", "value": 60}
    g("g_bom_column.json", [{"name": "old", "where": [{"column": "\ufeffage", "op": ">", "value": 60}]}])
    g("g_nfd_names.json", [{"name": unicodedata.normalize(f, "café"), "where": [old]} for f in ("NFC", "NFD")])
    g("g_mixed_in.json", [{"name": "x", "where": [{"column": "sex", "op": "in", "value": ["F", 1]}]}])
    g("g_unknown_op.json", [{"name": "x", "where": [{"column": "age", "op": "~=", "value": 1}]}])
    g("g_big_name.json", [{"name": "n" * 5_000_000, "where": [old]}])
    g("g_bom_file.json", b"\xef\xbb\xbf" + json.dumps([{"name": "old", "where": [old]}]).encode())
    g("g_dup_keys.json", '[{"name": "a", "name": "b", "where": [{"column": "age", "op": ">", "value": 60}]}]')
    g("g_zero_width.json", [{"name": "a\u200bb", "where": [old]}])
    g("g_where_empty.json", [{"name": "x", "where": []}])
    g("g_between_reversed.json", [{"name": "x", "where": [{"column": "age", "op": "between", "value": [80, 20]}]}])
    g("g_crlf.json", json.dumps([{"name": "old", "where": [old]}], indent=1).replace("\n", "\r\n"))
    # --- model files with a valid structure and inconsistent contents
    m = json.loads((d / "model.json").read_text())

    def model(name, edit):
        x = json.loads(json.dumps(m))
        edit(x)
        w(name, json.dumps(x))

    model("m_group_names_short.json", lambda x: x["groups"]["groups"].pop())
    model("m_extra_key.json", lambda x: x.update(backdoor={"exec": "rm -rf /"}))
    model("m_moments_dup.json", lambda x: x["params"].update(moments=[2, 2]))
    model("m_buckets_float.json", lambda x: x["params"].update(buckets=10.5))
    model("m_lo_nan.json", lambda x: x["label_scale"].update(lo=float("nan")))
    w("m_crlf.json", json.dumps(m, indent=1).replace("\n", "\r\n"))
    w("m_bom.json", b"\xef\xbb\xbf" + (d / "model.json").read_bytes())
    w("m_trailing.json", (d / "model.json").read_text() + "\n{}")
    w("m_truncated.json", (d / "model.json").read_text()[:-7])
    # --- paths
    os.symlink(d / "loop-b", d / "loop-a")
    os.symlink(d / "loop-a", d / "loop-b")
    os.symlink(d / "no-such-folder" / "x.json", d / "dangling.json")
    (d / "sub").mkdir()
    os.symlink(d / "good.csv", d / "sub" / "data-link.csv")


def _nested_mismatch(m):
    """A model whose log holds an update whose cell list and value list differ in length (schema-valid each)."""
    x = json.loads(json.dumps(m))
    log = x.get("log") or []
    return x, log


def cases(d):
    p = lambda name: str(d / name)  # noqa: E731
    good, model = p("good.csv"), p("model.json")

    def fit(data, *extra, label="y", out="out.json"):
        return ["fit", "--data", data, "--label", label, *extra, "--out", p(out)]

    def fit_ok(data, *extra, label="y"):
        return fit(data, *extra, label=label, out="ok-model.json")

    def predict(mod, data=good, *extra, out="out.csv"):
        return ["predict", "--model", mod, "--data", data, "--pred", "base", *extra, "--out", p(out)]

    def audit(mod, data=good, *extra, out="out.json"):
        return ["audit", "--model", mod, "--data", data, "--label", "y", "--pred", "base", *extra, "--out", p(out)]

    long_name = "x" * 300
    return [
        # --- data files
        ("bz2 under a .csv name", fit(p("bz2.csv")), "bz2.csv"),
        ("xz under a .csv name", fit(p("xz.csv")), "xz.csv"),
        ("zip under a .csv name", fit(p("zip.csv")), "zip.csv"),
        ("mixed CRLF and LF line endings", fit_ok(p("mixed_eol.csv"), "--group-cols", "sex"), OK),
        ("classic Mac CR-only line endings", fit_ok(p("cr_only.csv"), "--group-cols", "sex"), OK),
        ("thousands separators in the label", fit(p("thousands.csv")), "'y'"),
        ("True/False label: a classifier", fit_ok(p("bool_label.csv"), "--group-cols", "sex"), OK),
        ("the header repeated mid-file", fit(p("repeated_header.csv")), "'y'"),
        ("an empty column name", fit(p("empty_name.csv")), "empty_name.csv"),
        ("2,101 columns", fit(p("wide.csv")), "columns"),
        ("a BOM before a later column name", fit_ok(p("bom_mid.csv"), "--group-cols", "age"), OK),
        ("a zero-width space in the label's name", fit_ok(p("zwsp_label.csv"), "--group-cols", "sex"), OK),
        ("group values differing in Unicode form", fit(p("nfd_values.csv"), "--group-cols", "sex"), "caf"),
        ("header and blank CRLF lines only", fit(p("only_header_crlf.csv")), "no data rows"),
        ("a NUL byte in the header", fit(p("null_bytes_header.csv")), "null_bytes_header.csv"),
        ("pipe-delimited", fit(p("pipe.csv")), "delimited"),
        ("one Latin-1 row at the end", fit(p("latin_name.csv")), "UTF-8"),
        ("group values holding a line break", fit_ok(p("quoted_newline_group.csv"), "--group-cols", "sex"), OK),
        ("1e400000 in the label", fit(p("huge_exponent_text.csv")), "'y'"),
        ("hex numbers in the label", fit(p("hex_label.csv")), "'y'"),
        ("a data file that is a symlink in a subfolder", fit_ok(p("sub/data-link.csv"), "--group-cols", "sex"), OK),
        # --- Parquet
        ("a nested struct as a group column", fit(p("struct.parquet"), "--group-cols", "s"), "'s'"),
        ("a Parquet file with no row groups", fit(p("no_groups.parquet")), "no data rows"),
        ("a dictionary-encoded group column", fit_ok(p("dict.parquet"), "--group-cols", "sex"), OK),
        ("a boolean Parquet label: a classifier", fit_ok(p("bool_label.parquet"), "--group-cols", "sex"), OK),
        ("a uint64 label near 2**64", fit(p("uint64.parquet"), "--group-cols", "sex"), "constant"),
        *(
            [("a float16 label", fit_ok(p("float16.parquet"), "--group-cols", "sex"), OK)]
            if (d / "float16.parquet").exists()
            else []
        ),
        ("a struct as the label", fit(p("struct_label.parquet")), "'y'"),
        ("a map as a group column", fit(p("map.parquet"), "--group-cols", "m"), "'m'"),
        ("raw bytes as a group column", fit(p("binary.parquet"), "--group-cols", "b"), "'b'"),
        # --- groups files
        ("groups: a column name with a BOM", fit(good, "--groups", p("g_bom_column.json")), "\\ufeffage"),
        ("groups: names equal once normalized", fit(good, "--groups", p("g_nfd_names.json")), "caf"),
        ("groups: 'in' mixing text and numbers", fit(good, "--groups", p("g_mixed_in.json")), "in"),
        ("groups: an unknown operator", fit(good, "--groups", p("g_unknown_op.json")), "~="),
        ("groups: a 5 MB name", fit(good, "--groups", p("g_big_name.json")), "name"),
        ("groups: a UTF-8 BOM", fit_ok(good, "--groups", p("g_bom_file.json")), OK),
        ("groups: a key given twice", fit(good, "--groups", p("g_dup_keys.json")), "name"),
        ("groups: a zero-width space in a name", fit(good, "--groups", p("g_zero_width.json")), "invisible character"),
        ("groups: between with bounds reversed", fit(good, "--groups", p("g_between_reversed.json")), "between"),
        ("groups: CRLF line endings", fit_ok(good, "--groups", p("g_crlf.json")), OK),
        # --- model files
        ("model: one group fewer than its log uses", predict(p("m_group_names_short.json")), "m_group_names_short"),
        ("model: an unknown top-level key", predict(p("m_extra_key.json")), "backdoor"),
        ("model: a moment listed twice", audit(p("m_moments_dup.json")), "moments"),
        ("model: 10.5 buckets", predict(p("m_buckets_float.json")), "buckets"),
        ("model: NaN as the label range's low end", predict(p("m_lo_nan.json")), "label_scale"),
        ("model: CRLF line endings", predict(p("m_crlf.json"), out="ok.csv"), OK),
        ("model: a UTF-8 BOM", predict(p("m_bom.json"), out="ok.csv"), OK),
        ("model: a second JSON value after it", predict(p("m_trailing.json")), "m_trailing.json"),
        ("model: cut 7 characters short", audit(p("m_truncated.json")), "m_truncated.json"),
        # --- paths
        ("--out a symlink loop", fit(good, out="loop-a"), "loop-a"),
        ("--out a dangling symlink", predict(model, out="dangling.json"), "dangling.json"),
        ("--out with a 300-character name", fit(good, out=long_name + ".json"), "too long"),
        ("--out a 5,000-character path", fit(good, out="/".join(["d"] * 2500)), "out"),
        ("--data a 5,000-character path", fit(str(d) + "/" + "/".join(["d"] * 2500)), "data"),
        ("--out under a file", predict(model, out="good.csv/out.csv"), "is a file, not a folder"),
        ("--model a symlink loop", predict(p("loop-a")), "loop-a"),
        ("--groups a dangling symlink", fit(good, "--groups", p("dangling.json")), "dangling.json"),
        ("--data a symlink loop", fit(p("loop-a")), "loop-a"),
    ]


OK_OUTPUTS = ("ok-model.json", "ok.csv")


def _check(d, argv, expect, capsys) -> str | None:
    """None when ``argv`` ends as it must (a bad input: one line, exit 2, nothing written; OK: exit 0), else what
    went wrong."""
    before = snapshot(d)
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:  # not expected: main returns its status
        code = f"SystemExit({e.code})"
    captured = capsys.readouterr()
    err = captured.err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    problems = []
    if "Traceback" in err:
        problems.append("a traceback")
    after = snapshot(d)
    if expect is OK:
        if code != 0:
            problems.append(f"exit {code}")
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        if [k for k in changed if k not in OK_OUTPUTS]:
            problems.append(f"files changed: {changed[:5]}")
        for name in OK_OUTPUTS:
            if os.path.exists(d / name):
                os.remove(d / name)
        return f"{'; '.join(problems)}: {err.strip()[-400:]!r}" if problems else None
    if code != 2:
        problems.append(f"exit {code}")
    if len(lines) != 1 or not lines[0].startswith("mmc: error: "):
        problems.append(f"{len(lines)} stderr line(s)")
    elif not lines[0].isprintable():
        problems.append("a control character in the line")
    elif expect not in lines[0]:
        problems.append(f"{expect!r} not named")
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        problems.append(f"files changed: {changed[:5]}")
    return f"{'; '.join(problems)}: {err.strip()[:400]!r}" if problems else None


def test_battery_round3_in_memory(work, capsys):
    d, _ = work
    entries = cases(d)
    assert len(entries) >= 40 and len({name for name, _, _ in entries}) == len(entries)
    failures = [f"{name}: {why}" for name, argv, expect in entries if (why := _check(d, argv, expect, capsys))]
    assert not failures, f"{len(failures)} of {len(entries)} failed:\n" + "\n".join(failures)


# ---- the Dask engine -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dask_scheduler():
    with quiet_cluster() as address:
        yield address


def _dask_files(d, df):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    base = d / "dask"
    if base.exists():
        return base
    base.mkdir()

    def folder(name, tables):
        (base / name).mkdir()
        for i, t in enumerate(tables):
            pq.write_table(t, base / name / f"part-{i}.parquet")
        return base / name

    half = len(df) // 2
    t = pa.Table.from_pandas(df, preserve_index=False)
    shutil.copytree(d / "pq", base / "readme")
    (base / "readme" / "README.txt").write_text("these are the parts")
    (base / "empty").mkdir()
    folder("zero_row_groups", [t.slice(0, 0), t])
    folder("struct", [t.append_column("s", pa.array([{"a": i % 2} for i in range(len(df))]))])
    folder("bool_label", [t.set_column(t.schema.get_field_index("y"), "y", pa.array(df["y"] > 50))])
    folder("dict_group", [t.set_column(0, "sex", pa.array(df["sex"]).dictionary_encode())])
    folder(
        "text_label", [t.slice(0, half), t.set_column(3, "y", pa.array([f"{v:,.1f}k" for v in df["y"]])).slice(half)]
    )
    os.symlink(base / "loop-y", base / "loop-x")
    os.symlink(base / "loop-x", base / "loop-y")
    os.symlink(base / "nowhere", base / "dangling-dir")
    return base


def dask_cases(d, base, scheduler):
    p = lambda name: str(d / name)  # noqa: E731
    q = lambda name: str(base / name)  # noqa: E731
    model, good = p("model.json"), p("pq")
    engine = ["--engine", "dask", "--scheduler", scheduler]

    def fit(data, *extra, out="out.json"):
        return ["fit", *engine, "--data", data, "--label", "y", "--pred", "base", *extra, "--out", p(out)]

    def predict(data=good, *extra, out="out.csv"):
        return ["predict", *engine, "--model", model, "--data", data, "--pred", "base", *extra, "--out", out]

    def audit(data=good, *extra, out="out.json"):
        return [
            "audit",
            *engine,
            "--model",
            model,
            "--data",
            data,
            "--label",
            "y",
            "--pred",
            "base",
            *extra,
            "--out",
            p(out),
        ]

    return [
        ("dask: a README beside the Parquet files", fit(q("readme"), "--group-cols", "sex", out="ok-model.json"), OK),
        ("dask: an empty folder", fit(q("empty"), "--group-cols", "sex"), "empty"),
        ("dask: a part with no row groups", fit(q("zero_row_groups"), "--group-cols", "sex", out="ok-model.json"), OK),
        ("dask: a struct as a group column", fit(q("struct"), "--group-cols", "s"), "'s'"),
        ("dask: a boolean label (a classifier)", fit(q("bool_label"), "--group-cols", "sex"), "memory only"),
        ("dask: a dictionary-encoded group column", predict(q("dict_group"), out=p("ok.csv")), OK),
        ("dask: text in the label of one part only", audit(q("text_label")), "different schemas"),
        ("dask: --data a symlink loop", fit(q("loop-x"), "--group-cols", "sex"), "loop-x"),
        ("dask: --out a symlink loop", predict(out=q("loop-x")), "loop-x"),
        ("dask: --out folder/ a dangling symlink", predict(out=q("dangling-dir") + "/"), "dangling-dir"),
        ("dask: --out a 300-character name", predict(out=p("y" * 300 + ".csv")), "too long"),
        ("dask: --out under a file", predict(out=p("good.csv/o.parquet")), "is a file, not a folder"),
        ("dask: groups naming a column with a BOM", fit(good, "--groups", p("g_bom_column.json")), "\\ufeffage"),
        ("dask: group names equal once normalized", fit(good, "--groups", p("g_nfd_names.json")), "caf"),
    ]


def test_battery_round3_dask(work, dask_scheduler, capsys):
    d, df = work
    base = _dask_files(d, df)
    entries = dask_cases(d, base, dask_scheduler)
    assert len({name for name, _, _ in entries}) == len(entries)
    failures = [f"{name}: {why}" for name, argv, expect in entries if (why := _check(d, argv, expect, capsys))]
    assert not failures, f"{len(failures)} of {len(entries)} failed:\n" + "\n".join(failures)

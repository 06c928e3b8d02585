"""Issue 38, a second battery of bad files, paths and payloads, none of them in the earlier catalogues
(tests/test_bad_input_catalogue.py, tests/test_cli_faults.py, tests/test_output_guard.py, tests/test_load_limits.py).

Each case runs one `mmc` command (fit, predict, audit, report, discover, compare; with --engine dask too where the
command has it) and must end as every bad input ends: exit status 2, exactly one line on stderr starting with
"mmc: error:", printable (no line break, no bidirectional control from a hostile name), naming the problem, no
traceback, and the working folder byte for byte as it was (nothing written, no input changed, no temporary file
left).
"""

from __future__ import annotations

import gzip
import json
import os
import threading

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from tests.dask_cluster import quiet_cluster
from tests.fifo_feeder import FifoFeeder
from tests.file_snapshot import snapshot

ROWS = 400
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE
LRI = "\u2066"  # LEFT-TO-RIGHT ISOLATE


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder of good inputs (a CSV, its Parquet copy and a Parquet folder, a model fitted with a base
    prediction, a groups file), every bad file of the battery beside them, and the model as a dict."""
    d = tmp_path_factory.mktemp("battery2")
    rng = np.random.default_rng(382)
    df = pd.DataFrame(
        {
            "sex": rng.choice(["F", "M"], ROWS),
            "race": rng.choice(["A", "B", "C"], ROWS),
            "age": rng.integers(18, 80, ROWS).astype(float),
            "y": rng.random(ROWS) * 100,
            "base": rng.random(ROWS) * 100,
        }
    )
    df.to_csv(d / "good.csv", index=False)
    df.to_parquet(d / "good.parquet", index=False)
    (d / "pq").mkdir()
    df.iloc[:200].to_parquet(d / "pq" / "part-0.parquet", index=False)
    df.iloc[200:].to_parquet(d / "pq" / "part-1.parquet", index=False)
    (d / "groups.json").write_text(json.dumps([{"name": "old", "where": [{"column": "age", "op": ">", "value": 60}]}]))
    fit = ["fit", "--data", str(d / "good.csv"), "--label", "y", "--pred", "base", "--group-cols", "sex,race"]
    assert main(fit + ["--label-range", "0,100", "--out", str(d / "model.json")]) == 0
    _bad_files(d, df)
    return d, df, json.loads((d / "model.json").read_text())


def _bad_files(d, df):
    """The battery's bad inputs, written once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = (d / "good.csv").read_text()
    w = lambda name, content: (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())  # noqa: E731
    # --- CSV files
    w("utf16.csv", text.encode("utf-16"))  # a BOM, then two bytes a character
    w("gzip.csv", gzip.compress(text.encode()))  # compressed, under a plain .csv name
    w("garbage.csv", bytes(np.random.default_rng(1).integers(0, 256, 50_000, dtype=np.uint8)))
    w("nul.csv", text.replace("\n", "\x00\n", 3))
    w("unclosed.csv", 'sex,y\nF,1\n"M,2\nF,3\n')
    w("short_rows.csv", "sex,race,y\nF,A,1\nM\nF,B,3\n")
    w("space_dup.csv", "y,sex, y\n1,F,2\n3,M,4\n")
    w("bom_dup.csv", "\ufeffy,sex,\ufeffy\n1,F,2\n3,M,4\n")
    w("quoted_dup.csv", 'sex,y,"y"\nF,1,2\nM,3,4\n')
    w("inf_text.csv", "sex,y\n" + "".join(f"{'FM'[i % 2]},{'inf' if i == 5 else i}\n" for i in range(60)))
    w("big_label_cell.csv", "sex,y\nF,1\nM," + "9" * 3_000_000 + "\nF,3\n")
    w("overflow_label.csv", "sex,y\n" + "".join(f"{'FM'[i % 2]},{'1e999' if i == 7 else i}\n" for i in range(60)))
    w("only_newlines.csv", "\r\n" * 1000)
    w("header_bidi.csv", f"sex,y{RLO}\nF,1\nM,2\n")
    w("parquet_named.csv", (d / "good.parquet").read_bytes())
    w("csv_named.parquet", text)
    w("trunc.parquet", (d / "good.parquet").read_bytes()[:-100])
    w("zero.parquet", b"")
    df.assign(y=np.nan).to_parquet(d / "allnan.parquet", index=False)
    df.iloc[:0].to_parquet(d / "norows.parquet", index=False)
    df.assign(y=pd.Timestamp("2024-01-01") + pd.to_timedelta(np.arange(len(df)), unit="D")).to_parquet(
        d / "date_label.parquet", index=False
    )
    pq.write_table(
        pa.table({"sex": pa.array(df["sex"]), "y": pa.array([[float(i), 2.0] for i in range(len(df))])}),
        d / "list_label.parquet",
    )
    pq.write_table(
        pa.table({"tags": pa.array([[i % 3] for i in range(len(df))]), "y": pa.array(df["y"])}),
        d / "list_group.parquet",
    )
    pq.write_table(pa.table([pa.array(df["y"]), pa.array(df["base"])], names=["y", "y"]), d / "dup_cols.parquet")
    many = pd.DataFrame({"id": [f"u{i:06d}" for i in range(100_000)], "y": np.tile([0.0, 1.0, 2.0, 3.0], 25_000)})
    many.to_csv(d / "many_ids.csv", index=False)
    # --- groups files
    g = lambda name, obj: w(name, obj if isinstance(obj, (str, bytes)) else json.dumps(obj))  # noqa: E731
    cond = {"column": "age", "op": ">", "value": 60}
    g("g_number.json", "42")
    g("g_groups_text.json", {"groups": "age > 60"})
    g("g_name_number.json", [{"name": 7, "where": [cond]}])
    g("g_inf_value.json", '[{"name": "x", "where": [{"column": "age", "op": ">", "value": 1e400}]}]')
    g("g_nan_value.json", '[{"name": "x", "where": [{"column": "age", "op": ">", "value": NaN}]}]')
    g("g_bidi_name.json", [{"name": f"old{RLO}dlo", "where": [cond]}])
    g("g_empty_in.json", [{"name": "x", "where": [{"column": "sex", "op": "in", "value": []}]}])
    g("g_column_list.json", [{"name": "x", "where": [{"column": ["age"], "op": ">", "value": 1}]}])
    g("g_surrogate.json", '[{"name": "\\ud800", "where": [{"column": "age", "op": ">", "value": 60}]}]')
    g("g_empty.json", "")
    g("g_where_nested.json", [{"name": "x", "where": [[cond]]}])
    g("g_bool_value.json", [{"name": "x", "where": [{"column": "age", "op": ">", "value": True}]}])
    g("g_utf16.json", json.dumps([{"name": "x", "where": [cond]}]).encode("utf-16"))
    # --- model files: one key path each
    m = json.loads((d / "model.json").read_text())

    def model(name, edit):
        x = json.loads(json.dumps(m))
        edit(x)
        w(name, json.dumps(x))

    model("m_list.json", lambda x: x.clear())
    (d / "m_list.json").write_text("[1, 2, 3]")
    model("m_buckets_huge.json", lambda x: x["params"].update(buckets=10**9))
    model("m_moments_text.json", lambda x: x["params"].update(moments=["2"]))
    model("m_scale_equal.json", lambda x: x["label_scale"].update(lo=5.0, hi=5.0))
    model("m_scale_text.json", lambda x: x["label_scale"].update(hi="100"))
    model("m_group_where.json", lambda x: x["groups"]["groups"][0].update(where={"column": "sex"}))
    model("m_negative_index.json", lambda x: x["log"].append([1, 0, -1, [0], [0.1]]))
    model("m_round_ends.json", lambda x: x.update(round_ends=[3, 1]))
    model("m_version_text.json", lambda x: x.update(version="7"))
    model("m_init_kind.json", lambda x: x["init"]["mean"].update(kind="oracle"))
    model("m_init_moment_nan.json", lambda x: x["init"]["moments"].update({"2": "NaN"}))
    model("m_groups_format.json", lambda x: x["groups"].update(format="mmc-audit-model"))
    model("m_interval_n.json", lambda x: x["extras"]["intervals"].update(n=-5))
    model("m_deltas_text.json", lambda x: x["extras"]["intervals"].update(deltas="0.1"))
    w("m_huge_exponent.json", (d / "model.json").read_text().replace('"alpha":', '"alpha": 1e999999, "alpha_":', 1))
    w("m_is_groups.json", (d / "groups.json").read_text())
    w("m_bidi_key.json", (d / "model.json").read_text().replace('"params":', f'"par{RLO}ams":', 1))


def cases(d):
    """(id, argv, what the error line names). Every path is inside ``d``."""
    p = lambda name: str(d / name)  # noqa: E731
    good, pqf, model, groups = p("good.csv"), p("good.parquet"), p("model.json"), p("groups.json")

    def fit(data, *extra, label="y", out="out.json"):
        return ["fit", "--data", data, "--label", label, *extra, "--out", p(out)]

    def predict(mod, data=good, *extra, out="out.csv"):
        return ["predict", "--model", mod, "--data", data, "--pred", "base", *extra, "--out", p(out)]

    def audit(mod, data=good, *extra, out="out.json"):
        return ["audit", "--model", mod, "--data", data, "--label", "y", "--pred", "base", *extra, "--out", p(out)]

    def report(mod, data=good, *extra, out="out.pdf"):
        return ["report", "--model", mod, "--data", data, "--label", "y", "--pred", "base", *extra, "--out", p(out)]

    def discover(data=good, *extra, label="y", out="found.json"):
        return ["discover", "--data", data, "--label", label, "--pred", "base", *extra, "--out", p(out)]

    def compare(data=good, *extra, out="cmp.json"):
        return [
            "compare",
            "--data",
            data,
            "--label",
            "y",
            "--pred-a",
            "base",
            "--pred-b",
            "age",
            *extra,
            "--out",
            p(out),
        ]

    return [
        # --- data files
        ("utf-16 csv", fit(p("utf16.csv")), "UTF-8"),
        ("gzip under a .csv name", fit(p("gzip.csv")), "gzip.csv"),
        ("binary garbage csv", fit(p("garbage.csv")), "garbage.csv"),
        ("NUL bytes in a csv", fit(p("nul.csv")), "nul.csv"),
        ("unclosed quote", fit(p("unclosed.csv")), "unclosed.csv"),
        ("rows with fewer fields", fit(p("short_rows.csv")), "'y'"),
        ("duplicate header behind a space", fit(p("space_dup.csv")), "duplicate column"),
        ("duplicate header behind a BOM", fit(p("bom_dup.csv")), "duplicate column"),
        ("duplicate header behind quotes", fit(p("quoted_dup.csv")), "duplicate column"),
        ("'inf' written in the label", fit(p("inf_text.csv")), "'y'"),
        ("a 3 MB number in the label", fit(p("big_label_cell.csv")), "'y'"),
        ("1e999 in the label", fit(p("overflow_label.csv")), "'y'"),
        ("only line breaks", fit(p("only_newlines.csv")), "empty"),
        ("a Parquet file named .csv", fit(p("parquet_named.csv")), "parquet_named.csv"),
        ("a CSV named .parquet", fit(p("csv_named.parquet")), "Parquet"),
        ("truncated Parquet", fit(p("trunc.parquet")), "Parquet"),
        ("empty .parquet", fit(p("zero.parquet")), "empty"),
        ("Parquet label all NaN", fit(p("allnan.parquet")), "'y'"),
        ("Parquet with no rows", fit(p("norows.parquet")), "no data rows"),
        ("Parquet date as label", fit(p("date_label.parquet")), "'y'"),
        ("Parquet list as label", fit(p("list_label.parquet")), "'y'"),
        ("Parquet list as a group column", fit(p("list_group.parquet"), "--group-cols", "tags"), "'tags'"),
        (
            "Parquet date as a base prediction",
            audit(model, p("date_label.parquet"), "--label", "age", "--pred", "y"),
            "'y'",
        ),
        ("Parquet duplicate columns", fit(p("dup_cols.parquet")), "duplicate column"),
        ("100k distinct values as a group column", fit(p("many_ids.csv"), "--group-cols", "id"), "id"),
        ("a FIFO as data", fit(p("fifo.csv")), "not a regular file"),
        ("/dev/null as data", fit("/dev/null"), "null"),
        ("audit on garbage", audit(model, p("garbage.csv")), "garbage.csv"),
        ("report on a truncated Parquet", report(model, p("trunc.parquet")), "Parquet"),
        ("discover on utf-16", discover(p("utf16.csv")), "UTF-8"),
        ("compare on an all-NaN label", compare(p("allnan.parquet")), "'y'"),
        # --- names from the user: escaped, one line
        ("bidi in a missing label's name", fit(good, label=f"y{RLO}"), "\\u202e"),
        ("line break in a missing label's name", fit(good, label="y\nx"), "\\n"),
        ("bidi in a missing group column", fit(good, "--group-cols", f"sex{LRI}"), "\\u2066"),
        ("bidi in a missing prediction column", predict(model, good, "--pred", f"ba{RLO}se"), "\\u202e"),
        ("bidi header, label missing", fit(p("header_bidi.csv"), label="z"), "\\u202e"),
        ("bidi in a compare side", compare(good, "--pred-b", f"a{RLO}ge"), "\\u202e"),
        ("line break in a discover label", discover(good, label="y\r\n=1+1"), "\\r\\n"),
        ("empty label name", fit(good, label=""), "label"),
        ("group columns only commas", fit(good, "--group-cols", ",,,"), "group"),
        # --- groups files
        ("groups: a number", fit(good, "--groups", p("g_number.json")), "g_number.json"),
        ("groups: text where groups go", fit(good, "--groups", p("g_groups_text.json")), "groups"),
        ("groups: a number as a name", fit(good, "--groups", p("g_name_number.json")), "name"),
        ("groups: 1e400 as a value", fit(good, "--groups", p("g_inf_value.json")), "g_inf_value.json"),
        ("groups: NaN as a value", fit(good, "--groups", p("g_nan_value.json")), "NaN"),
        ("groups: bidi in a name", fit(good, "--groups", p("g_bidi_name.json")), "bidirectional"),
        ("groups: empty 'in'", fit(good, "--groups", p("g_empty_in.json")), "in"),
        ("groups: a list as a column", fit(good, "--groups", p("g_column_list.json")), "column"),
        ("groups: a lone surrogate", fit(good, "--groups", p("g_surrogate.json")), "g_surrogate.json"),
        ("groups: empty file", fit(good, "--groups", p("g_empty.json")), "g_empty.json"),
        ("groups: nested where", fit(good, "--groups", p("g_where_nested.json")), "where"),
        ("groups: true as a number", fit(good, "--groups", p("g_bool_value.json")), "value"),
        ("groups: utf-16", fit(good, "--groups", p("g_utf16.json")), "UTF-8"),
        ("groups: a folder", fit(good, "--groups", str(d / "pq")), "folder"),
        ("groups: a FIFO", fit(good, "--groups", p("fifo.csv")), "FIFO"),
        ("discover with a bad model", discover(good, "--model", p("m_negative_index.json")), "log"),
        # --- model files
        ("model: a list", predict(p("m_list.json")), "m_list.json"),
        ("model: a billion buckets", predict(p("m_buckets_huge.json")), "buckets"),
        ("model: moments as text", audit(p("m_moments_text.json")), "moments"),
        ("model: empty label range", predict(p("m_scale_equal.json")), "label_scale"),
        ("model: label range as text", report(p("m_scale_text.json")), "label_scale"),
        ("model: a group's where an object", predict(p("m_group_where.json")), "where"),
        ("model: negative group index", predict(p("m_negative_index.json")), "log"),
        ("model: round ends going back", audit(p("m_round_ends.json")), "round_ends"),
        ("model: version as text", predict(p("m_version_text.json")), "version"),
        ("model: unknown start", predict(p("m_init_kind.json")), "kind"),
        ("model: NaN text as a moment", report(p("m_init_moment_nan.json")), "moments"),
        ("model: groups of another format", predict(p("m_groups_format.json")), "format"),
        ("model: negative interval rows", audit(p("m_interval_n.json")), "intervals"),
        ("model: deltas as text", predict(p("m_deltas_text.json"), good, "--interval", "calibrated"), "deltas"),
        ("model: 1e999999", predict(p("m_huge_exponent.json")), "m_huge_exponent.json"),
        ("model: a groups file", predict(p("m_is_groups.json")), "m_is_groups.json"),
        ("model: bidi in a key", audit(p("m_bidi_key.json")), "params"),
        ("model: a FIFO", predict(p("fifo.csv")), "FIFO"),
        (
            "compare: a bad second model",
            [
                "compare",
                "--data",
                good,
                "--label",
                "y",
                "--pred",
                "base",
                "--model",
                model,
                "--model",
                p("m_round_ends.json"),
                "--out",
                p("cmp.json"),
            ],
            "round_ends",
        ),
        # --- paths
        ("--out the data through ..", fit(good, out="pq/../good.csv"), "--data"),
        ("--out the model through a symlink", audit(model, out="link-to-model.json"), "--model"),
        (
            "--out the groups through a linked folder",
            fit(good, "--groups", groups, out="linkdir/groups.json"),
            "--groups",
        ),
        ("--out a folder for discover", discover(good, out="pq"), "folder"),
        ("--out a folder name for report", report(model)[:-1] + [str(d) + "/newdir/"], "folder"),
        ("--out in a missing folder for compare", compare(good, out="no/such/cmp.json"), "does not exist"),
        ("--out empty", fit(good, out=""), "--out"),
        (
            "--out /dev/null",
            ["predict", "--model", model, "--data", good, "--pred", "base", "--out", "/dev/null"],
            "not a regular file",
        ),
        (
            "--out the data spelled with ./",
            [
                "predict",
                "--model",
                model,
                "--data",
                good,
                "--pred",
                "base",
                "--out",
                os.path.join(str(d), ".", "good.csv"),
            ],
            "--data",
        ),
        ("report --out a Parquet input", report(model, pqf, out="good.parquet"), "--data"),
    ]


def _check(d, argv, expect, capsys) -> str | None:
    """None when ``argv`` ends as a bad input must, else what went wrong."""
    before = snapshot(d)
    capsys.readouterr()
    fifos = [os.path.join(root, f) for root, _, files in os.walk(d) for f in files if "fifo" in os.path.join(root, f)]
    with FifoFeeder(fifos, (d / "good.parquet").read_bytes()):
        code = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    problems = []
    if code != 2:
        problems.append(f"exit {code}")
    if len(lines) != 1 or not lines[0].startswith("mmc: error: "):
        problems.append(f"{len(lines)} stderr line(s)")
    elif not lines[0].isprintable():
        problems.append("a control character in the line")
    elif expect not in lines[0]:
        problems.append(f"{expect!r} not named")
    if "Traceback" in err:
        problems.append("a traceback")
    after = snapshot(d)
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        problems.append(f"files changed: {changed[:5]}")
    return f"{'; '.join(problems)}: {err.strip()[:400]!r}" if problems else None


@pytest.fixture(scope="module")
def folder(work):
    d, _, _ = work
    os.mkfifo(d / "fifo.csv")
    os.symlink(d / "model.json", d / "link-to-model.json")
    os.symlink(d, d / "linkdir")
    return d


def test_battery_in_memory(folder, capsys):
    entries = cases(folder)
    assert len(entries) >= 60 and len({name for name, _, _ in entries}) == len(entries)
    failures = [f"{name}: {why}" for name, argv, expect in entries if (why := _check(folder, argv, expect, capsys))]
    assert not failures, f"{len(failures)} of {len(entries)} failed:\n" + "\n".join(failures)


# ---- the Dask engine: the same refusals, on partitioned Parquet ----------------------------------------------------
@pytest.fixture(scope="module")
def dask_scheduler():
    with quiet_cluster(processes=True) as address:
        yield address


def _parts(d, name, df, change=None, files=2):
    """``df`` changed by ``change(df)`` as a folder of Parquet files written cell by cell by pyarrow (a float NaN
    stays NaN, which the footers' statistics do not show: only the workers find it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = df.copy()
    if change is not None:
        x = change(x)
    folder = d / "dask" / name
    folder.mkdir(parents=True)
    for i, rows in enumerate(np.array_split(np.arange(len(x)), files)):
        piece = x.iloc[rows]
        cols = {c: pa.array(piece[c].tolist() if piece[c].dtype == object else piece[c].to_numpy()) for c in piece}
        pq.write_table(pa.table(cols), folder / f"part-{i}.parquet")
    return str(folder)


def _nan_at(col, row):
    def change(x):
        x = x.astype({col: float})
        x.loc[row, col] = np.nan
        return x

    return change


def dask_cases(d, df, scheduler):
    p = lambda name: str(d / name)  # noqa: E731
    model = p("model.json")
    good = _parts(d, "good", df)
    engine = ["--engine", "dask", "--scheduler", scheduler]
    text_y = _parts(d, "text_y", df, lambda x: x.assign(y=[f"v{i}" for i in range(len(x))]))
    text_base = _parts(d, "text_base", df, lambda x: x.assign(base=[f"v{i}" for i in range(len(x))]))
    nan_y = _parts(d, "nan_y", df, _nan_at("y", 333))
    nan_base = _parts(d, "nan_base", df, _nan_at("base", 377))
    mixed = d / "dask" / "mixed"
    mixed.mkdir()
    df.to_parquet(mixed / "a.parquet", index=False)
    df.assign(age=df["age"].astype(str)).to_parquet(mixed / "b.parquet", index=False)
    broken = d / "dask" / "broken"
    broken.mkdir()
    df.to_parquet(broken / "a.parquet", index=False)
    (broken / "b.parquet").write_bytes((d / "good.parquet").read_bytes()[:-64])
    only_csv = d / "dask" / "only_csv"
    only_csv.mkdir()
    df.to_csv(only_csv / "a.csv", index=False)
    dups = d / "dask" / "dups"
    dups.mkdir()
    (dups / "a.parquet").write_bytes((d / "dup_cols.parquet").read_bytes())
    dates = d / "dask" / "dates"
    dates.mkdir()
    (dates / "a.parquet").write_bytes((d / "date_label.parquet").read_bytes())
    lists = _parts(d, "lists", df, lambda x: x.assign(y=[[float(i)] for i in range(len(x))]))
    fifo = d / "dask" / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "a.parquet")
    (d / "dask" / "full").mkdir()
    (d / "dask" / "full" / "keep.txt").write_text("kept")
    (d / "dask" / "x.csv").write_text("kept")
    os.symlink(good, d / "dask" / "link-to-good")

    def fit(data, *extra, label="y"):
        return ["fit", *engine, "--data", data, "--label", label, "--pred", "base", *extra, "--out", p("d.json")]

    def predict(data, *extra, out=None, mod=model):
        return [
            "predict",
            *engine,
            "--model",
            mod,
            "--data",
            data,
            "--pred",
            "base",
            *extra,
            "--out",
            out or p("d.csv"),
        ]

    def audit(data, *extra, out=None, mod=model):
        return [
            "audit",
            *engine,
            "--model",
            mod,
            "--data",
            data,
            "--label",
            "y",
            "--pred",
            "base",
            *extra,
            "--out",
            out or p("da.json"),
        ]

    def compare(data, *extra):
        return [
            "compare",
            *engine,
            "--data",
            data,
            "--label",
            "y",
            "--pred-a",
            "base",
            "--pred-b",
            "age",
            *extra,
            "--out",
            p("dc.json"),
        ]

    return [
        ("dask fit: a glob matching nothing", fit(p("dask/*.nothing")), "matches no Parquet"),
        ("dask fit: a folder of CSV", fit(str(only_csv)), "matches no Parquet"),
        ("dask fit: schemas differ", fit(str(mixed)), "age"),
        ("dask fit: a truncated file", fit(str(broken)), "b.parquet"),
        ("dask fit: a text label", fit(text_y), "'y'"),
        ("dask fit: NaN label on the workers", fit(nan_y, "--group-cols", "sex"), "'y'"),
        ("dask fit: NaN base on the workers", fit(nan_base), "'base'"),
        ("dask fit: a date label", fit(str(dates)), "'y'"),
        ("dask fit: a list label", fit(lists), "'y'"),
        ("dask fit: duplicate columns", fit(str(dups)), "dup"),
        ("dask fit: a FIFO among the files", fit(str(fifo)), "not a regular file"),
        ("dask fit: a bidi group column", fit(good, "--group-cols", f"sex{RLO}"), "\\u202e"),
        ("dask fit: a bad groups file", fit(good, "--groups", p("g_inf_value.json")), "g_inf_value.json"),
        ("dask fit: no workers", fit(good, "--workers", "0"), "--workers"),
        ("dask fit: negative memory", fit(good, "--memory-limit", "-1GB"), "memory"),
        ("dask predict: NaN base on the workers", predict(nan_base), "'base'"),
        ("dask predict: NaN base on the workers, Parquet out", predict(nan_base, out=p("d.parquet")), "'base'"),
        ("dask predict: a text base", predict(text_base), "'base'"),
        ("dask predict: a bad model", predict(good, mod=p("m_round_ends.json")), "round_ends"),
        ("dask predict: group column missing", predict(good, mod=p("m_group_where.json")), "where"),
        ("dask predict: --out a file with a slash", predict(good, out=p("dask/x.csv") + "/"), "x.csv"),
        ("dask predict: --out a folder with a file", predict(good, out=p("dask/full")), "not an empty folder"),
        ("dask predict: --out the data through a symlink", predict(good, out=p("dask/link-to-good")), "--data"),
        ("dask predict: --out one of its files", predict(good, out=good + "/part-0.parquet"), "--data"),
        ("dask predict: --out in a missing folder", predict(good, out=p("no/such/p.parquet")), "does not exist"),
        ("dask audit: NaN label on the workers", audit(nan_y), "'y'"),
        ("dask audit: a text label", audit(text_y), "'y'"),
        ("dask audit: --out a folder name", audit(good, out=str(d) + "/newdir/"), "folder"),
        ("dask audit: --out the model", audit(good, out=model), "--model"),
        ("dask compare: a text label", compare(text_y), "'y'"),
        ("dask compare: NaN label on the workers", compare(nan_y), "'y'"),
    ]


def test_battery_dask(folder, work, dask_scheduler, capsys):
    _, df, _ = work
    entries = dask_cases(folder, df, dask_scheduler)
    failures = [f"{name}: {why}" for name, argv, expect in entries if (why := _check(folder, argv, expect, capsys))]
    assert not failures, f"{len(failures)} of {len(entries)} failed:\n" + "\n".join(failures)


def test_predict_out_names_give_the_same_file_on_both_engines(work, dask_scheduler, tmp_path, capsys):
    """`mmc predict --engine dask` wrote a folder of Parquet files to any --out not ending in .csv (preds.parquet,
    a name without an extension), where the in-memory engine wrote one file: both now write one file to a file
    name (Parquet for .parquet and .pq, CSV otherwise), atomically; only a name ending in "/" is a folder (Dask)
    and the in-memory engine refuses it in one line."""
    d, df, _ = work
    data = _parts(tmp_path, "data", df, files=3)
    base = ["predict", "--model", str(d / "model.json"), "--pred", "base"]
    dask = ["--engine", "dask", "--scheduler", dask_scheduler, "--data", data]
    for name in ("preds.parquet", "preds.pq", "preds"):
        mem, dsk = tmp_path / f"mem-{name}", tmp_path / f"dask-{name}"
        assert main([*base, "--data", str(d / "good.csv"), "--out", str(mem)]) == 0
        assert main([*base, *dask, "--out", str(dsk)]) == 0
        assert mem.is_file() and dsk.is_file(), name
        read = pd.read_csv if name == "preds" else pd.read_parquet
        a, b = read(mem), read(dsk)
        assert list(a.columns) == list(b.columns) and len(a) == len(b) == len(df)
        np.testing.assert_allclose(a["mean"].to_numpy(), b["mean"].to_numpy(), rtol=1e-12)
    folder = str(tmp_path / "parts") + "/"
    assert main([*base, *dask, "--out", folder]) == 0
    assert len(pd.read_parquet(folder)) == len(df) and len(os.listdir(folder)) == 3
    capsys.readouterr()
    assert main([*base, "--data", str(d / "good.csv"), "--out", str(tmp_path / "mem-folder") + "/"]) == 2
    assert "names a folder" in capsys.readouterr().err and not (tmp_path / "mem-folder").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]


# ---- bounded work: the (row, group) pairs are counted before a fit or an audit ---------------------------------------
@pytest.mark.parametrize("command", ["fit", "audit", "report"])
def test_too_many_row_group_pairs_are_refused_before_the_work(work, tmp_path, monkeypatch, capsys, command):
    """A 0.1 MB Parquet file of 3M rows took `mmc audit` and `mmc report` to 3.2 GB with a model of 100 groups
    (21M pairs), and `mmc fit --max-order 5` to 2.06 GB and 25 s before its first line (1,080 groups, 93M pairs):
    the table's own limits count rows and columns, not pairs. The pairs are now counted first; here the limits
    are lowered so that the 400-row table is over them."""
    from app.services import io as table_io

    d, _, _ = work
    monkeypatch.setattr(table_io, "MAX_FIT_PAIRS", 1_000)
    monkeypatch.setattr(table_io, "AUDIT_WORK_BYTES", 100_000)
    out = tmp_path / ("m.json" if command == "fit" else "r.pdf" if command == "report" else "a.json")
    if command == "fit":
        args = ["fit", "--data", str(d / "good.csv"), "--label", "y", "--group-cols", "sex,race", "--max-order", "2"]
    else:
        args = [command, "--model", str(d / "model.json"), "--data", str(d / "good.csv"), "--label", "y"]
        args += ["--pred", "base"]
    capsys.readouterr()
    assert main([*args, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "row-group memberships" in lines[0] and "400 rows" in lines[0], lines
    assert not out.exists()


def test_too_many_pairs_for_a_comparison_are_refused_before_the_work(work, tmp_path, monkeypatch, capsys):
    """`mmc compare --group-cols a,b,c,d,e --max-order 5` on 3.4M rows (a 0.1 MB Parquet file) took 2.2 GB: its
    (row, group) pairs are counted first, as a fit's are."""
    from app.services import io as table_io

    d, _, _ = work
    monkeypatch.setattr(table_io, "MAX_FIT_PAIRS", 1_000)
    out = tmp_path / "c.json"
    args = ["compare", "--data", str(d / "good.csv"), "--label", "y", "--pred-a", "base", "--pred-b", "age"]
    capsys.readouterr()
    assert main([*args, "--group-cols", "sex,race", "--max-order", "2", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mmc: error: the comparison of 400 rows"), lines
    assert not out.exists()


def test_a_command_that_says_nothing_for_a_while_says_it_still_works(work, tmp_path, monkeypatch, capsys):
    """`mmc predict` on 3M rows and `mmc compare` on 3.9M ran 20-26 s without a line on stderr: a heartbeat line
    comes whenever a command has said nothing for HEARTBEAT seconds (here lowered; the stand-in command waits for
    the line instead of for a time)."""
    import sys

    from app.cli import entry as cli

    d, _, _ = work
    monkeypatch.setattr(cli, "HEARTBEAT", 0.05)
    seen = []

    def quiet(args):
        for _ in range(2000):  # bounded: a missing heartbeat fails the test instead of hanging it
            seen.append(capsys.readouterr().err)
            if "still working" in "".join(seen):
                break
            threading.Event().wait(0.01)
        print("note: done", file=sys.stderr)
        return 0

    monkeypatch.setitem(cli.COMMANDS, "predict", quiet)
    assert main(["predict", "--model", str(d / "model.json"), "--data", str(d / "good.csv"), "--out", "x.csv"]) == 0
    shown = "".join(seen) + capsys.readouterr().err
    assert "mmc: predict: still working, " in shown and shown.rstrip().endswith("note: done")


def test_a_row_found_bad_on_a_dask_worker_names_its_partition(work, dask_scheduler, tmp_path, capsys):
    """A NaN label the footers do not show is found by the worker holding its partition, which counted its row
    within the partition: "first at row 7" of a 1,200-row table whose row 807 it was. The line names the
    table's row now, as the in-memory engine does (tests/test_dask_table_rows.py)."""
    _, df, _ = work
    data = _parts(tmp_path, "nan", df, _nan_at("y", 390), files=2)
    out = tmp_path / "m.json"
    args = ["fit", "--engine", "dask", "--scheduler", dask_scheduler, "--data", data, "--label", "y"]
    capsys.readouterr()
    assert main([*args, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "label column 'y' has 1 missing or infinite value(s)" in lines[0], lines
    assert "(first in data row 391)" in lines[0] and not out.exists()

"""A catalogue of malformed or hostile inputs to the command line, each with its expected outcome.

Expected outcome for an error: exit status 2, exactly one line on stderr starting with "mmc: error:" that
names the problem, no traceback, and no output file (outputs are written to a temporary file and renamed).
A few entries are *not* errors (empty groups, unseen categories, formula-looking text) and say what
happens instead.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main

ROWS = 400


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("catalogue")
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "sex": rng.choice(["F", "M"], ROWS),
            "race": rng.choice(["A", "B", "C"], ROWS),
            "age": rng.integers(18, 80, ROWS).astype(float),
            "y": rng.random(ROWS) * 100,
            "base": rng.random(ROWS) * 100,
            "note": ["ok"] * ROWS,
        }
    )
    df.to_csv(d / "good.csv", index=False)
    assert (
        main(
            [
                "fit",
                "--data",
                str(d / "good.csv"),
                "--label",
                "y",
                "--pred",
                "base",
                "--group-cols",
                "sex,race",
                "--label-range",
                "0,100",
                "--out",
                str(d / "model.json"),
            ]
        )
        == 0
    )
    return d, df


def _with_nan_step(text: str) -> str:
    """The model file with a NaN-step entry first in its log (the log may be empty: the base-recalibrated
    start can already satisfy every test)."""
    head, tail = text.split('"log":[', 1)
    return head + '"log":[[1,0,0,[0],[NaN]]' + ("" if tail.startswith("]") else ",") + tail


def _write(d, name, content):
    p = d / name
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return str(p)


def _variant(d, df, name, fn):
    x = df.copy()
    x = fn(x)
    p = d / name
    x.to_csv(p, index=False)
    return str(p)


def FIT(data, *extra, label="y", out=None):
    return ["fit", "--data", data, "--label", label, *extra] + (["--out", out] if out else [])


def PRED(model, data, *extra):
    return ["predict", "--model", model, "--data", data, *extra]


def cases(d, df):
    good, model = str(d / "good.csv"), str(d / "model.json")
    mj = json.loads((d / "model.json").read_text())

    def edited_model(name, fn):
        m = json.loads(json.dumps(mj))
        fn(m)
        return _write(d, name, json.dumps(m))

    def gfile(name, obj):
        return _write(d, name, obj if isinstance(obj, str) else json.dumps(obj))

    big = pd.DataFrame({f"c{i}": np.arange(ROWS) % 10 for i in range(5)})
    big["y"] = np.linspace(0, 1, ROWS)
    big_path = str(d / "wide_groups.csv")
    big.to_csv(big_path, index=False)
    return [
        # --- the data file
        ("empty file", FIT(_write(d, "empty.csv", "")), "empty"),
        ("whitespace only", FIT(_write(d, "blank.csv", "\n\n  \n")), "empty"),
        ("header only", FIT(_write(d, "header.csv", "sex,race,y\n")), "no data rows"),
        ("non-UTF-8 bytes", FIT(_write(d, "latin.csv", "sex,y\n\xe9t\xe9,1\n".encode("latin-1"))), "not UTF-8"),
        ("semicolon delimiter", FIT(_write(d, "semi.csv", "sex;y\nF;1\nM;2\n")), "delimited by ';'"),
        ("duplicate column names", FIT(_write(d, "dup.csv", "y,y,sex\n1,2,F\n3,4,M\n")), "duplicate column"),
        ("ragged rows", FIT(_write(d, "ragged.csv", "sex,y\nF,1\nM,2,3,4\n")), "well-formed"),
        ("missing file", FIT(str(d / "nope.csv")), "not found"),
        ("a folder as data", FIT(str(d)), "folder"),
        ("corrupt parquet", FIT(_write(d, "bad.parquet", b"PAR1 this is not parquet")), "Parquet"),
        # --- the label
        ("label column missing", FIT(good, label="wage"), "'wage' is not in the data"),
        ("label non-numeric", FIT(good, label="sex"), "not numeric"),
        ("label constant", FIT(_variant(d, df, "const.csv", lambda x: x.assign(y=5.0))), "constant"),
        ("label all NaN", FIT(_variant(d, df, "allnan.csv", lambda x: x.assign(y=np.nan))), "no usable values"),
        (
            "label partly NaN",
            FIT(_variant(d, df, "somenan.csv", lambda x: x.assign(y=x.y.where(x.index % 7 > 0)))),
            "missing or infinite",
        ),
        (
            "label infinite",
            FIT(_variant(d, df, "inf.csv", lambda x: x.assign(y=x.y.where(x.index != 3, np.inf)))),
            "missing or infinite",
        ),
        ("label outside declared range", FIT(good, "--label-range", "0,50"), "outside the label range"),
        ("label range reversed", FIT(good, "--label-range", "100,0"), "LO < HI"),
        ("label range not numbers", FIT(good, "--label-range", "low,high"), "LO,HI"),
        ("label range whose moments overflow", FIT(good, "--label-range=0,1e308"), "rescale the label"),
        ("label used as a group", FIT(good, "--group-cols", "y"), "cannot define groups"),
        # --- base predictions
        ("base column missing", FIT(good, "--pred", "score"), "'score' is not in the data"),
        ("base non-numeric", FIT(good, "--pred", "note"), "not numeric"),
        # --- groups
        ("group column missing", FIT(good, "--group-cols", "sex,income"), "'income' is not in the data"),
        ("groups file not JSON", FIT(good, "--groups", gfile("g1.json", "{groups: [")), "not valid JSON"),
        ("groups file missing", FIT(good, "--groups", str(d / "none.json")), "cannot read"),
        (
            "code smuggled as an operator",
            FIT(
                good,
                "--groups",
                gfile(
                    "g2.json",
                    [{"name": "x", "where": [{"column": "age", "op": "__import__('os').system('id')", "value": 1}]}],
                ),
            ),
            "unknown op",
        ),
        (
            "pandas query string as the condition",
            FIT(good, "--groups", gfile("g3.json", [{"name": "x", "where": "age > 30 and @pd.eval('1')"}])),
            "must be a list",
        ),
        (
            "python expression as a value",
            FIT(
                good,
                "--groups",
                gfile("g4.json", [{"name": "x", "where": [{"column": "age", "op": ">", "value": "__import__('os')"}]}]),
            ),
            "numeric",
        ),
        (
            "dunder column name",
            FIT(
                good,
                "--groups",
                gfile("g5.json", [{"name": "x", "where": [{"column": "__class__", "op": "==", "value": 1}]}]),
            ),
            "'__class__'",
        ),
        (
            "object as a value",
            FIT(
                good,
                "--groups",
                gfile("g6.json", [{"name": "x", "where": [{"column": "sex", "op": "==", "value": {"$ne": 1}}]}]),
            ),
            "string or a number",
        ),
        (
            "unknown key in a condition",
            FIT(
                good,
                "--groups",
                gfile(
                    "g7.json", [{"name": "x", "where": [{"column": "sex", "op": "==", "value": "F", "lambda": "x"}]}]
                ),
            ),
            "unknown key",
        ),
        (
            "10,000+ groups from intersections",
            FIT(big_path, "--group-cols", "c0,c1,c2,c3,c4", "--max-order", "4"),
            "the limit is",
        ),
        ("max order zero", FIT(good, "--group-cols", "sex", "--max-order", "0"), "max-order"),
        # --- parameters
        ("alpha zero", FIT(good, "--alpha", "0"), "alpha"),
        ("alpha one", FIT(good, "--alpha", "1"), "alpha"),
        ("alpha not a number", FIT(good, "--alpha", "small"), "alpha"),
        ("beta negative", FIT(good, "--beta", "-0.01"), "beta"),
        ("beta one", FIT(good, "--beta", "1"), "beta"),
        ("buckets zero", FIT(good, "--buckets", "0"), "buckets"),
        ("moments zero", FIT(good, "--moments", "0"), "moments"),
        ("features without discover", FIT(good, "--features", "age", "--out", str(d / "f.json")), "add --discover"),
        (
            "threshold on a regression audit",
            [
                "audit",
                "--model",
                model,
                "--data",
                good,
                "--label",
                "y",
                "--pred",
                "base",
                "--threshold",
                "0.3",
                "--out",
                str(d / "a.json"),
            ],
            "--threshold needs a binary",
        ),
        ("negative seed", FIT(good, "--seed", "-1"), "--seed: expected a non-negative integer"),
        (
            "discover negative seed",
            [
                "discover",
                "--data",
                good,
                "--label",
                "y",
                "--pred",
                "base",
                "--seed",
                "-1",
                "--out",
                str(d / "found.json"),
            ],
            "--seed: expected a non-negative integer",
        ),
        ("moments absurd", FIT(good, "--moments", "1000"), "moments"),
        ("calibration fraction one", FIT(good, "--calibration-fraction", "1"), "calibration"),
        ("step unknown", FIT(good, "--step", "newton"), "step"),
        (
            "an input column named like an output (upper)",
            PRED(
                model,
                _variant(d, df, "has_upper.csv", lambda x: x.assign(upper=x["race"])),
                "--pred",
                "base",
                "--interval",
                "calibrated",
                "--out",
                str(d / "p.csv"),
            ),
            "already has column(s) 'upper'",
        ),
        (
            "an input column named like an output (mean)",
            PRED(
                model,
                _variant(d, df, "has_mean.csv", lambda x: x.assign(mean=1.0)),
                "--pred",
                "base",
                "--out",
                str(d / "p.csv"),
            ),
            "already has column(s) 'mean'",
        ),
        ("delta zero", PRED(model, good, "--pred", "base", "--delta", "0"), "--delta"),
        ("delta one", PRED(model, good, "--pred", "base", "--delta", "1"), "--delta"),
        ("gamma zero", PRED(model, good, "--pred", "base", "--gamma", "0"), "--gamma"),
        ("gamma above one", PRED(model, good, "--pred", "base", "--gamma", "1.5"), "--gamma"),
        # --- model files
        (
            "model truncated",
            PRED(_write(d, "trunc.json", (d / "model.json").read_text()[:300]), good),
            "not valid JSON",
        ),
        (
            "model of another schema version",
            PRED(edited_model("v99.json", lambda m: m.update(version=99)), good),
            "version",
        ),
        (
            "model edited: alpha out of range",
            PRED(edited_model("a.json", lambda m: m["params"].update(alpha=3)), good),
            "alpha",
        ),
        (
            "model edited: group index out of range",
            PRED(edited_model("gi.json", lambda m: m["log"].append([1, 0, 999, [0], [0.1]])), good),
            "log entry",
        ),
        (
            "model edited: NaN step",
            PRED(
                _write(d, "nan.json", _with_nan_step((d / "model.json").read_text())),
                good,
                "--pred",
                "base",
            ),
            "NaN is not allowed",
        ),
        ("model is a CSV", PRED(good, good), "not valid JSON"),
        ("model missing", PRED(str(d / "none.json"), good), "not found"),
        ("model without --pred", PRED(model, good), "--pred"),
        (
            "group column missing at predict time",
            PRED(model, _variant(d, df, "norace.csv", lambda x: x.drop(columns=["race"])), "--pred", "base"),
            "race",
        ),
        # --- outputs
        ("output folder missing", FIT(good, out=str(d / "no" / "such" / "m.json")), "does not exist"),
        ("output is a folder", FIT(good, out=str(d)), "is a folder"),
    ]


def test_catalogue(work, capsys):
    d, df = work
    entries = cases(d, df)
    assert len(entries) >= 40
    failures = []
    for name, args, expect in entries:
        out = None
        if "--out" not in args:
            out = str(d / f"out-{abs(hash(name))}.tmp")
            args = args + ["--out", out]
        code = main(args)
        _, err = capsys.readouterr()
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        ok = (
            code == 2
            and len(lines) == 1
            and lines[0].startswith("mmc: error:")
            and expect in lines[0]
            and "Traceback" not in err
            and (out is None or not os.path.exists(out))
        )
        if not ok:
            failures.append(f"{name}: exit {code}, stderr {err.strip()!r}")
    assert not failures, "\n".join(failures)
    # nothing partial left behind anywhere in the folder
    assert not [p for p in os.listdir(d) if p.startswith(".tmp-")]


def FIT_OUT(args, out):
    return args + ["--out", out]


def test_not_errors_empty_group_unseen_category_and_formula_cells(work, capsys, tmp_path):
    d, df = work
    # a group with zero rows: fitting succeeds and the empty group is reported on stderr
    g = tmp_path / "g.json"
    g.write_text(json.dumps([{"name": "nobody", "where": [{"column": "age", "op": ">", "value": 500}]}]))
    assert (
        main(
            [
                "fit",
                "--data",
                str(d / "good.csv"),
                "--label",
                "y",
                "--groups",
                str(g),
                "--out",
                str(tmp_path / "m.json"),
            ]
        )
        == 0
    )
    assert "nobody" in capsys.readouterr().err
    # base predictions outside the label range: clipped to it, and said so
    assert (
        main(
            [
                "fit",
                "--data",
                str(d / "good.csv"),
                "--label",
                "y",
                "--pred",
                "base",
                "--label-range",
                "0,100",
                "--out",
                str(tmp_path / "m2.json"),
            ]
        )
        == 0
    )
    df2 = df.assign(base=df.base * 1.2)
    df2.to_csv(tmp_path / "over.csv", index=False)
    assert (
        main(
            [
                "fit",
                "--data",
                str(tmp_path / "over.csv"),
                "--label",
                "y",
                "--pred",
                "base",
                "--label-range",
                "0,100",
                "--out",
                str(tmp_path / "m3.json"),
            ]
        )
        == 0
    )
    assert "were clipped" in capsys.readouterr().err
    # unseen categories and a spreadsheet formula in a text cell at predict time
    new = df.copy()
    new.loc[0, "race"] = "Z"
    new.loc[1, "note"] = "=cmd|' /C calc'!A0"
    new.loc[2, "note"] = "@SUM(A1)"
    new.to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "p.csv"
    assert (
        main(
            [
                "predict",
                "--model",
                str(d / "model.json"),
                "--data",
                str(tmp_path / "new.csv"),
                "--pred",
                "base",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    p = pd.read_csv(out)
    assert p.loc[1, "note"] == "'=cmd|' /C calc'!A0" and p.loc[2, "note"] == "'@SUM(A1)"
    assert np.isfinite(p.loc[0, "mean"])  # the unseen category simply belongs to no race group


def test_output_symlink_is_replaced_not_written_through(work, tmp_path):
    d, _ = work
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious")
    link = tmp_path / "m.json"
    os.symlink(target, link)
    assert main(["fit", "--data", str(d / "good.csv"), "--label", "y", "--out", str(link)]) == 0
    assert target.read_text() == "precious" and not link.is_symlink()


def test_a_text_column_as_label_is_called_the_wrong_column_not_cells_to_fix():
    """A label of 601 text cells out of 601 was answered "fix them in the file or drop those rows first" (an
    audit of the affairs table, a text copy of `relig`): dropping every row is no advice. A column of some
    non-number cells keeps that advice."""
    import pandas as pd

    from app.services.io import numeric_column
    from mmc_core.common.errors import DataError

    text = pd.DataFrame({"relig": ["slightly", "not", "very"] * 3})
    with pytest.raises(DataError, match="it is a text column: choose a numeric one"):
        numeric_column(text, "relig", "label column")
    some = pd.DataFrame({"y": ["1", "2", "n/a", "4"]})
    with pytest.raises(DataError, match="fix them in the file or drop those rows first"):
        numeric_column(some, "y", "label column")

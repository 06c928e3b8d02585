"""`mmc fit` / `mmc predict`: the exact command-line contract and its error cases."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from mmc_core.common.synthetic import demo_distribution


@pytest.fixture(scope="module")
def csvs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    t = pd.DataFrame(demo_distribution().sample_table(3000, np.random.default_rng(11)))
    t.iloc[:2000].to_csv(d / "train.csv", index=False)
    t.iloc[2000:].drop(columns=["outcome"]).to_csv(d / "test.csv", index=False)
    return d


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_fit_prints_summary_json_last_and_predict_writes_units(csvs, capsys):
    model = csvs / "m.json"
    code, out, err = run(
        [
            "fit",
            "--data",
            str(csvs / "train.csv"),
            "--label",
            "outcome",
            "--pred",
            "base_pred",
            "--group-cols",
            "sex,race,age,score",
            "--max-order",
            "2",
            "--moments",
            "4",
            "--alpha",
            "0.002",
            "--beta",
            "0.0004",
            "--label-range",
            "0,100",
            "--seed",
            "3",
            "--out",
            str(model),
        ],
        capsys,
    )
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert {"rounds", "mean_updates", "moment_updates", "seconds", "converged", "n_groups"} <= summary.keys()
    assert summary["converged"] is True and summary["n_groups"] > 20
    saved = json.loads(model.read_text())
    assert saved["info"]["n_calibration"] == 500  # default --calibration-fraction 0.25
    pred = csvs / "p.csv"
    code, out, err = run(
        ["predict", "--model", str(model), "--data", str(csvs / "test.csv"), "--pred", "base_pred", "--out", str(pred)],
        capsys,
    )
    assert code == 0, err
    p = pd.read_csv(pred)
    test = pd.read_csv(csvs / "test.csv")
    assert list(p.columns) == list(test.columns) + ["mean", "moment_2", "moment_3", "moment_4"]
    assert p["mean"].between(0, 100).all() and (p["moment_2"] >= 0).all()
    # the written columns are the saved model's predictions in label units ([0, 100]: the mean is 100 u, the
    # a-th central moment 100^a u, u the model's unit-scale output), to the precision of the CSV text: floats
    # are written with 10 significant digits ("%.10g"), a relative rounding error of at most 5e-10
    from mmc_core import FittedModel

    mu_u, moms_u = FittedModel.load(model).predict_unit(test, test["base_pred"].to_numpy() / 100.0)
    np.testing.assert_allclose(p["mean"], 100.0 * mu_u, rtol=5e-10, atol=0)
    for a in (2, 3, 4):
        np.testing.assert_allclose(p[f"moment_{a}"], 100.0**a * moms_u[a], rtol=5e-10, atol=0)


def test_mean_only_and_groups_file(csvs, capsys, tmp_path):
    gfile = tmp_path / "g.json"
    gfile.write_text(
        json.dumps(
            {
                "format": "mmc-groups",
                "version": 1,
                "groups": [
                    {
                        "name": "older women",
                        "where": [
                            {"column": "sex", "op": "==", "value": "F"},
                            {"column": "age", "op": "==", "value": "55+"},
                        ],
                    }
                ],
            }
        )
    )
    model = tmp_path / "m.json"
    code, out, err = run(
        [
            "fit",
            "--data",
            str(csvs / "train.csv"),
            "--label",
            "outcome",
            "--groups",
            str(gfile),
            "--moments",
            "1",
            "--calibration-fraction",
            "0",
            "--out",
            str(model),
        ],
        capsys,
    )
    assert code == 0, err
    s = json.loads(out.strip().splitlines()[-1])
    assert s["n_groups"] == 2 and s["moment_updates"] == 0
    code, _, err = run(
        ["predict", "--model", str(model), "--data", str(csvs / "test.csv"), "--out", str(tmp_path / "p.csv")], capsys
    )
    assert code == 0, err
    assert list(pd.read_csv(tmp_path / "p.csv").columns)[-1] == "mean"


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--alpha", "0"], "alpha"),
        (["--alpha", "1.5"], "alpha"),
        (["--beta", "-0.1"], "beta"),
        (["--buckets", "0"], "--buckets must be"),
        (["--moments", "0"], "--moments must be"),
        (["--label-range", "0,50"], "outside the label range"),
        (["--label-range", "abc"], "LO,HI"),
        (["--group-cols", "nope"], "'nope' is not in the data"),
        (["--calibration-fraction", "1"], "--calibration-fraction must be"),
        (["--pred", "sex"], "not numeric"),
    ],
)
def test_fit_errors_are_one_line_exit_2_no_output(csvs, capsys, tmp_path, extra, match):
    out = tmp_path / "m.json"
    code, stdout, err = run(
        ["fit", "--data", str(csvs / "train.csv"), "--label", "outcome", "--out", str(out)] + extra, capsys
    )
    assert code == 2
    assert match in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_label_errors(tmp_path, capsys):
    df = pd.DataFrame({"g": ["a", "b"] * 5, "y": [1.0, 2, 3, None, 5, 6, 7, 8, 9, 10], "t": ["x"] * 10})
    df.to_csv(tmp_path / "d.csv", index=False)
    for label, match in [("y", "missing"), ("t", "not numeric"), ("zz", "not in the data")]:
        code, _, err = run(
            ["fit", "--data", str(tmp_path / "d.csv"), "--label", label, "--out", str(tmp_path / "m.json")], capsys
        )
        assert code == 2 and match in err, err
    (tmp_path / "empty.csv").write_text("")
    code, _, err = run(
        ["fit", "--data", str(tmp_path / "empty.csv"), "--label", "y", "--out", str(tmp_path / "m.json")], capsys
    )
    assert code == 2 and "empty" in err
    assert not (tmp_path / "m.json").exists()


def test_predict_errors(csvs, capsys, tmp_path):
    model = tmp_path / "m.json"
    assert (
        run(
            [
                "fit",
                "--data",
                str(csvs / "train.csv"),
                "--label",
                "outcome",
                "--pred",
                "base_pred",
                "--group-cols",
                "race",
                "--out",
                str(model),
            ],
            capsys,
        )[0]
        == 0
    )
    out = tmp_path / "p.csv"
    code, _, err = run(["predict", "--model", str(model), "--data", str(csvs / "test.csv"), "--out", str(out)], capsys)
    assert code == 2 and "--pred" in err and not out.exists()
    pd.read_csv(csvs / "test.csv").drop(columns=["race"]).to_csv(tmp_path / "norace.csv", index=False)
    code, _, err = run(
        [
            "predict",
            "--model",
            str(model),
            "--data",
            str(tmp_path / "norace.csv"),
            "--pred",
            "base_pred",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 2 and "race" in err and not out.exists()
    (tmp_path / "bad.json").write_text('{"format": "mmc-audit-model", "version": 99}')
    code, _, err = run(
        ["predict", "--model", str(tmp_path / "bad.json"), "--data", str(csvs / "test.csv"), "--out", str(out)], capsys
    )
    assert code == 2 and "version" in err


def test_console_script_entry_point_has_no_traceback(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "fit",
            "--data",
            str(tmp_path / "none.csv"),
            "--label",
            "y",
            "--out",
            str(tmp_path / "m.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.startswith("mmc: error:") and "Traceback" not in r.stderr


def test_outputs_that_cannot_be_written_and_parquet_outputs(csvs, capsys, tmp_path, monkeypatch):
    """Found in an exploratory session: an output folder the user may not write to gave a Python traceback
    naming a temporary file (after the whole fit), and `--out preds.parquet` wrote a CSV under that name. Now:
    one line naming the user's path, exit 2; and a real Parquet file."""
    import tempfile

    from mmc_core.common.errors import MMCError
    from mmc_core.fit.model import atomic_write_bytes

    fit = ["fit", "--data", str(csvs / "train.csv"), "--label", "outcome", "--group-cols", "race"]
    model = tmp_path / "m.json"
    assert run([*fit, "--out", str(model)], capsys)[0] == 0
    # a predictions table as Parquet, readable back
    out = tmp_path / "p.parquet"
    assert run(["predict", "--model", str(model), "--data", str(csvs / "test.csv"), "--out", str(out)], capsys)[0] == 0
    back = pd.read_parquet(out)
    assert len(back) == 1000 and "mean" in back.columns
    # a folder the process may not write to (root may write anywhere: the refusal is simulated where it happens)
    with monkeypatch.context() as m:
        m.setattr(tempfile, "mkstemp", lambda **kw: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
        code, _, err = run([*fit, "--out", str(tmp_path / "m2.json")], capsys)
    assert (
        code == 2
        and err.strip().splitlines()[-1] == f"mmc: error: cannot write {tmp_path / 'm2.json'}: Permission denied"
    )
    assert "Traceback" not in err and not (tmp_path / "m2.json").exists()
    # the library names the user's path too: a "folder" that is a file
    with pytest.raises(MMCError, match="cannot write .*x.json"):
        atomic_write_bytes(model / "x.json", b"{}")


def test_fit_names_what_it_could_not_correct(csvs, capsys, tmp_path):
    """A fit on too few rows said only "converged" (0 updates, because no cell reached the 20 rows the 'se' rule
    needs); it now says so, and names the groups too small to be corrected."""
    t = pd.read_csv(csvs / "train.csv")
    t.iloc[:6].to_csv(tmp_path / "six.csv", index=False)
    code, out, err = run(
        ["fit", "--data", str(tmp_path / "six.csv"), "--label", "outcome", "--out", str(tmp_path / "m.json")], capsys
    )
    info = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and info["mean_updates"] == 0 and info["moment_updates"] == 0
    assert "nothing could be corrected" in err and "fewer than the 20" in err
    saved = json.loads((tmp_path / "m.json").read_text())["info"]
    assert saved["small_groups"] and len(saved["small_groups"]) + len(saved["empty_groups"]) == saved["n_groups"]
    code, out, err = run(
        ["fit", "--data", str(csvs / "train.csv"), "--label", "outcome", "--out", str(tmp_path / "m2.json")], capsys
    )
    small = json.loads((tmp_path / "m2.json").read_text())["info"]["small_groups"]
    assert code == 0 and "nothing could be corrected" not in err
    assert (f"{len(small)} group(s) have fewer than the 20" in err) == bool(small)


def test_predict_and_audit_note_categories_the_model_never_saw(csvs, capsys, tmp_path):
    t = pd.read_csv(csvs / "train.csv")
    t[t["race"] != "B"].to_csv(tmp_path / "fit.csv", index=False)
    model = tmp_path / "m.json"
    code, _, _ = run(
        [
            "fit",
            "--data",
            str(tmp_path / "fit.csv"),
            "--label",
            "outcome",
            "--group-cols",
            "race,sex",
            "--out",
            str(model),
        ],
        capsys,
    )
    assert code == 0
    n_b = int((t["race"] == "B").sum())
    for cmd, extra in (("predict", ["--out", str(tmp_path / "p.csv")]), ("audit", ["--label", "outcome"])):
        extra = extra + (["--out", str(tmp_path / "a.json")] if cmd == "audit" else [])
        code, _, err = run([cmd, "--model", str(model), "--data", str(csvs / "train.csv")] + extra, capsys)
        assert code == 0
        assert f"note: {n_b} row(s) have a value of group column 'race' that no group of the model lists" in err
        assert "'B'" in err and "column 'sex'" not in err
    code, _, err = run(
        ["predict", "--model", str(model), "--data", str(tmp_path / "fit.csv"), "--out", str(tmp_path / "q.csv")],
        capsys,
    )
    assert code == 0 and "no group of the model lists" not in err


def test_identifier_values_with_leading_zeros_stay_apart_when_a_csv_is_read(tmp_path, capsys):
    """A model fitted on a Parquet file whose column `site` is text ("01", "1", "2") has groups site=01 and
    site=1. Applied to the same rows as CSV, pandas read `site` as numbers and the condition turned "01" into
    1.0: both groups then held the rows of "01" and "1" (an exploratory session). Now the command line reads
    such columns as text, and the library refuses to compare "01" with a numeric column."""
    from mmc_core import FittedModel, GroupDefinitionError

    rng = np.random.default_rng(5)
    n = 3000
    site = rng.choice(["01", "1", "2"], n)
    shift = np.where(site == "01", 15.0, np.where(site == "1", -15.0, 0.0))
    t = pd.DataFrame({"site": site, "x": rng.normal(size=n)})
    t["y"] = np.clip(50 + shift + 5 * t["x"] + rng.normal(0, 5, n), 0, 100)
    t.to_parquet(tmp_path / "d.parquet", index=False)
    t.to_csv(tmp_path / "d.csv", index=False)
    model = tmp_path / "m.json"
    code, _, err = run(
        ["fit", "--data", str(tmp_path / "d.parquet"), "--label", "y", "--group-cols", "site", "--label-range", "0,100"]
        + ["--moments", "1", "--out", str(model)],
        capsys,
    )
    assert code == 0, err
    assert {"site=01", "site=1"} <= set(FittedModel.load(model).groups.names)
    preds = {}
    for ext in ("parquet", "csv"):
        out = tmp_path / f"p_{ext}.csv"
        code, _, err = run(
            ["predict", "--model", str(model), "--data", str(tmp_path / f"d.{ext}"), "--out", str(out)], capsys
        )
        assert code == 0, err
        preds[ext] = pd.read_csv(out)["mean"].to_numpy()
    np.testing.assert_array_equal(preds["csv"], preds["parquet"])
    # the groups' own means differ by 30: merged groups would predict the same for "01" and "1"
    assert preds["csv"][site == "01"].mean() - preds["csv"][site == "1"].mean() > 20
    code, _, err = run(
        ["audit", "--model", str(model), "--data", str(tmp_path / "d.csv"), "--label", "y"]
        + ["--out", str(tmp_path / "a.json")],
        capsys,
    )
    assert code == 0, err
    # the library, given the CSV as pandas reads it by default, says what to do instead of merging the groups
    est_model = FittedModel.load(model)
    with pytest.raises(GroupDefinitionError, match=r"column 'site' holds numbers here.*'01'.*read the column as text"):
        est_model.predict(pd.read_csv(tmp_path / "d.csv"))


def test_codes_with_leading_zeros_are_read_as_text(tmp_path, capsys):
    """A browser session uploaded a table whose `site` held 01, 1, 02, 2, 10: it was read as numbers, the
    Groups page showed site=1 with the rows of both "01" and "1", and the exported predictions wrote 1 for
    "01"; `mmc fit --group-cols site` merged them too (4 groups). A column whose text tells apart values that
    are one number is now text; zero-padded numbers written one way (months 01-12, `tier` 001/002 here) stay
    numbers, so numeric groups on them keep working (a review)."""
    from app.services.io import read_table

    csv = "site,tier,n,x,y\n01,001,3,0.5,10\n1,002,4,0.25,12\n02,001,,1.5,11\n2,002,5,0.0,9\n10,001,6,-0.5,8\n"
    (tmp_path / "d.csv").write_text(csv)
    df = read_table(tmp_path / "d.csv")
    assert list(df["site"]) == ["01", "1", "02", "2", "10"]
    assert pd.api.types.is_numeric_dtype(df["tier"]) and list(df["tier"]) == [1, 2, 1, 2, 1]
    assert pd.api.types.is_numeric_dtype(df["n"]) and pd.api.types.is_numeric_dtype(df["x"])
    assert df["n"].isna().sum() == 1 and df["x"].tolist() == [0.5, 0.25, 1.5, 0.0, -0.5]
    # integer codes without a leading zero stay numbers
    (tmp_path / "e.csv").write_text("site,tier,x\n1,1,0.5\n10,2,0.05\n2,1,-0.5\n")
    e = read_table(tmp_path / "e.csv")
    assert all(pd.api.types.is_numeric_dtype(e[c]) for c in e.columns)
    rng = np.random.default_rng(0)
    t = pd.DataFrame({"site": rng.choice(["01", "1", "02"], 600), "y": rng.normal(50, 5, 600)})
    t.to_csv(tmp_path / "f.csv", index=False)
    code, out, err = run(
        ["fit", "--data", str(tmp_path / "f.csv"), "--label", "y", "--group-cols", "site", "--moments", "1"]
        + ["--out", str(tmp_path / "m.json")],
        capsys,
    )
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["n_groups"] == 4  # all, site=01, site=02, site=1


def test_audit_says_when_labels_lie_outside_the_model_range(csvs, capsys, tmp_path):
    """Labels outside the declared range were audited without a word (exit 0, findings like "understates its
    uncertainty 38 times"; the count sat only in audit.json's params); `mmc fit` refuses the same data."""
    model = tmp_path / "m.json"
    fit = ["fit", "--data", str(csvs / "train.csv"), "--label", "outcome", "--label-range=0,100", "--out", str(model)]
    assert run(fit, capsys)[0] == 0
    t = pd.read_csv(csvs / "train.csv")
    t.loc[:39, "outcome"] = 500.0
    t.to_csv(tmp_path / "odd.csv", index=False)
    args = ["audit", "--model", str(model), "--label", "outcome", "--out", str(tmp_path / "a.json")]
    code, _, err = run(args + ["--data", str(tmp_path / "odd.csv")], capsys)
    assert code == 0
    assert "note: 40 of the 2,000 audited labels lie outside the model's declared label range [0; 100]" in err
    code, _, err = run(args + ["--data", str(csvs / "train.csv")], capsys)
    assert code == 0 and "outside the model's" not in err


def test_label_range_with_a_negative_low_end_is_read_as_a_value(csvs, capsys, tmp_path):
    """`--label-range -20,140` failed with "expected one argument" (argparse took -20,140 for an option)."""
    model = tmp_path / "m.json"
    base = ["fit", "--data", str(csvs / "train.csv"), "--label", "outcome", "--out", str(model)]
    code, _, err = run(base + ["--label-range", "-20,140"], capsys)
    assert code == 0, err
    scale = json.loads(model.read_text())["label_scale"]
    assert (scale["lo"], scale["hi"]) == (-20.0, 140.0)


def test_fit_notes_rows_missing_a_group_column(csvs, capsys, tmp_path):
    """Rows with no value in a group column belong to none of its groups: `mmc fit` said nothing (predict and
    audit note values no group lists)."""
    t = pd.read_csv(csvs / "train.csv")
    t.loc[:49, "race"] = np.nan
    t.to_csv(tmp_path / "gaps.csv", index=False)
    args = ["fit", "--label", "outcome", "--group-cols", "race,sex", "--out", str(tmp_path / "m.json")]
    code, _, err = run(args + ["--data", str(tmp_path / "gaps.csv")], capsys)
    assert code == 0 and "note: 50 row(s) have no value in group column 'race'" in err
    assert "group column 'sex'" not in err
    code, _, err = run(args + ["--data", str(csvs / "train.csv")], capsys)
    assert code == 0 and "have no value in group column" not in err


def test_fit_note_on_missing_group_values_spares_columns_tested_with_not_equal(csvs, capsys, tmp_path):
    """A review: rows missing 'race' do belong to a group "race != A" (a missing value satisfies != and not in),
    and the note said no group of the column held them."""
    t = pd.read_csv(csvs / "train.csv")
    t.loc[:49, "race"] = np.nan
    t.to_csv(tmp_path / "gaps.csv", index=False)
    groups = tmp_path / "g.json"
    groups.write_text(json.dumps([{"name": "not A", "where": [{"column": "race", "op": "!=", "value": "A"}]}]))
    args = ["fit", "--data", str(tmp_path / "gaps.csv"), "--label", "outcome", "--groups", str(groups)]
    code, _, err = run(args + ["--out", str(tmp_path / "m.json")], capsys)
    assert code == 0 and "have no value in group column" not in err


def test_fit_states_the_cell_corrections_and_can_turn_them_off(csvs, capsys, tmp_path):
    """`mmc fit` says what the shrunken cell corrections after the descent did (its summary's "after_descent"),
    and `--shrunken-cells off` fits without them (a model without "cells", no such line)."""
    base = ["fit", "--data", str(csvs / "train.csv"), "--label", "outcome", "--pred", "base_pred"]
    base += ["--group-cols", "sex,race,age", "--label-range", "0,100"]
    code, out, _ = run(base + ["--out", str(tmp_path / "on.json")], capsys)
    summary = json.loads(out.strip().splitlines()[-1])
    saved = json.loads((tmp_path / "on.json").read_text())
    assert code == 0 and "shrunken_cells" in saved["info"]
    assert summary["after_descent"].startswith(("each group's prediction bands", "no shrunken cell corrections"))
    assert ("cells" in saved) == saved["info"]["shrunken_cells"]["kept"]
    code, out, _ = run(base + ["--shrunken-cells", "off", "--out", str(tmp_path / "off.json")], capsys)
    summary = json.loads(out.strip().splitlines()[-1])
    saved = json.loads((tmp_path / "off.json").read_text())
    assert code == 0 and "after_descent" not in summary and "cells" not in saved
    assert "shrunken_cells" not in saved["info"]

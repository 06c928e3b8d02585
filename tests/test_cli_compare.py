"""`mmc compare` and `mmc audit --period` from the command line: files in, one JSON out, findings on stderr."""

import json

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    rng = np.random.default_rng(1)
    n = 6000
    df = pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n), "x": rng.normal(size=n)})
    df["y"] = df["x"] + (1 + df["a"]) * rng.normal(size=n)
    df["p"] = df["x"]
    df["p_shifted"] = df["x"] + np.where(df["a"] == 2, 0.5, 0.0)  # worse for a=2 only
    df["quarter"] = np.array(["2026Q1", "2026Q2"])[rng.integers(0, 2, n)]
    data = d / "d.csv"
    df.to_csv(data, index=False)
    with_base, plain = d / "with_base.json", d / "plain.json"
    common = ["fit", "--data", str(data), "--label", "y", "--group-cols", "a,b"]
    assert main([*common, "--pred", "p", "--out", str(with_base)]) == 0
    assert main([*common, "--out", str(plain)]) == 0
    return {"dir": d, "data": data, "with_base": with_base, "plain": plain}


def test_two_models_are_compared_group_by_group(files, capsys):
    out = files["dir"] / "cmp.json"
    args = ["compare", "--data", str(files["data"]), "--label", "y", "--pred", "p"]
    args += ["--model", str(files["with_base"]), "--model", str(files["plain"]), "--out", str(out)]
    capsys.readouterr()
    assert main(args) == 0
    cap = capsys.readouterr()
    summary = json.loads(cap.out.splitlines()[-1])
    doc = json.loads(out.read_text())
    assert doc["format"] == "mmc-audit-comparison" and doc["names"] == ["with_base", "plain"]
    assert summary["compared"] == ["rmse", "mean_error", "spread", "coverage"]
    # the model without the informative base is worse overall and in every group (its RMSE ignores x)
    worse = [f for f in doc["findings"] if f["direction"] == "worse" and f["kind"] == "rmse"]
    assert {f["group"] for f in worse} == set(doc["by_group"]["group"])
    assert summary["worse"] == len([f for f in doc["findings"] if f["direction"] == "worse"])
    assert "- plain is worse than with_base for " in cap.err


def test_prediction_columns_name_the_group_made_worse(files, capsys):
    out = files["dir"] / "cmp_cols.json"
    args = ["compare", "--data", str(files["data"]), "--label", "y", "--pred-a", "p", "--pred-b", "p_shifted"]
    assert main([*args, "--group-cols", "a", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    first = doc["findings"][0]
    assert first["direction"] == "worse" and first["kind"] == "mean_error"
    assert {f["group"] for f in doc["findings"]} <= {"all", "a=2"}
    assert "a=2" in {f["group"] for f in doc["findings"]}


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "M1", "--model", "M2", "--pred-a", "p"], "needs exactly two sides"),
        (["--model", "M1"], "needs exactly two sides"),
        (["--pred-a", "p", "--pred-b", "p", "--name-a", "x", "--name-b", "x"], "must differ"),
        (["--pred-a", "p", "--pred-b", "nope", "--group-cols", "a"], "'nope'"),
        (["--pred-a", "p", "--pred-b", "p_shifted", "--group-cols", "zz"], "group column 'zz' is not in the data"),
        (["--model", "M1", "--model", "M1", "--out", "M1"], "would replace that input"),
        (["--pred-a", "p", "--pred-b", "p_shifted", "--delta", "2"], "--delta must be strictly between 0 and 1"),
    ],
)
def test_bad_comparisons_are_one_line_and_write_nothing(files, capsys, extra, message):
    extra = [str(files["plain"]) if v == "M1" else str(files["with_base"]) if v == "M2" else v for v in extra]
    out = files["dir"] / "never.json"
    args = ["compare", "--data", str(files["data"]), "--label", "y", "--pred", "p", *extra]
    if "--out" not in extra:
        args += ["--out", str(out)]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("mmc: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert not out.exists()


def test_audit_with_periods(files, capsys):
    out = files["dir"] / "audit.json"
    args = ["audit", "--data", str(files["data"]), "--label", "y", "--model", str(files["plain"])]
    assert main([*args, "--period", "quarter", "--out", str(out)]) == 0
    per = json.loads(out.read_text())["periods"]
    assert per["format"] == "mmc-audit-periods" and per["periods"] == ["2026Q1", "2026Q2"]
    assert per["n_tests"] > 0 and "spread_change" in per["changes"]
    assert main([*args, "--period", "nope", "--out", str(files["dir"] / "a2.json")]) == 2
    assert "period column 'nope' is not in the data" in capsys.readouterr().err


def test_two_classifiers_are_compared_with_their_rates(tmp_path, capsys):
    rng = np.random.default_rng(5)
    n = 5000
    df = pd.DataFrame({"g": rng.integers(0, 3, n), "x": rng.normal(size=n)})
    p = 1 / (1 + np.exp(-(df["x"] + 0.8 * (df["g"] - 1))))
    df["hired"] = np.where(rng.random(n) < p, "yes", "no")
    df["score"] = 1 / (1 + np.exp(-df["x"]))  # ignores the group effect
    data = tmp_path / "d.csv"
    df.to_csv(data, index=False)
    fit = ["fit", "--data", str(data), "--label", "hired", "--positive", "yes", "--group-cols", "g"]
    assert main([*fit, "--pred", "score", "--out", str(tmp_path / "a.json")]) == 0
    assert main([*fit, "--out", str(tmp_path / "b.json")]) == 0
    out = tmp_path / "cmp.json"
    args = ["compare", "--data", str(data), "--label", "hired", "--pred", "score", "--threshold", "0.6"]
    args += ["--model", str(tmp_path / "a.json"), "--model", str(tmp_path / "b.json"), "--out", str(out)]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    assert {"tpr_diff", "fpr_diff", "selection_rate_diff"} <= set(doc["by_group"])
    assert all(0 <= v <= 1 for v in doc["by_group"]["tpr_a"])
    # a classifier against a plain column: the labels are read through the model's positive class
    assert (
        main(
            [
                "compare",
                "--data",
                str(data),
                "--label",
                "hired",
                "--model",
                str(tmp_path / "a.json"),
                "--pred-b",
                "x",
                "--pred",
                "score",
                "--out",
                str(tmp_path / "x.json"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    bad = ["compare", "--data", str(data), "--label", "x", "--pred-a", "score", "--pred-b", "x", "--threshold", "0.5"]
    assert main([*bad, "--group-cols", "g", "--out", str(tmp_path / "y.json")]) == 2
    assert "need 0/1 labels" in capsys.readouterr().err


def test_the_comparison_as_a_pdf_report(files, tmp_path, monkeypatch, capsys):
    import shutil
    import subprocess

    from tests.test_report import stand_in_renderer

    stand_in_renderer(monkeypatch)
    out, pdf = tmp_path / "cmp.json", tmp_path / "cmp.pdf"
    args = ["compare", "--data", str(files["data"]), "--label", "y", "--pred-a", "p", "--pred-b", "p_shifted"]
    assert main([*args, "--group-cols", "a", "--out", str(out), "--report", str(pdf)]) == 0
    assert pdf.read_bytes()[:5] == b"%PDF-" and json.loads(capsys.readouterr().out.splitlines()[-1])["report"]
    if shutil.which("pdftotext"):
        first = subprocess.run(["pdftotext", "-l", "1", str(pdf), "-"], capture_output=True, text=True).stdout
        flat = " ".join(first.split())
        assert "Comparison: p_shifted against p" in flat and "p_shifted is worse than p for" in flat
    capsys.readouterr()
    assert main([*args, "--group-cols", "a", "--out", str(tmp_path / "x.json"), "--report", str(files["data"])]) == 2
    assert "--report" in capsys.readouterr().err and not (tmp_path / "x.json").exists()

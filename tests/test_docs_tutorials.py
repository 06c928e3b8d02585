"""The documentation's tutorials (docs/tutorials/*.py, included verbatim into their pages) run, and say what
their pages say they show."""

from __future__ import annotations

import pathlib
import runpy

import numpy as np
import pytest

TUTORIALS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "tutorials"


def _run(name: str, tmp_path, monkeypatch, capsys) -> tuple[dict, str]:
    monkeypatch.chdir(tmp_path)  # a tutorial must not depend on, or write into, the working directory
    namespace = runpy.run_path(str(TUTORIALS / name), run_name="__main__")
    assert list(tmp_path.iterdir()) == []
    return namespace, capsys.readouterr().out


def test_every_tutorial_has_a_test_and_a_page():
    scripts = sorted(p.name for p in TUTORIALS.glob("*.py"))
    assert scripts == ["classifier_audit.py", "regression_audit.py"]
    pages = "".join(p.read_text(encoding="utf-8") for p in TUTORIALS.glob("*.md"))
    for script in scripts:
        assert f'--8<-- "docs/tutorials/{script}"' in pages


def test_regression_tutorial(tmp_path, monkeypatch, capsys):
    ns, out = _run("regression_audit.py", tmp_path, monkeypatch, capsys)
    stages = ns["est"].model_.info["stages"]
    assert stages[0]["stage"] == "start" and "descent" in [s["stage"] for s in stages]
    assert stages[-1]["rmse"] < stages[0]["rmse"]  # the fit helps on the rows held out of it
    for s in stages:
        assert f"{s['stage']:>13}: held-out RMSE {s['rmse']:.2f}" in out
    table = ns["table"]
    assert {"race=2. Black", "education=5. Advanced Degree", "maritl=2. Married", "all"} <= set(table.index)
    assert table.loc["all", "count"] == len(ns["test"]) == 800
    # The base knows nothing of education; the multicalibrated mean does (on rows neither was fitted on).
    assert ns["error_after"].mean() < 0.6 * ns["error_base"].mean()
    assert f"base {ns['error_base'].mean():.2f}, multicalibrated {ns['error_after'].mean():.2f}" in out
    assert ns["result"].findings_status in out


def test_classifier_tutorial(tmp_path, monkeypatch, capsys):
    ns, out = _run("classifier_audit.py", tmp_path, monkeypatch, capsys)
    assert ns["est"].task_ == "binary" and "task: binary" in out
    proba = ns["proba"]
    assert proba.shape == (len(ns["test"]), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert ((proba >= 0) & (proba <= 1)).all()
    table = ns["table"]
    assert table.loc["all", "base_rate"] == pytest.approx(ns["test"]["approve"].mean())
    # The comment in the script: the largest group error (black=1) is corrected, in part.
    worst = table["calib_error_base"].abs().idxmax()
    assert worst == "black=1"
    assert abs(table.loc[worst, "calib_error"]) < abs(table.loc[worst, "calib_error_base"])
    disparities = ns["result"].classifier.disparities
    assert set(disparities.index) == {"black", "hispan", "male", "married"}
    assert "black=1" in disparities.loc["black", "four_fifths_flagged"]
    assert "equalized_odds_ratio" in out

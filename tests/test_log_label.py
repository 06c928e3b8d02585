"""A label that is a natural log (log wage): mean errors are also stated as percent differences of the original
values, in the findings, the scorecard, the command line's audit and report, and the dashboard (issue 35)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from app.cli import entry as cli
from app.services.specs import looks_like_log
from mmc_core import MomentMulticalibrator
from mmc_core.auditing.metrics import audit
from mmc_core.common.errors import MMCError

SHIFT = 0.1  # log points added to group a's labels on the audit rows: its true percent error is 100 (e^0.1 - 1)


def _world(n: int, seed: int, shift: float) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = rng.choice(["a", "b", "c"], n)
    y = math.log(20) + 0.3 * rng.standard_normal(n) + np.where(g == "a", shift, 0.0)
    return pd.DataFrame({"g": g, "base": math.log(20)}), y


@pytest.fixture(scope="module")
def model():
    X, y = _world(4000, 0, 0.0)  # fitted where every group's mean is right
    return MomentMulticalibrator(base_column="base", groups=["g"]).fit(X, y).model_


def test_findings_and_scorecard_state_percent_for_a_log_label(model):
    X, y = _world(4000, 1, SHIFT)
    res = audit(model, X, y, base=X["base"].to_numpy(), label_scale="log")
    assert res.params["label_scale"] == "log"
    found = [f for f in res.findings if f["kind"] == "mean" and f["group"] == "g=a"]
    assert found, [f["text"] for f in res.findings]
    f = found[0]
    assert f["percent"] == pytest.approx(100 * math.expm1(f["estimate"]), rel=1e-12)
    lo, hi = f["interval"]
    assert f["percent_interval"] == pytest.approx([100 * math.expm1(lo), 100 * math.expm1(hi)], rel=1e-12)
    # the planted error on the original scale lies in the finding's (selection-adjusted) interval
    assert f["percent_interval"][0] < 100 * math.expm1(SHIFT) < f["percent_interval"][1]
    assert "original scale" in f["text"] and f"{f['percent']:.1f}% above predicted" in f["text"]
    card = res.scorecard
    np.testing.assert_allclose(card["mean_error_percent"], 100 * np.expm1(card["mean_error"]), rtol=1e-12)
    np.testing.assert_allclose(card["mean_error_percent_hi"], 100 * np.expm1(card["mean_error_hi"]), rtol=1e-12)
    # the same audit on the label's own scale says nothing of percent
    plain = audit(model, X, y, base=X["base"].to_numpy())
    assert plain.params["label_scale"] == "linear" and "mean_error_percent" not in plain.scorecard
    assert all("percent" not in t and "original scale" not in t["text"] for t in plain.findings)
    assert [t["estimate"] for t in plain.findings] == [t["estimate"] for t in res.findings]


def test_a_bad_label_scale_is_refused_by_name(model):
    X, y = _world(200, 2, 0.0)
    with pytest.raises(MMCError, match="label_scale must be one of linear, log"):
        audit(model, X, y, base=X["base"].to_numpy(), label_scale="log10")


def test_a_classifier_takes_no_log_scale():
    rng = np.random.default_rng(3)
    X = pd.DataFrame({"g": rng.choice(["a", "b"], 600), "p": rng.uniform(0.2, 0.8, 600)})
    y = (rng.uniform(size=600) < X["p"]).astype(int)
    m = MomentMulticalibrator(base_column="p", groups=["g"], task="binary").fit(X, y).model_
    with pytest.raises(MMCError, match="applies to a regression label"):
        audit(m, X, y, base=X["p"].to_numpy(), label_scale="log")


@pytest.fixture
def files(tmp_path, model):
    X, y = _world(3000, 4, SHIFT)
    data = tmp_path / "d.csv"
    X.assign(lwage=y).to_csv(data, index=False)
    path = tmp_path / "m.json"
    model.save(path)
    return data, path


def test_mmc_audit_log_label(files, tmp_path, capsys):
    data, path = files
    out = tmp_path / "a.json"
    base = ["--model", str(path), "--data", str(data), "--label", "lwage", "--pred", "base"]
    assert cli.main(["audit", *base, "--log-label", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["params"]["label_scale"] == "log"
    assert any("percent" in f and f["group"] == "g=a" for f in doc["findings"])
    capsys.readouterr()
    refused = tmp_path / "b.json"
    rc = cli.main(["audit", *base, "--log-label", "--engine", "dask", "--out", str(refused)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.strip().count("\n") == 0
    assert "--log-label" in err and not refused.exists()


@pytest.mark.parametrize(
    "name, is_log",
    [("lwage", True), ("log_wage", True), ("ln price", True), ("logsales", True), ("lsalary", True)]
    + [("wage", False), ("login", False), ("logistic", False), ("label", False), ("length", False)],
)
def test_the_dashboard_guesses_a_log_label_from_its_name(name, is_log):
    assert looks_like_log(name) is is_log


def test_dashboard_states_percent_for_a_log_label():
    from apptest_helpers import run_uploaded, switch

    X, y = _world(3000, 5, SHIFT)
    at = run_uploaded(X.drop(columns="base").assign(lwage=y, base_pred=X["base"]), "lw.csv", "lwage")
    assert at.session_state["label_percent"] is True
    run = at.session_state["run"]
    assert run.audit.params["label_scale"] == "log"
    switch(at, "results")
    cards = [d.value for d in at.dataframe if "mean error, % [95% CI]" in d.value.columns]
    assert cards and len(cards[0]) == len(run.audit.scorecard)
    assert all(c == "–" or c.endswith("]") and "%" in c for c in cards[0]["mean error, % [95% CI]"])

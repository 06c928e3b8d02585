"""Classifier audits wired through the public API, the model file, the CLI and the dashboard runner (issue 13):
binary label detection (0/1, True/False, strings with a declared positive class), probabilities in [0, 1], no
intervals, the task in the model JSON (older files still load), ``audit()`` returning the classifier tables, and
per-group rates equal to fairlearn's on the same rows through the public path."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from mmc_core import FittedModel, GroupSet, MomentMulticalibrator
from mmc_core.auditing.metrics import audit
from mmc_core.common.errors import DataError, MMCError, ModelFormatError


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"race": rng.choice(["A", "B", "C"], n, p=[0.6, 0.3, 0.1]), "sex": rng.choice(["F", "M"], n)})
    p = (0.2 + 0.3 * (df["race"] == "B") + 0.1 * (df["sex"] == "F")).to_numpy()
    y = (rng.random(n) < p).astype(int)
    base = np.clip(p - 0.15 * (df["race"] == "C").to_numpy() + rng.normal(0, 0.1, n), 0, 1)
    return df, y, base


def test_detects_binary_labels_and_fits_the_mean_only():
    df, y, base = _data()
    gs = GroupSet.from_columns(df, ["race", "sex"], 2)
    for label in (y, y.astype(float), y.astype(bool), pd.Series(y.astype(bool))):
        est = MomentMulticalibrator().fit(df, label, gs, base_prediction=base)
        assert est.task_ == "binary" and est.model_.moments == () and est.model_.info["task"] == "binary"
        assert est.binary_["positive"] in (1, True)
    words = np.where(y == 1, "hired", "not hired").astype(object)
    with pytest.raises(DataError, match=r"label 'hired\?' has the two values 'hired', 'not hired'.*positive"):
        MomentMulticalibrator().fit(df, words, gs, label_name="hired?")
    est = MomentMulticalibrator(positive_label="hired").fit(df, words, gs, base_prediction=base)
    assert est.binary_["classes"] == ["not hired", "hired"] and est.binary_["positive"] == "hired"
    np.testing.assert_array_equal(
        est.predict(df, base), MomentMulticalibrator().fit(df, y, gs, base_prediction=base).predict(df, base)
    )  # the same fit as on the 0/1 coding
    with pytest.raises(DataError, match="positive class 'yes' is not a value"):
        MomentMulticalibrator(positive_label="yes").fit(df, words, gs)
    with pytest.raises(DataError, match="positive_label=1 was given but label 'label' is not binary"):
        MomentMulticalibrator(positive_label=1).fit(df, np.arange(len(df)) % 3, gs)
    with pytest.raises(MMCError, match="task must be one of"):
        MomentMulticalibrator(task="classify").fit(df, y, gs)
    with pytest.raises(MMCError, match="fitted for the mean only"):
        MomentMulticalibrator(n_moments=3).fit(df, y, gs)
    with pytest.raises(MMCError, match="probability on \\[0, 1\\]"):
        MomentMulticalibrator(label_range=(0, 2)).fit(df, y, gs)
    reg = MomentMulticalibrator(task="regression").fit(df, y, gs)  # the old behaviour on request
    assert reg.task_ == "regression" and reg.model_.moments == (2,)


def test_probabilities_stay_strictly_inside_0_1_and_no_intervals():
    df, y, base = _data(2000, 3)
    gs = GroupSet.from_columns(df, ["race", "sex"], 2)
    # a base that is far too high for race C: whole-group shifts would push rows past 1 (or below 0)
    extreme = np.where(df["race"] == "C", 0.99, base)
    est = MomentMulticalibrator(n_buckets=10).fit(df, y, gs, base_prediction=extreme)
    p = est.predict(df, extreme)
    floor = est.binary_["floor"]
    assert floor == pytest.approx(0.5 / (est.fit_index_.size + 1))
    assert p.min() >= floor and p.max() <= 1 - floor
    proba = est.predict_proba(df, extreme)  # scikit-learn's shape: [negative, positive] columns
    assert proba.shape == (len(df), 2) and list(est.classes_) == [0, 1]
    assert np.array_equal(p, proba[:, 1]) and np.array_equal(1.0 - p, proba[:, 0])
    with pytest.raises(MMCError, match="prediction intervals are not offered"):
        est.predict_interval(df, extreme)
    from mmc_core.intervals import available_methods, interval_table, predict_intervals

    assert available_methods(est.model_) == ()
    assert interval_table(est.model_, df, base=extreme) == {}
    with pytest.raises(MMCError, match="0/1"):
        predict_intervals(est.model_, df, base=extreme, method="gaussian")
    assert "intervals" not in est.model_.extras


def test_model_json_round_trip_and_old_files():
    df, y, base = _data(1500, 4)
    gs = GroupSet.from_columns(df, ["race"], 1)
    words = np.where(y == 1, "yes", "no")
    est = MomentMulticalibrator(positive_label="yes").fit(df, words, gs, base_prediction=base)
    d = json.loads(est.model_.to_json())
    assert d["task"] == "binary" and d["binary"]["classes"] == ["no", "yes"] and d["binary"]["positive"] == "yes"
    back = FittedModel.from_json(est.model_.to_json())
    assert back.task == "binary" and back.binary == est.model_.binary
    np.testing.assert_array_equal(back.predict(df, base)["mean"], est.predict(df, base))
    again = MomentMulticalibrator.from_model(back)
    # the settings as given (task "auto"), the task it resolved to as a fitted attribute
    assert again.task == "auto" and again.task_ == "binary" and again.positive_label == "yes"
    # a regression model's file has no task field (files read by older versions stay byte-compatible) ...
    reg = MomentMulticalibrator(task="regression").fit(df, y.astype(float), gs)
    rd = json.loads(reg.model_.to_json())
    assert "task" not in rd and "binary" not in rd and FittedModel.from_dict(rd).task == "regression"
    # ... and a format-1 / format-2 file without one loads as a regression
    rd1 = json.loads(
        MomentMulticalibrator(task="regression", alpha=0.02, beta=0.02, moment_buckets="range", calibration_fraction=0)
        .fit(df, y.astype(float), gs)
        .model_.to_json()
    )
    assert rd1["version"] == 1 and FittedModel.from_dict(rd1).task == "regression"
    for bad, msg in (
        ({"task": "classify"}, "unknown task 'classify'"),
        ({"binary": {"positive": 1}}, "binary: missing field 'classes'"),
        ({"binary": {"classes": [0, 1], "positive": 1}}, "only allowed"),
        ({"task": "binary", "binary": None}, "needs"),
    ):
        with pytest.raises(ModelFormatError, match=msg):
            FittedModel.from_dict({**rd, **bad})
    with pytest.raises(ModelFormatError, match="no moments"):
        FittedModel.from_dict({**rd, "task": "binary", "binary": {"classes": [0, 1], "positive": 1}})
    with pytest.raises(ModelFormatError, match="floor"):
        FittedModel.from_dict({**d, "binary": {**d["binary"], "floor": 0.7}})


def test_audit_rates_equal_fairlearn_through_the_public_path():
    from functools import partial

    from fairlearn.metrics import (
        MetricFrame,
        demographic_parity_difference,
        equalized_odds_difference,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )
    from sklearn.metrics import precision_score

    precision_score = partial(precision_score, zero_division=np.nan)  # undefined (nothing selected): NaN, as ours
    df, y, base = _data(4000, 5)
    tr, te = np.arange(2500), np.arange(2500, 4000)
    gs = GroupSet.from_columns(df.iloc[tr], ["race", "sex"], 1)
    est = MomentMulticalibrator(n_buckets=10).fit(df.iloc[tr], y[tr], gs, base_prediction=base[tr])
    Xt = df.iloc[te].reset_index(drop=True)
    for thr in (0.3, 0.5):
        res = audit(est.model_, Xt, y[te], base=base[te], threshold=thr, n_boot=20)
        assert res.task == "binary" and res.coverage.empty and res.moment_cells.empty
        assert all(f["kind"] in ("mean", "calibration") for f in res.findings)
        assert not any(k.startswith(("pred_var", "emp_var", "var_ratio")) for k in res.by_group.columns)
        pred = (est.predict(Xt, base[te]) >= thr).astype(int)  # the public prediction, thresholded
        for col in ("race", "sex"):
            mf = MetricFrame(
                metrics={
                    "selection_rate": selection_rate,
                    "tpr": true_positive_rate,
                    "fpr": false_positive_rate,
                    "precision": precision_score,
                },
                y_true=y[te],
                y_pred=pred,
                sensitive_features=Xt[col],
            )
            for g, row in mf.by_group.iterrows():
                for k in ("selection_rate", "tpr", "fpr", "precision"):
                    got = res.by_group.loc[f"{col}={g}", k]
                    assert (np.isnan(got) and np.isnan(row[k])) or abs(got - row[k]) <= 1e-12, (thr, col, g, k)
            d = res.classifier.disparities.loc[col]
            assert (
                abs(
                    d["demographic_parity_difference"]
                    - demographic_parity_difference(y[te], pred, sensitive_features=Xt[col])
                )
                <= 1e-12
            )
            assert (
                abs(d["equalized_odds_difference"] - equalized_odds_difference(y[te], pred, sensitive_features=Xt[col]))
                <= 1e-12
            )
        out = res.to_json()
        assert out["task"] == "binary" and out["threshold"] == thr and out["classifier"]["by_group"]["data"]
        json.dumps(out, allow_nan=False)
    with pytest.raises(MMCError, match="threshold must be a number strictly between 0 and 1"):
        audit(est.model_, Xt, y[te], base=base[te], threshold=1.0)
    with pytest.raises(DataError, match="must be 0/1"):
        audit(est.model_, Xt, y[te] * 2, base=base[te])


def test_cli_binary_fit_predict_audit(tmp_path, capsys):
    df, y, base = _data(1500, 6)
    df["hired"] = np.where(y == 1, "yes", "no")
    df["y01"] = y
    df["score"] = base
    data = tmp_path / "d.csv"
    df.to_csv(data, index=False)
    model, pred, aud = tmp_path / "m.json", tmp_path / "p.csv", tmp_path / "a.json"
    assert (
        main(
            [
                "fit",
                "--data",
                str(data),
                "--label",
                "y01",
                "--pred",
                "score",
                "--group-cols",
                "race,sex",
                "--out",
                str(model),
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["task"] == "binary" and summary["moment_updates"] == 0 and summary["label_range"] == [0.0, 1.0]
    assert summary["beta"] is None and summary["moment_betas"] == {}  # a mean-only model has no moment threshold
    assert (
        main(
            [
                "predict",
                "--model",
                str(model),
                "--data",
                str(data),
                "--pred",
                "score",
                "--threshold",
                "0.4",
                "--out",
                str(pred),
            ]
        )
        == 0
    )
    out = pd.read_csv(pred)
    assert "mean" in out and "decision" in out and "moment_2" not in out and "lower" not in out
    assert out["mean"].between(0, 1).all()
    assert (out["decision"] == (out["mean"] >= 0.4).astype(int)).all()
    for bad in ("0", "1", "1.5", "-0.1", "abc", "nan"):
        assert (
            main(
                [
                    "predict",
                    "--model",
                    str(model),
                    "--data",
                    str(data),
                    "--pred",
                    "score",
                    "--threshold",
                    bad,
                    "--out",
                    str(pred),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "--threshold" in err, err
    assert (
        main(
            [
                "predict",
                "--model",
                str(model),
                "--data",
                str(data),
                "--pred",
                "score",
                "--interval",
                "calibrated",
                "--out",
                str(tmp_path / "q.csv"),
            ]
        )
        == 2
    )
    assert "no prediction intervals for a binary" in capsys.readouterr().err
    assert not (tmp_path / "q.csv").exists()
    assert (
        main(
            [
                "audit",
                "--model",
                str(model),
                "--data",
                str(data),
                "--label",
                "y01",
                "--pred",
                "score",
                "--threshold",
                "0.6",
                "--out",
                str(aud),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "classifier audit at threshold 0.6" in printed and "race=B" in printed and "label units" not in printed
    last = json.loads(printed.strip().splitlines()[-1])
    assert last["task"] == "binary" and last["threshold"] == 0.6
    written = json.loads(aud.read_text())
    assert written["task"] == "binary" and written["classifier"]["params"]["threshold"] == 0.6
    # strings need --positive; the model keeps the classes, and audit reads the same strings
    assert (
        main(
            ["fit", "--data", str(data), "--label", "hired", "--group-cols", "race", "--out", str(tmp_path / "h.json")]
        )
        == 2
    )
    assert "positive" in capsys.readouterr().err
    assert (
        main(
            [
                "fit",
                "--data",
                str(data),
                "--label",
                "hired",
                "--positive",
                "yes",
                "--group-cols",
                "race",
                "--out",
                str(tmp_path / "h.json"),
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["task"] == "binary" and summary["positive"] == "yes"
    assert (
        main(["audit", "--model", str(tmp_path / "h.json"), "--data", str(data), "--label", "hired", "--out", str(aud)])
        == 0
    )
    capsys.readouterr()
    assert json.loads(aud.read_text())["by_group"]["data"][0][2] == pytest.approx(y.mean())  # base_rate of all
    # a regression label keeps its task; --threshold is for classifiers only
    assert (
        main(
            ["fit", "--data", str(data), "--label", "score", "--group-cols", "race", "--out", str(tmp_path / "r.json")]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["task"] == "regression"
    assert (
        main(
            [
                "predict",
                "--model",
                str(tmp_path / "r.json"),
                "--data",
                str(data),
                "--threshold",
                "0.5",
                "--out",
                str(pred),
            ]
        )
        == 2
    )
    assert "needs a binary" in capsys.readouterr().err


def test_runner_binary_pipeline_and_live_rates():
    from fairlearn.metrics import MetricFrame, selection_rate

    from app.services.demo_data import load_dataset
    from app.services.runner import (
        LabelSpec,
        classifier_rates,
        predictions_table,
        prepare_label,
    )

    df = load_dataset("loanapp")
    lab = prepare_label(df, LabelSpec("approve"))
    assert lab.task == "binary" and (lab.lo, lab.hi) == (0.0, 1.0)
    text = df.assign(ok=np.where(df["approve"] == 1, "yes", "no")).drop(columns="approve")
    with pytest.raises(DataError, match="label 'ok' has the two values 'no', 'yes': choose its positive class"):
        prepare_label(text, LabelSpec("ok"))
    with pytest.raises(DataError, match="not a value"):
        prepare_label(text, LabelSpec("ok", positive="maybe"))
    assert prepare_label(text, LabelSpec("ok", positive="yes")).y.sum() == df["approve"].sum()
    _, run = loanapp_run(max_order=1, n_boot=20)
    assert run.model.task == "binary" and run.audit.task == "binary" and run.settings.n_moments == 1
    assert run.base_metrics == {}  # no RMSE in label units for a 0/1 outcome
    base = run.base[run.split["test"]]
    assert base.min() > 0 and base.max() < 1  # a probability model, not a regression on 0/1
    table = predictions_table(df, run)
    assert table["mmc_mean"].between(0, 1).all() and set(table["mmc_decision"]) <= {0, 1}
    r5, _ = classifier_rates(df, run, 0.5)
    r9, d9 = classifier_rates(df, run, 0.9)
    assert (r5["selection_rate"] >= r9["selection_rate"]).all() and not r5["selection_rate"].equals(
        r9["selection_rate"]
    )
    assert r5["selection_rate"].to_numpy() == pytest.approx(run.audit.by_group["selection_rate"].to_numpy(), abs=1e-12)
    test = run.split["test"]
    pred = (table["mmc_mean"].to_numpy()[test] >= 0.9).astype(int)
    mf = MetricFrame(
        metrics=selection_rate,
        y_true=df["approve"].to_numpy()[test],
        y_pred=pred,
        sensitive_features=df["black"].to_numpy()[test],
    )
    for g, v in mf.by_group.items():
        assert abs(r9.loc[f"black={int(g)}", "selection_rate"] - v) <= 1e-12
    assert "black" in d9.index


def test_dashboard_run_with_positive_class_0_audits_the_labels_once_flipped():
    """The dashboard prepares a classifier's labels as 0/1 with 1 = the chosen positive class. With positive
    class 0 those prepared labels are already flipped, so the audit (which maps the labels it is given through
    the model's positive class) must get the data's own values: the test rows' base rate is P(approve = 0)."""
    from app.services.demo_data import get_dataset, load_dataset
    from app.services.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec, run_pipeline
    from app.ui.export_page import test_inputs

    ds = get_dataset("loanapp")
    df = load_dataset("loanapp")
    gs = GroupSet.from_columns(df, list(ds.groups), 1)
    run = run_pipeline(
        df, LabelSpec("approve", positive=0), BaseSpec("none"), SplitSpec(seed=1), gs.to_json(), FitSettings(n_boot=5)
    )
    assert run.model.binary["positive"] == 0
    test = run.split["test"]
    p0 = float(np.mean(df["approve"].to_numpy()[test] == 0))
    assert run.audit.by_group.loc["all", "base_rate"] == pytest.approx(p0)
    _, y, _ = test_inputs(run, df)  # what the PDF report is built from
    assert audit(run.model, df.iloc[test].reset_index(drop=True), y).by_group.loc["all", "base_rate"] == (
        pytest.approx(p0)
    )


@pytest.mark.slow  # three `mmc` processes (imports dominate)
def test_readme_classifier_commands_run(tmp_path):
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Classifier audits (binary outcomes)", 1)[1].split("\n## ", 1)[0]
    script = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    os.symlink(root / "demo_datasets", tmp_path / "demo_datasets")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert '"task": "binary"' in r.stdout
    pred = pd.read_csv(tmp_path / "loan_pred.csv")
    assert pred["mean"].between(0, 1).all() and set(pred["decision"]) <= {0, 1}
    assert json.loads((tmp_path / "loan_audit.json").read_text())["task"] == "binary"


def test_pdf_report_of_a_binary_model(tmp_path, monkeypatch):
    """The classifier section of the PDF: its tables and the two classifier figures (built by app/figures/binary.py),
    nothing in label units, no interval or variance pages (figures replaced by grey boxes: no browser needed)."""
    import shutil
    import subprocess

    from app.report import pdf as R
    from tests.test_report import stand_in_renderer

    if not shutil.which("pdftotext"):
        pytest.skip("poppler-utils missing")
    rendered = stand_in_renderer(monkeypatch)
    df, y, base = _data(2000, 8)
    gs = GroupSet.from_columns(df, ["race", "sex"], 1)
    est = MomentMulticalibrator(n_buckets=10).fit(
        df.iloc[:1200], y[:1200], gs, base_prediction=base[:1200], label_name="hired"
    )
    new = df.iloc[1200:].reset_index(drop=True)
    new.loc[:4, "race"] = "Q"  # a category new since the fit: the report's Data section says so
    pdf = R.build_report_pdf(
        est.model_,
        new,
        y[1200:],
        base=base[1200:],
        data_name="new.csv",
        threshold=0.4,
    )
    path = tmp_path / "r.pdf"
    path.write_bytes(pdf)
    text = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout
    assert "Classifier audit: hired" in text and "threshold 0.4" in text
    for needle in (
        "Probability calibration by group",
        "Reliability diagrams",
        "Rates at threshold 0.4",
        "Disparities across the values",
        "race=C",
    ):
        assert needle in text, needle
    assert "label units" not in text and "coverage by group" not in text.lower()
    flat = " ".join(text.split())
    assert "5 row(s) have a value of group column 'race' that no group of the model lists (e.g. 'Q')" in flat
    titles = [t.replace("<b>", "").split("</b>")[0] for t in rendered]
    assert titles == ["Reliability by group: observed vs predicted probability", "Rates by group at threshold 0.4"]


@pytest.mark.parametrize("positive, labels", [(0, lambda y: y), (False, lambda y: y.astype(bool))])
def test_audit_of_a_model_whose_positive_class_is_0_reads_the_labels_its_way(positive, labels):
    """Found in an exploratory session: a model fitted with positive class 0 (or False) predicts P(y = 0), but
    the audit read 0/1 labels as they are, i.e. with 1 positive: on the fitting table itself it reported
    'observed 0.799 vs predicted 0.2' for every group. The labels now go through the model's own classes."""
    df, y, _ = _data(4000, 3)
    y = 1 - y  # most rows are 1: the positive class 0 is the rare one
    gs = GroupSet.from_columns(df, ["race", "sex"], 2)
    est = MomentMulticalibrator(positive_label=positive, calibration_fraction=0).fit(df, labels(y), gs)
    assert est.binary_["positive"] == positive
    res = audit(est.model_, df, labels(y))
    overall = res.by_group.loc["all"]
    assert overall["base_rate"] == pytest.approx(float(np.mean(y == 0)))
    # audited on its fitting rows: every (group, bucket) cell's mass-weighted error is at most the achieved
    # alpha, so the whole population's mean error is at most m of them (before the fix: 0.65 vs 0.35)
    bound = est.model_.params.m * est.model_.info["achieved"]["alpha"]
    assert abs(overall["mean_score"] - overall["base_rate"]) <= bound + 1e-12
    assert not [f for f in res.findings if f.get("kind") in ("mean", "calibration")], res.findings
    from mmc_core.auditing.binary import binary_labels

    # a slice holding only the negative class (no events) is audited, not refused
    neg = np.asarray(labels(np.ones(5, dtype=int)))
    assert binary_labels(est.model_, neg).tolist() == [0.0] * 5
    # a value that is neither class is refused, naming the column (a 0/5 column is not this model's 0/1)
    with pytest.raises(DataError, match="label column 'y'"):
        binary_labels(est.model_, np.array([2, 3, 2]), "label column 'y'")
    if positive == 0:
        with pytest.raises(DataError, match="not the model's classes"):
            binary_labels(est.model_, np.array([0, 5, 0]), "label column 'y'")
    # a plain 0/1 model refuses a 1/2-coded column instead of reading 2 as the negative class
    plain = MomentMulticalibrator(calibration_fraction=0).fit(df, y, gs)
    with pytest.raises(DataError, match="must be 0/1"):
        binary_labels(plain.model_, np.array([1, 2, 2, 1]))


def test_cli_audit_of_a_model_with_positive_class_0(tmp_path, capsys):
    """`mmc fit --positive 0` then `mmc audit` on the same table: the audit must read the labels through the
    model's positive class exactly once (before the fix: not at all, 'observed 0.799 vs predicted 0.2')."""
    df, y, _ = _data(3000, 9)
    df["yb"] = 1 - y
    data, model, aud = tmp_path / "d.csv", tmp_path / "m.json", tmp_path / "a.json"
    df.to_csv(data, index=False)
    fit = ["fit", "--data", str(data), "--label", "yb", "--positive", "0", "--group-cols", "race,sex"]
    assert main(fit + ["--calibration-fraction", "0", "--out", str(model)]) == 0
    capsys.readouterr()
    assert main(["audit", "--model", str(model), "--data", str(data), "--label", "yb", "--out", str(aud)]) == 0
    rec = json.loads(aud.read_text())
    bg = pd.DataFrame(**rec["by_group"])
    assert bg.loc["all", "base_rate"] == pytest.approx(float(np.mean(df["yb"] == 0)))
    assert not [f for f in rec["findings"] if f.get("kind") in ("mean", "calibration")], rec["findings"]


def loanapp_run(max_order: int = 1, n_boot: int = 20):
    """(table, run) of the bundled loanapp demo through the app's pipeline: label `approve`, a ridge (logistic)
    base model on three ratios, the demo's groups up to ``max_order``, split seed 1."""
    from app.services.demo_data import get_dataset, load_dataset
    from app.services.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec, run_pipeline

    df = load_dataset("loanapp")
    gs = GroupSet.from_columns(df, list(get_dataset("loanapp").groups), max_order)
    run = run_pipeline(
        df,
        LabelSpec("approve"),
        BaseSpec("model", None, "ridge", ("hrat", "obrat", "loanprc")),
        SplitSpec(seed=1),
        gs.to_json(),
        FitSettings(n_boot=n_boot),
    )
    return df, run

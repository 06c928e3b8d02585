"""Reproducible exports (issue 35): a model fitted in the dashboard on an in-app base model is exported with that
base model (model.zip: model.json + base_model.skops, the skops format, never pickle), and
``mmc predict --model model.json --base-model base_model.skops`` reproduces the dashboard's predictions on new
rows; a tampered or foreign base-model file, or a table without a feature column, is refused with one line. Also:
no export drops a column silently (the interval columns after a classifier table)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.cli.entry import main
from tests.apptest_helpers import new_session as _new
from tests.apptest_helpers import switch as _page
from tests.apptest_helpers import wait_job as _wait_job

DEMO = Path(__file__).resolve().parents[1] / "demo_datasets" / "islp_wage.csv"


def _run_demo(name: str) -> AppTest:
    """A session that loads the demo table ``name`` and runs the audit with the page's defaults."""
    at = _new()
    at.selectbox(key="demo_name").select(name).run()
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait_job(at)
    assert at.session_state["run"] is not None and not at.session_state.get("run_error")
    return at


def _exported(at: AppTest, folder: Path) -> tuple[Path, Path]:
    """Open the Export page, take its model.zip and unzip it into ``folder``: (model.json, base_model.skops)."""
    _page(at, "export")
    assert not at.error, [e.value for e in at.error]
    labels = [b.label for b in at.get("download_button")]
    assert "Download model.zip (model.json + base_model.skops)" in labels, labels
    assert "Download model.json" not in labels  # alone it cannot predict: never offered without its base model
    assert any("--base-model base_model.skops" in c.value for c in at.caption)
    with zipfile.ZipFile(io.BytesIO(at.session_state["export_zip"])) as z:
        assert sorted(z.namelist()) == ["base_model.skops", "model.json"]
        z.extractall(folder)
    return folder / "model.json", folder / "base_model.skops"


def _new_rows(n: int, seed: int) -> pd.DataFrame:
    """Rows no model saw: each column of the demo table resampled on its own, ages and years moved."""
    df = pd.read_csv(DEMO)
    rng = np.random.default_rng(seed)
    out = pd.DataFrame({c: df[c].to_numpy()[rng.integers(0, len(df), n)] for c in df.columns})
    out["age"] = np.clip(out["age"] + rng.integers(-3, 4, n), 18, 80)
    out["year"] = out["year"] + rng.integers(-1, 2, n)
    return out.drop(columns=["wage"])


def _cli(args: list, capsys) -> tuple[int, str]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def _one_line_error(code: int, err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mmc: error: "), (code, err)
    assert "Traceback" not in err
    return lines[0]


def _with_dashboard_variance(table: pd.DataFrame, run, X: pd.DataFrame, feats) -> pd.DataFrame:
    """``table`` with the base variance column the run's model reads, from the base variance model the dashboard
    fitted with its base model (app.services.base_variance; checked to give the run's own base variance on
    ``X``, the run's feature rows); ``table`` itself when the model reads none."""
    from app.services import base_model as bm
    from app.services.base_variance import predict_variance

    if not run.model.init_variance:
        return table
    var = [m for key, (_, m) in bm._BASE_CACHE.items() if len(key) == 6 and m is not None][-1]
    np.testing.assert_array_equal(predict_variance(var["model"], X, var["floor"]), run.base_variance)
    v_new = predict_variance(var["model"], bm._feature_frame(table, feats), var["floor"])
    return table.assign(**{run.model.init_variance["column"]: v_new})


# ---------------------------------------------------------------------------------------------------
def test_round_trip_new_rows_equal_the_dashboards_predictions(tmp_path, monkeypatch, capsys):
    """The issue's judgement: in-app base model -> export -> `mmc predict` on new rows equals the dashboard's
    predictions to 1e-9. The fit runs in the dashboard's own process (MMC_WORKER=thread), so the base model the
    dashboard fitted and used is at hand to predict the new rows with."""
    from app.services import base_model as bm
    from app.services.io import read_table

    monkeypatch.setenv("MMC_WORKER", "thread")
    at = _run_demo("islp_wage")
    run = at.session_state["run"]
    frame = at.session_state["data"]["df"]
    assert run.base_spec.kind == "model" and run.model.uses_base and run.model.task != "binary"
    # the model the dashboard fitted: the cached one whose predictions are the run's base
    feats = [f for f in run.base_spec.features if f != run.label_spec.column]
    X = bm._feature_frame(frame, feats)
    lo, hi = run.label.lo, run.label.hi
    fitted = [
        m
        for key, (pred, m) in list(bm._BASE_CACHE.items())
        if len(key) == 5  # a base model's entry; its base variance's key has the switch on the end
        and m is not None
        and pred.shape == run.base.shape
        and np.array_equal(pred, np.asarray(m.predict(X)))
    ]
    assert fitted, "the dashboard's base model is not in its cache"
    dash_model = fitted[-1]
    assert np.array_equal(np.clip(dash_model.predict(X), lo, hi), run.base)

    model_json, skops_file = _exported(at, tmp_path)
    assert skops_file.read_bytes()[:2] == b"PK"  # a skops (zip) file, not a pickle
    new = _new_rows(500, seed=7)
    new_csv = tmp_path / "new.csv"
    new.to_csv(new_csv, index=False)
    out = tmp_path / "pred.csv"
    code, err = _cli(
        ["predict", "--model", model_json, "--base-model", skops_file, "--data", new_csv, "--out", out], capsys
    )
    assert code == 0, err
    got = pd.read_csv(out)

    # the dashboard's predictions of the same rows: its base model, then its multicalibrated model
    table = read_table(new_csv, run.model.groups.text_columns())
    base_new = np.clip(dash_model.predict(bm._feature_frame(table, feats)), lo, hi)
    table = _with_dashboard_variance(table, run, X, feats)  # the base variance's column, when the model reads it
    want = run.model.predict(table, base_new)
    assert len(got) == len(new)
    for k, v in want.items():
        np.testing.assert_allclose(got[k].to_numpy(), v, rtol=0, atol=1e-9, err_msg=k)

    # the dashboard's own export of its rows agrees too (the predictions.csv of the Export page)
    from app.services.pipeline import predictions_table

    test = run.split["test"]
    rows_csv = tmp_path / "test_rows.csv"
    frame.iloc[test].drop(columns=[run.label_spec.column]).to_csv(rows_csv, index=False)
    out2 = tmp_path / "pred_test.csv"
    code, err = _cli(
        ["predict", "--model", model_json, "--base-model", skops_file, "--data", rows_csv, "--out", out2], capsys
    )
    assert code == 0, err
    page = predictions_table(frame, run, rows=test)
    np.testing.assert_allclose(pd.read_csv(out2)["mean"].to_numpy(), page["mmc_mean"].to_numpy(), rtol=0, atol=1e-9)

    # --pred and --base-model together, and a model.json alone, are refused with one line that says what to pass
    line = _one_line_error(
        *_cli(["predict", "--model", model_json, "--data", new_csv, "--out", tmp_path / "x.csv"], capsys)
    )
    assert "--base-model" in line
    line = _one_line_error(
        *_cli(
            ["predict", "--model", model_json, "--base-model", skops_file, "--pred", "age"]
            + ["--data", new_csv, "--out", tmp_path / "x.csv"],
            capsys,
        )
    )
    assert "not both" in line

    # a missing feature column (not a group column) is named
    group_cols = set(run.model.groups.columns())
    gone = next(f for f in feats if f not in group_cols)
    lacking = tmp_path / "lacking.csv"
    new.drop(columns=[gone]).to_csv(lacking, index=False)
    line = _one_line_error(
        *_cli(["predict", "--model", model_json, "--base-model", skops_file, "--data", lacking, "--out", out], capsys)
    )
    assert f"feature column(s) the base model needs: {gone}" in line
    assert pd.read_csv(out).shape == got.shape  # nothing was written over the earlier output

    # audit takes the base model too (the labelled test rows)
    labelled = tmp_path / "labelled.csv"
    frame.iloc[test].to_csv(labelled, index=False)
    code, err = _cli(
        ["audit", "--model", model_json, "--base-model", skops_file, "--data", labelled]
        + ["--label", run.label_spec.column, "--out", tmp_path / "audit.json"],
        capsys,
    )
    assert code == 0, err
    assert json.loads((tmp_path / "audit.json").read_text())["format"] == "mmc-audit-audit"


def _tampered(skops_bytes: bytes, module: str, name: str) -> bytes:
    """The same file with its top object's type changed in schema.json (what an attacker would edit)."""
    src = zipfile.ZipFile(io.BytesIO(skops_bytes))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item == "schema.json":
                schema = json.loads(data)
                node = schema["content"]["model"] if "content" in schema else schema
                node["__module__"], node["__class__"] = module, name
                data = json.dumps(schema).encode()
            dst.writestr(item, data)
    return buf.getvalue()


def test_foreign_and_tampered_base_model_files_are_refused(tmp_path, capsys):
    """A file that is not a skops file, and skops files holding a type outside the trusted list (an edited one
    naming os.system, and a scikit-learn model skops itself would trust), give one line, exit 2, and nothing of
    them is built."""
    from sklearn.neighbors import KNeighborsRegressor

    from app.services.base_model import fit_base_model
    from app.services.base_model_export import base_model_record, dump_base_model, load_base_model_bytes
    from mmc_core import FittedModel
    from mmc_core.common.errors import DataError

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"x": rng.normal(size=200), "g": rng.choice(["a", "b"], 200).astype(object)})
    y = X["x"].to_numpy() + rng.normal(size=200)
    fitted = fit_base_model(X, y, "ridge", 0)
    good = dump_base_model(
        base_model_record(fitted, X, kind="ridge", label_name="y", log=False, label_range=(-9, 9), seed=0)
    )
    loaded = load_base_model_bytes(good)
    assert loaded.features == ["x", "g"] and loaded.text_features == ["g"]
    np.testing.assert_array_equal(loaded.predict(X), fitted.predict(X))

    # a model fitted with a base prediction, to pass these files to
    from mmc_core import GroupSet, MomentMulticalibrator

    est = MomentMulticalibrator(n_moments=2, random_state=0)
    table = X.assign(y=y)
    est.fit(table, y, GroupSet.from_columns(table, ["g"]), base_prediction=fitted.predict(X), base_name="base_model")
    model_json = tmp_path / "model.json"
    model_json.write_text(est.model_.to_json())
    assert FittedModel.load(str(model_json)).uses_base
    data = tmp_path / "data.csv"
    table.to_csv(data, index=False)

    record = base_model_record(fitted, X, kind="ridge", label_name="y", log=False, label_range=(-9, 9), seed=0)
    record["model"] = KNeighborsRegressor().fit(X[["x"]], y)
    cases = {
        "not_skops.skops": (b"\x80\x04\x95 not a skops file", "is not a base model saved by mmc"),
        "json.skops": (model_json.read_bytes(), "is not a base model saved by mmc"),
        "os_system.skops": (_tampered(good, "os", "system"), "refused without loading: os.system"),
        "knn.skops": (
            dump_base_model(record),
            "refused without loading: sklearn.",
        ),
    }
    for name, (content, says) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(DataError, match="."):
            load_base_model_bytes(content)
        line = _one_line_error(
            *_cli(
                ["predict", "--model", model_json, "--base-model", path, "--data", data, "--out", tmp_path / "o.csv"],
                capsys,
            )
        )
        assert says in line, (name, line)
        assert not (tmp_path / "o.csv").exists()
    # the file that was not tampered with works
    (tmp_path / "good.skops").write_bytes(good)
    code, err = _cli(
        [
            "predict",
            "--model",
            model_json,
            "--base-model",
            tmp_path / "good.skops",
            "--data",
            data,
            "--out",
            tmp_path / "o.csv",
        ],
        capsys,
    )
    assert code == 0, err


def test_export_after_the_worker_process_fitted_the_base_model(tmp_path, capsys):
    """The dashboard's default: the base model is fitted in a worker process, whose model never reaches the
    server; the export fits it again and checks it reproduces the run's base predictions on every row."""
    from app.services.pipeline import predictions_table

    at = _run_demo("islp_wage")
    run = at.session_state["run"]
    frame = at.session_state["data"]["df"]
    model_json, skops_file = _exported(at, tmp_path)
    test = run.split["test"]
    rows_csv = tmp_path / "rows.csv"
    frame.iloc[test].drop(columns=[run.label_spec.column]).to_csv(rows_csv, index=False)
    out = tmp_path / "pred.csv"
    code, err = _cli(
        ["predict", "--model", model_json, "--base-model", skops_file, "--data", rows_csv, "--out", out], capsys
    )
    assert code == 0, err
    page = predictions_table(frame, run, rows=test)
    got = pd.read_csv(out)
    for k in ("mean", "moment_2"):
        np.testing.assert_allclose(got[k].to_numpy(), page[f"mmc_{k}"].to_numpy(), rtol=0, atol=1e-9, err_msg=k)
    # the report takes the base model too
    labelled = tmp_path / "labelled.csv"
    frame.iloc[test].to_csv(labelled, index=False)
    report = tmp_path / "report.html"
    code, err = _cli(
        ["report", "--model", model_json, "--base-model", skops_file, "--data", labelled]
        + ["--label", run.label_spec.column, "--out", report],
        capsys,
    )
    assert code == 0, err
    assert report.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")


def test_no_interval_column_dropped_after_a_classifier_table():
    """Issue 35: after a classifier table the next continuous table's export had an empty interval picker and a
    predictions.csv without the interval columns the page promised."""
    at = _run_demo("loanapp")
    assert at.session_state["run"].model.task == "binary"
    _page(at, "export")
    csv = pd.read_csv(io.StringIO(at.session_state["export_csv"].decode()))
    assert "mmc_decision" in csv.columns and not any(c.startswith("mmc_lower_") for c in csv.columns)
    # a classifier has no interval methods: its export page leaves the analyst's choice of them alone (it emptied
    # it, and a regression run with the same settings then exported no interval columns)
    assert at.session_state["settings"].exp_methods == ["calibrated"]

    _page(at, "data")
    at.selectbox(key="demo_name").select("synthetic_scores").run()
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait_job(at)
    assert at.session_state["run"].model.task != "binary"
    _page(at, "export")
    chosen = at.multiselect(key="exp_methods").value
    assert chosen, "the interval picker is empty after a classifier table"
    csv = pd.read_csv(io.StringIO(at.session_state["export_csv"].decode()))
    for m in chosen:
        assert {f"mmc_lower_{m}", f"mmc_upper_{m}"} <= set(csv.columns), (m, list(csv.columns))
    # every column the caption names is in the file, and none it leaves out is promised
    caption = next(c.value for c in at.caption if "Columns:" in c.value)
    import re

    named = set(re.findall(r"`(mmc_[a-z0-9_]+)`", caption))
    assert named <= set(csv.columns), named - set(csv.columns)

    # with no method chosen, the page says there are no interval columns instead of promising them
    at.multiselect(key="exp_methods").set_value([]).run()
    csv = pd.read_csv(io.StringIO(at.session_state["export_csv"].decode()))
    assert not any(c.startswith("mmc_lower_") for c in csv.columns)
    caption = next(c.value for c in at.caption if "Columns:" in c.value)
    assert "No interval columns" in caption and "mmc_lower_" not in caption

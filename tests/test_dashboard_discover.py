"""Issue 12 item 4 (Discover on the Groups page) and the issue 10/11 leftover (the dashboard fits with the library
defaults), driven with AppTest.

The table has a planted miscalibrated region (``a == "q" and b > 0.5``: the base prediction is 1.5 too low there)
that is not one of the suggested groups (those are the values of ``a`` and ``c``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from tests.apptest_helpers import new_session as _new
from tests.apptest_helpers import ok as _ok
from tests.apptest_helpers import switch as _page
from tests.apptest_helpers import upload


def planted_table(n: int = 3000, seed: int = 0, shift: float = 1.5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.choice(["p", "q", "r"], n)
    b = rng.uniform(0, 1, n).round(3)
    c = rng.choice(["x", "y"], n)
    pred = 10 + 2 * b
    planted = (a == "q") & (b > 0.5)
    y = pred + shift * planted + rng.normal(0, 1, n)
    return pd.DataFrame({"a": a, "b": b, "c": c, "pred": pred.round(4), "y": y.round(4)})


def _upload(at: AppTest, df: pd.DataFrame, name: str = "planted.csv") -> AppTest:
    return upload(at, df, name)


def _texts(at: AppTest) -> str:
    parts = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success"):
        parts += [e.value for e in getattr(at, kind)]
    return "\n".join(parts).replace("\\", "")


def _discover(at: AppTest) -> dict:
    at.button(key="disc_btn").click().run()
    job = at.session_state["disc_job"]
    if job is not None:
        assert job.wait(120), "Discover did not finish"
    at.run()
    _ok(at)
    return at.session_state["disc_last"]


def _rows(df: pd.DataFrame, group: dict) -> np.ndarray:
    from mmc_core import GroupSet

    gs = GroupSet.from_json([group])
    mask = np.zeros(len(df), bool)
    mask[gs.evaluate(df).group_rows(1)] = True
    return mask


def test_discover_finds_the_planted_group_adds_it_and_results_mark_it():
    df = planted_table()
    at = _upload(_new(), df)
    ss = at.session_state
    assert ss["label_col"] == "y" and ss["base_col"] == "pred" and set(ss["disc_features"]) == {"a", "b", "c"}
    _page(at, "groups")
    n_before = len(ss["groups"])
    last = _discover(at)
    assert last["status"] == "done", last["error"]
    res = last["result"]
    planted = ((df["a"] == "q") & (df["b"] > 0.5)).to_numpy()
    jac = [(_rows(df, g) & planted).sum() / (_rows(df, g) | planted).sum() for g in res.groups]
    best = int(np.argmax(jac))
    assert jac[best] >= 0.7 and best < 3, (jac, [g["name"] for g in res.groups])
    g = res.groups[best]
    assert g["kind"] == "mean" and g["mean_residual"] > 0 and g["p_value"] < 0.05 and g["name"].startswith("found: ")
    shown = _texts(at)
    assert "group(s) found" in shown and "prediction too low" in shown and "95% CI" in shown and "adjusted p" in shown
    # one click adds it to the group list, marked as discovered
    at.button(key=f"disc_add_{best}").click().run()
    _ok(at)
    assert len(ss["groups"]) == n_before + 1 and ss["groups"][-1]["name"] == g["name"]
    assert ss["groups"][-1]["kind"] == "mean"
    assert at.button(key=f"disc_add_{best}").disabled  # "Added ✓"
    table = next(d.value for d in at.dataframe if "origin" in d.value.columns)
    assert table.loc[table["group"] == g["name"], "origin"].tolist() == ["discovered"]
    # the recipe carries it (with its kind)
    recipe = json.loads(ss["export_recipe"])
    assert [x.get("kind") for x in recipe["groups"] if x["name"] == g["name"]] == ["mean"]
    # the run calibrates on it and records it as discovered
    _page(at, "run")
    at.button(key="run_btn").click().run()
    job = at.session_state["job"]
    if job is not None:
        assert job.wait(120)
    at.run()
    run = _ok(at).session_state["run"]
    assert g["name"] in run.model.groups.names
    assert [x["name"] for x in run.model.info["discovered_groups"]] == [g["name"]]
    _page(at, "results")
    assert "Discovered groups" in _texts(at)
    disc = next(d.value for d in at.dataframe if "origin" in d.value.columns and "test rows" in d.value.columns)
    assert disc["group"].tolist() == [g["name"]] and disc["origin"].tolist() == ["discovered"]
    # the PDF report names it (the sentence and the row), without building the PDF
    from app.report.text import DISCOVERED_NOTE, data_rows

    rows, notes = data_rows(run.audit, run.model, run.label.y[run.split["test"]], "planted", 0.05)
    assert any(k == "Discovered groups" and g["name"][:40] in v for k, v in rows) and DISCOVERED_NOTE in notes
    # a recipe with the discovered group loads back with it, still discovered
    _page(at, "groups")
    at.text_area(key="grp_paste").input(json.dumps(recipe)).run()
    at.button(key="grp_paste_btn").click().run()
    _ok(at)
    assert [x.get("kind") for x in at.session_state["groups"] if x["name"] == g["name"]] == ["mean"]


def test_discover_nothing_found_and_bad_inputs_give_messages_not_tracebacks():
    df = planted_table(2000, seed=3, shift=0.0)  # the base prediction is right everywhere
    at = _upload(_new(), df)
    _page(at, "groups")
    last = _discover(at)
    assert last["status"] == "done" and last["result"].findings == []
    assert "No group found" in _texts(at) and not any(b.key.startswith("disc_add_") for b in at.button)
    # while Discover runs, the tab shows its progress and a Stop button; Stop ends it, nothing is kept (a job
    # standing still in its 4th region stands in for a long search)
    from app.services.runner import BaseSpec, DiscoverJob, DiscoverSpec, LabelSpec, SplitSpec

    job = DiscoverJob(
        df,
        LabelSpec("y"),
        BaseSpec("column", "pred"),
        SplitSpec(),
        DiscoverSpec(features=("a",)),
        data_key=at.session_state["data"]["key"],
    )
    job.status, job.started_at, job.done, job.total, job.phase = "running", 1.0, 3, 30, "searching mean bucket 2/5"
    at.session_state["disc_job"] = job
    at.run()
    _ok(at)
    bar = list(at.get("progress"))
    assert bar and "region 3 of at most 30" in bar[0].proto.text and at.button(key="disc_btn").disabled
    at.button(key="disc_stop").click().run()
    assert job._stop.is_set()  # the flag the search polls before every tree
    job.status, job.error = "stopped", "stopped by you: nothing was kept"  # what the worker does when it sees it
    job._done.set()
    at.run()
    _ok(at)
    assert at.session_state["disc_job"] is None and "Discover was stopped by you" in _texts(at)
    # no features: a sentence, and the button is off
    at.multiselect(key="disc_features").set_value([]).run()
    _ok(at)
    assert "Choose at least one feature column" in _texts(at) and at.button(key="disc_btn").disabled
    at.multiselect(key="disc_features").set_value(["a", "b"]).run()
    # no base prediction (and no model of this table yet after the switch): a sentence, the button is off
    _page(at, "data")
    at.radio(key="base_kind").set_value("none").run()
    at.session_state["run"] = None
    _page(at, "groups")
    assert "there is no base prediction" in _texts(at) and at.button(key="disc_btn").disabled
    assert "Traceback" not in _texts(at)


def test_discover_job_stops_and_reports_progress():
    from app.services.runner import BaseSpec, DiscoverJob, DiscoverSpec, LabelSpec, SplitSpec

    df = planted_table(1500)
    args = (df, LabelSpec("y"), BaseSpec("column", "pred"), SplitSpec(seed=1), DiscoverSpec(features=("a", "b")))
    job = DiscoverJob(*args)
    job.stop()  # pressed before the first tree: nothing is searched, nothing kept
    job.run_sync()
    assert job.status == "stopped" and job.result is None and job.stop_checks_after_stop >= 1 and job.done == 0
    job = DiscoverJob(*args).run_sync()
    assert job.status == "done" and 0 < job.done <= job.total
    bad = DiscoverJob(df, LabelSpec("y"), BaseSpec("column", "pred"), SplitSpec(), DiscoverSpec(features=("y", "a")))
    assert bad.run_sync().status == "error" and "cannot be a feature" in bad.error


OLD_RECIPE = {
    "format": "mmc-recipe",
    "version": 1,
    "settings": {"p_auto": True, "p_alpha": 0.001, "p_beta": 0.0001, "p_m": 5, "p_k": 2, "p_es": False},
    "groups": [{"name": "a=q", "where": [{"column": "a", "op": "==", "value": "q"}]}],
}


def test_se_is_the_default_and_an_old_recipe_with_the_auto_rule_still_loads():
    at = _new()  # the demo's first audit: the library defaults
    info = at.session_state["run"].model.info
    assert info["alpha_rule"] == "se" and info["beta_rule"] == "se" and info["early_stopping"] is True
    _upload(at, planted_table(1500))
    _page(at, "groups")
    at.text_area(key="grp_paste").input(json.dumps(OLD_RECIPE)).run()
    at.button(key="grp_paste_btn").click().run()
    _ok(at)
    s = at.session_state["settings"]
    assert s.p_auto and s.p_rule == "auto" and not s.p_es  # kept as it was: the recipe repeats its audit
    _page(at, "run")
    assert "previous default" in _texts(at)
    at.button(key="run_btn").click().run()
    job = at.session_state["job"]
    if job is not None:
        assert job.wait(120)
    at.run()
    run = _ok(at).session_state["run"]
    assert run.model.info["alpha_rule"] == "auto" and run.model.info["early_stopping"] is False
    assert run.model.groups.names == ["all", "a=q"]
    # back to the default rule with one click
    at.radio(key="p_rule").set_value("se").run()
    assert _ok(at).session_state["settings"].p_rule == "se" and "per-cell standard-error test" in _texts(at)


def test_run_with_discovery_learns_the_planted_group_and_marks_it():
    """The Run page's "Discover groups during the fit" (mmc fit --discover): learned sets join the groups, the
    Results page and the PDF report mark them."""
    from app.report.text import discovered_groups
    from app.services.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec, run_pipeline
    from app.ui.discover_tab import discovered_names

    df = planted_table(2000)
    # listed groups on c, which the plant (a = q and b > 0.5) does not involve: with a = q listed, the descent
    # corrects that whole group and leaves half the plant's error, with opposite signs, in each half of it, and
    # which half the audit then finds depends on the draw (before 2026-12-05 this seed found the planted half)
    groups = {
        "format": "mmc-groups",
        "version": 1,
        "groups": [{"name": f"c={v}", "where": [{"column": "c", "op": "==", "value": v}]} for v in "xy"],
    }
    run = run_pipeline(
        df,
        LabelSpec("y"),
        BaseSpec("column", "pred"),
        SplitSpec(),
        groups,
        FitSettings(n_boot=0, discover=True, discover_features=("a", "b", "c")),
    )
    learned = run.model.info["learned_sets"]
    assert learned and all(n in run.model.groups.names for n in learned)
    planted = ((df["a"] == "q") & (df["b"] > 0.5)).to_numpy()
    gs = run.model.groups.evaluate(df)
    jac = []
    for n in learned:
        mask = np.zeros(len(df), bool)
        mask[gs.group_rows(run.model.groups.names.index(n))] = True
        jac.append((mask & planted).sum() / (mask | planted).sum())
    assert max(jac) >= 0.7, (learned, jac)
    assert set(discovered_names(run)) == set(learned) == set(discovered_groups(run.model))
    assert run.audit is not None and all(n in run.audit.by_group.index for n in learned)
    bad = FitSettings(n_boot=0, discover=True, discover_features=())
    import pytest

    from mmc_core.common.errors import DataError

    with pytest.raises(DataError, match="needs feature columns"):
        run_pipeline(df, LabelSpec("y"), BaseSpec("column", "pred"), SplitSpec(), groups, bad)

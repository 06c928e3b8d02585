"""The dashboard's Compare page (issue 37): the current run against an earlier run of the session, on the test rows
both held out; the groups that got worse named first."""

from __future__ import annotations

from tests.apptest_helpers import chart_title, plotly_specs, run_uploaded
from tests.apptest_helpers import new_session as _new
from tests.apptest_helpers import switch as _page
from tests.apptest_helpers import wait_job as _wait_job


def test_compare_page_names_the_groups_that_got_worse_first():
    at = _new()  # the first visit ran the demo audit (base prediction: the table's base_pred column)
    at = _page(at, "compare")
    assert any("no earlier run on this table" in i.value for i in at.info)  # says how to get a second one
    assert not at.get("plotly_chart")
    first_model = at.session_state["run"].model.to_json().encode()
    _page(at, "data")
    at.radio(key="base_kind").set_value("none").run()  # the second run starts from the label mean instead
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait_job(at)
    assert at.session_state["run"].base_spec.kind == "none" and len(at.session_state["past_runs"]) == 1
    at = _page(at, "compare")
    assert not at.exception, [e.value for e in at.exception]
    run_1 = at.selectbox(key="cmp_a").value
    assert run_1.startswith("run:") and at.selectbox(key="cmp_b").value == "current"
    headline = next(m.value for m in at.markdown if "is worse than" in m.value or "No group differs" in m.value)
    assert "The current run is worse than Run 1 for" in headline.replace("\\", "")
    findings = next(m.value for m in at.markdown if m.value.startswith("- "))
    lines = [line.replace("\\", "") for line in findings.splitlines()]
    assert lines[0].startswith("- The current run is worse than Run 1 for ")  # worsenings first
    kinds = ["worse" if " is worse than " in line else "better" for line in lines]
    assert kinds == sorted(kinds, key=lambda k: k != "worse")
    assert any("the current run minus Run 1" in chart_title(s) for s in plotly_specs(at))
    table = at.dataframe[0].value
    assert table["finding"].iloc[0] == "worse" and table["B - A"].is_monotonic_decreasing
    assert any("Detectable: the smallest difference" in c.value for c in at.caption)
    at.radio(key="cmp_value").set_value("spread").run()
    assert not at.exception
    assert any("Distance of the spread ratio" in chart_title(s) for s in plotly_specs(at))
    # the sides swapped: the earlier run (with the base prediction) is now better than the current one
    at.selectbox(key="cmp_a").set_value("current").run()
    at.selectbox(key="cmp_b").set_value(run_1).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(m.value.startswith("**Run 1 is better than the current run for") for m in at.markdown)

    # a model file: the first run's model needs the base prediction the current run does not have
    at.file_uploader(key="cmp_upload").set_value(("first.json", first_model, "application/json")).run()
    assert any("fitted on top of a base prediction" in e.value for e in at.error)
    # the current run's own model, uploaded: the same predictions, no group differs
    own = at.session_state["run"].model.to_json().encode()
    at.file_uploader(key="cmp_upload").set_value(("own.json", own, "application/json")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key="cmp_a").value == "upload"
    at.selectbox(key="cmp_b").set_value("current").run()
    text = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert "No group differs between the model in own.json and the current run" in text


def test_compare_page_compares_two_classifier_runs():
    """A 0/1 label (the loanapp demo): the Brier score (as RMSE) and the calibration in the large (mean error)
    are compared; a classifier has no spread or coverage to pick."""
    at = _new()
    at.selectbox(key="demo_name").set_value("loanapp").run()
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait_job(at)
    _page(at, "data")
    at.radio(key="base_kind").set_value("none").run()
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait_job(at)
    assert at.session_state["run"].model.task == "binary"
    at = _page(at, "compare")
    assert not at.exception, [e.value for e in at.exception]
    assert set(at.radio(key="cmp_value").options) <= {"RMSE", "Mean error"}
    text = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert "than Run 1" in text or "No group differs between Run 1 and the current run" in text
    assert at.get("plotly_chart") and at.dataframe


def test_results_over_time_names_a_group_whose_spread_changed():

    from tests.apptest_helpers import run_quarters_world

    at = run_quarters_world()
    at.selectbox(key="res_period").select("quarter").run()
    assert not at.exception, [e.value for e in at.exception]
    text = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert "spread for race=D changed from" in text and "(2026Q1) to" in text
    assert any("by period" in chart_title(s) for s in plotly_specs(at))


def test_results_over_time_names_a_group_whose_positive_rate_changed_for_a_classifier():
    """A 0/1 label whose positives became far more frequent for region=east in the second quarter: Results' Over
    time names east's change of selection rate first, offers the rates' trend charts, follows the rates tab's
    threshold, and its HTML report carries the section."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(4)
    n = 4000
    df = pd.DataFrame({"region": rng.choice(["north", "south", "east"], n), "x": rng.normal(size=n)})
    df["quarter"] = np.array(["2026Q1", "2026Q2"])[rng.integers(0, 2, n)]
    late = ((df["quarter"] == "2026Q2") & (df["region"] == "east")).to_numpy()
    p = 1 / (1 + np.exp(-(df["x"].to_numpy() + np.where(late, 2.0, 0.0))))
    df["hired"] = (rng.random(n) < p).astype(int)
    at = _page(run_uploaded(df, "hires.csv", "hired"), "results")
    assert at.session_state["run"].model.task == "binary"
    at.selectbox(key="res_period").select("quarter").run()
    assert not at.exception, [e.value for e in at.exception]
    changes = next(m.value for m in at.markdown if "changed from" in m.value).replace("\\", "")
    assert changes.startswith("- The model's selection rate for region=east changed from"), changes
    assert "(2026Q1) to" in changes  # east first, the surest (quarter is a group too: other rates may move)
    values = at.radio(key="res_period_value").options
    assert values[:3] == [
        "Selection rate (share decided positive)",
        "True positive rate (positives decided positive)",
        "False positive rate (negatives decided positive)",
    ]
    assert any("Selection rate (share decided positive) by period" in chart_title(s) for s in plotly_specs(at))
    assert any(b.proto.label == "Report with Over time (HTML)" for b in at.get("download_button"))
    at.slider(key="res_threshold").set_value(0.7).run()  # the rates tab's threshold: the period rates follow it
    assert not at.exception, [e.value for e in at.exception]
    assert any("decision threshold 0.7 " in c.value for c in at.caption)
    (res,) = at.session_state["_period_memo"].values()
    assert res.params["threshold"] == 0.7
    from app.ui.results_over_time import _period_report

    run, frame = at.session_state["run"], at.session_state["data"]["df"]
    page = _period_report("html", "classifier at 0.7", "quarter", "", "", run, frame, res).decode()  # own key
    section = page[page.index("<h2>Over time: quarter</h2>") :]
    assert "decision threshold 0.7" in section and "<td>region=east</td>" in section


def test_group_names_with_markdown_are_shown_literally_on_every_page():
    """Issue 35: a group named with markdown link or image syntax became a live link. After a run on a table
    whose values carry both, no page's markdown holds an unescaped link, image or tag."""
    import re

    import numpy as np
    import pandas as pd

    from mmc_core.common.synthetic import demo_distribution

    df = pd.DataFrame(demo_distribution().sample_table(3000, np.random.default_rng(5))).drop(
        columns=["true_mean", "true_var", "true_m3", "true_m4"]
    )
    df["race"] = df["race"].replace({"A": "[x](http://203.0.113.9/a)", "B": "![i](http://203.0.113.9/p.png)"})
    at = run_uploaded(df, "evil.csv", "outcome")
    rendered = []
    for page in ("results", "export", "compare", "groups", "run"):
        _page(at, page)
        rendered += [
            e.value
            for kind in ("markdown", "caption", "error", "warning", "info", "success")
            for e in getattr(at, kind)
        ]
    assert any("203.0.113.9" in t for t in rendered)  # the names are shown ...
    for text in rendered:
        assert not re.search(r"(?<!\\)\]\(", text), text  # ... but never as a link or an image
        assert not re.search(r"(?<!\\)<(img|a|script)\b", text), text


def test_a_new_table_starts_from_the_default_settings():
    """Issue 35: buckets, the base model kind and 'discover during the fit' followed the analyst to the next
    table."""
    import numpy as np
    import pandas as pd

    from mmc_core.common.synthetic import demo_distribution

    at = _new()
    _page(at, "run")
    at.toggle(key="p_auto").set_value(False).run()
    at.slider(key="p_m").set_value(9).run()
    assert at.session_state["settings"].p_m == 9
    df = pd.DataFrame(demo_distribution().sample_table(800, np.random.default_rng(9))).drop(
        columns=["true_mean", "true_var", "true_m3", "true_m4"]
    )
    _page(at, "data")
    at.radio(key="src_kind").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value(("next.csv", df.to_csv(index=False).encode(), "text/csv")).run()
    s = at.session_state["settings"]
    assert s.p_m == 5 and s.p_auto is True and s.p_disc is False


def test_a_skewed_label_gets_quantile_buckets_by_default():
    import numpy as np

    from app.services.specs import mean_bucket_rule

    rng = np.random.default_rng(0)
    assert mean_bucket_rule("auto", rng.lognormal(10, 1, 5000)) == "quantile"  # wages: skewed
    assert mean_bucket_rule("auto", rng.normal(50, 10, 5000)) == "uniform"
    assert mean_bucket_rule("uniform", rng.lognormal(10, 1, 5000)) == "uniform"  # the analyst's choice stands
    at = _page(_new(), "run")
    assert any("For this label (skewness" in c.value for c in at.caption)
    run = at.session_state["run"]  # the demo audit's fit used the rule's choice for its label
    assert run.model.info["mean_buckets"] == mean_bucket_rule("auto", run.label.y)

"""The dashboard's Compare page (issue 37): the current run against an earlier run of the session, on the test rows
both held out; the groups that got worse named first."""

from __future__ import annotations

from tests.test_dashboard import _new, _page, _plotly_specs, _title, _wait_job


def test_compare_page_names_the_groups_that_got_worse_first():
    at = _new()  # the first visit ran the demo audit (base prediction: the table's base_pred column)
    at = _page(at, "compare")
    assert any("no earlier run on this table" in i.value for i in at.info)
    _page(at, "data")
    at.radio(key="base_kind").set_value("none").run()  # the second run starts from the label mean instead
    _page(at, "run")
    at.button(key="run_btn").click().run()
    _wait_job(at)
    assert at.session_state["run"].base_spec.kind == "none" and len(at.session_state["past_runs"]) == 1
    at = _page(at, "compare")
    assert not at.exception, [e.value for e in at.exception]
    headline = next(m.value for m in at.markdown if "is worse than" in m.value or "No group differs" in m.value)
    assert "The current run is worse than run 1 for" in headline.replace("\\", "")
    findings = next(m.value for m in at.markdown if m.value.startswith("- "))
    first = findings.splitlines()[0].replace("\\", "")
    assert first.startswith("- The current run is worse than run 1 for ")  # worsenings first
    assert any("the current run minus run 1" in _title(s) for s in _plotly_specs(at))
    at.radio(key="cmp_value").set_value("spread").run()
    assert not at.exception
    assert any("Distance of the spread ratio" in _title(s) for s in _plotly_specs(at))

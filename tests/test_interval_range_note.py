"""Intervals that reach past the label's observed range are said, not cut (new labels may leave that range), by
`mmc predict --interval`, `mmc audit` and the reports; a declared range clips the ends and says nothing (issue 35)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.cli import entry as cli


@pytest.fixture(scope="module")
def hours(tmp_path_factory):
    d = tmp_path_factory.mktemp("hours")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 2000)})
    df["hours"] = np.abs(rng.standard_normal(2000)) * np.where(df["g"] == "a", 100.0, 900.0)  # >= 0, skewed
    df.to_csv(d / "h.csv", index=False)
    for name, extra in (("observed", []), ("declared", ["--label-range", f"0,{df['hours'].max() + 1}"])):
        fit = ["fit", "--data", str(d / "h.csv"), "--label", "hours", "--group-cols", "g", *extra]
        assert cli.main([*fit, "--out", str(d / f"{name}.json")]) == 0
    return d


@pytest.mark.parametrize("command", ["predict", "audit"])
def test_ends_past_an_observed_range_are_said_once(hours, command, capsys):
    d = hours
    for name in ("observed", "declared"):
        capsys.readouterr()
        args = [command, "--model", str(d / f"{name}.json"), "--data", str(d / "h.csv"), "--out", str(d / "o")]
        args += ["--interval", "calibrated"] if command == "predict" else ["--label", "hours"]
        assert cli.main(args) == 0
        notes = [ln for ln in capsys.readouterr().err.splitlines() if "beyond the label's observed range" in ln]
        if name == "declared":
            assert notes == []
            continue
        assert len(notes) == 1 and "of the lower ends below" in notes[0] and "--label-range" in notes[0]
        if command == "predict":
            lower = pd.read_csv(d / "o")["lower"].to_numpy()
            share = float(np.mean(lower < pd.read_csv(d / "h.csv")["hours"].min()))
            assert f"{share:.0%} of the lower ends" in notes[0]


def _heatmap_script():
    from types import SimpleNamespace

    import pandas as pd
    import streamlit as st

    from app.ui.results_page import heatmap_groups

    names = ["all"] + [f"g={i}" for i in range(99)]
    audit = SimpleNamespace(
        coverage=pd.DataFrame({"calibrated": 0.9}, index=names),
        findings=[{"group": "g=77"}],
        classifier=None,
        scorecard=None,
    )
    st.session_state["shown"] = heatmap_groups(audit)
    small = SimpleNamespace(coverage=pd.DataFrame({"calibrated": 0.9}, index=names[:40]), findings=[])
    st.session_state["small"] = heatmap_groups(small)


def test_long_heatmaps_come_in_pages_with_a_filter_findings_first():
    """The Coverage tab's heatmaps past 40 groups (issue 35): pages of at most 40, the group with a finding on
    the first, every group on some page, and a name filter."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_heatmap_script)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["small"] is None  # 40 groups: one figure, no picker
    first = at.session_state["shown"]
    assert first[0] == "g=77" and len(first) <= 40
    pages = at.selectbox(key="res_heat_page").options
    seen = []
    for label in pages:
        at.selectbox(key="res_heat_page").select(label).run()
        seen += list(at.session_state["shown"])
    assert sorted(seen) == sorted(["all"] + [f"g={i}" for i in range(99)]) and len(pages) == 3
    at.text_input(key="res_heat_filter").input("G=1").run()
    assert set(at.session_state["shown"]) == {"g=1"} | {f"g={i}" for i in range(10, 20)}
    at.text_input(key="res_heat_filter").input("nothing like it").run()
    assert at.session_state["shown"] == () and at.warning

"""Issue 35: every group with a finding is on every group chart, also when there are more of them than a chart's
room. Found in a browser on a table new to the tests (tests/data/crime1_arrests.csv, arrested in 1986 or not): ten
groups had findings, the reliability diagrams have room for "all" and 8 more, and "black=1 & born60=1" (6% of the
rows, under-predicted by 0.15) and "born60=0 & hispan=1" were left off. The classifier charts now take the findings'
groups whatever their room (``always``); the other groups still fill the room up to ``top``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

DATA = Path(__file__).resolve().parent / "data"


def _audit():
    from app.services.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec, run_pipeline
    from mmc_core import GroupSet

    df = pd.read_csv(DATA / "crime1_arrests.csv")
    groups = GroupSet.from_columns(df, ["black", "hispan", "born60"], 2)
    features = tuple(c for c in df.columns if c not in ("arr86", "black", "hispan"))
    run = run_pipeline(
        df,
        LabelSpec("arr86"),
        BaseSpec("model", None, "hgb", features),
        SplitSpec(test=0.6, base=0.3, seed=0),
        groups.to_json(),
        FitSettings(n_boot=20),
    )
    return run.audit


def test_every_group_with_a_finding_is_on_the_classifier_charts():
    from app.figures import binary as FB
    from app.report.tables import priority_groups

    audit = _audit()
    found = FB.finding_groups(audit)
    first = priority_groups(audit)
    assert len(found) > 9, found  # more than the reliability diagrams' room of 9 panels

    def panels(fig):
        return [a.text for a in fig.layout.annotations]

    rel = FB.reliability_figure(audit.calibration_cells, audit.by_group, first=first, always=found)
    assert set(found) <= set(panels(rel)), set(found) - set(panels(rel))
    assert panels(rel)[0] == "all"
    before = FB.reliability_figure(audit.calibration_cells, audit.by_group, first=first)
    assert not set(found) <= set(panels(before))  # the room alone left some out

    def rows(fig):
        return [str(t).replace(" †", "") for t in fig.layout.yaxis.ticktext]

    rates = FB.rate_figure(audit.by_group, 0.5, top=4, first=first, always=found)
    assert set(found) <= set(rows(rates)), set(found) - set(rows(rates))
    # with room to spare the largest groups still fill it; without findings nothing changes
    wide = rows(FB.rate_figure(audit.by_group, 0.5, top=len(found) + 3, first=first, always=found))
    assert len(wide) == len(found) + 3 and set(found) <= set(wide)
    largest = rows(FB.rate_figure(audit.by_group, 0.5, top=6))
    assert len(largest) == 6 and largest == rows(FB.rate_figure(audit.by_group, 0.5, top=6, always=()))

"""Issue 35: every group with a finding is on every group chart. The regression charts with room for some groups
(variance disparities: 30 on Results, 20 in the PDF; mean calibration: 20) put the findings' groups first but cut
at their room, so a table with more groups with findings than that lost some. On a real dollar label new to the
tests (tests/data/fringe_annearn.csv) 17 of 33 groups had findings (8 since the variance test allows for the tail
pooled over the rows: the label's skewness is 5); the charts now grow to hold them all."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

DATA = Path(__file__).resolve().parent / "data"


def test_every_group_with_a_finding_is_on_the_regression_charts():
    from app.figures import charts as F
    from app.figures.binary import finding_groups
    from app.services.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec, run_pipeline
    from mmc_core import GroupSet

    df = pd.read_csv(DATA / "fringe_annearn.csv")
    groups = GroupSet.from_columns(df, ["male", "white", "union", "married"], 2)
    features = tuple(c for c in df.columns if c not in ("annearn", "male", "white"))
    run = run_pipeline(
        df,
        LabelSpec("annearn"),
        BaseSpec("model", None, "hgb", features),
        SplitSpec(test=0.6, base=0.3, seed=0),
        groups.to_json(),
        FitSettings(n_boot=20),
    )
    found = set(finding_groups(run.audit))
    assert len(found) > 4, found
    names = dict(label="annearn", units="USD")

    def rows(fig):
        return {str(t).replace(" †", "") for t in fig.layout.yaxis.ticktext}

    var = F.variance_disparity_figure(run.audit, top=4, **names)
    assert found <= rows(var), found - rows(var)
    cal = F.calibration_before_after_figure(run.audit, top=4, **names)
    shown = {str(t).replace(" †", "") for tr in cal.data for t in (tr.y if tr.y is not None else ())}
    assert len(rows(var)) == len(found) and found <= shown, found - shown
    # with room to spare nothing changes: the room is filled as before
    assert len(rows(F.variance_disparity_figure(run.audit, top=len(found) + 4, **names))) == len(found) + 4

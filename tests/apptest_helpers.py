"""One way to drive the dashboard in Streamlit's AppTest, shared by the dashboard tests: a new session, a page
switch, and waiting for the fit a click started (each checks that the page raised nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app" / "dashboard.py")


def ok(at: AppTest) -> AppTest:
    """``at``, once it is checked that its last run raised nothing."""
    assert not at.exception, [e.value for e in at.exception]
    return at


def new_session() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)  # a ceiling per script run: a loaded machine is slow
    at.run()
    return ok(at)


def switch(at: AppTest, name: str) -> AppTest:
    at.switch_page(f"ui/{name}_page.py").run()
    return ok(at)


def upload(at: AppTest, df, name: str = "table.csv") -> AppTest:
    """The Data page's upload of ``df`` as a CSV file called ``name``."""
    at.radio(key="src_kind").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value((name, df.to_csv(index=False).encode(), "text/csv")).run()
    return ok(at)


def wait_job(at: AppTest, timeout: float = 120) -> AppTest:
    job = at.session_state["job"]
    if job is not None:
        assert job.wait(timeout), "the fit did not finish"
    at.run()
    return at


def run_quarters_world() -> AppTest:
    """A session on the Results page after a run on 6,000 rows of the demo distribution with a column
    ``quarter`` (2026Q1 / 2026Q2) in which race D's labels are far noisier in the second quarter (sd 25 added)."""
    import numpy as np
    import pandas as pd

    from mmc_core.common.synthetic import demo_distribution

    df = pd.DataFrame(demo_distribution().sample_table(6000, np.random.default_rng(2))).drop(
        columns=["true_mean", "true_var", "true_m3", "true_m4"]
    )
    rng = np.random.default_rng(3)
    df["quarter"] = np.array(["2026Q1", "2026Q2"])[rng.integers(0, 2, len(df))]
    late_d = (df["quarter"] == "2026Q2") & (df["race"] == "D")
    df.loc[late_d, "outcome"] += rng.normal(0, 25, int(late_d.sum()))
    return switch(run_uploaded(df, "q.csv", "outcome"), "results")


def run_uploaded(df, name: str, label: str) -> AppTest:
    """A new session that uploads ``df`` as the CSV file ``name``, picks ``label`` and runs the audit with the
    page's defaults (left on the Run page, the fit finished)."""
    at = new_session()
    at.radio(key="src_kind").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value((name, df.to_csv(index=False).encode(), "text/csv")).run()
    at.selectbox(key="label_col").select(label).run()
    switch(at, "run")
    at.button(key="run_btn").click().run()
    wait_job(at)
    return at


def plotly_specs(at: AppTest) -> list:
    """The Plotly figures of the page, as dicts."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def chart_title(spec) -> str:
    t = spec["layout"].get("title", {})
    return t.get("text", "") if isinstance(t, dict) else str(t)

"""Peak memory of the dashboard when two analysts run the largest upload at once (issue 38: under 2 GB).

Two Streamlit sessions (AppTest, in this process, which plays the server) upload the same Parquet file of
3,000,000 rows x 4 numeric columns (6.7 MB; 96 MB decoded: the largest table the upload limits accept), define
the 5 groups race = 0..4 (the most (row, group) memberships the run's checks accept on it) and press Run one
after the other. The resident memory of this process and of its children (the fork server and the runs' worker
processes; summed, so pages shared after a fork count twice) is sampled every 0.1 s.

    PYTHONPATH=. .venv/bin/python benchmarks/dashboard_two_runs_memory.py              # with the run budget
    MMC_SERVER_RUN_MB=100000 PYTHONPATH=. .venv/bin/python benchmarks/dashboard_two_runs_memory.py   # without
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from apptest_helpers import new_session, switch

ROWS = 3_000_000


def table_bytes() -> bytes:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 100, ROWS).astype(float)
    df = pd.DataFrame(
        {
            "outcome": y,
            "base_pred": np.clip(y + rng.integers(-5, 6, ROWS), 0, 99).astype(float),
            "sex": rng.integers(0, 2, ROWS).astype(float),
            "race": rng.integers(0, 5, ROWS).astype(float),
        }
    )
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.parquet")
        df.to_parquet(path, index=False, compression="zstd")
        return Path(path).read_bytes()


def main() -> None:
    data = table_bytes()
    me = psutil.Process()
    peak = {"total": 0, "server": 0, "children": 0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                srv = me.memory_info().rss
                kids = 0
                for k in me.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        kids += k.memory_info().rss
                peak["total"] = max(peak["total"], srv + kids)
                peak["server"] = max(peak["server"], srv)
                peak["children"] = max(peak["children"], kids)
            except psutil.Error:
                pass
            time.sleep(0.1)

    threading.Thread(target=sample, daemon=True).start()
    sessions = []
    for _ in range(2):
        at = new_session()
        at.default_timeout = 600
        at.radio(key="src_kind").set_value("Upload a file").run()
        at.file_uploader(key="upload").set_value(("big.parquet", data, "application/octet-stream")).run()
        at.session_state["groups"] = [
            {"name": f"race={v}", "where": [{"column": "race", "op": "==", "value": float(v)}]} for v in range(5)
        ]
        switch(at, "run")
        sessions.append(at)
    jobs = []
    for at in sessions:
        at.button(key="run_btn").click().run()
        jobs.append(at.session_state["job"])
    waited = [False] * len(jobs)
    while any(j is not None and j.running for j in jobs):
        for i, j in enumerate(jobs):
            waited[i] = waited[i] or (j is not None and j.phase.startswith("waiting for another analyst"))
        time.sleep(0.2)
    done.set()
    print(
        json.dumps(
            {
                "peak_mb": {k: round(v / 1e6) for k, v in peak.items()},
                "runs": [j.status if j is not None else None for j in jobs],
                "waited": waited,
                "MMC_SERVER_RUN_MB": os.environ.get("MMC_SERVER_RUN_MB", "default"),
            }
        )
    )


if __name__ == "__main__":
    main()

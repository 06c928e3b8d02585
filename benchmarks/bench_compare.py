"""Comparing two models on Dask against auditing one (issue 37: "on 10M rows the comparison runs within 2x the
time of one audit"). One command, prints a table:

    python benchmarks/bench_compare.py                      # 10M rows, 200 groups, 2 workers
    python benchmarks/bench_compare.py --rows 2000000       # a quicker look

Data: benchmarks/bench_dask.py's generator (partitioned Parquet, 5 columns x 40 values = 200 groups, a base
prediction and a heteroscedastic label). Two models are fitted in memory on a 200,000-row sample (one on the
base prediction, one without), then on the whole table with a LocalCluster: ``mmc audit``'s reductions
(audit_tables_dask) of model A, and the paired comparison of A and B (compare_dask). Times are wall-clock
seconds of the reductions, the cluster already running.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_dask import generate, groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--file-rows", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="6GB")
    ap.add_argument("--path", default="/tmp/mmc_bench_compare")
    a = ap.parse_args()

    import dask.dataframe as dd
    import pandas as pd

    from mmc_core import MomentMulticalibrator
    from mmc_core.engines.dask_engine import audit_tables_dask, close_client, compare_dask, start_client

    generate(a.path, a.rows, a.file_rows)
    files = sorted(f for f in os.listdir(a.path) if f.endswith(".parquet"))
    sample = pd.read_parquet(os.path.join(a.path, files[0])).iloc[:200_000]
    gs = groups()
    with_base = MomentMulticalibrator(n_moments=2, random_state=0).fit(
        sample, sample["y"], gs, base_prediction=sample["base"]
    )
    plain = MomentMulticalibrator(n_moments=2, random_state=0).fit(sample, sample["y"], gs)
    client, cluster = start_client(None, a.workers, a.memory_limit)
    try:
        ddf = dd.read_parquet(os.path.join(a.path, "*.parquet"))
        t = time.perf_counter()
        audit_tables_dask(with_base.model_, ddf, "y", "base")
        audit_s = time.perf_counter() - t
        t = time.perf_counter()
        res = compare_dask(ddf, "y", [("model", with_base.model_, "A"), ("model", plain.model_, "B")], gs, "base")
        compare_s = time.perf_counter() - t
    finally:
        close_client(client, cluster)
    print("| rows | groups | workers | audit (s) | compare (s) | ratio | findings |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {a.rows:,} | {len(gs) - 1} | {a.workers} | {audit_s:.1f} | {compare_s:.1f} | "
        f"{compare_s / audit_s:.2f} | {len(res.findings)} |"
    )


if __name__ == "__main__":
    main()

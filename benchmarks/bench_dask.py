"""The Dask engine at scale against the numpy engine (issue 14). One command, prints a table:

    python benchmarks/bench_dask.py                                   # 10M rows Dask + 10M rows numpy (k = 2)
    python benchmarks/bench_dask.py --rows 100000000 --numpy-rows 10000000   # the issue's full size
    python benchmarks/bench_dask.py --rows 10000000 --skip-dask --numpy-moments 4   # numpy, 10M x 200 x k=4

Data: partitioned Parquet written in chunks of ``--file-rows`` rows (never all rows in memory): 5 integer
columns of 40 values each define 200 groups (+ the whole population), a base prediction and a
heteroscedastic label. Dask: a LocalCluster of ``--workers`` processes with ``--memory-limit`` each; peak
memory per worker is each worker process's maximum RSS. numpy: a child process reads every file into pandas
and fits in memory; its peak is the child's maximum RSS. Seconds per row = fit seconds / rows (the descent
only, without reading the data; the load and setup passes are reported separately for Dask).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

COLS, VALUES = 5, 40


def generate(path, rows, file_rows, seed=0):
    import pandas as pd

    os.makedirs(path, exist_ok=True)
    stamp = os.path.join(path, f"_rows_{rows}_{file_rows}_{seed}")
    if os.path.exists(stamp):
        return
    for f in os.listdir(path):
        os.remove(os.path.join(path, f))
    rng = np.random.default_rng(seed)
    eff = rng.normal(0, 0.15, (COLS, VALUES))
    sd_eff = rng.uniform(0.6, 1.4, VALUES)
    for i, start in enumerate(range(0, rows, file_rows)):
        n = min(file_rows, rows - start)
        g = rng.integers(0, VALUES, (n, COLS), dtype=np.int16)
        mean = 1.0 + eff[np.arange(COLS), g].sum(axis=1)
        df = pd.DataFrame({f"c{j}": g[:, j] for j in range(COLS)})
        df["base"] = 1.0 + eff[np.arange(3), g[:, :3]].sum(axis=1)  # the base misses c3, c4
        df["y"] = np.clip(mean + rng.normal(0, 0.5, n) * sd_eff[g[:, 0]], -3, 5)
        df.to_parquet(os.path.join(path, f"part-{i:05d}.parquet"), index=False)
    open(stamp, "w").close()


def groups():
    from mmc_core.groups.group_set import Condition, Group, GroupSet

    return GroupSet(
        [Group(f"c{j}={v}", (Condition(f"c{j}", "==", value=v),)) for j in range(COLS) for v in range(VALUES)]
    )


def _est(k, max_rounds, threshold=None):
    from mmc_core import MomentMulticalibrator

    t = "se" if threshold is None else threshold
    return MomentMulticalibrator(n_moments=k, label_range=(-3, 5), max_rounds=max_rounds, alpha=t, beta=t)


def run_numpy(path, rows, k, max_rounds, threshold=None):
    """In a child process: read every file, fit in memory; prints one JSON line."""
    import glob

    import pandas as pd

    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    t0 = time.perf_counter()
    frames, have = [], 0
    for f in files:  # only the files the first `rows` rows are in (a 100M-row directory holds far more)
        if have >= rows:
            break
        frames.append(pd.read_parquet(f))
        have += len(frames[-1])
    df = pd.concat(frames, ignore_index=True).iloc[:rows]
    del frames
    load = time.perf_counter() - t0
    est = _est(k, max_rounds, threshold).fit(
        df, df["y"].to_numpy(), groups(), base_prediction=df["base"].to_numpy(), base_name="base"
    )
    info = est.model_.info
    print(
        json.dumps(
            {
                "engine": "numpy",
                "rows": len(df),
                "k": k,
                "fit_s": info["seconds"],
                "load_s": load,
                "rounds": info["rounds"],
                "updates": info["mean_updates"] + info["moment_updates"],
                "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                "workers": 1,
            }
        )
    )


def run_dask(path, k, workers, memory_limit, max_rounds, threshold=None):
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit, dashboard_address=None
    )
    client = Client(cluster)
    try:
        ddf = dd.read_parquet(os.path.join(path, "*.parquet"))
        t0 = time.perf_counter()
        est = _est(k, max_rounds, threshold)
        est.fit(
            ddf,
            "y",
            groups(),
            base_prediction="base",
            engine="dask",
            client=client,
            callback=lambda row: (
                print(f"  dask round {row['round']}: {row['seconds']:.0f} s", file=sys.stderr, flush=True) and False
            ),
        )
        total = time.perf_counter() - t0
        info = est.model_.info
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
        return {
            "engine": "dask",
            "rows": info["n_rows"],
            "k": k,
            "fit_s": info["seconds"],
            "load_s": total - info["seconds"],
            "rounds": info["rounds"],
            "updates": info["mean_updates"] + info["moment_updates"],
            "peak_gb": max(peaks.values()),
            "workers": workers,
            "partitions": info["engine"]["partitions"],
        }
    finally:
        client.close()
        cluster.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows for the Dask engine (default 10M)")
    ap.add_argument("--numpy-rows", type=int, default=None, help="rows for the numpy engine (default min(rows, 10M))")
    ap.add_argument("--moments", type=int, default=2, help="k for the Dask run (default 2)")
    ap.add_argument("--numpy-moments", type=int, default=None, help="k for the numpy run (default --moments)")
    ap.add_argument("--file-rows", type=int, default=1_000_000, help="rows per Parquet file (default 1M)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="6GB")
    ap.add_argument("--max-rounds", type=int, default=None, help="cap on mean rounds (both engines)")
    ap.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="fixed alpha = beta for both engines (default: the 'se' rule, whose thresholds shrink as 1/sqrt(rows),"
        " so a larger table gets more updates)",
    )
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "mmc_bench_dask"))
    ap.add_argument("--skip-numpy", action="store_true")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--numpy-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    k_np = a.numpy_moments or a.moments
    n_np = a.numpy_rows or min(a.rows, 10_000_000)
    if a.numpy_child:
        return run_numpy(a.dir, n_np, k_np, a.max_rounds, a.threshold)
    t0 = time.perf_counter()
    generate(a.dir, max(a.rows, n_np), a.file_rows)
    print(f"data: {a.dir} ({max(a.rows, n_np):,} rows, {time.perf_counter() - t0:.0f} s to generate)", file=sys.stderr)
    results = []
    if not a.skip_numpy:
        cmd = [
            sys.executable,
            __file__,
            "--numpy-child",
            "--dir",
            a.dir,
            "--rows",
            str(a.rows),
            "--numpy-rows",
            str(n_np),
            "--numpy-moments",
            str(k_np),
        ] + (["--max-rounds", str(a.max_rounds)] if a.max_rounds else [])
        cmd += ["--threshold", repr(a.threshold)] if a.threshold is not None else []
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            results.append({"engine": "numpy", "rows": n_np, "k": k_np, "error": out.stderr.strip().splitlines()[-1:]})
        else:
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    if not a.skip_dask:
        if a.rows != max(a.rows, n_np):
            print("note: the Dask run reads every file in --dir", file=sys.stderr)
        results.append(run_dask(a.dir, a.moments, a.workers, a.memory_limit, a.max_rounds, a.threshold))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    ref = next((r for r in results if r["engine"] == "numpy" and "error" not in r), None)
    print(
        f"{'engine':7} {'rows':>12} {'groups':>6} {'k':>2} {'fit s':>8} {'setup s':>8} {'rounds':>6} "
        f"{'updates':>8} {'peak GB/proc':>12} {'us/row':>8} {'vs numpy':>8}"
    )
    for r in results:
        if "error" in r:
            print(f"{r['engine']:7} {r['rows']:>12,} {len(groups()):>6} {r['k']:>2}  failed: {r['error']}")
            continue
        per = r["fit_s"] / r["rows"]
        rel = per / (ref["fit_s"] / ref["rows"]) if ref else float("nan")
        print(
            f"{r['engine']:7} {r['rows']:>12,} {len(groups()):>6} {r['k']:>2} {r['fit_s']:>8.1f} {r['load_s']:>8.1f} "
            f"{r['rounds']:>6} {r['updates']:>8} {r['peak_gb']:>12.2f} {per * 1e6:>8.3f} {rel:>8.2f}"
        )


if __name__ == "__main__":
    main()

"""Smoke test of the benchmark script: `benchmarks/bench_core.py --quick` runs and prints its tables."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_core.py"

GRID_HEADER = (
    "| n | groups | k | step | alpha | beta | fit s | fit() wall s | rounds | mean upd | moment upd | log "
    "| converged | peak MB (fit) | predict s | peak MB (all) |"
)


def _has_multicalibration() -> bool:
    try:
        import multicalibration  # noqa: F401
    except ImportError:
        return False
    return True


def test_bench_core_quick(tmp_path):
    out_csv = tmp_path / "quick.csv"
    t0 = time.perf_counter()
    # One BLAS thread: on a loaded machine multi-threaded OpenBLAS makes the tiny per-update matrix
    # products of the signature sums many times slower (see benchmarks/README.md).
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--blas-threads", "1", "--out", str(out_csv)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    lines = out.splitlines()
    assert GRID_HEADER in lines, out
    start = lines.index(GRID_HEADER)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    # quick grid: n = 2000 x |G| in {20, 200} x k in {1, 2} x step in {exact, paper}
    assert len(rows) == 8, out
    ncol = len(GRID_HEADER.strip("|").split("|"))
    for r in rows:
        assert len(r) == ncol, r
        assert r[0] == "2,000" and r[1] in ("20", "200") and r[3] in ("exact", "paper"), r
        assert r[12] == "yes", f"not converged: {r}"
        assert float(r[6]) >= 0 and float(r[13]) > 0 and float(r[14]) >= 0, r
    assert {(r[1], r[2], r[3]) for r in rows} == {
        (g, k, s) for g in ("20", "200") for k in ("1", "2") for s in ("exact", "paper")
    }
    assert out_csv.exists() and out_csv.read_text().count("\n") >= 9
    if _has_multicalibration():
        assert "| HKRR (multicalibration) |" in out, out
        assert "Speed-up (HKRR fit s / mmc_core fit() wall s):" in out, out
    else:
        assert "SKIPPED: the `multicalibration` package is not installed" in out, out
    print(f"--quick took {elapsed:.1f} s")  # timings belong in benchmarks, not in assertions


def test_hkrr_part_skips_without_the_package(tmp_path):
    shadow = tmp_path / "multicalibration"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('simulated: package not installed')\n")

    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--hkrr-only"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(ROOT),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SKIPPED: the `multicalibration` package is not installed" in proc.stdout, proc.stdout


def test_findings_intervals_benchmark_runs(tmp_path):
    """`benchmarks/findings_intervals.py` fits, audits twice (adjusted and plain intervals: the same findings)
    and prints its table."""
    out_csv = tmp_path / "fi.csv"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "findings_intervals.py"), "--models", "weak", "--seeds", "1",
         "--n", "1500", "--out", str(out_csv)],
        capture_output=True, text=True, timeout=300, cwd=str(ROOT),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "selection-adjusted" in proc.stdout and "plain 95%" in proc.stdout, proc.stdout
    import pandas as pd

    df = pd.read_csv(out_csv)
    counts = df.groupby("intervals").size()
    assert len(df) > 0 and counts["selection-adjusted"] == counts["plain 95%"]

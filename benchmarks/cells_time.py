"""What the shrunken cell corrections after the descent (``shrunken_cells``, :mod:`mmc_core.fit.cells`) cost.

    python benchmarks/cells_time.py                       # 200,000 and 2,000,000 rows, 2 repeats
    python benchmarks/cells_time.py --rows 100000 --repeats 3

A table of four 8-valued columns (their values and pairwise intersections: 417 groups, 11 a row), a base
prediction that misses two interactions and a normal label; the default fit (held-out fraction 0.25) with and
without the step, then ``predict`` on every row. Prints the minimum over the repeats (after one warm-up fit).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402


def table(n: int):
    rng = np.random.default_rng(n)
    df = pd.DataFrame({f"c{j}": rng.integers(0, 8, n) for j in range(4)})
    c = [df[f"c{j}"].to_numpy() for j in range(4)]
    y = rng.normal(size=n) + 0.1 * c[0] + 0.05 * (c[1] % 3) * (c[2] > 3)
    return df, y, 0.1 * c[0], GroupSet.from_columns(df, list(df.columns), 2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="200000,2000000", help="comma-separated table sizes")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    print(f"{'rows':>10} {'cells':>6} {'fit s':>8} {'predict s':>10}  step")
    for n in (int(v) for v in args.rows.split(",")):
        df, y, base, groups = table(n)
        MomentMulticalibrator().fit(df.iloc[:20000], y[:20000], groups, base_prediction=base[:20000])  # warm-up
        for on in (False, True):
            fit_s, pred_s = [], []
            for _ in range(args.repeats):
                est = MomentMulticalibrator(shrunken_cells=on)
                t0 = time.perf_counter()
                est.fit(df, y, groups, base_prediction=base)
                fit_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                est.predict(df, base_prediction=base)
                pred_s.append(time.perf_counter() - t0)
            c = est.model_.info.get("shrunken_cells") or {}
            step = f"kept, {c['rounds']} round(s), z = {c['z']:.1f}" if c.get("kept") else ("not kept" if c else "-")
            print(f"{n:>10} {'on' if on else 'off':>6} {min(fit_s):>8.2f} {min(pred_s):>10.2f}  {step}", flush=True)


if __name__ == "__main__":
    main()

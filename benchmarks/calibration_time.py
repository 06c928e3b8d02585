"""Share of ``MomentMulticalibrator.fit`` spent calibrating the intervals (issue 10), per calibrated approach.

    python benchmarks/calibration_time.py                    # the three bundled tables, 5 fits each
    python benchmarks/calibration_time.py --repeats 9 --approaches cc,ridge-cqr
    python benchmarks/calibration_time.py --approaches cc --cps-dir DIR --datasets cps1988,cpssw8
    python benchmarks/calibration_time.py --approaches cc --repeats 1 --synthetic-rows 200000,2000000 --datasets none

Each fit uses the protocol's setting (benchmarks/coverage_protocol.py: default parameters, calibration fraction
0.25, groups = the demographic columns and their pairwise intersections, no base, a 60% split). The time of the
``intervals.calibrate`` call inside ``fit`` is measured by wrapping it; the table gives medians over the repeats
(wall clock, so run it on a quiet machine; numbers from a loaded one are only comparable within one run).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from coverage_protocol import DATASETS, EXTERNAL, register_cps

from app.services.demo_data import load_dataset
from benchmarks.interval_fitters import fit_approach
from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core import intervals as iv


def measure(name: str, approach: str, repeats: int, seed: int = 1):
    label, cols, _, _ = DATASETS[name]
    df = EXTERNAL[name] if name in EXTERNAL else load_dataset(name)
    perm = np.random.default_rng(seed).permutation(len(df))
    train = df.iloc[perm[: int(round(0.6 * len(df)))]].reset_index(drop=True)
    y = train[label].to_numpy(float)
    groups = GroupSet.from_columns(train, cols, 2)
    original = iv.calibrate
    spent = []

    def timed(*a, **kw):
        t0 = time.perf_counter()
        try:
            return original(*a, approach=approach, fitter=fit_approach, **kw)
        finally:
            spent.append(time.perf_counter() - t0)

    fits = []
    iv.calibrate = timed
    try:
        for _ in range(repeats + 1):  # the first fit warms caches and imports; not counted
            est = MomentMulticalibrator(calibration_fraction=0.25, random_state=seed)
            t0 = time.perf_counter()
            est.fit(train, y, groups)
            fits.append(time.perf_counter() - t0)
    finally:
        iv.calibrate = original
    fit_s, cal_s = np.median(fits[1:]), np.median(spent[1:])
    share = np.median(np.asarray(spent[1:]) / np.asarray(fits[1:]))
    return {
        "dataset": name,
        "approach": approach,
        "fit_s": fit_s,
        "calibrate_s": cal_s,
        "share": share,
        "groups": est.model_.groups.evaluate(train.iloc[:1], 1).n_groups,
        "n_cal": est.calibration_index_.size,
    }


def register_synthetic(n: int) -> str:
    """A large table of four 8-valued columns (their values and pairwise intersections: 417 groups, 11 a row)
    and a label with a little signal: issue 10's share at scale, where the pairs (not the tables) dominate."""
    import pandas as pd

    rng = np.random.default_rng(n)
    df = pd.DataFrame({f"c{j}": rng.integers(0, 8, n) for j in range(4)})
    df["y"] = rng.normal(size=n) + 0.1 * df["c0"]
    name = f"synthetic_{n}"
    EXTERNAL[name] = df
    DATASETS[name] = ("y", [f"c{j}" for j in range(4)], [], None)
    return name


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--approaches", default=f"{iv.DEFAULT_APPROACH},ridge-cqr")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--cps-dir", help="also issue 9's CPS tables (coverage_protocol.py --cps-dir); name them in --datasets"
    )
    ap.add_argument("--synthetic-rows", help="also synthetic tables of these sizes (comma separated), e.g. 2000000")
    args = ap.parse_args(argv)
    if args.cps_dir:
        register_cps(args.cps_dir)
    names = [d for d in args.datasets.split(",") if d and d != "none"]
    if args.synthetic_rows:
        names += [register_synthetic(int(v)) for v in args.synthetic_rows.split(",")]
    print(f"{'dataset':18s} {'approach':10s} {'groups':>6s} {'n_cal':>6s} {'fit s':>8s} {'calib. s':>9s} {'share':>6s}")
    for name in names:
        for a in args.approaches.split(","):
            r = measure(name, a, args.repeats)
            print(
                f"{r['dataset']:18s} {r['approach']:10s} {r['groups']:6d} {r['n_cal']:6d} {r['fit_s']:8.3f} "
                f"{r['calibrate_s']:9.3f} {r['share']:6.2f}"
            )


if __name__ == "__main__":
    main()

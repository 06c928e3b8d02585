"""What the in-app base variance (:mod:`app.services.base_variance`) costs and gives.

* ``time``: a whole run (:func:`app.services.runner.run_pipeline`, in this process, one OpenMP thread for the
  scikit-learn fits as the app runs them) with the switch on, on the bundled demo table ``islp_wage`` and on a
  synthetic table of ``--rows`` rows: the seconds of the base model (``timings["base_model"]``) and of the base
  variance model (``timings["base_variance"]``: five out-of-fold base models and the Poisson model).
* ``world``: the known-truth world of ``tests/test_app_base_variance.py`` (sd follows a feature no group
  carries) over ``--seeds`` seeds, switch off and on: corr(predicted sd, true sd) and the worst group's
  |log(mean predicted variance / mean true variance)| on the test rows.

Run: ``.venv/bin/python benchmarks/bench_base_variance.py [--rows 100000] [--seeds 5]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def world(seed: int, n: int = 12_000) -> tuple[pd.DataFrame, np.ndarray]:
    """The test's world (:func:`mmc_core.common.feature_spread_world`): (table with a, b, x, y; every row's true
    sd)."""
    from mmc_core.common import feature_spread_world

    w = feature_spread_world(seed, n)
    return pd.DataFrame({c: w[c] for c in ("a", "b", "x", "y")}), w["true_sd"]


def _run(df, label: str, feats, gcols, variance: bool, seed: int = 0):
    from app.services.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec, run_pipeline
    from mmc_core import GroupSet

    groups = GroupSet.from_columns(df, gcols, max_order=2).to_json()
    spec = BaseSpec("model", None, "hgb", tuple(feats), variance=variance)
    return run_pipeline(df, LabelSpec(label), spec, SplitSpec(0.3, 0.3, seed), groups, FitSettings(n_boot=20))


def timing(rows: int) -> None:
    """The base model's and the base variance's seconds on the demo table and a synthetic one."""
    demo = pd.read_csv(ROOT / "demo_datasets" / "islp_wage.csv")
    feats = [c for c in demo.columns if c not in ("wage", "race", "education")]
    big, _ = world(1, rows)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_base_model import FEATURES, table

    cps = table(rows)
    print("| table | rows | base rows | base model s | base variance s | whole run s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, df, label, f, g in (
        ("islp_wage (demo)", demo, "wage", feats, ["race", "education"]),
        ("known-truth world", big, "y", ["a", "b", "x"], ["a", "b"]),
        ("CPS-like (bench_base_model)", cps, "lwage", FEATURES, ["female", "black"]),
    ):
        from app.services import base_model

        base_model._BASE_CACHE.clear()  # a fresh fit, not the cache
        run = _run(df, label, f, g, True)
        t = run.timings
        print(
            f"| {name} | {len(df):,} | {run.split['base'].size:,} | {t['base_model']:.2f} | "
            f"{t.get('base_variance', float('nan')):.2f} | {t['total']:.2f} |"
        )


def quality(seeds: int) -> None:
    """corr(sd) and the worst group's variance error on the test world, switch off and on."""
    from app.services.run_tables import model_table
    from mmc_core import GroupSet

    print("| seed | corr(sd) off | corr(sd) on | worst group off | worst group on |")
    print("|---:|---:|---:|---:|---:|")
    for seed in range(seeds):
        df, sd = world(seed)
        cells = []
        for on in (False, True):
            run = _run(df, "y", ["a", "b", "x"], ["a", "b"], on, seed)
            test = run.split["test"]
            v = run.model.predict(model_table(df, run, test), run.base[test])["moment_2"]
            memb = GroupSet.from_columns(df, ["a", "b"], 2).evaluate(df.iloc[test].reset_index(drop=True), test.size)
            pg = np.bincount(memb.pair_groups(), weights=v[memb.rows], minlength=memb.n_groups)
            tg = np.bincount(memb.pair_groups(), weights=sd[test][memb.rows] ** 2, minlength=memb.n_groups)
            cells.append((np.corrcoef(np.sqrt(v), sd[test])[0, 1], float(np.max(np.abs(np.log(pg / tg))))))
        print(f"| {seed} | {cells[0][0]:.3f} | {cells[1][0]:.3f} | {cells[0][1]:.3f} | {cells[1][1]:.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000, help="rows of the synthetic table (default 100000)")
    p.add_argument("--seeds", type=int, default=5, help="seeds of the known-truth world (default 5)")
    args = p.parse_args()
    timing(args.rows)
    quality(args.seeds)


if __name__ == "__main__":
    main()

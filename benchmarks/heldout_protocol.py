"""Held-out protocol of issue 10: does the fit generalize? Base model vs mmc-audit (vs MCGrad when installed).

    python benchmarks/heldout_protocol.py                    # 3 bundled tables x 10 splits (a few minutes)
    python benchmarks/heldout_protocol.py --splits 20 --datasets nels_catholic --methods base,mmc,mcgrad
    python benchmarks/heldout_protocol.py --quick            # 2 splits, smoke run

Protocol (per table, per split seed s = seed_start, ..., seed_start + splits - 1): the rows are shuffled and cut
40% / 30% / 30%. A scikit-learn HistGradientBoostingRegressor (all feature columns, group columns included,
categorical ones as category codes; seeded) is fitted on the first 40% ("base"). Every post-processor sees
only the middle 30% (features, labels, base predictions) and is scored on the last 30% ("test"). Groups: the
values of the table's demographic columns and their pairwise intersections, ``GroupSet.from_columns(post,
cols, 2)`` (numeric columns cut at quartiles of the post-processing rows), evaluated on the test rows.

Methods: ``base``; ``mmc``: ``MomentMulticalibrator()`` with its defaults (label range = the whole table's
min / max, known a priori); ``mmc-fine``: the same with ``mean_buckets="quantile", n_buckets="auto"``;
``mmc-v1``: the previous defaults (``alpha="auto", beta="auto", early_stopping=False,
moment_buckets="range"``); ``mcgrad``: ``mcgrad.methods.RegressionMCGrad()`` with its defaults, the group
columns as categorical segmentation features (skipped when ``mcgrad`` is not installed).

Metrics on the test rows, label units:
``mse`` squared error; ``gbias`` group-level bias: sum_g n_g |mean(pred - y) over g| / sum_g n_g over all
groups; ``cell`` cell error: the same over the cells (group x decile of the method's own test predictions),
sum_c n_c |mean(pred - y) over c| / sum_c n_c; ``var`` (moment fitters only): over the groups with >= 2% of
the test rows, the mass-weighted |log(mean predicted variance / mean (y - mu)^2)|.
Each row of the table: the mean over splits, and the paired difference to ``base`` (and to ``mcgrad``) as
mean +- standard error over splits with the number of splits where the method is worse.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from app.demo_data import load_dataset  # noqa: E402
from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402

DATASETS = {
    # name: (label, group columns, columns never used as features)
    "islp_wage": ("wage", ["race", "education", "maritl", "age", "jobclass"], []),
    "nels_catholic": ("math12", ["female", "asian", "hispan", "black", "lfaminc"], []),
    "synthetic_scores": ("outcome", ["sex", "race", "age"], ["base_pred", "true_mean", "true_var", "true_m3",
                                                            "true_m4"]),
}
METHODS = ("base", "mmc", "mmc-fine", "mmc-v1", "mcgrad")
MMC_KW = {
    "mmc": {},
    "mmc-fine": {"mean_buckets": "quantile", "n_buckets": "auto"},
    "mmc-v1": {"alpha": "auto", "beta": "auto", "early_stopping": False, "moment_buckets": "range"},
}
METRICS = ("mse", "gbias", "cell", "var")


def _features(df: pd.DataFrame, label: str, drop) -> pd.DataFrame:
    X = df.drop(columns=[label] + list(drop))
    for c in X.columns:
        if not pd.api.types.is_numeric_dtype(X[c]):
            X[c] = X[c].astype("category").cat.codes
    return X


def split(n: int, seed: int):
    perm = np.random.default_rng(seed).permutation(n)
    a, b = int(0.4 * n), int(0.7 * n)
    return perm[:a], perm[a:b], perm[b:]


def group_errors(memb_dense: np.ndarray, pred: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(group-level bias, cell error), mass-weighted as in the module docstring."""
    r = pred - y
    cnt = memb_dense.sum(axis=0)
    s = memb_dense.T @ r
    ok = cnt > 0
    gbias = float(np.sum(np.abs(s[ok])) / cnt[ok].sum())
    edges = np.quantile(pred, np.linspace(0, 1, 11)[1:-1])
    b = np.searchsorted(edges, pred, side="right")
    cell_abs, cell_n = 0.0, 0.0
    for k in range(10):  # 10 deciles x groups: a dense product per decile
        in_b = b == k
        if not in_b.any():
            continue
        c = memb_dense[in_b].sum(axis=0)
        sk = memb_dense[in_b].T @ r[in_b]
        cell_abs += float(np.abs(sk).sum())
        cell_n += float(c.sum())
    return gbias, cell_abs / cell_n


def var_error(memb_dense, mu, var, y) -> float:
    cnt = memb_dense.sum(axis=0)
    big = cnt >= 0.02 * len(y)
    pv = memb_dense.T @ var
    ev = memb_dense.T @ ((y - mu) ** 2)
    w = cnt[big]
    return float(np.sum(w * np.abs(np.log(pv[big] / ev[big]))) / w.sum())


def run_split(name: str, seed: int, methods) -> dict:
    from sklearn.ensemble import HistGradientBoostingRegressor

    label, gcols, drop = DATASETS[name]
    df = load_dataset(name).reset_index(drop=True)
    lo, hi = float(df[label].min()), float(df[label].max())
    tr, po, te = split(len(df), seed)
    X = _features(df, label, drop)
    hgb = HistGradientBoostingRegressor(random_state=seed)
    hgb.fit(X.iloc[tr], df[label].iloc[tr])
    base = np.clip(hgb.predict(X), lo, hi)
    post, test = df.iloc[po].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    y_po, y_te = post[label].to_numpy(float), test[label].to_numpy(float)
    b_po, b_te = base[po], base[te]
    groups = GroupSet.from_columns(post, gcols, 2)
    dense = groups.evaluate(test).to_dense().astype(float)
    out = {}
    for meth in methods:
        t0 = time.perf_counter()
        var = None
        if meth == "base":
            pred = b_te
        elif meth in MMC_KW:
            est = MomentMulticalibrator(label_range=(lo, hi), random_state=seed, **MMC_KW[meth])
            est.fit(post, y_po, groups, base_prediction=b_po)
            pm = est.predict_moments(test, base_prediction=b_te)
            pred, var = pm["mean"], pm["moment_2"]
        elif meth == "mcgrad":
            try:
                from mcgrad.methods import RegressionMCGrad
            except ImportError:
                continue
            cat = [c for c in gcols]
            fp, ft = post[cat].astype(str).copy(), test[cat].astype(str).copy()
            fp["_pred"], fp["_y"], ft["_pred"] = b_po, y_po, b_te
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = RegressionMCGrad()
                m.fit(fp, "_pred", "_y", categorical_feature_column_names=cat)
                pred = np.asarray(m.predict(ft, "_pred", categorical_feature_column_names=cat), dtype=float)
        else:
            raise SystemExit(f"unknown method {meth!r}; valid: {', '.join(METHODS)}")
        gb, ce = group_errors(dense, pred, y_te)
        row = {"mse": float(np.mean((pred - y_te) ** 2)), "gbias": gb, "cell": ce,
               "var": var_error(dense, pred, var, y_te) if var is not None else np.nan,
               "seconds": time.perf_counter() - t0}
        if var is not None:
            row["min_var"] = float(np.min(var))
        out[meth] = row
    return out


def summarize(results: dict, methods) -> str:
    """results[name][seed][method] -> metrics; a text table with paired differences."""
    lines = []
    hdr = f"{'table':17s} {'method':9s} " + " ".join(f"{m:>9s}" for m in METRICS) + \
        "   paired vs base (mean +- se, worse/n)" + "   vs mcgrad"
    lines.append(hdr)
    for name, by_seed in results.items():
        seeds = sorted(by_seed)
        for meth in methods:
            if not all(meth in by_seed[s] for s in seeds):
                continue
            vals = {k: np.array([by_seed[s][meth][k] for s in seeds]) for k in METRICS}
            txt = f"{name:17s} {meth:9s} " + " ".join(
                f"{np.nanmean(vals[k]):9.4g}" if np.isfinite(vals[k]).any() else f"{'-':>9s}" for k in METRICS)
            for ref in ("base", "mcgrad"):
                if meth == ref or not all(ref in by_seed[s] for s in seeds):
                    continue
                parts = []
                for k in ("mse", "gbias", "cell"):
                    d = vals[k] - np.array([by_seed[s][ref][k] for s in seeds])
                    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
                    parts.append(f"{k} {d.mean():+.3g}+-{se:.2g} ({int((d > 0).sum())}/{len(d)})")
                txt += f"   [{ref}] " + "; ".join(parts)
            lines.append(txt)
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--quick", action="store_true", help="2 splits (smoke run)")
    ap.add_argument("--out", help="CSV of every (table, split, method) row")
    args = ap.parse_args(argv)
    names = [d for d in args.datasets.split(",") if d]
    methods = [m for m in args.methods.split(",") if m]
    for d in names:
        if d not in DATASETS:
            raise SystemExit(f"unknown dataset {d!r}; valid: {', '.join(DATASETS)}")
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"unknown method {m!r}; valid: {', '.join(METHODS)}")
    n_splits = 2 if args.quick else args.splits
    results, rows = {}, []
    for name in names:
        results[name] = {}
        for s in range(args.seed_start, args.seed_start + n_splits):
            results[name][s] = run_split(name, s, methods)
            for meth, r in results[name][s].items():
                rows.append({"table": name, "seed": s, "method": meth, **r})
    print(summarize(results, methods))
    if args.out:
        pd.DataFrame(rows).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

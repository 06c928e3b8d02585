"""The coverage protocol of issue 4, on the two demo tables and the synthetic one, for every interval method.

    python benchmarks/coverage_protocol.py                      # default: 3 seeds, both base variants
    python benchmarks/coverage_protocol.py --seeds 5 --base gbr --datasets islp_wage
    python benchmarks/coverage_protocol.py --approaches gcp,mondrian-std   # compare threshold approaches

Protocol (per dataset, per seed): a seeded 60/40 train/test split; the tool fits on the training split with
default parameters (alpha 0.001, beta 0.0001, 10 buckets, moments 2..2, calibration fraction 0.25 held out
inside ``fit``), groups = the values of the demographic columns and their pairwise intersections
(``GroupSet.from_columns(train, cols, 2)``: numeric columns cut at quartiles). Coverage is read on the test
split, delta = 0.1, for every group of the same construction on the test split (quartiles of the test
split) holding at least 2% of the test rows; a group is under-covered when the one-sided binomial test of
H0: coverage >= 0.9 rejects at level 0.01 (scipy; benchmark only).

Base prediction (``--base``): the real tables ship none, so ``gbr`` fits a scikit-learn
GradientBoostingRegressor on the training split's non-group feature columns (the synthetic table uses its
shipped mis-specified ``base_pred``); ``none`` fits without a base (the model starts at the label mean and
the conformal baselines are centred on that constant). ``both`` runs the two variants.

Columns of the printed table: under = under-covered groups (mean over seeds, and the worst seed), splits_ok =
share of splits with no under-covered group, cov = average group coverage, min = the lowest group coverage,
width = mean interval width in label units, w_mond = width divided by the mondrian baseline's (per split).
``calibrated`` is the shipped default; ``calibrated[...]`` rows re-calibrate the same model with another
threshold approach (``--approaches``).

Notes (measured with this script; the defaults were tuned on seeds 0-7 and are reported on seeds 100-109)
-------------------------------------------------------------------------------------------------------
Approaches tried for the ``calibrated`` threshold (mmc_core.intervals.fit_threshold):

1. ``gcp``, additive group thresholds fitted by exact coordinate steps of the pinball loss (BatchGCP-like).
   Patching every group to exactly 1 - delta on the calibration rows fits noise: 5-20 under-covered groups
   per split on the wage table. What helped, in order: (a) gating: patch a group only when its calibration
   coverage is more than z_under = 2 (z_over = 3) standard errors off target; (b) a global PAC-style margin
   1.5 sqrt(delta (1 - delta) / n_cal) (the whole population's coverage misses 1 - delta in only ~7% of
   calibration draws; without it every big group fails together on ~1 split in 10); (c) the conformal rank
   per group; (d) a variance floor for the standardized score (0.25 x the mean m_2: with the old default
   alpha = 0.001 the wage model's m_2 collapsed in small cells and the score's per-group 90% quantiles were
   3x more dispersed than the raw residual's; with the "auto" thresholds it no longer matters). Default.
2. ``gcp-cv``: the global margin chosen by 5-fold cross-validation on the calibration rows (smallest margin
   whose out-of-fold coverage passes a z test in every group): noisier, more under-covered splits.
3. ``mondrian-std``: per-group conformal quantiles of the standardized score, max over the row's groups:
   valid per group by construction (no under-covered split on any table) but it over-covers (average group
   coverage 0.93-0.97).
4. ``mondrian-relaxed`` (z_under = 1): mondrian-std at a common relaxed level, the loosest for which every
   group's calibration coverage stays within z_under se of its target: 1 under-covered split in 60, but the
   average coverage stays above 0.93 on the wage table (0.96) and at ~0.93 elsewhere.
   Also measured and dropped (seeds 0-7): empirical-Bayes per-group margins (the between-group variance
   estimated after the fit is biased to 0 on the wage table), and the max-combination at a common level tuned
   to the marginal target (many more under-covered groups).

What limits the goal: with 25% of a 60% split held out, a group holding 2% of the test rows has ~9
calibration rows (wage) to ~22 (NELS); its calibration coverage has a standard error of 0.06-0.1, while the
test's binomial check rejects at 0.01 once a group's true coverage is a few points under 0.9. A threshold
fitted per group is too noisy; a pooled one is only as good as the standardized score is homogeneous across
groups. On NELS and the synthetic table it nearly is (per-group 90% quantiles of the score vary by ~5%): the
default has no under-covered group on 80-100% of the splits, average coverage 0.92-0.93 and 0.84-0.94 of the
Mondrian width (all three criteria at once on half of the splits, the others mostly just above 0.93 average
coverage or with one small group under-covered); on the wage table the 270-320 cluster of top earners (10% of the
"Advanced Degree" rows) makes coverage a knife edge in the groups that contain them, so either some small
group is under-covered on some splits (gcp) or the average coverage exceeds 0.93 (the Mondrian variants).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from app.demo_data import load_dataset  # noqa: E402
from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402
from mmc_core import intervals as iv  # noqa: E402

DATASETS = {
    # name: (label, group columns, non-group feature columns for the base model, shipped base column)
    "islp_wage": ("wage", ["race", "education", "maritl", "age", "jobclass"], ["year", "health", "health_ins"], None),
    "nels_catholic": ("math12", ["female", "asian", "hispan", "black", "lfaminc"],
                      ["read12", "motheduc", "fatheduc", "hsgrad", "cathhs", "parcath"], None),
    "synthetic_scores": ("outcome", ["sex", "race", "age"], ["score"], "base_pred"),
}
DELTA = 0.1
MIN_SHARE = 0.02
TEST_LEVEL = 0.01


def base_model(train: pd.DataFrame, test: pd.DataFrame, feats, label, seed):
    """A GradientBoostingRegressor on the non-group features: out-of-fold (5-fold) predictions for the
    training rows, the model fitted on the whole training split for the test rows.

    Cross-fitting matters: in-sample predictions of a boosted model have smaller residuals than fresh ones,
    so calibrating any interval on rows the base was trained on under-covers the test rows. A user's base
    model is trained elsewhere; out-of-fold predictions reproduce that here.
    """
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.model_selection import cross_val_predict

    def X(df):
        return pd.get_dummies(df[feats], dummy_na=False).astype(float).fillna(-1.0)

    Xtr, Xte = X(train), X(test)
    Xte = Xte.reindex(columns=Xtr.columns, fill_value=0.0)
    gbr = GradientBoostingRegressor(n_estimators=150, max_depth=3, learning_rate=0.05, subsample=0.8,
                                    random_state=seed)
    ytr = train[label].to_numpy()
    oof = cross_val_predict(gbr, Xtr, ytr, cv=5)
    gbr.fit(Xtr, ytr)
    return oof, gbr.predict(Xte)


def group_masks(test: pd.DataFrame, cols):
    gs = GroupSet.from_columns(test, cols, 2)
    dense = gs.evaluate(test, len(test)).to_dense()
    keep = dense.sum(axis=0) >= MIN_SHARE * len(test)
    return [gs.names[g] for g in np.flatnonzero(keep)], dense[:, keep]


def evaluate(lower, upper, y, masks):
    from scipy.stats import binom

    cov_row = (y >= lower) & (y <= upper)
    n_g = masks.sum(axis=0)
    k_g = (masks & cov_row[:, None]).sum(axis=0)
    cov_g = k_g / n_g
    pval = binom.cdf(k_g, n_g, 1 - DELTA)
    width = upper - lower
    return {"under": int(np.sum(pval < TEST_LEVEL)), "cov": float(np.mean(cov_g)), "min": float(np.min(cov_g)),
            "width": float(np.mean(width)) if np.all(np.isfinite(width)) else float("inf"),
            "marg": float(np.mean(cov_row))}


def run_one(name, seed, base_kind, approaches, methods):
    label, cols, feats, base_col = DATASETS[name]
    df = load_dataset(name)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(df))
    ntr = int(round(0.6 * len(df)))
    train, test = df.iloc[perm[:ntr]].reset_index(drop=True), df.iloc[perm[ntr:]].reset_index(drop=True)
    ytr, yte = train[label].to_numpy(float), test[label].to_numpy(float)
    btr = bte = None
    if base_kind == "gbr":
        if base_col:
            btr, bte = train[base_col].to_numpy(float), test[base_col].to_numpy(float)
        else:
            btr, bte = base_model(train, test, feats, label, seed)
        # the base must lie in the model's label range (the observed range of the training labels)
        btr = np.clip(btr, ytr.min(), ytr.max())
        bte = np.clip(bte, ytr.min(), ytr.max())
    groups = GroupSet.from_columns(train, cols, 2)
    # the test labels may leave the training range: declare a slightly wider range so fit/predict accept them
    est = MomentMulticalibrator(calibration_fraction=0.25, random_state=seed)
    t0 = time.perf_counter()
    est.fit(train, ytr, groups, base_prediction=btr)
    fit_s = time.perf_counter() - t0
    model = est.model_
    names, masks = group_masks(test, cols)
    rows = []
    cal = est.calibration_index_
    tcal = {c: train[c].to_numpy()[cal] for c in train.columns}
    ycal = model.scale.to_unit(ytr[cal])
    bcal = None if btr is None else model.scale.to_unit(btr[cal])
    default_rec = model.extras["intervals"]
    variants = [(a, opts) for a, opts in approaches]
    for m in methods:
        if m == "calibrated":
            for a, opts in variants:
                t1 = time.perf_counter()
                model.extras["intervals"] = iv.calibrate(model, tcal, ycal, bcal, approach=a, options=opts)
                cal_s = time.perf_counter() - t1
                lo, hi = iv.predict_intervals(model, test, bte, "calibrated", DELTA)
                tag = "calibrated[" + a + ("" if not opts else "," + ",".join(f"{k}={v}" for k, v in opts.items())) + "]"
                rows.append(dict(method=tag, seconds=cal_s, **evaluate(lo, hi, yte, masks)))
            model.extras["intervals"] = default_rec
            lo, hi = iv.predict_intervals(model, test, bte, "calibrated", DELTA)
            rows.append(dict(method="calibrated", **evaluate(lo, hi, yte, masks)))
        else:
            lo, hi = iv.predict_intervals(model, test, bte, m, DELTA)
            rows.append(dict(method=m, **evaluate(lo, hi, yte, masks)))
    out = pd.DataFrame(rows)
    mond = out.loc[out.method == "mondrian", "width"].iloc[0]
    out["w/mond"] = out["width"] / mond
    out.insert(0, "seed", seed)
    out.insert(0, "base", base_kind)
    out.insert(0, "dataset", name)
    out["n_groups"] = masks.shape[1]
    out["fit_s"] = fit_s
    return out


def parse_approaches(text):
    out = []
    for spec in text.split(";"):
        spec = spec.strip()
        if not spec:
            continue
        parts = spec.split(",")
        opts = {}
        for kv in parts[1:]:
            k, v = kv.split("=")
            try:
                v = float(v)
            except ValueError:
                pass
            opts[k] = v
        out.append((parts[0], opts))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--seeds", type=int, default=3, help="number of splits (default 3)")
    ap.add_argument("--seed-start", type=int, default=100,
                    help="first split seed (default 100: the defaults were tuned on seeds 0-7, report on others)")
    ap.add_argument("--base", choices=["gbr", "none", "both"], default="both")
    ap.add_argument("--methods", default=",".join(iv.METHODS))
    ap.add_argument("--approaches", default="gcp-cv;mondrian-std;mondrian-relaxed,z_under=1",
                    help="extra threshold approaches for 'calibrated', ';'-separated, e.g. 'gcp,z=2;mondrian-std'")
    ap.add_argument("--per-seed", action="store_true", help="also print every seed's rows")
    ap.add_argument("--csv", help="also write every seed's rows to this CSV")
    args = ap.parse_args(argv)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    approaches = parse_approaches(args.approaches)
    bases = ["gbr", "none"] if args.base == "both" else [args.base]
    frames = []
    for name in args.datasets.split(","):
        for b in bases:
            for seed in range(args.seed_start, args.seed_start + args.seeds):
                frames.append(run_one(name, seed, b, approaches, args.methods.split(",")))
    res = pd.concat(frames, ignore_index=True)
    if args.per_seed:
        print(res.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.csv:
        res.to_csv(args.csv, index=False)
    res["no_under"] = res["under"] == 0
    agg = res.groupby(["dataset", "base", "method"], sort=False).agg(
        under=("under", "mean"), under_max=("under", "max"), splits_ok=("no_under", "mean"), cov=("cov", "mean"),
        min=("min", "mean"), width=("width", "mean"), w_mond=("w/mond", "mean"), groups=("n_groups", "mean"))
    print(f"delta={DELTA}, groups >= {MIN_SHARE:.0%} of test rows, one-sided binomial test at {TEST_LEVEL}, "
          f"{args.seeds} seed(s), 60/40 split")
    print(agg.to_string(float_format=lambda v: f"{v:.3f}"))
    return res


if __name__ == "__main__":
    main()

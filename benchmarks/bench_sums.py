"""The membership-sum primitive's two ways of summing, side by side: the measurement behind
``mmc_core.groups.sums.use_signatures`` (signatures while they are at most half the rows and the signature x group
table stays small; (row, group) pairs otherwise).

One command::

    .venv/bin/python benchmarks/bench_sums.py            # n = 200k, a few membership shapes (~1 min)
    .venv/bin/python benchmarks/bench_sums.py --rows 1M

Each shape is groups from ``cols`` categorical columns of ``card`` values each, all values and pairwise
intersections (``GroupSet.from_columns(max_order=2)``), so the number of distinct signatures grows from a few
dozen to about one per row. Timed per mode: the set-up (signatures), one full (group x cell) sum with 100
cells per group, and one incremental shift of 10% of the rows (five statistics, as one descent update of a
joint moment cell refreshes). Times are the minimum of ``--repeat`` runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mmc_core.groups.group_set import GroupSet  # noqa: E402
from mmc_core.groups.sums import MembershipSums, use_signatures  # noqa: E402

SHAPES = ((2, 4), (3, 8), (3, 12), (4, 12), (5, 12))
NC = 100


def _best(f, repeat):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def run(n: int, repeat: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for cols, card in SHAPES:
        table = {f"c{i}": np.array([f"v{j}" for j in range(card)])[rng.integers(0, card, n)] for i in range(cols)}
        memb = GroupSet.from_columns(table, list(table), max_order=2).evaluate(table, n)
        sig, n_sig = memb.signatures()
        cells = rng.integers(0, NC, n)
        w = rng.normal(size=n)
        upd = np.flatnonzero(rng.random(n) < 0.1)
        c_new = rng.integers(0, NC, upd.size)
        row = {"cols x card": f"{cols}x{card}", "groups": memb.n_groups, "signatures": n_sig}
        row["rule"] = "signatures" if use_signatures(n, memb.n_groups, n_sig) else "pairs"
        for mode in (True, False):
            tag = "sig" if mode else "pairs"
            s = MembershipSums(memb, by_signature=mode)
            row[f"{tag} setup ms"] = _best(lambda s=s: (setattr(s, "_by_signature", None), s.by_signature), 1)
            row[f"{tag} full ms"] = _best(lambda s=s: s.cell_sums(cells, NC, w), repeat)
            arr = s.cell_sums(cells, NC, w)

            def shift(s=s, arr=arr):
                sh = s.shift_keys(s.context(upd), NC, cells[upd], c_new, cells[upd] != c_new)
                for _ in range(5):
                    s.shift(arr, NC, sh, w[upd], w[upd])

            row[f"{tag} shift ms"] = _best(shift, repeat)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="200k", help="rows (200k; k / M suffixes accepted)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    t = a.rows.lower().replace("_", "")
    n = int(float(t[:-1]) * (1_000 if t.endswith("k") else 1_000_000)) if t[-1] in "km" else int(t)
    rows = run(n, a.repeat)
    keys = list(rows[0])
    print(f"n = {n:,}; {NC} cells per group; shift: 10% of the rows, 5 statistics\n")
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print(
            "| "
            + " | ".join(
                f"{v:.1f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v) for v in r.values()
            )
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

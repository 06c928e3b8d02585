"""The state of a Dask fit: one :class:`_Part` per row partition, living on a worker (inside a :class:`_Block`
actor) for the whole fit; :class:`Parts`, the client's handle on them; and :class:`Engine` / :class:`DaskFitStats`,
what the descent drives through its CellStats seam and the fit's statistics computed over the partitions."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from ..common.errors import DataError, MMCError
from ..paper.descent import CellState, CellStats
from .dask_base import add_sums
from .dask_quantiles import bracket, sketch

__all__ = ["Parts", "Engine", "DaskFitStats"]


# ---- per-partition state (lives on a worker) ------------------------------------------------------------
def _sums(st) -> list | None:
    """A CellState's (group x cell) sums as a flat list (None where a sum is not kept)."""
    if st is None:
        return None
    out = [st.S0, st.C0, st.Q0]
    for a in st.p.moments:
        out += [st.SA[a], st.CA[a], st.TA[a], st.QA.get(a), st.UA.get(a)]
    return out


class _PartState(CellState):
    """A partition's numpy CellState that also keeps MA[a], the per-(group, joint cell) sums of the moment-a
    predictions, so that the ratio step's denominators come with every update's sums (no extra round trip)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, track_moment_sums=True, **kw)


def _sums_ma(st):
    if st is None:
        return None
    return _sums(st) + [st.MA[a] for a in st.p.moments]


class _Part:
    """One row partition on a worker: labels, membership, predictions and the partition's cell sums."""

    def __init__(self, df, index: int, label: str, base_col, gset, fraction: float, seed, group_cols):
        from ..common.tables import to_label_array

        self.index = index
        n = len(df)
        self.n = n
        try:
            self.y = to_label_array(df[label].to_numpy(), f"label '{label}'", n) if n else np.zeros(0)
            self.base = None
            if base_col is not None:
                self.base = (
                    to_label_array(df[base_col].to_numpy(), f"base prediction '{base_col}'", n) if n else np.zeros(0)
                )
        except DataError as e:  # "first at row 7" counts within this partition, which read like the table's row 7
            raise DataError(
                f"{e} of Dask partition {index + 1} (rows counted from 0 within it; partitions follow the --data "
                "files in order)"
            ) from None
        rng = np.random.default_rng([int(seed) if isinstance(seed, (int, np.integer)) else 0, int(index)])
        n_cal = int(round(fraction * n)) if fraction > 0 else 0
        perm = rng.permutation(n)
        # row positions in int32 (4 bytes a row) when the partition allows: the same rows, half the memory
        pos = np.int32 if n < 2**31 else np.int64
        self.cal_idx = np.sort(perm[:n_cal]).astype(pos)
        self.fit_idx = np.sort(perm[n_cal:]).astype(pos) if n_cal else np.arange(n, dtype=pos)
        del perm
        cols = sorted(set(group_cols) | gset.columns())
        self.table_h = {c: df[c].to_numpy()[self.cal_idx] for c in cols} if n_cal else None
        table_f = {c: df[c].to_numpy()[self.fit_idx] for c in cols}
        self.memb_f = gset.evaluate(table_f, self.fit_idx.size)
        self.memb_h = gset.evaluate(self.table_h, n_cal) if n_cal else None
        self.st_f: Any = None  # the partition's CellStates, built by start() on the worker
        self.st_h: Any = None
        self.applied = 0

    # -- passes before the descent
    def summary(self):
        y = self.y
        return {
            "n": self.n,
            "nf": int(self.fit_idx.size),
            "nc": int(self.cal_idx.size),
            "ymin": float(y.min()) if y.size else math.inf,
            "ymax": float(y.max()) if y.size else -math.inf,
            # only its smallest and largest value: with the other partitions', a label of two values
            "two_valued": bool(np.all((y == y.min()) | (y == y.max()))) if y.size else True,
        }

    def set_scale(self, scale, label_name, bname):
        self.scale = scale
        yu = scale.to_unit(self.y, f"label '{label_name}'") if self.n else np.zeros(0)
        self.yu_f, self.yu_h = yu[self.fit_idx], yu[self.cal_idx]
        out = {"sum_yu_f": float(self.yu_f.sum()), "base_clipped": 0}
        self.base_u = None
        if self.base is not None:
            outside = (self.base < scale.lo) | (self.base > scale.hi)
            out["base_clipped"] = int(outside.sum())
            self.base_u = scale.to_unit(np.clip(self.base, scale.lo, scale.hi), bname) if self.n else np.zeros(0)
        del self.y, self.base
        return out

    def set_initial_mean(self, constant):
        self.has_base = self.base_u is not None
        if self.base_u is not None:
            self.mu0_f, self.mu0_h = self.base_u[self.fit_idx], self.base_u[self.cal_idx]
            # the held-out rows' base as given (the calibration sample's; predict maps it): mu0_h may be mapped
            self.base_h_raw = self.mu0_h
            self.base_u = None
        else:
            self.mu0_f = np.full(self.fit_idx.size, float(constant))
            self.mu0_h = np.full(self.cal_idx.size, float(constant))

    def apply_map(self, m):
        """The group-linear map (fitted on the client, :mod:`mmc_core.fit.recalibrate`) applied to the initial mean."""
        from ..fit.recalibrate import group_linear_base

        self.mu0_f = group_linear_base(self.mu0_f, self.memb_f.sums(), m)
        if self.memb_h is not None:
            self.mu0_h = group_linear_base(self.mu0_h, self.memb_h.sums(), m)

    def sample_rows(self, which, picks, what):
        """The rows ``picks[index]`` (increasing positions among this partition's fitting or held-out rows) for a
        sample on the client: (each row's group count, its groups in row-major order, the label, a prediction,
        unit scale). ``what``: "start" the initial mean, "kept" the kept model's fitting-row prediction,
        "held" its held-out prediction (:meth:`held_predictions`); ("kept", a) / ("held", a): the same for the
        moment a."""
        idx = np.asarray(picks.get(self.index, ()), dtype=np.int64)
        memb = self.memb_f if which == "fit" else self.memb_h
        if not idx.size or memb is None:
            return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        counts, groups = memb.groups_of_rows(idx)
        y = (self.yu_f if which == "fit" else self.yu_h)[idx]
        if what == "start":
            x = (self.mu0_f if which == "fit" else self.mu0_h)[idx]
        elif isinstance(what, tuple):
            x = (self.kept[1] if what[0] == "kept" else self.kept_h_moms)[what[1]][idx]
        else:
            x = (self.kept[0] if what == "kept" else self.kept_h)[idx]
        return counts, groups, y, x

    def mu0_sketch(self):
        return sketch(self.mu0_f)

    def mu0_bracket(self, lo, hi):
        return bracket(self.mu0_f, lo, hi)

    def moments_pass1(self, moments, odd):
        from ..paper.moments import pseudo_label

        r = self.yu_f - self.mu0_f
        out = {"resid": float(r.sum()), "sizes": self.memb_f.sizes.astype(np.int64), "label": {}, "gsum": {}}
        for a in moments:
            lab = pseudo_label(a, r, odd)
            out["label"][a] = float(lab.sum())
            out["gsum"][a] = self.memb_f.sums().group_sums(lab, row_order=True)
        return out

    def moments_pass2(self, moments, odd, means):
        from ..paper.moments import pseudo_label

        r = self.yu_f - self.mu0_f
        out = {"resid": float(np.sum((r - means["resid"]) ** 2))}
        for a in moments:
            out[a] = float(np.sum((pseudo_label(a, r, odd) - means[a]) ** 2))
        return out

    # -- the descent
    def start(self, params, init_moments):
        nf, nc = self.fit_idx.size, self.cal_idx.size
        self.st_f = self.st_h = None  # a previous bucket count's states go before the new ones are built
        self.params, self.init_moments = params, dict(init_moments)
        self.st_f = _PartState(
            params, self.memb_f, self.yu_f, self.mu0_f, {a: np.full(nf, v) for a, v in init_moments.items()}
        )
        self.st_h = None
        if nc:
            self.st_h = _PartState(
                params, self.memb_h, self.yu_h, self.mu0_h, {a: np.full(nc, v) for a, v in init_moments.items()}
            )
        self.applied = 0
        return _sums_ma(self.st_f), _sums_ma(self.st_h)

    def apply(self, upd, k: int):
        if k != self.applied:
            raise RuntimeError(
                f"partition {self.index} lost its state (update {k}, has {self.applied}): a worker "
                "was restarted; run the fit again"
            )
        self.st_f.apply(upd)
        if self.st_h is not None:
            self.st_h.apply(upd)
        self.applied += 1
        return _sums_ma(self.st_f), _sums_ma(self.st_h)

    def _st(self, which):
        return self.st_f if which == "fit" else self.st_h

    def recompute(self, which):
        st = self._st(which)
        if st is None:
            return None
        st.full_recompute()
        return _sums_ma(st)

    def potential(self, which, a):
        st = self._st(which)
        if st is None:
            return 0.0
        if a == 1:
            return float(np.sum((st.mu - st.y) ** 2))
        return float(np.sum((st.mom[a] - st.label(a, st.mu, st.y)) ** 2))

    def cell_totals(self, which, target, g, partition):
        st = self._st(which)
        if st is None:
            return None
        return st.cell_totals(target, g, partition)

    # -- after the descent
    def kept_predictions(self, model, upto, replay: bool):
        """The fitting rows' predictions of the kept model (a replay of its log when it is not the last state)."""
        if not replay:
            self.kept = (self.st_f.mu, self.st_f.mom)
        # the descent's states are done with (the kept arrays stay): freed before a replay or achieved_sums
        # builds its own
        self.st_f = self.st_h = None
        if replay:
            mu, moms = self.mu0_f.copy(), {a: np.full(self.fit_idx.size, v) for a, v in self.init_moments.items()}
            model.replay(self.memb_f, mu, moms, upto)
            self.kept = (mu, moms)
        return None

    def held_predictions(self, model):
        """The kept model's mean prediction on the held-out rows (its initial mean from the base as given, then
        its log), for the shrunken cells' check."""
        if self.memb_h is None:
            self.kept_h, self.kept_h_moms = np.zeros(0), {}
            return None
        mu, moms = model.initial(self.memb_h.n, self.base_h_raw if self.has_base else None, self.memb_h)
        mu, moms = model.replay(self.memb_h, mu, moms)
        self.kept_h, self.kept_h_moms = mu, moms
        return None

    def apply_cells(self, cells):
        from ..fit.cells import apply_cells

        self.kept = (apply_cells(self.kept[0], self.memb_f.sums(), cells), self.kept[1])
        self.kept_h = None
        return None

    def apply_moment_cells(self, a, cell, bounds):
        from ..fit.cells import apply_moment_cells

        moms = dict(self.kept[1])
        moms[a] = apply_moment_cells(moms[a], self.memb_f.sums(), cell, bounds, self.kept[0])
        self.kept = (self.kept[0], moms)  # the held-out moments stay: each moment's cells are judged on its own
        return None

    def achieved_sums(self, plain_params):
        mu, moms = self.kept
        st = CellState(plain_params, self.memb_f, self.yu_f, mu, moms)
        return [st.S0] + [st.SA[a] for a in plain_params.moments] + [st.TA[a] for a in plain_params.moments]

    def kurtosis_parts(self):
        from ..auditing.audit_findings import kurtosis_parts

        mu, moms = self.kept
        if 2 not in moms or not mu.size:
            return None
        return kurtosis_parts(self.memb_f.sums(), self.yu_f - mu, moms[2])

    def fit_predictions(self):
        mu, moms = self.kept
        return self.fit_idx, mu, moms

    def calibration_sample(self, rate, seed):
        if not self.cal_idx.size:
            return None
        rng = np.random.default_rng([int(seed) if isinstance(seed, (int, np.integer)) else 0, int(self.index), 7])
        keep = np.flatnonzero(rng.random(self.cal_idx.size) < rate) if rate < 1 else np.arange(self.cal_idx.size)
        return (
            {c: v[keep] for c, v in self.table_h.items()},
            self.yu_h[keep],
            self.base_h_raw[keep] if self.has_base else None,
        )

    def release(self):
        self.st_f = self.st_h = None
        return None


class _Block:
    """A Dask actor (one per worker) holding the partitions assigned to that worker. A call runs a method on
    each of its partitions and sums the results on the worker (the first level of the reduction); the client
    adds the workers' sums (the second). Actor calls go straight to the worker: one round trip per update."""

    def __init__(self):
        self.parts = []

    def load(self, items, *args):
        import dask

        for index, d in items:  # each item: a Dask partition (delayed), computed here, on this worker
            df = dask.compute(d, scheduler="sync")[0]
            self.parts.append(_Part(df, index, *args))
        return [p.index for p in self.parts]

    def reduce(self, method, *args):
        return add_sums(*(getattr(p, method)(*args) for p in self.parts))

    def each(self, method, *args):
        return [(p.index, getattr(p, method)(*args)) for p in self.parts]

    def clear(self):
        self.parts = []


# how long a fit waits for a cluster's first worker: a cluster just created (or scaling up from none) can report
# no workers for a moment; a Client made on a new LocalCluster and used at once did, on a loaded CI machine
WORKER_WAIT_SECONDS = 60


def _workers(client) -> list:
    """The addresses of the cluster's workers, sorted; waits up to ``WORKER_WAIT_SECONDS`` for a first one."""
    workers = sorted(client.scheduler_info().get("workers", {}))
    if workers:
        return workers
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
    except TimeoutError as e:
        raise MMCError(
            f"the Dask cluster has no workers (waited {WORKER_WAIT_SECONDS} s for one): start some, or pass a "
            "client whose cluster has them"
        ) from e
    return sorted(client.scheduler_info().get("workers", {}))


class Parts:
    """The partition objects of one fit, in one actor per worker: map a method, reduce the results."""

    def __init__(self, client, delayed, *args):
        workers = _workers(client)
        self.client = client
        self.actors = [client.submit(_Block, workers=[w], actor=True, pure=False).result() for w in workers]
        self.n_partitions = len(delayed)
        items = [[] for _ in workers]
        for i, d in enumerate(delayed):  # round robin: partition i on worker i mod W
            items[i % len(workers)].append((i, d))
        self._wait([a.load(it, *args) for a, it in zip(self.actors, items)])

    @staticmethod
    def _wait(futs):
        return [f.result() for f in futs]

    def map_reduce(self, method, *args):
        return add_sums(*self._wait([a.reduce(method, *args) for a in self.actors]))

    def gather(self, method, *args):
        """Per-partition results, in partition order."""
        out = [r for rs in self._wait([a.each(method, *args) for a in self.actors]) for r in rs]
        return [v for _, v in sorted(out, key=lambda t: t[0])]

    def close(self):
        with contextlib.suppress(Exception):  # the cluster may already be gone
            self._wait([a.clear() for a in self.actors])
        self.actors = []


class _View(CellStats):
    """The descent's view of one row set (fitting or held-out rows) on the Dask engine: global sums only."""

    def __init__(self, engine, which, params, n, sums):
        self.engine, self.which = engine, which
        self.p, self.n, self.m = params, int(n), params.m
        self._set(sums)

    def _set(self, sums):
        p = self.p
        self.S0, self.C0, self.Q0 = sums[0], sums[1], sums[2]
        self.G = self.S0.size // self.m
        self.SA, self.CA, self.TA, self.QA, self.UA = {}, {}, {}, {}, {}
        for i, a in enumerate(p.moments):
            s = sums[3 + 5 * i : 8 + 5 * i]
            self.SA[a], self.CA[a], self.TA[a] = s[0], s[1], s[2]
            if s[3] is not None:
                self.QA[a], self.UA[a] = s[3], s[4]
        k = 3 + 5 * len(p.moments)
        self.MA = {a: sums[k + i] for i, a in enumerate(p.moments)}

    def apply(self, upd):
        if self.which == "fit":
            self.engine.apply(upd)
        elif upd is not self.engine.last_update:
            raise RuntimeError("internal error: the held-out rows are updated together with the fitting rows")

    def full_recompute(self):
        self._set(self.engine.parts.map_reduce("recompute", self.which))

    def mean_potential(self):
        return self.engine.parts.map_reduce("potential", self.which, 1) / max(self.n, 1)

    def moment_potential(self, a):
        return self.engine.parts.map_reduce("potential", self.which, a) / max(self.n, 1)

    def cell_totals(self, target, g, partition):
        mm = self.m * self.m
        blk = self.MA[target][g * mm : (g + 1) * mm]
        from ..paper.descent import WHOLE

        return np.array([blk.sum()]) if partition == WHOLE else blk

    def snapshot_predictions(self):
        return {}  # the kept round's predictions are replayed on the workers after the descent


class Engine:
    def __init__(self, parts, params, init_moments, nf, nc):
        self.parts = parts
        self.last_update = None
        self.count = 0
        sf, sh = parts.map_reduce("start", params, init_moments)
        self.fit = _View(self, "fit", params, nf, sf)
        self.holdout = _View(self, "holdout", params, nc, sh) if nc else None

    def apply(self, upd):
        sf, sh = self.parts.map_reduce("apply", upd, self.count)
        self.count += 1
        self.last_update = upd
        self.fit._set(sf)
        if self.holdout is not None:
            self.holdout._set(sh)


# ---- fitting ----------------------------------------------------------------------------------------------
class DaskFitStats:
    """The figures a fit's plan (:func:`mmc_core.fit.plan.plan_fit`) chooses thresholds and grids from, by reductions."""

    def __init__(self, parts, moments, odd, nf, mean_quantiles):
        p1 = parts.map_reduce("moments_pass1", moments, odd)
        means = {"resid": p1["resid"] / nf}
        means.update({a: p1["label"][a] / nf for a in moments})
        p2 = parts.map_reduce("moments_pass2", moments, odd, means)
        self.resid_std = float(np.sqrt(p2["resid"] / nf))
        self._std = {a: float(np.sqrt(p2[a] / nf)) for a in moments}
        self._mean = {a: float(means[a]) for a in moments}
        self._gsum = p1["gsum"]
        self.sizes = p1["sizes"]
        self._mean_quantiles = mean_quantiles

    def label_std(self, a):
        return self._std[a]

    def label_mean(self, a):
        return self._mean[a]

    def group_label_sums(self, a):
        return self._gsum[a]

    def mean_quantile_edges(self, m):
        return self._mean_quantiles(m)

"""The Dask engine: fit, predict and audit on a Dask DataFrame (partitioned Parquet, a LocalCluster or a
real scheduler). Imported lazily; needs ``pip install 'mmc-audit[dask]'`` (dask[dataframe] + distributed).

Why one module of ~1,100 lines: the worker-side partition state, the client-side engine that the descent
drives through the CellStats seam, the distributed quantiles, and fit / predict / audit on Dask share one
private protocol (what a worker holds and what crosses the wire); keeping it in one file keeps that
protocol in one place, and nothing else in mmc_core imports it.

How it maps onto the descent's seam (:class:`mmc_core.descent.CellStats`):

* Every row partition becomes one :class:`_Part` object that lives on a worker for the whole fit. It holds
  the partition's labels, its group membership (evaluated per partition from the same
  :class:`~mmc_core.groups.GroupSet`), its predictions and moment columns, and a numpy
  :class:`~mmc_core.descent.CellState` that keeps the partition's (group x cell) sums up to date
  incrementally. The partitions (Dask's own: ``ddf.to_delayed()``) are assigned round robin to one Dask
  *actor* per worker (``client.submit(..., actor=True)``), which computes them there and keeps them: actor
  state is never spilled, moved or recomputed behind our back, and an actor call is one direct round trip.
  Rows never leave the workers.
* Per update the client ships the update (a group id, a few cell ids and deltas: a small array) to every
  worker; each applies it to its partitions' rows and returns the sum of their cell sums (the first level of
  the reduction, on the worker); the client adds the workers' sums (the second). The descent (audit, choice
  of the next update, stopping rules) runs on the client on those sums, exactly as with the numpy engine.
  Held-out rows (early stopping) sit in the same partition objects and are updated by the same call. The
  ratio step's denominators (per-cell sums of the moment predictions) are kept with the other sums, so an
  update is one round trip.
* Prediction is a replay of the model's log, which is row-local: ``map_partitions`` with the numpy replay,
  so predictions equal those of the numpy engine bit for bit, whichever engine fitted the model.

What differs from the numpy engine (and why):

* Sums are added in another order (per partition, then across partitions), so cell statistics and the
  update deltas computed from them may differ in the last bits; the update sequence is the same unless two
  cells tie to ~1e-15, and predictions agree to ~1e-12 (tests check 1e-9).
* The calibration split (``calibration_fraction > 0``) is drawn per partition (seeded by ``random_state``
  and the partition's index: round(fraction x rows) held-out rows in each partition), not by one global
  permutation: with held-out rows the two engines fit on different rows. Early stopping and held-out
  tracking run distributed; the interval calibration runs on the client on the held-out rows (a seeded
  sample of at most ``CAL_SAMPLE_CAP`` of them, recorded in ``info``). The numpy engine's
  ``interval_calibration="auto"`` cross-fits the calibration over every row (5 extra fits); here "auto" keeps the
  held-out calibration (the record says ``"rows": "held-out"``) and "cross-fit" is an MMCError.
* Quartile cuts of numeric group columns (:func:`groups_from_columns`) are *exact* (the same cut points as
  numpy's ``np.quantile``): an approximate sketch brackets each order statistic and the few values inside
  the bracket are brought to the client. ``mean_buckets="quantile"`` with a base prediction uses the same
  exact quantiles.
* The group-linear map of the base (``base_recalibration`` "auto") and the shrunken cell corrections are fitted
  on the client, on samples of at most ``recalibrate.CV_MAX_ROWS`` fitting and held-out rows brought from the
  workers (each row's groups, label and prediction): the numpy engine fits them on the same samples
  (``recalibrate.capped``), drawn here over the rows in partition order, so without held-out rows the map and
  the whole model are the numpy engine's. The map and the cells are then applied on the workers. The affine
  map is refused.
* Nothing of our own schedules, shards or pools: partitions, workers, actors and tasks are Dask's.
* A worker lost mid-fit loses its actor's partitions: the next update fails with a clear error (run again).
"""

from __future__ import annotations

import json
import math
import time

from typing import Any

import numpy as np

from ..descent import CellState, CellStats
from ..errors import DataError, GroupDefinitionError, MMCError
from ..metrics import residual_variance
from ..tables import to_label_array

__all__ = [
    "fit_dask",
    "predict_dask",
    "audit_tables_dask",
    "groups_from_columns",
    "exact_quantiles",
    "read_parquet",
    "start_client",
    "is_dask_collection",
    "CAL_SAMPLE_CAP",
]

CAL_SAMPLE_CAP = 1_000_000  # held-out rows brought to the client for interval calibration (a seeded sample)
FAN_IN = 8  # tree reduction: partial sums combined 8 at a time
SKETCH = 1025  # per-partition quantile sketch size of the exact quantiles


def _require():
    try:
        import dask.dataframe  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        raise MMCError(
            f"the Dask engine needs dask[dataframe] and distributed ({e}); "
            "install them with: pip install 'mmc-audit[dask]'"
        ) from None


def is_dask_collection(x) -> bool:
    """Whether ``x`` is a Dask DataFrame / Series (checked without importing dask)."""
    return type(x).__module__.split(".")[0] in ("dask", "dask_expr") and hasattr(x, "npartitions")


def _client(client=None):
    _require()
    if client is not None:
        return client
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        raise MMCError(
            "the Dask engine needs a distributed client: start one (distributed.Client(...) or "
            "Client(LocalCluster(...))) or pass client="
        ) from None


# ---- per-partition state (lives on a worker) ------------------------------------------------------------
def _sums(st) -> list | None:
    """A CellState's (group x cell) sums as a flat list (None where a sum is not kept)."""
    if st is None:
        return None
    out = [st.S0, st.C0, st.Q0]
    for a in st.p.moments:
        out += [st.SA[a], st.CA[a], st.TA[a], st.QA.get(a), st.UA.get(a)]
    return out


def _add(*items):
    """Elementwise sum of sums lists (or of (fit, holdout) pairs of them, or of numbers)."""
    items = [x for x in items if x is not None]
    if not items:
        return None
    first = items[0]
    if isinstance(first, tuple):
        return tuple(_add(*(x[i] for x in items)) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _add(*(x[k] for x in items)) for k in first}
    if isinstance(first, list):
        return [None if first[i] is None else _sum_arrays([x[i] for x in items]) for i in range(len(first))]
    return sum(items[1:], first)


def _sum_arrays(arrs):
    out = np.array(arrs[0], dtype=float, copy=True)
    for a in arrs[1:]:
        out += a
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
        from ..tables import to_label_array

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
        """The group-linear map (fitted on the client, :mod:`mmc_core.recalibrate`) applied to the initial mean."""
        from ..recalibrate import group_linear_base

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
        return _sketch(self.mu0_f)

    def mu0_bracket(self, lo, hi):
        return _bracket(self.mu0_f, lo, hi)

    def moments_pass1(self, moments, odd):
        from ..moments import pseudo_label

        r = self.yu_f - self.mu0_f
        out = {"resid": float(r.sum()), "sizes": self.memb_f.sizes.astype(np.int64), "label": {}, "gsum": {}}
        for a in moments:
            lab = pseudo_label(a, r, odd)
            out["label"][a] = float(lab.sum())
            out["gsum"][a] = self.memb_f.sums().group_sums(lab, row_order=True)
        return out

    def moments_pass2(self, moments, odd, means):
        from ..moments import pseudo_label

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
        from ..cells import apply_cells

        self.kept = (apply_cells(self.kept[0], self.memb_f.sums(), cells), self.kept[1])
        self.kept_h = None
        return None

    def apply_moment_cells(self, a, cell, bounds):
        from ..cells import apply_moment_cells

        moms = dict(self.kept[1])
        moms[a] = apply_moment_cells(moms[a], self.memb_f.sums(), cell, bounds)
        self.kept = (self.kept[0], moms)  # the held-out moments stay: each moment's cells are judged on its own
        return None

    def achieved_sums(self, plain_params):
        mu, moms = self.kept
        st = CellState(plain_params, self.memb_f, self.yu_f, mu, moms)
        return [st.S0] + [st.SA[a] for a in plain_params.moments] + [st.TA[a] for a in plain_params.moments]

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
        return _add(*(getattr(p, method)(*args) for p in self.parts))

    def each(self, method, *args):
        return [(p.index, getattr(p, method)(*args)) for p in self.parts]

    def clear(self):
        self.parts = []


class _Parts:
    """The partition objects of one fit, in one actor per worker: map a method, reduce the results."""

    def __init__(self, client, delayed, *args):
        workers = sorted(client.scheduler_info().get("workers", {}))
        if not workers:
            raise MMCError("the Dask cluster has no workers")
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
        return _add(*self._wait([a.reduce(method, *args) for a in self.actors]))

    def gather(self, method, *args):
        """Per-partition results, in partition order."""
        out = [r for rs in self._wait([a.each(method, *args) for a in self.actors]) for r in rs]
        return [v for _, v in sorted(out, key=lambda t: t[0])]

    def close(self):
        try:
            self._wait([a.clear() for a in self.actors])
        except Exception:  # noqa: BLE001 - the cluster may already be gone
            pass
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
        from ..descent import WHOLE

        return np.array([blk.sum()]) if partition == WHOLE else blk

    def snapshot_predictions(self):
        return {}  # the kept round's predictions are replayed on the workers after the descent


class _Engine:
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
class _DaskFitStats:
    """The figures ``MomentMulticalibrator._build_params`` chooses thresholds and grids from, by reductions."""

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


def _as_column(ddf, v, name):
    """A column name, or a Dask Series of the same frame added as a column: (frame, column name)."""
    if v is None:
        return ddf, None
    if isinstance(v, str):
        if v not in ddf.columns:
            raise DataError(f"{name} column '{v}' is not in the data")
        return ddf, v
    if is_dask_collection(v):
        col = f"__mmc_{name.replace(' ', '_')}__"
        return ddf.assign(**{col: v}), col
    raise MMCError(f"with a Dask DataFrame, {name} must be a column name or a Dask Series of the same frame")


def fit_dask(
    est, X, y, groups=None, base_prediction=None, callback=None, label_name=None, base_name=None, stop=None, client=None
):
    """``MomentMulticalibrator.fit`` on a Dask DataFrame (``y`` / ``base_prediction``: column names or Dask
    Series of the same frame). Same model JSON, same descent; see the module docstring for what differs."""
    from ..thresholds import validate_params
    from ..groups import GroupSet

    _require()
    # the group-linear map ("auto", the default) is fitted on a client-side sample, as the numpy engine fits it;
    # the affine map only in memory
    from ..recalibrate import BASE_RECALIBRATIONS

    if est.base_recalibration not in BASE_RECALIBRATIONS:
        raise MMCError(
            f"base_recalibration must be one of {', '.join(map(repr, BASE_RECALIBRATIONS))}, got "
            f"{est.base_recalibration!r}"
        )
    if not isinstance(est.shrunken_cells, (bool, np.bool_)):
        raise MMCError(f"shrunken_cells must be True or False, got {est.shrunken_cells!r}")
    if est.base_recalibration == "affine":
        raise MMCError(
            f"base_recalibration={est.base_recalibration!r} is not supported by the Dask engine yet"
            " (use the numpy engine, or base_recalibration='none')"
        )
    if getattr(est, "interval_calibration", "auto") == "cross-fit":
        raise MMCError(
            "interval_calibration='cross-fit' is not supported by the Dask engine (it calibrates the intervals on "
            "the held-out rows only): use interval_calibration='auto' or 'held-out', or the numpy engine"
        )
    client = _client(client)
    validate_params(
        est.alpha,
        est.beta,
        est.n_buckets,
        est.n_moments,
        est.step,
        est.odd_moments,
        est.calibration_fraction,
        est.max_rounds,
        est.mean_buckets,
        est.moment_buckets,
        est.early_stopping,
    )
    if not is_dask_collection(X):  # engine="dask" on an in-memory table: label / base may be arrays
        import dask.dataframe as dd
        import pandas as pd

        X = X.copy() if isinstance(X, pd.DataFrame) else pd.DataFrame(X)
        if y is not None and not isinstance(y, str):
            X["__mmc_label__"], y = np.asarray(y, dtype=float), "__mmc_label__"
        if base_prediction is not None and not isinstance(base_prediction, str):
            X["__mmc_base__"], base_prediction = np.asarray(base_prediction, dtype=float), "__mmc_base__"
        X = dd.from_pandas(X, npartitions=max(2, len(client.scheduler_info().get("workers", {})) or 2))
    X, ycol = _as_column(X, y, "label")
    if ycol is None:
        raise MMCError("y (the label) is required")
    X, bcol = _as_column(X, base_prediction, "base prediction")
    label_name = label_name or (ycol if not ycol.startswith("__mmc_") else "label")
    if (
        bcol is not None
        and base_name is None
        and isinstance(base_prediction, str)
        and not base_prediction.startswith("__mmc_")
    ):
        base_name = base_prediction
    gset = GroupSet.coerce(groups)
    missing = sorted(c for c in gset.columns() if c not in X.columns)
    if missing:
        raise GroupDefinitionError(f"group column(s) not in the data: {', '.join(missing)}")
    frac = float(est.calibration_fraction)
    seed = est.random_state
    parts = _Parts(client, X.to_delayed(), ycol, bcol, gset, frac, seed, [])
    try:
        return _fit_on_parts(est, parts, gset, bcol, label_name, base_name, callback, stop, frac, seed)
    finally:
        parts.close()


def _fit_on_parts(est, parts, gset, bcol, label_name, base_name, callback, stop, frac, seed):
    import dataclasses

    from .. import intervals
    from ..buckets import inner_edges
    from ..fit_steps import FitRows, cells_keep_given, check_held_out, fit_info, search_buckets, state_achieved
    from ..model import FittedModel
    from ..moments import LabelScale

    t_load = time.perf_counter()
    summ = parts.gather("summary")
    n = sum(s["n"] for s in summ)
    nf = sum(s["nf"] for s in summ)
    n_cal = sum(s["nc"] for s in summ)
    if n < 2:
        raise DataError(f"need at least 2 rows to fit, got {n}")
    early = check_held_out(est, frac, n, nf, n_cal)
    if est.label_range is None:
        scale = LabelScale.from_observed(min(s["ymin"] for s in summ), max(s["ymax"] for s in summ))
    else:
        scale = LabelScale.declared(est.label_range)
    bname = f"base prediction '{base_name}'" if base_name else "base prediction"
    sc = parts.map_reduce("set_scale", scale, label_name, bname)
    mean_fit = sc["sum_yu_f"] / nf
    parts.gather("set_initial_mean", mean_fit)
    n_fit_parts, n_cal_parts = [s["nf"] for s in summ], [s["nc"] for s in summ]
    within = None
    if bcol is not None and est.base_recalibration in ("auto", "group-linear"):
        from ..recalibrate import fit_group_linear

        # the numpy engine's own samples (recalibrate.capped, seeds 0 and 7), drawn here over the rows in
        # partition order: on the same fitting rows the same map
        sums_s, y_s, b_s = _client_sample(parts, gset, "fit", n_fit_parts, 0, "start")
        held = None
        if n_cal:
            sums_h, y_h, b_h = _client_sample(parts, gset, "held", n_cal_parts, 7, "start")
            held = (y_h, b_h, sums_h)
        within = fit_group_linear(y_s, b_s, sums_s, held)
        if within["validation"]["kept"]:
            parts.gather("apply_map", within)
    moments = tuple(range(2, int(est.n_moments) + 1))
    G = len(gset)

    def mean_quantiles(m):
        if bcol is None:
            return ()  # a constant initial mean: no quantile edges (as numpy's quantile_edges)
        qs = exact_quantiles(
            lambda: parts.gather("mu0_sketch"),
            lambda lo, hi: parts.gather("mu0_bracket", lo, hi),
            np.arange(1, m) / m,
            nonempty_range=True,
        )
        return () if qs is None else inner_edges(qs, 0.0, 1.0)

    stats = _DaskFitStats(parts, moments, est.odd_moments, nf, mean_quantiles)
    load_seconds = time.perf_counter() - t_load

    def start(m):
        params, init_moments = est._build_params(m, G, nf, moments, None, None, None, stats=stats)
        eng = _Engine(parts, params, init_moments, nf, n_cal)
        return params, init_moments, eng.fit, eng.holdout

    search = search_buckets(est, start, callback, stop, early)
    score, m, params, init_moments, res, kept_round = search.runs[search.best]

    if bcol is None:
        init_mean = {"kind": "constant", "value": float(mean_fit)}
    elif within is not None and within["validation"]["kept"]:
        init_mean = {"kind": "base-group-linear", "column": base_name, **within}
    else:
        init_mean = {"kind": "base", "column": base_name}
    log = res.log[: res.round_ends[kept_round]] if res.round_ends else res.log
    model = FittedModel(params, scale, gset, init_mean, init_moments, list(log), list(res.round_ends[: kept_round + 1]))
    last_run = search.best == len(search.runs) - 1
    if not last_run:
        parts.gather("start", params, init_moments)  # the chosen m's initial state, then its kept log
    replay = not (last_run and kept_round == len(res.round_ends) - 1)
    parts.gather("kept_predictions", model, len(log), replay)
    cells_check = moment_cells_check = None
    if est.shrunken_cells and n_cal and not (res.stopped or (stop is not None and stop())):
        from ..cells import gated_cells

        # as the numpy engine: fitted on a sample of the fitting rows (seed 11), the penalty and weight chosen on
        # one of the held-out rows (seed 13) with the kept model's predictions there
        parts.gather("held_predictions", model)
        sums_s, y_s, mu_s = _client_sample(parts, gset, "fit", n_fit_parts, 11, "kept")
        sums_h, y_h, mu_h = _client_sample(parts, gset, "held", n_cal_parts, 13, "held")
        cells, cells_check = gated_cells(y_s, mu_s, sums_s, (y_h, mu_h, sums_h))
        if cells is not None:
            model.cells = cells
            parts.gather("apply_cells", cells)
        moment_cells_check = _moment_cells(parts, model, gset, n_fit_parts, n_cal_parts)
    plain = dataclasses.replace(params, z=0.0, z_group=0.0, min_count=0)
    K = len(plain.moments)

    def up(v):
        return float(min(max(v * (1 + 1e-9) + 1e-15, 1e-7), 0.999))

    def achieved_now() -> dict:
        sums = parts.map_reduce("achieved_sums", plain)
        worst = max(float(np.abs(s).max(initial=0.0)) for s in sums[: 1 + K])
        return {
            "alpha": up(worst / max(nf, 1)),
            "betas": {
                a: up(float(np.abs(sums[1 + K + i]).max(initial=0.0)) / max(nf, 1)) for i, a in enumerate(plain.moments)
            },
        }

    achieved = achieved_now()
    if not cells_keep_given(est, model, params, achieved, cells_check, moment_cells_check):
        parts.gather("kept_predictions", model, len(log), True)  # the kept log alone, without the cell steps
        achieved = achieved_now()
    _, floors = state_achieved(est, model, params, achieved)
    if (model.has_cells or model.has_moment_cells) and 0 <= kept_round < len(res.history):
        res.history[kept_round]["cells_max_mean_violation"] = achieved["alpha"]
    cal_rows = 0
    if n_cal:
        rate = min(1.0, CAL_SAMPLE_CAP / n_cal)
        pieces = [p for p in parts.gather("calibration_sample", rate, seed) if p is not None]
        cols = pieces[0][0].keys()
        table = {c: np.concatenate([p[0][c] for p in pieces]) for c in cols}
        yu_c = np.concatenate([p[1] for p in pieces])
        base_c = None if bcol is None else np.concatenate([p[2] for p in pieces])
        cal_rows = int(yu_c.size)
        model.extras["intervals"] = intervals.calibrate(model, table, yu_c, base_c)
    rows = FitRows(n, nf, n_cal, stats.sizes, sc["base_clipped"], label_name)
    model.info = {
        **fit_info(est, model, search, rows, achieved, floors),
        "engine": {
            "name": "dask",
            "partitions": parts.n_partitions,
            "workers": len(parts.actors),
            "load_seconds": float(load_seconds),
            "calibration_split": "per partition (seeded by seed and partition index)",
            "interval_calibration_rows": cal_rows,
        },
    }
    if cells_check is not None:
        model.info["shrunken_cells"] = cells_check
    if moment_cells_check:
        model.info["moment_cells"] = moment_cells_check
    if within is not None:  # the out-of-sample check of the group-linear map, kept or not
        model.info["base_recalibration"] = {"method": "group-linear", "ridge": within["ridge"], **within["validation"]}
    est._set_fitted(model)
    est._clear_row_state()  # rows stay on the workers (per-partition split)
    return est


def _moment_cells(parts, model, gset, n_fit_parts, n_cal_parts) -> dict | None:
    """The moments' cell corrections as the numpy engine fits them (``MomentMulticalibrator._moment_cells``): on a
    sample of the fitting rows (seed 17) around the final mean, judged on one of the held-out rows (seed 19) with
    the model's final predictions there; applied on the workers. Returns the checks per moment (or None)."""
    from ..cells import gated_moment_cells
    from ..moments import pseudo_label

    p = model.params
    if not p.moments or p.moment_step != "ratio":
        return None
    parts.gather("held_predictions", model)  # with the mean's cells, if kept
    checks = {}
    # the same seeded rows for every moment: the label and final mean once, each moment's prediction per moment
    sums_s, y_s, mu_s = _client_sample(parts, gset, "fit", n_fit_parts, 17, "kept")
    sums_h, y_h, mu_h = _client_sample(parts, gset, "held", n_cal_parts, 19, "held")
    for a in p.moments:
        _, _, v_s = _client_sample(parts, gset, "fit", n_fit_parts, 17, ("kept", a))
        _, _, v_h = _client_sample(parts, gset, "held", n_cal_parts, 19, ("held", a))
        s_s, s_h = pseudo_label(a, y_s - mu_s, p.odd_moments), pseudo_label(a, y_h - mu_h, p.odd_moments)
        cell, checks[str(a)] = gated_moment_cells(s_s, v_s, sums_s, (s_h, v_h, sums_h))
        if cell is not None:
            model.moment_cells = {**(model.moment_cells or {}), a: cell}
            parts.gather("apply_moment_cells", a, cell, p.projection(a))
    return checks


def _client_sample(parts, gset, which, n_per_part, seed, what):
    """A sample of the fitting (``which`` "fit") or held-out rows brought to the client, as
    :func:`mmc_core.recalibrate.capped` draws it from the rows in partition order (all of them up to
    ``CV_MAX_ROWS``; above, the rows ``rng(seed + 2).choice(n, CV_MAX_ROWS)`` in order): (its MembershipSums,
    the label, the prediction ``what``; unit scale). A few MB at most: the map and the cells have |G| + 7 and
    |G| x 10 coefficients, fitted as the numpy engine fits them."""
    from ..groups import Membership
    from ..recalibrate import CV_MAX_ROWS
    from ..sums import MembershipSums

    total = int(sum(n_per_part))
    if total > CV_MAX_ROWS:
        idx = np.sort(np.random.default_rng(seed + 2).choice(total, size=CV_MAX_ROWS, replace=False))
    else:
        idx = np.arange(total)
    offsets = np.concatenate([[0], np.cumsum(n_per_part)]).astype(np.int64)
    picks = {}
    for i in range(len(n_per_part)):
        lo, hi = np.searchsorted(idx, [offsets[i], offsets[i + 1]])
        if hi > lo:
            picks[i] = idx[lo:hi] - offsets[i]
    got = parts.gather("sample_rows", which, picks, what)
    counts = np.concatenate([g[0] for g in got]).astype(np.int64)
    groups = np.concatenate([g[1] for g in got]).astype(np.int64)
    y, x = np.concatenate([g[2] for g in got]), np.concatenate([g[3] for g in got])
    n = int(counts.size)
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    order = np.lexsort((row, groups))  # group-major, rows increasing within a group (Membership's layout)
    names = list(gset.names)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(groups, minlength=len(names)))]).astype(np.int64)
    rows = row[order].astype(np.int32 if n < 2**31 else np.int64)
    return MembershipSums(Membership(n, names, indptr, rows)), y, x


# ---- exact quantiles and groups from columns -----------------------------------------------------------------
def _sketch(v):
    v = np.asarray(v, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return 0, None, math.inf, -math.inf
    return int(v.size), np.quantile(v, np.linspace(0.0, 1.0, SKETCH)), float(v.min()), float(v.max())


def _bracket(v, lo, hi):
    v = np.asarray(v, dtype=float)
    v = v[np.isfinite(v)]
    return int(np.count_nonzero(v < lo)), np.sort(v[(v >= lo) & (v <= hi)])


def _lerp(a, b, t):
    """numpy's linear interpolation of np.quantile (``_lerp``), scalar form: the same arithmetic."""
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def exact_quantiles(sketches, brackets, qs, nonempty_range: bool = False):
    """``np.quantile(all finite values, qs)`` (method "linear"), bit for bit, over values spread across
    partitions (``sketches()``: per-partition (count, sketch, min, max) from :func:`_sketch`; ``brackets(lo,
    hi)``: per-partition (count below lo, sorted values in [lo, hi]) from :func:`_bracket`): one pass for per-partition sketches (which bracket each needed order statistic), one pass
    that counts the values below each bracket and brings the few inside it to the client (a bracket that
    misses is widened and the pass repeated, so the result is always exact). ``None`` when there are no
    values (or, with ``nonempty_range``, when all values are equal)."""
    sk = sketches()
    n = sum(s[0] for s in sk)
    if n == 0:
        return None
    vmin, vmax = min(s[2] for s in sk), max(s[3] for s in sk)
    if nonempty_range and not vmax > vmin:
        return None
    qs = np.asarray(qs, dtype=float)
    vi = (n - 1) * qs
    ranks = set()
    for v in vi:
        k = int(np.floor(v))
        k = min(max(k, 0), n - 1)
        ranks.update({k, min(k + 1, n - 1)})
    # approximate global CDF from the sketches: count(<= t) ~ sum_i n_i * F_i(t)
    pts = np.unique(np.concatenate([s[1] for s in sk if s[1] is not None]))
    if pts.size > 20000:
        pts = pts[np.linspace(0, pts.size - 1, 20000).astype(int)]
    est = np.zeros(pts.size)
    fr = np.linspace(0.0, 1.0, SKETCH)
    for s in sk:
        if s[1] is not None:
            est += s[0] * np.interp(pts, s[1], fr, left=0.0, right=1.0)
    margin = n / (SKETCH - 1) + len(sk) + 2
    values = {}
    pending = sorted(ranks)
    widen = False
    while pending:
        r_lo, r_hi = pending[0], pending[-1]
        if widen:
            lo, hi = -math.inf, math.inf
        else:
            i_lo = np.searchsorted(est, r_lo - margin, side="left") - 1
            i_hi = np.searchsorted(est, r_hi + 1 + margin, side="left")
            lo = pts[i_lo] if i_lo >= 0 else -math.inf
            hi = pts[i_hi] if i_hi < pts.size else math.inf
        res = brackets(lo, hi)
        below = sum(r[0] for r in res)
        inside = np.sort(np.concatenate([r[1] for r in res]))
        left = []
        for r in pending:
            if below <= r < below + inside.size:
                values[r] = float(inside[r - below])
            else:
                left.append(r)
        pending = left
        widen = True
    out = []
    for v in vi:
        k = int(np.floor(v))
        if v >= n - 1:
            out.append(values[n - 1])
            continue
        k = max(k, 0)
        out.append(float(_lerp(values[k], values[k + 1], v - k)))
    return np.asarray(out)


def _cols_values(df, columns):
    from ..groups import table_column

    return {c: table_column(df, c) for c in columns}


def _uniques(cols, cap):
    out = {}
    for c, arr in cols.items():
        if arr.dtype.kind in "biuf":
            out[c] = ("num", np.unique(arr[np.isfinite(arr)])[: cap + 1])
        else:
            miss = np.equal(arr, None)
            out[c] = ("text", sorted({str(v) for v in arr[~miss]})[: cap + 1])
    return out


def _sketch_col(cols, c):
    return _sketch(cols[c])


def _bracket_col(cols, c, lo, hi):
    return _bracket(cols[c], lo, hi)


def groups_from_columns(ddf, columns, max_order: int = 1, max_values: int = 10, client=None):
    """``GroupSet.from_columns`` on a Dask DataFrame: the same groups, the same (exact) quartile cuts (the rule
    of :func:`mmc_core.groups.column_conditions`: one group per value, numeric columns with more than
    ``max_values`` distinct values cut at their quartiles)."""
    import dask

    from ..groups import GroupSet, numeric_conditions, text_conditions

    client = _client(client)
    columns = list(columns)
    for c in columns:
        if c not in ddf.columns:
            raise GroupDefinitionError(
                f"group column '{c}' is not in the data (columns: {', '.join(map(str, list(ddf.columns)[:30]))})"
            )
    futs = client.compute([dask.delayed(_cols_values, pure=False)(d, columns) for d in ddf.to_delayed()])
    per_col = {}
    try:
        us = client.gather([client.submit(_uniques, f, max(max_values, 200), pure=False) for f in futs])
        for c in columns:
            kinds = {u[c][0] for u in us}
            if len(kinds) > 1:
                raise GroupDefinitionError(f"group column '{c}' is numeric in some partitions and text in others")
            if kinds == {"num"}:
                distinct = np.unique(np.concatenate([u[c][1] for u in us]))
                edges = None
                if distinct.size > max_values:
                    qs = exact_quantiles(
                        lambda: client.gather([client.submit(_sketch_col, f, c, pure=False) for f in futs]),
                        lambda lo, hi: client.gather(
                            [client.submit(_bracket_col, f, c, lo, hi, pure=False) for f in futs]
                        ),
                        np.linspace(0, 1, 5)[1:-1],
                    )
                    vmin = float(distinct[0]) if distinct.size else 0.0
                    edges = [float(q) for q in np.unique(qs) if q > vmin] if qs is not None else []
                per_col[c] = numeric_conditions(c, distinct, edges)
            else:
                per_col[c] = text_conditions(c, sorted(set().union(*(set(u[c][1]) for u in us))), counted_to=200)
    finally:
        for f in futs:
            f.release()
    return GroupSet.from_columns(None, columns, max_order, max_values, conditions=per_col)


# ---- prediction and audit tables ----------------------------------------------------------------------------
def _predict_frame(df, model_json, base_col, moments):
    import pandas as pd

    from ..model import FittedModel

    model = _model_cache(model_json, FittedModel)
    base = None if base_col is None else to_label_array(df[base_col], f"prediction column '{base_col}'")
    if len(df) == 0:
        out = {"mean": np.zeros(0)}
        out.update({f"moment_{a}": np.zeros(0) for a in moments})
    else:
        out = model.predict(df, base)
    res = df.copy()
    for k, v in out.items():
        res[k] = v
    return pd.DataFrame(res)


_MODELS: dict = {}


def _model_cache(text, cls):
    key = hash(text)
    if key not in _MODELS:
        if len(_MODELS) >= 4:  # a comparison alternates between two models: keep both
            _MODELS.clear()
        _MODELS[key] = cls.from_json(text)
    return _MODELS[key]


def predict_dask(model, ddf, base_col=None):
    """The model's predictions (label units) as new columns ``mean``, ``moment_a`` of a Dask DataFrame: the
    numpy replay per partition (row-local, so identical to predicting the whole table at once)."""
    _require()
    import dask

    if model.uses_base and base_col is None:
        col = model.init_mean.get("column")
        raise DataError(f"this model was fitted on top of a base prediction ({col}); pass it (--pred COL)")
    missing = sorted(c for c in model.groups.columns() if c not in ddf.columns)
    if missing:
        raise DataError(f"the data lacks group column(s) the model needs: {', '.join(missing)}")
    meta = ddf._meta.copy()
    meta["mean"] = np.zeros(0)
    for a in model.moments:
        meta[f"moment_{a}"] = np.zeros(0)
    text = dask.delayed(model.to_json(), pure=True)
    return ddf.map_partitions(
        _predict_frame, text, base_col if model.uses_base else None, tuple(model.moments), meta=meta
    )


def _tree_sum(parts: list):
    """The elementwise sum (:func:`_add`) of the partitions' delayed results, added FAN_IN at a time up a tree
    (never all on one worker), computed."""
    import dask

    while len(parts) > 1:
        parts = [dask.delayed(_add, pure=False)(*parts[i : i + FAN_IN]) for i in range(0, len(parts), FAN_IN)]
    return parts[0].compute()


def _audit_part(df, model_json, label, base_col):
    from ..descent import CellState
    from ..model import FittedModel

    model = _model_cache(model_json, FittedModel)
    n = len(df)
    if getattr(model, "task", "regression") == "binary":  # through the model's own classes (positive class 0...)
        from ..binary import binary_labels

        y = binary_labels(model, df[label], f"label '{label}'") if n else np.zeros(0)
    else:
        try:
            y = df[label].to_numpy(dtype=float)
        except (TypeError, ValueError):  # text on the workers: the in-memory engine's words, not a worker's crash
            raise DataError(f"label '{label}' is not numeric (found non-numeric values)") from None
    if n and not np.all(np.isfinite(y)):
        raise DataError(f"label '{label}' has missing or infinite values")
    base_u = None
    if model.uses_base:
        base = to_label_array(df[base_col], f"prediction column '{base_col}'") if n else np.zeros(0)
        base_u = np.clip((base - model.scale.lo) / model.scale.span, 0.0, 1.0)
    memb = model.groups.evaluate(df, n)
    mu, moms = model.initial(n, base_u, memb)
    model.replay(memb, mu, moms)
    yu = (y - model.scale.lo) / model.scale.span
    import dataclasses

    plain = dataclasses.replace(model.params, z=0.0, z_group=0.0, min_count=0)
    st = CellState(plain, memb, yu, mu, moms)
    gs = memb.sums().group_sums

    out = [float(n), gs(None), gs(yu), gs(yu * yu), gs(mu), gs((yu - mu) ** 2), st.S0, st.C0]
    for a in model.moments:
        out += [gs(moms[a]), st.TA[a], st.CA[a], st.SA[a]]
    return out


def audit_tables_dask(model, ddf, label, base_col=None):
    """Per-group audit tables of a model on labelled Dask rows, by the descent's reductions: per group the
    count, mass, mean label / prediction, the empirical and predicted variance, and the worst mass-weighted
    calibration error over the mean cells G(mu, i) and each moment's cells G(mu, m_a, i, j) (the paper's
    audit statistics: the alpha / beta the model achieves on these rows). Returns a JSON-ready dict."""
    _require()
    if label not in ddf.columns:
        raise DataError(f"label column '{label}' is not in the data")
    if model.uses_base and base_col is None:
        raise DataError("this model was fitted on a base prediction: pass it (--pred COL)")
    missing = sorted(c for c in model.groups.columns() if c not in ddf.columns)
    if missing:
        raise DataError(f"the data lacks group column(s) the model needs: {', '.join(missing)}")
    import dask

    text = dask.delayed(model.to_json(), pure=True)
    parts = [dask.delayed(_audit_part, pure=False)(d, text, label, base_col) for d in ddf.to_delayed()]
    tot = _tree_sum(parts)
    return _audit_json(model, tot)


def _compare_side(df, kind, src, name, base_col, method=None, delta=0.1, threshold=None):
    """One side on a partition's rows, built as the in-memory engine builds it (:func:`mmc_core.compare.side`):
    a column's mean (its decisions at ``threshold``), or a model's mean, variance, its ``method`` intervals at
    ``delta`` (none when ``method`` is None) and a classifier's decisions (at ``threshold``, default 0.5)."""
    from ..compare import Side, side
    from ..model import FittedModel

    if kind == "column":
        return side(to_label_array(df[src], f"prediction column '{src}'"), name=name, threshold=threshold)
    model = _model_cache(src, FittedModel)
    base = to_label_array(df[base_col], f"prediction column '{base_col}'") if model.uses_base else None
    if method is not None:
        return side(model, df, name=name, base=base, method=method, delta=delta, threshold=threshold)
    pred = model.predict(df, base)
    if getattr(model, "task", "regression") == "binary" and threshold is None:
        threshold = 0.5
    dec = None if threshold is None else (np.asarray(pred["mean"]) >= threshold).astype(float)
    return Side(name, np.asarray(pred["mean"], float), pred.get("moment_2"), decision=dec)


def _side_labels(df, specs, label, sides):
    """The partition's labels as the in-memory command reads them: through the first classifier model's own
    positive class when a side is a classifier model, else the numbers; 0/1 when a side has decisions."""
    from ..model import FittedModel

    binary = [
        m
        for m in (_model_cache(src, FittedModel) for kind, src, _ in specs if kind == "model")
        if getattr(m, "task", "regression") == "binary"
    ]
    if binary:
        from ..binary import binary_labels

        y = binary_labels(binary[0], df[label], f"label '{label}'")
    else:
        y = to_label_array(df[label], f"label '{label}'")
    if any(s.decision is not None for s in sides) and not np.isin(y, (0.0, 1.0)).all():
        raise DataError("rates at a decision threshold need 0/1 labels; this label has other values")
    return y


def _side_sums(df, specs, label, base_col, opts, memb_of, cells_of, n_cells, has, target, shift, G):
    """Per (group, cell) sums (:func:`mmc_core.compare.cell_sums`) of the sides' quantities on one partition;
    zeros for an empty partition (nothing to predict)."""
    from ..compare import Layout, cell_sums

    lay = Layout(has, target)
    if len(df) == 0:
        C = G * n_cells
        return np.zeros(C), np.zeros((C, lay.K)), np.zeros((C, lay.K, lay.K))
    sides = [_compare_side(df, kind, src, name, base_col, *opts) for kind, src, name in specs]
    y = _side_labels(df, specs, label, sides)
    cells = cells_of(df)
    return cell_sums(memb_of(df).sums(), lay.rows(sides, y), cells, n_cells, shift)


def _compare_part(df, specs, label, base_col, opts, groups_json, has, target, shift):
    from ..groups import GroupSet

    gs = _model_cache(groups_json, GroupSet)
    return _side_sums(
        df,
        specs,
        label,
        base_col,
        opts,
        lambda d: gs.evaluate(d, len(d)),
        lambda d: None,
        1,
        has,
        target,
        shift,
        len(gs),
    )


def _plain_specs(ddf, specs, base_col):
    plain = []
    for kind, src, name in specs:
        if kind == "model":
            if src.uses_base and (base_col is None or base_col not in ddf.columns):
                raise DataError(f"model {name!r} was fitted on a base prediction: pass it (--pred COL)")
            plain.append((kind, src.to_json(), name))
        elif kind == "column":
            if src not in ddf.columns:
                raise DataError(f"prediction column '{src}' is not in the data")
            plain.append((kind, src, name))
        else:
            raise MMCError(f"a side is ('model', FittedModel, name) or ('column', column, name), got kind {kind!r}")
    return plain


ROW_LOCAL_NOTE = "the Dask engine forms intervals partition by partition"


def check_interval_method(model, method: str) -> None:
    """MMCError unless ``model``'s intervals by ``method`` can be formed partition by partition, as on the whole
    table: every method whose interval of a row depends on the model and that row only. ``multimoment`` chooses
    its cover over all rows at once; ``guaranteed`` and ``plugin`` choose their moment on the model's stored
    calibration quantiles (row-local), or lacking them on the predicted rows (not)."""
    from ..intervals import available_methods

    if getattr(model, "task", "regression") == "binary" or not model.moments:
        return  # no intervals: the in-memory side has none either
    if method not in available_methods(model):
        raise MMCError(
            f"interval method {method!r} is not available for this model "
            f"(available: {', '.join(available_methods(model))})"
        )
    if method == "multimoment":
        raise MMCError(
            f"interval method 'multimoment' is not offered with the Dask engine: its cover is chosen over all rows "
            f"at once and {ROW_LOCAL_NOTE} (use calibrated, split-conformal, mondrian or gaussian)"
        )
    if method in ("guaranteed", "plugin"):
        rec = model.extras.get("intervals") if isinstance(model.extras, dict) else None
        mq = rec.get("moment_quantiles") if isinstance(rec, dict) else None
        if not (isinstance(mq, dict) and all(str(a) in mq for a in model.moments)):
            raise MMCError(
                f"interval method {method!r} chooses its moment on the predicted rows for this model (it has no "
                f"stored calibration quantiles) and {ROW_LOCAL_NOTE}: use the numpy engine or another method"
            )


def _head_layout(ddf, plain, label, base_col, opts, delta):
    """The layout of the sides' quantities (what each side has) and one shift for every partition (the sums must
    add), both from the first rows: their means keep the covariances of values far from zero exact."""
    from ..compare import Layout

    head = ddf.head(1000, npartitions=-1)
    if not len(head):
        raise DataError("the data has no rows")
    sides = [_compare_side(head, k, s, n, base_col, *opts) for k, s, n in plain]
    lay = Layout.of(sides, 1 - delta)
    has = [(s.variance is not None, s.lower is not None, s.decision is not None) for s in sides]
    return lay, has, lay.rows(sides, _side_labels(head, plain, label, sides)).mean(axis=1)


def compare_dask(
    ddf,
    label,
    specs,
    groups,
    base_col=None,
    *,
    method: str | None = None,
    threshold: float | None = None,
    delta: float = 0.1,
    min_group_count: int = 30,
    error_control: str = "holm",
    level: float = 0.05,
):
    """:func:`mmc_core.compare.compare` on a Dask DataFrame, with the sides of :func:`mmc_core.compare.side`:
    per partition the per-group sums of both sides' residuals, squares, variances, interval coverage and width
    (the models' ``method`` intervals at ``delta``, formed row by row as in memory; None: no intervals, as
    ``mmc_core.compare.Side`` objects without ends; :func:`check_interval_method` says which methods can be
    formed partition by partition) and decisions at ``threshold`` (a
    classifier model's default 0.5; the labels then through its positive class), added with the fan-in tree of
    the audit; the comparison is then made from the totals. ``specs``: two (kind, source, name), kind "model"
    (source a FittedModel) or "column" (source a column name)."""
    _require()
    import dask

    from ..compare import compare_from_sums

    if label not in ddf.columns:
        raise DataError(f"label column '{label}' is not in the data")
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0 < threshold < 1):
        raise MMCError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")
    plain = _plain_specs(ddf, specs, base_col)
    for kind, src, _ in specs:
        if kind == "model" and method is not None:
            check_interval_method(src, method)
    missing = sorted(c for c in groups.columns() if c not in ddf.columns)
    if missing:
        raise DataError(f"the data lacks group column(s) the groups need: {', '.join(missing)}")
    opts = (method, delta, threshold)
    lay, has, shift = _head_layout(ddf, plain, label, base_col, opts, delta)
    gjson = json.dumps(groups.to_json())
    args = [dask.delayed(v, pure=True) for v in (plain, gjson)]
    parts = [
        dask.delayed(_compare_part, pure=False)(d, args[0], label, base_col, opts, args[1], has, 1 - delta, shift)
        for d in ddf.to_delayed()
    ]
    cnt, S1, S2 = _tree_sum(parts)
    names = list(groups.names)
    return compare_from_sums(
        cnt, S1, S2, shift, lay, names, tuple(n for _, _, n in specs), delta, min_group_count, error_control, level
    )


def _period_part(df, specs, label, base_col, opts, period_col, labels, has, target, shift):
    from ..model import FittedModel

    model = _model_cache(specs[0][1], FittedModel)
    return _side_sums(
        df,
        specs,
        label,
        base_col,
        opts,
        lambda d: model.groups.evaluate(d, len(d)),
        lambda d: np.searchsorted(labels, d[period_col].to_numpy()).astype(np.int64),
        len(labels),
        has,
        target,
        shift,
        len(model.groups),
    )


def periods_dask(
    model,
    ddf,
    label,
    period_col,
    base_col=None,
    *,
    method: str | None = None,
    threshold: float | None = None,
    reference: str = "previous",
    delta: float = 0.1,
    min_group_count: int = 30,
    error_control: str = "holm",
    level: float = 0.05,
):
    """:func:`mmc_core.compare.compare_periods` of a model on a Dask DataFrame: its mean, variance, ``method``
    intervals at ``delta`` (None: none) and a classifier's decisions at ``threshold`` (default 0.5; its rates
    per period and their changes); the distinct periods first (one pass), then per partition the
    per-(group, period) sums, added with the fan-in tree."""
    _require()
    import dask

    from ..compare import check_periods, periods_from_sums

    for what, col in (("label", label), ("period", period_col)):
        if col not in ddf.columns:
            raise DataError(f"{what} column '{col}' is not in the data")
    if model.uses_base and (base_col is None or base_col not in ddf.columns):
        raise DataError("this model was fitted on a base prediction: pass it (--pred COL)")
    if reference not in ("previous", "first"):
        raise MMCError(f"reference must be 'previous' or 'first', got {reference!r}")
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0 < threshold < 1):
        raise MMCError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")
    if method is not None:
        check_interval_method(model, method)
    missing, values = dask.compute(ddf[period_col].isna().sum(), ddf[period_col].drop_duplicates())
    if int(missing):
        raise DataError(f"period column '{period_col}' has {int(missing)} missing value(s): drop or fill them")
    labels = np.unique(values.to_numpy())
    check_periods(labels)
    plain = [("model", model.to_json(), "the model")]
    opts = (method, delta, threshold)
    lay, has, shift = _head_layout(ddf, plain, label, base_col, opts, delta)
    text = dask.delayed(plain, pure=True)
    parts = [
        dask.delayed(_period_part, pure=False)(
            d, text, label, base_col, opts, period_col, labels, has, 1 - delta, shift
        )
        for d in ddf.to_delayed()
    ]
    cnt, S1, S2 = _tree_sum(parts)
    return periods_from_sums(
        cnt,
        S1,
        S2,
        shift,
        lay,
        list(model.groups.names),
        labels,
        "the model",
        reference,
        min_group_count,
        error_control,
        level,
        delta,
    )


def _audit_json(model, tot):
    sc = model.scale
    n = tot[0]
    cnt, sy, syy, smu, sres2, S0, C0 = tot[1:8]
    G, m = cnt.size, model.params.m
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_label = sc.mean_from_unit(sy / cnt)
        mean_pred = sc.mean_from_unit(smu / cnt)
        emp_var = sc.moment_from_unit(residual_variance(sy - smu, sres2, cnt), 2)
        label_var = sc.moment_from_unit(np.maximum(syy / cnt - (sy / cnt) ** 2, 0.0), 2)
    worst_mean = np.abs(S0).reshape(G, m).max(axis=1) / n
    rows = {
        "group": list(model.groups.names),
        "count": cnt.astype(int).tolist(),
        "mass": (cnt / n).tolist(),
        "mean_label": mean_label.tolist(),
        "mean_pred": mean_pred.tolist(),
        "emp_var": emp_var.tolist(),
        "label_var": label_var.tolist(),
        "calib_error_worst_weighted": worst_mean.tolist(),
    }
    achieved_alpha = float(np.abs(S0).max() / n)
    betas = {}
    for i, a in enumerate(model.moments):
        spred, TA, CA, SA = tot[8 + 4 * i : 12 + 4 * i]
        with np.errstate(invalid="ignore", divide="ignore"):
            rows[f"pred_moment_{a}"] = sc.moment_from_unit(spred / cnt, a).tolist()
        rows[f"moment_{a}_error_worst_weighted"] = (np.abs(TA).reshape(G, m * m).max(axis=1) / n).tolist()
        achieved_alpha = max(achieved_alpha, float(np.abs(SA).max() / n))
        betas[str(a)] = float(np.abs(TA).max() / n)
    cells = [
        {
            "group": model.groups.names[g],
            "bucket": int(b),
            "count": int(C0[g * m + b]),
            "mass_weighted_residual": float(S0[g * m + b] / n),
        }
        for g in range(G)
        for b in range(m)
        if C0[g * m + b] > 0
    ]
    return _finite(
        {
            "format": "mmc-audit-tables",
            "version": 1,
            "engine": "dask",
            "n": int(n),
            "achieved": {"alpha": achieved_alpha, "betas": betas},
            "by_group": rows,
            "mean_cells": cells,
        }
    )


def _finite(obj):
    """JSON-ready: NaN / infinite numbers (empty groups) become null."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# ---- data and cluster (the CLI's edge) ---------------------------------------------------------------------
# what one partition (a Parquet row group) may take once read, on a worker: a 2.3 MB file of 2.5M x 202 zeros has
# row groups of 1M rows that decode to 1.6 GB each, read two at a time by two workers
MAX_PARTITION_BYTES = 256 * 10**6
MAX_PARTITIONS = 20_000


def _row_group_bytes(rg, names: set, text: set) -> int:
    """The memory of row group ``rg`` once read, over the columns ``names`` (``text``: those of text): 8 bytes a
    numeric cell, a text cell its characters twice (Arrow and pandas) and 16 bytes (offset and pointer)."""
    n, total = int(rg.num_rows), 0
    for c in range(rg.num_columns):
        col = rg.column(c)
        top = col.path_in_schema.split(".")[0]
        if top not in names:
            continue
        total += n * 16 + 2 * max(int(col.total_uncompressed_size), 0) if top in text else n * 8
    return total


def _check_complete(f: str, meta, complete: dict) -> None:
    """DataError when a column of ``complete`` (column -> (role, finite)) holds a missing value, or, when
    ``finite``, an infinite one, as the row groups' statistics in the footer of ``f`` record them (no row read;
    a column without statistics is checked when its rows are)."""
    import math
    import os

    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            if col.path_in_schema not in complete or col.statistics is None:
                continue
            role, finite = complete[col.path_in_schema]
            st = col.statistics
            where = f"{os.path.basename(f)}, row group {g + 1}"
            if st.has_null_count and st.null_count:
                raise DataError(
                    f"{role} '{col.path_in_schema}' has {st.null_count:,} missing value(s) ({where}); drop or fill "
                    "them first"
                )
            if finite and st.has_min_max and st.physical_type in ("FLOAT", "DOUBLE"):
                ends = [v for v in (st.min, st.max) if isinstance(v, float) and math.isinf(v)]
                if ends:
                    raise DataError(
                        f"{role} '{col.path_in_schema}' has infinite value(s) ({where}: {ends[0]:g}); drop or fix them "
                        "first"
                    )


def _check_fields(f: str, schema, complete: dict) -> None:
    """DataError for a file whose schema names a column twice (Dask failed reading it, a crash), or gives a label
    or prediction of ``complete`` (column -> (role, finite); finite: a number is needed) dates, times, lists, maps
    or structs (dates were fitted as nanosecond counts), as the in-memory engine refuses them
    (:func:`app.io.column_problem`)."""
    import os

    import pyarrow as pa

    from collections import Counter

    dups = sorted(n for n, k in Counter(fld.name for fld in schema).items() if k > 1)
    if dups:
        raise DataError(f"{os.path.basename(f)} has duplicate column name(s): {', '.join(dups[:5])}")
    for fld in schema:
        role, finite = complete.get(fld.name, (None, False))
        if not finite:
            continue
        t = fld.type
        if pa.types.is_temporal(t):
            why = f"it holds dates or times ({t}), not numbers"
        elif pa.types.is_nested(t):
            why = f"its cells hold {t} values, not single numbers"
        else:
            continue
        raise DataError(f"{role} '{fld.name}' cannot be used ({os.path.basename(f)}): {why}")


def read_parquet(pattern: str, columns=None, sized_columns=None, complete=None):
    """A Dask DataFrame over the Parquet files matching ``pattern`` (a glob or a folder): one clear error for
    a glob that matches nothing or files whose schemas differ (checked from the footers, no rows read), or a row
    group (a partition) that would take more than ``MAX_PARTITION_BYTES`` once read, over ``sized_columns`` (the
    columns the command uses; default ``columns``, or all). ``complete`` (column -> (role, finite)): columns that
    must have no missing (and, when ``finite``, no infinite) value, refused from the footers' statistics before
    any cluster starts (a label with a missing value was found on the workers only, after the progress lines)."""
    import glob
    import os

    _require()
    import dask.dataframe as dd

    files = sorted(glob.glob(os.path.join(pattern, "*.parquet")) if os.path.isdir(pattern) else glob.glob(pattern))
    if not files:
        raise DataError(f"--data {pattern!r} matches no Parquet files")
    import pyarrow.parquet as pq

    first, rows, groups = None, 0, 0
    for f in files:
        if not os.path.isfile(f):  # reading a FIFO's footer waited for a writer forever
            raise DataError(f"{f} is not a regular file (a folder, device, FIFO or socket); give Parquet files")
        try:
            meta = pq.read_metadata(f)
            schema = meta.schema.to_arrow_schema()
        except Exception as e:  # noqa: BLE001 - any unreadable file is a data error
            raise DataError(f"{f} is not a readable Parquet file ({type(e).__name__})") from None
        rows += meta.num_rows
        sig = [(fld.name, str(fld.type)) for fld in schema if not fld.name.startswith("__index_level_")]
        used = sized_columns if sized_columns is not None else columns
        names = {n for n, _ in sig} if used is None else set(used)
        text = {fld.name for fld in schema if not _fixed_width(fld.type)}
        groups += meta.num_row_groups
        _check_fields(f, schema, complete or {})
        if complete:
            _check_complete(f, meta, complete)
        for g in range(meta.num_row_groups):
            need = _row_group_bytes(meta.row_group(g), names, text)
            if need > MAX_PARTITION_BYTES:
                raise DataError(
                    f"{os.path.basename(f)}: row group {g + 1} would take about {need / 1e6:,.0f} MB in memory "
                    f"({meta.row_group(g).num_rows:,} rows x {len(names & {n for n, _ in sig})} column(s)); the "
                    f"limit for one partition is {MAX_PARTITION_BYTES / 1e6:,.0f} MB: write the file with smaller "
                    "row groups (pyarrow: row_group_size) or fewer columns"
                )
        if first is None:
            first = (f, sig)
        elif sig != first[1]:
            diff = sorted(set(sig) ^ set(first[1]))[:3]
            raise DataError(
                f"Parquet files have different schemas: {os.path.basename(f)} vs "
                f"{os.path.basename(first[0])} (differing columns: {', '.join(f'{a}:{b}' for a, b in diff)})"
            )
    if rows == 0:  # as the in-memory engine: nothing to fit, predict or audit
        raise DataError(f"--data {pattern!r} has a schema but no data rows")
    if groups > MAX_PARTITIONS:
        raise DataError(
            f"--data {pattern!r} has {groups:,} row groups; the limit is {MAX_PARTITIONS:,} (one partition each): "
            "write it with larger row groups"
        )
    # a partition a row group, which the limit above bounds: by default Dask joins row groups up to 256 MB of
    # their stored size, and zeros store in almost nothing (the 2.5M x 202 file was one 4 GB partition)
    return dd.read_parquet(files, columns=columns, split_row_groups=True)


def _fixed_width(t) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t))


def start_client(scheduler: str | None = None, workers: int = 2, memory_limit: str = "6GB", timeout: float = 20):
    """A distributed Client: connected to ``scheduler`` (clear error within ``timeout`` seconds when it does not
    answer), or to a new LocalCluster of ``workers`` processes (one thread each, ``memory_limit`` each). Returns
    (client, cluster or None); close both (``close_client``)."""
    _require()
    import logging

    from distributed import Client, LocalCluster

    for name in ("distributed", "distributed.comm", "distributed.core", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if scheduler:
        try:
            return Client(scheduler, timeout=timeout), None
        except (OSError, TimeoutError) as e:
            raise MMCError(f"--scheduler {scheduler}: no Dask scheduler answers there ({type(e).__name__})") from None
        except ValueError as e:
            raise MMCError(f"--scheduler {scheduler!r} is not a scheduler address ({e})") from None
    if not isinstance(workers, int) or workers < 1:
        raise MMCError(f"--workers must be a positive integer, got {workers!r}")
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=memory_limit,
        dashboard_address=None,
        silence_logs=logging.CRITICAL,  # a task's DataError reaches the user as one line, not a worker traceback
    )
    return Client(cluster), cluster


def close_client(client, cluster):
    for obj in (client, cluster):
        if obj is not None:
            try:
                obj.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

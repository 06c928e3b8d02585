"""The steps of a fit that both engines share (the numpy estimator and :mod:`mmc_core.engines.dask_engine`): the
statistics the thresholds are set from (:class:`FitStats`), the search over bucket counts with its kept round
(:func:`search_buckets`), the thresholds the fit achieved and states (:func:`state_achieved`), the checks of
the held-out rows, and the fit record (:func:`fit_info`). Apart from the estimator so that the Dask engine does
not import the module that dispatches to it."""

from __future__ import annotations

import dataclasses
import numbers
import time

import numpy as np

from ..common.errors import DataError, MMCError
from ..paper.buckets import quantile_edges
from ..paper.descent import descend
from ..paper.descent_params import DescentParams
from ..paper.moments import pseudo_label
from .sklearn_params import json_params
from .thresholds import effective_rule


def achieved_thresholds(params: DescentParams, memb, y, mu, moms) -> dict:
    """The smallest (alpha, beta_a) the predictions satisfy on these rows: just above the largest mass-weighted
    |residual| over the paper's cells G(mu, i), G(mu, m_a, i, j) (mean) and G(mu, m_a, i, j) (moment a).
    The sums are the descent's own (``CellState.full_recompute``), without building a second descent state."""
    m, mm, cell_sums = params.m, params.m * params.m, memb.sums().cell_sums
    y, mu = np.asarray(y, dtype=float), np.asarray(mu, dtype=float)
    res = mu - y
    bmu = params.mean_grid.index(mu)
    n = max(memb.n, 1)

    def up(v):
        return float(min(max(v * (1 + 1e-9) + 1e-15, 1e-7), 0.999))

    worst = np.abs(cell_sums(bmu, m, res)).max(initial=0.0)
    betas = {}
    for a in params.moments:
        mom = np.asarray(moms[a], dtype=float)
        cells = bmu * m + params.grid(a).index(mom)
        worst = max(worst, np.abs(cell_sums(cells, mm, res)).max(initial=0.0))
        t = mom - pseudo_label(a, y - mu, params.odd_moments)
        betas[a] = up(np.abs(cell_sums(cells, mm, t)).max(initial=0.0) / n)
    return {"alpha": up(worst / n), "betas": betas}


class FitStats:
    """The figures the thresholds, grids and floors are chosen from (see :func:`mmc_core.fit.fit_params.build_params`),
    from in-memory arrays. The Dask engine computes the same figures by reductions over partitions."""

    def __init__(self, resid, mu0, memb, moments, odd_moments):
        self.resid, self.mu0, self.memb, self.odd = resid, mu0, memb, odd_moments
        self.resid_std = float(np.std(resid))
        self.sizes = memb.sizes
        self._labels = {}

    @classmethod
    def from_arrays(cls, resid, mu0, memb, moments, odd_moments) -> FitStats:
        return cls(resid, mu0, memb, moments, odd_moments)

    def _label(self, a):
        if a not in self._labels:
            self._labels[a] = pseudo_label(a, self.resid, self.odd)
        return self._labels[a]

    def label_std(self, a) -> float:
        return float(np.std(self._label(a)))

    def label_mean(self, a) -> float:
        return float(np.mean(self._label(a)))

    def group_label_sums(self, a) -> np.ndarray:
        return self.memb.sums().group_sums(self._label(a), row_order=True)

    def mean_quantile_edges(self, m) -> tuple:
        return quantile_edges(self.mu0, m)


def state_achieved(est, model, params: DescentParams, achieved: dict) -> tuple:
    """(params, floors): the model's params state (alpha, beta) values that hold exactly on its fitting rows
    for the KEPT model, so that the paper's guarantees (and the guaranteed intervals) are stated truthfully:
    with the "se" rule what the kept model achieves; with a given number (or "auto") that threshold, unless the
    kept model misses it (early stopping kept an earlier round, or the run was stopped or capped), and then what
    it achieves. ``floors`` are the thresholds the descent used. Sets ``model.params``."""
    floors = {"alpha": params.alpha, "betas": {str(a): params.beta_for(a) for a in params.moments}}

    def stated(rule, given: float, got: float) -> float:
        return got if rule == "se" else max(given, got)

    alpha_a = stated(effective_rule(est.alpha, est.step), params.alpha, achieved["alpha"])
    betas = {
        a: stated(effective_rule(est.beta, est.step), params.beta_for(a), achieved["betas"][a]) for a in params.moments
    }
    if alpha_a != params.alpha or any(b != params.beta_for(a) for a, b in betas.items()):
        model.params = dataclasses.replace(
            params,
            alpha=alpha_a,
            beta=betas.get(2, params.beta),
            moment_betas=tuple((a, b) for a, b in betas.items() if a != 2),
        )
    return model.params, floors


def check_held_out(est, fraction, n: int, n_fit: int, n_cal: int) -> bool:
    """Whether early stopping is on, after checking that the split leaves rows for what needs them (shared by
    the in-memory fit and the Dask engine, which splits per partition)."""
    if fraction > 0 and (n_cal < 1 or n_fit < 2):
        raise DataError(f"calibration fraction {fraction} leaves too few rows (n={n})")
    if est.early_stopping is True and not n_cal:
        raise MMCError("early_stopping needs calibration_fraction > 0 (held-out rows to stop on)")
    if est.n_buckets == "auto" and not n_cal:
        raise MMCError("buckets 'auto' needs calibration_fraction > 0 (held-out rows to choose on)")
    return bool(n_cal) if est.early_stopping == "auto" else bool(est.early_stopping)


@dataclasses.dataclass(frozen=True)
class BucketSearch:
    """The descents of one fit, one per candidate bucket count m (``n_buckets="auto"``: 5, 10, 20, else the one
    given), and the one kept: the lowest held-out squared error at its kept round (the first on ties)."""

    runs: list  # (score, m, params, init_moments, DescentResult, kept_round) per candidate tried
    best: int  # index into runs
    seconds: float  # wall-clock of all the descents
    early: bool  # early stopping: each run keeps its best held-out round

    @property
    def res(self):
        return self.runs[self.best][4]

    @property
    def kept_round(self) -> int:
        return self.runs[self.best][5]


def search_buckets(est, plan, start, callback, stop) -> BucketSearch:
    """Run the descent once per bucket count of ``plan`` (a :class:`mmc_core.fit.plan.FitPlan`) and keep the best
    (shared by the in-memory fit and the Dask engine). ``start(m)`` -> (params, init_moments, fitting state,
    held-out state or None); the callback is passed only when there is a single candidate (its rounds are then the
    fit's rounds)."""
    candidates, early = plan.bucket_counts, plan.early_stopping
    t0 = time.perf_counter()
    runs = []
    for m in candidates:
        params, init_moments, state, holdout = start(m)
        res = descend(params, state, holdout, callback if len(candidates) == 1 else None, stop=stop, keep_best=early)
        kept = _best_round(res.history, given_limits(est, params)) if early else len(res.round_ends) - 1
        score = res.history[kept].get("holdout_mse", 0.0) if res.history else 0.0
        runs.append((score, m, params, init_moments, res, kept))
        if res.stopped:
            break
    best = min(range(len(runs)), key=lambda i: runs[i][0])
    return BucketSearch(runs, best, time.perf_counter() - t0, bool(early))


@dataclasses.dataclass(frozen=True)
class FitRows:
    """What a fit's ``info`` says about its rows (the in-memory fit and the Dask engine count them differently)."""

    n: int  # rows with a label
    n_fit: int  # rows the moments were fitted on
    n_cal: int  # held-out rows (early stopping, bucket choice, interval calibration)
    sizes: np.ndarray  # fitting rows per group
    base_clipped: int  # base predictions clipped to the label range
    label_name: str


def fit_info(est, model, search: BucketSearch, rows: FitRows, achieved, floors) -> dict:
    """The model's ``info`` record of one fit (shared by the in-memory fit and the Dask engine); ``model`` is the
    kept model with its stated params (after :func:`state_achieved`)."""
    res, kept_round, params, gset, runs = search.res, search.kept_round, model.params, model.groups, search.runs
    return {
        "mode": "practical (one fitting sample, audited exactly)",
        # converged: the descent ran until its audit found no violated cell (early stopping may then keep an
        # earlier round: "kept_round" / "early_stopped"; the achieved alpha / beta hold for the kept model)
        "converged": bool(res.converged),
        "run_converged": bool(res.converged),
        "early_stopped": bool(kept_round < len(res.round_ends) - 1),
        "achieved": {"alpha": achieved["alpha"], "betas": {str(a): b for a, b in achieved["betas"].items()}},
        "thresholds_used": floors,
        "z": params.z,
        "z_group": params.z_group,
        "min_count": params.min_count,
        "stopped_by_user": bool(res.stopped),
        "rounds": int(res.history[-1]["round"]) if res.history else 0,
        "kept_round": int(kept_round),
        "mean_updates": int(res.mean_updates),
        # the kept model's own (early stopping may keep fewer than the run made)
        "kept_mean_updates": sum(1 for u in model.log if u.target == 1),
        "moment_updates": int(res.moment_updates),
        # the descent made no moment update by design: the moments' cell step after it fits them
        "moments_left_to_cells": bool(params.z_moment >= 0),
        "max_moment_updates_per_call": int(res.max_moment_updates_per_call),
        "seconds": float(search.seconds),
        "n_rows": int(rows.n),
        "n_fit": int(rows.n_fit),
        "n_calibration": int(rows.n_cal),
        "calibration_fraction": float(est.calibration_fraction),
        "seed": est.random_state if isinstance(est.random_state, int) else None,
        "n_groups": len(gset),
        "empty_groups": [gset.names[g] for g in np.flatnonzero(rows.sizes == 0)],
        # groups the "se" rule can never correct (fewer fitting rows than its min_count): named so that a
        # converged fit on them is not read as "calibrated there"
        "small_groups": [
            gset.names[g] for g in np.flatnonzero((rows.sizes > 0) & (rows.sizes < int(params.min_count)))
        ],
        "base_clipped": int(rows.base_clipped),
        "label": rows.label_name,
        "early_stopping": bool(search.early),
        "buckets_rule": "auto" if est.n_buckets == "auto" else "given",
        "buckets_tried": {str(r[1]): float(r[0]) for r in runs} if len(runs) > 1 else {},
        "mean_buckets": est.mean_buckets,
        "moment_buckets": est.moment_buckets,
        "alpha_rule": effective_rule(est.alpha, est.step),
        "beta_rule": effective_rule(est.beta, est.step),
        "history": res.history,
        "estimator_params": json_params(_saved_params(est)),
    }


# Constructor parameters that say where fit finds its inputs, with their defaults: a model file keeps them only
# when set (a file of a fit without them is as before they existed); the groups themselves are in the model.
_INPUT_PARAMS = {"base_column": None, "max_order": 1}


def mark_after_cells(history: list, kept_round: int, model, achieved: dict) -> None:
    """Records on the kept round's history row the largest mean and moment violations of the model after its
    cell steps (``cells_max_mean_violation``, ``cells_max_moment_violation``): the stated alpha and beta are that
    model's, while the round's own values stay the descent's (with the moments left to the cell step, the
    descent's moment line never reaches the stated beta)."""
    if not 0 <= kept_round < len(history):
        return
    if model.has_cells or model.has_moment_cells:
        history[kept_round]["cells_max_mean_violation"] = achieved["alpha"]
    if model.has_moment_cells and achieved.get("betas"):
        history[kept_round]["cells_max_moment_violation"] = max(achieved["betas"].values())


def _saved_params(est) -> dict:
    """The constructor parameters a model file keeps (``info["estimator_params"]``)."""
    return {
        k: v
        for k, v in est.get_params(deep=False).items()
        if k != "groups" and not (k in _INPUT_PARAMS and v == _INPUT_PARAMS[k])
    }


def _best_round(history: list, limits: dict | None = None) -> int:
    """The round with the lowest held-out squared error of the mean (the earliest on ties), among the rounds
    whose fitting-row violations meet ``limits`` (:func:`given_limits`) when any does."""
    if not history:
        return 0
    mse = np.array([h.get("holdout_mse", np.inf) for h in history], dtype=float)
    ok = np.array([meets(h.get("max_mean_violation"), h.get("max_moment_violation"), limits) for h in history])
    return int(np.argmin(np.where(ok, mse, np.inf))) if ok.any() else int(np.argmin(mse))


def given_limits(est, params: DescentParams) -> dict:
    """The thresholds the user gave as numbers (the paper's alpha and beta, which the fit must then meet on the
    fitting rows): {"alpha": value or None, "beta": value or None} (beta: the smallest over the moments)."""
    betas = [params.beta_for(a) for a in params.moments]
    return {
        "alpha": float(params.alpha) if _is_number(est.alpha) else None,
        "beta": float(min(betas)) if _is_number(est.beta) and betas else None,
    }


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def cells_keep_given(est, model, params: DescentParams, achieved: dict, *checks) -> bool:
    """Whether the kept model's cell steps (``model.cells``, ``model.moment_cells``) leave the fitting rows within
    the thresholds the user gave as numbers. If not, the paper's guarantee comes first: both steps are dropped
    from the model (and their ``checks`` say why); the caller then restores the predictions before them."""
    if not (model.has_cells or model.has_moment_cells):
        return True
    worst_beta = max(achieved["betas"].values(), default=None)
    if meets(achieved["alpha"], worst_beta, given_limits(est, params)):
        return True
    model.cells = model.moment_cells = None
    for c in checks:
        if isinstance(c, dict):
            for one in c.values() if "kept" not in c else [c]:  # the mean's check, or the moments' per moment
                if isinstance(one, dict) and one.get("kept"):
                    one.update(kept=False, broke_given=True)
    return False


def meets(alpha_v, beta_v, limits: dict | None) -> bool:
    """Whether violations (alpha_v: the worst mean cell, beta_v: the worst moment cell, mass-weighted) meet the
    given ``limits`` (a None limit or value is no constraint)."""
    if not limits:
        return True
    a, b = limits.get("alpha"), limits.get("beta")
    return (a is None or alpha_v is None or float(alpha_v) <= a) and (b is None or beta_v is None or float(beta_v) <= b)


def count_labels(y):
    """The number of labels, or None when ``y`` has no length (then the fit's own checks speak)."""
    try:
        return len(y)
    except TypeError:
        return None

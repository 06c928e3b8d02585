"""Alternating gradient descent (the paper's alg:mean, alg:moment and alg:wrapper) on one sample.

This module is the loop (:func:`descend`); its parameters and the update record are
:mod:`mmc_core.paper.descent_params`, the engine seam (CellStats) and the numpy engine (CellState)
:mod:`mmc_core.paper.cell_state`.

The sample's rows are the "distribution": the audit uses the exact empirical cell statistics, so at
termination the guarantees of thm:wrapper-distr-known hold *exactly* on the fitting rows:

* every cell G(mu, i) and G(mu, m_a, i, j) has |(1/n) sum (mu - y)| < alpha,
* every cell G(mu, m_a, i, j) has |(1/n) sum (m_a - (y - mu)^a)| < beta,

hence (lemma fine-consist-mean-conditioned-moment-cal) (mu, m_a) is (alpha, beta + a alpha, a/m)
mean-conditioned moment multicalibrated on the sample.

With the standard-error test (``DescentParams.z > 0``, the estimator's "se" rule) a cell is corrected only
when it also has >= min_count rows and |t| >= z against its own standard error (whole groups, when
``z_group > 0``, are extra cells with their own z). Termination then certifies, per cell: |v| < alpha, or
|t| < z, or fewer than min_count rows. The estimator turns this into the uniform statement above by
reporting the (alpha, beta) the kept predictions achieve. Buckets may be non-uniform (data-chosen, fixed
edges); the statements hold for any fixed partition, with a/m replaced by a times the widest mean bucket.

Speed: the cell statistics of all groups are maintained incrementally. An update touches the rows of one
group's violating cells; only the (row, group) pairs of those rows are re-counted (one ``bincount`` with
negative weights for the old contributions), so the cost of a round is proportional to the rows it
changes, not to n |G|. Before declaring convergence every statistic is recomputed from scratch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .cell_state import CellState, CellStats
from .descent_params import SHRINK_MIN, WHOLE, DescentParams, Update

# CellState and WHOLE are not used here: the Dask engine imports them from this module
__all__ = ["CellState", "CellStats", "DescentParams", "DescentResult", "Update", "WHOLE", "descend"]


@dataclass
class DescentResult:
    log: list
    round_ends: list  # len(log) at the end of each round (round 0 = initial moment fit)
    history: list
    converged: bool
    stopped: bool
    mean_updates: int
    moment_updates: int
    max_moment_updates_per_call: int
    pmc_calls: int
    seconds: float
    state: CellStats
    holdout: CellStats | None = None
    kept_round: int | None = None
    best_round: int | None = None
    extra: dict = field(default_factory=dict)


class _Stop(Exception):
    pass


def descend(
    params: DescentParams,
    state: CellStats,
    holdout: CellStats | None = None,
    callback=None,
    log: list | None = None,
    stop=None,
    keep_best: bool = False,
) -> DescentResult:
    """Run AlternatingGradientDescent to convergence on ``state`` (modified in place).

    Each round: PseudoMomentConsistency for every moment (warm-started), then the mean audit over the cells
    G(mu, i) and G(mu, m_a, i, j); the worst cell's group gets a mean update on all its violating cells of
    that partition. The first moment pass runs before any mean audit: the paper's wrapper would otherwise
    return its zero moment predictors untouched when the initial mean already passes the audit.

    ``callback(row)`` is called with each history row; returning True stops the run (not converged).
    ``stop()`` is polled before every update (also inside the moment passes, which can be long); returning
    True stops the run at once, leaving a consistent model (the log holds only completed updates).
    """
    run = _Run(params, state, holdout, callback, [] if log is None else log, stop, keep_best)
    converged = stopped = False
    try:
        converged = run.rounds()
    except _Stop:
        stopped = True
        if not run.history or run.round_ends[-1] != len(run.log):
            # stopped inside a round: record where it stands, so the history and the kept log agree
            run.history.append(run.snapshot(run.rnd, state.max_moment_violation()))
            run.round_ends.append(len(run.log))
    if converged:
        # the verification pass may have added moment updates to the last round
        run.history[-1] = run.snapshot(run.rnd, run.history[-1]["moment_violation_before_fit"])
        run.round_ends[-1] = len(run.log)
    counters = run.counters
    return DescentResult(
        log=run.log,
        round_ends=run.round_ends,
        history=run.history,
        converged=converged,
        stopped=stopped,
        mean_updates=counters["mean"],
        moment_updates=counters["moment"],
        max_moment_updates_per_call=counters["max_call"],
        pmc_calls=counters["calls"],
        seconds=time.perf_counter() - run.t0,
        state=state,
        holdout=holdout,
        extra={"best": run.best} if keep_best and "index" in run.best else {},
    )


class _Run:
    """One run of :func:`descend`: its log, counters and history, and the steps of a round."""

    def __init__(self, p: DescentParams, state: CellStats, holdout, callback, log: list, stop, keep_best: bool):
        self.t0 = time.perf_counter()
        self.p, self.state, self.holdout, self.callback, self.log = p, state, holdout, callback, log
        self.stop, self.keep_best = stop, keep_best
        self.n = state.n
        self.thr_a = p.alpha * self.n
        self.counters = {"mean": 0, "moment": 0, "max_call": 0, "calls": 0}
        self.ratio_cap = max(10_000, 20 * state.G * (p.m * p.m + 1))
        self.phi_mu = state.mean_potential()
        self.history: list = []
        self.round_ends: list = []
        self.best: dict = {"mse": np.inf}
        self.rnd = 0

    def push(self, upd: Update):
        self.log.append(upd)
        self.state.apply(upd)
        if self.holdout is not None:
            self.holdout.apply(upd)

    def pmc(self, a: int):
        """PseudoMomentConsistency for moment ``a``: updates until no cell of it is violated."""
        p, state, counters = self.p, self.state, self.counters
        beta = p.beta_for(a)
        thr_b = beta * self.n
        phi = None  # the potential at the start of the pass, computed only if the pass updates anything
        # a whole group's shrunken step (share w >= SHRINK_MIN of the exact one) lowers the potential by at least
        # w (2 - w) of what the exact step does: the bound is looser by that factor
        progress = SHRINK_MIN * (2.0 - SHRINK_MIN) if p.moment_shrink > 0 else 1.0
        count = 0
        counters["calls"] += 1
        while True:
            if self.stop is not None and self.stop():
                raise _Stop
            upd = state.make_update(a, thr_b, beta)
            if upd is None:
                break
            if phi is None:
                phi = state.moment_potential(a)
            self.push(upd)
            count += upd.cells.size
            if p.moment_step == "ratio":
                # the potential bound is the additive step's; the ratio step gets a generous cap per pass
                if count > self.ratio_cap:
                    counters["capped"] = counters.get("capped", 0) + 1
                    break
            elif count > phi / (beta**2 * progress) * (1 + 1e-9) + 1e-9:
                raise AssertionError(
                    f"internal error: {count} moment-{a} updates exceed the potential bound "
                    f"{phi / (beta**2 * progress):.1f} (a bug, not a stopping rule)"
                )
        counters["moment"] += count
        counters["max_call"] = max(counters["max_call"], count)

    def snapshot(self, rnd: int, before_moment: float) -> dict:
        """The history row of round ``rnd``."""
        state, holdout, p = self.state, self.holdout, self.p
        v = state.worst_cell_mean()
        row = {
            "round": rnd,
            "max_mean_violation": v,
            "violating_cells": state.count_mean_violations(p.alpha),
            "max_moment_violation": state.max_moment_violation(),
            "moment_violation_before_fit": before_moment,
            "mean_updates": self.counters["mean"],
            "moment_updates": self.counters["moment"],
            "seconds": time.perf_counter() - self.t0,
        }
        if holdout is not None and holdout.n > 0:
            row["holdout_max_mean_violation"] = holdout.worst_cell_mean()
            row["holdout_max_moment_violation"] = holdout.max_moment_violation()
            row["holdout_mse"] = holdout.mean_potential()
            if p.moments:
                row["holdout_moment_mse"] = holdout.moment_potential(p.moments[0])
        return row

    def record(self, rnd: int, before_moment: float):
        row = self.snapshot(rnd, before_moment)
        self.history.append(row)
        self.round_ends.append(len(self.log))
        if self.keep_best and row.get("holdout_mse", np.inf) < self.best["mse"]:
            # the fitting-row predictions of the best held-out round so far (what replaying the log up to it
            # would give), so early stopping needs no replay on the fitting rows
            self.best.update(mse=row["holdout_mse"], index=len(self.history) - 1, **self.state.snapshot_predictions())
        if self.callback is not None and self.callback(row):
            raise _Stop

    def mean_step(self):
        """One mean update: the worst cell's group, on all its violating cells of that partition."""
        p = self.p
        upd = self.state.make_update(1, self.thr_a, p.alpha)
        assert upd is not None  # a violated cell was found just before, so there is an update
        self.push(upd)
        self.counters["mean"] += upd.cells.size
        if self.counters["mean"] > self.phi_mu / p.alpha**2 * (1 + 1e-9) + 1e-9:
            raise AssertionError(
                f"internal error: {self.counters['mean']} mean updates exceed the potential bound "
                f"{self.phi_mu / p.alpha**2:.1f} (a bug, not a stopping rule)"
            )

    def rounds(self) -> bool:
        """Rounds until the mean audit passes on freshly summed statistics (True) or the round cap (False)."""
        state, p = self.state, self.p
        verified = False
        before = state.max_moment_violation()
        for a in p.moments:
            self.pmc(a)
        self.record(0, before)
        while True:
            v, part, g = state.worst_mean(self.thr_a)
            if v * self.n < self.thr_a or v <= 0:
                if not verified:
                    # Incremental sums drift by rounding; decide convergence on freshly summed statistics.
                    state.full_recompute()
                    verified = True
                    for a in p.moments:
                        self.pmc(a)
                    continue
                return True
            verified = False
            if p.max_rounds is not None and self.rnd >= p.max_rounds:
                return False
            if self.stop is not None and self.stop():
                raise _Stop
            self.mean_step()
            self.rnd += 1
            before = state.max_moment_violation()
            for a in p.moments:
                self.pmc(a)
            self.record(self.rnd, before)

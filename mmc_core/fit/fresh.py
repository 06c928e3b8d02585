"""Paper-faithful finite-sample mode (alg:moment-finite, alg:wrapper-finite).

Every audit draws a *fresh* sample from a sampler (a synthetic distribution), replays the current model on
it, and flags a cell only when the Chernoff-adjusted single-set test (alg:auditor-single-set) says its
violation is real. Updates use the paper's step (eta = alpha for the mean, beta for moments). The
predictors live only as the model's update log, exactly as the paper maintains them implicitly.

:class:`FreshDescent` runs one audit per :meth:`step`, so the teaching page can show each decision.
"""

from __future__ import annotations

import math

import numpy as np

from ..groups.group_set import GroupSet
from ..paper.auditor import chernoff_auditor
from ..paper.cell_state import CellState
from ..paper.descent_params import DescentParams, Update
from ..paper.moments import LabelScale
from .model import FittedModel

__all__ = ["FreshDescent", "fit_fresh", "alpha_prime"]


def alpha_prime(alpha: float, n: int, delta: float) -> float:
    """The paper's alpha' (Corollary cor:consistency-auditor / thm:finite-wrapper)."""
    e = math.sqrt(math.log(2 / delta) / (2 * n))
    return alpha + 4 * e + (alpha - 2 * e) ** -2 * (2 * e)


class FreshDescent:
    """AlternatingGradientDescentFinite, one audit per step.

    Parameters
    ----------
    sampler : callable(n, rng) -> (table, y_unit)
        Draws n i.i.d. rows: a feature table and labels in [0, 1].
    groups : GroupSet
    params : DescentParams (its ``step`` is ignored: the paper's step is used)
    n : int
        Rows per audit. The paper needs 2 sqrt(ln(2/delta) / (2n)) <= alpha and <= beta.
    delta : float
        Failure probability of each single-set test.
    init_mean, init_moment : float
        Constant initial predictors (the paper starts at 0).
    truth : object with ``support()`` and ``true_mean`` (e.g. a DiscreteBetaDistribution), optional
        Used only to report the exact potential E[(mu - E[y|x])^2] for teaching.
    """

    def __init__(
        self,
        sampler,
        groups: GroupSet,
        params: DescentParams,
        n: int,
        delta: float = 1e-3,
        seed: int = 0,
        init_mean: float = 0.0,
        init_moment: float = 0.0,
        truth=None,
    ):
        eps = 2 * math.sqrt(math.log(2 / delta) / (2 * n))
        if eps > params.alpha or any(eps > params.beta_for(a) for a in params.moments):
            raise ValueError(
                f"n={n} rows per audit is too small for alpha={params.alpha}, beta={params.beta}: the paper needs "
                f"2 sqrt(ln(2/delta)/(2n)) = {eps:.4g} <= alpha, beta"
            )
        self.sampler, self.groups, self.p, self.n, self.delta = sampler, groups, params, n, delta
        self.rng = np.random.default_rng(seed)
        self.truth = truth
        self.model = FittedModel(
            params,
            LabelScale(0.0, 1.0, "declared"),
            groups,
            {"kind": "constant", "value": float(init_mean)},
            {a: float(init_moment) for a in params.moments},
            [],
            [],
        )
        # The paper's wrapper would return untouched zero moments if the initial mean passed its first
        # audit, so the moment predictors are fitted once before the first mean audit.
        self.queue = [("moment", a) for a in params.moments] + [("mean", 0)]
        self.mean_updates = self.moment_updates = self.audits = 0
        self.done = False
        self.events: list = []

    # ------------------------------------------------------------------------------------------
    def _audit_state(self) -> CellState:
        table, y = self.sampler(self.n, self.rng)
        self.audits += 1
        memb = self.groups.evaluate(table, len(y))
        mu, moms = self.model.initial(len(y))
        self.model.replay(memb, mu, moms)
        return CellState(self.p, memb, y, mu, moms)

    def _flag(self, sums, counts, thr):
        flagged, margin, sign = chernoff_auditor(sums, counts, self.n, thr, self.delta)
        if not flagged.any():
            return None
        margin = np.where(flagged, margin, -np.inf)
        return flagged, margin, sign

    def step(self) -> dict:
        """One audit on a fresh sample, and the update it triggers (if any). Returns an event dict."""
        if self.done:
            return {"kind": "converged"}
        kind, a = self.queue[0]
        st = self._audit_state()
        p = self.p
        if kind == "moment":
            res = self._flag(st.TA[a], st.CA[a], p.beta_for(a))
            if res is None:
                self.queue.pop(0)
                ev = {"kind": "moment_pass", "moment": a}
            else:
                flagged, margin, sign = res
                g = int(np.argmax(margin)) // (p.m * p.m)
                upd = self._update(a, a, g, flagged, sign, p.m * p.m, p.beta_for(a))
                self.moment_updates += upd.cells.size
                ev = self._event("moment_update", upd, st, a)
        else:
            best = None
            parts = [(0, st.S0, st.C0, p.m)] + [(b, st.SA[b], st.CA[b], p.m * p.m) for b in p.moments]
            for part, sums, counts, width in parts:
                res = self._flag(sums, counts, p.alpha)
                if res is not None and (best is None or res[1].max() > best[1][1].max()):
                    best = (part, res, width)
            if best is None:
                self.done = True
                self.model.round_ends.append(len(self.model.log))
                ev = {"kind": "converged"}
            else:
                part, (flagged, margin, sign), width = best
                g = int(np.argmax(margin)) // width
                upd = self._update(1, part, g, flagged, sign, width, p.alpha)
                self.mean_updates += upd.cells.size
                self.model.round_ends.append(len(self.model.log))
                self.queue = [("moment", b) for b in p.moments] + [("mean", 0)]
                ev = self._event("mean_update", upd, st, None)
        ev.update(
            audits=self.audits,
            samples_used=self.audits * self.n,
            mean_updates=self.mean_updates,
            moment_updates=self.moment_updates,
            mean_bound=p.mean_update_bound(),
        )
        if self.truth is not None:
            ev["potential"] = self.potential()
        self.events.append(ev)
        return ev

    def _update(self, target, partition, g, flagged, sign, width, eta) -> Update:
        blk = slice(g * width, (g + 1) * width)
        cells = np.flatnonzero(flagged[blk])
        upd = Update(target, partition, g, cells.astype(np.int64), eta * sign[blk][cells])
        self.model.log.append(upd)
        return upd

    def _event(self, kind, upd: Update, st: CellState, a):
        cells = upd.cells
        cells_ij: list[tuple[int, int | None]]
        if upd.partition:
            cells_ij = [(int(c) // self.p.m, int(c) % self.p.m) for c in cells]
        else:
            cells_ij = [(int(c), None) for c in cells]
        return {
            "kind": kind,
            "moment": a,
            "group": self.groups.names[upd.group],
            "group_index": upd.group,
            "partition": upd.partition,
            "cells": cells_ij,
            "deltas": [float(d) for d in upd.deltas],
        }

    def potential(self) -> float:
        """E_P[(mu(x) - E[y|x])^2], exactly, on the truth's finite support (the descent's potential)."""
        table, prob = self.truth.support()
        mu, _ = self.model.predict_unit(table, n=len(prob))
        return float(np.sum(prob * (mu - self.truth.true_mean(table)) ** 2))

    def run(self, max_audits: int | None = None, callback=None) -> FittedModel:
        while not self.done and (max_audits is None or self.audits < max_audits):
            ev = self.step()
            if callback is not None and callback(ev):
                break
        self.model.info = {
            "mode": "fresh samples (paper-faithful, alg:wrapper-finite)",
            "converged": bool(self.done),
            "mean_updates": self.mean_updates,
            "moment_updates": self.moment_updates,
            "audits": self.audits,
            "samples_used": self.audits * self.n,
            "rows_per_audit": self.n,
            "delta": self.delta,
            "rounds": len(self.model.round_ends),
            "n_groups": len(self.groups),
        }
        return self.model


def fit_fresh(
    sampler, groups: GroupSet, params: DescentParams, n: int, *, max_audits: int | None = None, **kw
) -> FittedModel:
    """Run :class:`FreshDescent` to convergence (or ``max_audits``) and return the model.
    ``kw``: the other arguments of FreshDescent (``delta``, ``seed``, ``init_mean``, ``init_moment``, ``truth``),
    with its defaults."""
    return FreshDescent(sampler, groups, params, n, **kw).run(max_audits)

"""``mmc fit --discover``: fits of an estimator alternated with learning-oracle audits of its fitting rows, the
sets each audit accepts joining the groups of the next fit (:func:`fit_with_discovery`).

The audit itself (regions, search / check split, acceptance test) is :mod:`mmc_core.discovery.discover_groups`'s; apart so that
the fit loop, which drives an estimator, is not part of the audit a model or a prediction column can run alone.
"""

from __future__ import annotations

import time

from ..common.tables import count_rows, take_rows, to_label_array
from ..groups.group_set import GroupSet
from .discover_groups import (
    DiscoveryFeatures,
    audit_predictor,
    make_oracle,
    search_check_split,
    search_info,
    unique_name,
    validate_discovery_params,
)
from .oracle import SetOracle

__all__ = ["fit_with_discovery"]


def fit_with_discovery(
    est,
    X,
    y,
    groups=None,
    base_prediction=None,
    *,
    features,
    max_depth: int = 3,
    min_mass: float = 0.01,
    rounds: int = 2,
    level: float = 0.05,
    search_fraction: float = 0.5,
    oracle: SetOracle | None = None,
    label_name: str = "label",
    base_name=None,
    stop=None,
    callback=None,
):
    """``mmc fit --discover``: alternate oracle audits and fits of ``est`` (a MomentMulticalibrator).

    Round 1 fits on the listed ``groups``. Each audit runs the learning-oracle auditor on the fitted
    predictor's residuals on the *fitting* rows (the estimator's held-out calibration rows are never looked
    at), split into search and check halves; the sets it accepts join the groups as ordinary groups (a rule
    each) and the estimator is refitted from scratch on all groups. Stops when an audit accepts nothing new
    or after ``rounds`` audits. The model records the learned groups (``info["learned_sets"]``); they replay
    like any other group. Returns ``est``, with ``learned_groups_``.
    """
    validate_discovery_params(max_depth, min_mass, 5, level, search_fraction, rounds)
    t0 = time.perf_counter()
    gset = GroupSet.coerce(groups)
    listed = list(gset.groups)
    learned: list = []
    taken = set(gset.names)
    n = count_rows(X)
    seen_keys: set = set()
    history = []
    oracle = make_oracle(oracle, max_depth, est.random_state if isinstance(est.random_state, int) else 0)
    # the audited fits end with the descent: shrunken cell corrections (mmc_core.fit.cells) fitted on these same
    # fitting rows would take part of an unlisted group's error in sample and hide it from the audit (a planted
    # region was no longer found); the final model gets them as the caller asked
    cells = getattr(est, "shrunken_cells", False)

    def fit(with_cells: bool):
        est.shrunken_cells = with_cells
        try:
            est.fit(
                X,
                y,
                GroupSet(listed + [g for g, _ in learned]),
                base_prediction=base_prediction,
                callback=callback,
                label_name=label_name,
                base_name=base_name,
                stop=stop,
            )
        finally:
            est.shrunken_cells = cells

    for rnd in range(rounds + 1):
        fit(cells and rnd == rounds)
        if rnd == rounds or (stop is not None and stop()):
            break
        res = _audit_fit(est, X, y, n, features, search_fraction, rnd, oracle, min_mass, level, label_name)
        new = _new_sets(res, seen_keys, taken)
        history.append(_round_row(rnd, res, new))
        if not new:
            if cells:  # nothing more to learn: the final fit, with the corrections
                fit(True)
            break
        learned += new
    _record(est, learned, history, features, max_depth, min_mass, level, t0)
    return est


def _audit_fit(est, X, y, n: int, features, search_fraction: float, rnd: int, oracle, min_mass, level, label_name):
    """The oracle audit of the fitted predictor on its fitting rows, split into search and check halves."""
    fit_idx = est.fit_index_
    Xf = take_rows(X, fit_idx)
    yu = est.label_scale_.to_unit(to_label_array(y, f"label '{label_name}'", n)[fit_idx], f"label '{label_name}'")
    F = DiscoveryFeatures(Xf, features, fit_idx.size)
    search, check = search_check_split(fit_idx.size, search_fraction, (est.random_state or 0) + 1000 + rnd)
    p = est.model_.params
    return audit_predictor(
        F,
        yu,
        est.fit_mean_unit_,
        est.fit_moments_unit_,
        p.m,
        p.odd_moments,
        search,
        check,
        oracle,
        min_mass,
        level,
        est.alpha_,
        est.beta_,
    )


def _new_sets(res, seen_keys: set, taken: set) -> list:
    """[(group, finding)]: the accepted sets no earlier round learned, each a group with a unique name."""
    new = []
    for f in res.accepted():
        k = f.rule.key()
        if k in seen_keys:
            continue
        seen_keys.add(k)
        new.append((f.rule.group(unique_name(f"learned: {f.name}", taken)), f))
    return new


def _round_row(rnd: int, res, new: list) -> dict:
    """The history row of one audit round."""
    return {
        "round": rnd + 1,
        "candidates": res.n_candidates,
        "accepted": len(res.accepted()),
        "new": len(new),
        "seconds": res.seconds,
    }


def _record(est, learned: list, history: list, features, max_depth, min_mass, level, t0: float) -> None:
    """The learned groups in the model's ``info`` (``learned_sets``, ``discovery``) and ``learned_groups_``."""
    info = est.model_.info
    info["learned_sets"] = [g.name for g, _ in learned]
    info["discovery"] = {
        **search_info(features, max_depth, min_mass, level),
        "rounds": history,
        "seconds": time.perf_counter() - t0,
        "found": [
            {
                "name": g.name,
                "kind": f.kind,
                "region": f.region,
                "violation": float(f.violation),
                "p_value": float(f.p_value),
            }
            for g, f in learned
        ],
    }
    est.learned_groups_ = [g for g, _ in learned]

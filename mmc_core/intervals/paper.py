"""The paper's intervals: the guaranteed half-width of thm:ciguarantee, the plug-in one, and the Appendix's
greedy submodular cover (see the package docstring)."""

from __future__ import annotations

import numpy as np

from ..paper.moments import max_central_moment


def guaranteed_halfwidth(model, mom_a: np.ndarray, a: int, delta: float, gamma: float) -> np.ndarray:
    """thm:ciguarantee half-width (unit scale) for moment ``a`` with the guarantees the descent achieves.

    alpha/gamma + eps + w_mu + (min(r_a, M_a(x) + eps + beta'/gamma) / delta)^(1/a), eps = a/m,
    beta' = beta_a + a alpha (beta_a: the moment's own threshold), w_mu = 1/m, M_a(x) = m_a(x) + w_a (top moment bucket: max(m_a(x) + w_a, 1.0),
    since predictions there may reach the projection's upper end 1.0). See the module docstring.
    """
    p = model.params
    eps = a / p.m
    beta_p = _beta(p, a) + a * p.alpha
    grid = p.grid(a)
    mom_a = np.asarray(mom_a, dtype=float)
    upper = mom_a + grid.width
    top = grid.index(mom_a) == p.m - 1
    upper = np.where(top, np.maximum(upper, p.projection(a)[1]), upper)
    num = np.minimum(max_central_moment(a), upper + eps + beta_p / gamma)
    return p.alpha / gamma + eps + 1.0 / p.m + (num / delta) ** (1.0 / a)


def _beta(p, a: int) -> float:
    """The moment-a threshold the descent used (per-moment when the model has them, else the common beta)."""
    return float(p.beta_for(a)) if hasattr(p, "beta_for") else float(p.beta)


def plugin_halfwidth(mom_a: np.ndarray, a: int, delta: float) -> np.ndarray:
    """(m_a(x) / delta)^(1/a), unit scale."""
    return (np.maximum(np.asarray(mom_a, dtype=float), 0.0) / delta) ** (1.0 / a)


def greedy_cover(
    pair_rows: np.ndarray,
    pair_sets: np.ndarray,
    pair_width: np.ndarray,
    n_rows: int,
    n_sets: int,
    eligible: np.ndarray,
    row_mass: np.ndarray | None = None,
):
    """The greedy algorithm for the Appendix's submodular-cost submodular cover.

    Sets and rows are given as incidence pairs: row ``pair_rows[k]`` lies in set ``pair_sets[k]``, where
    its width is ``pair_width[k]``. Only ``eligible`` sets may be chosen. Cost of a collection C:
    f(C) = sum_x P(x) max_{S in C, x in S} width(S, x); coverage g(C) = mass of the rows in some S of C.
    Each step adds the eligible set with the smallest (f(C + S) - f(C)) / (g(C + S) - g(C)) among the sets
    that cover new mass, until no eligible set covers anything new.

    Returns ``(chosen sets in order, per-row width (0 where uncovered), covered mask)``.
    """
    pair_rows = np.asarray(pair_rows, dtype=np.int64)
    pair_sets = np.asarray(pair_sets, dtype=np.int64)
    pair_width = np.asarray(pair_width, dtype=float)
    w = np.full(n_rows, 1.0 / max(n_rows, 1)) if row_mass is None else np.asarray(row_mass, dtype=float)
    elig = np.zeros(n_sets, dtype=bool)
    elig[np.asarray(eligible, dtype=np.int64)] = True
    keep = elig[pair_sets]
    pr, ps, pw = pair_rows[keep], pair_sets[keep], pair_width[keep]
    cur = np.zeros(n_rows)
    covered = np.zeros(n_rows, dtype=bool)
    chosen_mask = np.zeros(n_sets, dtype=bool)
    chosen = []
    while True:
        new_mass = np.bincount(ps, weights=w[pr] * ~covered[pr], minlength=n_sets)
        cand = (new_mass > 0) & ~chosen_mask
        if not cand.any():
            break
        inc = np.bincount(ps, weights=w[pr] * np.maximum(pw - cur[pr], 0.0), minlength=n_sets)
        ratio = np.where(cand, inc / np.where(cand, new_mass, 1.0), np.inf)
        best = int(np.argmin(ratio))
        chosen.append(best)
        chosen_mask[best] = True
        sel = ps == best
        r = pr[sel]
        cur[r] = np.maximum(cur[r], pw[sel])
        covered[r] = True
    return chosen, cur, covered

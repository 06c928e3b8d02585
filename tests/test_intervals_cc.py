"""The default ``calibrated`` thresholds: conditional conformal over the group indicators (approach ``cc``,
:func:`mmc_core.intervals.fit_conditional`).

What is checked, and against which statement of the module docstring:

1. Calibration counts (deterministic): every group g with n_g calibration rows has at least
   k_g = min(n_g, ceil((n_g + 1) tau_g)) of them inside its interval, tau_g = 1 - delta + c se_g.
2. Exact population coverage on a finite-support distribution (a few (x, y) atoms, so the population coverage
   of any interval is a finite sum), over R independent calibration draws:
   a. in expectation over the calibration draw, every group's coverage is at least 1 - delta (tolerance: 3
      Monte Carlo standard errors of the mean over the R draws);
   b. with high probability over the calibration draw: the share of draws in which a group's population coverage
      falls below 1 - delta is at most the order-statistic bound P(Binomial(n_g, 1 - delta) >= k_g) averaged
      over the draws (exact for a group fitted on its own rows), plus 3 binomial standard errors over R draws.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmc_core import GroupSet
from mmc_core import intervals as iv


def _binom_tail(n: int, p: float, k: int) -> float:
    """P(Binomial(n, p) >= k)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return float(sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)))


# ---- the finite-support distribution ------------------------------------------------------------------------
# x = (a, b): a in {p, q}, b in {r, s, t}; y | x takes 60 values (a skewed shape, a scale and shift per cell)
CELLS = [(a, b) for a in ("p", "q") for b in ("r", "s", "t")]
P_CELL = np.array([0.30, 0.20, 0.08, 0.17, 0.15, 0.10])
SHAPE = -np.log1p(-(np.arange(60) + 0.5) / 60) - 1.0  # 60 equally likely atoms: Exp(1) - 1 quantiles (skewed)
P_SHAPE = np.full(60, 1 / 60)
SCALE = np.array([1.0, 1.6, 0.7, 1.2, 2.2, 0.9])
SHIFT = np.array([0.0, 0.3, -0.2, 0.1, -0.4, 0.5])


def _groups():
    table = {"a": np.array([c[0] for c in CELLS]), "b": np.array([c[1] for c in CELLS])}
    # the marginal groups and one intersection only: the cells are not all groups, the fit is misspecified
    gs = GroupSet.from_columns(table, ["a", "b"], 1)
    extra = GroupSet.from_json(
        {
            "format": "mmc-groups",
            "version": 1,
            "groups": [
                {
                    "name": "a=q & b=s",
                    "where": [{"column": "a", "op": "==", "value": "q"}, {"column": "b", "op": "==", "value": "s"}],
                }
            ],
        }
    )
    return gs + extra


def _draw(gs, n, rng):
    cell = rng.choice(len(CELLS), size=n, p=P_CELL)
    atom = rng.choice(SHAPE.size, size=n, p=P_SHAPE)
    table = {"a": np.array([CELLS[c][0] for c in cell]), "b": np.array([CELLS[c][1] for c in cell])}
    u = SHIFT[cell] + SCALE[cell] * SHAPE[atom]
    return gs.evaluate(table, n), u


def _cell_thresholds(gs, up, lo):
    cells = gs.evaluate({"a": np.array([c[0] for c in CELLS]), "b": np.array([c[1] for c in CELLS])}, len(CELLS))
    return iv._row_sum(cells, up), iv._row_sum(cells, lo), cells.to_dense()


def _population_coverage(q_up, q_lo):
    """Exact P(-q_lo(x) <= u <= q_up(x) | x) per cell."""
    vals = SHIFT[:, None] + SCALE[:, None] * SHAPE[None, :]
    inside = (vals <= q_up[:, None]) & (vals >= -q_lo[:, None])
    return inside.astype(float) @ P_SHAPE


@pytest.mark.parametrize("n", [40, 300, 2000])
@pytest.mark.parametrize("margin", [0.0, iv.CC_MARGIN, 2.0])
def test_cc_calibration_counts(n, margin):
    gs = _groups()
    memb, u = _draw(gs, n, np.random.default_rng(n))
    deltas = [0.05, 0.1, 0.2, 0.5]
    up, lo = iv.fit_conditional(memb, u, deltas, margin=margin)
    dense = memb.to_dense()
    n_g = dense.sum(0).astype(float)
    for j, d in enumerate(deltas):
        if math.ceil((n + 1) * (1 - d) - 1e-12) > n:
            assert np.isinf(up[j, 0]) and np.isinf(lo[j, 0])
            continue
        inside = (u <= iv._row_sum(memb, up[j])) & (u >= -iv._row_sum(memb, lo[j]))
        cnt = (dense & inside[:, None]).sum(0)
        tau = 1 - d + margin * np.sqrt(d * (1 - d) / np.maximum(n_g, 1))
        k = np.minimum(np.ceil((n_g + 1) * tau - 1e-9), n_g)
        assert np.all(cnt >= k), (d, cnt, k)


@pytest.mark.slow
@pytest.mark.parametrize("margin", [0.0, iv.CC_MARGIN])
def test_cc_exact_population_coverage(margin):
    gs = _groups()
    dense_cells = None
    delta, n, R = 0.1, 400, 300
    rng = np.random.default_rng(7)
    covs, fails_pred = [], []
    for _ in range(R):
        memb, u = _draw(gs, n, rng)
        up, lo = iv.fit_conditional(memb, u, [delta], margin=margin)
        q_up, q_lo, dense_cells = _cell_thresholds(gs, up[0], lo[0])
        cov_cell = _population_coverage(q_up, q_lo)
        w = dense_cells * P_CELL[:, None]
        covs.append((w * cov_cell[:, None]).sum(0) / w.sum(0))
        n_g = memb.sizes
        tau = 1 - delta + margin * np.sqrt(delta * (1 - delta) / np.maximum(n_g, 1))
        k = np.minimum(np.ceil((n_g + 1) * tau - 1e-9), n_g).astype(int)
        fails_pred.append([_binom_tail(int(m), 1 - delta, int(kk)) for m, kk in zip(n_g, k)])
    covs, fails_pred = np.array(covs), np.array(fails_pred)
    mean, sd = covs.mean(0), covs.std(0, ddof=1)
    # a. in expectation
    assert np.all(mean >= 1 - delta - 3 * sd / math.sqrt(R)), (gs.names, mean)
    # b. with high probability over the calibration draw
    fail = (covs < 1 - delta - 1e-12).mean(0)
    bound = fails_pred.mean(0)
    tol = 3 * np.sqrt(np.maximum(bound * (1 - bound), 1 / R) / R)
    assert np.all(fail <= bound + tol), (gs.names, fail, bound)

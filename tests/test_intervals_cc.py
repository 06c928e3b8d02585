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


def _cell_thresholds(gs, up, lo, rule="sum"):
    cells = gs.evaluate({"a": np.array([c[0] for c in CELLS]), "b": np.array([c[1] for c in CELLS])}, len(CELLS))
    return _rows(rule, cells, up), _rows(rule, cells, lo), cells.to_dense()


def _population_coverage(q_up, q_lo):
    """Exact P(-q_lo(x) <= u <= q_up(x) | x) per cell."""
    vals = SHIFT[:, None] + SCALE[:, None] * SHAPE[None, :]
    inside = (vals <= q_up[:, None]) & (vals >= -q_lo[:, None])
    return inside.astype(float) @ P_SHAPE


def _fit(rule, memb, u, deltas, margin):
    if rule == "sum":
        return iv.fit_conditional(memb, u, deltas, margin=margin)
    return iv.fit_group_max(memb, u, deltas, margin=margin)


def _rows(rule, memb, theta):
    return iv.row_sum(memb, theta) if rule == "sum" else iv.row_max(memb, theta)


@pytest.mark.parametrize("rule", ["sum", "max"])
@pytest.mark.parametrize("n", [40, 300, 2000])
@pytest.mark.parametrize("margin", [0.0, iv.CC_MARGIN, 2.0])
def test_cc_calibration_counts(n, margin, rule):
    gs = _groups()
    memb, u = _draw(gs, n, np.random.default_rng(n))
    deltas = [0.05, 0.1, 0.2, 0.5]
    up, lo = _fit(rule, memb, u, deltas, margin)
    dense = memb.to_dense()
    n_g = dense.sum(0).astype(float)
    for j, d in enumerate(deltas):
        if math.ceil((n + 1) * (1 - d) - 1e-12) > n:
            assert np.isinf(up[j, 0]) and np.isinf(lo[j, 0])
            assert np.all(np.isinf(_rows(rule, memb, up[j])))  # no finite interval for any row
            continue
        inside = (u <= _rows(rule, memb, up[j])) & (u >= -_rows(rule, memb, lo[j]))
        cnt = (dense & inside[:, None]).sum(0)
        tau = 1 - d + margin * np.sqrt(d * (1 - d) / np.maximum(n_g, 1))
        k = np.minimum(np.ceil((n_g + 1) * tau - 1e-9), n_g)
        assert np.all(cnt >= k), (d, cnt, k)


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["sum", "max"])
@pytest.mark.parametrize("margin", [0.0, iv.CC_MARGIN])
def test_cc_exact_population_coverage(margin, rule):
    gs = _groups()
    dense_cells = None
    delta, n, R = 0.1, 400, 300
    rng = np.random.default_rng(7)
    covs, fails_pred = [], []
    for _ in range(R):
        memb, u = _draw(gs, n, rng)
        up, lo = _fit(rule, memb, u, [delta], margin)
        q_up, q_lo, dense_cells = _cell_thresholds(gs, up[0], lo[0], rule)
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


def test_max_rule_is_each_rows_widest_group_quantile():
    """The max rule by hand: theta_g = the conformal quantile of |u| in g (rank ceil((n_g + 1)(1 - delta)),
    capped at n_g), a row's threshold = the largest over its groups; a group without calibration rows is
    skipped (inf)."""
    rng = np.random.default_rng(11)
    n = 300
    a = rng.choice(["p", "q", "r"], size=n, p=[0.6, 0.4, 0.0])  # no calibration row has a = r
    b = rng.choice(["s", "t"], size=n)
    u = rng.standard_t(3, size=n) * np.where(a == "p", 1.0, 2.5)
    gs = GroupSet.from_columns({"a": np.array(["p", "q", "r"]), "b": np.array(["s", "t", "s"])}, ["a", "b"], 2)
    memb = gs.evaluate({"a": a, "b": b}, n)
    dense = memb.to_dense()
    up, lo = iv.fit_group_max(memb, u, [0.1, 0.2])
    assert np.array_equal(up, lo)  # symmetric by default
    for j, d in enumerate([0.1, 0.2]):
        for g in range(dense.shape[1]):
            s = np.sort(np.abs(u[dense[:, g]]))
            if s.size == 0:
                assert np.isinf(up[j, g])
                continue
            k = min(s.size, math.ceil((s.size + 1) * (1 - d) - 1e-12))
            assert up[j, g] == pytest.approx(s[k - 1], abs=1e-6)
    # new rows: one of a = r only (its groups have no calibration rows except through b)
    new = gs.evaluate({"a": np.array(["r", "p"]), "b": np.array(["s", "t"])}, 2)
    q = iv.row_max(new, up[0])
    names = list(gs.names)
    finite = [g for g in range(len(names)) if np.isfinite(up[0, g]) and new.to_dense()[0, g]]
    assert q[0] == pytest.approx(max(up[0, g] for g in finite))
    # every group set holds "all": a row whose other groups have no calibration rows gets the population's
    assert names[0] == "all" and q[0] >= up[0, 0]
    only_r = GroupSet.from_json(
        {
            "format": "mmc-groups",
            "version": 1,
            "groups": [{"name": "a=r", "where": [{"column": "a", "op": "==", "value": "r"}]}],
        }
    )
    up_r, _ = iv.fit_group_max(only_r.evaluate({"a": a}, n), u, [0.1])
    assert np.isinf(up_r[0, 1])
    assert iv.row_max(only_r.evaluate({"a": np.array(["r"])}, 1), up_r[0])[0] == up_r[0, 0]


def test_max_rule_sorts_each_pair_once_for_all_deltas(monkeypatch):
    """The symmetric score |u| is the same for every delta, but each of the 27 grid deltas sorted every (row,
    group) pair again: 57% of a 2M-row fit (14.4 s). The pairs are now sorted once, and every delta's
    thresholds are the same as a per-delta sort gives."""
    from mmc_core.intervals import conditional

    rng = np.random.default_rng(5)
    n = 2000
    tab = {"a": rng.choice(["p", "q", "r"], size=n), "b": rng.choice(["s", "t"], size=n)}
    memb = GroupSet.from_columns(tab, ["a", "b"], 2).evaluate(tab, n)
    u = rng.standard_t(3, size=n)
    deltas = np.linspace(0.02, 0.5, 27)
    sorted_elems = []
    real_sort = np.sort

    def counting_sort(a, *args, **kw):
        sorted_elems.append(np.asarray(a).size)
        return real_sort(a, *args, **kw)

    monkeypatch.setattr(conditional.np, "sort", counting_sort)
    up, _ = iv.fit_group_max(memb, u, deltas)
    monkeypatch.setattr(conditional.np, "sort", real_sort)
    n_pairs = int(memb.sizes.sum())
    assert sum(sorted_elems) == n_pairs  # not 27 x the pairs
    dense = memb.to_dense()
    for j, d in enumerate(deltas):
        for g in range(dense.shape[1]):
            s = np.sort(np.abs(u[dense[:, g]]))
            k = min(s.size, math.ceil((s.size + 1) * (1 - d) - 1e-12))
            assert up[j, g] == pytest.approx(s[k - 1], abs=1e-6)


def test_sum_rule_with_the_symmetric_score_reads_each_delta_from_its_own_sort():
    """The symmetric score is one row for every delta, but the sum rule's thresholds differ by delta after
    its first step: each delta must still be read from its own sorted row (checked against one delta at a
    time)."""
    rng = np.random.default_rng(9)
    n = 1500
    tab = {"a": rng.choice(["p", "q", "r"], size=n), "b": rng.choice(["s", "t"], size=n)}
    memb = GroupSet.from_columns(tab, ["a", "b"], 2).evaluate(tab, n)
    u = rng.standard_t(4, size=n)
    deltas = [0.05, 0.1, 0.3]
    up, lo = iv.fit_conditional(memb, u, deltas, two_sided=False)
    for j, d in enumerate(deltas):
        up1, lo1 = iv.fit_conditional(memb, u, [d], two_sided=False)
        np.testing.assert_allclose(up[j], up1[0], rtol=0, atol=1e-9)
        np.testing.assert_allclose(lo[j], lo1[0], rtol=0, atol=1e-9)

"""The membership-sum primitive (mmc_core.groups.sums): both ways of summing (membership signatures, (row, group)
pairs) against a dense reference on random memberships, and the incremental shift against a full recount."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mmc_core.groups.group_set import GroupSet
from mmc_core.groups.sums import MembershipSums, use_signatures


def _membership(seed: int, n: int, n_cols: int, card: int):
    rng = np.random.default_rng(seed)
    table = {f"c{i}": rng.integers(0, card, n).astype(str) for i in range(n_cols)}
    return GroupSet.from_columns(table, list(table), max_order=2).evaluate(table, n), rng


memberships = st.tuples(st.integers(0, 10_000), st.integers(1, 120), st.integers(1, 3), st.integers(2, 5)).map(
    lambda t: _membership(*t)
)


@settings(max_examples=40, deadline=None)
@given(memberships, st.integers(1, 6))
def test_both_modes_match_the_dense_sums(mr, nc):
    memb, rng = mr
    D = memb.to_dense().astype(float)  # (n, G)
    n, G = D.shape
    cells = rng.integers(0, nc, n)
    w = rng.normal(size=n)
    onehot = np.zeros((n, nc))
    onehot[np.arange(n), cells] = 1.0
    dense_cells = np.einsum("ng,nc,n->gc", D, onehot, w)
    theta = rng.normal(size=G)
    W = rng.poisson(1.0, size=(3, n)).astype(float)
    rows = {}
    for mode in (True, False):
        s = MembershipSums(memb, by_signature=mode)
        assert s.by_signature is mode
        np.testing.assert_allclose(s.cell_table(cells, nc, w), dense_cells, atol=1e-12)
        np.testing.assert_allclose(s.cell_table(cells, nc), np.einsum("ng,nc->gc", D, onehot), atol=0)
        np.testing.assert_allclose(s.group_sums(w), D.T @ w, atol=1e-12)
        np.testing.assert_allclose(s.group_sums(w, row_order=True), D.T @ w, atol=1e-12)
        np.testing.assert_allclose(
            s.replicate_cell_sums(W, cells, nc), np.einsum("ng,nc,bn->bgc", D, onehot, W), atol=1e-9
        )
        rows[mode] = s.row_sums(theta)
        np.testing.assert_allclose(rows[mode], D @ theta, atol=1e-12)
    # a row's threshold adds its groups' coefficients in increasing group order either way: the same bits
    np.testing.assert_array_equal(rows[True], rows[False])


@settings(max_examples=40, deadline=None)
@given(memberships, st.integers(1, 5), st.floats(0.05, 1.0))
def test_shift_equals_a_full_recount(mr, nc, share):
    memb, rng = mr
    n = memb.n
    c_old = rng.integers(0, nc, n)
    w_old = rng.normal(size=n)
    rows = np.flatnonzero(rng.random(n) < share)
    c_new, w_new = c_old.copy(), w_old.copy()
    c_new[rows] = rng.integers(0, nc, rows.size)
    w_new[rows] = rng.normal(size=rows.size)
    moved = c_old[rows] != c_new[rows]
    for mode in (True, False):
        s = MembershipSums(memb, by_signature=mode)
        arr, cnt = s.cell_sums(c_old, nc, w_old), s.cell_sums(c_old, nc)
        sh = s.shift_keys(s.context(rows), nc, c_old[rows], c_new[rows], moved)
        s.shift(arr, nc, sh, w_old[rows], w_new[rows])
        s.shift(cnt, nc, sh, masked=True)  # counts change only where the cell changes
        np.testing.assert_allclose(arr, s.cell_sums(c_new, nc, w_new), atol=1e-9)
        np.testing.assert_array_equal(cnt, s.cell_sums(c_new, nc))


def test_the_rule():
    # few signatures (groups from a few categorical columns): signatures; about one per row: pairs
    assert use_signatures(10_000, 200, 448)
    assert not use_signatures(10_000, 200, 9_000)
    assert not use_signatures(10_000_000, 5_000, 1_000)  # the signature x group table would be too large
    memb, _ = _membership(0, 2_000, 2, 3)
    assert memb.sums().by_signature
    assert memb.sums() is memb.sums()  # built once per membership


@settings(max_examples=25, deadline=None)
@given(memberships, st.sampled_from(["absolute", "signed"]), st.booleans(), st.booleans())
def test_descent_state_stays_equal_to_a_fresh_count(mr, odd, se, track):
    """CellState's incrementally kept statistics (every sum of every moment, mean and moment updates, odd
    moments of both kinds, with and without the standard-error sums) equal a recount from its predictions."""
    from mmc_core.paper.descent import CellState, DescentParams

    memb, rng = mr
    n = memb.n
    params = DescentParams(alpha=1e-3, beta=1e-3, m=4, moments=(2, 3, 4), odd_moments=odd, z=2.0 if se else 0.0)
    y = rng.random(n)
    st_ = CellState(
        params, memb, y, rng.random(n), {a: rng.random(n) * 0.2 for a in (2, 3, 4)}, track_moment_sums=track
    )
    for _ in range(4):
        rows = np.flatnonzero(rng.random(n) < 0.5)
        st_.set_mean(rows, rng.random(rows.size))
        a = int(rng.integers(2, 5))
        rows = np.flatnonzero(rng.random(n) < 0.5)
        st_.set_moment(a, rows, rng.random(rows.size) * 0.2)
    fresh = CellState(params, memb, y, st_.mu, st_.mom, track_moment_sums=track)
    names = ["S0", "C0"] + (["Q0"] if se else [])
    for nm in names:
        np.testing.assert_allclose(getattr(st_, nm), getattr(fresh, nm), atol=1e-9, err_msg=nm)
    for nm in ["SA", "CA", "TA"] + (["QA", "UA"] if se else []) + (["MA"] if track else []):
        for a in (2, 3, 4):
            np.testing.assert_allclose(getattr(st_, nm)[a], getattr(fresh, nm)[a], atol=1e-9, err_msg=f"{nm}[{a}]")


def test_a_row_sum_does_not_build_the_signatures(monkeypatch):
    """Predicting interval thresholds (per-row sums of group coefficients) runs over the pairs: building the
    signatures (a sort of every pair) only pays off for the descent's and the audit's many sums."""
    from mmc_core.groups import group_set as groups

    memb, rng = _membership(1, 3_000, 2, 4)
    builds = []
    original = groups.Membership.signatures
    monkeypatch.setattr(groups.Membership, "signatures", lambda self: builds.append(1) or original(self))
    sums = MembershipSums(memb)
    theta = rng.normal(size=memb.n_groups)
    np.testing.assert_allclose(sums.row_sums(theta), memb.to_dense() @ theta, atol=1e-12)
    assert builds == []
    sums.cell_sums(np.zeros(memb.n, dtype=np.int64), 1)  # a whole-table sum decides the mode: one build
    assert builds == [1] and sums.by_signature


def _random_membership(seed: int, n: int, n_groups: int, density: float):
    """Groups that are arbitrary row sets (overlapping, some empty), unlike groups built from columns."""
    from mmc_core.groups.membership import Membership

    rng = np.random.default_rng(seed)
    D = rng.random((n, n_groups)) < rng.uniform(0, density, n_groups)
    indptr = np.concatenate([[0], np.cumsum(D.sum(axis=0))]).astype(np.int64)
    rows = np.concatenate([np.flatnonzero(D[:, g]) for g in range(n_groups)] + [np.zeros(0, np.int64)])
    return Membership(n, [f"g{g}" for g in range(n_groups)], indptr, rows.astype(np.int64)), rng


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        memberships,
        st.tuples(st.integers(0, 10_000), st.integers(1, 80), st.integers(1, 12), st.floats(0.05, 1.0)).map(
            lambda t: _random_membership(*t)
        ),
    ),
    st.integers(1, 5),
    st.floats(0.0, 1.0),
)
def test_every_way_of_shifting_gives_the_same_bits(mr, nc, share):
    """An update's sums per layer, over its row-major pairs (repeated weights) and over pairs gathered by
    position are the same to the last bit: every (group, cell) adds the same rows in the same order."""
    from mmc_core.groups.sums import _RowLayers, _RowPairs

    memb, rng = mr
    n, G = memb.n, memb.n_groups
    layers = memb.layers()
    if layers is not None:  # each group in one layer, each row at most once per layer, every pair kept
        D = np.zeros((n, G + 1), dtype=int)
        np.add.at(D, (np.repeat(np.arange(n)[None, :], layers.shape[0], axis=0), layers), 1)
        np.testing.assert_array_equal(D[:, :G], memb.to_dense().astype(int))
        layer_of = [np.unique(np.nonzero(layers == g)[0]) for g in range(G)]
        assert all(lo.size <= 1 for lo in layer_of)
    rows = np.flatnonzero(rng.random(n) < share)
    c_old, c_new = rng.integers(0, nc, rows.size), rng.integers(0, nc, rows.size)
    stay = rng.random(rows.size) < 0.5
    c_new[stay] = c_old[stay]
    moved = c_old != c_new
    w_old, w_new = rng.normal(size=rows.size), rng.normal(size=rows.size)
    s = MembershipSums(memb, by_signature=False)
    ctxs = [memb.pairs_for_rows(rows), _RowPairs(*memb.groups_of_rows(rows))]
    if layers is not None:
        ctxs.append(_RowLayers(np.take(layers, rows, axis=1)))
    results = []
    for ctx in ctxs:
        start = rng.normal(size=G * nc) if not results else results[0][0]
        arr, cnt, part = start.copy(), np.zeros(G * nc), np.zeros(G * nc)
        sh = s.shift_keys(ctx, nc, c_old, c_new, moved)
        s.shift(arr, nc, sh, w_old, w_new)
        s.shift(cnt, nc, sh, masked=True)
        s.shift(part, nc, sh, w_old, w_new, masked=True)
        results.append((start, arr, cnt, part))
    for r in results[1:]:
        for a, b in zip(results[0][1:], r[1:]):
            np.testing.assert_array_equal(a, b)


def test_group_ids_are_stored_narrow_and_sum_right_past_one_byte():
    """Pairs mode keeps a byte per (row, group) pair for the group ids (uint8 up to 256 groups, uint16 beyond; 8 and
    4 bytes before), the Dask engine's largest per-row cost; ids wider than their type after a multiplication
    (group * cells > 255) must still give the dense sums."""
    rng = np.random.default_rng(5)
    for card, dtype in ((40, np.uint8), (299, np.uint16)):
        n = 3000
        table = {"a": rng.integers(0, card, n), "b": rng.integers(0, 5, n)}
        memb = GroupSet.from_columns(table, ["a", "b"], max_values=400).evaluate(table, n)
        s = MembershipSums(memb, by_signature=False)
        nc = 7
        cells = rng.integers(0, nc, n)
        w = rng.normal(size=n)
        D = memb.to_dense().astype(float)
        onehot = np.eye(nc)[cells]
        np.testing.assert_allclose(s.cell_table(cells, nc, w), np.einsum("ng,nc,n->gc", D, onehot, w), atol=1e-12)
        assert s._pair_groups().dtype == dtype and memb._row_major()[1].dtype == dtype
        assert s.pg.dtype == np.int64 and memb.pair_groups().dtype == np.int64  # what callers do arithmetic on
        # an unordered update goes through (position, group) pairs: keys group * nc + cell past 255
        rows = rng.permutation(n)[: n // 3]
        c_new = rng.integers(0, nc, rows.size)
        arr = s.cell_sums(cells, nc, w)
        ctx = s.context(rows)
        s.shift(arr, nc, s.shift_keys(ctx, nc, cells[rows], c_new), w[rows], w[rows])
        moved = cells.copy()
        moved[rows] = c_new
        np.testing.assert_allclose(arr, s.cell_sums(moved, nc, w), atol=1e-12)

"""Sums over group membership: the one primitive every (group x cell) statistic and every per-row group
threshold goes through (the descent, the audit, the bootstrap, the interval thresholds).

Two ways to sum, chosen by one rule (:func:`use_signatures`) for a membership:

* **signatures**: rows with the same set of groups share a signature (with groups built from a few
  categorical columns there are few). A sum over rows is taken per (signature, cell) with one ``bincount``
  over rows, then spread to the groups of each signature with a second ``bincount`` over the (signature,
  group) pairs. Cost ~ rows + signatures x groups per signature.
* **pairs**: one ``bincount`` over the (row, group) pairs of the membership. Cost ~ rows x groups per row;
  used when signatures are nearly as many as rows (a group built from a fine numeric column).

Every sum is a ``bincount``: a fixed summation order, so the results do not depend on the BLAS thread count
(a dense signature x group matrix product would). Per-row sums of group values (a row's threshold as the sum
of its groups' coefficients) add the coefficients in increasing group order in both ways, so they are the
same to the last bit whichever way is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a membership builds these sums (Membership.sums): a run-time import would be a cycle
    from .membership import Membership

__all__ = ["MembershipSums", "use_signatures", "Shift"]

# The rule, measured once (benchmarks/README.md, "cell sums"): signatures pay off while the (signature x
# group) table stays small and signatures are at most half the rows.
MAX_SIGNATURE_CELLS = 4_000_000


def use_signatures(n_rows: int, n_groups: int, n_signatures: int) -> bool:
    """Whether sums go through membership signatures (True) or over (row, group) pairs (False)."""
    return n_signatures * n_groups <= MAX_SIGNATURE_CELLS and n_signatures * 2 <= max(n_rows, 2)


class Shift:
    """The keys of one incremental change: rows (of an update) move from cells ``c_old`` to ``c_new`` of a
    partition with ``nc`` cells per group. Computed once and shared by every statistic the change refreshes
    (sums of residuals, counts, squares, ...), and the same for the rows under ``mask`` (those whose cell
    changes: counts only change there).

    A key belongs to one row of the update: per signature (one key a row), per (row, group) pair at ``pos``
    (the row's position in the update, any order), per pair with ``counts`` (the pairs of each row of the
    update, in its order: a row's weight reaches its pairs by a sequential ``np.repeat``), or ``layered``: one
    key per (layer, row) (see :meth:`~mmc_core.groups.membership.Membership.layers`), the row's weight used as it is."""

    __slots__ = ("k_old", "k_new", "pos", "counts", "mask", "size", "layered", "_masked")

    def __init__(self, k_old, k_new, pos, mask, size, counts=None, layered=False) -> None:
        self.k_old, self.k_new, self.pos, self.mask, self.size, self.counts = k_old, k_new, pos, mask, size, counts
        # layered: keys are (layers, rows of the update), a row's weight serves each of its layers as it is
        self.layered = layered
        self._masked: tuple | None = None

    def weights(self, w: np.ndarray | None, masked: bool = False) -> np.ndarray | None:
        """Per-row weights ``w`` (one per row of the update, also with ``masked``) as weights of the keys."""
        if w is None:
            return None
        if self.layered:
            return w[self.mask] if masked else w
        if not masked:
            if self.counts is not None:
                return np.repeat(w, self.counts)
            return w if self.pos is None else w[self.pos]
        reach = self.masked()[2]
        if self.counts is not None:
            return np.repeat(w[self.mask], reach)
        return w[self.mask] if reach is None else w[reach]

    def masked(self):
        """(k_old, k_new, how per-row weights reach the kept keys) over the rows under the mask: the counts of the
        mask's rows (pairs with ``counts``), the pairs' rows' positions in the update (pairs with ``pos``), else
        None (one key a row)."""
        if self._masked is None:
            if self.layered:
                self._masked = (self.k_old[:, self.mask], self.k_new[:, self.mask], None)
            elif self.counts is not None:
                keep = np.repeat(self.mask, self.counts)
                self._masked = (self.k_old[keep], self.k_new[keep], self.counts[self.mask])
            elif self.pos is None:  # a key per row (signatures): the mask's rows' weights are w[mask]
                self._masked = (self.k_old[self.mask], self.k_new[self.mask], None)
            else:
                keep = self.mask[self.pos]
                self._masked = (self.k_old[keep], self.k_new[keep], self.pos[keep])
        return self._masked


class MembershipSums:
    """Sums over the groups of a :class:`~mmc_core.groups.membership.Membership` (see the module docstring).

    Whole-table sums: :meth:`cell_sums` (per (group, cell)), :meth:`group_sums`, :meth:`row_sums` (per row,
    the sum of its groups' values), :meth:`replicate_group_sums` (the bootstrap's weighted group sums).
    Incremental sums for the descent: :meth:`context` of the rows an update touches, :meth:`shift_keys`,
    then :meth:`shift` once per statistic.
    """

    def __init__(self, memb: Membership, by_signature: bool | None = None):
        self.memb = memb
        self.n, self.G = memb.n, memb.n_groups
        self._pg: np.ndarray | None = None
        # None: decided by the rule on first need (the signatures cost a sort of all pairs); True / False force
        # a mode (tests compare the two)
        self._force = by_signature
        self._by_signature: bool | None = None

    @property
    def by_signature(self) -> bool:
        if self._by_signature is None and self._force is False:
            self._by_signature = False
        if self._by_signature is None:
            memb = self.memb
            sig, n_sig = memb.signatures() if self.n and self.G else (np.zeros(self.n, dtype=np.int64), 1)
            self._by_signature = use_signatures(self.n, self.G, n_sig) if self._force is None else self._force
            if self._by_signature:
                self.sig, self.ns = sig, n_sig
                A = memb.signature_matrix(sig, n_sig) if self.n and self.G else np.zeros((n_sig, self.G))
                self.sig_of_pair, self.pair_group = np.nonzero(A)  # (signature, group) pairs, signature-major
                self.ptr = np.searchsorted(self.sig_of_pair, np.arange(self.ns + 1))
                # layers by position cost a few sequential passes while the row-major pairs exist (row-order
                # group sums use them); then the row-major pairs go (12 bytes a pair)
                memb.layers(first_fit=False)
                memb.release_row_major()
        return self._by_signature

    def signatures(self) -> tuple[np.ndarray, int]:
        """(signature id of each row, number of signatures): rows with the same set of groups share an id (the
        ones the sums use in signature mode, else computed)."""
        if self.by_signature:
            return self.sig, self.ns
        return self.memb.signatures()

    @property
    def pg(self) -> np.ndarray:
        """Group of each (row, group) pair, aligned with ``memb.rows`` (pairs mode), as int64 (a copy: safe for
        arithmetic)."""
        return self._pair_groups().astype(np.int64)

    def _pair_groups(self) -> np.ndarray:
        """:attr:`pg` in the narrowest type (1 byte a pair with at most 256 groups): only indexed with or cast."""
        if self._pg is not None:
            return self._pg
        pg = self.memb.pair_groups(dtype=None)
        # kept only once pairs mode is decided (every sum then needs it); asking for the mode here would build
        # the signatures for a single row sum (a prediction's thresholds)
        if self._by_signature is False:
            self._pg = pg
        return pg

    # ---- whole-table sums ----------------------------------------------------------------------------------
    def _spread_keys(self, nc: int) -> np.ndarray:
        """(signature, group) pairs x cells: the flat (group, cell) key of every spread element, per ``nc``
        (a descent uses two partitions, so two small tables, built once instead of at every update)."""
        cache = self.__dict__.setdefault("_spread_cache", {})
        if nc not in cache:
            cache[nc] = (self.pair_group * nc)[:, None] + np.arange(nc)[None, :]
        return cache[nc]

    def _spread(self, arr, d, nc, touched):
        """arr[(g, c)] += d[s, c] for every touched signature s and each of its groups g."""
        keys = self._spread_keys(nc)
        if touched.size == self.ns:
            sig_rep = self.sig_of_pair
        else:
            starts, ends = self.ptr[touched], self.ptr[touched + 1]
            counts = ends - starts
            sig_rep = np.repeat(touched, counts)
            pos = np.arange(int(counts.sum())) + np.repeat(starts - (np.cumsum(counts) - counts), counts)
            keys = keys[pos]
        arr += np.bincount(keys.ravel(), weights=d[sig_rep].ravel(), minlength=self.G * nc)

    def cell_sums(self, cells: np.ndarray, n_cells: int, weights: np.ndarray | None = None) -> np.ndarray:
        """Sum of ``weights`` (or the count) over the rows of every (group, cell), flat (|G| * n_cells,):
        group g's cells at [g * n_cells, (g + 1) * n_cells)."""
        nc = int(n_cells)
        if self.by_signature:
            d = np.bincount(self.sig * nc + cells, weights=weights, minlength=self.ns * nc).astype(float)
            out = np.zeros(self.G * nc)
            self._spread(out, d.reshape(self.ns, nc), nc, np.arange(self.ns))
            return out
        r = self.memb.rows
        keys = np.multiply(self._pair_groups(), nc, dtype=np.int64)
        keys += np.asarray(cells)[r]
        return np.bincount(keys, weights=None if weights is None else weights[r], minlength=self.G * nc).astype(float)

    def cell_table(self, cells: np.ndarray, n_cells: int, weights: np.ndarray | None = None) -> np.ndarray:
        """:meth:`cell_sums` as a (|G|, n_cells) table."""
        w = None if weights is None else np.asarray(weights, dtype=float)
        return self.cell_sums(np.asarray(cells), n_cells, w).reshape(self.G, int(n_cells))

    @property
    def pr(self) -> np.ndarray:
        """Row of each (row, group) pair (group-major, rows sorted within a group), aligned with :attr:`pg`: for
        statistics that need every pair (per-cell central moments around the cell's own mean)."""
        return self.memb.rows

    def group_sums(self, weights: np.ndarray | None = None, row_order: bool = False) -> np.ndarray:
        """Sum of ``weights`` (or the count) over each group's rows, shape (|G|,). With ``row_order`` each
        group's rows are added one by one in row order, whatever the mode (the order the initial moments of
        saved models were computed in, kept so that those models stay identical to the last bit)."""
        w = None if weights is None else np.asarray(weights, dtype=float)
        if row_order and self.by_signature:
            layers = self.memb.layers(first_fit=False)  # built with the signatures, when groups allow
            if layers is not None:
                # per layer, each group's rows in row order: the additions of one bincount over the pairs,
                # with sequential reads instead of a gather of every pair's weight
                return _layer_sums(layers, w, self.G + 1)[: self.G]
            r = self.memb.rows
            return np.bincount(self._pair_groups(), weights=None if w is None else w[r], minlength=self.G).astype(float)
        return self.cell_sums(np.zeros(self.n, dtype=np.int64), 1, w)

    def row_sums(self, theta: np.ndarray) -> np.ndarray:
        """Per row, the sum of ``theta[g]`` over the row's groups (in increasing g), shape (n,)."""
        theta = np.asarray(theta, dtype=float)
        if self._by_signature:  # only when already built: a single row sum is cheaper over the pairs
            return np.bincount(self.sig_of_pair, weights=theta[self.pair_group], minlength=self.ns)[self.sig]
        return np.bincount(self.memb.rows, weights=theta[self._pair_groups()], minlength=self.n)

    def replicate_cell_sums(self, W: np.ndarray, cells: np.ndarray | None = None, n_cells: int = 1) -> np.ndarray:
        """(group, cell) sums of each row of the weights ``W`` (b, n) (a bootstrap replicate's row weights, or
        row values): shape (b, |G|, n_cells); without ``cells`` one cell per group."""
        b, nc = W.shape[0], int(n_cells)
        c = np.zeros(self.n, dtype=np.int64) if cells is None else np.asarray(cells)
        reps = np.arange(b)[:, None]
        if self.by_signature:
            keys = ((reps * self.ns + self.sig[None, :]) * nc + c[None, :]).ravel()
            d = np.bincount(keys, weights=W.ravel(), minlength=b * self.ns * nc).reshape(b, self.ns, nc)
            gkeys = ((reps * self.G + self.pair_group[None, :])[:, :, None] * nc + np.arange(nc)).ravel()
            src = d[:, self.sig_of_pair, :].ravel()
        else:
            r = self.memb.rows
            gkeys = ((reps * self.G + self._pair_groups()[None, :].astype(np.int64)) * nc + c[r][None, :]).ravel()
            src = W[:, r].ravel()
        return np.bincount(gkeys, weights=src, minlength=b * self.G * nc).reshape(b, self.G, nc)

    def replicate_group_sums(self, W: np.ndarray) -> np.ndarray:
        """Group sums of each row of the weights ``W`` (b, n): shape (b, |G|)."""
        return self.replicate_cell_sums(W)[:, :, 0]

    def replicate_width(self) -> int:
        """Elements one bootstrap replicate touches (to size blocks of replicates)."""
        return self.n if self.by_signature else self.memb.rows.size + self.n

    # ---- incremental sums (the descent) --------------------------------------------------------------------
    def context(self, rows: np.ndarray):
        """What an update of ``rows`` (distinct) needs: their signatures, or their (row, group) pairs: (counts,
        groups) when the rows increase (the descent's updates), else (positions, groups)."""
        if self.by_signature:
            return self.sig[rows]
        if rows.size < 2 or bool((rows[1:] > rows[:-1]).all()):
            # a large update (a quarter of the rows or more, as a whole-population cell) sums per layer
            layers = self.memb.layers() if rows.size * 4 > self.n else None
            if layers is not None:
                return _RowLayers(np.take(layers, rows, axis=1))
            return _RowPairs(*self.memb.groups_of_rows(rows))
        return self.memb.pairs_for_rows(rows)

    def shift_keys(self, ctx, nc: int, c_old: np.ndarray, c_new: np.ndarray, mask: np.ndarray | None = None) -> Shift:
        """The keys of moving the context's rows from cells ``c_old`` to ``c_new`` (partition of ``nc`` cells);
        ``mask`` marks the rows whose cell changes (for the statistics that only change there)."""
        if self.by_signature:
            base = ctx * nc
            return Shift(base + c_old, base + c_new, None, mask, self.ns * nc)
        if isinstance(ctx, _RowLayers):
            # the group part of each key (dummy group G where a row has no group in a layer), then its cell
            base = np.multiply(ctx.groups, nc, dtype=np.int64)
            k_new = None if mask is not None and not mask.any() else base + c_new
            k_old = np.add(base, c_old, out=base)
            if k_new is None:  # no row changes cell: the new keys are the old ones
                k_new = k_old
            return Shift(k_old, k_new, None, mask, (self.G + 1) * nc, layered=True)
        if isinstance(ctx, _RowPairs):
            counts = ctx.counts
            k_old = ctx.base(nc) + np.repeat(c_old, counts)
            # rows whose cell stays keep their keys: a row-length test spares a pass over the pairs
            if mask is not None and not mask.any():
                k_new = k_old
            else:
                k_new = k_old + np.repeat(c_new - c_old, counts)
            return Shift(k_old, k_new, None, mask, self.G * nc, counts=counts)
        loc, pg = ctx
        base = np.multiply(pg, nc, dtype=np.int64)
        return Shift(base + c_old[loc], base + c_new[loc], loc, mask, self.G * nc)

    def shift(self, arr, nc: int, sh: Shift, w_old=None, w_new=None, masked: bool = False):
        """arr (flat |G| * nc sums) += the sums of ``w_new`` at the new cells - ``w_old`` at the old ones, over
        the shift's rows (only those under its mask with ``masked``; weights are per row of the update)."""
        if masked:
            k_old, k_new, _ = sh.masked()
        else:
            k_old, k_new = sh.k_old, sh.k_new
        w_old, w_new = sh.weights(w_old, masked), sh.weights(w_new, masked)
        if sh.layered:
            # a (group, cell) lies in one layer: its sum there is the one over the pairs (same rows, same order),
            # and adding the other layers' zeros leaves it as it is
            arr += _layer_sums(k_new, w_new, sh.size)[: arr.size]
            arr -= _layer_sums(k_old, w_old, sh.size)[: arr.size]
            return
        if not self.by_signature:
            arr += np.bincount(k_new, weights=w_new, minlength=arr.size)
            arr -= np.bincount(k_old, weights=w_old, minlength=arr.size)
            return
        d = np.bincount(k_new, weights=w_new, minlength=sh.size).astype(float)
        d -= np.bincount(k_old, weights=w_old, minlength=sh.size)
        d = d.reshape(self.ns, nc)
        touched = np.flatnonzero(d.any(axis=1))
        if touched.size:
            self._spread(arr, d, nc, touched)


def _layer_sums(keys: np.ndarray, w: np.ndarray | None, size: int) -> np.ndarray:
    """Sums of ``w`` per key over every layer of (layers, rows) keys: a bincount per layer, added."""
    out = np.bincount(keys[0], weights=w, minlength=size).astype(float)
    for k in keys[1:]:
        out += np.bincount(k, weights=w, minlength=size)
    return out


class _RowLayers:
    """The groups of an update's rows per layer, (layers, rows)."""

    __slots__ = ("groups",)

    def __init__(self, groups: np.ndarray):
        self.groups = groups


class _RowPairs:
    """The (row, group) pairs of an update's rows in row-major order: each row's number of groups and the
    pairs' groups, with the keys' group part ``group * nc`` kept per partition (a mean update shifts two)."""

    __slots__ = ("counts", "groups", "_base")

    def __init__(self, counts: np.ndarray, groups: np.ndarray):
        self.counts, self.groups = counts, groups
        self._base: dict = {}

    def base(self, nc: int) -> np.ndarray:
        if nc not in self._base:
            self._base[nc] = self.groups.astype(np.int64) * nc
        return self._base[nc]

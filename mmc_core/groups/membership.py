"""Which rows belong to which group (:class:`Membership`), in compressed form, with the views the descent, the
audit and the sums read: row-major pairs, layers of disjoint groups, signatures.

Built by :meth:`mmc_core.groups.group_set.GroupSet.evaluate`; apart from the group definitions because it is about rows,
not about conditions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Membership"]


@dataclass
class Membership:
    """Which rows belong to which group, in compressed form.

    ``rows[indptr[g]:indptr[g+1]]`` are the (sorted) row indices of group g. The row-major view
    (``row_indptr``, ``row_groups``) is built on first use; it lets an update touching rows R refresh
    exactly the (row, group) pairs of R.
    """

    n: int
    names: list
    indptr: np.ndarray
    rows: np.ndarray
    _row_indptr: np.ndarray | None = field(default=None, repr=False)
    _row_groups: np.ndarray | None = field(default=None, repr=False)
    _row_ids: np.ndarray | None = field(default=None, repr=False)
    _row_counts: np.ndarray | None = field(default=None, repr=False)
    _layers: np.ndarray | None = field(default=None, repr=False)
    _layers_not_by_position: bool = field(default=False, repr=False)
    _sums: Any = field(default=None, repr=False)

    @property
    def n_groups(self) -> int:
        return len(self.names)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.indptr)

    def group_rows(self, g: int) -> np.ndarray:
        return self.rows[self.indptr[g] : self.indptr[g + 1]]

    def sums(self):
        """The :class:`~mmc_core.groups.sums.MembershipSums` of this membership, built once (the signatures behind
        it cost a sort of all (row, group) pairs) and shared by the descent, the audit and the intervals."""
        if self._sums is None:
            from .sums import MembershipSums

            self._sums = MembershipSums(self)
        return self._sums

    def pair_groups(self, dtype=np.int64) -> np.ndarray:
        """Group id of each stored (group, row) pair, aligned with ``rows`` (``dtype=None``: the narrowest type,
        :meth:`group_dtype`, for storage; cast before arithmetic on the ids)."""
        return np.repeat(np.arange(self.n_groups, dtype=dtype or self.group_dtype()), self.sizes)

    def group_dtype(self) -> type[np.integer]:
        """The narrowest type holding every group id: 1 byte a (row, group) pair with at most 256 groups. Arrays of
        this type are only indexed with or cast (``np.multiply(ids, nc, dtype=np.int64)``), never multiplied in
        place: ``uint8 * int`` wraps around."""
        return np.uint8 if self.n_groups <= 256 else np.uint16 if self.n_groups <= 65536 else np.int32

    def _row_major(self) -> tuple[np.ndarray, np.ndarray]:
        """(row_indptr, row_groups): the pairs ordered by row, built once on first use."""
        if self._row_indptr is None or self._row_groups is None:
            order = np.argsort(self.rows, kind="stable")
            self._row_groups = np.repeat(np.arange(self.n_groups, dtype=self.group_dtype()), self.sizes)[order]
            del order
            counts = np.bincount(self.rows, minlength=self.n)
            self._row_indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return self._row_indptr, self._row_groups

    def release_row_major(self):
        """Drop the row-major view (rebuilt on next use): 12 bytes a pair that sums by signature never need."""
        self._row_indptr = self._row_groups = self._row_ids = self._row_counts = None

    def pairs_for_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows R (distinct), all (position in R, group) pairs with R[position] in group."""
        indptr, row_groups = self._row_major()
        if rows.size * 4 > self.n:
            # Many rows: one masked pass over all pairs beats gathering row by row.
            if self._row_ids is None:
                self._row_ids = np.repeat(np.arange(self.n, dtype=np.int32), np.diff(indptr))
            row_ids = self._row_ids
            inside = np.zeros(self.n, dtype=bool)
            inside[rows] = True
            sel = inside[row_ids]
            pos = np.empty(self.n, dtype=np.int64)
            pos[rows] = np.arange(rows.size)
            return pos[row_ids[sel]], row_groups[sel]
        starts = indptr[rows]
        counts = indptr[rows + 1] - starts
        total = int(counts.sum())
        local = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        return local, row_groups[np.arange(total, dtype=np.int64) + offsets]

    def groups_of_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows R (distinct, increasing): (the number of groups of each row of R, the group of each (row, group)
        pair in row-major order). The pairs are those of :meth:`pairs_for_rows`, in the same order; a per-row
        value reaches its pairs by ``np.repeat(value, counts)``, a sequential copy instead of a gather."""
        indptr, row_groups = self._row_major()
        if self._row_counts is None:
            self._row_counts = np.diff(indptr).astype(np.int32)
        all_counts = self._row_counts
        counts = all_counts[rows]
        if rows.size * 4 > self.n:
            # Many rows: one sequential masked pass over the row-major pairs beats gathering row by row.
            inside = np.zeros(self.n, dtype=bool)
            inside[rows] = True
            return counts, row_groups[np.repeat(inside, all_counts)]
        starts = indptr[rows]
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        offsets += np.arange(offsets.size, dtype=np.int64)
        return counts, row_groups[offsets]

    def layers(self, first_fit: bool = True) -> np.ndarray | None:
        """Groups in layers: (L, n) small ints, the group of each row in each layer (``n_groups`` where the row has
        none), every group in exactly one layer, so a row has at most one group per layer. Groups built from
        columns fill few layers (the whole population; each column's values; each pair of columns' values).
        A sum per layer over the rows, with each row's own weight, adds every (group, cell) over the same rows
        in the same (row) order as over the pairs, without a weight per pair. None when the layers would be
        mostly empty (then pairs are cheaper).

        Built once: the layer of a group is its position among each row's groups when that position is the
        same in all its rows (groups from columns without missing values; sequential passes over the row-major
        pairs), else (with ``first_fit``) each group goes, in group order, to the lowest layer none of its rows
        uses yet (a bit mask per row, a loop over groups, at most 63 layers)."""
        if self._layers is None and not self._layers_not_by_position:
            self._layers = self._layers_by_position()
            self._layers_not_by_position = self._layers is None
        if self._layers is None and first_fit:
            self._layers = self._layers_first_fit()
        return self._layers if self._layers is not None and self._layers.size else None

    def _layer_dtype(self) -> type[np.integer]:
        """The narrowest unsigned type for group ids and the 'no group' id: 1 byte a (layer, row) with < 255
        groups."""
        return np.uint8 if self.n_groups < 255 else np.uint16 if self.n_groups < 65535 else np.int32

    def _layers_by_position(self) -> np.ndarray | None:
        indptr, row_groups = self._row_major()
        if self._row_counts is None:
            self._row_counts = np.diff(indptr).astype(np.int32)
        counts = self._row_counts
        n_layers = int(counts.max(initial=0))
        if self.n == 0 or self.n_groups == 0 or n_layers * self.n > 2 * self.rows.size:
            return np.zeros((0, self.n), dtype=np.int32)
        out: np.ndarray = np.full((n_layers, self.n), self.n_groups, dtype=self._layer_dtype())
        seen = np.zeros(self.n_groups, dtype=bool)
        for j in range(n_layers):
            has = np.flatnonzero(counts > j)
            g = row_groups[indptr[has] + j]
            out[j, has] = g
            present = np.bincount(g, minlength=self.n_groups) > 0
            if (seen & present).any():  # a group at two positions: no layers by position
                return None
            seen |= present
        return out

    def _layers_first_fit(self) -> np.ndarray:
        none = np.zeros((0, self.n), dtype=np.int32)
        if self.n == 0 or self.n_groups == 0:
            return none
        used = np.zeros(self.n, dtype=np.uint64)
        layer_of = np.zeros(self.n_groups, dtype=np.int64)
        for g in range(self.n_groups):
            rows = self.group_rows(g)
            taken = int(np.bitwise_or.reduce(used[rows])) if rows.size else 0
            free = (~taken & (taken + 1)).bit_length() - 1  # the lowest clear bit
            if free >= 63:
                return none
            layer_of[g] = free
            used[rows] |= np.uint64(1 << free)
        del used
        n_layers = int(layer_of.max()) + 1
        if n_layers * self.n > 2 * self.rows.size:
            return none
        out: np.ndarray = np.full((n_layers, self.n), self.n_groups, dtype=self._layer_dtype())
        for g in range(self.n_groups):
            out[layer_of[g], self.group_rows(g)] = g
        return out

    def signatures(self) -> tuple[np.ndarray, int]:
        """Signature id of each row: rows with the same set of groups share an id.

        A row's signature is hashed as the wrapping sum of random 64-bit keys of its groups; two different
        group sets collide with probability about (number of signatures)^2 / 2^64.
        """
        indptr, row_groups = self._row_major()
        seeds = np.random.default_rng(0x5EED).integers(1, 2**63 - 1, size=max(self.n_groups, 1), dtype=np.int64)
        keys = seeds.astype(np.uint64) * np.uint64(2) + np.uint64(1)
        h = np.zeros(self.n, dtype=np.uint64)
        counts = np.diff(indptr)
        nonempty = np.flatnonzero(counts > 0)
        if nonempty.size:
            with np.errstate(over="ignore"):
                h[nonempty] = np.add.reduceat(keys[row_groups], indptr[nonempty])
        _, inverse = np.unique(h, return_inverse=True)
        sig = inverse.ravel().astype(np.int64)
        return sig, int(sig.max()) + 1 if sig.size else 0

    def signature_matrix(self, sig: np.ndarray, n_sig: int) -> np.ndarray:
        """Dense (signatures x groups) 0/1 matrix, from one representative row per signature."""
        rep = np.zeros(n_sig, dtype=np.int64)
        rep[sig[::-1]] = np.arange(sig.size - 1, -1, -1)
        A = np.zeros((n_sig, self.n_groups))
        indptr, row_groups = self._row_major()
        starts, ends = indptr[rep], indptr[rep + 1]
        counts = ends - starts
        sig_ids = np.repeat(np.arange(n_sig), counts)
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        A[sig_ids, row_groups[np.arange(int(counts.sum())) + offsets]] = 1.0
        return A

    def to_dense(self) -> np.ndarray:
        """Boolean (n, |G|) matrix; for tests and small tables."""
        out = np.zeros((self.n, self.n_groups), dtype=bool)
        out[self.rows, self.pair_groups()] = True
        return out

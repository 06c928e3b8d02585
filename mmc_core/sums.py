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

import numpy as np

from .groups import Membership

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
    changes: counts only change there)."""

    __slots__ = ("k_old", "k_new", "pos", "pos_m", "k_old_m", "k_new_m", "mask", "size")

    def __init__(self, k_old, k_new, pos, mask, size):
        self.k_old, self.k_new, self.pos, self.mask, self.size = k_old, k_new, pos, mask, size
        self.pos_m = self.k_old_m = self.k_new_m = None

    def masked(self):
        if self.k_old_m is None:
            keep = self.mask if self.pos is None else self.mask[self.pos]
            self.k_old_m, self.k_new_m = self.k_old[keep], self.k_new[keep]
            self.pos_m = np.flatnonzero(keep) if self.pos is None else self.pos[keep]
        return self.k_old_m, self.k_new_m, self.pos_m


class MembershipSums:
    """Sums over the groups of a :class:`~mmc_core.groups.Membership` (see the module docstring).

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
                memb.release_row_major()
        return self._by_signature

    @property
    def pg(self) -> np.ndarray:
        """Group of each (row, group) pair, aligned with ``memb.rows`` (pairs mode)."""
        if self._pg is not None:
            return self._pg
        pg = self.memb.pair_groups()
        # kept only once pairs mode is decided (every sum then needs it; 8 bytes a pair); asking for the mode
        # here would build the signatures for a single row sum (a prediction's thresholds)
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
        keys = self.pg * nc + np.asarray(cells)[r]
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
            r = self.memb.rows
            return np.bincount(self.pg, weights=None if w is None else w[r], minlength=self.G).astype(float)
        return self.cell_sums(np.zeros(self.n, dtype=np.int64), 1, w)

    def row_sums(self, theta: np.ndarray) -> np.ndarray:
        """Per row, the sum of ``theta[g]`` over the row's groups (in increasing g), shape (n,)."""
        theta = np.asarray(theta, dtype=float)
        if self._by_signature:  # only when already built: a single row sum is cheaper over the pairs
            return np.bincount(self.sig_of_pair, weights=theta[self.pair_group], minlength=self.ns)[self.sig]
        return np.bincount(self.memb.rows, weights=theta[self.pg], minlength=self.n)

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
            gkeys = ((reps * self.G + self.pg[None, :]) * nc + c[r][None, :]).ravel()
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
        """What an update of ``rows`` (distinct) needs: their signatures, or their (position, group) pairs."""
        if self.by_signature:
            return self.sig[rows]
        return self.memb.pairs_for_rows(rows)

    def shift_keys(self, ctx, nc: int, c_old: np.ndarray, c_new: np.ndarray, mask: np.ndarray | None = None) -> Shift:
        """The keys of moving the context's rows from cells ``c_old`` to ``c_new`` (partition of ``nc`` cells);
        ``mask`` marks the rows whose cell changes (for the statistics that only change there)."""
        if self.by_signature:
            base = ctx * nc
            return Shift(base + c_old, base + c_new, None, mask, self.ns * nc)
        loc, pg = ctx
        base = pg * nc
        return Shift(base + c_old[loc], base + c_new[loc], loc, mask, self.G * nc)

    def shift(self, arr, nc: int, sh: Shift, w_old=None, w_new=None, masked: bool = False):
        """arr (flat |G| * nc sums) += the sums of ``w_new`` at the new cells - ``w_old`` at the old ones, over
        the shift's rows (only those under its mask with ``masked``; weights are per row of the update)."""
        if masked:
            k_old, k_new, pos = sh.masked()
        else:
            k_old, k_new, pos = sh.k_old, sh.k_new, sh.pos
        if pos is not None:
            w_old = None if w_old is None else w_old[pos]
            w_new = None if w_new is None else w_new[pos]
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

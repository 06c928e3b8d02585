"""The descent's engine seam and its in-memory engine: :class:`CellStats` (the audit side of a descent state,
over (group x cell) sums only: which cells are violated, the worst one, the next update) and :class:`CellState`
(the numpy engine: predictions, labels and the sums, kept up to date incrementally), with the cell test
:func:`cell_violated`.

Apart from the loop (:mod:`mmc_core.paper.descent`) so that an engine (this one, or the Dask one) is read on its own.
"""

from __future__ import annotations

import numpy as np

from ..groups.membership import Membership
from ..groups.sums import MembershipSums
from .descent_params import SHRINK_MIN, TIE, WHOLE, DescentParams, Update, group_cells, select_rows
from .moments import MomentKind, pseudo_label

__all__ = ["CellState", "CellStats", "cell_violated"]


class CellStats:
    """The engine seam: the audit side of a descent state, over (group x cell) sums only.

    The descent never touches rows. It reads the per-(group, cell) sums an engine maintains (``S0``, ``C0``,
    ``Q0`` for the mean cells G(mu, i); ``SA``, ``CA``, ``TA``, ``QA``, ``UA`` per moment a for the joint cells
    G(mu, m_a, i, j); flat arrays of length |G| * cells) and chooses updates from them here; it hands each
    update to the engine (``apply``), which changes its rows' predictions and refreshes the sums. An engine
    implements:

    * ``n`` (rows), ``G`` (groups), ``m``, ``p`` (the DescentParams) and the sums above;
    * ``apply(update)``: apply one update to the predictions of its rows and refresh the sums;
    * ``full_recompute()``: recompute every sum from the rows (convergence is decided on fresh sums);
    * ``mean_potential()`` / ``moment_potential(a)``: mean over rows of (mu - y)^2 / (m_a - label_a)^2;
    * ``cell_totals(target, g, partition)``: per-cell sums of the moment-``target`` predictions over the
      group's cells (the ratio step's denominators);
    * ``snapshot_predictions()``: a copy of the current predictions (early stopping keeps the best round).

    :class:`CellState` is the in-memory numpy engine; ``mmc_core.engines.dask_engine`` holds the Dask one.
    """

    n: int
    G: int
    m: int
    p: DescentParams
    S0: np.ndarray
    C0: np.ndarray
    Q0: np.ndarray | None
    SA: dict
    CA: dict
    TA: dict
    QA: dict
    UA: dict

    @property
    def se(self) -> bool:
        """Whether the per-cell standard-error test is on (then sums of squares are maintained too)."""
        return self.p.z > 0

    # ---- engine interface (implemented by each engine) -------------------------------------------
    def apply(self, upd: Update):
        raise NotImplementedError

    def full_recompute(self):
        raise NotImplementedError

    def mean_potential(self) -> float:
        raise NotImplementedError

    def moment_potential(self, a: int) -> float:
        raise NotImplementedError

    def cell_totals(self, target: int, g: int, partition: int) -> np.ndarray:
        raise NotImplementedError

    def snapshot_predictions(self) -> dict:
        raise NotImplementedError

    # ---- audit -----------------------------------------------------------------------------------
    def _whole(self, *arrs):
        """Per-group totals of cell arrays (the whole-group cells): block sums, no separate bookkeeping."""
        return tuple(None if x is None else x.reshape(self.G, -1).sum(axis=1) for x in arrs)

    def mean_blocks(self):
        """(partition, sums, counts, sums of squares, cells per group) of every mean partition."""
        out = [(0, self.S0, self.C0, self.Q0, self.m)]
        if self.p.z_group > 0:
            out.append((WHOLE, *self._whole(self.S0, self.C0, self.Q0), 1))
        return out + [(a, self.SA[a], self.CA[a], self.QA.get(a), self.m * self.m) for a in self.p.moments]

    def moment_blocks(self, a: int):
        out = [(a, self.TA[a], self.CA[a], self.UA.get(a), self.m * self.m)]
        if self.p.z_group > 0:
            out.append((WHOLE, *self._whole(self.TA[a], self.CA[a], self.UA.get(a)), 1))
        return out

    def violated(self, S, C, Q, thr: float, partition: int = 0, target: int = 1) -> np.ndarray:
        """The violated cells: |S| >= thr (the mass-weighted test, thr = alpha n), and with the standard-error
        test also |t| >= z (z_group for whole groups, z_group_moment for whole groups of a moment ``target``
        when set) and count >= min_count (see :func:`cell_violated`)."""
        if not self.p.se_tests(target):
            return cell_violated(S, C, Q, thr)
        z = self.p.z
        if partition == WHOLE:
            z = self.p.z_group_moment if (target >= 2 and self.p.z_group_moment >= 0) else self.p.z_group
        elif target >= 2 and self.p.z_moment >= 0:
            z = self.p.z_moment
        # A moment's pseudo-labels are heavy-tailed: a cell that drew none of the rare large residuals has a low
        # mean AND a low sample variance, so its own t statistic says "variance overstated" far beyond its level
        # (in null worlds of heavy-tailed tables one such step put a group 30% off). Its variance is taken as at
        # least the pooled one: cells whose spread is below the pool are left to the moments' cell step.
        floor = self.p.moment_var_floor(target) if target >= 2 else 0.0
        return cell_violated(S, C, Q, thr, z, self.p.min_count, floor)

    def _masked_abs(self, S, C, Q, thr, partition, target=1):
        if not self.se:
            return np.abs(S)
        return np.where(self.violated(S, C, Q, thr, partition, target), np.abs(S), 0.0)

    def _worst(self, blocks, thr, target=1):
        """The worst cell over the blocks. Ties are decided by position, not by rounding: a cell wins only if
        it beats every earlier one by more than TIE (relative). Sums that are equal in exact arithmetic (a
        whole group and its only non-zero cell; two groups with the same rows) then give the same choice
        whichever order an engine adds rows in."""
        best = (-1.0, 0, 0, None)
        for part, S, C, Q, width in blocks:
            arr = self._masked_abs(S, C, Q, thr, part, target) if (self.se and thr is not None) else np.abs(S)
            k = int(np.argmax(arr))
            if arr[k] > 0:
                k = int(np.argmax(arr >= arr[k] * (1.0 - TIE)))
            v = arr[k] / self.n
            if v > best[0] * (1.0 + TIE) or best[3] is None:
                best = (v, part, k // width, (S, C, Q, width))
        return best

    def worst_mean(self, thr: float | None = None):
        """(|v| of the worst mean cell over all partitions, partition, group). With the standard-error test
        (and ``thr``) only cells passing it count; |v| = 0 when none does."""
        return self._worst(self.mean_blocks(), thr)[:3]

    def worst_cell_mean(self) -> float:
        """|v| of the worst mean cell of the paper (mean cells and joint mean-moment cells; not the whole-group
        cells the "se" rule also audits): the quantity the stated alpha bounds, which the history records so
        that the convergence chart and alpha speak of the same cells."""
        return self._worst([b for b in self.mean_blocks() if b[0] != WHOLE], None)[0]

    def worst_moment(self, a: int, thr: float | None = None):
        v, _, g, _ = self._worst(self.moment_blocks(a), thr, a)
        return v, g

    def count_mean_violations(self, alpha: float) -> int:
        thr = alpha * self.n
        return int(sum(self.violated(S, C, Q, thr, part).sum() for part, S, C, Q, _ in self.mean_blocks()))

    def make_update(self, target: int, thr: float, eta: float) -> Update | None:
        """The update on the worst violated cell's group: all its violated cells of that partition."""
        blocks = self.mean_blocks() if target == 1 else self.moment_blocks(target)
        v, part, g, arrs = self._worst(blocks, thr, target)
        if v * self.n < thr or v <= 0:
            return None
        S, C, Q, width = arrs
        blk = slice(g * width, (g + 1) * width)
        mask = self.violated(S[blk], C[blk], None if Q is None else Q[blk], thr, part, target) if self.se else None
        upd = _make_update(target, part, g, S[blk], C[blk], thr, self.p.step, eta, mask)
        if target >= 2 and self.p.moment_step == "ratio":
            # scale every prediction of a violated cell by (mean target) / (mean prediction): the cell's
            # residual becomes 0 as with the exact step, and predictions stay positive and keep their ratios
            tot = self.cell_totals(target, g, part)[upd.cells]
            upd.deltas = np.clip(1.0 - S[blk][upd.cells] / np.where(tot > 0, tot, 1.0), 1e-6, 1e6)
        if target >= 2 and part == WHOLE and self.p.moment_shrink > 0 and Q is not None:
            # The group's own fitting-row moment is a noisy estimate of its true one: an exact step to it made
            # the fit follow the sample (a 300-row group's variance off the truth by 10-25% with heavy-tailed
            # noise, then found by an audit of fresh rows). The James-Stein share 1 - 1 / t^2 of the gap is the
            # gap's estimate given its t statistic (E t^2 = 1 + the squared true gap in standard errors), here
            # with a floor of SHRINK_MIN (the progress the termination bound counts on). With the additive step
            # |t| is then at most max(1 / |t|, |t| / 2); the ratio step (on the log scale) can leave more, and
            # the group is corrected again. (Q is None without the standard-error test: no shrinkage then.)
            s_, c_, q_ = float(S[blk][0]), float(C[blk][0]), float(Q[blk][0])
            t2 = s_ * s_ * (c_ - 1.0) / max(c_ * q_ - s_ * s_, 1e-300)
            w = max(SHRINK_MIN, 1.0 - self.p.moment_shrink / t2) if t2 > 0 else 1.0
            upd.deltas = upd.deltas**w if self.p.moment_step == "ratio" else upd.deltas * w
        return upd

    def max_moment_violation(self) -> float:
        if not self.p.moments:
            return 0.0
        return max(float(np.abs(self.TA[a]).max()) / self.n for a in self.p.moments)


class CellState(CellStats):
    """The numpy engine: predictions and incrementally maintained cell statistics over one set of rows.

    With ``track_moment_sums`` it also keeps MA[a], the per-(group, joint cell) sums of the moment-a
    predictions (the ratio step's denominators; the Dask engine ships them with every update's sums)."""

    def __init__(
        self,
        params: DescentParams,
        memb: Membership,
        y: np.ndarray,
        mu: np.ndarray,
        moments: dict,
        summer: MembershipSums | None = None,
        track_moment_sums: bool = False,
    ):
        self.p = params
        self.memb = memb
        self.n = memb.n
        self.G = memb.n_groups
        self.m = params.m
        self.y = np.asarray(y, dtype=float)
        self.mu = np.array(mu, dtype=float)
        self.mom = {a: np.array(moments[a], dtype=float) for a in params.moments}
        # bucket indices as int32 (half the memory; cell keys are widened to int64 where they meet the groups)
        self.bmu = params.mean_grid.index(self.mu).astype(np.int32)
        self.bmom = {a: params.grid(a).index(self.mom[a]).astype(np.int32) for a in params.moments}
        self.sums = summer if summer is not None else memb.sums()
        self.track_ma = track_moment_sums
        self._cells: tuple | None = None  # (group, partition, rows, cells): apply() reuses make_update's
        self.full_recompute()

    # ---- statistics ------------------------------------------------------------------------------
    def label(self, a: int, mu: np.ndarray, y: np.ndarray) -> np.ndarray:
        return pseudo_label(a, y - mu, self.p.odd_moments)

    def full_recompute(self):
        m, mm, cell_sums = self.m, self.m * self.m, self.sums.cell_sums
        res = self.mu - self.y
        self.S0 = cell_sums(self.bmu, m, res)
        self.C0 = cell_sums(self.bmu, m, None)
        self.SA, self.CA, self.TA = {}, {}, {}
        self.Q0, self.QA, self.UA = None, {}, {}
        if self.se:
            self.Q0 = cell_sums(self.bmu, m, res * res)
        for a in self.p.moments:
            cells = self.bmu * m + self.bmom[a]
            self.SA[a] = cell_sums(cells, mm, res)
            self.CA[a] = cell_sums(cells, mm, None)
            t = self.mom[a] - self.label(a, self.mu, self.y)
            self.TA[a] = cell_sums(cells, mm, t)
            if self.se:
                self.QA[a] = cell_sums(cells, mm, res * res)
                self.UA[a] = cell_sums(cells, mm, t * t)
        if self.track_ma:
            self.MA = {a: cell_sums(self.bmu * m + self.bmom[a], mm, self.mom[a]) for a in self.p.moments}

    def _target(self, a: int, ma: np.ndarray, r: np.ndarray) -> np.ndarray:
        """m_a - (y - mu)^a from the residual r = mu - y, in one buffer. (y - mu)^a is pseudo_label(a, r) up
        to the sign (-1)^a of signed odd moments: a product of IEEE numbers flips exactly with a factor's sign,
        so this equals ``ma - self.label(a, mu, y)`` to the last bit."""
        lab = pseudo_label(a, r, self.p.odd_moments)
        if a % 2 == 1 and self.p.odd_moments != MomentKind.ABSOLUTE:
            return np.add(ma, lab, out=lab)
        return np.subtract(ma, lab, out=lab)

    # set_mean / set_moment drop each row-length temporary as soon as it is used (``del``): an update of a
    # large group touches every row, and these temporaries, not the state, set the fit's peak memory.
    def set_mean(self, rows: np.ndarray, new: np.ndarray):
        if rows.size == 0:
            return
        self._cells = None
        m, mm, sums = self.m, self.m * self.m, self.sums
        ctx = sums.context(rows)
        y = self.y[rows]
        old = self.mu[rows]
        b_old, b_new = self.bmu[rows], self.p.mean_grid.index(new)
        r_old, r_new = old - y, new - y
        del y, old
        moved = b_old != b_new
        any_moved = bool(moved.any())
        se = self.se
        sh = sums.shift_keys(ctx, m, b_old, b_new, moved)
        sums.shift(self.S0, m, sh, r_old, r_new)
        q_old = q_new = None
        if se:
            q_old, q_new = r_old * r_old, r_new * r_new
            sums.shift(self.Q0, m, sh, q_old, q_new)
        if any_moved:
            sums.shift(self.C0, m, sh, masked=True)
        del sh
        for a in self.p.moments:
            ba = self.bmom[a][rows]
            sh = sums.shift_keys(ctx, mm, b_old * m + ba, b_new * m + ba, moved)
            del ba
            sums.shift(self.SA[a], mm, sh, r_old, r_new)
            if any_moved:
                sums.shift(self.CA[a], mm, sh, masked=True)
            ma = self.mom[a][rows]
            t_old, t_new = self._target(a, ma, r_old), self._target(a, ma, r_new)
            sums.shift(self.TA[a], mm, sh, t_old, t_new)
            if se:
                sums.shift(self.QA[a], mm, sh, q_old, q_new)
                sums.shift(self.UA[a], mm, sh, t_old * t_old, t_new * t_new)
            del t_old, t_new
            if self.track_ma and any_moved:
                sums.shift(self.MA[a], mm, sh, ma, ma, masked=True)
            del sh, ma
        self.mu[rows] = new
        self.bmu[rows] = b_new

    def set_moment(self, a: int, rows: np.ndarray, new: np.ndarray):
        if rows.size == 0:
            return
        self._cells = None
        m, mm, sums = self.m, self.m * self.m, self.sums
        ctx = sums.context(rows)
        old = self.mom[a][rows]
        b_old, b_new = self.bmom[a][rows], self.p.grid(a).index(new)
        bmu = self.bmu[rows]
        moved = b_old != b_new
        sh = sums.shift_keys(ctx, mm, bmu * m + b_old, bmu * m + b_new, moved)
        del ctx, bmu, b_old
        lab = self.label(a, self.mu[rows], self.y[rows])
        t_old, t_new = old - lab, new - lab
        del lab
        sums.shift(self.TA[a], mm, sh, t_old, t_new)
        if self.se:
            sums.shift(self.UA[a], mm, sh, t_old * t_old, t_new * t_new)
        del t_old, t_new
        if moved.any():
            res = self.mu[rows] - self.y[rows]
            sums.shift(self.SA[a], mm, sh, res, res, masked=True)
            sums.shift(self.CA[a], mm, sh, masked=True)
            if self.se:
                rr = res * res
                sums.shift(self.QA[a], mm, sh, rr, rr, masked=True)
                del rr
            del res
        if self.track_ma:
            sums.shift(self.MA[a], mm, sh, old, new)
        del sh, old
        self.mom[a][rows] = new
        self.bmom[a][rows] = b_new

    # ---- updates ---------------------------------------------------------------------------------
    def cells_of_group(self, g: int, partition: int):
        """:func:`group_cells` of group g; kept until predictions change (the ratio step reads them for its
        denominators, then the update's apply for its rows)."""
        c = self._cells
        if c is not None and c[0] == g and c[1] == partition:
            return c[2]
        bmom = self.bmom[partition] if partition not in (0, WHOLE) else None
        out = group_cells(self.memb.group_rows(g), self.n, self.bmu, self.m, bmom, partition)
        self._cells = (g, partition, out)
        return out

    def apply(self, upd: Update):
        rows_g, cells_g, n_cells = self.cells_of_group(upd.group, upd.partition)
        rows, d = select_rows(upd, rows_g, cells_g, n_cells)
        del rows_g, cells_g
        if upd.target == 1:
            lo, hi = self.p.projection(1)
            new = np.clip(self.mu[rows] - d, lo, hi)
            del d
            self.set_mean(rows, new)
        else:
            new = self.p.moment_new(upd.target, self.mom[upd.target][rows], d)
            del d
            self.set_moment(upd.target, rows, new)

    def cell_totals(self, target: int, g: int, partition: int) -> np.ndarray:
        rows_g, cells_g, n_cells = self.cells_of_group(g, partition)
        w = self.mom[target] if rows_g is None else self.mom[target][rows_g]
        return np.bincount(cells_g, weights=w, minlength=n_cells)

    def snapshot_predictions(self) -> dict:
        return {"mu": self.mu.copy(), "mom": {a: v.copy() for a, v in self.mom.items()}}

    def mean_potential(self) -> float:
        return float(np.mean((self.mu - self.y) ** 2))

    def moment_potential(self, a: int) -> float:
        return float(np.mean((self.mom[a] - self.label(a, self.mu, self.y)) ** 2))


def cell_violated(S, C, Q, thr: float, z: float = 0.0, min_count: int = 0, var_floor: float = 0.0) -> np.ndarray:
    """Violated cells given their sums S, counts C and sums of squares Q of the residual.

    Always: |S| >= thr (the paper's mass-weighted test, thr = alpha n). With z > 0 also: C >= max(min_count,
    2) and the cell's t statistic |mean| / (sd / sqrt(C)) >= z, i.e. S^2 (C - 1) >= z^2 (C Q - S^2): a cell
    is corrected only when its residual is large relative to *its own* standard error (with z from a
    Bonferroni correction over the audited cells, the chance that any correct cell is flagged by noise at a
    round is at most the chosen level). ``var_floor`` > 0: the cell's per-row variance is taken as at least
    this (its sample variance, (Q - S^2 / C) / (C - 1), is replaced by the larger of the two).
    """
    out = np.abs(S) >= thr
    if z > 0:
        S2 = S * S
        spread = C * Q - S2
        if var_floor > 0:
            spread = np.maximum(spread, C * (C - 1.0) * var_floor)
        out &= (C >= max(min_count, 2)) & (S2 * (C - 1.0) >= (z * z) * spread)  # noqa: SIM300 - C, S2: arrays
    return out


def _make_update(target, partition, g, stats_block, counts_block, thr, step, eta, mask=None) -> Update:
    cells = np.flatnonzero(np.abs(stats_block) >= thr if mask is None else mask)
    if step == "paper":
        deltas = eta * np.sign(stats_block[cells])
    else:
        deltas = stats_block[cells] / counts_block[cells]
    return Update(target, partition, g, cells.astype(np.int64), deltas.astype(float))

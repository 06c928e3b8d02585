"""What a descent runs with and what it writes: its parameters (:class:`DescentParams`: thresholds, buckets,
step rule and the standard-error test) and the record of one update (:class:`Update`), with the rows an update
selects (:func:`select_rows`, :func:`group_cells`), shared by fitting and replay.

Apart from the descent loop (:mod:`mmc_core.paper.descent`) and its engines (:mod:`mmc_core.paper.cell_state`) because a
saved model is exactly these: the model file reads and writes them without running a descent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .buckets import BucketGrid, mean_grid, moment_grid, moment_projection
from .moments import MomentKind

__all__ = [
    "SE_SCOPES",
    "SHRINK_MIN",
    "STEP_RULES",
    "TIE",
    "WHOLE",
    "DescentParams",
    "Update",
    "group_cells",
    "select_rows",
]

STEP_RULES = ("exact", "paper")
WHOLE = 1  # partition code of the whole-group cells (one cell per group)
TIE = 1e-9  # relative: cell statistics closer than this are a tie (decided by position; see CellStats._worst)
# A shrunken whole-group moment step takes at least this share of the group's gap: the step's progress stays a
# fixed fraction of the exact step's, so the descent's termination argument is unchanged (see make_update).
SHRINK_MIN = 0.5


SE_SCOPES = ("all", "mean", "moments")


@dataclass(frozen=True)
class DescentParams:
    """alpha, beta: mass-weighted violation thresholds; m: buckets per predictor; moments: the central
    moments fitted (2..k); step: ``paper`` (eta = alpha or beta, the paper's step) or ``exact`` (shift each
    violating cell by its mean residual: at least the paper's progress per update, usually far more; a whole
    group's shrunken moment step, ``moment_shrink``, at least 3/4 of the exact step's)."""

    alpha: float
    beta: float
    m: int
    moments: tuple = (2,)
    step: str = "exact"
    odd_moments: str = MomentKind.ABSOLUTE
    max_rounds: int | None = None
    moment_betas: tuple = ()  # optional (a, beta_a) pairs: a threshold per moment (the "auto" rule scales each)
    # --- model format 2 (all optional; the defaults reproduce format 1 exactly) ---
    mean_edges: tuple = ()  # interior edges of the mean grid (data quantiles); () = uniform on [0, 1]
    moment_edges: tuple = ()  # (a, interior edges) pairs: data-scale moment grids; absent = uniform
    moment_floors: tuple = ()  # (a, floor) pairs: moment predictions are projected onto [floor, hi], floor > 0
    z: float = 0.0  # > 0: a cell is violated only if also |t| >= z (its own standard error, see cell_violated)
    z_group: float = 0.0  # > 0: whole groups are audited as cells too, with this critical value
    z_group_moment: float = -1.0  # whole groups' critical value for the moments (< 0: z_group)
    z_moment: float = -1.0  # the moments' finer cells' critical value (< 0: z)
    min_count: int = 0  # with z > 0: cells of fewer rows are never violated
    moment_step: str = "add"  # "add": m_a -= delta (the paper's); "ratio": m_a *= factor (a scale's own step)
    # > 0 (exact step only): a whole group's moment step takes the share max(SHRINK_MIN, 1 - moment_shrink /
    # t^2) of the gap to the group's own fitting-row moment (t: the group's t statistic), on the log scale with
    # the ratio step
    moment_shrink: float = 0.0
    # (a, floor) pairs: with the standard-error test, a moment cell's per-row residual variance is taken as at least
    # the floor (the pooled variance of the moment's pseudo-labels): see CellStats.violated
    moment_var_floors: tuple = ()
    # which cells the standard-error test gates (with z > 0): "all", or only the "mean" cells (target 1) or the
    # "moments" cells: a threshold given as a number is the paper's plain test, so the fit reaches it
    se_scope: str = "all"

    def __post_init__(self):
        if self.moment_shrink > 0 and self.step != "exact":
            raise ValueError("moment_shrink applies to the exact step only")
        if self.se_scope not in SE_SCOPES:
            raise ValueError(f"se_scope must be one of {', '.join(SE_SCOPES)}, got {self.se_scope!r}")

    def se_tests(self, target: int) -> bool:
        """Whether the standard-error test gates the cells of ``target`` (1: the mean's, a >= 2: moment a's)."""
        return self.z > 0 and self.se_scope in ("all", "mean" if target == 1 else "moments")

    def _lookup(self, pairs: tuple, a: int, default):
        for b, v in pairs:
            if b == a:
                return v
        return default

    def moment_var_floor(self, a: int) -> float:
        """The per-row variance floor of moment ``a``'s standard-error test (0 when none is set)."""
        return self._lookup(self.moment_var_floors, a, 0.0)

    def beta_for(self, a: int) -> float:
        """The moment-a threshold: beta_a when given per moment, else the common beta (the paper's)."""
        for b, v in self.moment_betas:
            if b == a:
                return v
        return self.beta

    @property
    def mean_grid(self) -> BucketGrid:
        return mean_grid(self.m, self.mean_edges)

    def grid(self, a: int) -> BucketGrid:
        return moment_grid(a, self.m, self.odd_moments, self._lookup(self.moment_edges, a, ()))

    def projection(self, target: int) -> tuple:
        if target == 1:
            return (0.0, 1.0)
        lo, hi = moment_projection(target, self.odd_moments)
        return (max(lo, self._lookup(self.moment_floors, target, lo)), hi)

    @property
    def is_format1(self) -> bool:
        return not (
            self.mean_edges
            or self.moment_edges
            or self.moment_floors
            or self.z > 0
            or self.min_count
            or self.z_group > 0
            or self.moment_step != "add"
            or self.moment_shrink > 0
        )

    def moment_new(self, a: int, old: np.ndarray, d: np.ndarray) -> np.ndarray:
        """The a-th moment predictions after an update with per-row deltas (or factors), projected. Shared
        by fitting and replay (same arithmetic, so replay is bit-identical)."""
        lo, hi = self.projection(a)
        return np.clip(old * d if self.moment_step == "ratio" else old - d, lo, hi)

    def mean_update_bound(self) -> float:
        """thm:wrapper-distr-known: at most 1/alpha^2 - 1 mean updates."""
        return 1.0 / self.alpha**2 - 1.0

    def moment_update_bound_per_call(self, a: int | None = None) -> float:
        """thm:pseudo-moment-calibration: at most 1/beta^2 - 1 updates per PseudoMomentConsistency call."""
        b = self.beta if a is None else self.beta_for(a)
        return 1.0 / b**2 - 1.0


@dataclass
class Update:
    """One gradient step on the violating cells of one group.

    target: 1 for the mean predictor, a >= 2 for the a-th moment predictor. partition: 0 when the cells are
    the mean buckets G(mu, i); a >= 2 when they are the joint cells G(mu, m_a, i, j) (cell = i * m + j);
    1 (``WHOLE``, model format 2) when the one cell is the whole group G.
    deltas: the amount subtracted from the predictor on each cell before projection.
    """

    target: int
    partition: int
    group: int
    cells: np.ndarray
    deltas: np.ndarray

    def to_json(self) -> list:
        return [
            int(self.target),
            int(self.partition),
            int(self.group),
            [int(c) for c in self.cells],
            [float(d) for d in self.deltas],
        ]

    @classmethod
    def from_json(cls, e) -> Update:
        return cls(int(e[0]), int(e[1]), int(e[2]), np.asarray(e[3], dtype=np.int64), np.asarray(e[4], dtype=float))


def select_rows(upd: Update, rows_g: np.ndarray | None, cells_g: np.ndarray, n_cells: int):
    """Rows of the group that lie in the update's cells, and the delta each receives. ``rows_g`` None: the
    group is every row, in order (``cells_g`` is then per row of the table, and no gather is needed).

    Shared by fitting and replay so that both compute the same sets with the same arithmetic.
    """
    inside = np.zeros(n_cells, dtype=bool)
    inside[upd.cells] = ~np.isnan(upd.deltas)
    lookup = np.zeros(n_cells)
    lookup[upd.cells] = upd.deltas
    sel = np.flatnonzero(inside[cells_g])
    d = lookup[cells_g[sel]]
    return (sel if rows_g is None else rows_g[sel]), d


def group_cells(rows_g: np.ndarray, n: int, bmu: np.ndarray, m: int, bmom: np.ndarray | None, partition: int):
    """(rows of the group or None for every row, each row's cell in the partition, cells per group): the
    mean cells (partition 0), the joint cells with moment ``partition`` (bmom), or the whole group (WHOLE).
    A group of every row (the whole population, updated most often) is not gathered."""
    whole_table = rows_g.size == n
    rows = None if whole_table else rows_g
    if partition == WHOLE:
        return rows, np.zeros(rows_g.size, dtype=np.int64), 1
    b = bmu if whole_table else bmu[rows_g]
    if partition == 0:
        return rows, b, m
    assert bmom is not None
    return rows, b * m + (bmom if whole_table else bmom[rows_g]), m * m

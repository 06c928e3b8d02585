"""A fitted model: initial predictors plus the ordered log of updates, saved as versioned JSON.

Predicting on new rows replays the log: at each step the cells are recomputed from the predictions as they
stand then, exactly as during fitting, so replaying on the fitting rows reproduces the fitted predictions
bit for bit. Floats are written with ``repr`` precision, so a save/load round trip is exact too.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..common.errors import DataError, MMCError, ModelFormatError
from ..groups.group_set import GroupSet
from ..groups.membership import Membership
from ..paper.descent_params import WHOLE, DescentParams, select_rows
from ..paper.moments import LabelScale
from .logistic_map import mapped_base
from .model_format import (
    BASE_KINDS,
    FORMAT,
    MAX_MODEL_BYTES,
    VERSION,
    VERSION_BASE_VARIANCE,
    VERSION_BENDS,
    VERSION_CELLS,
    VERSION_GROUP_PART,
    VERSION_LOGISTIC,
    VERSION_MEAN_BANDS,
    VERSION_MEAN_WITHIN,
    VERSION_MOMENT_CELLS,
    VERSION_RIDGE_CELLS,
    read_model,
)
from .recalibrate import affine_base

__all__ = ["FittedModel", "FORMAT", "VERSION", "affine_base", "atomic_write_text", "atomic_write_bytes"]


def _default_mode() -> int:
    """The mode a plainly created file would get (0666 minus the umask); mkstemp's 0600 is too private."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path, data):
    """Write to a temporary file in the target folder, then rename: never a partial file, and a symlink at
    ``path`` is replaced rather than written through. ``data``: bytes, or an iterable of byte chunks written as
    they come (a table computed part by part, `mmc predict --engine dask`); an error raised while a chunk is
    made is passed on as it is (a worker's OSError is not a failed write), and nothing is written."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(path) and not os.path.isfile(path):  # a device, FIFO or socket would be replaced by a file
        raise MMCError(f"cannot write {path}: it exists and is not a regular file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    except OSError as e:  # the folder is missing, read-only or not a folder: name the user's path, not the temp file
        raise MMCError(f"cannot write {path}: {e.strerror or e}") from None
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    writing = False
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                writing = True
                f.write(chunk)
                writing = False
            writing = True  # closing flushes
        os.chmod(tmp, _default_mode())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and writing:
            raise MMCError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def atomic_write_text(path, text: str):
    atomic_write_bytes(path, text.encode("utf-8"))


def variance_start(variance_unit, factor: float, bounds: tuple, n: int, power: float = 1.0) -> np.ndarray:
    """Moment 2's starting values from a base variance (unit scale): ``factor`` x the base variance to the
    ``power`` (1: as given; 0.5: half-way to one constant on the log scale), kept within the moment's
    projection ``bounds``."""
    v = np.asarray(variance_unit, dtype=float)
    if v.shape != (n,):
        raise DataError(f"base variance has {v.size} values for {n} rows")
    return np.clip(float(factor) * (v if power == 1.0 else v ** float(power)), *bounds)


def binary_clip(model, p: np.ndarray) -> np.ndarray:
    """A binary model's probabilities kept in [floor, 1 - floor]: ``binary["floor"]`` (0 when absent) is the
    Jeffreys estimate 0.5 / (n_fit + 1) of a class never seen in the fitting rows, the most extreme probability
    those rows can support. Additive mean updates can push a probability to exactly 0 or 1 (a whole group shifted
    by its mean residual); a forecast of certainty costs an unbounded log loss when it is wrong."""
    floor = float((getattr(model, "binary", None) or {}).get("floor", 0.0) or 0.0)
    return np.clip(np.asarray(p, dtype=float), floor, 1.0 - floor)


@dataclass
class FittedModel:
    params: DescentParams
    scale: LabelScale
    groups: GroupSet
    init_mean: dict  # {"kind": "constant", "value": u}, {"kind": "base"} or {"kind": "base-affine", ...} (unit scale)
    init_moments: dict  # a -> constant (unit scale)
    log: list
    round_ends: list
    info: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)
    # "regression" (every model of formats 1 and 2 written before classifier audits) or "binary": a 0/1 label
    # on [0, 1] whose mean is a probability; ``binary`` = {"classes": [negative, positive], "positive": ...}
    task: str = "regression"
    binary: dict | None = None
    # shrunken cell corrections applied after the whole log (mmc_core.fit.cells.fit_cells), or None
    cells: dict | None = None
    # per moment a, log-scale cell corrections of its predictions after the whole log
    # (mmc_core.fit.cells.gated_moment_cells: {"edges", "values", "penalty", "weight"}), or None
    moment_cells: dict | None = None
    # {"column": name, "factor": k, "power": p}: the variance starts at k x (the base variance in that column of
    # the table, on the unit scale) ** p; the fit chose p and k (the fitting rows' level), or None
    init_variance: dict | None = None

    # ---- prediction ------------------------------------------------------------------------------
    @property
    def moments(self) -> tuple:
        return tuple(self.params.moments)

    @property
    def has_cells(self) -> bool:
        """True when shrunken cell corrections follow the log: such a file is version 4 (5 for ridge rounds)."""
        return bool((self.cells or {}).get("rounds"))

    @property
    def ridge_cells(self) -> bool:
        """True when the cell corrections are ridge rounds ("combine": "sum"): such a file is version 5."""
        return any(rd.get("combine") == "sum" for rd in (self.cells or {}).get("rounds") or [])

    @property
    def mean_bands(self) -> bool:
        """True when a moment cell round is banded by the mean or the descent left the moments to the cell step
        (``params.z_moment``): such a file is version 10."""
        rounds = [rd for cell in (self.moment_cells or {}).values() for rd in cell["rounds"]]
        return any(rd.get("by") in ("mean", "mean_within") for rd in rounds) or self.params.z_moment >= 0

    @property
    def mean_within(self) -> bool:
        """True when a moment cell round is banded by the mean's part the groups do not explain: version 11."""
        rounds = [rd for cell in (self.moment_cells or {}).values() for rd in cell["rounds"]]
        return any(rd.get("by") == "mean_within" for rd in rounds)

    @property
    def has_moment_cells(self) -> bool:
        """True when some moment's predictions end with cell corrections: such a file is version 7."""
        return bool(self.moment_cells)

    @property
    def group_part(self) -> bool:
        """True when the group-linear base map subtracts its group part ("group_part"): such a file is version 6."""
        return self.init_mean.get("kind") == "base-group-linear" and bool(self.init_mean.get("group_part"))

    @property
    def bends(self) -> bool:
        """True when the group-linear base map bends (nonzero hinge coefficients): such a file is version 3."""
        return self.init_mean.get("kind") == "base-group-linear" and any(self.init_mean.get("bends") or [])

    @property
    def logistic(self) -> bool:
        """True when a 0/1 label's base goes through the per-group logistic map first: such a file is version 9."""
        return self.init_mean.get("kind") == "base-group-linear" and bool(self.init_mean.get("logistic"))

    @property
    def uses_base(self) -> bool:
        return self.init_mean.get("kind") in BASE_KINDS

    def input_columns(self) -> set:
        """The columns of a table the model reads to predict: its groups' and its base variance's (the base
        prediction is passed separately)."""
        cols = self.groups.columns()
        return cols | {self.init_variance["column"]} if self.init_variance else cols

    def variance_unit(self, table, n: int) -> np.ndarray | None:
        """The base variance of the rows of ``table`` on the unit scale, read from the column the model names
        (None when the model starts from a constant variance)."""
        if not self.init_variance:
            return None
        from ..common.tables import variance_column

        return variance_column(table, self.init_variance["column"], n) / self.scale.span**2

    def initial(
        self,
        n: int,
        base_unit: np.ndarray | None = None,
        memb: Membership | None = None,
        variance_unit: np.ndarray | None = None,
    ):
        """Initial (mean, moments) for ``n`` rows: the constant or the base prediction through the model's
        recalibration map (``memb``, the rows' groups, is needed by the "base-within" map); the variance the
        constant or, when the model starts from a base variance, ``variance_unit`` (unit scale) times its factor."""
        if self.uses_base:
            if base_unit is None:
                col = self.init_mean.get("column") or "the base prediction"
                raise DataError(f"this model was fitted on top of a base prediction ({col}); pass it (--pred COL)")
            mu = np.clip(np.asarray(base_unit, dtype=float), 0.0, 1.0)
            if mu.shape != (n,):
                raise DataError(f"base prediction has {mu.size} values for {n} rows")
            kind = self.init_mean.get("kind")
            if kind == "base-affine":
                mu = affine_base(mu, self.init_mean["intercept"], self.init_mean["slope"])
            elif kind == "base-group-linear":
                if memb is None:
                    raise ValueError("the group-linear base map needs the rows' group membership")
                mu = mapped_base(mu, memb.sums(), self.init_mean)
        else:
            mu = np.full(n, float(self.init_mean["value"]))
        moms = {a: np.full(n, float(self.init_moments[a])) for a in self.moments}
        if self.init_variance:
            if variance_unit is None:
                col = self.init_variance["column"]
                raise DataError(f"this model starts its variance from the column {col!r}; the rows have no such column")
            iv = self.init_variance
            moms[2] = variance_start(variance_unit, iv["factor"], self.params.projection(2), n, iv.get("power", 1.0))
        return mu, moms

    def replay(self, memb: Membership, mu: np.ndarray, moms: dict, upto: int | None = None, with_cells: bool = True):
        """Apply the first ``upto`` log entries (all by default) to the predictions, in place, and after the
        whole log the shrunken cell corrections, if any (and ``cells``)."""
        p = self.params
        mgrid = p.mean_grid
        grids = {a: p.grid(a) for a in self.moments}
        n = memb.n
        for upd in self.log[: len(self.log) if upto is None else upto]:
            rows_g = memb.group_rows(upd.group)
            if rows_g.size == 0:
                continue
            whole_table = rows_g.size == n  # the whole population: no gathers (as in the descent)
            if upd.partition == WHOLE:
                cells, n_cells = np.zeros(rows_g.size, dtype=np.int64), 1
            else:
                cells = mgrid.index(mu if whole_table else mu[rows_g])
                n_cells = p.m
            if upd.partition and upd.partition != WHOLE:
                mp = moms[upd.partition]
                cells = cells * p.m + grids[upd.partition].index(mp if whole_table else mp[rows_g])
                n_cells = p.m * p.m
            rows, d = select_rows(upd, None if whole_table else rows_g, cells, n_cells)
            if upd.target == 1:
                lo, hi = p.projection(1)
                mu[rows] = np.clip(mu[rows] - d, lo, hi)
            else:
                moms[upd.target][rows] = p.moment_new(upd.target, moms[upd.target][rows], d)
        whole = with_cells and (upto is None or upto >= len(self.log))  # the cells follow the whole (kept) log
        if self.cells and whole:
            from .cells import apply_cells

            mu[:] = apply_cells(mu, memb.sums(), self.cells)
        if self.moment_cells and whole:
            from .cells import apply_moment_cells

            for a, cell in self.moment_cells.items():
                moms[a] = apply_moment_cells(moms[a], memb.sums(), cell, p.projection(a), mu)
        return mu, moms

    def stages(self, memb: Membership, base_unit: np.ndarray | None = None, variance_unit=None) -> list:
        """The predictions after each stage of the fit, for the rows of ``memb``: [(stage, mean, moments)] (unit
        scale) for "start" (the base prediction as given, or the constant), "base map" (when the model maps the
        base), "descent" (the kept log), "mean cells" and "moment cells" (when the model has them)."""
        from .cells import apply_cells, apply_moment_cells

        n, p = memb.n, self.params
        mu, moms = self.initial(n, base_unit, memb, variance_unit)
        start = np.clip(np.asarray(base_unit, dtype=float), 0.0, 1.0) if self.uses_base else mu
        out = [("start", start.copy(), {a: v.copy() for a, v in moms.items()})]
        if self.init_mean.get("kind") in ("base-affine", "base-group-linear"):
            out.append(("base map", mu.copy(), {a: v.copy() for a, v in moms.items()}))
        mu, moms = self.replay(memb, mu, moms, with_cells=False)
        out.append(("descent", mu.copy(), {a: v.copy() for a, v in moms.items()}))
        if self.cells:
            mu = apply_cells(mu, memb.sums(), self.cells)
            out.append(("mean cells", mu.copy(), {a: v.copy() for a, v in moms.items()}))
        if self.moment_cells:
            moms = dict(moms)
            for a, cell in self.moment_cells.items():
                moms[a] = apply_moment_cells(moms[a], memb.sums(), cell, p.projection(a), mu)
            out.append(("moment cells", mu, moms))
        return out

    def predict_unit(self, table, base_unit: np.ndarray | None = None, n: int | None = None, upto=None):
        """Mean and moment predictions on the unit scale for the rows of ``table``."""
        from ..common.memory import reuse_freed_memory
        from ..common.threads import one_blas_thread

        memb = self.groups.evaluate(table, n)
        with reuse_freed_memory(memb.n), one_blas_thread():  # the replay's temporaries; sums in one order
            mu, moms = self.initial(memb.n, base_unit, memb, self.variance_unit(table, memb.n))
            return self.replay(memb, mu, moms, upto)

    def predict(self, table, base: np.ndarray | None = None) -> dict:
        """Predictions in the label's own units: {"mean": ..., "moment_2": ..., ...}."""
        base_unit = None
        if base is not None:
            base_unit = (np.asarray(base, dtype=float) - self.scale.lo) / self.scale.span
        n = len(base) if base is not None else None
        mu, moms = self.predict_unit(table, base_unit, n)
        out = {"mean": self.scale.mean_from_unit(mu)}
        if self.task == "binary":
            out["mean"] = binary_clip(self, out["mean"])  # a probability, never exactly 0 or 1
        for a in self.moments:
            out[f"moment_{a}"] = self.scale.moment_from_unit(moms[a], a)
        return out

    # ---- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        p = self.params
        params = {
            "alpha": p.alpha,
            "beta": p.beta,
            "buckets": p.m,
            "moments": list(p.moments),
            "step": p.step,
            "odd_moments": p.odd_moments,
            "max_rounds": p.max_rounds,
            "moment_betas": {str(a): b for a, b in p.moment_betas},
        }
        if not p.is_format1:
            params.update(
                {
                    "mean_edges": list(p.mean_edges),
                    "moment_edges": {str(a): list(e) for a, e in p.moment_edges},
                    "moment_floors": {str(a): f for a, f in p.moment_floors},
                    "z": p.z,
                    "z_group": p.z_group,
                    "min_count": p.min_count,
                    "moment_step": p.moment_step,
                }
            )
            if p.z_group_moment >= 0:
                params["z_group_moment"] = p.z_group_moment
            if p.z_moment >= 0:
                params["z_moment"] = p.z_moment
            if p.moment_shrink > 0:
                params["moment_shrink"] = p.moment_shrink
            if p.se_scope != "all":
                params["se_scope"] = p.se_scope
            if p.moment_var_floors:
                params["moment_var_floors"] = {str(a): f for a, f in p.moment_var_floors}
        out = {
            "format": FORMAT,
            "version": (
                VERSION_MEAN_WITHIN
                if self.mean_within
                else VERSION_MEAN_BANDS
                if self.mean_bands
                else VERSION_LOGISTIC
                if self.logistic
                else VERSION_BASE_VARIANCE
                if self.init_variance
                else VERSION_MOMENT_CELLS
                if self.has_moment_cells
                else VERSION_GROUP_PART
                if self.group_part
                else VERSION_RIDGE_CELLS
                if self.ridge_cells
                else VERSION_CELLS
                if self.has_cells
                else VERSION_BENDS
                if self.bends
                else 1
                if p.is_format1
                else VERSION
            ),
            "params": params,
            "label_scale": {"lo": self.scale.lo, "hi": self.scale.hi, "source": self.scale.source},
            "groups": self.groups.to_json(),
            "init": self._init_json(),
            "log": [u.to_json() for u in self.log],
            "round_ends": list(self.round_ends),
            "info": self.info,
            "extras": self.extras,
        }
        if self.task != "regression":  # absent = "regression": older readers' files and regression files unchanged
            out["task"] = self.task
            out["binary"] = self.binary
        if self.has_cells:
            out["cells"] = self.cells
        if self.has_moment_cells:
            out["moment_cells"] = {str(a): c for a, c in sorted((self.moment_cells or {}).items())}
        return out

    def _init_json(self) -> dict:
        init = {"mean": self.init_mean, "moments": {str(a): v for a, v in self.init_moments.items()}}
        if self.init_variance:
            init["variance"] = dict(self.init_variance)
        return init

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, sort_keys=True, separators=(",", ":"))

    def save(self, path):
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path) -> FittedModel:
        """The model in the file ``path``: refused from its size before it is read when over MAX_MODEL_BYTES, and
        read through :mod:`mmc_core.common.jsonfile` (depth, number and duplicate-key limits) and the model schema."""
        from ..common.jsonfile import read_file

        text = read_file(path, ModelFormatError, kind="model file", max_bytes=MAX_MODEL_BYTES)
        return cls.from_json(text, str(path))

    @classmethod
    def from_json(cls, text, where: str = "model") -> FittedModel:
        from ..common.jsonfile import loads

        return cls.from_dict(loads(text, where, ModelFormatError, kind="model file", max_bytes=MAX_MODEL_BYTES), where)

    @classmethod
    def from_dict(cls, d, where: str = "model") -> FittedModel:
        """The model in a parsed model file, every section checked (:func:`mmc_core.fit.model_format.read_model`)."""
        p = read_model(d, where)
        return cls(
            p.params,
            p.scale,
            p.groups,
            p.init_mean,
            p.init_moments,
            p.log,
            p.round_ends,
            p.info,
            p.extras,
            p.task,
            p.binary,
            p.cells,
            p.moment_cells,
            p.init_variance,
        )

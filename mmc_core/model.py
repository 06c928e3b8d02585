"""A fitted model: initial predictors plus the ordered log of updates, saved as versioned JSON.

Predicting on new rows replays the log: at each step the cells are recomputed from the predictions as they
stand then, exactly as during fitting, so replaying on the fitting rows reproduces the fitted predictions
bit for bit. Floats are written with ``repr`` precision, so a save/load round trip is exact too.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np

from .descent import SE_SCOPES, STEP_RULES, WHOLE, DescentParams, Update, select_rows
from .errors import DataError, MMCError, ModelFormatError
from .groups import GroupSet, Membership
from .recalibrate import affine_base, group_linear_base
from .moments import LabelScale, MomentKind

__all__ = ["FittedModel", "FORMAT", "VERSION", "affine_base", "atomic_write_text", "atomic_write_bytes"]

FORMAT = "mmc-audit-model"
VERSION = 2  # written when a model uses data-chosen grids, moment floors or the standard-error test
# written when the group-linear base map bends (init.mean "knots" / "bends"): a reader of versions 1-2 would
# ignore the bends and predict something else, so it must refuse the file
VERSION_BENDS = 3
# written when the model ends with shrunken cell corrections ("cells", mmc_core.cells): a reader of versions 1-3
# would ignore them and predict something else
VERSION_CELLS = 4
# written when the cell corrections are ridge rounds (a row moves by the sum of its cells' values, "combine":
# "sum"): a reader of version 4 would take the mean of its cells' values
VERSION_RIDGE_CELLS = 5
# written when the group-linear base map has its group part removed (init.mean "group_part": the projection of
# its change on the groups, subtracted): a reader of versions 1-5 would not subtract it and predict something else
VERSION_GROUP_PART = 6
BASE_KINDS = ("base", "base-affine", "base-group-linear")  # init.mean kinds that start from a base prediction
# written when a moment's predictions end with log-scale ridge cell corrections ("moment_cells", mmc_core.cells):
# a reader of versions 1-6 would predict other moments
VERSION_MOMENT_CELLS = 7
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7)  # version 1: uniform grids, moments projected onto [0, hi], plain thresholds


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
    # shrunken cell corrections applied after the whole log (mmc_core.cells.fit_cells), or None
    cells: dict | None = None
    # per moment a, log-scale cell corrections of its predictions after the whole log
    # (mmc_core.cells.gated_moment_cells: {"edges", "values", "penalty", "weight"}), or None
    moment_cells: dict | None = None

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
    def uses_base(self) -> bool:
        return self.init_mean.get("kind") in BASE_KINDS

    def initial(self, n: int, base_unit: np.ndarray | None = None, memb: Membership | None = None):
        """Initial (mean, moments) for ``n`` rows: the constant or the base prediction through the model's
        recalibration map (``memb``, the rows' groups, is needed by the "base-within" map)."""
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
                mu = group_linear_base(mu, memb.sums(), self.init_mean)
        else:
            mu = np.full(n, float(self.init_mean["value"]))
        moms = {a: np.full(n, float(self.init_moments[a])) for a in self.moments}
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
                moms[a] = apply_moment_cells(moms[a], memb.sums(), cell, p.projection(a))
        return mu, moms

    def stages(self, memb: Membership, base_unit: np.ndarray | None = None) -> list:
        """The predictions after each stage of the fit, for the rows of ``memb``: [(stage, mean, moments)] (unit
        scale) for "start" (the base prediction as given, or the constant), "base map" (when the model maps the
        base), "descent" (the kept log), "mean cells" and "moment cells" (when the model has them)."""
        from .cells import apply_cells, apply_moment_cells

        n, p = memb.n, self.params
        mu, moms = self.initial(n, base_unit, memb)
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
                moms[a] = apply_moment_cells(moms[a], memb.sums(), cell, p.projection(a))
            out.append(("moment cells", mu, moms))
        return out

    def predict_unit(self, table, base_unit: np.ndarray | None = None, n: int | None = None, upto=None):
        """Mean and moment predictions on the unit scale for the rows of ``table``."""
        from .memory import reuse_freed_memory
        from .threads import one_blas_thread

        memb = self.groups.evaluate(table, n)
        with reuse_freed_memory(memb.n), one_blas_thread():  # the replay's temporaries; sums in one order
            mu, moms = self.initial(memb.n, base_unit, memb)
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
            if p.moment_shrink > 0:
                params["moment_shrink"] = p.moment_shrink
            if p.se_scope != "all":
                params["se_scope"] = p.se_scope
            if p.moment_var_floors:
                params["moment_var_floors"] = {str(a): f for a, f in p.moment_var_floors}
        out = {
            "format": FORMAT,
            "version": (
                VERSION_MOMENT_CELLS
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
            "init": {"mean": self.init_mean, "moments": {str(a): v for a, v in self.init_moments.items()}},
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

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, sort_keys=True, separators=(",", ":"))

    def save(self, path):
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path) -> "FittedModel":
        """The model in the file ``path``: refused from its size before it is read when over MAX_MODEL_BYTES, and
        read through :mod:`mmc_core.jsonfile` (depth, number and duplicate-key limits) and the model schema."""
        from .jsonfile import read_file

        text = read_file(path, ModelFormatError, kind="model file", max_bytes=MAX_MODEL_BYTES)
        return cls.from_json(text, str(path))

    @classmethod
    def from_json(cls, text, where: str = "model") -> "FittedModel":
        from .jsonfile import loads

        return cls.from_dict(loads(text, where, ModelFormatError, kind="model file", max_bytes=MAX_MODEL_BYTES), where)

    @classmethod
    def from_dict(cls, d, where: str = "model") -> "FittedModel":
        def bad(msg):
            return ModelFormatError(f"{where}: {msg}")

        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise bad(f'not an mmc-audit model (missing "format": "{FORMAT}")')
        version = d.get("version")
        if version not in READABLE_VERSIONS or not isinstance(version, int) or isinstance(version, bool):
            raise bad(
                f"model schema version {version!r} is not supported (this mmc-audit reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))})"
            )
        from .schemas import check

        # the file format's schema (mmc_core/schemas): types, ranges, required keys and limits, the first failure
        # named by its key path; what depends on other values is checked below
        check(d, "model", where, ModelFormatError)
        for key in ("params", "label_scale", "groups", "init", "log", "round_ends"):
            if key not in d:
                raise bad(f"missing field '{key}'")
        pr = d["params"]
        if not isinstance(pr, dict):
            raise bad("params must be an object")
        for key in ("alpha", "beta"):
            if not _number(pr.get(key)):
                raise bad(f"params.{key}={pr.get(key)!r} must be a number")
        try:
            alpha, beta, m = float(pr["alpha"]), float(pr["beta"]), pr["buckets"]
            moments = tuple(pr["moments"])
            step, odd = pr["step"], pr["odd_moments"]
            max_rounds = pr.get("max_rounds")
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"params are incomplete or malformed ({e})") from None
        if not (0 < alpha < 1) or not (0 < beta < 1):
            raise bad(f"params alpha={alpha}, beta={beta} must lie in (0, 1)")
        if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= 1000:
            raise bad(f"params buckets={m!r} must be an integer in [1, 1000]")
        if any(not isinstance(a, int) or isinstance(a, bool) or not 2 <= a <= 20 for a in moments) or list(
            moments
        ) != list(range(2, len(moments) + 2)):
            raise bad(f"params moments={list(moments)!r} must be 2..K with K <= 20")
        if step not in STEP_RULES or odd not in MomentKind.ALL:
            raise bad(f"params step={step!r} / odd_moments={odd!r} are not recognised")
        raw_mb = pr.get("moment_betas", {})
        if not isinstance(raw_mb, dict):
            raise bad("params.moment_betas must be an object {moment: beta}")
        moment_betas = []
        for key, v in raw_mb.items():
            if (
                key not in {str(a) for a in moments}
                or not isinstance(v, (int, float))
                or isinstance(v, bool)
                or not 0 < v < 1
            ):
                raise bad(f"params.moment_betas[{key!r}]={v!r} must be a number in (0, 1) for a fitted moment")
            moment_betas.append((int(key), float(v)))
        extra = {}
        if version >= 2:
            extra = _format2_params(pr, moments, m, odd, bad)
        try:
            params = DescentParams(alpha, beta, m, moments, step, odd, max_rounds, tuple(sorted(moment_betas)), **extra)
            _ = params.mean_grid  # builds (and so validates) the grids
            for a in moments:
                params.grid(a)
        except ValueError as e:
            raise bad(f"params are malformed ({e})") from None
        ls = d["label_scale"]
        try:
            scale = LabelScale(float(ls["lo"]), float(ls["hi"]), str(ls.get("source", "declared")))
        except Exception as e:  # noqa: BLE001 - any malformed scale is a format error
            raise bad(f"label_scale is malformed ({e})") from None
        try:  # the schema above has checked the groups' types; their rules (names, conditions) here
            groups = GroupSet.from_json(d["groups"], where, path="groups", schema=False)
        except ValueError as e:
            raise ModelFormatError(str(e)) from None
        G = len(groups)
        init = d["init"]
        init_mean = init.get("mean") if isinstance(init, dict) else None
        if not isinstance(init_mean, dict) or init_mean.get("kind") not in ("constant", *BASE_KINDS):
            raise bad(
                'init.mean must be {"kind": "constant", "value": v}, {"kind": "base"}, {"kind": "base-affine"} or'
                ' {"kind": "base-group-linear"}'
            )
        if init_mean["kind"] == "base-affine":
            for key in ("intercept", "slope"):
                v = init_mean.get(key)
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                    raise bad(f"init.mean.{key}={v!r} must be a finite number")
        if init_mean["kind"] == "base-group-linear":
            for key in ("offset", "slope", "between", "shift", "center"):
                v = init_mean.get(key)
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                    raise bad(f"init.mean.{key}={v!r} must be a finite number")
            coef = init_mean.get("groups")
            if (
                not isinstance(coef, list)
                or len(coef) != G
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in coef)
            ):
                raise bad(f"init.mean.groups must be a list of {G} finite numbers (one per group)")
            knots, bends = init_mean.get("knots", []), init_mean.get("bends", [])

            def numbers(v):
                return isinstance(v, list) and all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v
                )

            if not numbers(knots) or not numbers(bends) or len(knots) != len(bends):
                raise bad("init.mean.knots and init.mean.bends must be lists of as many finite numbers")
            if any(not 0.0 <= k <= 1.0 for k in knots):
                raise bad("init.mean.knots must lie in [0, 1] (the unit scale of the label)")
            if any(bends) and version < VERSION_BENDS:
                raise bad(f"init.mean.bends are nonzero: the file must have version {VERSION_BENDS} or later")
            part = init_mean.get("group_part")
            if part is not None:
                if (
                    not isinstance(part, dict)
                    or not numbers([part.get("offset")])
                    or not numbers(part.get("groups"))
                    or len(part["groups"]) != G
                ):
                    raise bad(
                        'init.mean.group_part must be {"offset": a finite number, "groups": a list of '
                        f"{G} finite numbers}}"
                    )
                if version < VERSION_GROUP_PART:
                    raise bad(f"init.mean.group_part is set: the file must have version {VERSION_GROUP_PART} or later")
        if init_mean["kind"] == "constant":
            v = init_mean.get("value")
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v <= 1.0:
                raise bad(f"init.mean.value={v!r} must be a number in [0, 1]")
        raw_moms = init.get("moments", {})
        init_moments = {}
        for a in moments:
            v = raw_moms.get(str(a)) if isinstance(raw_moms, dict) else None
            lo, hi = params.projection(a)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi:
                raise bad(f"init.moments['{a}']={v!r} must be a number in [{lo}, {hi}]")
            init_moments[a] = float(v)
        log = []
        if not isinstance(d["log"], list):
            raise bad("log must be a list")
        for k, entry in enumerate(d["log"]):
            if not _log_entry_types(entry):
                raise bad(f"log entry {k} is malformed (integers target, partition, group, cells; numbers deltas)")
            try:
                upd = Update.from_json(entry)
                whole = version >= 2 and upd.partition == WHOLE
                n_cells = 1 if whole else (m if upd.partition == 0 else m * m)
                ok = (
                    len(entry) == 5
                    and (upd.target == 1 or upd.target in moments)
                    and (upd.partition == 0 or upd.partition in moments or whole)
                    and (upd.target == 1 or upd.partition == upd.target or whole)
                    and 0 <= upd.group < G
                    and upd.cells.size == upd.deltas.size
                    and upd.cells.size > 0
                    and upd.cells.min() >= 0
                    and upd.cells.max() < n_cells
                    and np.all(np.isfinite(upd.deltas))
                    and (
                        np.all((upd.deltas > 0) & (upd.deltas <= 1e6))
                        if (upd.target >= 2 and params.moment_step == "ratio")
                        else np.all(np.abs(upd.deltas) <= 2.0)
                    )
                )
            except (TypeError, ValueError, IndexError):
                ok = False
            if not ok:
                raise bad(f"log entry {k} is malformed or out of range")
            log.append(upd)
        ends = d["round_ends"]
        if (
            not isinstance(ends, list)
            or any(not isinstance(x, int) or isinstance(x, bool) or not 0 <= x <= len(log) for x in ends)
            or ends != sorted(ends)
        ):
            raise bad("round_ends must be a non-decreasing list of log positions")
        info = d.get("info", {})
        extras = d.get("extras", {})
        if not isinstance(info, dict) or not isinstance(extras, dict):
            raise bad("info and extras must be objects")
        _check_info(info, bad)
        _check_interval_records(extras, bad)
        task = d.get("task", "regression")
        binary = d.get("binary")
        if task not in ("regression", "binary"):
            raise bad(f'task={task!r} must be "regression" or "binary"')
        if task == "binary":
            if (
                not isinstance(binary, dict)
                or "positive" not in binary
                or not isinstance(binary.get("classes"), list)
                or len(binary["classes"]) != 2
            ):
                raise bad('a binary model needs "binary": {"classes": [negative, positive], "positive": ...}')
            if (scale.lo, scale.hi) != (0.0, 1.0) or moments:
                raise bad("a binary model has label_scale [0, 1] and no moments")
            fl = binary.get("floor", 0.0)
            if not isinstance(fl, (int, float)) or isinstance(fl, bool) or not 0.0 <= fl < 0.5:
                raise bad(f"binary.floor={fl!r} must be a number in [0, 0.5)")
        elif binary is not None:
            raise bad('"binary" is only allowed with "task": "binary"')
        cells = d.get("cells")
        if cells is not None:
            from .cells import check_cells

            check_cells(cells, G, bad)
            ridge = any(rd.get("combine") == "sum" for rd in cells["rounds"])
            need = VERSION_RIDGE_CELLS if ridge else VERSION_CELLS
            if cells["rounds"] and version != need and not (ridge and version >= VERSION_GROUP_PART):
                kind = (
                    "ridge cell corrections (cells.rounds with combine sum)"
                    if ridge
                    else "cell corrections (cells.rounds)"
                )
                raise bad(f"the model has {kind}: the file must have version {need}")
        moment_cells = d.get("moment_cells")
        if moment_cells is not None:
            from .cells import check_moment_cells

            moment_cells = check_moment_cells(moment_cells, moments, G, bad)
            if moment_cells and version != VERSION_MOMENT_CELLS:
                raise bad(f"the model has moment_cells: the file must have version {VERSION_MOMENT_CELLS}")
        return cls(
            params,
            scale,
            groups,
            dict(init_mean),
            init_moments,
            log,
            list(ends),
            info,
            extras,
            task,
            binary,
            cells,
            moment_cells or None,
        )


MAX_MODEL_BYTES = 200 * 1024 * 1024  # the largest model file read (a fit of 5,000 groups writes a few MB)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _log_entry_types(entry) -> bool:
    """[target, partition, group, [cells], [deltas]] with integers where integers belong (a fractional group
    index or a boolean was read as an integer)."""
    return (
        isinstance(entry, list)
        and len(entry) == 5
        and all(_int(v) for v in entry[:3])
        and isinstance(entry[3], list)
        and all(_int(v) for v in entry[3])
        and isinstance(entry[4], list)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in entry[4])
    )


def _check_info(info: dict, bad) -> None:
    """The run facts the reports read (``info`` is otherwise free-form): seconds, rounds, history."""
    for key in ("seconds", "z", "z_group", "calibration_fraction"):
        if key in info and info[key] is not None and not _number(info[key]):
            raise bad(f"info.{key}={info[key]!r} must be a number")
    for key in ("rounds", "kept_round", "mean_updates", "moment_updates", "n_fit", "n_calibration"):
        if key in info and info[key] is not None and not _int(info[key]):
            raise bad(f"info.{key}={info[key]!r} must be an integer")
    for key in ("converged", "stopped_by_user", "early_stopped"):
        if key in info and not isinstance(info[key], bool):
            raise bad(f"info.{key}={info[key]!r} must be true or false")
    hist = info.get("history", [])
    if not isinstance(hist, list) or any(
        not isinstance(h, dict) or any(v is not None and not _number(v) for v in h.values()) for h in hist
    ):
        raise bad("info.history must be a list of objects of numbers (one per round)")


def _check_interval_records(extras: dict, bad) -> None:
    """``extras.intervals`` (the calibrated intervals' record): an object whose method records are objects and
    whose arrays hold numbers only (a string among the calibrated thresholds was accepted)."""
    recs = extras.get("intervals", {})
    if not isinstance(recs, dict):
        raise bad("extras.intervals must be an object")

    def numeric(v) -> bool:
        if isinstance(v, list):
            return all(numeric(x) for x in v)
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))

    for key, v in recs.items():
        if key in ("calibrated", "mondrian", "gaussian", "plugin_coverage", "moment_quantiles"):
            if not isinstance(v, dict):
                raise bad(f"extras.intervals.{key} must be an object")
            for part, arr in v.items():
                if part not in ("approach", "combine", "scale", "options") and not numeric(arr):
                    raise bad(f"extras.intervals.{key}.{part} must hold numbers only")
        elif key in ("deltas", "split_conformal", "n") and not numeric(v):
            raise bad(f"extras.intervals.{key} must hold numbers only")


def _format2_params(pr: dict, moments: tuple, m: int, odd: str, bad) -> dict:
    """The version-2 params: data-chosen grids, moment floors, the standard-error test."""
    from .buckets import moment_projection

    def edges(v, what, lo, hi):
        if (
            not isinstance(v, list)
            or (v and len(v) != m - 1)
            or any(not _finite(x) or isinstance(x, bool) or not lo < x < hi for x in v)
            or any(b <= a for a, b in zip(v, v[1:]))
        ):
            raise bad(f"params.{what} must be [] or {m - 1} increasing numbers inside ({lo}, {hi})")
        return tuple(float(x) for x in v)

    mean_edges = edges(pr.get("mean_edges", []), "mean_edges", 0.0, 1.0)
    raw_me, raw_f = pr.get("moment_edges", {}), pr.get("moment_floors", {})
    if not isinstance(raw_me, dict) or not isinstance(raw_f, dict):
        raise bad("params.moment_edges and params.moment_floors must be objects {moment: ...}")
    names = {str(a) for a in moments}
    moment_edges, floors = [], []
    for key, v in raw_me.items():
        if key not in names:
            raise bad(f"params.moment_edges[{key!r}] is not a fitted moment")
        lo, hi = moment_projection(int(key), odd)
        e = edges(v, f"moment_edges[{key!r}]", lo, hi)
        if e:
            moment_edges.append((int(key), e))
    for key, v in raw_f.items():
        if key not in names or not _finite(v) or isinstance(v, bool) or not 0 < v < 1:
            raise bad(f"params.moment_floors[{key!r}]={v!r} must be a number in (0, 1) for a fitted moment")
        floors.append((int(key), float(v)))
    z, zg, mc = pr.get("z", 0.0), pr.get("z_group", 0.0), pr.get("min_count", 0)
    ms = pr.get("moment_step", "add")
    if ms not in ("add", "ratio"):
        raise bad(f"params.moment_step={ms!r} must be 'add' or 'ratio'")
    zgm, shrink = pr.get("z_group_moment", -1.0), pr.get("moment_shrink", 0.0)
    for name, v in (("z", z), ("z_group", zg), ("z_group_moment", zgm), ("moment_shrink", shrink)):
        if not _finite(v) or isinstance(v, bool) or not (0 <= v <= 100 or (name == "z_group_moment" and v == -1)):
            raise bad(f"params.{name}={v!r} must be a number in [0, 100]")
    if not isinstance(mc, int) or isinstance(mc, bool) or not 0 <= mc <= 10**9:
        raise bad(f"params.min_count={mc!r} must be a non-negative integer")
    scope = pr.get("se_scope", "all")
    if scope not in SE_SCOPES:
        raise bad(f"params.se_scope={scope!r} must be one of {', '.join(SE_SCOPES)}")
    raw_vf = pr.get("moment_var_floors", {})
    if not isinstance(raw_vf, dict) or any(
        key not in names or not _finite(v) or isinstance(v, bool) or v < 0 for key, v in raw_vf.items()
    ):
        raise bad("params.moment_var_floors must be {fitted moment: a number >= 0}")
    return {
        "moment_var_floors": tuple(sorted((int(k), float(v)) for k, v in raw_vf.items())),
        "se_scope": scope,
        "mean_edges": mean_edges,
        "moment_edges": tuple(sorted(moment_edges)),
        "moment_floors": tuple(sorted(floors)),
        "z": float(z),
        "z_group": float(zg),
        "min_count": mc,
        "moment_step": ms,
        "z_group_moment": float(zgm),
        "moment_shrink": float(shrink),
    }


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)

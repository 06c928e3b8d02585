"""The saved model's file format: its versions, and the readers that check each section of a model file.

:func:`read_model` turns a parsed model file into the parts of a :class:`~mmc_core.fit.model.FittedModel`, one reader
per section (header, params, label scale, groups, initial predictors, log, rounds, info, task, cells), each
raising ModelFormatError naming the first bad value. Apart from the model so that what a file must hold reads in
one place, and the model keeps prediction and writing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..common.errors import ModelFormatError
from ..groups.group_set import GroupSet
from ..paper.descent_params import SE_SCOPES, STEP_RULES, WHOLE, DescentParams, Update
from ..paper.moments import LabelScale, MomentKind

__all__ = [
    "BASE_KINDS",
    "FORMAT",
    "MAX_MODEL_BYTES",
    "READABLE_VERSIONS",
    "VERSION",
    "VERSION_BASE_VARIANCE",
    "VERSION_BENDS",
    "VERSION_CELLS",
    "VERSION_GROUP_PART",
    "VERSION_LOGISTIC",
    "VERSION_MEAN_BANDS",
    "VERSION_MOMENT_CELLS",
    "VERSION_RIDGE_CELLS",
    "ModelParts",
    "read_model",
]

FORMAT = "mmc-audit-model"
VERSION = 2  # written when a model uses data-chosen grids, moment floors or the standard-error test
# written when the group-linear base map bends (init.mean "knots" / "bends"): a reader of versions 1-2 would
# ignore the bends and predict something else, so it must refuse the file
VERSION_BENDS = 3
# written when the model ends with shrunken cell corrections ("cells", mmc_core.fit.cells): a reader of versions 1-3
# would ignore them and predict something else
VERSION_CELLS = 4
# written when the cell corrections are ridge rounds (a row moves by the sum of its cells' values, "combine":
# "sum"): a reader of version 4 would take the mean of its cells' values
VERSION_RIDGE_CELLS = 5
# written when the group-linear base map has its group part removed (init.mean "group_part": the projection of
# its change on the groups, subtracted): a reader of versions 1-5 would not subtract it and predict something else
VERSION_GROUP_PART = 6
BASE_KINDS = ("base", "base-affine", "base-group-linear")  # init.mean kinds that start from a base prediction
# written when a moment's predictions end with log-scale ridge cell corrections ("moment_cells", mmc_core.fit.cells):
# a reader of versions 1-6 would predict other moments
VERSION_MOMENT_CELLS = 7
# written when the variance starts from a base variance read from a column of the table ("init.variance"): a
# reader of versions 1-7 would start from the constant and predict another variance
VERSION_BASE_VARIANCE = 8
# written when a 0/1 label's base goes first through the per-group logistic map (init.mean "logistic",
# mmc_core.fit.logistic_map): a reader of versions 1-8 would skip it and predict something else
VERSION_LOGISTIC = 9
# written when a moment's cell round is banded by the mean prediction (moment_cells rounds' "by": "mean") or the
# descent left the moments to the cell step (params "z_moment"): a reader of versions 1-9 would band that round
# by the moment and predict another variance
VERSION_MEAN_BANDS = 10
# written when a moment's cell round is banded by the mean's part that the groups do not explain (moment_cells
# rounds' "by": "mean_within" with the groups' "centre"): a reader of versions 1-10 would refuse the round
VERSION_MEAN_WITHIN = 11
READABLE_VERSIONS = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
)  # version 1: uniform grids, moments projected onto [0, hi], plain thresholds

MAX_MODEL_BYTES = 200 * 1024 * 1024  # the largest model file read (a fit of 5,000 groups writes a few MB)


@dataclass
class ModelParts:
    """The checked contents of a model file, in the order of ``FittedModel``'s fields."""

    params: DescentParams
    scale: LabelScale
    groups: GroupSet
    init_mean: dict
    init_moments: dict
    log: list
    round_ends: list
    info: dict
    extras: dict
    task: str
    binary: dict | None
    cells: dict | None
    moment_cells: dict | None
    init_variance: dict | None


def read_model(d, where: str = "model") -> ModelParts:
    """The parts of a model from a parsed model file, every section checked.

    Parameters
    ----------
    d : object
        The parsed JSON of a model file (anything: a non-model is refused).
    where : str
        What error messages call the file.

    Returns
    -------
    ModelParts

    Raises
    ------
    ModelFormatError
        Naming the first value the file format does not allow.
    """

    def bad(msg):
        return ModelFormatError(f"{where}: {msg}")

    version = _read_header(d, where, bad)
    params = _read_params(d["params"], version, bad)
    moments = params.moments
    scale = _read_scale(d["label_scale"], bad)
    try:  # the schema above has checked the groups' types; their rules (names, conditions) here
        groups = GroupSet.from_json(d["groups"], where, path="groups", schema=False)
    except ValueError as e:
        raise ModelFormatError(str(e)) from None
    G = len(groups)
    init = d["init"]
    init_mean = _read_init_mean(init, G, version, bad)
    init_moments = _read_init_moments(init, params, bad)
    log = _read_log(d["log"], version, params, G, bad)
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
    task, binary = _read_task(d, scale, moments, bad)
    cells = _read_cells(d.get("cells"), G, version, bad)
    moment_cells = d.get("moment_cells")
    if moment_cells is not None:
        from .cells import check_moment_cells

        moment_cells = check_moment_cells(moment_cells, moments, G, bad)
        if moment_cells and version < VERSION_MOMENT_CELLS:
            raise bad(f"the model has moment_cells: the file must have version {VERSION_MOMENT_CELLS} or later")
        bys = {rd.get("by") for c in moment_cells.values() for rd in c["rounds"]}
        if bys & {"mean", "mean_within"} and version < VERSION_MEAN_BANDS:
            raise bad(f"moment_cells has a round banded by the mean: the file must have version {VERSION_MEAN_BANDS}")
        if "mean_within" in bys and version < VERSION_MEAN_WITHIN:
            raise bad(
                "moment_cells has a round banded by the mean within groups: the file must have version "
                f"{VERSION_MEAN_WITHIN}"
            )
    init_variance = _read_init_variance(init, params, version, bad)
    return ModelParts(
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
        init_variance,
    )


def _read_header(d, where: str, bad) -> int:
    """The file's version, after its format marker, its schema and its required sections are checked."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise bad(f'not an mmc-audit model (missing "format": "{FORMAT}")')
    version = d.get("version")
    if version not in READABLE_VERSIONS or not isinstance(version, int) or isinstance(version, bool):
        raise bad(
            f"model schema version {version!r} is not supported (this mmc-audit reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))})"
        )
    from ..schemas import check

    # the file format's schema (mmc_core/schemas): types, ranges, required keys and limits, the first failure
    # named by its key path; what depends on other values is checked by the readers
    check(d, "model", where, ModelFormatError)
    for key in ("params", "label_scale", "groups", "init", "log", "round_ends"):
        if key not in d:
            raise bad(f"missing field '{key}'")
    return version


def _read_params(pr, version: int, bad) -> DescentParams:
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
    if any(not isinstance(a, int) or isinstance(a, bool) or not 2 <= a <= 20 for a in moments) or list(moments) != list(
        range(2, len(moments) + 2)
    ):
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
    if extra.get("z_moment", -1) != -1 and version < VERSION_MEAN_BANDS:
        raise bad(f"params.z_moment needs version {VERSION_MEAN_BANDS} or later")
    try:
        params = DescentParams(alpha, beta, m, moments, step, odd, max_rounds, tuple(sorted(moment_betas)), **extra)
        _ = params.mean_grid  # builds (and so validates) the grids
        for a in moments:
            params.grid(a)
    except ValueError as e:
        raise bad(f"params are malformed ({e})") from None
    return params


def _read_scale(ls, bad) -> LabelScale:
    try:
        return LabelScale(float(ls["lo"]), float(ls["hi"]), str(ls.get("source", "declared")))
    except Exception as e:  # noqa: BLE001 - any malformed scale is a format error
        raise bad(f"label_scale is malformed ({e})") from None


def _finite_numbers(v) -> bool:
    return isinstance(v, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v
    )


def _read_init_mean(init, G: int, version: int, bad) -> dict:
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
        _check_group_linear(init_mean, G, version, bad)
    if init_mean["kind"] == "constant":
        v = init_mean.get("value")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v <= 1.0:
            raise bad(f"init.mean.value={v!r} must be a number in [0, 1]")
    return init_mean


def _check_group_linear(init_mean: dict, G: int, version: int, bad) -> None:
    """init.mean of kind "base-group-linear": its numbers, one coefficient per group, knots, bends, group part."""
    for key in ("offset", "slope", "between", "shift", "center"):
        v = init_mean.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise bad(f"init.mean.{key}={v!r} must be a finite number")
    coef = init_mean.get("groups")
    if not isinstance(coef, list) or len(coef) != G or not _finite_numbers(coef):
        raise bad(f"init.mean.groups must be a list of {G} finite numbers (one per group)")
    knots, bends = init_mean.get("knots", []), init_mean.get("bends", [])
    if not _finite_numbers(knots) or not _finite_numbers(bends) or len(knots) != len(bends):
        raise bad("init.mean.knots and init.mean.bends must be lists of as many finite numbers")
    if any(not 0.0 <= k <= 1.0 for k in knots):
        raise bad("init.mean.knots must lie in [0, 1] (the unit scale of the label)")
    if any(bends) and version < VERSION_BENDS:
        raise bad(f"init.mean.bends are nonzero: the file must have version {VERSION_BENDS} or later")
    part = init_mean.get("group_part")
    if part is not None:
        if (
            not isinstance(part, dict)
            or not _finite_numbers([part.get("offset")])
            or not _finite_numbers(part.get("groups"))
            or len(part["groups"]) != G
        ):
            raise bad(
                f'init.mean.group_part must be {{"offset": a finite number, "groups": a list of {G} finite numbers}}'
            )
        if version < VERSION_GROUP_PART:
            raise bad(f"init.mean.group_part is set: the file must have version {VERSION_GROUP_PART} or later")
    if init_mean.get("logistic") is not None:
        _check_logistic(init_mean["logistic"], G, version, bad)


def _check_logistic(lg, G: int, version: int, bad) -> None:
    """init.mean.logistic: the per-group logistic map applied to the base before the group-linear map."""
    if version < VERSION_LOGISTIC:
        raise bad(f"init.mean.logistic is set: the file must have version {VERSION_LOGISTIC} or later")
    if not isinstance(lg, dict) or not _finite_numbers([lg.get(k) for k in ("knot", "intercept", "slope", "bend")]):
        raise bad("init.mean.logistic must have finite numbers knot, intercept, slope and bend")
    for key in ("groups", "group_slopes", "group_bends"):
        v = lg.get(key)
        if not isinstance(v, list) or not _finite_numbers(v) or len(v) != G:
            raise bad(f"init.mean.logistic.{key} must be a list of {G} finite numbers (one per group)")


def _read_init_moments(init, params: DescentParams, bad) -> dict:
    raw_moms = init.get("moments", {})
    init_moments = {}
    for a in params.moments:
        v = raw_moms.get(str(a)) if isinstance(raw_moms, dict) else None
        lo, hi = params.projection(a)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi:
            raise bad(f"init.moments['{a}']={v!r} must be a number in [{lo}, {hi}]")
        init_moments[a] = float(v)
    return init_moments


def _read_init_variance(init, params: DescentParams, version: int, bad) -> dict | None:
    """init.variance ({"column", "factor"}: moment 2 starts at factor x the column's base variance), or None."""
    v = init.get("variance")
    if v is None:
        return None
    if version < VERSION_BASE_VARIANCE:
        raise bad(f"init.variance is set: the file must have version {VERSION_BASE_VARIANCE} or later")
    if 2 not in params.moments:
        raise bad("init.variance is set but the model fits no variance (params.moments has no 2)")
    factor = v.get("factor") if isinstance(v, dict) else None
    if not isinstance(factor, (int, float)) or not _number(factor) or factor <= 0:
        raise bad(f"init.variance.factor={factor!r} must be a positive number")
    power = v.get("power", 1.0)
    if not isinstance(power, (int, float)) or not _number(power) or not 0 <= power <= 1:
        raise bad(f"init.variance.power={power!r} must be a number in [0, 1]")
    return {"column": str(v["column"]), "factor": float(factor), "power": float(power)}


def _read_log(entries, version: int, params: DescentParams, G: int, bad) -> list:
    m, moments = params.m, params.moments
    log = []
    if not isinstance(entries, list):
        raise bad("log must be a list")
    for k, entry in enumerate(entries):
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
    return log


def _read_task(d: dict, scale: LabelScale, moments: tuple, bad) -> tuple:
    """(task, binary): "regression" or "binary", with a binary model's classes, positive class and floor."""
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
    return task, binary


def _read_cells(cells, G: int, version: int, bad) -> dict | None:
    if cells is None:
        return None
    from .cells import check_cells

    check_cells(cells, G, bad)
    ridge = any(rd.get("combine") == "sum" for rd in cells["rounds"])
    need = VERSION_RIDGE_CELLS if ridge else VERSION_CELLS
    if cells["rounds"] and version != need and not (ridge and version >= VERSION_GROUP_PART):
        kind = "ridge cell corrections (cells.rounds with combine sum)" if ridge else "cell corrections (cells.rounds)"
        raise bad(f"the model has {kind}: the file must have version {need}")
    return cells


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
    for key in ("seconds", "z", "z_group", "calibration_fraction", "residual_kurtosis"):
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
    from ..paper.buckets import moment_projection

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
    zm = pr.get("z_moment", -1.0)
    for name, v in (("z", z), ("z_group", zg), ("z_group_moment", zgm), ("z_moment", zm), ("moment_shrink", shrink)):
        unset = name in ("z_group_moment", "z_moment") and v == -1
        if not _finite(v) or isinstance(v, bool) or not (0 <= v <= 100 or unset):
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
        "z_moment": float(zm),
        "moment_shrink": float(shrink),
    }


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)

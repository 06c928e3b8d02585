"""The pieces of a fit that both engines share, and the fitted model they produce: the parameter rules and
thresholds, the grids chosen from the rows, the steps around the descent, the base recalibration, the
shrunken cell corrections, the paper-faithful finite-sample mode and the saved model and its file format.

The modules behind this package are private by convention: the app and other users import the names
exported here (``__all__``, loaded on first use); inside mmc_core a module may import another package's
modules directly, never an underscore name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cells import apply_cells, apply_moment_cells, gated_cells, gated_moment_cells
    from .fit_params import build_params
    from .fit_steps import (
        FitRows,
        achieved_thresholds,
        cells_keep_given,
        check_held_out,
        count_labels,
        fit_info,
        search_buckets,
        state_achieved,
    )
    from .fresh import FreshDescent
    from .logistic_map import fit_group_logistic, group_logistic_base, mapped_base
    from .model import FittedModel, atomic_write_bytes, atomic_write_text, binary_clip, variance_start
    from .parameters import INTERVAL_CALIBRATIONS, PARAMETERS, TASKS, Parameter, check_parameters, check_value
    from .plan import STAGES, FitPlan, base_map_of, plan_fit
    from .recalibrate import (
        BASE_RECALIBRATIONS,
        CV_MAX_ROWS,
        GATE_MIN_ROWS,
        MIN_GAIN_Z,
        WITHIN_NOISE_Z,
        affine_base,
        capped,
        fit_affine,
        fit_group_linear,
        group_linear_base,
        within_slopes,
    )
    from .sklearn_params import SklearnParams
    from .thresholds import (
        AUTO_BUCKETS,
        AUTO_LEVEL,
        AUTO_REFERENCE_MASS,
        FLOOR_MASS,
        GROUP_Z_RULES,
        MEAN_BUCKET_RULES,
        MOMENT_BUCKET_RULES,
        MOMENT_VAR_FLOOR_SHARE,
        NO_GROUP_MOMENT_Z,
        SE_GROUP_LEVEL,
        SE_GROUP_MOMENT_Z,
        SE_LEVEL,
        SE_MIN_COUNT,
        SE_MOMENT_SHRINK,
        THRESHOLD_RULES,
        auto_threshold,
        bonferroni_z,
        check_seed,
        check_unit_interval,
        effective_rule,
    )

_EXPORTS = {
    "AUTO_BUCKETS": "thresholds",
    "AUTO_LEVEL": "thresholds",
    "AUTO_REFERENCE_MASS": "thresholds",
    "BASE_RECALIBRATIONS": "recalibrate",
    "CV_MAX_ROWS": "recalibrate",
    "FLOOR_MASS": "thresholds",
    "FitPlan": "plan",
    "FitRows": "fit_steps",
    "FittedModel": "model",
    "FreshDescent": "fresh",
    "GATE_MIN_ROWS": "recalibrate",
    "GROUP_Z_RULES": "thresholds",
    "INTERVAL_CALIBRATIONS": "parameters",
    "MEAN_BUCKET_RULES": "thresholds",
    "MIN_GAIN_Z": "recalibrate",
    "MOMENT_BUCKET_RULES": "thresholds",
    "MOMENT_VAR_FLOOR_SHARE": "thresholds",
    "NO_GROUP_MOMENT_Z": "thresholds",
    "PARAMETERS": "parameters",
    "Parameter": "parameters",
    "SE_GROUP_LEVEL": "thresholds",
    "SE_GROUP_MOMENT_Z": "thresholds",
    "SE_LEVEL": "thresholds",
    "SE_MIN_COUNT": "thresholds",
    "SE_MOMENT_SHRINK": "thresholds",
    "STAGES": "plan",
    "SklearnParams": "sklearn_params",
    "TASKS": "parameters",
    "THRESHOLD_RULES": "thresholds",
    "WITHIN_NOISE_Z": "recalibrate",
    "achieved_thresholds": "fit_steps",
    "affine_base": "recalibrate",
    "apply_cells": "cells",
    "apply_moment_cells": "cells",
    "atomic_write_bytes": "model",
    "atomic_write_text": "model",
    "auto_threshold": "thresholds",
    "base_map_of": "plan",
    "binary_clip": "model",
    "bonferroni_z": "thresholds",
    "build_params": "fit_params",
    "capped": "recalibrate",
    "cells_keep_given": "fit_steps",
    "check_held_out": "fit_steps",
    "check_parameters": "parameters",
    "check_seed": "thresholds",
    "check_unit_interval": "thresholds",
    "check_value": "parameters",
    "count_labels": "fit_steps",
    "effective_rule": "thresholds",
    "fit_affine": "recalibrate",
    "fit_group_linear": "recalibrate",
    "fit_group_logistic": "logistic_map",
    "group_logistic_base": "logistic_map",
    "mapped_base": "logistic_map",
    "fit_info": "fit_steps",
    "gated_cells": "cells",
    "gated_moment_cells": "cells",
    "group_linear_base": "recalibrate",
    "plan_fit": "plan",
    "search_buckets": "fit_steps",
    "state_achieved": "fit_steps",
    "variance_start": "model",
    "within_slopes": "recalibrate",
}

__all__ = [
    "AUTO_BUCKETS",
    "AUTO_LEVEL",
    "AUTO_REFERENCE_MASS",
    "BASE_RECALIBRATIONS",
    "CV_MAX_ROWS",
    "FLOOR_MASS",
    "FitPlan",
    "FitRows",
    "FittedModel",
    "FreshDescent",
    "GATE_MIN_ROWS",
    "GROUP_Z_RULES",
    "INTERVAL_CALIBRATIONS",
    "MEAN_BUCKET_RULES",
    "MIN_GAIN_Z",
    "MOMENT_BUCKET_RULES",
    "MOMENT_VAR_FLOOR_SHARE",
    "NO_GROUP_MOMENT_Z",
    "PARAMETERS",
    "Parameter",
    "SE_GROUP_LEVEL",
    "SE_GROUP_MOMENT_Z",
    "SE_LEVEL",
    "SE_MIN_COUNT",
    "SE_MOMENT_SHRINK",
    "STAGES",
    "SklearnParams",
    "TASKS",
    "THRESHOLD_RULES",
    "WITHIN_NOISE_Z",
    "achieved_thresholds",
    "affine_base",
    "apply_cells",
    "apply_moment_cells",
    "atomic_write_bytes",
    "atomic_write_text",
    "auto_threshold",
    "base_map_of",
    "binary_clip",
    "bonferroni_z",
    "build_params",
    "capped",
    "cells_keep_given",
    "check_held_out",
    "check_parameters",
    "check_seed",
    "check_unit_interval",
    "check_value",
    "count_labels",
    "effective_rule",
    "fit_affine",
    "fit_group_linear",
    "fit_group_logistic",
    "group_logistic_base",
    "mapped_base",
    "fit_info",
    "gated_cells",
    "gated_moment_cells",
    "group_linear_base",
    "plan_fit",
    "search_buckets",
    "state_achieved",
    "variance_start",
    "within_slopes",
]


def __getattr__(name: str) -> Any:  # the exports load on first use (PEP 562)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)

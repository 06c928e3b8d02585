"""The estimator's parameters in one table: what each one may be, checked once, before a fit reads any data.

Both engines, the command line (which renames the parameters to its flags) and the dashboard's threshold preview
call :func:`check_parameters`; no other module checks a constructor parameter. A few parameters can only be judged
together with the data (``label_range`` against the label, ``base_column`` against the table): the table says
where that happens.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.errors import MMCError
from ..paper.descent_params import STEP_RULES
from ..paper.moments import MomentKind
from .recalibrate import BASE_RECALIBRATIONS
from .thresholds import GROUP_Z_RULES, MEAN_BUCKET_RULES, MOMENT_BUCKET_RULES, THRESHOLD_RULES, check_seed

__all__ = ["INTERVAL_CALIBRATIONS", "PARAMETERS", "TASKS", "Parameter", "check_parameters", "check_value"]

TASKS = ("auto", "regression", "binary")
INTERVAL_CALIBRATIONS = ("auto", "held-out", "cross-fit")


@dataclass(frozen=True)
class Parameter:
    """One constructor parameter: ``must(value)`` is None for an allowed value, else what the value must be (the
    error then reads "<name> must be <that>, got <value>"). ``must`` is None for a parameter judged with the
    data; ``checked_with`` then says where."""

    name: str
    must: Callable[[Any], str | None] | None
    checked_with: str = ""


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _one_of(values, shown: str | None = None):
    text = f"one of {shown or ', '.join(values)}"
    return lambda v: None if isinstance(v, str) and v in values else text


def _threshold(v) -> str | None:
    if isinstance(v, str):
        return None if v in THRESHOLD_RULES else "a number in (0, 1), 'se' or 'auto'"
    if not _is_real(v) or not np.isfinite(float(v)) or not 0 < float(v) < 1:
        return "a number strictly between 0 and 1"
    return None if float(v) >= 1e-6 else "at least 1e-6"


def _n_buckets(v) -> str | None:
    ok = (isinstance(v, str) and v == "auto") or (_is_int(v) and 1 <= v <= 1000)
    return None if ok else "an integer from 1 to 1000 or 'auto'"


def _n_moments(v) -> str | None:
    return None if _is_int(v) and 1 <= v <= 8 else "an integer from 1 (mean only) to 8"


def _calibration_fraction(v) -> str | None:
    return None if _is_real(v) and 0 <= v < 1 else "in [0, 1)"


def _early_stopping(v) -> str | None:
    return None if isinstance(v, (bool, np.bool_)) or (isinstance(v, str) and v == "auto") else "True, False or 'auto'"


def _max_rounds(v) -> str | None:
    return None if v is None or (_is_int(v) and v >= 0) else "a non-negative integer or None"


def _seed(v) -> str | None:
    try:
        check_seed(v)
    except MMCError:
        return "a non-negative integer (or None)"
    return None


def _mean_group_z(v) -> str | None:
    ok = (isinstance(v, str) and v in GROUP_Z_RULES) or (_is_real(v) and 1.0 <= float(v) <= 10.0)
    return None if ok else "'bonferroni' or a number from 1 to 10"


def _flag(v) -> str | None:
    return None if isinstance(v, (bool, np.bool_)) else "True or False"


def _max_order(v) -> str | None:
    return None if _is_int(v) and v >= 1 else "an integer >= 1"


def _variance_column(v) -> str | None:
    return None if v is None or (isinstance(v, str) and v) else "a column name (a non-empty string) or None"


# in the order of the constructor's arguments (a test checks that the two agree)
PARAMETERS = (
    Parameter("alpha", _threshold),
    Parameter("beta", _threshold),
    Parameter("n_buckets", _n_buckets),
    Parameter("n_moments", _n_moments),
    Parameter("step", _one_of(STEP_RULES)),
    Parameter("odd_moments", _one_of(MomentKind.ALL)),
    Parameter("label_range", None, "the label (mmc_core.common.tables.LabelScale)"),
    Parameter("calibration_fraction", _calibration_fraction),
    Parameter("early_stopping", _early_stopping),
    Parameter("max_rounds", _max_rounds),
    Parameter("random_state", _seed),
    Parameter("mean_buckets", _one_of(MEAN_BUCKET_RULES)),
    Parameter("moment_buckets", _one_of(MOMENT_BUCKET_RULES)),
    Parameter("mean_group_z", _mean_group_z),
    Parameter("task", _one_of(TASKS)),
    Parameter("positive_label", None, "the label (mmc_core.auditing.binary.resolve_task)"),
    Parameter("base_recalibration", _one_of(BASE_RECALIBRATIONS)),
    Parameter("interval_calibration", _one_of(INTERVAL_CALIBRATIONS, ", ".join(map(repr, INTERVAL_CALIBRATIONS)))),
    Parameter("shrunken_cells", _flag),
    Parameter("base_column", None, "the table (MomentMulticalibrator.fit)"),
    Parameter("groups", None, "the table (mmc_core.groups.GroupSet.coerce)"),
    Parameter("max_order", _max_order),
    Parameter("variance_column", _variance_column),
)
_BY_NAME = {p.name: p for p in PARAMETERS}


def check_parameters(est, names=None) -> None:
    """Check an estimator's parameters against :data:`PARAMETERS` (all of them, or those in ``names``, in the
    table's order): an MMCError naming the first bad one as Python spells it.

    Parameters
    ----------
    est : MomentMulticalibrator
        Read with ``getattr``; nothing is changed.
    names : iterable of str, optional
        Only these parameters (default: every parameter the table can check without data).
    """
    for p in PARAMETERS if names is None else [_BY_NAME[n] for n in names]:
        if p.must is not None:
            check_value(p.name, getattr(est, p.name))


def check_value(name: str, value) -> None:
    """Check one value of parameter ``name`` against the table: an MMCError naming it when the value is bad."""
    must = _BY_NAME[name].must
    need = None if must is None else must(value)
    if need is not None:
        raise MMCError(f"{name} must be {need}, got {value!r}")

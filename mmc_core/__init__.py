"""mmc_core: moment multicalibration (Jung, Lee, Pai, Roth, Vohra) in numpy.

Public surface: :class:`MomentMulticalibrator` (fit / predict / save / load), :class:`GroupSet` (group
definitions), :class:`FittedModel` (the saved model), :func:`audit` (per-group tables, findings and the
scorecard of a model on labelled rows), :func:`compare` / :func:`compare_periods` with :func:`side` (two models
on the same rows, one model across periods), and the synthetic ground-truth distributions.
"""

from importlib.metadata import PackageNotFoundError, version

from .auditing.metrics import audit
from .common.errors import DataError, GroupDefinitionError, MMCError, ModelFormatError, NotFittedError
from .comparison.compare_models import compare, compare_periods, side
from .estimator.multicalibrator import MomentMulticalibrator
from .fit.model import FittedModel
from .fit.plan import FitPlan
from .groups.conditions import Condition
from .groups.group_set import Group, GroupSet
from .groups.membership import Membership
from .paper.moments import LabelScale, max_central_moment

__all__ = [
    "MomentMulticalibrator",
    "GroupSet",
    "Group",
    "Condition",
    "Membership",
    "FittedModel",
    "FitPlan",
    "LabelScale",
    "max_central_moment",
    "MMCError",
    "DataError",
    "GroupDefinitionError",
    "ModelFormatError",
    "NotFittedError",
    "audit",
    "compare",
    "compare_periods",
    "side",
]
try:  # one source of the version: pyproject.toml, through the installed package's metadata
    __version__ = version("mmc-audit")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

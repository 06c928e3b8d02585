"""mmc_core: moment multicalibration (Jung, Lee, Pai, Roth, Vohra) in numpy.

Public surface: :class:`MomentMulticalibrator` (fit / predict / save / load), :class:`GroupSet` (group
definitions), :class:`FittedModel` (the saved model), and the synthetic ground-truth distributions.
"""

from .errors import DataError, GroupDefinitionError, MMCError, ModelFormatError
from .estimator import MomentMulticalibrator
from .groups import Condition, Group, GroupSet, Membership
from .model import FittedModel
from .moments import LabelScale, max_central_moment

__all__ = [
    "MomentMulticalibrator",
    "GroupSet",
    "Group",
    "Condition",
    "Membership",
    "FittedModel",
    "LabelScale",
    "max_central_moment",
    "MMCError",
    "DataError",
    "GroupDefinitionError",
    "ModelFormatError",
]
__version__ = "0.1.0"

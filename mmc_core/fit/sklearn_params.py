"""scikit-learn's estimator protocol without importing scikit-learn (mmc_core stays numpy-only), and the JSON
form of constructor parameters that a saved model keeps so that ``load()`` restores them as given."""

from __future__ import annotations

import inspect

import numpy as np

from ..common.errors import MMCError


class SklearnParams:
    """scikit-learn's parameter protocol without importing scikit-learn (mmc_core stays numpy-only):
    ``get_params`` / ``set_params`` read the constructor's signature, so ``sklearn.base.clone``, grid searches
    and pipelines treat the estimator as one of theirs; the repr lists the parameters that differ from the
    defaults, as scikit-learn's does."""

    @classmethod
    def _param_names(cls) -> list:
        sig = inspect.signature(cls.__init__)
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind in kinds]

    def get_params(self, deep: bool = True) -> dict:
        """Constructor parameters, exactly as given (``deep`` is accepted for scikit-learn; nothing is nested)."""
        return {k: getattr(self, k) for k in self._param_names()}

    def set_params(self, **params):
        """Set constructor parameters; an unknown name is an MMCError naming the valid ones."""
        valid = self._param_names()
        for k in params:
            if k not in valid:
                raise MMCError(f"unknown parameter {k!r}; valid: {', '.join(valid)}")
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def __sklearn_tags__(self):
        """scikit-learn >= 1.6 asks every estimator for its tags; only scikit-learn calls this, so the import is
        free here: a regressor-like post-processor that takes a 2-D table with missing values and strings."""
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(
            estimator_type="regressor",
            target_tags=TargetTags(required=True),
            transformer_tags=None,
            classifier_tags=None,
            # a post-processor: without groups or a base prediction it predicts the label's mean (R^2 about 0)
            regressor_tags=RegressorTags(poor_score=True),
            input_tags=InputTags(two_d_array=True, allow_nan=True, string=True, categorical=True, dict=True),
        )

    def _more_tags(self) -> dict:
        """The same tags for scikit-learn < 1.6, which reads this instead of ``__sklearn_tags__``."""
        return {"poor_score": True, "allow_nan": True, "X_types": ["2darray", "string", "categorical", "dict"]}

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__)
        changed = []
        for k, v in self.get_params().items():
            d = sig.parameters[k].default
            same = v is d or (type(v) is type(d) and v == d)
            if not same:
                changed.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


def json_params(params: dict) -> dict:
    """Constructor parameters as JSON values (tuples as lists, numpy scalars as numbers); a value JSON cannot
    hold (e.g. a numpy Generator as random_state) is left out, and loading then uses the default."""
    out = {}
    for k, v in params.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, tuple):
            v = [x.item() if isinstance(x, np.generic) else x for x in v]
        if (
            v is None
            or isinstance(v, (bool, int, float, str))
            or (isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))
        ):
            out[k] = v
    return out

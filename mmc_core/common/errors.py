"""Exceptions raised for bad input. Every message names the parameter, column or field at fault."""


class MMCError(ValueError):
    """Base class: bad input the user can fix (the CLI turns these into one line on stderr, exit 2)."""


class GroupDefinitionError(MMCError):
    """A group definition is malformed or refers to something the table does not have."""


class ModelFormatError(MMCError):
    """A saved model is not a valid mmc-audit model file."""


class DataError(MMCError):
    """Labels, predictions or tables are unusable (missing, non-numeric, out of range)."""


class NotFittedError(MMCError, ValueError, AttributeError):
    """A method that needs a fitted model was called before ``fit`` (or ``load``).

    A ValueError and an AttributeError, as scikit-learn's ``sklearn.exceptions.NotFittedError`` is; mmc_core
    does not import scikit-learn, so :func:`not_fitted` raises a subclass of both classes when scikit-learn is
    already imported (then ``except sklearn.exceptions.NotFittedError`` catches it too)."""


_SKLEARN_NOT_FITTED: dict = {}


def not_fitted(message: str) -> NotFittedError:
    """A :class:`NotFittedError` with ``message``; also an instance of scikit-learn's NotFittedError when the
    caller has imported scikit-learn (read from ``sys.modules``: this never imports it)."""
    import sys

    sk = sys.modules.get("sklearn.exceptions")
    sk_cls = getattr(sk, "NotFittedError", None)
    if not isinstance(sk_cls, type):
        return NotFittedError(message)
    cls = _SKLEARN_NOT_FITTED.get(sk_cls)
    if cls is None:
        cls = type("NotFittedError", (NotFittedError, sk_cls), {"__module__": __name__})
        _SKLEARN_NOT_FITTED[sk_cls] = cls
    return cls(message)

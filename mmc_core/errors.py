"""Exceptions raised for bad input. Every message names the parameter, column or field at fault."""


class MMCError(ValueError):
    """Base class: bad input the user can fix (the CLI turns these into one line on stderr, exit 2)."""


class GroupDefinitionError(MMCError):
    """A group definition is malformed or refers to something the table does not have."""


class ModelFormatError(MMCError):
    """A saved model is not a valid mmc-audit model file."""


class DataError(MMCError):
    """Labels, predictions or tables are unusable (missing, non-numeric, out of range)."""

"""JSON Schemas of the files mmc-audit reads (``groups.schema.json``: the mmc-groups file; ``model.schema.json``:
a fitted model), and :func:`check`, which validates a parsed document against one with jsonschema and raises the
project's error naming the first failure's key path ("at params.alpha: '0.001' is not of type 'number'").

The schemas give structure and types; what depends on other values (a log entry against the buckets and groups,
lengths per group) is checked by the loaders after them."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

__all__ = ["check"]


@lru_cache(maxsize=None)
def _validator(which: str):
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    def load(name):
        return json.loads(resources.files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8"))

    groups = load("groups")
    registry = (
        Registry()
        .with_resource(groups["$id"], Resource.from_contents(groups))
        .with_resource("groups-1.json", Resource.from_contents(groups))
    )
    return Draft202012Validator(load(which), registry=registry)


def _path(error) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the top level"


def check(doc, which: str, where: str, error) -> None:
    """Raise ``error(message)`` (an MMCError class) naming the first place ``doc`` breaks schema ``which``."""
    from jsonschema.exceptions import best_match

    found = best_match(_validator(which).iter_errors(doc))
    if found is not None:
        what = found.message if len(found.message) <= 160 else found.message[:157] + "..."
        raise error(f"{where}: at {_path(found)}: {what}")

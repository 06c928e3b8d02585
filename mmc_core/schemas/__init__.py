"""JSON Schemas of the files mmc-audit reads (``groups.schema.json``: the mmc-groups file; ``model.schema.json``:
a fitted model), and :func:`check`, which validates a parsed document against one with jsonschema and raises the
project's error naming the first failure's key path ("at params.alpha: '0.001' is not of type 'number'").

The loaders run :func:`check` first, then their own checks of what depends on other values (a log entry against
the buckets and groups, lengths per group).

Two departures from plain JSON Schema, both stricter, both what the files' writer does:

* ``integer`` is a number written without a fraction or exponent (JSON Schema also counts ``1.0``; a group index
  of 1.0 in a log entry is a tampered file), and never a boolean;
* ``number`` is finite (the files are written with ``allow_nan=False``; a NaN would pass every range check).

Arrays of plain items (scalars, or arrays of them: a model's log, cells and interval thresholds, most of a large
file) are checked by a fast path equivalent to the item schema, and handed to the standard validation only when
an item fails it, for the standard message: jsonschema takes about 4 microseconds a number, 20 s for a model file
of 10 MB.
"""

from __future__ import annotations

import json
import math
import numbers
from functools import cache
from importlib import resources

__all__ = ["check", "schema"]


def _is_integer(checker, v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(checker, v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


_TYPES = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "string": lambda v: isinstance(v, str),
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
}
_SCALAR_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength"}
_ARRAY_KEYS = {"type", "minItems", "maxItems", "prefixItems", "items"}


def _fast_test(sub):
    """A predicate that holds only for values ``sub`` accepts, when ``sub`` is made of plain parts (scalar types,
    bounds, string lengths; arrays of such, with prefixItems and item counts); else None. A value it refuses goes
    to the standard validation, so it need only be sufficient."""
    if not isinstance(sub, dict) or "type" not in sub:
        return None
    if sub["type"] == "array":
        return _array_test(sub)
    if set(sub) - _SCALAR_KEYS:
        return None
    kinds = [sub["type"]] if isinstance(sub["type"], str) else list(sub["type"])
    if any(k not in _TYPES for k in kinds):
        return None
    type_tests = [_TYPES[k] for k in kinds]
    lo, hi = sub.get("minimum"), sub.get("maximum")
    xlo, xhi = sub.get("exclusiveMinimum"), sub.get("exclusiveMaximum")
    min_len, max_len = sub.get("minLength", 0), sub.get("maxLength")
    if len(kinds) == 1 and kinds[0] in ("number", "integer") and lo is hi is xlo is xhi is None:
        return type_tests[0]  # the common case (a table of numbers), without the general test's overhead

    def test(v) -> bool:
        if not any(t(v) for t in type_tests):
            return False
        if isinstance(v, str):
            return len(v) >= min_len and (max_len is None or len(v) <= max_len)
        if isinstance(v, bool) or v is None:
            return True
        return (
            (lo is None or v >= lo)
            and (hi is None or v <= hi)
            and (xlo is None or v > xlo)
            and (xhi is None or v < xhi)
        )

    return test


def _array_test(sub):
    if set(sub) - _ARRAY_KEYS:
        return None
    prefix = [_fast_test(p) for p in sub.get("prefixItems", [])]
    rest = sub.get("items", True)
    rest_test = None if rest is True or rest is False else _fast_test(rest)
    if any(t is None for t in prefix) or (rest_test is None and rest not in (True, False)):
        return None
    lo, hi = sub.get("minItems", 0), sub.get("maxItems")

    def test(v) -> bool:
        if not isinstance(v, list) or len(v) < lo or (hi is not None and len(v) > hi):
            return False
        if not all(t(x) for t, x in zip(prefix, v)):
            return False
        if rest is False:
            return len(v) <= len(prefix)
        return rest_test is None or all(map(rest_test, v[len(prefix) :]))

    return test


@cache
def _validator(which: str):
    from jsonschema import Draft202012Validator, validators
    from referencing import Registry, Resource

    base_items = Draft202012Validator.VALIDATORS["items"]
    tests: dict = {}

    def items(validator, sub, instance, schema):
        if isinstance(instance, list) and isinstance(sub, dict):
            key = id(sub)
            if key not in tests:
                tests[key] = (sub, _fast_test(sub))  # the schema kept alive beside its id
            test = tests[key][1]
            if test is not None and all(map(test, instance[len(schema.get("prefixItems", ())) :])):
                return
        yield from base_items(validator, sub, instance, schema)

    checker = Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
    Strict = validators.extend(Draft202012Validator, {"items": items}, type_checker=checker)
    groups = schema("groups")
    registry = (
        Registry()
        .with_resource(groups["$id"], Resource.from_contents(groups))
        .with_resource("groups-1.json", Resource.from_contents(groups))
    )
    return Strict(schema(which), registry=registry)


@cache
def schema(which: str) -> dict:
    """The parsed schema ``which`` ("model" or "groups"), from the package's data."""
    return json.loads(resources.files(__package__).joinpath(f"{which}.schema.json").read_text(encoding="utf-8"))


_KINDS = {
    "array": "a list",
    "object": "an object",
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "null": "null",
}


def _kind(v) -> str:
    """The JSON kind of a parsed value, as the messages name it."""
    if isinstance(v, bool):
        return f"a boolean ({'true' if v else 'false'})"
    if v is None:
        return "null"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, numbers.Integral):
        return "an integer"
    if isinstance(v, numbers.Real):
        return "a number" if math.isfinite(v) else f"the non-finite number {v}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(err) -> str:
    """A jsonschema error in the words of the project's other messages ("must be a number, got a string"); the
    key path is given beside it."""
    kw, arg, v = err.validator, err.validator_value, err.instance
    if kw == "type":
        kinds = [arg] if isinstance(arg, str) else list(arg)
        if isinstance(v, float) and "integer" in kinds and "number" not in kinds and math.isfinite(v):
            return f"must be an integer (no fraction or exponent), got {_short(v)}"
        return f"must be {' or '.join(_KINDS.get(k, k) for k in kinds)}, got {_kind(v)}" + (
            f" ({_short(v)})" if isinstance(v, (str, int, float)) and not isinstance(v, bool) else ""
        )
    if kw == "enum":
        key = err.path[-1] if err.path and isinstance(err.path[-1], str) else "value"
        return f"unknown {key} {_short(v)}; use one of {', '.join(map(str, arg))}"
    if kw == "const":
        return f"must be {arg!r}, got {_short(v)}"
    if kw == "required":
        missing = next((k for k in arg if isinstance(v, dict) and k not in v), None)
        return f"missing field {missing!r}" if missing is not None else err.message
    if kw == "additionalProperties" and isinstance(v, dict):
        known = set(err.schema.get("properties", {}))
        extra = sorted(str(k) for k in v if k not in known)
        return f"unknown key(s) {_short(extra)}"
    if kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        rel = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[kw]
        return f"must be {rel} {arg}, got {_short(v)}"
    if kw == "maxItems":
        return f"lists {len(v):,} items; the limit is {arg:,}"
    if kw == "minItems":
        return f"must list at least {arg} item{'s' if arg != 1 else ''}, got {len(v)}"
    if kw == "maxLength":
        return f"is {len(v):,} characters long; the limit is {arg:,}"
    if kw == "minLength":
        return f"must be at least {arg} character{'s' if arg != 1 else ''} long"
    if kw == "items" and arg is False:
        return f"lists {len(v):,} items; at most {len(err.schema.get('prefixItems', ())):,}"
    return err.message


def _group_name(doc, path) -> str:
    """`` (group 'name')`` when ``path`` runs through a group of a groups list (in a groups file or a model)."""
    parts = list(path)
    for i in range(len(parts) - 1, -1, -1):
        if isinstance(parts[i], int) and (i == 0 or parts[i - 1] == "groups"):
            node = doc
            try:
                for p in parts[: i + 1]:
                    node = node[p]
            except (KeyError, IndexError, TypeError):
                return ""
            name = node.get("name") if isinstance(node, dict) else None
            if isinstance(name, str) and len(parts) > i + 1 and parts[i + 1] != "name":
                from ..common.jsonfile import one_line

                return f" (group {one_line(repr(name), 80)})"
            return ""
    return ""


def check(doc, which: str, where: str, error) -> None:
    """Raise ``error(message)`` (an MMCError class) naming the first place ``doc`` breaks schema ``which``:
    "{where}: at {key path}: {what is wrong}", with the group's name when the place is inside a group."""
    from jsonschema.exceptions import best_match

    from ..common.jsonfile import key_path, one_line

    first = next(_validator(which).iter_errors(doc), None)
    if first is None:
        return
    found = best_match([first])  # inside a combinator ("if"/"then", "anyOf"): its most relevant part
    path = list(found.absolute_path)
    group = _group_name(doc, path) if which == "groups" or path[:1] == ["groups"] else ""
    raise error(f"{where}: at {key_path(path)}{group}: {one_line(_message(found), 200)}")

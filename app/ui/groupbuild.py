"""Building group definitions from columns (pure functions; no Streamlit).

Groups are kept as JSON-ready dicts in the format ``mmc fit --groups`` reads (see mmc_core/groups/group_set.py):
``{"name": ..., "where": [{"column": ..., "op": ..., ...}, ...]}``. Everything that turns text into a group
goes through :meth:`mmc_core.GroupSet.from_json` (an explicit grammar; nothing is evaluated).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd

from mmc_core import Condition, GroupSet
from mmc_core.common import GroupDefinitionError
from mmc_core.groups import MAX_GROUPS, MAX_VALUES, quartile_edges, unique_names
from mmc_core.groups import column_conditions as core_column_conditions

__all__ = [
    "column_kind",
    "distinct_values",
    "quantile_edges",
    "column_conditions",
    "intersections",
    "condition_label",
    "group_name",
    "validate_groups",
    "groups_file",
    "parse_groups_file",
    "suggest_groups",
    "MAX_CATEGORIES",
]

MAX_CATEGORIES = MAX_VALUES  # numeric columns with more distinct values than this are binned (as `mmc fit`)


def column_kind(s: pd.Series, max_categories: int = MAX_CATEGORIES) -> str:
    """``categorical`` (text, bool, or numeric with few distinct values) or ``numeric`` (binned)."""
    if pd.api.types.is_bool_dtype(s) or not pd.api.types.is_numeric_dtype(s):
        return "categorical"
    return "categorical" if s.nunique(dropna=True) <= max_categories else "numeric"


def _json_value(v):
    """A value as JSON wants it: int for whole numbers, float, or text."""
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return int(f) if f.is_integer() else f
    return str(v)


def distinct_values(s: pd.Series, limit: int = 200) -> list:
    """Sorted distinct non-missing values (JSON-ready), at most ``limit``."""
    vals = pd.unique(s.dropna())
    out = sorted({_json_value(v) for v in vals[: max(limit * 4, limit)]}, key=lambda v: (isinstance(v, str), v))
    return out[:limit]


def quantile_edges(s: pd.Series, n_bins: int) -> list:
    """Inner cut points of ``n_bins`` quantile bins, exactly as ``mmc fit --group-cols`` cuts (mmc_core)."""
    v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
    return quartile_edges(v, n_bins)


def column_conditions(
    df: pd.DataFrame, col: str, n_bins: int = 4, max_categories: int = MAX_CATEGORIES, bin_numeric: bool = False
) -> list:
    """One condition dict per value (categorical) or per quantile bin (numeric) of ``col``: the one group builder
    of mmc_core (:func:`mmc_core.groups.group_set.column_conditions`), so a groups file exported here and a
    ``mmc fit --group-cols`` run on the same table define the same groups."""
    return [c.to_dict() for c in core_column_conditions(df, col, n_bins, max_categories, bin_numeric)]


def condition_label(cond: dict) -> str:
    return Condition.from_dict(cond).label()


def group_name(conds: list) -> str:
    return " & ".join(condition_label(c) for c in conds) if conds else "all"


def definition(g: dict) -> str:
    """A group's conditions in words: its ``where`` conjunction and, for learned rules, its ``any`` terms."""
    parts = [group_name(g["where"])] if g.get("where") else []
    terms = g.get("any") or []
    if terms:
        ors = [group_name(t) for t in terms]
        parts.append(ors[0] if len(ors) == 1 else " | ".join(f"({t})" for t in ors))
    return " & ".join(parts) if parts else "every row"


def intersections(per_column: list, max_order: int) -> list:
    """All groups from one condition of each of up to ``max_order`` different columns (order 1 first), named as
    ``mmc fit --group-cols`` names them (:func:`mmc_core.groups.group_set.unique_names`): a value's bidirectional controls
    shown as their code ("[U+202E]"), line breaks escaped, long names cut with a digest. The plain label made
    names a groups file refuses, so a column holding such a value gave no groups at all."""
    if max_order < 1:
        raise GroupDefinitionError(f"the intersection order must be >= 1, got {max_order}")
    count = sum(
        int(np.prod([len(per_column[i]) for i in combo]))
        for r in range(1, min(max_order, len(per_column)) + 1)
        for combo in itertools.combinations(range(len(per_column)), r)
    )
    if count + 1 > MAX_GROUPS:
        raise GroupDefinitionError(
            f"these columns and order {max_order} give {count + 1:,} groups; the limit is "
            f"{MAX_GROUPS:,} (lower the order, use fewer bins or fewer columns)"
        )
    combos = [
        list(conds)
        for r in range(1, min(max_order, len(per_column)) + 1)
        for combo in itertools.combinations(range(len(per_column)), r)
        for conds in itertools.product(*(per_column[i] for i in combo))
    ]
    keys = [tuple(Condition.from_dict(c) for c in conds) for conds in combos]
    names = unique_names([group_name(conds) for conds in combos], keys)
    return [{"name": name, "where": [dict(c) for c in conds]} for name, conds in zip(names, combos)]


def validate_groups(groups: list, columns=None) -> GroupSet:
    """A GroupSet from group dicts (raises GroupDefinitionError with the reason); checks columns exist."""
    gs = GroupSet.from_json([g for g in groups])
    if columns is not None:
        missing = sorted(c for c in gs.columns() if c not in set(columns))
        if missing:
            raise GroupDefinitionError(f"the groups refer to column(s) not in the data: {', '.join(missing)}")
    return gs


INFO_KEYS = ("kind", "count", "mass", "mean_residual", "moment_error", "p_value", "region", "violation")


def info_fields(g: dict) -> dict:
    """The descriptive fields of a group dict (what ``mmc discover`` / the Discover tab write beside a rule:
    ``kind``, ``p_value``...). They never change membership; ``kind`` marks a discovered group."""
    return {k: g[k] for k in INFO_KEYS if isinstance(g, dict) and k in g}


def is_discovered(g: dict) -> bool:
    return isinstance(g, dict) and "kind" in g


def _with_info(parsed: list, raw: list) -> list:
    """``parsed`` group dicts (from GroupSet, which drops descriptive fields) with the fields of the ``raw``
    group of the same name put back."""
    by_name: dict = {}
    for g in raw:
        if isinstance(g, dict) and isinstance(g.get("name"), str):
            by_name.setdefault(g["name"], info_fields(g))
    return [{**g, **by_name.get(g["name"], {})} for g in parsed]


def groups_file(groups: list) -> dict:
    """The ``mmc fit --groups`` file contents (without the implicit ``all`` group); discovered groups keep their
    descriptive fields (``kind``, ``p_value``...; ``mmc fit`` reads and ignores them)."""
    gs = GroupSet.from_json(groups)
    d = gs.to_json()
    d["groups"] = _with_info([g for g in d["groups"] if g["where"] or g.get("any")], groups)
    return d


def parse_groups_file(text, columns=None) -> list:
    """Group dicts from a groups file (bytes or text), validated by GroupSet.from_json; ``all`` dropped."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise GroupDefinitionError("the group file is not UTF-8 text") from None
    gs = GroupSet.from_json(text)
    if columns is not None:
        missing = sorted(c for c in gs.columns() if c not in set(columns))
        if missing:
            raise GroupDefinitionError(f"the group file refers to column(s) not in the data: {', '.join(missing)}")
    try:
        obj = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        obj = []
    raw = obj.get("groups", []) if isinstance(obj, dict) else obj
    return _with_info([g.to_dict() for g in gs.groups if not g.is_everything], raw if isinstance(raw, list) else [])


def merge(existing: list, new: list) -> tuple[list, int]:
    """Append groups whose names are new; returns (merged, number skipped as duplicates)."""
    names = {g["name"] for g in existing}
    out, skipped = list(existing), 0
    for g in new:
        if g["name"] in names or g["name"] == "all":
            skipped += 1
            continue
        out.append(g)
        names.add(g["name"])
    return out, skipped


def suggest_groups(df: pd.DataFrame, columns, numeric_columns=(), order: int = 1, n_bins: int = 4) -> list:
    """Order-``order`` groups of the suggested columns (numeric ones in ``n_bins`` quantile bins)."""
    per = []
    for c in columns:
        if c not in df.columns:
            continue
        per.append(column_conditions(df, c, n_bins, bin_numeric=c in numeric_columns))
    return intersections(per, order) if per else []


def to_text(groups: list) -> str:
    return json.dumps(groups_file(groups), indent=2)

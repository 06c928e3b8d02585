"""Named, possibly overlapping groups defined by conditions on columns, and their membership.

The groups (:class:`Group`) and the set a model file stores (:class:`GroupSet`) are built here on one condition
(:class:`~mmc_core.groups.conditions.Condition`, with the column handling they share) and evaluated into a
:class:`~mmc_core.groups.membership.Membership`; both are modules of their own.

A group is a conjunction of conditions; the group with no conditions is the whole population. Definitions
are data (parsed from JSON by an explicit grammar, never evaluated as code) so that a fitted model can
compute memberships of *new* rows.

Condition grammar (JSON object)::

    {"column": "race",   "op": "==",      "value": "B"}
    {"column": "race",   "op": "in",      "values": ["B", "C"]}
    {"column": "age",    "op": "between", "lo": 50, "hi": 65}      # 50 <= age < 65 (either bound may be null)
    {"column": "income", "op": ">=",      "value": 30000}            # also "!=", "not in", "<", "<=", ">"

Group file (``mmc fit --groups FILE.json``)::

    {"format": "mmc-groups", "version": 1,
     "groups": [{"name": "Black women", "where": [{"column": "black", "op": "==", "value": 1},
                                                   {"column": "female", "op": "==", "value": 1}]}]}

A group may add ``"any": [[condition, ...], ...]``: a disjunction of conjunctions (at most 64 terms of at most 16
conditions) that must hold besides ``where`` (``mmc fit --discover`` writes learned rules this way). The
descriptive fields ``mmc discover`` writes beside a group (``kind``, ``count``, ``mass``, ``region``,
``violation``, ``mean_residual``, ``moment_error``, ``p_value``: short strings or numbers) are accepted and
ignored. A bare list of groups is accepted too. Rows whose value is missing (NaN / empty) satisfy no condition
except ``!=`` and ``not in``. A category never seen when fitting simply matches no rows at predict time.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..common.errors import GroupDefinitionError
from .conditions import (
    Condition,
    format_value,
    is_number,
    is_numeric_column,
    missing_mask,
    table_column,
    zero_led,
)
from .membership import Membership

__all__ = [
    "Condition",
    "Group",
    "GroupSet",
    "Membership",
    "MAX_GROUPS",
    "MAX_VALUES",
    "column_conditions",
    "loadable_name",
]

# Disjunction extension (discovered groups): "any": [[cond, ...], ...] holds when at least one inner list
# holds entirely; a group is its "where" conjunction AND its "any" disjunction.
MAX_ANY_TERMS, MAX_TERM_CONDITIONS = 64, 16
MAX_GROUPS = 5000  # more groups than this is refused: cell statistics grow as groups x buckets^2
_NAME_RE = re.compile(r"^[^\x00-\x1f]{1,200}$")


# Descriptive fields `mmc discover` writes beside a group; read and ignored (they never change membership).
# descriptive fields a group may carry (written by `mmc discover`, read back and kept, never evaluated)
GROUP_INFO_KEYS = ("kind", "count", "mass", "mean_residual", "moment_error", "p_value", "region", "violation")
_INFO_KEYS = set(GROUP_INFO_KEYS)


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# invisible characters that join nothing (zero-width space, word joiner, byte-order mark, soft hyphen, Mongolian
# vowel separator): "a\u200bb" would read as a second "ab" (the joiners that shape scripts, U+200C and U+200D,
# are kept)
_INVISIBLE = frozenset("\u200b\u2060\ufeff\u00ad\u180e")
MAX_NAME = 200
MAX_GROUPS_FILE_BYTES = 20 * 1024 * 1024  # a groups file of 5,000 discovered groups takes about 5 MB
MAX_TEXT = 10_000  # characters of a column name or a text value in a group's condition (groups.schema.json)


def loadable_name(text: str) -> str:
    r"""A name every loader reads back, made from any text (a data value, a discovered rule): control characters
    written as escapes ("\n", "\x00"), bidirectional controls as their code ("[U+202E]"), and past MAX_NAME
    characters cut, with a stable 8-character digest of the whole text so that names cut alike stay apart. A
    value of 300 characters or holding a line break made `mmc fit` write a model every later command refused."""
    out = []
    for ch in str(text):
        o = ord(ch)
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif ch in _BIDI or ch in _INVISIBLE:
            out.append(f"[U+{o:04X}]")
        else:
            out.append(ch)
    name = "".join(out)
    if len(name) <= MAX_NAME:
        return name
    import hashlib

    digest = hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return name[: MAX_NAME - 10] + "…#" + digest


def unique_names(texts: list, keys: list) -> list:
    r""":func:`loadable_name` of each text, kept apart: texts that give one name (a value holding a line break,
    "a" + newline + "b", and the four characters a\nb both read ``a\nb``; column "a=b" value "c" and column "a" value "b=c" both read ``a=b=c``) each get
    the digest of their key (the group's conditions) appended, stable from one fit to the next."""
    import hashlib

    names = [loadable_name(t) for t in texts]
    counts = Counter(names)
    if all(k == 1 for k in counts.values()):
        return names
    out = []
    for name, key in zip(names, keys):
        if counts[name] > 1:
            blob = json.dumps([c.to_dict() for c in key], sort_keys=True, ensure_ascii=True, default=str)
            digest = hashlib.sha256(blob.encode("ascii")).hexdigest()[:8]
            name = (name if len(name) <= MAX_NAME - 9 else name[: MAX_NAME - 10] + "…") + "#" + digest
        out.append(name)
    return out


@dataclass(frozen=True)
class Group:
    name: str
    where: tuple = ()  # tuple[Condition, ...]; empty (and no "any") = whole population
    any: tuple = ()  # tuple[tuple[Condition, ...], ...]: disjunction of conjunctions, empty = no constraint

    @property
    def is_everything(self) -> bool:
        return not self.where and not self.any

    @classmethod
    def from_dict(cls, d, where: str = "group") -> Group:
        if not isinstance(d, dict):
            hint = (
                f"; to use the values of column {d!r} as groups, pass GroupSet.from_columns(X, [{d!r}, ...])"
                if isinstance(d, str)
                else ""
            )
            raise GroupDefinitionError(f"{where}: a group must be a JSON object with 'name' and 'where'{hint}")
        unknown = set(d) - {"name", "where", "any"} - _INFO_KEYS
        if unknown:
            raise GroupDefinitionError(f"{where}: unknown key(s) {sorted(unknown)}")
        for k in _INFO_KEYS & set(d):
            v = d[k]
            if not (
                v is None
                or isinstance(v, str)
                and len(v) <= 200
                or is_number(v)
                and math.isfinite(v)
                or isinstance(v, bool)
            ):
                raise GroupDefinitionError(f"{where}: '{k}' must be a short string, a finite number or null")
        name = d.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise GroupDefinitionError(
                f"{where}.name: 'name' must be a printable string of 1-200 characters (no line breaks, tabs or other "
                "control characters)"
            )
        if any(c in _BIDI for c in name):
            raise GroupDefinitionError(
                f"{where}.name: 'name' holds a bidirectional control character (U+202E and the like), which would "
                "make the name read as something else; remove it"
            )
        if any(c in _INVISIBLE for c in name):
            raise GroupDefinitionError(
                f"{where}.name: 'name' holds an invisible character (U+200B zero-width space and the like), which "
                "would make it read as another name; remove it"
            )
        conds = d.get("where", [])
        if not isinstance(conds, list):
            raise GroupDefinitionError(f"{where}.where (group {name!r}): 'where' must be a list of conditions")
        terms = d.get("any", [])
        if (
            not isinstance(terms, list)
            or len(terms) > MAX_ANY_TERMS
            or ("any" in d and not terms)
            or any(not isinstance(t, list) or not 1 <= len(t) <= MAX_TERM_CONDITIONS for t in terms)
        ):
            raise GroupDefinitionError(
                f"{where}.any (group {name!r}): 'any' must be a list of 1-{MAX_ANY_TERMS} non-empty lists of at most "
                f"{MAX_TERM_CONDITIONS} conditions"
            )
        return cls(
            name,
            tuple(Condition.from_dict(c, f"{where}.where[{i}] (group {name!r})") for i, c in enumerate(conds)),
            tuple(
                tuple(Condition.from_dict(c, f"{where}.any[{t}][{i}] (group {name!r})") for i, c in enumerate(term))
                for t, term in enumerate(terms)
            ),
        )

    def to_dict(self) -> dict:
        d = {"name": self.name, "where": [c.to_dict() for c in self.where]}
        if self.any:
            d["any"] = [[c.to_dict() for c in term] for term in self.any]
        return d

    def columns(self) -> set:
        return {c.column for c in self.where} | {c.column for term in self.any for c in term}


def quartile_edges(values: np.ndarray, n_bins: int = 4) -> list:
    """Inner cut points of ``n_bins`` quantile bins (distinct; none at or below the minimum: no empty bin)."""
    v = values[np.isfinite(values)]
    if v.size == 0 or n_bins < 2:
        return []
    qs = np.unique(np.quantile(v, np.linspace(0, 1, n_bins + 1)[1:-1]))
    return [float(q) for q in qs if q > v.min()]


MAX_VALUES = 10  # a numeric column with more distinct values than this is cut into quantile bins


def column_conditions(table, c: str, n_bins: int = 4, max_values: int = MAX_VALUES, bin_numeric: bool = False) -> list:
    """The conditions of one group column, as ``mmc fit --group-cols`` and the dashboard both build them: one
    per value, or (numeric columns with more than ``max_values`` distinct values, or any numeric column when
    ``bin_numeric``) one per ``n_bins``-quantile bin computed on ``table``."""
    arr = table_column(table, c)
    if is_numeric_column(arr):
        distinct = np.unique(arr[np.isfinite(arr)])
        if distinct.size > max_values or (bin_numeric and distinct.size > n_bins):
            return numeric_conditions(c, distinct, quartile_edges(arr, n_bins))
        return numeric_conditions(c, distinct)
    miss = missing_mask(arr)
    return text_conditions(c, sorted({str(v) for v in arr[~miss]}))


def numeric_conditions(c: str, distinct: np.ndarray, edges: list | None = None) -> list:
    """A numeric group column's conditions (one source for the in-memory and the Dask builders): one per
    distinct value, or with ``edges`` (inner cut points) one per bin between them."""
    if distinct.size == 0:
        raise GroupDefinitionError(f"group column '{c}' has no values")
    if edges is not None:
        bounds = [None] + list(edges) + [None]
        return [Condition(c, "between", lo=bounds[i], hi=bounds[i + 1]) for i in range(len(bounds) - 1)]
    return [Condition(c, "==", value=(int(v) if float(v).is_integer() else float(v))) for v in distinct]


def text_conditions(c: str, vals: list, counted_to: int | None = None) -> list:
    """A text group column's conditions: one per value (sorted), at most 200. ``counted_to``: the values were
    counted only up to about this many (then the error says "more than 200")."""
    if not vals:
        raise GroupDefinitionError(f"group column '{c}' has no values")
    long = next((v for v in vals if isinstance(v, str) and len(v) > MAX_TEXT), None)
    if long is not None:  # a groups file (and a model) holds values of at most MAX_TEXT characters
        raise GroupDefinitionError(
            f"group column '{loadable_name(c)}' has a value of {len(long):,} characters; a group value has at most "
            f"{MAX_TEXT:,} (bin the column or define groups in a JSON file)"
        )
    if len(vals) > 200:
        many = "more than 200" if counted_to is not None else str(len(vals))
        raise GroupDefinitionError(
            f"group column '{c}' has {many} distinct values; a group per value is not "
            "useful (bin it first or define groups in a JSON file)"
        )
    return [Condition(c, "==", value=v) for v in vals]


@dataclass
class GroupSet:
    """An ordered collection of groups; the first is always the whole population ``all``."""

    groups: list

    def __post_init__(self):
        if not self.groups or not self.groups[0].is_everything:
            self.groups.insert(0, Group("all", ()))
        if len(self.groups) > MAX_GROUPS:  # first: the duplicate check below is linear, but need not run
            raise GroupDefinitionError(
                f"{len(self.groups)} groups requested; the limit is {MAX_GROUPS} "
                "(lower --max-order or use fewer --group-cols)"
            )
        dup = sorted(n for n, k in Counter(g.name for g in self.groups).items() if k > 1)
        if dup:
            raise GroupDefinitionError(f"duplicate group name(s): {', '.join(dup[:10])}")
        # names that differ only in their Unicode form ("café" composed and decomposed) read as one name
        same = sorted(n for n, k in Counter(unicodedata.normalize("NFC", g.name) for g in self.groups).items() if k > 1)
        if same:
            raise GroupDefinitionError(
                f"group names that differ only in their Unicode normalization (they read alike): {', '.join(same[:10])}; "
                "write them one way (NFC) in the data or the groups file"
            )

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def from_json(cls, obj, where: str = "group definitions", path: str = "", schema: bool = True) -> GroupSet:
        """Groups from a groups file's JSON: text or bytes (read through :mod:`mmc_core.common.jsonfile`: size, depth and
        number limits), or the parsed object. The format and version are checked first, then the number of groups
        (before anything is parsed one by one), then the schema (mmc_core/schemas/groups.schema.json: types,
        limits, the first failure named by its key path), then each group's rules. Errors read "{where}: at
        {key path}: ..."; ``path`` is the key path of the groups inside an enclosing document ("groups" in a model
        file, whose schema has been checked already: ``schema=False``)."""
        if isinstance(obj, (str, bytes, bytearray)):
            from ..common.jsonfile import loads

            obj = loads(obj, where, GroupDefinitionError, kind="groups file", max_bytes=MAX_GROUPS_FILE_BYTES)
        if isinstance(obj, dict):
            if obj.get("format", "mmc-groups") != "mmc-groups":
                raise GroupDefinitionError(f"{where}: not a group definition file (format {obj.get('format')!r})")
            version = obj.get("version", 1)
            if version != 1 or isinstance(version, (bool, float)):
                raise GroupDefinitionError(f"{where}: group file version {version!r} is not supported (expected 1)")
        listed = obj.get("groups") if isinstance(obj, dict) else obj
        if not isinstance(listed, list):
            raise GroupDefinitionError(f"{where}: group definitions must be a list of groups or {{'groups': [...]}}")
        # by their count first: the schema and the parser take time per group (200,000 took minutes)
        n_all = 1 if listed and listed[0] in ({"name": "all", "where": []}, {"name": "all"}) else 0
        if len(listed) - n_all + 1 > MAX_GROUPS:
            raise GroupDefinitionError(
                f"{where}: {len(listed) - n_all:,} groups defined; the limit is {MAX_GROUPS} groups, the whole "
                "population 'all' included"
            )
        for i, g in enumerate(listed):  # a column name where a group belongs: the parser's hint, not the schema's
            if isinstance(g, str):
                Group.from_dict(g, f"{where}: at {'groups' if isinstance(obj, dict) else ''}[{i}]")
        if schema:
            from ..schemas import check

            check(obj, "groups", where, GroupDefinitionError)
        at = ".".join(p for p in (path, "groups" if isinstance(obj, dict) else "") if p)
        groups = [Group.from_dict(g, f"{where}: at {at}[{i}]") for i, g in enumerate(listed)]
        try:
            return cls([g for g in groups if not (g.name == "all" and g.is_everything)])
        except GroupDefinitionError as e:
            raise GroupDefinitionError(f"{where}: {e}") from None

    @classmethod
    def from_file(cls, path) -> GroupSet:
        """Groups from the groups file ``path`` (``--groups``): refused from its size before it is read when over
        MAX_GROUPS_FILE_BYTES, then :meth:`from_json`, errors naming the file."""
        import os

        from ..common.jsonfile import read_file

        text = read_file(path, GroupDefinitionError, kind="groups file", max_bytes=MAX_GROUPS_FILE_BYTES)
        return cls.from_json(text, os.fspath(path))

    def to_json(self) -> dict:
        return {"format": "mmc-groups", "version": 1, "groups": [g.to_dict() for g in self.groups]}

    @classmethod
    def from_columns(
        cls, table, columns, max_order: int = 1, max_values: int = 10, conditions: dict | None = None
    ) -> GroupSet:
        """Every value of each column (numeric columns with more than ``max_values`` distinct values are cut
        at their quartiles, computed on ``table``) plus all intersections of values of *different* columns
        up to ``max_order``, plus the whole population. ``conditions`` (column -> its conditions, as
        :func:`column_conditions` builds them) replaces reading ``table`` (the Dask engine computes them by
        reductions)."""
        if max_order < 1:
            raise GroupDefinitionError(f"--max-order must be >= 1, got {max_order}")
        columns = list(columns)
        if len(set(columns)) != len(columns):
            raise GroupDefinitionError("a group column is listed twice")
        per_col = [
            list(conditions[c]) if conditions is not None else column_conditions(table, c, 4, max_values)
            for c in columns
        ]
        count = sum(
            math.prod(len(per_col[i]) for i in combo)
            for r in range(1, min(max_order, len(per_col)) + 1)
            for combo in itertools.combinations(range(len(per_col)), r)
        )
        if count + 1 > MAX_GROUPS:
            raise GroupDefinitionError(
                f"these columns and --max-order {max_order} give {count + 1} groups; the limit is {MAX_GROUPS}"
            )
        for c in columns:
            if isinstance(c, str) and len(c) > MAX_TEXT:  # a groups file (and a model) could not hold it
                raise GroupDefinitionError(
                    f"a group column's name has {len(c):,} characters; the limit is {MAX_TEXT:,}"
                )
        combos = [
            tuple(conds)
            for r in range(1, min(max_order, len(per_col)) + 1)
            for combo in itertools.combinations(range(len(per_col)), r)
            for conds in itertools.product(*(per_col[i] for i in combo))
        ]
        names = unique_names([" & ".join(c.label() for c in conds) for conds in combos], combos)
        return cls([Group(name, conds) for name, conds in zip(names, combos)])

    @classmethod
    def coerce(cls, groups) -> GroupSet:
        """A GroupSet from None (the whole population only), a GroupSet, or group JSON (text or parsed)."""
        if groups is None:
            return cls([])
        if isinstance(groups, GroupSet):
            return groups
        return cls.from_json(groups)

    def __add__(self, other: GroupSet) -> GroupSet:
        return GroupSet(list(self.groups) + [g for g in other.groups if not g.is_everything])

    # ---- evaluation ------------------------------------------------------------------------------
    @property
    def names(self) -> list:
        return [g.name for g in self.groups]

    def __len__(self) -> int:
        return len(self.groups)

    def columns(self) -> set:
        return set().union(*(g.columns() for g in self.groups))

    def text_columns(self) -> set:
        """Columns some group compares with text that reads as a number but is an identifier ("01"): a table
        meant for this model must have them as text (a CSV reader would turn "01" into 1)."""
        out = set()
        for g in self.groups:
            for c in list(g.where) + [c for term in g.any for c in term]:
                vals = c.values if c.op in ("in", "not in") else (c.value,)
                if any(zero_led(v) for v in vals or ()):
                    out.add(c.column)
        return out

    def unlisted_values(self, table, max_examples: int = 3) -> list[tuple[str, int, list]]:
        """Columns whose groups list values one by one (only ``==`` / ``in`` conditions on them, at least two
        values, as ``from_columns`` builds them) and the rows of ``table`` whose value none of them lists: such
        rows (a category new since the fit) get no correction from that column's groups. Returns (column, rows,
        a few of the values) for each such column; missing values are not counted."""
        by_col: dict = {}
        for g in self.groups:
            for c in list(g.where) + [c for term in g.any for c in term]:
                by_col.setdefault(c.column, []).append(c)
        out = []
        columns: dict = {}
        for col in sorted(by_col):
            conds = by_col[col]
            if any(c.op not in ("==", "in") for c in conds):
                continue
            listed = {c.value for c in conds if c.op == "=="} | {v for c in conds if c.op == "in" for v in c.values}
            if len(listed) < 2:
                continue
            arr = columns[col] = table_column(table, col)
            hit = np.zeros(arr.shape[0], dtype=bool)
            for c in {(c.op, c.value, c.values): c for c in conds}.values():
                hit |= c.mask(table, columns)
            present = ~np.isnan(arr) if arr.dtype.kind == "f" else arr != None  # noqa: E711 (elementwise: None is missing text)
            miss = np.flatnonzero(~hit & present)
            if miss.size:
                seen = list(dict.fromkeys(format_value(v) for v in arr[miss[:10_000]]))
                out.append((col, int(miss.size), seen[:max_examples]))
        return out

    def evaluate(self, table, n: int | None = None) -> Membership:
        """Membership of the table's rows. Condition masks are computed once and shared by the groups."""
        if n is None:
            n = len(next(iter(table.values()))) if isinstance(table, dict) else len(table)
        cache: dict = {}
        columns: dict = {}
        indptr = [0]
        row_dtype = np.int32 if n < 2**31 else np.int64  # half the memory of the (row, group) pairs
        chunks = []
        for g in self.groups:
            m = np.ones(n, dtype=bool)
            for c in g.where:
                key = (c.column, c.op, c.value, c.values, c.lo, c.hi)
                if key not in cache:
                    cache[key] = c.mask(table, columns)
                m &= cache[key]
            if g.any:
                hit = np.zeros(n, dtype=bool)
                for term in g.any:
                    t = np.ones(n, dtype=bool)
                    for c in term:
                        key = (c.column, c.op, c.value, c.values, c.lo, c.hi)
                        if key not in cache:
                            cache[key] = c.mask(table, columns)
                        t &= cache[key]
                    hit |= t
                m &= hit
            idx = np.flatnonzero(m).astype(row_dtype)
            chunks.append(idx)
            indptr.append(indptr[-1] + idx.size)
        rows = np.concatenate(chunks) if chunks else np.zeros(0, row_dtype)
        return Membership(n, self.names, np.asarray(indptr, dtype=np.int64), rows)

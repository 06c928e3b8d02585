"""Named, possibly overlapping groups defined by conditions on columns, and their membership.

Why one module of ~530 lines (30 of them the grammar below): the condition grammar (:class:`Condition`,
:class:`Group`), its vectorised evaluation (:class:`Membership`) and the set a model file stores
(:class:`GroupSet`) are one data model, parsed, validated and evaluated by the same helpers; split, each part
would import the others' private helpers.

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
from collections import Counter
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import GroupDefinitionError

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

MAX_GROUPS = 5000  # more groups than this is refused: cell statistics grow as groups x buckets^2
_OPS = ("==", "!=", "in", "not in", "<", "<=", ">", ">=", "between")
_NAME_RE = re.compile(r"^[^\x00-\x1f]{1,200}$")


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def is_numeric_column(col: np.ndarray) -> bool:
    return col.dtype.kind in "biuf"


def table_column(table, name: str) -> np.ndarray:
    """The column as float (numeric and boolean columns) or as an object array of text / None."""
    try:
        col = table[name]
    except (KeyError, IndexError, TypeError):
        cols = list(table.keys()) if hasattr(table, "keys") else []
        raise GroupDefinitionError(
            f"group column '{name}' is not in the data (columns: {', '.join(map(str, cols[:30]))})"
        ) from None
    arr = np.asarray(col)
    if arr.dtype.kind in "biuf":
        return arr.astype(float)
    # Strings, pandas StringDtype, categoricals, mixed objects: compare as text; missing stays missing.
    import pandas as pd  # table-facing edge: pandas' notion of "missing" covers None, NaN, pd.NA, NaT

    ser = pd.Series(col) if not isinstance(col, pd.Series) else col
    if isinstance(ser.dtype, pd.CategoricalDtype):
        ser = ser.astype(object)
    miss = ser.isna().to_numpy()
    out = np.array(ser.to_numpy(dtype=object, na_value=None), dtype=object, copy=True)
    if not pd.api.types.is_string_dtype(ser.dtype) or ser.dtype == object:
        # mixed objects (numbers and text): compare everything as text, numbers formatted like group labels
        nonstr = ~miss & ~np.frompyfunc(lambda v: isinstance(v, str), 1, 1)(out).astype(bool)
        if nonstr.any():
            out[nonstr] = [format_value(v) for v in out[nonstr]]
    out[miss] = None
    return out


def missing_mask(arr: np.ndarray) -> np.ndarray:
    if is_numeric_column(arr):
        return np.isnan(arr)
    return np.equal(arr, None)  # type: ignore[call-overload]  # elementwise "is None" of an object array


def _zero_led(v) -> bool:
    """Text that reads as a number but is an identifier: a leading zero before another digit ("01", "-007")."""
    if not isinstance(v, str):
        return False
    t = v.strip().lstrip("+-")
    if len(t) < 2 or t[0] != "0" or not t[1].isdigit():
        return False
    try:
        float(t)
    except ValueError:
        return False
    return True


def format_value(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, float):
        out = f"{v:.4g}"
        if "e" in out and 1e4 <= abs(v) < 1e15:
            # a cut of 10075.5 read "1.008e+04" next to its neighbour "10152": the digits up to one decimal
            out = f"{v:.{math.floor(math.log10(abs(v))) + 2}g}"
        return out
    return str(v)


@dataclass(frozen=True)
class Condition:
    column: str
    op: str
    value: object = None  # for ==, !=, <, <=, >, >=
    values: tuple = ()  # for in / not in
    lo: float | None = None  # for between: lo <= x < hi
    hi: float | None = None

    # ---- parsing ---------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d, where: str = "condition") -> "Condition":
        if not isinstance(d, dict):
            raise GroupDefinitionError(f"{where}: a condition must be a JSON object, got {type(d).__name__}")
        unknown = set(d) - {"column", "op", "value", "values", "lo", "hi"}
        if unknown:
            raise GroupDefinitionError(f"{where}: unknown key(s) {sorted(unknown)}")
        col, op = d.get("column"), d.get("op", "==")
        if not isinstance(col, str) or not col:
            raise GroupDefinitionError(f"{where}: 'column' must be a non-empty string")
        if op not in _OPS:
            raise GroupDefinitionError(f"{where}: unknown op {op!r}; use one of {', '.join(_OPS)}")

        def scalar(v, key):
            if v is None or isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise GroupDefinitionError(f"{where}: '{key}' must be a string or a number, got {v!r}")
            if isinstance(v, float) and not math.isfinite(v):
                raise GroupDefinitionError(f"{where}: '{key}' must be finite")
            return v

        if op in ("in", "not in"):
            vals = d.get("values")
            if not isinstance(vals, list) or not vals:
                raise GroupDefinitionError(f"{where}: op '{op}' needs a non-empty list 'values'")
            if len(vals) > MAX_IN_VALUES:
                raise GroupDefinitionError(
                    f"{where}: op '{op}' lists {len(vals):,} values; the limit is {MAX_IN_VALUES:,} (group them "
                    "into a column of their own, or use 'between')"
                )
            return cls(col, op, values=tuple(scalar(v, "values") for v in vals))
        if op == "between":
            lo, hi = d.get("lo"), d.get("hi")
            for key, v in (("lo", lo), ("hi", hi)):
                if v is not None and (not _is_number(v) or not math.isfinite(v)):
                    raise GroupDefinitionError(f"{where}: '{key}' must be a finite number or null")
            if lo is None and hi is None:
                raise GroupDefinitionError(f"{where}: 'between' needs 'lo' or 'hi'")
            if lo is not None and hi is not None and not lo < hi:
                raise GroupDefinitionError(f"{where}: 'between' needs lo < hi, got [{lo}, {hi})")
            return cls(col, op, lo=lo, hi=hi)
        v = scalar(d.get("value"), "value")
        if op in ("<", "<=", ">", ">=") and not _is_number(v):
            raise GroupDefinitionError(f"{where}: op '{op}' needs a numeric 'value', got {v!r}")
        return cls(col, op, value=v)

    def to_dict(self) -> dict:
        d: dict = {"column": self.column, "op": self.op}
        if self.op in ("in", "not in"):
            d["values"] = list(self.values)
        elif self.op == "between":
            d["lo"], d["hi"] = self.lo, self.hi
        else:
            d["value"] = self.value
        return d

    def label(self) -> str:
        if self.op == "==":
            return f"{self.column}={format_value(self.value)}"
        if self.op in ("in", "not in"):
            return f"{self.column} {self.op} {{{', '.join(format_value(v) for v in self.values)}}}"
        if self.op == "between":
            # the open ends as inequalities ("age < 36", not "age in [-inf, 36)")
            if self.lo is None and self.hi is None:
                return f"{self.column} in [-inf, inf)"
            if self.lo is None:
                return f"{self.column} < {format_value(self.hi)}"
            if self.hi is None:
                return f"{self.column} >= {format_value(self.lo)}"
            return f"{self.column} in [{format_value(self.lo)}, {format_value(self.hi)})"
        return f"{self.column}{self.op}{format_value(self.value)}"

    # ---- evaluation ------------------------------------------------------------------------------
    def _coerce(self, arr: np.ndarray, v):
        """The value in the column's terms: numbers for numeric columns, text for text columns."""
        if is_numeric_column(arr):
            if _is_number(v):
                return float(v)
            if _zero_led(v):
                # "01" and "1" are different groups of a text column but one number: matching them as numbers
                # would silently merge groups (a model fitted on a Parquet file where the column was text,
                # applied to a CSV that pandas read as numbers)
                raise GroupDefinitionError(
                    f"column '{self.column}' holds numbers here, but the group compares it with the text {v!r}, "
                    f"which as a number equals {float(v):g} and would merge with other values: read the column "
                    f"as text (the mmc command line does this for such columns; in Python, e.g. "
                    f"pd.read_csv(..., dtype={{'{self.column}': str}}))"
                )
            try:
                return float(v)
            except (TypeError, ValueError):
                raise GroupDefinitionError(
                    f"column '{self.column}' is numeric but the group compares it with the text {v!r}"
                ) from None
        return format_value(v) if _is_number(v) else v

    def mask(self, table, columns: dict | None = None) -> np.ndarray:
        if columns is None:
            columns = {}
        if self.column not in columns:
            columns[self.column] = table_column(table, self.column)
        arr = columns[self.column]
        numeric = is_numeric_column(arr)
        if self.op == "between":
            if not numeric:
                raise GroupDefinitionError(f"column '{self.column}' is not numeric; 'between' needs numbers")
            with np.errstate(invalid="ignore"):
                m = np.ones(arr.shape, bool)
                if self.lo is not None:
                    m &= arr >= self.lo
                if self.hi is not None:
                    m &= arr < self.hi
            return m
        if self.op in ("<", "<=", ">", ">="):
            if not numeric:
                raise GroupDefinitionError(f"column '{self.column}' is not numeric; '{self.op}' needs numbers")
            v = float(self.value)  # type: ignore[arg-type]  # a number: checked in from_dict
            with np.errstate(invalid="ignore"):
                return {"<": arr < v, "<=": arr <= v, ">": arr > v, ">=": arr >= v}[self.op]
        if self.op in ("==", "!="):
            v = self._coerce(arr, self.value)
            eq = arr == v
            eq = np.asarray(eq, dtype=bool)
            return eq if self.op == "==" else ~eq
        vals = [self._coerce(arr, v) for v in self.values]
        m = np.isin(arr, np.array(vals, dtype=arr.dtype if numeric else object))
        return m if self.op == "in" else ~m


# Disjunction extension (discovered groups): "any": [[cond, ...], ...] holds when at least one inner list
# holds entirely; a group is its "where" conjunction AND its "any" disjunction.
MAX_ANY_TERMS, MAX_TERM_CONDITIONS = 64, 16
# Descriptive fields `mmc discover` writes beside a group; read and ignored (they never change membership).
# descriptive fields a group may carry (written by `mmc discover`, read back and kept, never evaluated)
GROUP_INFO_KEYS = ("kind", "count", "mass", "mean_residual", "moment_error", "p_value", "region", "violation")
_INFO_KEYS = set(GROUP_INFO_KEYS)


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
MAX_NAME = 200
MAX_IN_VALUES = 10_000  # values of one 'in' condition (2,000,000 took two minutes to evaluate)
MAX_GROUPS_FILE_BYTES = 20 * 1024 * 1024  # a groups file of 5,000 discovered groups takes about 5 MB
MAX_TEXT = 10_000  # characters of a column name or a text value in a group's condition (groups.schema.json)


def loadable_name(text: str) -> str:
    """A name every loader reads back, made from any text (a data value, a discovered rule): control characters
    written as escapes ("\\n", "\\x00"), bidirectional controls as their code ("[U+202E]"), and past MAX_NAME
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
        elif ch in _BIDI:
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
    """:func:`loadable_name` of each text, kept apart: texts that give one name (a value "a\nb" and a value
    "a\\nb" both read ``a\nb``; column "a=b" value "c" and column "a" value "b=c" both read ``a=b=c``) each get
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
    def from_dict(cls, d, where: str = "group") -> "Group":
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
                or _is_number(v)
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


@dataclass
class Membership:
    """Which rows belong to which group, in compressed form.

    ``rows[indptr[g]:indptr[g+1]]`` are the (sorted) row indices of group g. The row-major view
    (``row_indptr``, ``row_groups``) is built on first use; it lets an update touching rows R refresh
    exactly the (row, group) pairs of R.
    """

    n: int
    names: list
    indptr: np.ndarray
    rows: np.ndarray
    _row_indptr: np.ndarray | None = field(default=None, repr=False)
    _row_groups: np.ndarray | None = field(default=None, repr=False)
    _row_ids: np.ndarray | None = field(default=None, repr=False)
    _row_counts: np.ndarray | None = field(default=None, repr=False)
    _layers: np.ndarray | None = field(default=None, repr=False)
    _layers_not_by_position: bool = field(default=False, repr=False)
    _sums: Any = field(default=None, repr=False)

    @property
    def n_groups(self) -> int:
        return len(self.names)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.indptr)

    def group_rows(self, g: int) -> np.ndarray:
        return self.rows[self.indptr[g] : self.indptr[g + 1]]

    def sums(self):
        """The :class:`~mmc_core.sums.MembershipSums` of this membership, built once (the signatures behind
        it cost a sort of all (row, group) pairs) and shared by the descent, the audit and the intervals."""
        if self._sums is None:
            from .sums import MembershipSums

            self._sums = MembershipSums(self)
        return self._sums

    def pair_groups(self, dtype=np.int64) -> np.ndarray:
        """Group id of each stored (group, row) pair, aligned with ``rows`` (``dtype=None``: the narrowest type,
        :meth:`group_dtype`, for storage; cast before arithmetic on the ids)."""
        return np.repeat(np.arange(self.n_groups, dtype=dtype or self.group_dtype()), self.sizes)

    def group_dtype(self) -> type[np.integer]:
        """The narrowest type holding every group id: 1 byte a (row, group) pair with at most 256 groups. Arrays of
        this type are only indexed with or cast (``np.multiply(ids, nc, dtype=np.int64)``), never multiplied in
        place: ``uint8 * int`` wraps around."""
        return np.uint8 if self.n_groups <= 256 else np.uint16 if self.n_groups <= 65536 else np.int32

    def _row_major(self) -> tuple[np.ndarray, np.ndarray]:
        """(row_indptr, row_groups): the pairs ordered by row, built once on first use."""
        if self._row_indptr is None or self._row_groups is None:
            order = np.argsort(self.rows, kind="stable")
            self._row_groups = np.repeat(np.arange(self.n_groups, dtype=self.group_dtype()), self.sizes)[order]
            del order
            counts = np.bincount(self.rows, minlength=self.n)
            self._row_indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return self._row_indptr, self._row_groups

    def release_row_major(self):
        """Drop the row-major view (rebuilt on next use): 12 bytes a pair that sums by signature never need."""
        self._row_indptr = self._row_groups = self._row_ids = self._row_counts = None

    def pairs_for_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows R (distinct), all (position in R, group) pairs with R[position] in group."""
        indptr, row_groups = self._row_major()
        if rows.size * 4 > self.n:
            # Many rows: one masked pass over all pairs beats gathering row by row.
            if self._row_ids is None:
                self._row_ids = np.repeat(np.arange(self.n, dtype=np.int32), np.diff(indptr))
            row_ids = self._row_ids
            inside = np.zeros(self.n, dtype=bool)
            inside[rows] = True
            sel = inside[row_ids]
            pos = np.empty(self.n, dtype=np.int64)
            pos[rows] = np.arange(rows.size)
            return pos[row_ids[sel]], row_groups[sel]
        starts = indptr[rows]
        counts = indptr[rows + 1] - starts
        total = int(counts.sum())
        local = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        return local, row_groups[np.arange(total, dtype=np.int64) + offsets]

    def groups_of_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows R (distinct, increasing): (the number of groups of each row of R, the group of each (row, group)
        pair in row-major order). The pairs are those of :meth:`pairs_for_rows`, in the same order; a per-row
        value reaches its pairs by ``np.repeat(value, counts)``, a sequential copy instead of a gather."""
        indptr, row_groups = self._row_major()
        if self._row_counts is None:
            self._row_counts = np.diff(indptr).astype(np.int32)
        all_counts = self._row_counts
        counts = all_counts[rows]
        if rows.size * 4 > self.n:
            # Many rows: one sequential masked pass over the row-major pairs beats gathering row by row.
            inside = np.zeros(self.n, dtype=bool)
            inside[rows] = True
            return counts, row_groups[np.repeat(inside, all_counts)]
        starts = indptr[rows]
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        offsets += np.arange(offsets.size, dtype=np.int64)
        return counts, row_groups[offsets]

    def layers(self, first_fit: bool = True) -> np.ndarray | None:
        """Groups in layers: (L, n) small ints, the group of each row in each layer (``n_groups`` where the row has
        none), every group in exactly one layer, so a row has at most one group per layer. Groups built from
        columns fill few layers (the whole population; each column's values; each pair of columns' values).
        A sum per layer over the rows, with each row's own weight, adds every (group, cell) over the same rows
        in the same (row) order as over the pairs, without a weight per pair. None when the layers would be
        mostly empty (then pairs are cheaper).

        Built once: the layer of a group is its position among each row's groups when that position is the
        same in all its rows (groups from columns without missing values; sequential passes over the row-major
        pairs), else (with ``first_fit``) each group goes, in group order, to the lowest layer none of its rows
        uses yet (a bit mask per row, a loop over groups, at most 63 layers)."""
        if self._layers is None and not self._layers_not_by_position:
            self._layers = self._layers_by_position()
            self._layers_not_by_position = self._layers is None
        if self._layers is None and first_fit:
            self._layers = self._layers_first_fit()
        return self._layers if self._layers is not None and self._layers.size else None

    def _layer_dtype(self) -> type[np.integer]:
        """The narrowest unsigned type for group ids and the 'no group' id: 1 byte a (layer, row) with < 255
        groups."""
        return np.uint8 if self.n_groups < 255 else np.uint16 if self.n_groups < 65535 else np.int32

    def _layers_by_position(self) -> np.ndarray | None:
        indptr, row_groups = self._row_major()
        if self._row_counts is None:
            self._row_counts = np.diff(indptr).astype(np.int32)
        counts = self._row_counts
        n_layers = int(counts.max(initial=0))
        if self.n == 0 or self.n_groups == 0 or n_layers * self.n > 2 * self.rows.size:
            return np.zeros((0, self.n), dtype=np.int32)
        out: np.ndarray = np.full((n_layers, self.n), self.n_groups, dtype=self._layer_dtype())
        seen = np.zeros(self.n_groups, dtype=bool)
        for j in range(n_layers):
            has = np.flatnonzero(counts > j)
            g = row_groups[indptr[has] + j]
            out[j, has] = g
            present = np.bincount(g, minlength=self.n_groups) > 0
            if (seen & present).any():  # a group at two positions: no layers by position
                return None
            seen |= present
        return out

    def _layers_first_fit(self) -> np.ndarray:
        none = np.zeros((0, self.n), dtype=np.int32)
        if self.n == 0 or self.n_groups == 0:
            return none
        used = np.zeros(self.n, dtype=np.uint64)
        layer_of = np.zeros(self.n_groups, dtype=np.int64)
        for g in range(self.n_groups):
            rows = self.group_rows(g)
            taken = int(np.bitwise_or.reduce(used[rows])) if rows.size else 0
            free = (~taken & (taken + 1)).bit_length() - 1  # the lowest clear bit
            if free >= 63:
                return none
            layer_of[g] = free
            used[rows] |= np.uint64(1 << free)
        del used
        n_layers = int(layer_of.max()) + 1
        if n_layers * self.n > 2 * self.rows.size:
            return none
        out: np.ndarray = np.full((n_layers, self.n), self.n_groups, dtype=self._layer_dtype())
        for g in range(self.n_groups):
            out[layer_of[g], self.group_rows(g)] = g
        return out

    def signatures(self) -> tuple[np.ndarray, int]:
        """Signature id of each row: rows with the same set of groups share an id.

        A row's signature is hashed as the wrapping sum of random 64-bit keys of its groups; two different
        group sets collide with probability about (number of signatures)^2 / 2^64.
        """
        indptr, row_groups = self._row_major()
        seeds = np.random.default_rng(0x5EED).integers(1, 2**63 - 1, size=max(self.n_groups, 1), dtype=np.int64)
        keys = seeds.astype(np.uint64) * np.uint64(2) + np.uint64(1)
        h = np.zeros(self.n, dtype=np.uint64)
        counts = np.diff(indptr)
        nonempty = np.flatnonzero(counts > 0)
        if nonempty.size:
            with np.errstate(over="ignore"):
                h[nonempty] = np.add.reduceat(keys[row_groups], indptr[nonempty])
        _, inverse = np.unique(h, return_inverse=True)
        sig = inverse.ravel().astype(np.int64)
        return sig, int(sig.max()) + 1 if sig.size else 0

    def signature_matrix(self, sig: np.ndarray, n_sig: int) -> np.ndarray:
        """Dense (signatures x groups) 0/1 matrix, from one representative row per signature."""
        rep = np.zeros(n_sig, dtype=np.int64)
        rep[sig[::-1]] = np.arange(sig.size - 1, -1, -1)
        A = np.zeros((n_sig, self.n_groups))
        indptr, row_groups = self._row_major()
        starts, ends = indptr[rep], indptr[rep + 1]
        counts = ends - starts
        sig_ids = np.repeat(np.arange(n_sig), counts)
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        A[sig_ids, row_groups[np.arange(int(counts.sum())) + offsets]] = 1.0
        return A

    def to_dense(self) -> np.ndarray:
        """Boolean (n, |G|) matrix; for tests and small tables."""
        out = np.zeros((self.n, self.n_groups), dtype=bool)
        out[self.rows, self.pair_groups()] = True
        return out


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

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def from_json(cls, obj, where: str = "group definitions", path: str = "", schema: bool = True) -> "GroupSet":
        """Groups from a groups file's JSON: text or bytes (read through :mod:`mmc_core.jsonfile`: size, depth and
        number limits), or the parsed object. The format and version are checked first, then the number of groups
        (before anything is parsed one by one), then the schema (mmc_core/schemas/groups.schema.json: types,
        limits, the first failure named by its key path), then each group's rules. Errors read "{where}: at
        {key path}: ..."; ``path`` is the key path of the groups inside an enclosing document ("groups" in a model
        file, whose schema has been checked already: ``schema=False``)."""
        if isinstance(obj, (str, bytes, bytearray)):
            from .jsonfile import loads

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
            from .schemas import check

            check(obj, "groups", where, GroupDefinitionError)
        at = ".".join(p for p in (path, "groups" if isinstance(obj, dict) else "") if p)
        groups = [Group.from_dict(g, f"{where}: at {at}[{i}]") for i, g in enumerate(listed)]
        try:
            return cls([g for g in groups if not (g.name == "all" and g.is_everything)])
        except GroupDefinitionError as e:
            raise GroupDefinitionError(f"{where}: {e}") from None

    @classmethod
    def from_file(cls, path) -> "GroupSet":
        """Groups from the groups file ``path`` (``--groups``): refused from its size before it is read when over
        MAX_GROUPS_FILE_BYTES, then :meth:`from_json`, errors naming the file."""
        import os

        from .jsonfile import read_file

        text = read_file(path, GroupDefinitionError, kind="groups file", max_bytes=MAX_GROUPS_FILE_BYTES)
        return cls.from_json(text, os.fspath(path))

    def to_json(self) -> dict:
        return {"format": "mmc-groups", "version": 1, "groups": [g.to_dict() for g in self.groups]}

    @classmethod
    def from_columns(
        cls, table, columns, max_order: int = 1, max_values: int = 10, conditions: dict | None = None
    ) -> "GroupSet":
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
    def coerce(cls, groups) -> "GroupSet":
        """A GroupSet from None (the whole population only), a GroupSet, or group JSON (text or parsed)."""
        if groups is None:
            return cls([])
        if isinstance(groups, GroupSet):
            return groups
        return cls.from_json(groups)

    def __add__(self, other: "GroupSet") -> "GroupSet":
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
                if any(_zero_led(v) for v in vals or ()):
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

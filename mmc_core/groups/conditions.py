"""One condition on one column (:class:`Condition`) and the column handling it shares with the groups: a table's
column as float or text (:func:`table_column`), what counts as missing, and how values are written in names.

The grammar of a condition is in :mod:`mmc_core.groups.group_set`; this module parses, labels and evaluates one. Apart so
that the groups and the learned rules (:mod:`mmc_core.discovery.oracle`) build on one small piece.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..common.errors import GroupDefinitionError

__all__ = [
    "MAX_IN_VALUES",
    "Condition",
    "format_value",
    "is_number",
    "is_numeric_column",
    "missing_mask",
    "table_column",
    "zero_led",
]

_OPS = ("==", "!=", "in", "not in", "<", "<=", ">", ">=", "between")
MAX_IN_VALUES = 10_000  # values of one 'in' condition (2,000,000 took two minutes to evaluate)


def is_number(v) -> bool:
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


def zero_led(v) -> bool:
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
    def from_dict(cls, d, where: str = "condition") -> Condition:
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
                if v is not None and (not is_number(v) or not math.isfinite(v)):
                    raise GroupDefinitionError(f"{where}: '{key}' must be a finite number or null")
            if lo is None and hi is None:
                raise GroupDefinitionError(f"{where}: 'between' needs 'lo' or 'hi'")
            if lo is not None and hi is not None and not lo < hi:
                raise GroupDefinitionError(f"{where}: 'between' needs lo < hi, got [{lo}, {hi})")
            return cls(col, op, lo=lo, hi=hi)
        v = scalar(d.get("value"), "value")
        if op in ("<", "<=", ">", ">=") and not is_number(v):
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
            if is_number(v):
                return float(v)
            if zero_led(v):
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
        return format_value(v) if is_number(v) else v

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

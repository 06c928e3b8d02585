"""Reading user tables and writing outputs safely (the table-facing edge).

Every problem is raised as :class:`mmc_core.errors.DataError` with a message naming the file or column.
Outputs are written to a temporary file in the target folder and renamed, so a failure never leaves a
partial file; CSV cells that a spreadsheet would run as a formula are escaped, and a cell holding a line break
is quoted, so every exported row reads back as one row (:func:`csv_bytes`, the one CSV writer).
"""

from __future__ import annotations

import csv
import io
import os
import re

import numpy as np
import pandas as pd

from mmc_core.errors import DataError
from mmc_core.model import atomic_write_bytes

__all__ = [
    "read_table",
    "read_table_bytes",
    "numeric_column",
    "write_csv",
    "write_bytes",
    "escape_formulas",
    "MAX_ROWS",
    "MAX_COLUMNS",
    "MAX_FILE_BYTES",
]

MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_ROWS = 5_000_000
MAX_COLUMNS = 2_000
# a spreadsheet trims leading blanks and line breaks before it looks for a formula, and OWASP lists a leading tab
# or carriage return as a formula start of its own
_FORMULA = re.compile(r"^(?:[\t\r]|\s*[=+\-@])")
# RFC 4180 line ends: Python's csv module quotes a field only for the characters of its line terminator (besides
# the delimiter and the quote), so with "\n" alone a bare "\r" went out unquoted and split the row on reading; the
# same bytes on every platform, too (pandas' default terminator is os.linesep)
CSV_LINE_END = "\r\n"


# every number read back as the double it was written from: the default parser before pandas 3 is off by an
# ulp on a fifth of them (pandas 1.5: an exported base prediction then re-predicted differently at bucket
# edges); pandas 3 parses exactly by default and deprecates the option
CSV_EXACT = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def _check_shape(df: pd.DataFrame, name: str) -> pd.DataFrame:
    if df.shape[1] > MAX_COLUMNS:
        raise DataError(f"{name} has {df.shape[1]} columns; the limit is {MAX_COLUMNS}")
    if df.shape[0] > MAX_ROWS:
        raise DataError(f"{name} has {df.shape[0]} rows; the limit is {MAX_ROWS:,}")
    if df.shape[0] == 0:
        raise DataError(f"{name} has a header but no data rows")
    cols = [str(c) for c in df.columns]
    if len(cols) == 1 and any(d in cols[0] for d in (";", "\t", "|")):
        raise DataError(
            f"{name} has a single column '{cols[0][:60]}': is it delimited by ';' or tabs? Save it as comma-separated CSV"
        )
    return df


_ZERO_LED = re.compile(r"^\s*[+-]?0\d")


def _codes_as_text(df: pd.DataFrame, text: str, header: list, na: list) -> pd.DataFrame:
    """Integer columns whose text tells apart values that are one number ("01" and "1": site or product codes)
    back to text: read as numbers they would be one value and one group. Zero-padded columns whose every number
    is written one way (months 01-12, hours 00-23) stay numbers, so that numeric groups (month < 6) keep
    working. Only when the file has a zero-led token at all (a quick scan), and then only its integer columns
    are read again, as text."""
    if not re.search(r'(?:^|[,\n])\s*"?[+-]?0\d', text):
        return df
    ints = [
        c
        for c in df.columns
        if pd.api.types.is_integer_dtype(df[c])
        or (pd.api.types.is_float_dtype(df[c]) and bool(np.all(np.mod(df[c].dropna().to_numpy(), 1) == 0)))
    ]
    if not ints:
        return df
    raw_names = [h for h in header if h.strip() in set(ints)]
    raw = pd.read_csv(io.StringIO(text), usecols=raw_names, dtype=str, na_values=na, keep_default_na=True)
    raw.columns = [str(c).strip() for c in raw.columns]
    for c in ints:
        col = raw[c].dropna()
        if col.str.match(_ZERO_LED).any() and col.str.strip().nunique() > df[c].dropna().nunique():
            df[c] = raw[c].to_numpy(dtype=object)
    return df


def read_table_bytes(data: bytes, name: str, text_columns=()) -> pd.DataFrame:
    """Parse CSV or Parquet bytes (chosen by the file name's ending). ``text_columns``: CSV columns read as
    text, not numbers (a model's groups may name "01" and "1" apart; see GroupSet.text_columns). Integer
    columns written with leading zeros are read as text too (:func:`_codes_as_text`)."""
    if len(data) > MAX_FILE_BYTES:
        raise DataError(f"{name} is {len(data) / 1e6:.0f} MB; the limit is {MAX_FILE_BYTES / 1e6:.0f} MB")
    if len(data) == 0 or not data.strip():
        raise DataError(f"{name} is empty")
    if name.lower().endswith((".parquet", ".pq")):
        try:
            df = pd.read_parquet(io.BytesIO(data))
        except Exception as e:  # noqa: BLE001 - pyarrow raises many types for corrupt files
            raise DataError(f"{name} is not a readable Parquet file ({type(e).__name__})") from None
        df.columns = [str(c) for c in df.columns]
        return _check_shape(df, name)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{name} is not UTF-8 text (bad byte at position {e.start}); save it as UTF-8 CSV") from None
    header = next(csv.reader(io.StringIO(text.splitlines()[0] if text.splitlines() else "")), [])
    stripped = [h.strip() for h in header]
    dups = sorted({h for h in stripped if stripped.count(h) > 1})
    if dups:
        raise DataError(f"{name} has duplicate column name(s): {', '.join(dups[:5])}")
    if any(h == "" for h in stripped) and len(stripped) > 1:
        raise DataError(f"{name} has an empty column name (column {stripped.index('') + 1})")
    na = ["", "NA", "NaN", "nan", "."]
    try:
        df = pd.read_csv(
            io.StringIO(text),
            na_values=na,
            keep_default_na=True,
            low_memory=False,
            dtype={h: str for h in header if h.strip() in set(text_columns)} or None,
            **CSV_EXACT,
        )
    except pd.errors.EmptyDataError:
        raise DataError(f"{name} is empty") from None
    except pd.errors.ParserError as e:
        raise DataError(f"{name} is not a well-formed CSV: {str(e).splitlines()[0]}") from None
    df.columns = [str(c).strip() for c in df.columns]
    df = _codes_as_text(df, text, header, na)
    return _check_shape(df, name)


def read_table(path, text_columns=()) -> pd.DataFrame:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"data file not found: {path}")
    if os.path.isdir(path):
        raise DataError(f"{path} is a folder, not a data file")
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise DataError(f"{path} is {size / 1e6:.0f} MB; the limit is {MAX_FILE_BYTES / 1e6:.0f} MB")
    with open(path, "rb") as f:
        return read_table_bytes(f.read(), os.path.basename(path), text_columns)


def numeric_column(df: pd.DataFrame, col: str, role: str = "column") -> np.ndarray:
    """A finite float column or a DataError naming it."""
    if col not in df.columns:
        raise DataError(f"{role} '{col}' is not in the data (columns: {', '.join(map(str, df.columns[:30]))})")
    s = df[col]
    if not (pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s)):
        conv = pd.to_numeric(s, errors="coerce")
        bad = conv.isna() & s.notna()
        if bad.any():
            example = s[bad].iloc[0]
            # a text column throughout is the wrong column, not a few cells to fix or drop
            fix = (
                "it is a text column: choose a numeric one"
                if int(bad.sum()) == int(s.notna().sum())
                else "fix them in the file or drop those rows first"
            )
            raise DataError(
                f"{role} '{col}' is not numeric: {int(bad.sum())} cell(s) are not numbers (e.g. {str(example)[:40]!r} "
                f"in row {int(np.flatnonzero(bad.to_numpy())[0]) + 1}); {fix}"
            )
        s = conv
    arr = s.to_numpy(dtype=float, na_value=np.nan)
    miss = ~np.isfinite(arr)
    if miss.all():
        raise DataError(f"{role} '{col}' has no usable values (all missing)")
    if miss.any():
        raise DataError(
            f"{role} '{col}' has {int(miss.sum())} missing or infinite value(s) (first in data row {int(np.flatnonzero(miss)[0]) + 1}); drop or fill them first"
        )
    return arr


def _formula_cells(s: pd.Series) -> np.ndarray:
    """Which cells of ``s`` are text a spreadsheet would run as a formula (non-text cells never are)."""
    try:
        hits = s.str.match(_FORMULA.pattern, na=False)
    except AttributeError:  # an object column without text cells: pandas refuses .str
        return np.zeros(len(s), dtype=bool)
    # a text accessor on mixed cells leaves the non-text ones missing
    return hits.fillna(False).to_numpy(dtype=bool)


def escape_formulas(df: pd.DataFrame) -> pd.DataFrame:
    """Prefix text cells and column names that start like a spreadsheet formula (after any leading blanks or line
    breaks) with a quote (CSV injection); a spreadsheet then shows the text as it is."""
    out = df.copy()
    for c in out.columns:
        s = out[c]
        if isinstance(s.dtype, pd.CategoricalDtype):  # categories are written as their text too
            s = s.astype(object)
        elif not (pd.api.types.is_string_dtype(s) or s.dtype == object):
            continue
        mask = _formula_cells(s)
        if mask.any():
            s = s.astype(object)
            s[mask] = "'" + s[mask].astype(str)
            out[c] = s
    ren = {c: "'" + c for c in out.columns if isinstance(c, str) and _FORMULA.match(c)}
    return out.rename(columns=ren)


def write_bytes(path, data: bytes):
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(folder):
        raise DataError(f"output folder does not exist: {folder}")
    atomic_write_bytes(path, data)


PARQUET_SUFFIXES = (".parquet", ".pq")


def csv_bytes(df: pd.DataFrame) -> bytes:
    """``df`` as CSV text, the one CSV writer of mmc: formula-looking cells escaped, cells with a line break quoted
    (CRLF line ends, :data:`CSV_LINE_END`), every float at full precision (the shortest text that
    reads back as the same double: re-predicting from an exported base prediction with the exported model gives
    the exported mean, also on rows whose base lies at a bucket edge; 6 or 10 digits moved such rows)."""
    return (
        escape_formulas(df)
        .to_csv(index=False, float_format=None, lineterminator=CSV_LINE_END, quoting=csv.QUOTE_MINIMAL)
        .encode("utf-8")
    )


def write_csv(df: pd.DataFrame, path):
    """The table as CSV (formula-looking cells escaped), or as Parquet when ``path`` ends in .parquet / .pq
    (a CSV under a Parquet name could not be read back)."""
    if str(path).lower().endswith(PARQUET_SUFFIXES):
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        write_bytes(path, buf.getvalue())
        return
    write_bytes(path, csv_bytes(df))

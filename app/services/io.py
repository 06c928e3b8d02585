"""Reading user tables and writing outputs safely (the table-facing edge).

Every problem is raised as :class:`mmc_core.common.errors.DataError` with a message naming the file or column.
Outputs are written to a temporary file in the target folder and renamed, so a failure never leaves a
partial file; CSV cells that a spreadsheet would run as a formula are escaped, and a cell holding a line break
is quoted, so every exported row reads back as one row (:func:`csv_bytes`, the one CSV writer).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections import Counter

import numpy as np
import pandas as pd

from mmc_core.common import DataError

from .table_write import (  # noqa: F401 - the writing half, re-exported: callers take both halves from here
    CSV_LINE_END,
    PARQUET_SUFFIXES,
    csv_bytes,
    escape_formulas,
    write_bytes,
    write_csv,
    write_csv_parts,
    write_parquet_parts,
)

__all__ = [
    "read_table",
    "read_table_bytes",
    "numeric_column",
    "write_csv",
    "write_csv_parts",
    "write_bytes",
    "escape_formulas",
    "MAX_ROWS",
    "MAX_COLUMNS",
    "MAX_FILE_BYTES",
    "MAX_TABLE_BYTES",
    "MAX_WORK_BYTES",
    "estimate_table",
    "TableEstimate",
]

MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_ROWS = 5_000_000
MAX_COLUMNS = 2_000


def _table_mb_from_env() -> int:
    try:
        mb = int(os.environ.get("MMC_MAX_TABLE_MB", "200"))
    except ValueError:
        return 200
    return mb if mb > 0 else 200


# The memory a table may take once read (its estimate from the file's metadata or a sample, checked before
# anything is read): 200 MB is 25,000,000 numeric cells, e.g. 5,000,000 rows x 5 columns. Measured peak RSS of
# `mmc fit` (in-memory engine, one group column): about 150 MB + 3.1 x the table + 190 bytes a row, so a table at
# this limit stays under 2 GB even at MAX_ROWS; a 2.3 MB Parquet file of 2.5M x 202 zeros decodes to 4 GB (it
# took fit to 11.9 GB when the limits were checked after reading). MMC_MAX_TABLE_MB raises it for a big machine.
MAX_TABLE_BYTES = _table_mb_from_env() * 10**6
# Beside its cells, every row costs working memory in the commands: measured peak RSS of `mmc audit` is about
# 150 MB + 3.1 x the table + 340 bytes a row (2.2 GB on 5M rows x 3 columns, a 6 MB file). The table and
# ROW_WORK_BYTES a row must stay under MAX_WORK_BYTES (600 MB): at most about 4M rows of 3 numeric columns, 4.4M
# of one, so that audit stays under 2 GB (1.8 GB measured at the limit).
ROW_WORK_BYTES = 128
MAX_WORK_BYTES = 3 * MAX_TABLE_BYTES
NUMERIC_CELL_BYTES = 8
# a text cell read by pandas: the pointer and a str object (49 bytes and one per ASCII character), rounded up
TEXT_CELL_BYTES = 64


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


def _codes_as_text(df: pd.DataFrame, text: str, data: bytes, header: list, na: list) -> pd.DataFrame:
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
    raw_names = [h for h in header if _column_name(h) in set(ints)]
    raw = pd.read_csv(
        io.BytesIO(data), encoding="utf-8-sig", usecols=raw_names, dtype=str, na_values=na, keep_default_na=True
    )
    raw.columns = [_column_name(str(c)) for c in raw.columns]
    for c in ints:
        col = raw[c].dropna()
        if col.str.match(_ZERO_LED).any() and col.str.strip().nunique() > df[c].dropna().nunique():
            df[c] = raw[c].to_numpy(dtype=object)
    return df


class TableEstimate:
    """What a table file holds, from its metadata (Parquet) or a sample (CSV), before it is read: ``rows`` and
    ``columns`` of the file, ``read`` the columns that would be read (None: all), and ``bytes`` the memory they
    would take as a DataFrame (an estimate: 8 bytes a numeric cell, more for text)."""

    def __init__(self, name: str, rows: int, columns: list, read, nbytes: int, exact: bool = True):
        self.name, self.rows, self.columns, self.read, self.bytes = name, int(rows), list(columns), read, int(nbytes)
        self.exact = exact  # the rows counted (Parquet metadata) or estimated (CSV: checked again once read)

    def check(self, limit: int | None = None) -> TableEstimate:
        """DataError (one line naming the file and the limit) when the table is over a stated limit."""
        limit = MAX_TABLE_BYTES if limit is None else int(limit)
        if len(self.columns) > MAX_COLUMNS:
            raise DataError(f"{self.name} has {len(self.columns)} columns; the limit is {MAX_COLUMNS}")
        if self.exact and self.rows > MAX_ROWS:
            raise DataError(f"{self.name} has {self.rows} rows; the limit is {MAX_ROWS:,}")
        if not self.exact and self.rows > 1.25 * MAX_ROWS:  # an estimate: clearly over, or checked once read
            raise DataError(f"{self.name} has about {self.rows:,} rows; the limit is {MAX_ROWS:,}")
        if self.bytes > limit:
            ncols = len(self.columns) if self.read is None else len(self.read)
            raise DataError(
                f"{self.name} would take about {_mb(self.bytes)} in memory ({self.rows:,} rows x {ncols:,} "
                f"column(s) to read); the limit is {_mb(limit)} ({limit // NUMERIC_CELL_BYTES:,} numeric cells): "
                "use fewer rows or columns"
            )
        work = self.bytes + ROW_WORK_BYTES * self.rows
        if work > MAX_WORK_BYTES:
            ncols = len(self.columns) if self.read is None else len(self.read)
            raise DataError(
                f"{self.name} has {'' if self.exact else 'about '}{self.rows:,} rows x {ncols:,} column(s) to read: "
                f"with {ROW_WORK_BYTES} bytes of working memory a row, about {_mb(work)}; the limit is "
                f"{_mb(MAX_WORK_BYTES)} (e.g. 4,000,000 rows of 3 numeric columns): use fewer rows"
            )
        return self


# The audit's memory grows with its (row, group) pairs as well as its rows: measured peak RSS of `mmc audit` and
# `mmc report` is about 150 MB + 190 bytes a row + 120 bytes a pair (3.9M rows x 4 groups, 7.8M pairs: 1.86 GB;
# 3M rows x 100 groups, 21M pairs, from a 0.1 MB Parquet file: 3.2 GB). The rows and pairs are checked against
# AUDIT_WORK_BYTES before the audit starts; it scales with MMC_MAX_TABLE_MB.
AUDIT_ROW_BYTES = 190
AUDIT_PAIR_BYTES = 120
AUDIT_WORK_BYTES = int(1.7e9 * MAX_TABLE_BYTES / 200e6)


def check_audit_size(n_rows: int, n_groups: int, n_pairs: int, what: str = "the audit") -> None:
    """DataError (one line) when an audit of ``n_rows`` rows whose groups hold ``n_pairs`` (row, group) pairs in
    all would take more memory than AUDIT_WORK_BYTES allows."""
    need = AUDIT_ROW_BYTES * int(n_rows) + AUDIT_PAIR_BYTES * int(n_pairs)
    if need > AUDIT_WORK_BYTES:
        raise DataError(
            f"{what} of {n_rows:,} rows x {n_groups:,} groups ({n_pairs:,} row-group memberships) would take about "
            f"{_mb(need)} of working memory; the limit is {_mb(AUDIT_WORK_BYTES)}: audit a sample of the rows, or "
            "a model with fewer or smaller groups"
        )


# `mmc fit` keeps the pairs in compact form (about 18 bytes a pair besides 110 a row: 3M rows x 1,080 groups,
# 93M pairs, from a 0.1 MB Parquet file, took 2.06 GB, and 25 s before its first progress line); at most
# MAX_FIT_PAIRS pairs (48M took 1.3 GB, 12 s) keep it bounded in memory and in the time before it says anything.
FIT_ROW_BYTES = 110
FIT_PAIR_BYTES = 18
MAX_FIT_PAIRS = int(60_000_000 * MAX_TABLE_BYTES / 200e6)


def check_fit_size(n_rows: int, n_groups: int, n_pairs: int, what: str = "the fit") -> None:
    """DataError (one line) when a fit of ``n_rows`` rows whose groups hold ``n_pairs`` (row, group) pairs would
    take more memory than AUDIT_WORK_BYTES, or more pairs than MAX_FIT_PAIRS. ``what`` names the work in the
    message ("the comparison")."""
    need = FIT_ROW_BYTES * int(n_rows) + FIT_PAIR_BYTES * int(n_pairs)
    if need > AUDIT_WORK_BYTES or n_pairs > MAX_FIT_PAIRS:
        raise DataError(
            f"{what} of {n_rows:,} rows x {n_groups:,} groups ({n_pairs:,} row-group memberships) is too large: the "
            f"limit is {MAX_FIT_PAIRS:,} memberships (about {_mb(AUDIT_WORK_BYTES)} of working memory): use fewer "
            "rows, a lower --max-order or fewer group columns"
        )


def _mb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{max(n / 1e6, 0.1):.0f} MB" if n >= 1e6 else f"{n / 1e6:.1f} MB"


def _is_parquet(name: str) -> bool:
    return name.lower().endswith(PARQUET_SUFFIXES)


def _wanted(names, columns):
    """The names of ``names`` to read: all (None) or those whose stripped name is in ``columns``."""
    if columns is None:
        return None
    want = set(columns)
    return [h for h in names if str(h).strip() in want]


def _parquet_estimate(data: bytes, name: str, columns=None) -> TableEstimate:
    """Rows, columns and decoded size from the Parquet footer (schema and row groups): no page is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(io.BytesIO(data))
        meta, schema = pf.metadata, pf.schema_arrow
    except Exception as e:  # noqa: BLE001 - pyarrow raises many types for corrupt files
        raise DataError(f"{name} is not a readable Parquet file ({type(e).__name__})") from None
    fields = [f for f in schema if not f.name.startswith("__index_level_")]
    names = [f.name for f in fields]
    dups = sorted(h for h, k in Counter(_invisible_stripped(n) for n in names).items() if k > 1)
    if dups:  # pyarrow writes them; reading them back failed as "not a readable Parquet file"
        raise DataError(f"{name} has duplicate column name(s): {', '.join(dups[:5])}")
    read = _wanted(names, columns)
    rows = int(meta.num_rows)
    # uncompressed bytes of each column over the row groups (text: the characters, plus their offsets)
    raw: dict[str, int] = {}
    plain: set[str] = set()  # text columns stored without a dictionary: every value its own str object
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            top = col.path_in_schema.split(".")[0]
            raw[top] = raw.get(top, 0) + max(int(col.total_uncompressed_size), 0)
            if not col.has_dictionary_page:
                plain.add(top)
    total = 0
    for f in fields:
        if read is not None and f.name not in read:
            continue
        t = f.type
        if pa.types.is_dictionary(t):  # a categorical: codes and the categories
            total += rows * NUMERIC_CELL_BYTES + 2 * raw.get(f.name, 0)
        elif (
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
        ):
            # objects (repeated values share one str) plus the Arrow column they are converted from
            total += rows * (NUMERIC_CELL_BYTES + 8) + 2 * raw.get(f.name, 0)
            if f.name in plain:
                total += rows * (TEXT_CELL_BYTES - NUMERIC_CELL_BYTES)
        elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t):
            total += rows * NUMERIC_CELL_BYTES
        else:  # decimals, lists, structs, fixed-size binaries: a Python object a cell
            total += rows * 2 * TEXT_CELL_BYTES + 2 * raw.get(f.name, 0)
    return TableEstimate(name, rows, names, read, total)


_SAMPLE = 64 * 1024
_NA = frozenset(("", "NA", "NaN", "nan", "."))


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _csv_estimate(data: bytes, name: str, header: list, columns=None) -> TableEstimate:
    """Rows and decoded size of a CSV from its size and samples: the rows from the shortest mean line length
    of windows at the start, middle and end of the file, the width of each column from parsing the first lines
    (a number takes 8 bytes, text a str object)."""
    size = len(data)
    nl = b"\n" if b"\n" in data[: 4 * _SAMPLE] or b"\r" not in data[: 4 * _SAMPLE] else b"\r"  # old Mac line ends
    first_end = data.find(nl)
    body_start = size if first_end < 0 else first_end + 1
    body = size - body_start
    mean_line = float("inf")
    if body > 0:
        for start in sorted(
            {body_start, body_start + max(body // 2 - _SAMPLE // 2, 0), max(size - _SAMPLE, body_start)}
        ):
            window = data[start : start + _SAMPLE]
            lines = window.count(nl) + (1 if start + _SAMPLE >= size and not window.endswith(nl) else 0)
            mean_line = min(mean_line, len(window) / max(lines, 1))
    rows = 0 if body <= 0 else max(1, int(round(body / mean_line)))
    read = _wanted(header, columns)
    names = [h.strip() for h in header]
    widths = {h.strip(): NUMERIC_CELL_BYTES for h in (header if read is None else read)}
    cut = data.rfind(nl, 0, body_start + _SAMPLE) if body > _SAMPLE else size
    # the first lines parsed with the csv module (pandas reads nothing before the limits are checked)
    sample = data[body_start : max(cut, body_start)].decode("utf-8", errors="replace")
    index = {h.strip(): i for i, h in enumerate(header)}
    cells: dict[str, list] = {h.strip(): [] for h in (header if read is None else read)}
    try:
        for line in csv.reader(io.StringIO(sample)):
            for c, values in cells.items():
                if index[c] < len(line):
                    values.append(line[index[c]].strip())
    except csv.Error as e:  # a bare carriage return in an unquoted cell: rows would be split where it stands
        raise DataError(f"{name} is not a well-formed CSV: {e}; a cell holding a line break must be quoted") from None
    for c, values in cells.items():
        text = [v for v in values if v not in _NA and not _is_number(v)]
        if text:
            # pandas makes one str object for repeated values of a column: the share of distinct ones
            distinct = len(set(values)) / len(values)
            per_str = TEXT_CELL_BYTES - NUMERIC_CELL_BYTES + sum(map(len, values)) / len(values)
            widths[c] = NUMERIC_CELL_BYTES + int(np.ceil(distinct * per_str))
    return TableEstimate(name, rows, names, read, rows * sum(widths.values()), exact=False)


def estimate_table(data: bytes, name: str, columns=None) -> TableEstimate:
    """The shape and memory of the table in ``data`` (CSV or Parquet by ``name``), from its metadata or a
    sample, without reading it; :meth:`TableEstimate.check` refuses it over a limit."""
    if _is_parquet(name):
        return _parquet_estimate(data, name, columns)
    data = _cr_lines(data)
    head = data[: 4 * 2**20].decode("utf-8-sig", errors="replace")
    return _csv_estimate(data, name, _header(head), columns)


def _header(text: str) -> list:
    """The column names of the CSV whose text starts with ``text``: its first record, which a quoted name with a
    line break carries past the first line (a duplicate name hidden there was missed by pandas, which renames)."""
    try:
        return next(csv.reader(io.StringIO(text)), [])
    except csv.Error as e:
        raise DataError(f"the CSV header cannot be read ({e}); check its quotes") from None


def _invisible_stripped(name: str) -> str:
    """A column name as it reads: without the blanks around it and without invisible format characters (a
    byte-order mark or zero-width space inside the header), which made "y" and "\ufeffy" two columns."""
    import unicodedata

    return "".join(c for c in name if unicodedata.category(c) != "Cf").strip()


# characters that never belong to a name: a byte-order mark inside the header (files joined after their first
# line), zero-width spaces and joiners that do not join, the soft hyphen; dropped from a CSV's column names, so
# that "\ufeffage" is the column "age" the user sees (it was "not in the data"). Joiners that shape scripts
# (U+200C, U+200D) are kept.
_NOT_IN_NAMES = dict.fromkeys(map(ord, "\ufeff\u200b\u2060\u180e\u00ad"))


def _column_name(name: str) -> str:
    """A CSV column's name as the tables use it: without the blanks around it and :data:`_NOT_IN_NAMES`."""
    return name.translate(_NOT_IN_NAMES).strip()


def _cr_lines(data: bytes) -> bytes:
    """A CSV whose lines end in a bare carriage return (classic Mac OS) with line feeds instead: the parsers read
    one line of it otherwise ("new-line character seen in unquoted field"). Only a file without any line feed:
    a bare carriage return inside a file of line feeds is a cell's line break, and refused unquoted."""
    if b"\r" in data[: 4 * 2**20] and b"\n" not in data:
        return data.replace(b"\r", b"\n")
    return data


def column_problem(s: pd.Series) -> str | None:
    """Why the column ``s`` cannot be a label, prediction or group column, or None: dates and times (their
    nanosecond counts were audited as numbers), lists, maps or bytes in its cells (a Parquet list column was a
    crash)."""
    import datetime

    if pd.api.types.is_datetime64_any_dtype(s) or pd.api.types.is_timedelta64_dtype(s):
        return f"it holds dates or times ({s.dtype}), not numbers or categories"
    if s.dtype != object:
        return None
    for v in s:
        if isinstance(v, (list, tuple, dict, set, np.ndarray, bytes, bytearray)):
            return f"its cells hold {type(v).__name__} values, not single numbers or text"
        if isinstance(v, (datetime.date, datetime.time, datetime.timedelta)):
            return "it holds dates or times, not numbers or categories"
    return None


def read_table_bytes(data: bytes, name: str, text_columns=(), columns=None, limit: int | None = None) -> pd.DataFrame:
    """Parse CSV or Parquet bytes (chosen by the file name's ending). ``text_columns``: CSV columns read as
    text, not numbers (a model's groups may name "01" and "1" apart; see GroupSet.text_columns). Integer
    columns written with leading zeros are read as text too (:func:`_codes_as_text`). ``columns``: of a Parquet
    file, only those are read (the others a command does not use; names not in the file are left out, for the
    command to name).

    The limits (rows, columns, memory: ``limit`` or MAX_TABLE_BYTES) are checked from the file's metadata or a
    sample before the table is read (:func:`estimate_table`); rows and columns again on the table read."""
    if len(data) > MAX_FILE_BYTES:
        raise DataError(f"{name} is {len(data) / 1e6:.0f} MB; the limit is {MAX_FILE_BYTES / 1e6:.0f} MB")
    if len(data) == 0 or (not data[:4096].strip() and not data.strip()):  # no copy of a file that has text
        raise DataError(f"{name} is empty")
    if _is_parquet(name):
        est = _parquet_estimate(data, name, columns).check(limit)
        if est.read == []:  # none of the columns asked for: the command names the one missing
            return _with_file_columns(_check_shape(pd.DataFrame(index=pd.RangeIndex(est.rows)), name), est)
        try:
            df = pd.read_parquet(io.BytesIO(data), columns=est.read)
        except Exception as e:  # noqa: BLE001 - pyarrow raises many types for corrupt files
            raise DataError(f"{name} is not a readable Parquet file ({type(e).__name__})") from None
        df.columns = [str(c) for c in df.columns]
        return _with_file_columns(_check_shape(df, name), est)
    data = _cr_lines(data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{name} is not UTF-8 text (bad byte at position {e.start}); save it as UTF-8 CSV") from None
    nul = data.find(b"\x00")
    if nul >= 0:  # text files hold none; pandas kept them inside names and cells
        raise DataError(f"{name} holds a NUL byte (at byte {nul:,}): it is not a text CSV file")
    header = _header(text[: 4 * 2**20])
    stripped = [h.strip() for h in header]
    seen = Counter(_invisible_stripped(h) for h in header)
    dups = sorted(h for h, k in seen.items() if k > 1)
    if dups:
        raise DataError(f"{name} has duplicate column name(s): {', '.join(dups[:5])}")
    if any(h == "" for h in stripped) and len(stripped) > 1:
        raise DataError(f"{name} has an empty column name (column {stripped.index('') + 1})")
    # every column of a CSV is read (``columns`` is for Parquet): pandas checks the rows' field counts only on
    # the columns it keeps, and a CSV's size bounds its table anyway (under 10 MB: under 100 MB of numbers)
    est = _csv_estimate(data, name, header).check(limit)
    na = ["", "NA", "NaN", "nan", "."]
    try:
        # from the bytes: a StringIO of the text holds it as 4 bytes a character (a 52 MB file took 250 MB more)
        df = pd.read_csv(
            io.BytesIO(data),
            encoding="utf-8-sig",
            na_values=na,
            keep_default_na=True,
            low_memory=False,
            dtype={h: str for h in header if _column_name(h) in set(text_columns)} or None,
            **CSV_EXACT,
        )
    except pd.errors.EmptyDataError:
        raise DataError(f"{name} is empty") from None
    except pd.errors.ParserError as e:
        raise DataError(f"{name} is not a well-formed CSV: {str(e).splitlines()[0]}") from None
    df.columns = [_column_name(str(c)) for c in df.columns]
    df = _codes_as_text(df, text, data, header, na)
    return _check_shape(df, name)


def _with_file_columns(df: pd.DataFrame, est: TableEstimate) -> pd.DataFrame:
    """A table read in part names the file's columns in its messages (``numeric_column``)."""
    if est.read is not None:
        df.attrs["file_columns"] = [str(c).strip() for c in est.columns]
    return df


def read_table(path, text_columns=(), columns=None, limit: int | None = None) -> pd.DataFrame:
    """The table in the file at ``path`` (see :func:`read_table_bytes`; ``columns``: only those are read)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"data file not found: {path}")
    if os.path.isdir(path):
        raise DataError(f"{path} is a folder, not a data file")
    if not os.path.isfile(path):  # a FIFO blocked the command forever; /dev/zero was read until memory ran out
        raise DataError(f"{path} is not a regular file (a device, FIFO or socket); give a data file")
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise DataError(f"{path} is {size / 1e6:.0f} MB; the limit is {MAX_FILE_BYTES / 1e6:.0f} MB")
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)  # bounded: the file may have grown since its size was read
    return read_table_bytes(data, os.path.basename(path), text_columns, columns, limit)


def numeric_column(df: pd.DataFrame, col: str, role: str = "column") -> np.ndarray:
    """A finite float column or a DataError naming it."""
    if col not in df.columns:
        names = df.attrs.get("file_columns") or list(df.columns)
        raise DataError(f"{role} '{col}' is not in the data (columns: {', '.join(map(str, names[:30]))})")
    s = df[col]
    if why := column_problem(s):
        raise DataError(f"{role} '{col}' cannot be used: {why}")
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

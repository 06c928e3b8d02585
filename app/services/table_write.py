"""Writing outputs safely (the table-facing edge's other half, beside app.services.io's reading): atomic files, CSV that
a spreadsheet reads back row for row without running a formula, Parquet written part by part. ``app.services.io``
re-exports these names, where the commands and the dashboard take them from."""

from __future__ import annotations

import csv
import io
import os
import re

import numpy as np
import pandas as pd

from mmc_core.common import DataError
from mmc_core.fit import atomic_write_bytes

PARQUET_SUFFIXES = (".parquet", ".pq")
# a spreadsheet trims leading blanks and line breaks before it looks for a formula, and OWASP lists a leading tab
# or carriage return as a formula start of its own
_FORMULA = re.compile(r"^(?:[\t\r]|\s*[=+\-@])")
# RFC 4180 line ends: Python's csv module quotes a field only for the characters of its line terminator (besides
# the delimiter and the quote), so with "\n" alone a bare "\r" went out unquoted and split the row on reading; the
# same bytes on every platform, too (pandas' default terminator is os.linesep)
CSV_LINE_END = "\r\n"


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


def write_bytes(path, data):
    """``data`` (bytes, or byte chunks as they are made) written atomically (mmc_core.fit.model.atomic_write_bytes)."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(folder):
        raise DataError(f"output folder does not exist: {folder}")
    atomic_write_bytes(path, data)


def csv_bytes(df: pd.DataFrame, header: bool = True) -> bytes:
    """``df`` as CSV text, the one CSV writer of mmc: formula-looking cells escaped, cells with a line break quoted
    (CRLF line ends, :data:`CSV_LINE_END`), every float at full precision (the shortest text that
    reads back as the same double: re-predicting from an exported base prediction with the exported model gives
    the exported mean, also on rows whose base lies at a bucket edge; 6 or 10 digits moved such rows).
    ``header=False``: the rows only (a later part of one table, :func:`write_csv_parts`)."""
    return (
        escape_formulas(df)
        .to_csv(index=False, header=header, float_format=None, lineterminator=CSV_LINE_END, quoting=csv.QUOTE_MINIMAL)
        .encode("utf-8")
    )


def write_csv_parts(parts, path) -> int:
    """The DataFrames ``parts`` (one table's parts in order, e.g. the partitions of a Dask table, computed as they
    are written) as one CSV file: what :func:`write_csv` writes for the whole table (:func:`csv_bytes`, the header
    once), to a temporary file renamed into place when every part is written (an error leaves nothing). Returns
    the number of rows written."""
    rows = [0]

    def chunks():
        for i, df in enumerate(parts):
            rows[0] += len(df)
            yield csv_bytes(df, header=i == 0)

    write_bytes(path, chunks())
    return rows[0]


class _Chunks:
    """A write-only file for pyarrow that keeps what is written until :meth:`take` hands it on: a Parquet file
    made part by part goes through :func:`write_bytes` (a temporary file renamed into place) as it is made."""

    closed = False

    def __init__(self):
        self._parts: list = []
        self._pos = 0

    def write(self, b) -> int:
        self._parts.append(bytes(b))
        self._pos += len(b)
        return len(b)

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


def write_parquet_parts(parts, path, empty: pd.DataFrame) -> int:
    """The DataFrames ``parts`` (one table's parts in order, e.g. a Dask table's partitions computed as they are
    written) as one Parquet file, a row group a part, at ``path``: a temporary file renamed into place when every
    part is written (an error leaves nothing), as :func:`write_csv` writes a whole table to a .parquet name. The
    columns' types are the first non-empty part's; a later part that cannot take them is a DataError naming it.
    ``empty`` (the table's columns, no rows) gives the types when every part is empty. Returns the rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [0]

    def chunks():
        sink, writer, schema = _Chunks(), None, None
        try:
            for i, df in enumerate(parts):
                if not len(df):
                    continue
                try:
                    table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                    first = str(e).splitlines()[0] if str(e) else type(e).__name__
                    raise DataError(
                        f"partition {i + 1} of the data has column types the earlier partitions do not have ({first}); "
                        "write the predictions as CSV (--out NAME.csv) or a folder (--out NAME/)"
                    ) from None
                if writer is None:
                    schema = table.schema
                    writer = pq.ParquetWriter(sink, schema)
                writer.write_table(table)
                rows[0] += len(df)
                yield sink.take()
            if writer is None:
                writer = pq.ParquetWriter(sink, pa.Table.from_pandas(empty, preserve_index=False).schema)
            writer.close()
            writer = None
            yield sink.take()
        finally:
            if writer is not None:  # an error in a part: the half-made file is dropped with its temporary file
                writer.close()

    write_bytes(path, chunks())
    return rows[0]


def write_csv(df: pd.DataFrame, path):
    """The table as CSV (formula-looking cells escaped), or as Parquet when ``path`` ends in .parquet / .pq
    (a CSV under a Parquet name could not be read back)."""
    if str(path).lower().endswith(PARQUET_SUFFIXES):
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        write_bytes(path, buf.getvalue())
        return
    write_bytes(path, csv_bytes(df))

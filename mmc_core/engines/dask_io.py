"""The Dask engine's edge with the CLI: partitioned Parquet read with its limits checked from the footers
before any cluster starts, and the client (a running scheduler or a LocalCluster) started and closed."""

from __future__ import annotations

import contextlib

from ..common.errors import DataError, MMCError
from .dask_base import require

__all__ = ["MAX_PARTITION_BYTES", "MAX_PARTITIONS", "read_parquet", "start_client", "close_client"]


# ---- data and cluster (the CLI's edge) ---------------------------------------------------------------------
# what one partition (a Parquet row group) may take once read, on a worker: a 2.3 MB file of 2.5M x 202 zeros has
# row groups of 1M rows that decode to 1.6 GB each, read two at a time by two workers
MAX_PARTITION_BYTES = 256 * 10**6


MAX_PARTITIONS = 20_000


def _row_group_bytes(rg, names: set, text: set) -> int:
    """The memory of row group ``rg`` once read, over the columns ``names`` (``text``: those of text): 8 bytes a
    numeric cell, a text cell its characters twice (Arrow and pandas) and 16 bytes (offset and pointer)."""
    n, total = int(rg.num_rows), 0
    for c in range(rg.num_columns):
        col = rg.column(c)
        top = col.path_in_schema.split(".")[0]
        if top not in names:
            continue
        total += n * 16 + 2 * max(int(col.total_uncompressed_size), 0) if top in text else n * 8
    return total


def _check_complete(f: str, meta, complete: dict) -> None:
    """DataError when a column of ``complete`` (column -> (role, finite)) holds a missing value, or, when
    ``finite``, an infinite one, as the row groups' statistics in the footer of ``f`` record them (no row read;
    a column without statistics is checked when its rows are)."""
    import math
    import os

    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            if col.path_in_schema not in complete or col.statistics is None:
                continue
            role, finite = complete[col.path_in_schema]
            st = col.statistics
            where = f"{os.path.basename(f)}, row group {g + 1}"
            if st.has_null_count and st.null_count:
                raise DataError(
                    f"{role} '{col.path_in_schema}' has {st.null_count:,} missing value(s) ({where}); drop or fill "
                    "them first"
                )
            if finite and st.has_min_max and st.physical_type in ("FLOAT", "DOUBLE"):
                ends = [v for v in (st.min, st.max) if isinstance(v, float) and math.isinf(v)]
                if ends:
                    raise DataError(
                        f"{role} '{col.path_in_schema}' has infinite value(s) ({where}: {ends[0]:g}); drop or fix them "
                        "first"
                    )


def _check_fields(f: str, schema, complete: dict, scalar: dict | None = None) -> None:
    """DataError for a file whose schema names a column twice (Dask failed reading it, a crash), or gives a label
    or prediction of ``complete`` (column -> (role, finite); finite: a number is needed) dates, times, lists, maps
    or structs (dates were fitted as nanosecond counts), as the in-memory engine refuses them
    (:func:`app.services.io.column_problem`); and a column of ``scalar`` (column -> role: group columns) whose cells hold
    lists, maps, structs or raw bytes (a struct column made one group per struct, where the in-memory engine
    refuses it)."""
    import os
    from collections import Counter

    import pyarrow as pa

    dups = sorted(n for n, k in Counter(fld.name for fld in schema).items() if k > 1)
    if dups:
        raise DataError(f"{os.path.basename(f)} has duplicate column name(s): {', '.join(dups[:5])}")
    for fld in schema:
        if scalar and fld.name in scalar:
            t = fld.type
            if pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
                raise DataError(
                    f"{scalar[fld.name]} '{fld.name}' cannot be used ({os.path.basename(f)}): its cells hold {t} "
                    "values, not single numbers or text"
                )
        role, finite = complete.get(fld.name, (None, False))
        if not finite:
            continue
        t = fld.type
        if pa.types.is_temporal(t):
            why = f"it holds dates or times ({t}), not numbers"
        elif pa.types.is_nested(t):
            why = f"its cells hold {t} values, not single numbers"
        else:
            continue
        raise DataError(f"{role} '{fld.name}' cannot be used ({os.path.basename(f)}): {why}")


def read_parquet(pattern: str, columns=None, sized_columns=None, complete=None, scalar=None):
    """A Dask DataFrame over the Parquet files matching ``pattern`` (a glob or a folder): one clear error for
    a glob that matches nothing or files whose schemas differ (checked from the footers, no rows read), or a row
    group (a partition) that would take more than ``MAX_PARTITION_BYTES`` once read, over ``sized_columns`` (the
    columns the command uses; default ``columns``, or all). ``complete`` (column -> (role, finite)): columns that
    must have no missing (and, when ``finite``, no infinite) value, refused from the footers' statistics before
    any cluster starts (a label with a missing value was found on the workers only, after the progress lines).
    ``scalar`` (column -> role): columns whose cells must be single values (group columns)."""
    import glob
    import os

    require()
    import dask.dataframe as dd

    files = sorted(glob.glob(os.path.join(pattern, "*.parquet")) if os.path.isdir(pattern) else glob.glob(pattern))
    if not files:
        raise DataError(f"--data {pattern!r} matches no Parquet files")
    import pyarrow.parquet as pq

    first, rows, groups = None, 0, 0
    for f in files:
        if not os.path.isfile(f):  # reading a FIFO's footer waited for a writer forever
            raise DataError(f"{f} is not a regular file (a folder, device, FIFO or socket); give Parquet files")
        try:
            meta = pq.read_metadata(f)
            schema = meta.schema.to_arrow_schema()
        except Exception as e:  # noqa: BLE001 - any unreadable file is a data error
            raise DataError(f"{f} is not a readable Parquet file ({type(e).__name__})") from None
        rows += meta.num_rows
        sig = [(fld.name, str(fld.type)) for fld in schema if not fld.name.startswith("__index_level_")]
        used = sized_columns if sized_columns is not None else columns
        names = {n for n, _ in sig} if used is None else set(used)
        text = {fld.name for fld in schema if not _fixed_width(fld.type)}
        groups += meta.num_row_groups
        _check_fields(f, schema, complete or {}, scalar)
        if complete:
            _check_complete(f, meta, complete)
        for g in range(meta.num_row_groups):
            need = _row_group_bytes(meta.row_group(g), names, text)
            if need > MAX_PARTITION_BYTES:
                raise DataError(
                    f"{os.path.basename(f)}: row group {g + 1} would take about {need / 1e6:,.0f} MB in memory "
                    f"({meta.row_group(g).num_rows:,} rows x {len(names & {n for n, _ in sig})} column(s)); the "
                    f"limit for one partition is {MAX_PARTITION_BYTES / 1e6:,.0f} MB: write the file with smaller "
                    "row groups (pyarrow: row_group_size) or fewer columns"
                )
        if first is None:
            first = (f, sig)
        elif sig != first[1]:
            diff = sorted(set(sig) ^ set(first[1]))[:3]
            raise DataError(
                f"Parquet files have different schemas: {os.path.basename(f)} vs "
                f"{os.path.basename(first[0])} (differing columns: {', '.join(f'{a}:{b}' for a, b in diff)})"
            )
    if rows == 0:  # as the in-memory engine: nothing to fit, predict or audit
        raise DataError(f"--data {pattern!r} has a schema but no data rows")
    if groups > MAX_PARTITIONS:
        raise DataError(
            f"--data {pattern!r} has {groups:,} row groups; the limit is {MAX_PARTITIONS:,} (one partition each): "
            "write it with larger row groups"
        )
    # a partition a row group, which the limit above bounds: by default Dask joins row groups up to 256 MB of
    # their stored size, and zeros store in almost nothing (the 2.5M x 202 file was one 4 GB partition)
    return dd.read_parquet(files, columns=columns, split_row_groups=True)


def _fixed_width(t) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t))


def start_client(scheduler: str | None = None, workers: int = 2, memory_limit: str = "6GB", timeout: float = 20):
    """A distributed Client: connected to ``scheduler`` (clear error within ``timeout`` seconds when it does not
    answer), or to a new LocalCluster of ``workers`` processes (one thread each, ``memory_limit`` each). Returns
    (client, cluster or None); close both (``close_client``)."""
    require()
    import logging

    from distributed import Client, LocalCluster

    for name in ("distributed", "distributed.comm", "distributed.core", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if scheduler:
        try:
            return Client(scheduler, timeout=timeout), None
        except (OSError, TimeoutError) as e:
            raise MMCError(f"--scheduler {scheduler}: no Dask scheduler answers there ({type(e).__name__})") from None
        except ValueError as e:
            raise MMCError(f"--scheduler {scheduler!r} is not a scheduler address ({e})") from None
    if not isinstance(workers, int) or workers < 1:
        raise MMCError(f"--workers must be a positive integer, got {workers!r}")
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=memory_limit,
        dashboard_address=None,
        silence_logs=logging.CRITICAL,  # a task's DataError reaches the user as one line, not a worker traceback
    )
    return Client(cluster), cluster


def close_client(client, cluster):
    for obj in (client, cluster):
        if obj is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                obj.close()

"""The dashboard server's memory budget for tables (issue 38: a 0.9 MB upload took the server to 4 GB, and a
few-MB file at the stated limits would have had it killed, losing every analyst's session).

Every table a session holds (its current one, the ones set aside, those of sessions kept for a reload:
app.ui.persist) counts against one budget per server process, ``MMC_SERVER_MEMORY_MB`` (default 600 MB of
tables). An upload is estimated from its metadata or a sample (app.services.io.estimate_table) before it is read, and
refused with one sentence when it is over the limit for one table (``MMC_UPLOAD_TABLE_MB``, default 100 MB:
12.5M numeric cells) or when it would not fit beside the tables already held, after the workspaces of sessions
that have ended were let go to make room. A refusal, and a workspace let go, hand the memory back
(:func:`release_memory`).
"""

from __future__ import annotations

import gc
import os

from app.services import io as table_io

SERVER_DEFAULT_MB = 600
TABLE_DEFAULT_MB = 100


def _env_mb(name: str, default: int) -> int:
    try:
        mb = float(os.environ.get(name, default))
    except ValueError:
        return default * 10**6
    return int((mb if mb > 0 else default) * 10**6)


def server_budget() -> int:
    """Bytes of tables all sessions of this server may hold together (``MMC_SERVER_MEMORY_MB``)."""
    return _env_mb("MMC_SERVER_MEMORY_MB", SERVER_DEFAULT_MB)


def table_limit() -> int:
    """Bytes one table may take once read in the dashboard (``MMC_UPLOAD_TABLE_MB``, within the server's budget
    and the command line's limit): a table is held several times over (the split, the fit, a set-aside copy)."""
    return min(_env_mb("MMC_UPLOAD_TABLE_MB", TABLE_DEFAULT_MB), server_budget(), table_io.MAX_TABLE_BYTES)


def mb_text(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e6:.1f} MB"


def release_memory() -> None:
    """Hand memory freed by dropped tables back to the system: collect cycles, empty Arrow's pool (Parquet reads
    leave hundreds of MB there: mimalloc keeps them per thread) and trim glibc's heap."""
    gc.collect()
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:  # noqa: BLE001, S110 - no pyarrow, or an old one
        pass
    from mmc_core.common import glibc

    lib = glibc()
    if lib is not None:
        lib.malloc_trim(0)

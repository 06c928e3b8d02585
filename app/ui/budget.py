"""The dashboard server's memory budget for tables (issue 38: a 0.9 MB upload took the server to 4 GB, and a
few-MB file at the stated limits would have had it killed, losing every analyst's session).

Every table a session holds (its current one, the ones set aside, those of sessions kept for a reload:
app.ui.persist) counts against one budget per server process, ``MMC_SERVER_MEMORY_MB`` (default 600 MB of
tables). An upload is estimated from its metadata or a sample (app.io.estimate_table) before it is read, and
refused with one sentence when it is over the limit for one table (``MMC_UPLOAD_TABLE_MB``, default 100 MB:
12.5M numeric cells) or when it would not fit beside the tables already held, after the workspaces of sessions
that have ended were let go to make room. A refusal, and a workspace let go, hand the memory back
(:func:`release_memory`).
"""

from __future__ import annotations

import gc
import os

import streamlit as st

from app import io as table_io
from mmc_core.errors import DataError

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


def _frames(work: dict):
    """The tables of a workspace: its own, the one set aside, those on its shelf, a file as uploaded offered in
    place of a table made from it."""
    shelf = work.get("shelf") or {}
    for rec in (work.get("data"), work.get("previous_workspace"), *shelf.values(), work.get("raw_offer")):
        if isinstance(rec, dict):
            rec = rec.get("data", rec)
        df = rec.get("df") if isinstance(rec, dict) else None
        if df is not None and hasattr(df, "memory_usage"):
            yield df


def held() -> tuple[int, int]:
    """(bytes, workspaces): the tables held by this server's sessions, each table once (two tabs on one address
    share theirs): the workspaces kept (live sessions' and those kept for a reload) and this session's own."""
    from app.ui import persist

    with persist._LOCK:
        works = [w[1] for w in persist._WORKSPACES.values()]
    try:
        ss = st.session_state
        own = {k: ss[k] for k in ("data", "previous_workspace", "shelf", "raw_offer") if k in ss}
    except Exception:  # noqa: BLE001 - outside a script run: the kept workspaces only
        own = {}
    total, seen = 0, set()
    for work in [*works, own]:
        for df in _frames(work):
            if id(df) not in seen:
                seen.add(id(df))
                total += int(df.memory_usage(index=True, deep=False).sum())
    return total, len(works)


def admit(data: bytes, name: str) -> table_io.TableEstimate:
    """The estimate of the uploaded table ``data``, or a DataError (one sentence) when it may not be read: over
    the limit for one table, or over what the server's budget leaves; checked from the file's metadata or a
    sample, before it is read. Workspaces of sessions that ended are let go first to make room."""
    from app.ui import persist

    limit = table_limit()
    est = table_io.estimate_table(data, name).check(limit)
    budget = server_budget()
    total, _ = held()
    if total + est.bytes > budget:
        if persist.release_ended(need=total + est.bytes - budget):
            release_memory()
    total, sessions = held()
    if total + est.bytes > budget:
        raise DataError(
            f"{name} would take about {_mb(est.bytes)} in memory and this server's sessions already hold "
            f"{_mb(total)} of tables ({sessions} session(s)); the limit is {_mb(budget)} for all of them "
            "together: close other sessions, or set tables aside in this one, and try again"
        )
    return est


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e6:.1f} MB"


def release_memory() -> None:
    """Hand memory freed by dropped tables back to the system: collect cycles, empty Arrow's pool (Parquet reads
    leave hundreds of MB there: mimalloc keeps them per thread) and trim glibc's heap."""
    gc.collect()
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:  # noqa: BLE001 - no pyarrow, or an old one
        pass
    from mmc_core import memory

    lib = memory._glibc()
    if lib is not None:
        lib.malloc_trim(0)

"""Whether an upload may be read (issue 38): its size, estimated before it is read, against the limit for one
table and against what the server's budget (app.ui.budget) leaves beside the tables its sessions hold
(app.ui.persist's kept workspaces and this session's own)."""

from __future__ import annotations

import streamlit as st

from app.services import io as table_io
from app.ui import budget, persist
from mmc_core.common import DataError


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
    works = persist.kept_workspaces()
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
    limit = budget.table_limit()
    est = table_io.estimate_table(data, name).check(limit)
    cap = budget.server_budget()
    total, _ = held()
    if total + est.bytes > cap and persist.release_ended(need=total + est.bytes - cap):
        budget.release_memory()
    total, sessions = held()
    if total + est.bytes > cap:
        raise DataError(
            f"{name} would take about {budget.mb_text(est.bytes)} in memory and this server's sessions already hold "
            f"{budget.mb_text(total)} of tables ({sessions} session(s)); the limit is {budget.mb_text(cap)} for all of them "
            "together: close other sessions, or set tables aside in this one, and try again"
        )
    return est

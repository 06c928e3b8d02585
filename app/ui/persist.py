"""The analyst's work survives a reload of the page: each browser session's workspace (its table, groups,
settings, result and running fit) is kept in this server process under a random id that the page's address
carries (``?ws=...``); a new session opened with that address (a reload, a restored tab, a bookmark while the
server runs) takes the workspace back instead of starting over on the demo.

Kept in memory only, for the last ``MAX_WORKSPACES`` sessions (each holds its table) and at most
``MMC_WORKSPACE_GB`` (by default the server's table budget, app.ui.budget) of their tables: untouched demo
sessions go first, then the oldest, the session's own never; a session that ended is let go
``KEEP_ENDED_SECONDS`` later, or as soon as an upload needs its memory; an address whose workspace went (or
that this server never had: it restarted) says so. Two sessions on one address (two tabs) never overwrite each other: the one that saves second goes on under an
address of its own; but a reload's new session knows the session it replaced, whose last script run may end
after the reload: that late save is taken back (or, if the analyst changed something since, overwritten by the
newer work). Nothing is written to disk. The id is 128 random bits: the
address is what grants access, as with the dashboard itself, which is meant to be served to the analyst's own
browser.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections import OrderedDict

import streamlit as st

PARAM = "ws"
MAX_WORKSPACES = 8
# what a workspace is: the session keys that hold the analyst's work (widget keys are re-filled from "settings")
KEYS = (
    "data",
    "groups",
    "settings",
    "run",
    "job",
    "last_job",
    "previous_workspace",
    "shelf",
    "run_error",
    "messages",
    "ws_first",
    "run_before_stop",
    "draft_conds",  # the custom group being built, and its typed name
    "cg_name_kept",
    "export_pdf",  # a built report (seconds of work): still there, for the same run, after a reload
    "export_pdf_sig",
    "export_pdf_seconds",
)

# id -> (time saved, {key: value}, bytes of its tables, untouched: a demo session nobody has changed, version:
# how many saves it has had, the token of the session that saved it, the token of the session that one replaced
# on a reload, the Streamlit session id of the one that saved it)
_WORKSPACES: OrderedDict = OrderedDict()
_DROPPED: OrderedDict = OrderedDict()  # ids whose workspace was let go (to say so on a reload), the last 1,000
_LOCK = threading.Lock()


def max_bytes() -> float:
    """Tables kept for sessions, at most (``MMC_WORKSPACE_GB``; by default the server's budget for tables,
    :func:`app.ui.budget.server_budget`): a server that many analysts upload to must not run out of memory, which
    would lose every session's work at once."""
    from app.ui.budget import server_budget

    try:
        return float(os.environ["MMC_WORKSPACE_GB"]) * 2**30
    except (KeyError, ValueError):
        return float(server_budget())


# a session that ended (its tab closed) keeps its workspace this long for a reload to take back, then the
# memory is released (issue 38: a closed session kept 2.3 GB); sooner when an upload needs the room
KEEP_ENDED_SECONDS = 600.0


def _session_id():
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        return None if ctx is None else ctx.session_id
    except Exception:  # noqa: BLE001 - an internal API moved: no id, the workspace counts as a live session's
        return None


def session_active(session_id) -> bool:
    """Whether the Streamlit session ``session_id`` is still open (True when that cannot be told: no id, no
    runtime, as under AppTest)."""
    if session_id is None:
        return True
    try:
        from streamlit.runtime import Runtime

        if not Runtime.exists():
            return True
        return bool(Runtime.instance().is_active_session(session_id))
    except Exception:  # noqa: BLE001 - an internal API moved: keep the workspace
        return True


def kept_workspaces() -> list:
    """The workspaces kept for sessions (live ones' and those kept for a reload), each a dict of what it holds."""
    with _LOCK:
        return [w[1] for w in _WORKSPACES.values()]


def release_ended(need: float = 0.0, older_than: float | None = None) -> int:
    """Let go of the workspaces of sessions that have ended: the oldest first, until ``need`` bytes of tables
    are freed (all of them when ``need`` is 0), only those saved ``older_than`` seconds ago or more when given.
    Returns the bytes of tables let go (their memory is handed back by :func:`app.ui.budget.release_memory`)."""
    now, freed = time.time(), 0
    with _LOCK:
        for wid in list(_WORKSPACES):
            held = _WORKSPACES[wid]
            sid = held[7] if len(held) > 7 else None
            if older_than is not None and now - held[0] < older_than:
                continue
            if sid is None or session_active(sid):
                continue
            del _WORKSPACES[wid]
            _DROPPED[wid] = True
            freed += held[2]
            if need and freed >= need:
                break
        while len(_DROPPED) > 1000:
            _DROPPED.popitem(last=False)
    return freed


_SWEEPER: list = []


def _sweep_forever(interval: float):
    from app.ui.budget import release_memory

    while True:
        time.sleep(interval)
        try:
            if release_ended(older_than=KEEP_ENDED_SECONDS):
                release_memory()
        except Exception:  # noqa: BLE001, S110 - the sweeper must never die of one bad record
            pass


def start_sweeper(interval: float = 60.0) -> None:
    """Once per process: a daemon thread that releases the workspaces of sessions ended more than
    ``KEEP_ENDED_SECONDS`` ago, so that memory goes back when nobody uses the server any more."""
    with _LOCK:
        if _SWEEPER:
            return
        t = threading.Thread(target=_sweep_forever, args=(interval,), name="mmc-workspace-sweeper", daemon=True)
        _SWEEPER.append(t)
    t.start()


def table_bytes(work: dict) -> int:
    """The memory of the workspace's tables (its own and those set aside), without deep string sizes."""
    total, seen = 0, set()
    shelf = work.get("shelf") or {}
    for rec in (work.get("data"), work.get("previous_workspace"), *shelf.values()):
        if isinstance(rec, dict):
            rec = rec.get("data", rec)
        df = rec.get("df") if isinstance(rec, dict) else None
        if df is not None and hasattr(df, "memory_usage") and id(df) not in seen:  # one table, several records
            seen.add(id(df))
            total += int(df.memory_usage(index=True, deep=False).sum())
    return total


def attach() -> bool:
    """First thing in every script run: give the session its workspace id, and on a session's first run take
    back the workspace its address names. Returns True when a workspace was taken back in this run."""
    ss = st.session_state
    restored = False
    start_sweeper()
    if "ws_id" not in ss:
        wid = st.query_params.get(PARAM)
        with _LOCK:
            kept = _WORKSPACES.get(wid) if wid else None
        if kept is None and wid:
            # let go here ("memory"), or never on this server: it restarted since, or the address is foreign
            ss["ws_dropped"] = "memory" if wid in _DROPPED else "unknown"
        ss["ws_token"] = secrets.token_urlsafe(8)  # this session's own, to tell its saves from another's
        if kept is not None:
            _take(ss, kept)
            ss["ws_id"] = wid
            # the session that saved last: on a reload, the page's previous session, whose last script run may
            # still be under way and save after this one attached (see save)
            ss["ws_pred"] = _saver(kept)
            ss["ws_restored"] = True
            restored = True
        else:
            ss["ws_id"] = secrets.token_urlsafe(16)
            ss["ws_version"] = 0
    else:
        late = _late_save_of_predecessor(ss)
        if late is not None:
            _take(ss, late)  # before this run draws anything
            ss["ws_caught_up"] = True
    if st.query_params.get(PARAM) != ss["ws_id"]:
        st.query_params[PARAM] = ss["ws_id"]
    return restored


def _take(ss, kept) -> None:
    for k, v in kept[1].items():
        ss[k] = _own_copy(k, v)
    ss["ws_version"] = kept[4]
    ss["ws_saved_fp"] = _fingerprint(ss)


def _late_save_of_predecessor(ss):
    """The address's workspace when the session this one replaced on a reload saved it after this one last
    did (its last script run was still under way at the reload), and this session has changed nothing since:
    that save holds the analyst's last change before the reload. None otherwise."""
    wid = ss.get("ws_id")
    with _LOCK:
        held = _WORKSPACES.get(wid) if wid else None
    if (
        held is None
        or held[4] == ss.get("ws_version", 0)
        or not _by_predecessor(held, ss)
        or _fingerprint(ss) != ss.get("ws_saved_fp")
    ):
        return None
    return held


def _saver(held):
    return held[5] if len(held) > 5 else None


def _by_predecessor(held, ss) -> bool:
    """Whether ``held`` was saved by the session this one replaced on a reload."""
    return ss.get("ws_pred") is not None and _saver(held) == ss.get("ws_pred")


def _alive() -> bool:
    """Whether this session's browser is still connected. A reload disconnects the page's session; a script run
    under way then (Streamlit asks it to stop, which it does at its next element) can still end in a save.
    Without Streamlit's runtime (AppTest, bare mode) every session counts as connected."""
    try:
        from streamlit.runtime import Runtime
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        if ctx is None or not Runtime.exists():
            return True
        return bool(Runtime.instance().is_active_session(ctx.session_id))
    except Exception:  # noqa: BLE001 - an internal API moved: behave as before (a conflict forks)
        return True


def _own_copy(key: str, value):
    """What a session edits in place gets its own copy (the settings object, the group list, the data record),
    so that two tabs opened on one address do not change each other's settings; tables and results are
    shared (never edited in place)."""
    import copy

    if key == "settings" and value is not None:
        return type(value)(**value.to_dict())
    if key in ("groups", "messages", "draft_conds"):
        return copy.deepcopy(value)
    if key in ("data", "previous_workspace", "shelf") and isinstance(value, dict):
        return dict(value)
    return value


def save():
    """Last thing in every script run: the session's workspace as it now is (references, no copies)."""
    ss = st.session_state
    wid = ss.get("ws_id")
    if not wid or ss.get("data") is None:
        return
    # a session that opened on a demo and whose table, groups and settings are still what it opened with holds
    # nothing a new session would not rebuild: such workspaces go first (8 colleagues opening the address pushed
    # out a live analyst's uploaded table and groups, lost on the next reload: an exploratory browser check)
    fp = _fingerprint(ss)
    if "ws_first" not in ss:
        ss["ws_first"] = fp if (ss["data"] or {}).get("source") == "demo" else None
    untouched = ss["ws_first"] is not None and fp == ss["ws_first"]
    work = {k: ss[k] for k in KEYS if k in ss}
    catch_up = None
    with _LOCK:
        held = _WORKSPACES.get(wid)
        if held is not None and held[4] != ss.get("ws_version", 0):
            late = len(held) > 6 and held[6] == ss.get("ws_token") and not _alive()
            if late:
                # this session's page was reloaded during this run, and the new session has saved since: this
                # run's change goes to the address as a late save, which the new session takes back on its next
                # run if it has changed nothing since (it went to an address nobody would open: a review)
                pass
            elif _by_predecessor(held, ss):
                # The page's previous session (this tab before its reload) finished a script run after this one
                # attached: with nothing changed here since, its save is the analyst's latest (taken back
                # below); with changes here, those are the newer and are kept. (It forked, with a false "open in
                # another tab" notice: a review.)
                if fp == ss.get("ws_saved_fp"):
                    catch_up = held
            else:
                # another session (a second tab on this address) saved since this one last did: this one goes
                # on under an address of its own instead of overwriting that work (the last tab to act won, and
                # a reload then said "your work is back" over the other tab's state: an exploratory browser
                # check)
                wid = secrets.token_urlsafe(16)
                ss["ws_id"] = wid
                ss["ws_forked"] = True
                held = None
        if catch_up is None:
            version = (held[4] if held is not None else 0) + 1
            ss["ws_version"] = version
            ss["ws_saved_fp"] = fp
            _WORKSPACES[wid] = (
                time.time(),
                work,
                table_bytes(work),
                untouched,
                version,
                ss.get("ws_token"),
                ss.get("ws_pred"),
                _session_id(),  # to let it go once that session has ended (release_ended)
            )
        _WORKSPACES.move_to_end(wid)
        limit = max_bytes()
        while len(_WORKSPACES) > 1 and (
            len(_WORKSPACES) > MAX_WORKSPACES or sum(w[2] for w in _WORKSPACES.values()) > limit
        ):
            others = [k for k in _WORKSPACES if k != wid]
            gone = next((k for k in others if _WORKSPACES[k][3]), others[0])  # the oldest untouched, else oldest
            del _WORKSPACES[gone]
            _DROPPED[gone] = True
            while len(_DROPPED) > 1000:
                _DROPPED.popitem(last=False)
    if catch_up is not None:
        _take(ss, catch_up)
        ss["ws_caught_up"] = True
        st.rerun()  # draw the taken-back work (this run's prewarm is skipped: the next run's does it)
    if ss.get("ws_forked") and st.query_params.get(PARAM) != wid:
        st.query_params[PARAM] = wid  # a reload right away must find this session's own work


def _fingerprint(ss) -> tuple:
    """What an analyst changes: the table (its key), the groups, the settings, a custom group being built; a
    set-aside table counts too."""
    import json

    settings = ss.get("settings")
    s = settings.to_dict() if hasattr(settings, "to_dict") else None
    return (
        (ss.get("data") or {}).get("key"),
        json.dumps(ss.get("groups"), sort_keys=True, default=str),
        json.dumps(s, sort_keys=True, default=str),
        bool(ss.get("shelf")) or bool(ss.get("previous_workspace")),
        # a custom group being built is work too
        json.dumps(ss.get("draft_conds") or [], sort_keys=True, default=str),
        ss.get("cg_name_kept") or "",
    )


def take_fork_notice() -> bool:
    """True once after this session moved to an address of its own (:func:`save`); the address bar follows."""
    ss = st.session_state
    if not ss.pop("ws_forked", False):
        return False
    if st.query_params.get(PARAM) != ss.get("ws_id"):
        st.query_params[PARAM] = ss["ws_id"]
    return True


def take_catch_up_notice() -> bool:
    """True once after this session took back a save its predecessor made after the reload (:func:`save`)."""
    return bool(st.session_state.pop("ws_caught_up", False))


def forget_all():
    """Drop every kept workspace (tests)."""
    with _LOCK:
        _WORKSPACES.clear()
        _DROPPED.clear()

"""Small Streamlit helpers shared by the pages."""
from __future__ import annotations

import streamlit as st


def sanitize(key: str, options: list, default=None, multi: bool = False):
    """Make ``st.session_state[key]`` valid for a widget with ``options`` before the widget is drawn."""
    ss = st.session_state
    v = ss.get(key)
    if multi:
        ss[key] = [x for x in (v or []) if x in options]
    elif v not in options:
        ss[key] = default if (default in options or default is None) else (options[0] if options else None)


def show_error(prefix: str, e: Exception):
    st.error(f"{prefix}: {e}" if prefix else str(e), icon=":material/error:")


def need_run() -> bool:
    """True (and an explanation drawn) when there is no fitted model yet."""
    if st.session_state.get("run") is None:
        job = st.session_state.get("job")
        if job is not None and job.running:
            st.info("A fit is running: watch it on the Run page. Results appear here when it is done.")
        else:
            st.info("No audit yet: set up the data and groups, then press **Run** on the Run page.")
        st.page_link("ui/run_page.py", label="Go to the Run page", icon=":material/play_circle:")
        return True
    return False


def units_suffix() -> str:
    u = (st.session_state.get("label_units") or "").strip()
    return f" ({u})" if u else ""

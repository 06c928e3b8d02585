"""Small pieces several pages draw or do the same way: the start of a page that needs a loaded table, and taking
a finished background job (a fit or a Discover search) out of the session."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.ui import state


def page_start(title: str, caption: str) -> dict | None:
    """The page's title, then its caption; None (with a pointer to the Data page instead of the caption) when no
    table is loaded, else the loaded table (:func:`app.ui.state.data`)."""
    st.title(title)
    d = state.data()
    if d is None:
        st.info("Load a table on the Data page first.")
        return None
    st.caption(caption)
    return d


def take_finished(key: str):
    """The background job kept in ``st.session_state[key]`` once it has ended, removed from the session (so its
    outcome is taken once); None while it runs or when there is none."""
    ss = st.session_state
    job = ss.get(key)
    if job is None or job.running or job.status == "idle":
        return None
    ss[key] = None
    return job


def start_job(key: str, job, sync: bool, wait_s: float):
    """Keep ``job`` in ``st.session_state[key]`` and run it: in this thread when ``sync`` (tests, the first demo
    audit), else in the background, waiting up to ``wait_s`` seconds so that a quick job is over before the page
    is drawn (no live view flickering in and out)."""
    from app.ui import persist

    st.session_state[key] = job
    if sync:
        job.run_sync()
    else:
        job.start()
        # Saved now, not only at the end of the run: a reload stops this script at its next element (Streamlit
        # then refuses even session-state access), so a Run clicked 0.3 s before a reload left the fit in no
        # workspace and its result was never seen (an exploratory browser check)
        persist.save()
        job.wait(wait_s)
    return job


def outcome(job, *fields: str) -> dict:
    """The named attributes of a finished job, as the session keeps them once the job object is dropped."""
    return {f: getattr(job, f) for f in fields}


def running_job(key: str):
    """The job in ``st.session_state[key]`` while it runs (a second click on Run or Discover returns it), else None."""
    job = st.session_state.get(key)
    return job if job is not None and job.running else None


def job_inputs(d: dict) -> tuple[Any, Any, Any, Any]:
    """What every background job on the loaded table starts from: the table, then the label, base-prediction and
    split settings of the session (the first four arguments of FitJob and DiscoverJob)."""
    return d["df"], state.label_spec(), state.base_spec(), state.split_spec()

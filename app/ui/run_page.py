"""Run page: parameters with what they imply, the Run button, a live convergence chart and a Stop button.

This module starts and finishes the job, draws the live view and lays the page out; the settings form is in
:mod:`app.ui.run_settings`, what the parameters imply and the summary's sentences in :mod:`app.ui.run_text`
(no Streamlit), the finished run's summary in :mod:`app.ui.run_summary`; the work it starts lives in
:mod:`app.services.pipeline` and :mod:`app.services.jobs`.

How the live view works: Run starts :class:`app.services.jobs.FitJob` (in a forked worker process). The page then draws
three fragments while the job runs. The live view is re-executed every second (``st.fragment(run_every=...)``):
each tick reads the job's history (one row per descent round) and redraws the progress line; when the job is
over it triggers a full rerun and the result is stored in ``st.session_state["run"]`` (it survives reruns). The
thinned convergence chart is another fragment, every 3 s (its figure is built in a helper thread). The Stop box
is a fragment without a timer: a click sets the job's stop flag and, in that same short run, says what is kept
(the browser shows it a few tenths of a second after the click; tests/test_browser_stop.py measures it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time

import streamlit as st

from app.services.jobs import FitJob
from app.services.specs import count
from app.ui import state, table_facts
from app.ui.common import esc, label_error
from app.ui.run_settings import settings_form
from app.ui.run_summary import show_run_summary
from app.ui.run_text import implications
from app.ui.widgets import job_inputs, outcome, page_start, running_job, start_job, take_finished

POLL_SECONDS = 1.0  # seconds between two ticks of the live view (each costs the browser 50-200 ms, loaded)
WORKER = os.environ.get("MMC_WORKER", "process")  # background runs in a forked process ("thread": in-process)


# ---------------------------------------------------------------------------------------------------
# starting, finishing
# ---------------------------------------------------------------------------------------------------


def run_now(sync: bool = False) -> FitJob | None:
    """Start a fit with the current settings (in the background unless ``sync``)."""
    ss = st.session_state
    d = state.data()
    if d is None:
        ss["run_error"] = "load a table first (Data page)"
        return None
    old = running_job("job")
    if old is not None:
        return old
    ss.pop("run_error", None)
    job = FitJob(
        *job_inputs(d),
        _groups_json(),
        state.fit_settings(),
        data_key=d["key"],
        data_name=d["name"],
        worker="thread" if sync else WORKER,
    )
    job.label_units = state.units()
    start_job("job", job, sync, 0.6)
    finalize()
    return job


def _groups_json():
    from app.ui.groupbuild import groups_file

    try:
        return groups_file(st.session_state.get("groups") or [])
    except Exception:  # noqa: BLE001 - invalid groups are reported by the pipeline
        return {"format": "mmc-groups", "version": 1, "groups": st.session_state.get("groups") or []}


def finalize():
    """Move a finished job's result into session state (called on every page run)."""
    ss = st.session_state
    job = take_finished("job")
    if job is None:
        return
    ss["last_job"] = outcome(
        job, "status", "elapsed", "error", "detail", "stop_requested_at", "stop_seen_at", "ended_at", "id", "kept"
    )
    ss["last_job"].update(rounds_seen=len(job.history), stop_phase=job.stop_phase)
    if job.status == "done" and job.result is not None:
        run = job.result
        units = getattr(job, "label_units", "")
        if units and run.audit is not None and isinstance(getattr(run.audit, "params", None), dict):
            run.audit.params["label_units"] = units
        prev = ss.get("run")
        # a stopped run's model replaces the last complete audit, which stays one click away (Stop discarded it
        # without a word: an exploratory browser check); a second stopped run keeps the one set aside
        if not run.stopped:
            ss.pop("run_before_stop", None)
        elif prev is not None and not prev.stopped and prev.audit is not None:
            ss["run_before_stop"] = prev
        if prev is not None and prev is not run and not prev.stopped:
            from app.services.compare_service import remember

            ss["past_runs"] = remember(ss.get("past_runs") or [], prev)  # the Compare page's other side
        ss["run"] = run
        for k in ("export_pdf", "export_pdf_error", "export_csv", "export_model", "export_groups", "export_audit"):
            ss.pop(k, None)
        ss.pop("run_error", None)
    elif job.status == "stopped":
        ss.pop("run_error", None)  # nothing fitted: the previous run (if any) stays
    else:
        ss["run_error"] = job.error or "the run failed"


def stopped_banner():
    """What Stop kept, right after it (or nothing)."""
    last = st.session_state.get("last_job") or {}
    if last.get("status") == "stopped":
        kept = last.get("kept") or ""
        if st.session_state.get("run") is None:
            kept = kept.replace("; the previous results are kept", "")
        phase = last.get("stop_phase") or "the run"
        if phase.startswith("waiting for another analyst"):  # the server's queue of runs (app.services.run_admission)
            phase = "the wait for another analyst's run to finish"
        st.warning(
            f"Stopped by you during {esc(phase)}: {esc(kept)}.",
            icon=":material/stop_circle:",
        )


# ---------------------------------------------------------------------------------------------------
# live view
# ---------------------------------------------------------------------------------------------------
def progress_of(history: list, alpha: float, max_rounds: int | None) -> float:
    """How far the largest mean violation has come down to alpha, on a log scale (0..1)."""
    if not history:
        return 0.0
    v0 = float(history[0].get("max_mean_violation") or 0.0)
    v = float(history[-1].get("max_mean_violation") or 0.0)
    frac = 1.0 if v0 <= alpha or v <= alpha else max(0.0, math.log(v0 / v) / math.log(v0 / alpha))
    if max_rounds:
        frac = max(frac, history[-1]["round"] / max_rounds)
    return float(min(frac, 0.99))


def _convergence_fig(history, alpha: float, beta: float | None, kept_round=None):
    """``beta`` None: a mean-only model (a classifier, or k = 1), drawn without the moment panel."""
    from app.figures.convergence import convergence_figure

    return convergence_figure(history, alpha, beta, 1 / alpha**2 - 1, kept_round=kept_round)


def _job_thresholds(job, settings) -> tuple[float, float | None] | None:
    t = job.thresholds or {}
    a = t.get("alpha", settings.alpha)
    b = t.get("beta", settings.beta)
    if isinstance(a, str) or isinstance(b, str):
        return None
    if "moment_betas" in t and not t["moment_betas"]:  # the fit plans no moment (a classifier, or k = 1)
        return float(a), None
    return float(a), float(b)


CHART_EVERY = 3.0  # seconds between two redraws of the live chart (the progress line updates every POLL_SECONDS)


def stopping_text(job) -> str:
    """What Stop keeps, as soon as the job has seen the flag (before its last bookkeeping is done)."""
    phase = job.stop_phase or job.phase
    if phase.startswith("waiting for another analyst"):  # in the server's queue of runs (app.services.run_admission)
        kept = "; the previous results are kept" if st.session_state.get("run") is not None else ""
        return f"Stopped by you while the run waited for another analyst's run to finish: nothing was fitted{kept}."
    if phase.startswith("fitting the base model") or phase.startswith("preparing") or phase == "starting":
        kept = "; the previous results are kept" if st.session_state.get("run") is not None else ""
        return f"Stopped by you during {phase}: nothing was fitted{kept}."
    if phase.startswith("auditing"):
        return "Stopped by you during the audit: the fitted model is kept, not audited."
    rnd = job.history[-1]["round"] if job.history else 0
    return (
        f"Stopped by you at round {rnd} of the descent: the model after round {rnd} is kept (not audited); "
        "its intervals are being calibrated, then it appears below."
    )


LIVE_POINTS = 300  # rounds drawn in the live chart (the paper's step makes thousands; the final chart has all)


def thin(hist: list, n: int = LIVE_POINTS) -> list:
    """At most ``n`` rows of the history, evenly spread, first and last kept (a cheap figure to build and send)."""
    if len(hist) <= n:
        return hist
    import numpy as np

    idx = np.unique(np.linspace(0, len(hist) - 1, n).astype(int))
    return [hist[i] for i in idx]


def _live_chart(job, hist, thr):
    """The convergence chart, rebuilt (at most once per tick of its fragment) in a helper thread. Building the
    Plotly figure takes 0.2-0.5 s, and a click on Stop waits for the fragment run in progress (Streamlit does not
    preempt one fragment run with another): built in the tick, it delayed the stopped banner by as much."""
    ss = st.session_state
    live = ss.get("_live_fig")
    if live is None or live.job_id != job.id:
        live = ss["_live_fig"] = _LiveFigure(job.id)
    live.refresh(hist, thr)
    if live.fig is not None:
        st.plotly_chart(live.fig, width="stretch", key="live_chart")


class _LiveFigure:
    """The latest live figure of one job and the thread building the next one (plain attributes: the thread never
    touches Streamlit or the session)."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self.fig = None
        self.rows = -1
        self._thread: threading.Thread | None = None

    def refresh(self, hist: list, thr):
        if (self._thread is not None and self._thread.is_alive()) or len(hist) == self.rows:
            return
        self.rows = len(hist)
        args = (thin(hist), thr, best_round_so_far(hist))
        self._thread = threading.Thread(target=self._build, args=args, name="mmc-live-chart", daemon=True)
        self._thread.start()  # the figure is shown from the next tick on

    def _build(self, hist, thr, kept):
        self.fig = _convergence_fig(hist, *thr, kept_round=kept)


def best_round_so_far(hist: list) -> int | None:
    """The round a stop now would keep: the lowest held-out squared error so far (the earliest on ties), marked
    on the live chart; None without held-out rows. (With a given alpha or beta the fit keeps the best among the
    rounds meeting it: the same round once the descent has met it.)"""
    scored = [(h["holdout_mse"], i) for i, h in enumerate(hist) if h.get("holdout_mse") is not None]
    return int(hist[min(scored)[1]]["round"]) if scored else None


def _live_body():
    from app.services.jobs import debug as _debug

    _debug("fragment tick")
    ss = st.session_state
    job = ss.get("job")
    if job is None or not job.running:
        finalize()
        st.rerun()  # leave the fragment: redraw the whole page with the result
        return
    if job.stop_requested and job.stop_seen():
        return  # the Stop box says what is kept; the page redraws with the result when the job is done
    settings = job.settings
    hist = list(job.history)
    last = hist[-1] if hist else None
    thr = _job_thresholds(job, settings)
    alpha = thr[0] if thr else None
    frac = progress_of(hist, alpha, settings.max_rounds) if alpha else 0.0
    if last is not None:
        text = (
            f"{job.phase} · round {last['round']} · largest mean violation {last['max_mean_violation']:.3g} "
            f"(target < α = {alpha:.3g}) · {last['violating_cells']} violating cells · "
            f"{count(last['mean_updates'], 'mean update')} · {job.elapsed:.1f} s"
        )
    else:
        text = f"{job.phase} · {job.elapsed:.1f} s"
    if job.phase.startswith("auditing"):
        frac = 0.99
        done = int(hist[-1].get("round", len(hist) - 1)) if hist else 0  # the history starts at round 0
        text = f"Fit finished after {count(done, 'round')} · {job.phase} · {job.elapsed:.1f} s"
    elif job.stop_requested:
        text = "Stopping… " + text
    st.progress(frac, text=text)
    st.caption("The chart redraws while the fit runs. You can switch pages; the fit continues in the background.")


def _chart_box():
    """The live chart, a fragment of its own on a slower timer: the browser takes 0.1-0.4 s (loaded) to draw the
    Plotly figure each time it is sent, and while it draws it handles neither a click nor the banner."""
    job = st.session_state.get("job")
    if job is None or not job.running or job.stop_requested:
        return
    thr = _job_thresholds(job, job.settings)
    if thr:
        _live_chart(job, list(job.history), thr)


def _stop_box():
    """The Stop button, and once it is pressed, what is kept. A fragment of its own, without a timer: a click
    reruns only this small box, and the live view's ticks (another fragment) neither delay its banner nor clear
    it. With the button inside the ticking fragment, a tick requested while the click was handled replaced the
    click's output, and the banner waited for a later tick or the full-page redraw (about a second, loaded)."""
    job = st.session_state.get("job")
    if job is None:
        return
    if not job.stop_requested:
        st.button(
            "Stop",
            key="stop_run",
            type="secondary",
            icon=":material/stop_circle:",
            on_click=_press_stop,  # before this box is drawn again: the banner replaces the button
            args=(job,),
            help="Ends the run at its next check: within a second in the descent; a step that checks no flag (a "
            "large table's setup before the descent, the interval calibration) finishes first, which took about 10 s "
            "with 300,000 rows and 964 groups. During the base-model fit nothing is kept; during the descent "
            "or the audit the model fitted so far is kept (marked 'not converged'), not audited.",
        )
        return
    # The flag is seen before the next update of the descent (tens of ms), at once elsewhere (FitJob.stop); a
    # short wait lets the banner name the round the run stopped at. Not longer: in a step that polls no flag
    # (the interval calibration after the descent) the banner must not wait for the step.
    deadline = (job.stop_requested_at or 0.0) + 0.25
    while job.running and not job.stop_seen() and time.time() < deadline:
        time.sleep(0.02)
    st.warning(stopping_text(job), icon=":material/stop_circle:")


def _press_stop(job):
    from app.services.jobs import debug as _debug

    _debug(f"stop clicked in phase {job.phase!r}")
    job.stop()
    _debug(f"job status {job.status}, stop seen {job.stop_seen()}")


def live_view():
    st.fragment(_stop_box)()
    st.fragment(run_every=POLL_SECONDS)(_timed_live_body)()
    st.fragment(run_every=CHART_EVERY)(_chart_box)()


def _timed_live_body():
    """A tick, with its duration in the MMC_DEBUG_TIMING notes: a click on Stop waits for the tick in progress."""
    from app.services.jobs import debug as _debug

    t0 = time.perf_counter()
    try:
        _live_body()
    finally:
        _debug(f"fragment tick took {time.perf_counter() - t0:.3f} s")


# ---------------------------------------------------------------------------------------------------
# page
# ---------------------------------------------------------------------------------------------------
def split_summary(d) -> dict | None:
    """Row counts of the split with the current settings (or None if the settings are invalid)."""
    from app.services.pipeline import split_rows
    from mmc_core.common import MMCError

    try:
        sp = split_rows(
            d["rows"], state.split_spec(), state.base_spec().kind == "model", state.fit_settings().calibration_fraction
        )
    except MMCError:
        return None
    from app.services.specs import binary_values

    n_cal = sp["calibration"].size
    # the held-out rows choose the kept round and judge the base map and the cells; a regression's also
    # calibrate the intervals (a classifier has none: "interval calibration" there was a leftover)
    binary = binary_values(d["df"], st.session_state.get("label_col")) is not None
    return {
        "base-model training": sp["base"].size,
        "multicalibration fitting": sp["fit"].size - n_cal,
        ("held out (early stopping, checks)" if binary else "held out (checks, interval calibration)"): n_cal,
        "test (audit)": sp["test"].size,
    }


def render():
    ss = st.session_state
    finalize()
    d = page_start(
        "Run the audit",
        "Set the thresholds, press **Run**, and watch the alternating descent drive every group's cells "
        "below them. The fitted model and its audit stay available on the other pages.",
    )
    if d is None:
        return
    left, right = st.columns([3, 2], gap="large")
    with left:
        settings_form(d)
    settings = state.fit_settings()
    lab = table_facts.label_summary(d["df"], d["key"], state.label_spec())
    sizes = split_summary(d)
    with right:
        st.markdown("##### What these settings imply")
        n_fit = sizes["multicalibration fitting"] if sizes else 0
        lo, hi = (lab.get("lo"), lab.get("hi")) if "error" not in lab else (None, None)
        n_groups = len(ss.get("groups") or []) + 1
        preview = table_facts.threshold_preview(
            d["df"],
            d["key"],
            state.label_spec(),
            state.base_spec(),
            state.split_spec(),
            n_groups,
            settings,
            json.dumps(_groups_json(), sort_keys=True),
        )
        from app.services.specs import binary_values

        if binary_values(d["df"], ss.get("label_col")) is not None:  # a classifier fits the mean only (k = 1)
            settings = dataclasses.replace(settings, n_moments=1)
        for line in implications(settings, n_fit, n_groups, lo, hi, esc(state.units()), preview):
            st.markdown(f"- {line}")
        if sizes:
            st.markdown("**Rows:** " + " · ".join(f"{k} {v:,}" for k, v in sizes.items() if v))
        if "error" in lab:
            st.error(esc(label_error(state.in_file_rows(lab["error"], d))))
    job = ss.get("job")
    running = job is not None and job.running
    b1, b2 = st.columns([1, 4])
    with b1:
        clicked = st.button(
            "Run", key="run_btn", type="primary", icon=":material/play_arrow:", disabled=running, width="stretch"
        )
    with b2:
        st.caption(
            f"{esc(d['name'])}: label **{esc(ss.get('label_col'))}**, {len(ss.get('groups') or []) + 1} groups, "
            f"base: {ss['base_kind']}."
        )
    if clicked:
        job = run_now(sync=False)
        running = job is not None and job.running
    if running:
        live_view()
        return
    stopped_banner()
    if ss.get("run_error"):
        st.error(f"The run failed: {esc(state.in_file_rows(ss['run_error']))}", icon=":material/error:")
        detail = (ss.get("last_job") or {}).get("detail")
        if detail:  # for the developer: the server log, never the page
            import sys

            print(detail, file=sys.stderr)
            ss["last_job"]["detail"] = ""
    run = ss.get("run")
    if run is None:
        st.info("No model yet: press **Run**.")
        return
    show_run_summary(run)


if __name__ == "__main__":
    render()

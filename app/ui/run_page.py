"""Run page: parameters with what they imply, the Run button, a live convergence chart and a Stop button.

Why one module of ~560 lines: Streamlit executes a page file as a whole, and its parts (the settings form, the
implications of the parameters, the live fragment, starting and finishing the job) share the page's
session-state keys; the work it starts lives in :mod:`app.pipeline` and :mod:`app.jobs`.

How the live view works: Run starts :class:`app.jobs.FitJob` (in a forked worker process). The page then draws
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
import time

import pandas as pd
import streamlit as st

from app.jobs import FitJob
from app.specs import STEP_HELP, count, descent_thresholds, kept_model_text, missed_reason
from app.ui import state
from app.ui.common import esc, show_fit_notes, label_error
from app.ui.widgets import job_inputs, outcome, running_job, page_start, start_job, take_finished

POLL_SECONDS = 1.0  # seconds between two ticks of the live view (each costs the browser 50-200 ms, loaded)
WORKER = os.environ.get("MMC_WORKER", "process")  # background runs in a forked process ("thread": in-process)
RULES = {"se": "standard-error test per cell (default)", "auto": "noise threshold (previous rule)"}
ALPHAS = [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1]
BETAS = [1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05]


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
            from app.compare_service import remember

            ss["past_runs"] = remember(ss.get("past_runs") or [], prev)  # the Compare page's other side
        ss["run"] = run
        for k in ("export_pdf", "export_pdf_error", "export_csv", "export_model", "export_groups", "export_audit"):
            ss.pop(k, None)
        ss.pop("run_error", None)
    elif job.status == "stopped":
        ss.pop("run_error", None)  # nothing fitted: the previous run (if any) stays
    else:
        ss["run_error"] = job.error or "the run failed"


def bring_back_run_before_stop():
    """The Run page's button after a Stop: the last complete (audited) run back in place of the stopped one."""
    ss = st.session_state
    prev = ss.pop("run_before_stop", None)
    if prev is not None:
        ss["run"] = prev
        for k in ("export_pdf", "export_pdf_error", "export_csv", "export_model", "export_groups", "export_audit"):
            ss.pop(k, None)


def audit_kept_model():
    """Audit a stopped run's model (the Stop skipped the audit)."""
    from app.pipeline import audit_run

    ss = st.session_state
    run, d = ss.get("run"), state.data()
    if run is None or d is None or d["key"] != run.data_key:
        return
    audit_run(run, d["df"])
    units = state.units()
    if units and run.audit is not None and isinstance(getattr(run.audit, "params", None), dict):
        run.audit.params["label_units"] = units
    run.finished_at = time.time()  # new figures
    for k in ("export_pdf", "export_pdf_error", "export_csv", "export_audit"):
        ss.pop(k, None)


def stopped_banner():
    """What Stop kept, right after it (or nothing)."""
    last = st.session_state.get("last_job") or {}
    if last.get("status") == "stopped":
        kept = last.get("kept") or ""
        if st.session_state.get("run") is None:
            kept = kept.replace("; the previous results are kept", "")
        st.warning(
            f"Stopped by you during {esc(last.get('stop_phase') or 'the run')}: {esc(kept)}.",
            icon=":material/stop_circle:",
        )


# ---------------------------------------------------------------------------------------------------
# implications of the parameters
# ---------------------------------------------------------------------------------------------------
def implications(
    settings, n_rows: int, n_groups: int, lo: float | None, hi: float | None, units: str, preview: dict | None = None
) -> list:
    """Plain-language consequences of the parameters, as markdown bullet strings. With "auto" thresholds,
    ``preview`` holds the values the run will use (None: known only once the base model is fitted)."""
    m, k, g = settings.n_buckets, settings.n_moments, settings.gamma
    if "se" in (settings.alpha, settings.beta) and settings.step == "exact":
        return se_implications(settings, n_groups, lo, hi, units, preview)
    # with the paper's step an "se" threshold is the "auto" noise rule (the per-cell test needs the exact step)
    auto = any(v in ("auto", "se") for v in (settings.alpha, settings.beta))
    if auto and not preview:
        return [
            ("**Thresholds α, β: automatic.** They are" if k >= 2 else "**Threshold α: automatic.** It is")
            + " set just above the sampling noise of the fitting rows once the base model's residuals are known "
            "(at the start of the run); the run summary shows " + ("them." if k >= 2 else "it."),
            f"**Buckets:** m = {m} per predictor; **moments:** 2..{k}" if k >= 2 else f"**Buckets:** m = {m}.",
        ]
    a = float(preview["alpha"]) if auto else float(settings.alpha)
    b = float(preview["beta"]) if auto else float(settings.beta)
    span = (hi - lo) if (lo is not None and hi is not None and hi > lo) else None
    u = f" {units}" if units else ""
    out = []
    if auto:
        out.append(
            f"**Automatic thresholds** for this data: α = **{a:.3g}**"
            + (f", β = **{b:.3g}**" if k >= 2 else "")
            + " (just above the sampling noise of a cell with 5% of the fitting rows, so the descent does not chase "
            "noise)."
        )
    err = a / g
    txt = f"**Mean, per cell:** error ≤ α / P(S). For a group of mass γ = {g:g}: ≤ {err:.3g} on the [0, 1] scale"
    if span:
        txt += f" = **{err * span:.3g}{u}**"
    out.append(txt + "; for the whole population ≤ " + (f"{a * span:.3g}{u}." if span else f"{a:g}."))
    if k >= 2:
        vb = (b + 2 * a) / g + 2 / m
        txt = (
            f"**Variance, per cell:** the paper's worst case is (β + 2α) / P(S) + 2/m = {vb:.3g} on the [0, 1]² "
            "scale for a γ-mass group (the 2/m comes from conditioning on mean buckets)"
        )
        if span:
            txt += f", i.e. {vb * span**2:,.4g}{u}²" if u else f", i.e. {vb * span**2:,.4g} label units²"
        out.append(txt + ". The Results page shows the errors actually reached.")
    out.append(
        f"**Iterations:** at most 1/α² − 1 = **{1 / a**2 - 1:,.0f}** mean updates"
        + (
            f", each followed by at most (k − 1)(1/β² − 1) = {(k - 1) * (1 / b**2 - 1):,.0f} moment updates."
            if k >= 2
            else "."
        )
    )
    bw = f"{span / m:.3g}{u}" if span else f"{1 / m:.3g} of the range"
    cells = n_groups * m + (n_groups * m * m * (k - 1) if k >= 2 else 0)
    out.append(f"**Buckets:** m = {m} mean buckets, each {bw} wide; {n_groups} groups give {cells:,} cells to audit.")
    if n_rows and not auto:
        # sampling noise of a gamma-mass cell's mass-weighted residual, for a label SD of about 0.15 on [0, 1]
        noise = 2 * 0.15 * math.sqrt(g) / math.sqrt(n_rows)
        if a < noise:
            es_on = settings.early_stopping is True or (
                settings.early_stopping == "auto" and float(settings.calibration_fraction) > 0
            )
            advice = (
                "Raise α; early stopping (on) keeps the round that does best on the held-out rows, which limits "
                "the damage."
                if es_on
                else "Raise α or turn on early stopping."
            )
            out.append(
                f"⚠️ With {n_rows:,} fitting rows, α = {a:g} is below the sampling noise of a γ-mass cell "
                f"(≈ {noise:.2g}): the descent will partly fit noise. {advice}"
            )
    return out


SE_RULE_TEXT = (
    "**Thresholds: the per-cell standard-error test** (the library default, as `mmc fit`). A cell is "
    "corrected only when its mean residual is at least z of *its own* standard errors from 0 "
    "(Bonferroni at family-wise level 0.1 over every audited cell) and it has enough fitting rows, so "
    "the descent does not chase noise."
)


def se_implications(
    settings, n_groups: int, lo: float | None, hi: float | None, units: str, preview: dict | None
) -> list:
    """The "se" rule in plain words, with the z and the smallest correctable error the estimator computes
    (``preview`` from :func:`app.pipeline.planned_thresholds`; None: known once the base model is fitted)."""
    m, k = settings.n_buckets, settings.n_moments
    out = [SE_RULE_TEXT]
    span = (hi - lo) if (lo is not None and hi is not None and hi > lo) else None
    u = f" {units}" if units else ""
    if not preview or preview.get("rule") != "se":
        out.append(
            "The test's z and the smallest error it corrects are computed at the start of the run (they need "
            "the base model's residuals); the run summary shows them."
        )
    else:
        z, nf, sd = preview["z"], max(int(preview["n_fit"]), 1), float(preview["resid_sd"])
        out.append(
            f"**z = {z:.2f}** for cells (group × bucket), **z = {preview['z_group']:.2f}** for whole groups; "
            f"cells with fewer than {preview['min_count']} fitting rows are never corrected."
        )
        parts = []
        min_rows = int(preview["min_count"])
        sizes = [(min_rows, f"the smallest corrected size, {min_rows} rows")]
        for share, what in ((0.05, "5% of the fitting rows"), (settings.gamma, f"γ = {settings.gamma:g} of them")):
            # a share below the smallest corrected size is never corrected: no error to quote for it
            if share * nf >= min_rows + 0.5 and all(abs(share * nf - r) > 0.5 for r, _ in sizes):
                sizes.append((max(int(round(share * nf)), 1), f"{what} ({max(int(round(share * nf)), 1):,} rows)"))
        for rows, what in sizes:
            d = z * sd / math.sqrt(max(rows, 1))
            parts.append(
                f"a cell of {what}: ±{d * span:.3g}{u}" if span else f"a cell of {what}: ±{d:.3g} of the label range"
            )
        out.append(
            "**Smallest mean error corrected** (z × residual SD / √rows, with the residual SD of all "
            f"{nf:,} fitting rows): " + "; ".join(parts) + ". Smaller errors are left as noise."
        )
        out.append(
            f"After the fit, the {'α and β' if k >= 2 else 'α'} shown are the values the kept model *achieves* on "
            "the fitting rows (every cell's mass-weighted error is below them), so the paper's guarantees hold with "
            "them."
        )
    out.append(
        f"**Buckets:** m = {m} per predictor; **moments:** " + ("the variance" if k == 2 else f"2..{k}")
        if k >= 2
        else f"**Buckets:** m = {m}; mean only."
    )
    if settings.early_stopping == "auto":
        out.append(
            "**Early stopping:** on (the round with the lowest held-out squared error is kept)."
            if settings.calibration_fraction > 0
            else "**Early stopping:** off (no rows are held out)."
        )
    return out


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
    from app.figures_convergence import convergence_figure

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
        self._thread = None

    def refresh(self, hist: list, thr):
        import threading

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
    from app.jobs import debug as _debug

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
    from app.jobs import debug as _debug

    _debug(f"stop clicked in phase {job.phase!r}")
    job.stop()
    _debug(f"job status {job.status}, stop seen {job.stop_seen()}")


def live_view():
    st.fragment(_stop_box)()
    st.fragment(run_every=POLL_SECONDS)(_timed_live_body)()
    st.fragment(run_every=CHART_EVERY)(_chart_box)()


def _timed_live_body():
    """A tick, with its duration in the MMC_DEBUG_TIMING notes: a click on Stop waits for the tick in progress."""
    from app.jobs import debug as _debug

    t0 = time.perf_counter()
    try:
        _live_body()
    finally:
        _debug(f"fragment tick took {time.perf_counter() - t0:.3f} s")


# ---------------------------------------------------------------------------------------------------
# page
# ---------------------------------------------------------------------------------------------------
def _fmt_alpha(v: float) -> str:
    return f"{v:g}"


def _bucket_note(d):
    """What "auto" buckets mean for this label, in one line."""
    from app.specs import label_skewness, mean_bucket_rule

    s = state.settings()
    if d is None or not s.label_col or s.label_col not in d["df"].columns:
        return
    y = pd.to_numeric(d["df"][s.label_col], errors="coerce").to_numpy(dtype=float)
    if s.p_mb == "auto":
        rule = mean_bucket_rule("auto", y)
        st.caption(
            f"For this label (skewness {label_skewness(y):.2f}): {rule} buckets"
            + (" (a uniform bucket would hold most of the rows of a skewed label)." if rule == "quantile" else ".")
        )


def settings_form(d):
    ss = st.session_state
    from app.ui.binary_results import run_page_note  # binary labels: which settings apply

    run_page_note(d)
    for key, opts in (("p_alpha", ALPHAS), ("p_beta", BETAS)):
        if ss.get(key) not in opts:
            ss[key] = min(opts, key=lambda o: abs(math.log(o) - math.log(max(float(ss.get(key) or 1e-3), 1e-9))))
    st.toggle(
        "Automatic thresholds α, β (recommended)",
        **state.bind("p_auto"),
        help="Corrects a cell only when its error is beyond its sampling noise. Reusing one sample for every "
        "audit overfits when the thresholds are below the noise level; the automatic rules avoid that. "
        "Turn it off to set α and β yourself.",
    )
    manual = not ss["p_auto"]
    if not manual:
        st.radio(
            "Automatic rule",
            list(RULES),
            **state.bind("p_rule"),
            format_func=lambda r: RULES[r],
            horizontal=True,
            help="se: each cell is tested against its own standard error (the library's and `mmc fit`'s "
            "default). noise threshold: one mass-weighted threshold just above the noise of a 5%-mass "
            "cell (the dashboard's rule before; it can understate group variances).",
        )
        if ss.get("p_rule") == "auto":
            st.caption(
                "The noise-threshold rule is the previous default (kept so older recipes repeat their "
                "audit); the standard-error test is now the default."
            )
    c1, c2 = st.columns(2)
    with c1:
        if manual:
            st.select_slider(
                "α: mean threshold (mass-weighted)",
                options=ALPHAS,
                **state.bind("p_alpha"),
                format_func=_fmt_alpha,
                help="A cell S is flagged when P(S)·|mean residual over S| ≥ α. Smaller α = finer "
                "calibration, more updates (at most 1/α² − 1).",
            )
        st.slider(
            "m: buckets per predictor",
            2,
            40,
            **state.bind("p_m"),
            help="Level sets of the mean (and of each moment) prediction. More buckets = finer conditioning, "
            "smaller cells.",
        )
        st.radio(
            "Mean buckets",
            ["auto", "uniform", "quantile"],
            **state.bind("p_mb"),
            format_func={
                "auto": "auto: quantile when the label is skewed",
                "uniform": "uniform: equal widths of the prediction",
                "quantile": "quantile: equal shares of the rows",
            }.get,
            horizontal=False,
        )
        _bucket_note(d)
        st.radio(
            "Step rule",
            ["exact", "paper"],
            **state.bind("p_step"),
            format_func=lambda s: STEP_HELP[s],
            horizontal=False,
        )
        st.checkbox(
            "Discover groups during the fit",
            **state.bind("p_disc"),
            help="As `mmc fit --discover`. After fitting, the learning oracle audits the model on the fitting rows (search and check "
            "halves); sets with a significant error become groups and the model is refitted (at most "
            "twice). Features, depth and smallest group: Groups page, tab 'Discover groups'.",
        )
        if ss.get("p_disc"):
            feats = state.settings().disc_features or []
            if feats:
                st.caption("Rules on: " + esc(", ".join(map(str, feats))) + ".")
            else:
                st.warning("Choose the features for discovery on the Groups page (tab 'Discover groups').")
    with c2:
        if manual:
            st.select_slider(
                "β: moment threshold (mass-weighted)",
                options=BETAS,
                **state.bind("p_beta"),
                format_func=_fmt_alpha,
                help="Same test for the pseudo-moments (y − μ(x))^a within each (mean bucket, moment bucket) cell.",
            )
        from app.specs import binary_values

        st.selectbox(
            "k: moments fitted",
            [1, 2, 3, 4],
            **state.bind("p_k"),
            # a classifier fits the probability only (the note above says so): the choice is not offered
            disabled=binary_values(d["df"], ss.get("label_col")) is not None,
            format_func=lambda k: {
                1: "1: mean only (plain multicalibration)",
                2: "2: mean and variance",
                3: "3: + third absolute moment",
                4: "4: + fourth moment",
            }[k],
            help="Central moments 2..k are fitted. Intervals need at least the variance (k ≥ 2).",
        )
    with st.expander("More settings: held-out rows, stopping, intervals"):
        c3, c4, c5 = st.columns(3)
        with c3:
            st.slider(
                "Held out of fitting for interval calibration (%)",
                0,
                50,
                **state.bind("p_cal"),
                step=5,
                help="The estimator keeps this share of the fitting rows aside: they calibrate the intervals "
                "and track the held-out violation during the run.",
            )
            st.checkbox(
                "Early stopping (keep the round with the best held-out error)",
                **state.bind("p_es"),
                disabled=ss["p_cal"] == 0,
                help="On by default, as in the library (early_stopping='auto'): it needs held-out rows.",
            )
        with c4:
            st.number_input(
                "Cap on rounds (0 = none)",
                min_value=0,
                max_value=100000,
                step=10,
                **state.bind("p_maxr"),
                help="A capped run is reported as not converged.",
            )
            st.selectbox(
                "Odd moments",
                ["absolute", "signed"],
                **state.bind("p_odd"),
                format_func=lambda s: {
                    "absolute": "absolute E|y − μ|^a (usable for intervals)",
                    "signed": "signed E(y − μ)^a",
                }[s],
            )
        with c5:
            for label, key, lo, step, fmt, why in (
                ("δ: interval miscoverage", "p_delta", 0.01, 0.01, "%.2f", "Intervals aim at coverage 1 − δ."),
                (
                    "γ: smallest cell mass covered",
                    "p_gamma",
                    0.001,
                    0.005,
                    "%.3f",
                    "Guarantees (and the audit's marks) cover groups/cells of mass ≥ γ.",
                ),
            ):
                st.number_input(label, min_value=lo, max_value=0.5, step=step, **state.bind(key), format=fmt, help=why)
            st.number_input(
                "Bootstrap resamples for intervals of ratios",
                min_value=0,
                max_value=2000,
                step=50,
                **state.bind("p_nboot"),
            )


def split_summary(d) -> dict | None:
    """Row counts of the split with the current settings (or None if the settings are invalid)."""
    from app.pipeline import split_rows
    from mmc_core.errors import MMCError

    try:
        sp = split_rows(
            d["rows"], state.split_spec(), state.base_spec().kind == "model", state.fit_settings().calibration_fraction
        )
    except MMCError:
        return None
    from app.specs import binary_values

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
    lab = state.label_summary(d["df"], d["key"], state.label_spec())
    sizes = split_summary(d)
    with right:
        st.markdown("##### What these settings imply")
        n_fit = sizes["multicalibration fitting"] if sizes else 0
        lo, hi = (lab.get("lo"), lab.get("hi")) if "error" not in lab else (None, None)
        n_groups = len(ss.get("groups") or []) + 1
        preview = state.threshold_preview(
            d["df"],
            d["key"],
            state.label_spec(),
            state.base_spec(),
            state.split_spec(),
            n_groups,
            settings,
            json.dumps(_groups_json(), sort_keys=True),
        )
        from app.specs import binary_values

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


def thresholds_used_text(info: dict, alpha: float, beta: float, moment_betas: dict, auto: bool) -> str:
    """The caption of a run with given (or "auto") thresholds: the thresholds the descent used and, when the kept
    model misses them (:func:`app.specs.missed_reason`), the values it achieves, which are the ones its
    guarantees are stated with (``alpha``, ``beta``, ``moment_betas``: the model's stated values)."""
    used = info.get("thresholds_used") or {}
    ua = float(used.get("alpha", alpha))
    ubs = {int(a): float(b) for a, b in (used.get("betas") or {}).items()}
    has_moments = bool(ubs) or bool(moment_betas)

    def betas(b2, others) -> str:
        return f", β = {b2:.3g}" + "".join(f", β{a} = {v:.3g}" for a, v in sorted(others.items()) if a != 2)

    text = f"Thresholds used: α = {ua:.3g}" + (betas(ubs.get(2, beta), ubs) if has_moments else "")
    text += " (automatic: just above the sampling noise)." if auto else " (set by you)."
    stated = {2: beta, **{int(a): float(b) for a, b in moment_betas.items()}}
    if alpha > ua or (has_moments and any(stated.get(a, b) > b for a, b in ubs.items())):
        text += (
            f" The kept model does not meet them ({missed_reason(info)}): it achieves α = {alpha:.3g}"
            + (betas(beta, stated) if has_moments else "")
            + " on the fitting rows, and its guarantees are stated with these values."
        )
    return text


def converged_text(info: dict) -> str:
    """The first sentence of a converged run's summary. Round 0 is the moment pass before the first mean audit,
    so a fit whose mean needed no update has 0 rounds but moment updates: said in words, not as "0 rounds"."""
    if not info["rounds"]:
        # not "the mean needed no update": the base map and the cells may still have moved it, and a cell the
        # fitting rows do not show may still be off on fresh ones (the audit's findings say so)
        return (
            "Converged in the first pass: no mean cell was off by more than its threshold on the fitting rows, so "
            f"the descent made no mean update; {count(info['moment_updates'], 'moment update')}."
        )
    return (
        f"Converged in {count(info['rounds'], 'round')} ({count(info['mean_updates'], 'mean update')}, "
        f"{count(info['moment_updates'], 'moment update')}, the first moment pass included)."
    )


def show_run_summary(run):
    ss = st.session_state
    info = run.model.info
    t = run.timings
    from app.ui.common import changed_since_note

    if run.data_key == (state.data() or {}).get("key"):
        changed_since_note(run)  # the label, groups or settings above are not this run's
    if run.stopped:
        audited = run.audit is not None
        rounds = int(info["rounds"] or 0)
        # an early-stopped kept round already says how far the descent ran ("Stopped by you after 20590 rounds:
        # the model of round 432 (...; the descent ran 20590 rounds)")
        says_rounds = info.get("early_stopped") and info.get("kept_round") not in (None, rounds)
        head = (
            "Stopped by you before the first mean update"
            if not rounds
            else "Stopped by you"
            if says_rounds
            else f"Stopped by you after {rounds:,} round{'s' if rounds != 1 else ''}"
        )
        st.warning(
            f"{head}: {kept_model_text(info)} was kept"
            + (" and audited" if audited else " (not audited)")
            + f"; it does **not** reach the {'α, β' if run.model.moments else 'α'} the fit was asked for (its "
            "guarantees hold at the values it achieves, stated below).",
            icon=":material/stop_circle:",
        )
        if not audited:
            st.button(
                "Audit this model now",
                key="audit_kept",
                on_click=audit_kept_model,
                help="Computes the Results page for the stopped model on the test rows (may take a while).",
            )
        before = ss.get("run_before_stop")
        if before is not None:
            st.info(
                f"The previous complete run ({esc(before.data_name)}, "
                f"{sum(g.get('name') != 'all' for g in before.groups_json.get('groups') or [])} groups, audited) is "
                "set aside: the Results page now shows this stopped run.",
                icon=":material/history:",
            )
            st.button("Bring back the previous run", key="run_before_stop_btn", on_click=bring_back_run_before_stop)
    elif run.converged:
        st.success(
            f"{converged_text(info)} Fit {t.get('fit', 0):.2f} s, audit "
            f"{t.get('audit', 0):.2f} s, total {t.get('total', 0):.2f} s.",
            icon=":material/check_circle:",
        )
    else:
        reason = "the round cap was reached" if run.settings.max_rounds else "it was not run to convergence"
        if info.get("early_stopping"):
            reason = f"early stopping kept round {info.get('kept_round')}"
        st.warning(
            f"Not converged: {reason}. ({count(info['rounds'], 'round')}, {count(info['mean_updates'], 'mean update')}.)"
        )
    last = ss.get("last_job") or {}
    if last.get("stop_requested_at") and last.get("stop_seen_at"):
        st.caption(
            f"Stop pressed → the run saw it {last['stop_seen_at'] - last['stop_requested_at']:.2f} s later "
            f"and ended {max(last['ended_at'] - last['stop_requested_at'], 0):.2f} s after the click."
        )
    show_fit_notes(run.model)
    if run.audit_error and not run.stopped:
        st.warning(f"Audit not available: {esc(run.audit_error)}")
    cols = st.columns(4)
    sizes = {k: v.size for k, v in run.split.items()}
    cols[0].metric("Fitting rows", f"{sizes['fit']:,}", help="Rows the descent audited and updated on.")
    xfit = (run.model.extras.get("intervals") or {}).get("rows") == "cross-fit"
    cols[1].metric(
        "Held-out rows",
        f"{sizes['calibration']:,}",
        help="Held out of the descent: they choose the kept round (early stopping), judge the base map and the "
        "cell corrections after the descent (nothing is fitted on them)"
        + (
            "; the intervals are calibrated on every fitting and held-out row, each with a model fitted without it "
            "(5-fold cross-fitting)."
            if xfit
            else " and calibrate the intervals."
        ),
    )
    cols[2].metric("Test rows (audit)", f"{sizes['test']:,}", help="Never used for fitting; every result is on these.")
    cols[3].metric(
        "Base-model rows",
        f"{sizes['base']:,}" if sizes["base"] else "—",
        help="Rows the in-app base model was trained on (not used again).",
    )
    base_t = (
        f"base model fitted in {t['base_model']:.2f} s" if run.base_spec.kind == "model" and "base_model" in t else ""
    )
    st.caption(
        esc(
            " · ".join(
                x
                for x in (run.label.note and f"Label {run.label.name}: {run.label.note}", info.get("base_note"), base_t)
                if x
            )
        )
    )
    kept = info.get("kept_round") if info.get("early_stopping") else None
    th = run.thresholds
    mb = th.get("moment_betas") or {}
    if th.get("rule") == "se":
        st.caption(
            f"Thresholds: per-cell standard-error test, z = {th.get('z', 0):.2f}. The kept model achieves "
            f"α = {run.alpha:.3g}"
            + (f", β = {run.beta:.3g}" if run.model.moments else "")
            + ("".join(f", β{a} = {v:.3g}" for a, v in mb.items() if a != 2))
            + " on the fitting rows (every cell's mass-weighted error is below them)."
        )
    else:
        st.caption(thresholds_used_text(info, run.alpha, run.beta, mb, bool(th.get("auto"))))
    st.plotly_chart(
        _convergence_fig(run.history, *descent_thresholds(run.model), kept), width="stretch", key="final_chart"
    )
    _stages_table(run.model)
    st.page_link("ui/results_page.py", label="See the results", icon=":material/insights:")


def _stages_table(model) -> None:
    """The held-out effect of each stage (mmc_core.stages): the chart above shows the descent only."""
    from mmc_core.stages import stage_rows

    rows = stage_rows(model.info.get("stages"))
    if not rows:
        return
    df = pd.DataFrame(rows).rename(
        columns={
            "stage": "Stage",
            "rmse": "Mean: RMSE",
            "mean_moved": "Mean moved (avg |change|)",
            "variance_error": "Variance: group error",
            "variance_moved": "Variance moved (avg |log change|)",
        }
    )
    with st.expander("What each stage changed (held-out rows)", expanded=True):
        st.dataframe(df, hide_index=True, width="stretch")
        st.caption(
            "Measured on the held-out rows, which none of the stages was fitted on (they chose the kept round and "
            "judged the cell steps). RMSE in the label's units; the variance's group error is the mass-weighted "
            "|log(predicted / observed variance)| over groups with at least 2% of the rows (0.10: about 10% off)."
        )


if __name__ == "__main__":
    render()

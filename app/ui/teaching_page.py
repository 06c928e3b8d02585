"""Teaching mode: the paper's algorithm (fresh samples every audit, the paper's step) on a synthetic
distribution whose truth is known, one audit at a time: step / play / pause / reset."""

from __future__ import annotations

import streamlit as st

from app.ui import state
from app.ui.teaching_figs import (
    POPULATIONS,
    Lesson,
    LessonConfig,
    cells_figure,
    min_rows,
    potential_figure,
    truth_figure,
    two_point_figure,
)
from app.ui.teaching_text import describe

TICK_SECONDS = 0.6


def _config() -> LessonConfig:
    ss = st.session_state
    return LessonConfig(
        alpha=ss["t_alpha"],
        beta=ss["t_beta"],
        m=int(ss["t_m"]),
        delta=1e-3,
        columns=tuple(ss["t_cols"]),
        start=ss["t_start"],
        seed=int(ss["t_seed"]),
        population=ss["t_pop"],
    )


def _lesson() -> Lesson:
    ss = st.session_state
    cfg = _config()
    lesson = ss.get("lesson")
    if lesson is None or lesson.config != cfg:
        lesson = Lesson(cfg)
        ss["lesson"] = lesson
        ss["t_playing"] = False
    return lesson


def setup():
    ss = st.session_state
    for k, v in (
        ("t_pop", "strong"),
        ("t_alpha", 0.02),
        ("t_beta", 0.02),
        ("t_m", 5),
        ("t_cols", ["sex", "race", "age"]),
        ("t_start", "zero"),
        ("t_seed", 0),
        ("t_playing", False),
        ("t_speed", 1.0),
    ):
        ss.setdefault(k, v)
    with st.expander("Set-up (changing anything restarts the lesson)", expanded=False):
        st.radio(
            "Population",
            list(POPULATIONS),
            **state.bind("t_pop"),
            format_func=lambda k: POPULATIONS[k][0],
            horizontal=True,
        )
        c1, c2, c3, c4 = st.columns(4)
        c1.select_slider("α (mean)", [0.02, 0.03, 0.04, 0.05, 0.08], **state.bind("t_alpha"))
        c2.select_slider("β (variance)", [0.01, 0.02, 0.03, 0.04, 0.05], **state.bind("t_beta"))
        c3.slider("m buckets", 2, 10, **state.bind("t_m"))
        c4.number_input("seed", 0, 9999, **state.bind("t_seed"))
        c5, c6 = st.columns(2)
        c5.multiselect("Group columns (each value is a group)", ["sex", "race", "age", "score"], **state.bind("t_cols"))
        c6.radio(
            "Start from",
            ["zero", "mean"],
            **state.bind("t_start"),
            horizontal=True,
            format_func=lambda s: {"zero": "0 (as in the paper)", "mean": "the overall mean and variance"}[s],
        )
        if not ss["t_cols"]:
            st.caption(
                "No group columns: the only group is the whole population, so this is plain calibration of the "
                "mean and variance, not multicalibration. Pick a column to see groups corrected one by one."
            )
        n = min_rows(ss["t_alpha"], ss["t_beta"], 1e-3)
        st.caption(
            f"Each audit draws n = {n:,} fresh rows: the smallest n with 2·√(ln(2/δ)/(2n)) ≤ min(α, β) at "
            "δ = 0.001, the paper's condition for the Chernoff-adjusted auditor (Section 4)."
        )


def _controls(lesson: Lesson):
    ss = st.session_state
    c = st.columns([1, 1, 1, 1, 1, 2])
    if c[0].button("Step", key="t_step", icon=":material/skip_next:", disabled=lesson.done or ss["t_playing"]):
        lesson.step()
    if c[1].button("Step ×10", key="t_step10", disabled=lesson.done or ss["t_playing"]):
        for _ in range(10):
            if lesson.done:
                break
            lesson.step()
    if ss["t_playing"]:
        if c[2].button("Pause", key="t_pause", icon=":material/pause:", type="primary"):
            ss["t_playing"] = False
            st.rerun(scope="app")
    elif c[2].button("Play", key="t_play", icon=":material/play_arrow:", type="primary", disabled=lesson.done):
        ss["t_playing"] = True
        st.rerun(scope="app")
    if c[3].button("Run to end", key="t_end", disabled=lesson.done or ss["t_playing"]):
        with st.spinner("Running to convergence…"):
            lesson.run_for(60.0, max_steps=5000)
    if c[4].button("Reset", key="t_reset", icon=":material/restart_alt:"):
        ss["lesson"] = Lesson(lesson.config)
        ss["t_playing"] = False
        st.rerun(scope="app")
    c[5].select_slider(
        "Play speed (seconds of computing per frame)",
        [0.1, 0.25, 0.5, 1.0],
        **state.bind("t_speed"),
        label_visibility="collapsed",
        format_func=lambda s: f"{s:g} s of audits per frame",
    )


def _body():
    ss = st.session_state
    lesson = _lesson()
    if ss.get("t_playing"):
        if lesson.done:
            ss["t_playing"] = False
            st.rerun(scope="app")
        lesson.run_for(float(ss.get("t_speed", 0.25)))
    _controls(lesson)
    fd = lesson.fd
    k = st.columns(5)
    k[0].metric("Audits (fresh samples)", f"{fd.audits:,}", help=f"{fd.audits * fd.n:,} rows drawn in total")
    k[1].metric("Mean updates", f"{fd.mean_updates:,}", help="cells moved by ±α")
    k[2].metric("Bound 1/α² − 1", f"{lesson.config.alpha**-2 - 1:,.0f}")
    k[3].metric("Variance updates", f"{fd.moment_updates:,}")
    dphi = lesson.phi() - lesson.phi0
    k[4].metric(
        "Potential Φ",
        f"{lesson.phi():.4f}",
        delta=f"{dphi:+.4f} since start" if abs(dphi) > 1e-12 else None,
        delta_color="inverse",
        help="E[(μ(x) − E[y|x])²] on the [0, 1] scale, exactly over the population",
    )
    status = "converged" if lesson.done else ("playing" if ss.get("t_playing") else "paused")
    st.markdown(describe(lesson.last, lesson) + f"  \n*Status: {status}; {lesson.seconds:.1f} s of computing.*")
    left, right = st.columns(2, gap="medium")
    with left:
        st.plotly_chart(cells_figure(lesson, lesson.last), width="stretch", key="t_cells")
    with right:
        st.plotly_chart(potential_figure(lesson), width="stretch", key="t_potential")
    st.plotly_chart(truth_figure(lesson), width="stretch", key="t_truth")
    st.caption(
        "Tan bars: the tolerance of the auditor's test at this sample size, around the truth (α / P(cell) "
        "plus the sampling slack of Section 4, averaged over the group's cells). A converged prediction lies "
        "inside its bar; small groups get wide bars. Lower α and β (more rows per audit) narrow them."
    )
    if lesson.done:
        st.info(
            "Φ does not reach 0, and that is expected: multicalibration only asks the predictions to be right "
            "*on average over every cell of every group*, within α / P(cell). Rows that no group (or mean "
            "bucket) tells apart, here different scores, share one prediction. The variance predictor measures "
            "the spread of y around the model's own mean, which includes what the mean cannot resolve: compare "
            "the green ✕ (true Var(y|x)) with the diamonds (its target)."
        )


def render():
    st.title("Teaching mode: watch multicalibration happen")
    st.markdown(
        "A synthetic population with a **known truth** (outcome 0–100 given sex, race, age and a score). The "
        "algorithm is the paper's *AlternatingGradientDescent* in its finite-sample form: every audit draws a "
        "**fresh sample**, the auditor looks for a cell (group × mean bucket, or group × mean bucket × variance "
        "bucket) whose error is too large, and the update moves the prediction on that cell by α (mean) or "
        "β (variance)."
    )
    setup()
    playing = bool(st.session_state.get("t_playing"))
    st.fragment(run_every=TICK_SECONDS if playing else None)(_body)()
    st.divider()
    st.subheader("Why the variance is conditioned on the mean")
    st.markdown(
        "We cannot ask that “among rows where we predict variance v, the labels have variance v”: the *true* "
        "predictors fail that test. Take two kinds of rows, x₁ always with y = 0 and x₂ always with y = 1, half "
        "each. The true variance is 0 for both, yet the labels of all rows with predicted variance 0 have "
        "variance 1/4. So the paper audits **pseudo-moments** (y − μ(x))² inside cells that fix the predicted mean "
        "*and* the predicted variance: there the truth passes, and a calibrated pair (μ, m₂) says something real "
        "about each group."
    )
    st.plotly_chart(two_point_figure(), width="stretch", key="t_twopoint")


if __name__ == "__main__":
    render()

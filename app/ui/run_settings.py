"""The Run page's settings form: every fit parameter as a widget bound to the session state
(:func:`app.ui.state.bind`), laid out in the page's left column by :func:`app.ui.run_page.render`.
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from app.services.specs import STEP_HELP
from app.ui import state
from app.ui.common import esc

RULES = {"se": "standard-error test per cell (default)", "auto": "noise threshold (previous rule)"}
ALPHAS = [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1]
BETAS = [1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05]


def _fmt_alpha(v: float) -> str:
    return f"{v:g}"


def _bucket_note(d):
    """What "auto" buckets mean for this label, in one line."""
    from app.services.specs import label_skewness, mean_bucket_rule

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
    """The Run page's settings: thresholds (automatic or chosen), buckets, step rule, discovery and moments, and the
    held-out rows, stopping and interval settings under "More settings"."""
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
        _automatic_rule()
    c1, c2 = st.columns(2)
    with c1:
        _mean_settings(d, manual)
    with c2:
        _moment_settings(d, manual)
    _more_settings()


def _automatic_rule():
    """Which automatic rule sets the thresholds (the standard-error test or the older noise threshold)."""
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
    if st.session_state.get("p_rule") == "auto":
        st.caption(
            "The noise-threshold rule is the previous default (kept so older recipes repeat their "
            "audit); the standard-error test is now the default."
        )


def _mean_settings(d, manual: bool):
    """The left column: α (when chosen by hand), buckets, the step rule and discovery."""
    ss = st.session_state
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


def _moment_settings(d, manual: bool):
    """The right column: β (when chosen by hand) and the number of moments fitted."""
    ss = st.session_state
    if manual:
        st.select_slider(
            "β: moment threshold (mass-weighted)",
            options=BETAS,
            **state.bind("p_beta"),
            format_func=_fmt_alpha,
            help="Same test for the pseudo-moments (y − μ(x))^a within each (mean bucket, moment bucket) cell.",
        )
    from app.services.specs import binary_values

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


def _more_settings():
    ss = st.session_state
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

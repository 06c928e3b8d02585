"""Prediction intervals from a fitted model (Section 5 of the paper, its Appendix, and beyond).

Seven methods, all computed by the same code path (:func:`interval_table`) so they can be compared fairly.
Every method returns ``(lower, upper)`` in the label's ORIGINAL units; internally everything runs on the
unit scale and interval ends map back affinely (``lo + span * u``). Interval ends are clipped to the label range
only when that range was declared (every label lies in it, so coverage is unchanged); an observed range is not
clipped (new labels may fall outside it).

``guaranteed``  (thm:ciguarantee). For a usable moment a (even; odd only when the model fits absolute
    central moments, the footnote of Section 5) and the guarantees the descent achieves, alpha' = alpha,
    beta' = beta_a + a alpha (beta_a = the moment's own threshold, the model's beta unless the "auto" rule
    set one per moment), eps = a / m (lem:fine-consist-mean-conditioned-moment-cal), the half-width is

        alpha/gamma + eps + w_mu + ((M_a(x) + eps + beta'/gamma) / delta)^(1/a),   w_mu = 1/m,

    with M_a(x) = m_a(x) + w_a (w_a = the moment grid's bucket width) as in the paper, except in the top
    moment bucket: moment predictions are projected onto [0, 1] but bucketed over [0, r_a], so a cell of
    the top bucket can hold predictions up to 1.0 and its average prediction is only bounded by 1.0; there
    M_a(x) = max(m_a(x) + w_a, 1.0). The numerator is then capped at r_a (the largest a-th absolute central
    moment any [0, 1] label can have, so the true cell moment never exceeds it): a valid and never looser
    bound. The interval covers with probability >= 1 - delta on every cell G(mu, m_a, i, j) of mass >= gamma
    of the distribution the model is multicalibrated on (exactly: the fitting rows; out of sample: up to the
    finite-sample slack of Section 4). These intervals are honest and usually very wide. ``a`` is the usable
    moment with the smallest mean width on the calibration rows (on the predicted rows if the model has none);
    pass ``moment=a`` to fix it.
``plugin``  mu(x) +- (m_a(x) / delta)^(1/a): what exact calibration would give. ``a`` is chosen on the
    held-out calibration rows: the narrowest (mean width) among the moments whose held-out coverage reaches
    1 - delta, else the one with the highest held-out coverage.
``multimoment``  the Appendix's submodular cover: cells G(mu, m_a, i, j) (all usable a, all groups) of mass
    >= gamma are added greedily, each time the one with the smallest increase of the mass-weighted width
    per newly covered mass, until every row is covered; a row's half-width is the largest guaranteed
    half-width among the chosen cells containing it. The population is the rows passed in (the Appendix
    assumes P_X known; the rows at hand stand in for it, so pass the whole table, not a handful of rows).
    Rows that no cell of mass >= gamma contains get the label range [lo, hi]: there is no valid interval
    for them (assumption 3 of the Appendix); :func:`greedy_cover` reports how many.
``calibrated``  beyond the paper, on held-out calibration rows (never the rows the moments were fitted on).
    The signed standardized residual u = (y - mu(x)) / sd(x), sd(x) = sqrt(max(m_2(x), floor)) (``floor`` =
    FLOOR_FRACTION x the calibration rows' mean m_2; a mean-only model uses sd = 1), gets two thresholds, each a
    sum of per-group coefficients over x's groups, and the interval is [mu - max(q_lo(x), 0) sd(x),
    mu + max(q_up(x), 0) sd(x)] (the mean always inside; asymmetric when the residuals are skewed), each end
    taken at least as far as at every larger grid delta (nested in delta). Dividing by the multicalibrated sd
    makes the interval adapt within a group: two rows of one group get different widths when their predicted
    variances differ.

    Default approach ``cc`` (:func:`fit_conditional`): conditional conformal prediction over the class of
    group indicators (Gibbs, Cherian & Candes, "Conformal prediction with conditional guarantees"), with a
    per-group margin. One two-sided score s = max(u / a_up, -u / a_lo) (a_up, a_lo: the pooled (1 - delta/2)-
    quantiles of u and -u, so one threshold gives an asymmetric interval) and a threshold t(x) = sum of theta_g
    over x's groups, fitted as the group-indicator quantile regression in which group g (n_g calibration rows)
    must cover at least

        k_g = min(n_g, ceil((n_g + 1) tau_g)) of its calibration rows,   tau_g = 1 - delta + c sqrt(delta (1 - delta) / n_g),

    c = CC_MARGIN = 0.9: the conformal rank of the sample augmented by a test point counted as a miss in the
    group, raised by c binomial standard errors of the group's own count. Solved for all grid deltas at once by
    one sweep of exact block coordinate steps of the pinball loss (groups in layers of disjoint groups) and a
    final upward-only pass after which the count condition holds for every group.

    What is guaranteed, precisely:
    1. Deterministic, on the calibration rows: every listed group with n_g >= 1 calibration rows has at least
       k_g of them inside its interval (tests/test_intervals_cc.py checks it exactly).
    2. In expectation over the calibration sample and the test point (P(y in C(x) | x in g) >= 1 - delta for
       every group g): this is Gibbs et al.'s theorem for the *exact* augmented fit, in which the test point
       enters the quantile regression with its own score (one fit per test point). We fit once, with the test
       point counted as a miss in every group (the conformal rank in every group), and solve the regression
       approximately; the theorem is therefore not proven for this estimator. It is checked: on a finite-support
       distribution the exact population coverage of every group, averaged over 300 calibration draws, is at
       least 1 - delta (up to 3 Monte Carlo standard errors), and on the protocol (benchmarks/README.md).
       A group with fewer than ceil(1/delta) - 1 calibration rows (k_g = n_g: all its rows covered) is held to
       its calibration rows only; its population coverage is not guaranteed (as for ``mondrian``).
    3. With high probability over the calibration sample (training-conditional): for a group whose threshold is
       constant on it and fitted from its own rows (disjoint groups), P(population coverage of g < 1 - delta)
       = P(Binomial(n_g, 1 - delta) >= k_g), about Phi(-c) = 0.18 at c = 0.9, and
       P(coverage < 1 - delta - x se_g) is about Phi(-(c + x)): with probability ~99% over the calibration draw
       the group's coverage is at least 1 - delta - 1.43 se_g, se_g = sqrt(delta (1 - delta) / n_g). For the
       overlapping groups of an additive threshold this is an approximation (the finite-support test checks
       the first bound with 3 Monte Carlo standard errors; the worst group there exceeded it by 0.03).
    What the margin costs: width grows with c sqrt(delta (1 - delta) / n_g) in coverage units, i.e. most for the
    small groups. Measured in benchmarks/README.md (20 fresh splits of the three bundled tables, both base
    variants): flagged groups 3.8% / 0.53% / 0.39% / 0.25% / 0.11% of the judged ones at c = 0 / 0.75 / 0.9 / 1 /
    1.25, for a mean width of 0.72-0.91 / 0.91-0.96 / 0.93-0.98 / 0.94-0.98 / 0.98-1.05 x Mondrian's, and an
    average group coverage of 0.91-0.92 / 0.93-0.95 / 0.93-0.96 / 0.94-0.96 / 0.94-0.97 (per table).

    ``ridge-cqr`` (:func:`fit_two_sided`, the previous default): per side a ridge-penalized group-additive
    quantile regression (groups borrow strength from the pooled fit), a weak penalty for the groups whose
    cross-fitted miss rate is significantly too high, a conformal shift from the cross-fitted scores (CQR) at the
    level 1 - delta + MARGIN_Z sqrt(delta (1 - delta) / n), and a final patch after which every group's coverage
    on the calibration rows is at least that level minus Z_UNDER binomial standard errors. Narrower than ``cc``
    and with an average coverage nearer 1 - delta, but no per-group margin: more groups under-covered
    (benchmarks/README.md). The symmetric approaches of :func:`fit_threshold` (``gcp``: a multicalibrated
    threshold on |u| by significance-gated coordinate steps; ``gcp-cv``; ``mondrian-std``; ``mondrian-relaxed``)
    stay selectable (``calibrate(..., approach=...)``; records without ``theta_lower`` predict exactly as
    before, and records of every approach, ridge-cqr ones included, load and predict unchanged).
``split-conformal``  marginal split conformal on |y - base| (the conformal rank ceil((n + 1)(1 - delta))).
``mondrian``  per-group split conformal on |y - base|; a row gets the widest interval among its groups.
    Groups with fewer than ceil(1/delta) - 1 calibration rows have an infinite conformal quantile and are
    skipped (otherwise every row in them would get an infinite interval); their coverage is not guaranteed.
``gaussian``  base +- z_{1 - delta/2} * sd, sd^2 the pooled mean squared residual of the base on the
    calibration rows.

The three baselines are centred on the base prediction when the model was fitted on one, otherwise on the
model's initial constant mean (the fitting rows' label mean): the record says which (``center``).

Calibration record (``model.extras["intervals"]``, written by :func:`calibrate`, validated on use)::

    {"format": "mmc-intervals", "version": 1,
     "n": n_cal,                             # calibration rows
     "deltas": [...],                        # DELTA_GRID: the deltas the data-driven methods are fitted for
     "center": "base" | "constant",
     "moment_quantiles": {"a": [201 quantiles of m_a(x) on the calibration rows, unit scale]},
     "plugin_coverage": {"a": [held-out coverage of the plug-in interval, per delta]},
     "split_conformal": [q or null per delta],            # unit scale; null = infinite
     "mondrian": {"n": [rows per group], "q": [[q or null per delta] per group]},
     "gaussian": {"sd": sd},
     "calibrated": {"approach": str, "options": {...}, "floor_fraction": f0, "scale": "m2" | "none",
                    "floor": f,                # variance floor, unit scale
                    "combine": "sum" | "max", "n": [rows per group],
                    "theta": [[theta_g or null per group] per delta],        # the upper (or symmetric) one
                    "theta_lower": [[theta_g or null per group] per delta],  # two-sided approaches only
                    "unconverged_deltas": [...]}}

Any delta works at predict time. The data-driven methods are fitted for every delta of ``DELTA_GRID``
(exact there: 0.1, 0.05, 0.2, 0.01, ...); any other delta uses the largest grid delta below it (more
coverage, never less), and a delta below the grid's smallest value is refused. Storing the thresholds on
a grid keeps the model file small (about 3 x groups x 27 numbers) whatever the number of calibration rows.
"""

from __future__ import annotations

from ._common import (  # noqa: F401
    METHODS,
    DELTA_GRID,
    APPROACHES,
    DEFAULT_APPROACH,
    RECORD_FORMAT,
    RECORD_VERSION,
    N_MOMENT_QUANTILES,
    FLOOR_FRACTION,
    normal_ppf,
    conformal_quantile,
    _check_prob,
    grid_delta,
    _group_sorted,
    _group_conformal,
    _to_json_list,
    _from_json_list,
    usable_moments,
    _need_moments,
    _pairs,
    _row_sum,
    _row_max,
    _threshold_rows,
)
from .paper import (  # noqa: F401
    guaranteed_halfwidth,
    _beta,
    plugin_halfwidth,
    greedy_cover,
)
from .symmetric import (  # noqa: F401
    MARGIN_Z,
    Z_UNDER,
    Z_OVER,
    fit_threshold,
    _subset_membership,
    cv_margin,
    _level_quantile,
)
from .ridge_cqr import (  # noqa: F401
    RIDGE_LAMBDA,
    RIDGE_LAMBDA_FLAGGED,
    FLAG_Z,
    CV_FOLDS,
    MIN_RIDGE_ROWS,
    _Design,
    _smooth_pinball,
    _newton_direction,
    _qr_ridge,
    _band_halfwidth,
    _conformal_rank_value,
    _patch_up,
    _fit_two_sided,
    _blas_single_thread,
    fit_two_sided,
)
from .conditional import (  # noqa: F401
    CC_MARGIN,
    CC_SWEEPS,
    _CC_OPTIONS,
    _disjoint_layers,
    _layer_step,
    fit_conditional,
)
from .record import (  # noqa: F401
    _predict_on,
    _std_scale,
    calibrate,
    _json_options,
    _initial_constant,
    _record,
    _record_deltas,
    _record_matrix,
    _finite_nonneg,
)
from .predict import (  # noqa: F401
    _n_rows,
    _Context,
    _reference_moments,
    _choose_guaranteed,
    _choose_plugin,
    _half_guaranteed,
    _half_plugin,
    _multimoment_cells,
    _half_multimoment,
    _half_calibrated,
    _half_split,
    _half_mondrian,
    _half_gaussian,
    _HALF,
    _unit_interval,
    _to_original,
    predict_intervals,
    available_methods,
    interval_table,
    interval_info,
    BINARY_NO_INTERVALS,
)

__all__ = [
    "METHODS",
    "DELTA_GRID",
    "APPROACHES",
    "DEFAULT_APPROACH",
    "calibrate",
    "predict_intervals",
    "interval_table",
    "available_methods",
    "interval_info",
    "guaranteed_halfwidth",
    "plugin_halfwidth",
    "greedy_cover",
    "fit_threshold",
    "fit_two_sided",
    "fit_conditional",
    "CC_MARGIN",
    "normal_ppf",
    "conformal_quantile",
    "grid_delta",
    "usable_moments",
]

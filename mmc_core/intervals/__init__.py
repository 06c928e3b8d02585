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
``calibrated``  beyond the paper, on calibration rows whose predictions do not come from a fit on them: every row
    with out-of-fold predictions (cross-fitted calibration, below: ``interval_calibration="cross-fit"``, an
    option: it under-covered 6-12% of the groups of two unseen tables) or the held-out rows with the final
    model's predictions (``interval_calibration="held-out"``, the default, and the Dask engine). The statements
    1.-3. below are those of held-out calibration; 1'.-3'. say what carries over to cross-fitting.
    The signed standardized residual u = (y - mu(x)) / sd(x), sd(x) = sqrt(max(m_2(x), floor)) (``floor`` =
    FLOOR_FRACTION x the calibration rows' mean m_2; a mean-only model uses sd = 1), gets two thresholds
    q_lo(x), q_up(x), each made from per-group coefficients of x's groups, and the interval is
    [mu - max(q_lo(x), 0) sd(x), mu + max(q_up(x), 0) sd(x)] (the mean always inside), each end taken at least
    as far as at every larger grid delta (nested in delta). Dividing by the multicalibrated sd makes the interval
    adapt within a group: two rows of one group get different widths when their predicted variances differ.
    Approach ``cc``, two rules (option ``combine``; :func:`mmc_core.intervals.record._fit_cc`):

    Default rule ``combine="max"`` (:func:`fit_group_max`): Mondrian (group-wise split) conformal prediction
    on the standardized score. Each group's coefficient theta_g is the conformal quantile of |u| among its own
    calibration rows, the k_g-th smallest with k_g = min(n_g, ceil((n_g + 1) (1 - delta))) (no margin:
    CC_MAX_MARGIN = 0; symmetric, q_lo = q_up), and a row's threshold is the LARGEST theta_g of its groups.
    What is guaranteed, precisely:
    M1. Deterministic, on the calibration rows: every group has at least k_g of its calibration rows inside
        (tests/test_intervals_cc.py).
    M2. In expectation over the calibration sample and the test point, exact and finite-sample: for every group
        with n_g >= ceil(1/delta) - 1 calibration rows, P(y in C(x) | x in g) >= 1 - delta. The row's threshold
        is at least theta_g, and theta_g is split conformal within g: the group's calibration rows and a new row
        of g are exchangeable given the model (fitted on other rows), whose mu and sd are fixed functions. The
        one approximation: the variance floor is a mean over the calibration rows' predicted variances (their
        features, not their labels), so the score function is not quite independent of the calibration sample.
        Smaller groups are held to their calibration rows only (k_g = n_g), as with ``mondrian``.
    M3. With high probability over the calibration sample: a group's population coverage is at least that of
        its own threshold, which falls below 1 - delta with probability P(Binomial(n_g, 1 - delta) >= k_g)
        (0.3-0.5: no margin of its own). What makes it safe in practice is the maximum: every row of a group
        also carries the thresholds of its other groups (marginal groups and intersections), so a group whose
        own quantile came out low is still covered by the others'. This is measured, not proven (below). A
        ``margin`` option raises k_g by margin binomial standard errors as for the sum rule.
    Measured (benchmarks/README.md, "Coverage protocol", "The max rule"; flagged share of the judged groups /
    mean width divided by Mondrian's): on issue 9's held-out CPS tables CPS1988 (28,155 rows) and CPSSW8
    (61,395 rows), log wage, 10 splits x 2 bases: 0.03% (sum rule: 0.89%), average group coverage 0.914-0.921,
    width 0.758 / 0.978 x on CPS1988 (no base / boosted base) and 0.830 / 0.997 x on CPSSW8. On the bundled
    tables (20 splits x 2 bases): 0.06% (sum rule 0.46%) at 0.805-0.969 x (sum rule 0.852-0.993 x). On five
    small unseen tables (Wooldridge, 1-32k rows, 5 splits x 2 bases): 0.20% (sum rule 0.06%) at 0.57-1.38 x
    (sum rule 0.59-1.28 x; the sum rule is narrower on the weekly-hours table, whose label has a mass at 0).
    Null world (benchmarks/null_world.py, seeds 100-139 and 200-239): no coverage finding (sum rule: 5 seeds).

    Rule ``combine="sum"`` (:func:`fit_conditional`; the default until 2026-11-26, and the rule of cross-fitted
    records): two thresholds, each a SUM of per-group coefficients over x's groups (asymmetric when the
    residuals are skewed): conditional conformal prediction over the class of group indicators (Gibbs,
    Cherian & Candes, "Conformal prediction with conditional guarantees"), with a per-group margin. One two-sided score
    s = max(u / a_up, -u / a_lo) (a_up, a_lo: the pooled (1 - delta/2)-quantiles of u and -u, so one threshold
    gives an asymmetric interval) and a threshold t(x) = sum of theta_g
    over x's groups, fitted as the group-indicator quantile regression in which group g (n_g calibration rows)
    must cover at least

        k_g = min(n_g, ceil((n_g + 1) tau_g)) of its calibration rows,
        tau_g = 1 - delta + c sqrt(delta (1 - delta) / n_g),

    c = CC_MARGIN = 0.9: the conformal rank of the sample augmented by a test point counted as a miss in the
    group, raised by c binomial standard errors of the group's own count. Solved for all grid deltas at once by
    one sweep of exact block coordinate steps of the pinball loss (groups in layers of disjoint groups) and a
    final upward-only pass after which the count condition holds for every group.

    What is guaranteed by the sum rule, precisely:
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
    small groups. Measured in benchmarks/README.md with held-out calibration (20 fresh splits of the three
    bundled tables, both base variants): flagged groups 3.8% / 0.53% / 0.39% / 0.25% / 0.11% of the judged ones
    at c = 0 / 0.75 / 0.9 / 1 / 1.25, for a mean width of 0.72-0.91 / 0.91-0.96 / 0.93-0.98 / 0.94-0.98 /
    0.98-1.05 x Mondrian's, and an average group coverage of 0.91-0.92 / 0.93-0.95 / 0.93-0.96 / 0.94-0.96 /
    0.94-0.97 (per table).
    Cross-fitted (an option, c = CC_MARGIN_CROSS_FIT = 1.25; benchmarks/README.md, "Cross-fitted
    calibration"; 30 splits, seeds 4000-4009 and 2000-2019, both base variants, the same models as held-out):
    flagged 0.37% of the judged groups (held-out at 0.9: 0.41%; cross-fit at 0.9: 0.61%), runs with a flagged
    group 15 / 180 (held-out 24 / 180), average group coverage 0.948-0.950 / 0.925-0.926 / 0.926 (wage / NELS /
    synthetic; held-out 0.953-0.958 / 0.934-0.936 / 0.939-0.943), mean width 0.80-0.87 / 0.93-0.94 / 0.86-0.87
    x held-out Mondrian's (held-out cc: 0.94-0.97 / 0.97 / 0.91-0.92). NELS alone flags more than held-out on
    seeds 2000-2019 (1.19% vs 0.77%). Null world (benchmarks/null_world.py, seeds 100-139 and 200-239): seeds
    with a finding 8 / 80 (held-out 10 / 80), of them with a coverage finding 2 (held-out 5). But on five
    tables the project never tuned on (the Wooldridge tables of issue 10 with a continuous label, seeds
    5000-5004, both bases) it flagged 2.76% of the judged groups (cps91 7.9%, labsup 6.1%; without a base
    12% and 11%) where held-out calibration flagged 0.06%: out of fold, the fold models' standardized scores
    did not transfer to the final model there. So "held-out" stays the default.

    mmc_core fits ``cc`` only. Other threshold approaches, compared with it by the benchmarks (``ridge-cqr``,
    the previous default: a ridge-penalized group quantile regression per side with a cross-fitted conformal
    shift; the symmetric ``gcp``, ``gcp-cv``, ``mondrian-std``, ``mondrian-relaxed``), live in
    benchmarks/interval_fitters and plug in through ``calibrate(..., fitter=...)``. Their records use the same
    format (``combine`` "sum" or "max"; ``theta_lower`` only for two-sided thresholds), so models calibrated
    with them, or saved by an older mmc-audit that offered them, load and predict unchanged.
Cross-fitted calibration (``MomentMulticalibrator(interval_calibration="cross-fit")``, and "auto" with the
    in-memory engine up to 200,000 rows; :mod:`mmc_core.estimator.crossfit`; not the default, see above).
    The rows are split into 5 seeded folds; each fold's rows get the predictions (mu, m_a) of a model fitted
    with the same parameters on the other four folds (which holds out its own rows for early stopping), and
    :func:`calibrate` computes the whole record from ALL n rows with these out-of-fold predictions instead of
    the held-out rows with the final model's. The final model is fitted exactly as with held-out calibration
    (on 75% of the rows); at predict time its own predictions go through the stored thresholds. A group thus
    calibrates on all its rows (4x its held-out rows at calibration fraction 0.25), so the margin
    c sqrt(delta (1 - delta) / n_g) costs half as much at the same c. A cross-fitted record uses
    c = CC_MARGIN_CROSS_FIT = 1.25 (0.625 held-out standard errors) against the extra approximation of 2'. below
    (at c = 0.9 it flagged 0.76% of the groups on the protocol's seeds 2000-2019, held-out calibration 0.42%).
    Cost: 5 extra fits. What carries over:
    1'. Deterministic and exact, on the out-of-fold scores: every group with n_g >= 1 rows has at least k_g
        (with that n_g) of its rows' out-of-fold scores inside its interval (tests/test_intervals_crossfit.py).
        This is about the out-of-fold scores, not the final model's intervals on its own fitting rows.
    2'. In expectation: NOT a theorem. The conformal argument needs the test point's score to be exchangeable
        with the calibration scores; here the calibration scores come from 5 fold models, the test score from
        the final model, fitted on other rows. This is the setting of cross-conformal prediction (Vovk) and
        CV+ (Barber, Candes, Ramdas & Tibshirani, "Predictive inference with the jackknife+"): even CV+, which
        scores the test point with the fold models themselves, guarantees only
        1 - 2 delta - 2 (1 - 1/K) / (n/K + 1) (marginal, K folds) in the worst case and about 1 - delta for a
        stable fit; refitting one final model, as here (their "CV" method), has no worst-case guarantee at all,
        and the group-conditional version is approximate in the same way. It holds approximately when the fit
        is stable: the final model's scores on new rows are distributed like the fold models' out-of-fold
        scores. The fold models learn from 60% of the rows (80% minus their own 25% held out), the final model
        from 75%, which tends to make out-of-fold scores larger (conservative), but not always: in one protocol
        run the standardized scores had sd 1.004 out of fold and 1.022 for the final model on fresh rows
        (1.013 on its held-out rows). Checked empirically, not proven: on mmc_core.common.synthetic's demo distribution (finite
        feature support, Beta labels) the exact population coverage of every group, averaged over 30 training
        samples, is at least 1 - delta up to 3 Monte Carlo standard errors (tests/test_intervals_crossfit.py,
        slow), and on the protocol and the null world (benchmarks/README.md).
    3'. With high probability: P(Binomial(n_g, 1 - delta) >= k_g) assumes i.i.d. scores of one fixed function;
        the out-of-fold scores of one fold share a model, so it is an approximation (with the larger n_g).
    The other fields of a cross-fitted record use the same rows, so the methods stay comparable: the moment
    quantiles and the plug-in coverage (``plugin`` and ``guaranteed`` choose their moment from them) use the
    out-of-fold predictions (an out-of-sample estimate for the final model, approximate as 2'.). The baselines
    (``split-conformal``, ``mondrian``, ``gaussian``) do not use the model's predictions: centred on a base
    prediction fitted elsewhere they use all n rows with their exact split-conformal guarantees (every row is
    exchangeable with a new one); centred on the constant (the final model's fitting-row label mean, computed
    from 75% of these rows) that guarantee is approximate, off by O(1/n). The record says which rows it used
    (``rows``, ``folds``). The Dask engine calibrates on held-out rows only (MMCError for "cross-fit").
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
     "n": n_cal,                             # calibration rows (cross-fit: every row)
     "rows": "held-out" | "cross-fit",       # absent in older records: held-out
     "folds": 5,                             # cross-fit only
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
                    "theta_lower": [[theta_g or null per group] per delta],  # two-sided thresholds only
                    "unconverged_deltas": [...]}}

Any delta works at predict time. The data-driven methods are fitted for every delta of ``DELTA_GRID``
(exact there: 0.1, 0.05, 0.2, 0.01, ...); any other delta uses the largest grid delta below it (more
coverage, never less), and a delta below the grid's smallest value is refused. Storing the thresholds on
a grid keeps the model file small (about 3 x groups x 27 numbers) whatever the number of calibration rows.
"""

from __future__ import annotations

# Beyond __all__: the names mmc_core.auditing.metrics, mmc_core.auditing.binary, app and the tests import from here.
from ._common import (  # noqa: F401
    APPROACHES,
    DEFAULT_APPROACH,
    DELTA_GRID,
    FLOOR_FRACTION,
    METHODS,
    check_prob,
    conformal_quantile,
    grid_delta,
    normal_ppf,
    row_max,
    row_sum,
    usable_moments,
)
from .conditional import CC_DEFAULT_COMBINE, CC_MARGIN, CC_MARGIN_CROSS_FIT, fit_conditional, fit_group_max
from .paper import greedy_cover, guaranteed_halfwidth, plugin_halfwidth
from .predict import (  # noqa: F401
    BINARY_NO_INTERVALS,
    IntervalContext,
    available_methods,
    half_calibrated,
    interval_info,
    interval_table,
    predict_intervals,
    unit_interval,
)
from .record import calibrate, initial_constant  # noqa: F401

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
    "fit_conditional",
    "fit_group_max",
    "CC_MARGIN",
    "CC_DEFAULT_COMBINE",
    "CC_MARGIN_CROSS_FIT",
    "normal_ppf",
    "conformal_quantile",
    "grid_delta",
    "usable_moments",
]

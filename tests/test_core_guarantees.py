"""thm:wrapper-distr-known on the fitting sample, exactly, for both step rules; update bounds; the
group variance tracking the truth within a bound derived from the guarantee."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core.common.synthetic import demo_distribution
from tests.reference import audit_sample, moment_label


def _fit(step, k, odd="absolute", n=6000, alpha=0.004, beta=0.0008, m=6, seed=0):
    d = demo_distribution()
    table, y = d.sample(n, np.random.default_rng(seed))
    groups = GroupSet.from_columns(table, ["sex", "race", "age"], 2)
    est = MomentMulticalibrator(
        alpha=alpha,
        beta=beta,
        n_buckets=m,
        n_moments=k,
        step=step,
        odd_moments=odd,
        label_range=(0, 1),
        calibration_fraction=0,
    )
    est.fit(table, y, groups, base_prediction=d.base_prediction(table))
    return est, table, y, groups


@pytest.mark.parametrize("step", ["exact", "paper"])
@pytest.mark.parametrize("k,odd", [(1, "absolute"), (2, "absolute"), (4, "absolute"), (3, "signed")])
def test_wrapper_guarantees_hold_exactly_on_fitting_sample(step, k, odd):
    est, table, y, groups = _fit(step, k, odd)
    p = est.model_.params
    assert est.converged_
    mu, moms = est.fit_mean_unit_, est.fit_moments_unit_
    # predictions stay in their projection ranges
    assert mu.min() >= 0 and mu.max() <= 1
    for a in p.moments:
        lo, hi = p.projection(a)
        assert moms[a].min() >= lo and moms[a].max() <= hi
    dense = groups.evaluate(table).to_dense()
    audit = audit_sample(p, dense, y, mu, moms)
    # 2. alpha-mean multicalibrated: |v| < alpha on every G(mu, i) (the loop ran while some |v| >= alpha)
    assert max(abs(r[3]) for r in audit["mean"]) < p.alpha
    for r in audit["joint"]:
        a = r["a"]
        # mean consistency and beta-pseudo-moment consistency on every G(mu, m_a, i, j)
        assert abs(r["v_mean"]) < p.alpha
        assert abs(r["v_moment"]) < p.beta_for(a)
        # 3. (alpha, beta + a alpha, a/m) mean-conditioned moment calibration (lemma fine-consist...)
        bound = (p.beta_for(a) + a * p.alpha) / r["P"] + a / p.m
        assert abs(r["pred_moment"] - r["emp_moment"]) <= bound + 1e-12
    # 1. update counts within thm:wrapper-distr-known
    info = est.model_.info
    assert info["mean_updates"] <= 1 / p.alpha**2 - 1
    assert info["max_moment_updates_per_call"] <= 1 / p.beta**2 - 1
    assert est.moment_updates_ <= (info["rounds"] + 2) * max(len(p.moments), 1) * (1 / p.beta**2 - 1)


@pytest.mark.parametrize("alpha", [3e-4, 1e-4])
def test_a_given_alpha_is_met_by_the_kept_model(alpha):
    """Found in an exploratory session: with a given alpha (a number) and early stopping (on by default), the
    model kept an earlier round whose cells miss that alpha (achieved 6.1e-4 for a given 3e-4), yet alpha_,
    the CLI summary and the PDF stated the given value as the guarantee. Then the stated value became what the
    kept model achieved; now (issue 34) early stopping keeps the best held-out round among those meeting the
    given thresholds, so the kept model meets them: checked here by the independent reference audit."""
    d = demo_distribution()
    table, y = d.sample(8000, np.random.default_rng(0))
    groups = GroupSet.from_columns(table, ["sex", "race", "age"])
    # the affine base map: without a map the fit at 3e-4 runs to the end (no round to choose among)
    est = MomentMulticalibrator(alpha=alpha, beta=1e-4, label_range=(0, 1), base_recalibration="affine").fit(
        table, y, groups, base_prediction=d.base_prediction(table)
    )
    info, p = est.model_.info, est.model_.params
    losses = [h["holdout_mse"] for h in est.history_]
    assert min(losses) < losses[info["kept_round"]]  # the setting of the bug: an earlier round misses alpha
    assert est.alpha_ == p.alpha == alpha and est.beta_ == 1e-4
    fit_rows = np.setdiff1d(np.arange(len(y)), est.calibration_index_)
    dense = groups.evaluate(table).to_dense()[fit_rows]
    ref = audit_sample(p, dense, y[fit_rows], est.fit_mean_unit_, est.fit_moments_unit_)
    worst_mean = max(abs(r[3]) for r in ref["mean"])
    assert worst_mean < p.alpha and all(abs(r["v_mean"]) < p.alpha for r in ref["joint"])
    assert all(abs(r["v_moment"]) < p.beta_for(r["a"]) for r in ref["joint"])


def test_descent_improves_a_miscalibrated_base_model():
    """The base model is biased on race B, race D and age 55+; after fitting, each group's mean error is within
    the bound the guarantee gives, and that bound is below the base model's error (so the fit had to move)."""
    est, table, y, groups = _fit("exact", 2, n=20000, alpha=0.001, beta=0.0002, m=10)
    d = demo_distribution()
    base = d.base_prediction(table)
    dense = groups.evaluate(table).to_dense()
    p = est.model_.params
    for name in ["race=B", "race=D", "age=55+"]:
        s = dense[:, groups.names.index(name)]
        before = abs(np.mean(base[s] - y[s]))
        after = abs(np.mean(est.fit_mean_unit_[s] - y[s]))
        # Mean multicalibration: every non-empty cell G(mu, i) has |sum_cell (mu - y)| / n < alpha, and the group
        # is the union of its K non-empty cells, so |mean_G (mu - y)| < K alpha n / n_G.
        k = np.unique(p.mean_grid.index(est.fit_mean_unit_[s])).size
        bound = k * p.alpha / s.mean()
        assert after <= bound < before, (name, after, bound, before)


@pytest.mark.slow
def test_group_variance_tracks_truth_within_derived_bound():
    """Mean predicted variance over each group vs the group's true average conditional variance.

    Decomposition on the fitting rows of group G (n_G rows; mu* the true mean, muhat the fitted one):
      mean_G m2hat - mean_G sigma^2 = [mean_G m2hat - mean_G (y - muhat)^2]        (pseudo-moment consistency)
                                    + [mean_G (y - mu*)^2 - mean_G sigma^2]         (noise, independent of the fit)
                                    + D_G,  D_G = mean_G (y - muhat)^2 - mean_G (y - mu*)^2
    The first term is at most (number of joint cells of G) * beta * n / n_G (each cell < beta mass-weighted);
    the second has variance mean_G(m4 - sigma^4) / n_G, known from the truth (5 standard errors); D_G is
    computed exactly. (The former Hoeffding term on [-1, 1] and Cauchy-Schwarz cross term allowed errors of
    4-10 times the variances themselves, so the check could not fail.)
    """
    d = demo_distribution()
    n = 60000
    table, y = d.sample(n, np.random.default_rng(7))
    groups = GroupSet.from_columns(table, ["sex", "race", "age", "score"], 1)
    est = MomentMulticalibrator(
        alpha=0.0005, beta=0.00005, n_buckets=10, n_moments=2, label_range=(0, 1), calibration_fraction=0
    )
    est.fit(table, y, groups, base_prediction=d.base_prediction(table))
    assert est.converged_
    mu, m2 = est.fit_mean_unit_, est.fit_moments_unit_[2]
    true_mu, true_var = d.true_mean(table), d.true_moment(table, 2)
    dense = groups.evaluate(table).to_dense()
    p = est.model_.params
    from tests.reference import cells as ref_cells

    m4 = d.true_moment(table, 4)
    _, joint = ref_cells(p, mu, {2: m2})
    interval = {}
    for g, name in enumerate(groups.names):
        s = dense[:, g]
        nG = s.sum()
        n_cells = np.unique(joint[2][s]).size
        pseudo = n_cells * p.beta * n / nG
        # noise: mean (y - mu*)^2 - sigma^2 has mean 0 and variance mean(m4 - sigma^4) / n_G (exact from the
        # truth); 5 standard errors = two-sided normal tail 6e-7 per group (n_G >= 5,000 here)
        noise = 5 * math.sqrt(np.mean(m4[s] - true_var[s] ** 2) / nG)
        D = np.mean((y[s] - mu[s]) ** 2) - np.mean((y[s] - true_mu[s]) ** 2)  # exact: mu and mu* are known
        tv = true_var[s].mean()
        assert abs(m2[s].mean() - tv - D) <= pseudo + noise, (name, m2[s].mean(), tv, D, pseudo, noise)
        interval[name] = (tv + D - pseudo - noise, tv + D + pseudo + noise)
    # The disparity the product exists to show: race D's variance is recognised as above race A's. The
    # per-group bounds put the predicted ratio in [lo_D / hi_A, hi_D / lo_A]; the guarantee alone implies the
    # disparity when that interval lies above 1.
    a_idx, d_idx = groups.names.index("race=A"), groups.names.index("race=D")
    pred_ratio = m2[dense[:, d_idx]].mean() / m2[dense[:, a_idx]].mean()
    lo, hi = interval["race=D"][0] / interval["race=A"][1], interval["race=D"][1] / interval["race=A"][0]
    assert 1 < lo <= pred_ratio <= hi, (lo, pred_ratio, hi)


def test_moment_label_reference_agrees_with_engine():
    from mmc_core.paper.moments import pseudo_label

    r = np.linspace(-1, 1, 41)
    for a in (2, 3, 4, 5):
        for odd in ("absolute", "signed"):
            assert np.allclose(pseudo_label(a, r, odd), moment_label(a, r, odd), rtol=0, atol=1e-15)


def test_the_history_records_the_cells_alpha_speaks_of():
    """The convergence chart drew the history's largest mean violation above the stated alpha (0.0016 against
    0.0012, a browser session) for a model whose every cell met alpha: the history counted the whole-group
    cells the "se" rule also audits, alpha the paper's cells. Both now speak of the paper's cells: at the kept
    round the history's value is the achieved alpha (5 of 8 seeds differed by 25-50% before)."""
    d = demo_distribution()
    for seed in range(8):
        table, y = d.sample(3000, np.random.default_rng(seed))
        groups = GroupSet.from_columns(table, ["sex", "race", "age"], 2)
        est = MomentMulticalibrator(label_range=(0, 1), base_recalibration="none").fit(
            table, y, groups, base_prediction=d.base_prediction(table)
        )
        rec = est.history_[est.model_.info["kept_round"]]
        # a model ending with shrunken cell corrections: alpha is of the model after them, recorded at the kept round
        # (the moments' cells count too: alpha's joint cells G(mu, m_a) are cut by the moment predictions)
        after_cells = est.model_.has_cells or est.model_.has_moment_cells
        h = rec["cells_max_mean_violation"] if after_cells else rec["max_mean_violation"]
        assert h == pytest.approx(est.alpha_, rel=1e-6), (seed, h, est.alpha_)
        if est.model_.has_moment_cells:  # and beta, of the same model
            b = max(est.moment_betas_.values())
            assert rec["cells_max_moment_violation"] == pytest.approx(b, rel=1e-6), (seed, b)


@pytest.mark.slow
def test_group_variances_are_not_invented_where_the_spread_is_equal(monkeypatch):
    """A world where every row has the same spread (sd 12; the mean differs by group and a feature, the base
    is off on two groups), 10,000 rows, 10 seeds: the worst listed group's (>= 2% of rows) |log(mean predicted
    variance / 144)| on fresh rows. The previous rule (until 2026-12-05: whole groups' moments corrected in the
    descent from |t| >= 1 by the share max(1/2, 1 - 1/t^2) of their gap, no moments' cell step) followed each
    group's noise (worst group 16% off on average, up to 42%); the default leaves whole groups' moments to the
    cell step, which shrinks each by its evidence on held-out rows. Paired over the seeds, the default's worst
    error must be lower by more than 2 standard errors of the paired mean (measured: 0.161 -> 0.036), and no
    fit's worst group may be off by more than 4 standard errors of the smallest listed group's variance
    estimate (sqrt(2 / n) on the log scale, n its fitting rows) plus the level's (sqrt(2 / n_fit))."""
    import pandas as pd

    import mmc_core.estimator.fit_memory as fit_memory_mod
    import mmc_core.fit.fit_params as params_mod

    def world(n, rng):
        a, b = rng.integers(0, 5, n), rng.choice(3, n, p=[0.5, 0.3, 0.2])
        c, x = rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1]), rng.uniform(0, 1, n)
        mean = 40 + 8 * a + 15 * (b == 1) - 10 * (c == 3) + 30 * x
        base = mean + 3 * (a == 4) - 2 * (c == 1) + 4 * (x - 0.5)
        return pd.DataFrame({"a": a, "b": b, "c": c, "x": x, "y": mean + 12 * rng.normal(size=n), "base": base})

    def no_cells(model, memb, y_f, fit_mu, fit_moms, *rest, **kw):
        return fit_moms, None

    worst: dict = {"previous": [], "default": []}
    for seed in range(10):
        rng = np.random.default_rng(seed)
        tr, te = world(10_000, rng), world(10_000, rng)
        groups = GroupSet.from_columns(tr, ["a", "b", "c"], max_order=2)
        memb = groups.evaluate(te, len(te))
        big = np.flatnonzero(memb.sizes >= 0.02 * len(te))
        for rule in worst:
            with monkeypatch.context() as mp:
                if rule == "previous":
                    mp.setattr(params_mod, "SE_GROUP_MOMENT_Z", 1.0)
                    mp.setattr(params_mod, "NO_GROUP_MOMENT_Z", 1.0)
                    mp.setattr(fit_memory_mod, "moment_cells", no_cells)
                est = MomentMulticalibrator(label_range=(-50, 250)).fit(tr, tr["y"], groups, base_prediction=tr["base"])
            v = est.predict_moments(te, base_prediction=te["base"])["moment_2"]
            worst[rule].append(max(abs(np.log(v[memb.group_rows(g)].mean() / 144.0)) for g in big))
            if rule == "default":
                n_fit = est.model_.info["n_fit"]
                n_small = memb.sizes[big].min() * n_fit / len(te)
                assert worst[rule][-1] <= 4 * (math.sqrt(2 / n_small) + math.sqrt(2 / n_fit)), (seed, worst[rule][-1])
    d = np.asarray(worst["default"]) - np.asarray(worst["previous"])
    se = d.std(ddof=1) / math.sqrt(d.size)
    assert d.mean() < -2 * se, (d.mean(), se, {r: np.mean(v) for r, v in worst.items()})

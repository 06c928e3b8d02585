"""Paper-faithful fresh-sample mode: the finite-sample guarantees of thm:finite-wrapper, checked exactly in
the population (the synthetic distribution has a finite feature support with known probabilities)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmc_core import GroupSet
from mmc_core.common.synthetic import demo_distribution
from mmc_core.fit.fresh import FreshDescent
from mmc_core.paper.auditor import chernoff_auditor
from mmc_core.paper.descent import DescentParams
from tests.reference import cells


def test_single_set_auditor_matches_hand_computation():
    # n = 1000 rows, a set of n' = 400 with mean difference 0.3, delta = 0.05, alpha = 0.05
    n, n1, delta, alpha = 1000, 400, 0.05, 0.05
    e_n = math.sqrt(math.log(2 / delta) / (2 * n))
    e_n1 = math.sqrt(math.log(2 / delta) / (2 * n1))
    margin = (0.3 - 2 * e_n1) - alpha / (n1 / n - e_n)
    flagged, got, sign = chernoff_auditor(np.array([0.3 * n1, -0.01 * n1]), np.array([n1, n1]), n, alpha, delta)
    assert got[0] == pytest.approx(margin) and flagged.tolist() == [margin >= 0, False] and sign.tolist() == [1, -1]
    # an empty set or one too small for the test is never flagged
    flagged, _, _ = chernoff_auditor(np.array([0.0, 5.0]), np.array([0, 5]), n, alpha, delta)
    assert not flagged.any()


def test_sample_size_requirement_is_enforced():
    d = demo_distribution()
    with pytest.raises(ValueError, match="too small"):
        FreshDescent(d.sample, GroupSet([]), DescentParams(0.01, 0.01, 5, (2,), "paper"), n=1000, delta=1e-3)


def test_steps_report_the_auditors_choice():
    d = demo_distribution()
    t, _ = d.support()
    fd = FreshDescent(
        d.sample,
        GroupSet.from_columns(t, ["race"]),
        DescentParams(0.05, 0.03, 4, (2,), "paper"),
        n=20000,
        delta=1e-3,
        truth=d,
    )
    ev = fd.step()
    assert ev["kind"] == "moment_update" and ev["group"] in fd.groups.names and ev["samples_used"] == 20000
    assert all(abs(x) == pytest.approx(0.03) for x in ev["deltas"])  # the paper's step, eta = beta


@pytest.mark.slow
def test_fresh_mode_guarantees_hold_in_population():
    d = demo_distribution()
    support, prob = d.support()
    groups = GroupSet.from_columns(support, ["sex", "race", "age"], 1)
    alpha, beta, m, n, delta = 0.02, 0.01, 5, 300_000, 1e-6
    params = DescentParams(alpha, beta, m, (2,), "paper")
    fd = FreshDescent(d.sample, groups, params, n=n, delta=delta, seed=1, truth=d)
    potentials = [fd.potential()]
    kinds = []
    while not fd.done and fd.audits < 3000:
        ev = fd.step()
        kinds.append(ev["kind"])
        if ev["kind"] == "mean_update":
            # each flagged cell is (w.h.p.) a true alpha-violation: the potential drops by >= alpha^2 per cell
            assert potentials[-1] - ev["potential"] >= alpha**2 * len(ev["cells"]) - 1e-12
            potentials.append(ev["potential"])
    assert fd.done and kinds[-1] == "converged"
    assert fd.mean_updates <= 1 / alpha**2 - 1

    mu, moms = fd.model.predict_unit(support, n=prob.size)
    m2 = moms[2]
    true_mu, var = d.true_mean(support), d.true_moment(support, 2)
    dense = groups.evaluate(support).to_dense()
    bmu, joint = cells(params, mu, {2: m2})
    eps = math.sqrt(math.log(2 / delta) / (2 * n))

    def slack(P, thr):
        # From the auditor's acceptance test (Lemma alpha-prime-auditor, with the set's own sample size):
        # a set passes only if |diff| < 4 sqrt(ln(2/delta) / (2 n (P - eps))) + thr / (P - 2 eps).
        return 4 * math.sqrt(math.log(2 / delta) / (2 * n * (P - eps))) + thr / (P - 2 * eps)

    checked = 0
    for g in range(len(groups)):
        for part, labels in [("mean", bmu), ("joint", joint[2])]:
            for c in np.unique(labels[dense[:, g]]):
                S = dense[:, g] & (labels == c)
                P = prob[S].sum()
                if P <= 2 * eps + 1e-9:  # noqa: SIM300 - P is a probability, not a constant
                    continue
                w = prob[S] / P
                s_a = slack(P, alpha)
                assert abs(np.sum(w * (mu[S] - true_mu[S]))) <= s_a
                if part == "joint":
                    checked += 1
                    s_b = slack(P, beta)
                    pseudo = var[S] + (true_mu[S] - mu[S]) ** 2  # E[(y - mu(x))^2 | x]
                    assert abs(np.sum(w * (m2[S] - pseudo))) <= s_b
                    # mean-conditioned moment calibration, via the lemma's own intermediate inequality
                    mu_S = np.sum(w * true_mu[S])
                    true_m2 = np.sum(w * (var[S] + (true_mu[S] - mu_S) ** 2))
                    spread = np.sum(w * np.abs(mu[S] - np.sum(w * mu[S])))
                    assert abs(np.sum(w * m2[S]) - true_m2) <= s_b + 2 * (spread + s_a)
    assert checked >= 10

"""The audit's group scorecard: one row per listed group, its size, what the audit estimates for it (mean error,
spread ratio, interval coverage, each with its 95% interval), what it found, and how large a defect its size
would let the audit find (per-group power).

Built from every test the audit made (:func:`mmc_core.auditing.metrics.audit` collects them), so the numbers are the
tests' own. The detectable size of a group's defect is the one its test finds with probability ``POWER`` at the
audit's error control: the first step of Holm's procedure over the audit's ``n_tests`` tests rejects beyond the
two-sided level / n_tests quantile of Student's t with n - 1 degrees of freedom (t*), so a defect of
(t* + z_{POWER}) standard errors is found with probability ~``POWER`` (Benjamini-Hochberg with one real defect
alike; with several real defects BH needs less). Checked by simulation (tests/test_scorecard.py): defects planted
at the stated sizes on a 205-row group were found in 76% (mean), 76% (coverage) and 77% (spread) of 200 audits,
at half those sizes in 7%, 8% and 13%.
A group too small to test at all (below the minimum count) says so; a group without a finding whose detectable
size is large was not shown to be fine, only too small to tell.

- mean error (observed - predicted, label units): detectable |error| = (t* + z_{POWER}) x the test's standard error;
- spread ratio (observed / predicted variance): the test's null is the tolerance band [1 / (1 + tol), 1 + tol];
  the detectable ratios above and below it (:func:`spread_detectable`);
- coverage: the lowest coverage found with that power (:func:`coverage_shortfall`).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pandas as pd

from . import findings as fnd

__all__ = ["POWER", "scorecard", "detectable_z", "spread_detectable", "coverage_shortfall", "with_percent"]

POWER = 0.8


def detectable_z(n_tests: int, level: float, power: float = POWER) -> float:
    """How many standard errors a defect must measure to be found with probability ``power`` among ``n_tests``
    tests at family-wise ``level`` (nan without tests)."""
    if n_tests < 1:
        return float("nan")
    return fnd.normal_isf2(level / n_tests) + NormalDist().inv_cdf(power)


def spread_detectable(sums, cnt, est, band: float, z_a, z_b: float) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the observed / predicted variance ratios (above the band, below it) that the variance test
    (Hall's statistic of u2 - r0 v at the band's edge r0, :func:`mmc_core.auditing.findings.ratio_stat`) finds with power
    Phi(z_b) at critical value z_a: the ratio R at which the statistic's expected value is z_a + z_b, for the
    group's own residuals rescaled to ratio R (u2 -> u2 R / est: the shape of its squared residuals kept, their
    scale moved). Vectorised bisection over the groups; inf (nan below) when no ratio in reach is detectable.

    ``sums``: (9, G) test sums (:data:`mmc_core.auditing.findings.RATIO_SUMS`); ``cnt``, ``est``, ``z_a``: (G,) or scalar."""
    S = np.asarray(sums, dtype=float)
    cnt, est = np.asarray(cnt, dtype=float), np.asarray(est, dtype=float)
    need = z_a + z_b
    # powers of u2 in each sum (a = u2, b = v): a, b, aa, ab, bb, aaa, aab, abb, bbb
    power = np.array([1, 0, 2, 1, 0, 3, 2, 1, 0, 0][: S.shape[0]])[:, None]  # the kurtosis floor is scale-free

    def stat(R, r0):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            scaled = S * (R / est)[None, :] ** power
        return fnd.ratio_stat(scaled, cnt, r0)

    def solve(r0, up: bool):
        lo = np.full(est.shape, r0)
        hi = r0 * 1e3 if up else np.full(est.shape, 0.0)
        hi = np.full(est.shape, hi) if up else hi
        reach = (stat(hi, r0) >= need) if up else (stat(np.full(est.shape, 1e-9), r0) <= -need)
        for _ in range(80):
            mid = np.sqrt(lo * hi) if up else (lo + hi) / 2
            ok = stat(mid, r0) >= need if up else stat(mid, r0) <= -need
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        return np.where(reach, hi, np.inf if up else np.nan)

    need = np.broadcast_to(np.asarray(need, dtype=float), est.shape)
    good = np.isfinite(est) & (est > 0) & (cnt > 1)
    high, low = np.full(est.shape, np.nan), np.full(est.shape, np.nan)
    if good.any():
        S, cnt, est, need = S[:, good], cnt[good], est[good], need[good]
        high[good], low[good] = solve(band, True), solve(1 / band, False)
    return high, low


def coverage_shortfall(target: float, n: float, z_a: float, z_b: float) -> float:
    """The coverage shortfall d below ``target`` that a test of a proportion on ``n`` rows finds with power
    Phi(z_b) at critical value z_a: d = (z_a sqrt(t (1 - t)) + z_b sqrt(p (1 - p))) / sqrt(n), p = t - d (the
    spread under the alternative) plus 1 / (2 n) (the exact test is discrete), by a few fixed-point steps; ``z_a``
    is taken as the t quantile of the other tests (the exact test is conservative at small n too)."""
    d = 0.0
    for _ in range(20):
        p = min(max(target - d, 1e-9), 1.0)
        d = (z_a * np.sqrt(target * (1 - target)) + z_b * np.sqrt(p * (1 - p))) / np.sqrt(n)
        d = min(d + 0.5 / n, target)  # the continuity correction of the exact (discrete) test
    return float(d)


def scorecard(tests: list, names, cnt, n_tests: int, level: float, min_count: int) -> pd.DataFrame:
    """One row per group (every listed group, tested or not), sorted by harm then evidence.

    Parameters
    ----------
    tests : every test of the audit (dicts with kind, group, n, estimate, interval, p_adjusted and the standard
        error the test used: ``statistic_se_label`` for the mean, ``ratio_se_test`` for the spread), findings carrying
        ``harm``
    names : group names (G,); cnt : rows per group (G,)
    n_tests, level, min_count : the audit's family size, error level and smallest tested group

    Returns
    -------
    DataFrame indexed by group with n, tested, findings (the kinds found, comma-separated), harm, p_min (the
    smallest adjusted p of the group's tests), mean_error[_lo, _hi, _detectable], spread_ratio[_lo, _hi],
    spread_detectable_high / _low, coverage[_lo, _hi, _detectable].
    """
    G = len(names)
    idx = {g: i for i, g in enumerate(names)}
    z_b = NormalDist().inv_cdf(POWER)
    t_a = _critical_t(cnt, n_tests, level)
    cols = _empty_columns(cnt, min_count)
    kinds: list[list[str]] = [[] for _ in range(G)]
    var_tests: list = []
    for t in tests:  # one test per (group, kind) of the three group-level kinds; a few hundred at most
        i = idx.get(t.get("group"))  # calibration cells name their group too: they count in its harm and p
        if i is None:
            continue
        cols["p_min"][i] = min(cols["p_min"][i], float(t.get("p_adjusted", 1.0)))
        if "harm" in t:
            cols["harm"][i] += float(t["harm"])
            if t["kind"] not in kinds[i]:
                kinds[i].append(t["kind"])
        lo, hi = t["interval"]
        if t["kind"] == "mean":
            se = float(t.get("statistic_se_label", np.nan))
            cols["mean_error"][i], cols["mean_error_lo"][i], cols["mean_error_hi"][i] = t["estimate"], lo, hi
            cols["mean_error_detectable"][i] = (t_a[i] + z_b) * se
        elif t["kind"] == "variance":
            cols["spread_ratio"][i], cols["spread_ratio_lo"][i], cols["spread_ratio_hi"][i] = t["estimate"], lo, hi
            var_tests.append((i, t))
        elif t["kind"] == "coverage":
            target, n = float(t["target"]), float(t["n"])
            cols["coverage"][i], cols["coverage_lo"][i], cols["coverage_hi"][i] = t["estimate"], lo, hi
            cols["coverage_detectable"][i] = target - coverage_shortfall(target, n, t_a[i], z_b)
    if var_tests:  # all groups' variance power at once (a vectorised search)
        _spread_power(cols, var_tests, t_a, z_b)
    cols["findings"] = np.array([", ".join(k) for k in kinds], dtype=object)
    tab = pd.DataFrame(cols, index=pd.Index(list(names), name="group"))
    order = np.lexsort((-tab["n"].to_numpy(), tab["p_min"].to_numpy(), -tab["harm"].to_numpy()))
    return tab.iloc[order]


def _critical_t(cnt, n_tests: int, level: float) -> np.ndarray:
    """Each group's critical value: the mean and variance tests are t tests (n - 1 degrees of freedom)."""
    n_all = np.asarray(cnt, dtype=float)
    t_a = np.full(n_all.size, np.nan)
    if n_tests > 0 and (n_all >= 2).any():
        sizes, inv = np.unique(np.maximum(n_all, 2), return_inverse=True)
        t_a = fnd.t_isf2(level / n_tests, sizes - 1)[inv]
    return t_a


def _empty_columns(cnt, min_count: int) -> dict:
    """The scorecard's columns before any test is read: counts, and NaN where a test fills in a value."""
    G = len(cnt)
    nan = np.full(G, np.nan)
    cols = {
        "n": np.asarray(cnt, dtype=np.int64),
        "tested": np.asarray(cnt) >= min_count,
        "findings": np.full(G, "", dtype=object),
        "harm": np.zeros(G),
        "p_min": np.ones(G),
    }
    for name in (
        "mean_error",
        "mean_error_lo",
        "mean_error_hi",
        "mean_error_detectable",
        "spread_ratio",
        "spread_ratio_lo",
        "spread_ratio_hi",
        "spread_detectable_high",
        "spread_detectable_low",
        "coverage",
        "coverage_lo",
        "coverage_hi",
        "coverage_detectable",
    ):
        cols[name] = nan.copy()
    return cols


def _spread_power(cols: dict, var_tests: list, t_a, z_b: float) -> None:
    """The smallest spread misstatements each variance-tested group could show, high and low."""
    rows = np.array([i for i, _ in var_tests])
    band = 1.0 + float(var_tests[0][1].get("tolerance") or 0.0)
    high, low = spread_detectable(
        np.array([t["ratio_sums"] for _, t in var_tests]).T,
        cols["n"][rows],
        np.array([t["estimate"] for _, t in var_tests]),
        band,
        t_a[rows],
        z_b,
    )
    cols["spread_detectable_high"][rows], cols["spread_detectable_low"][rows] = high, low


def with_percent(card: pd.DataFrame) -> pd.DataFrame:
    """The scorecard of a natural-log label with its mean errors also as percent differences of the original
    values (``mean_error_percent``, ``_lo``, ``_hi``; :func:`mmc_core.auditing.findings.log_percent`)."""
    out = card.copy()
    for c in ("mean_error", "mean_error_lo", "mean_error_hi"):
        out[c.replace("mean_error", "mean_error_percent")] = fnd.log_percent(card[c].to_numpy(dtype=float))
    return out

"""Finding groups nobody listed: the paper's learning-oracle consistency auditor (Section 4.2).

The regions, the search / check split, the candidate sets and the one multiplicity count of the acceptance
test are here, shared by the discovery run and by the fit-time wrapper that adds the accepted groups
(:mod:`mmc_core.discovery.discover_fit`); the oracles themselves are in :mod:`mmc_core.discovery.oracle`.

For each region R of the current predictor -- the mean buckets X(mu, i), and for the a-th moment the joint
cells X(mu, m_a, i, j) -- a learning oracle (:mod:`mmc_core.discovery.oracle`) is run on a *search* sample with the
residual labels r+_R = lbar(x) - l(x, y) on R and 0 outside (and r-_R = -r+_R), where lbar is the predictor
(mu, or m_a) and l the target (y, or the pseudo-moment (y - mu)^a). It returns sets S+ and S-
(LearningOracleConsistencyAuditor). Every candidate S ∩ R is then judged on a separate *check* sample only
(LearningOracleConsistencyAuditorWrapper): its mass-weighted violation v = (1/n_check) sum_{S ∩ R} (lbar - l)
must reach the threshold (alpha for the mean, beta_a for moment a; the same mass-weighted semantics as
``MomentMulticalibrator``) *and* the hypothesis "mean residual 0 on S ∩ R" must be rejected by a two-sided
z-test at level ``level`` after a Bonferroni correction for every candidate tested. ``test="chernoff"``
uses the paper's Chernoff auditor (alg:auditor-single-set with failure probability ``level``) instead; it is
valid for any bounded label but needs far more rows.

:func:`discover` is the audit (``mmc discover``; the dashboard can call it too),
:func:`mmc_core.discovery.discover_fit.fit_with_discovery` runs ``mmc fit --discover``: fit on the listed groups, audit
the fitted predictor with the oracle on the fitting rows (split into search and check halves), add the accepted
sets as ordinary groups and refit; repeat until the oracle finds nothing or ``rounds`` audits are spent. See
README, "Finding groups you did not list", for how this relates to the paper's interleaved
AlternatingGradientDescentWithOracle.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from ..common.errors import MMCError
from ..common.tables import count_rows, to_label_array
from ..fit.thresholds import auto_threshold, check_seed
from ..groups.group_set import GroupSet, loadable_name
from ..paper.auditor import chernoff_auditor
from ..paper.buckets import mean_grid, moment_grid, moment_projection
from ..paper.moments import LabelScale, MomentKind, pseudo_label
from .oracle import FeatureMatrix, Rule, SetOracle, TreeOracle

__all__ = [
    "Finding",
    "Discovery",
    "discover",
    "oracle_audit",
    "validate_discovery_params",
    "DiscoveryStopped",
]


class DiscoveryStopped(MMCError):
    """Raised by :func:`discover` when its ``stop()`` returned True (checked before every oracle call)."""


DEDUP_JACCARD = 0.9  # two accepted sets of one kind overlapping this much are one finding (the stronger kept)


def _normal_sf(z: np.ndarray) -> np.ndarray:
    """Two-sided normal p-value 2 (1 - Phi(|z|)), via erfc (no scipy)."""
    return np.array([math.erfc(abs(float(v)) / math.sqrt(2.0)) for v in np.ravel(z)]).reshape(np.shape(z))


def validate_discovery_params(max_depth, min_mass, top=5, level=0.05, search_fraction=0.5, rounds=2):
    if not isinstance(max_depth, numbers.Integral) or isinstance(max_depth, bool) or not 1 <= max_depth <= 8:
        raise MMCError(f"max depth must be an integer from 1 to 8, got {max_depth!r}")
    if not isinstance(min_mass, numbers.Real) or isinstance(min_mass, bool) or not 0 < min_mass < 0.5:
        raise MMCError(f"min mass must be a number in (0, 0.5), got {min_mass!r}")
    if not isinstance(top, numbers.Integral) or isinstance(top, bool) or not 1 <= top <= 100:
        raise MMCError(f"top must be an integer from 1 to 100, got {top!r}")
    if not isinstance(level, numbers.Real) or not 0 < level < 1:
        raise MMCError(f"level must be strictly between 0 and 1, got {level!r}")
    if not isinstance(search_fraction, numbers.Real) or not 0.1 <= search_fraction <= 0.9:
        raise MMCError(f"search fraction must be in [0.1, 0.9], got {search_fraction!r}")
    if not isinstance(rounds, numbers.Integral) or isinstance(rounds, bool) or not 1 <= rounds <= 10:
        raise MMCError(f"discovery rounds must be an integer from 1 to 10, got {rounds!r}")


@dataclass
class Finding:
    """One candidate S ∩ R judged on the check rows. Residuals are target minus prediction."""

    rule: Rule
    kind: str  # "mean" or "moment_a"
    region: str  # the region R, in words
    region_id: int
    sign: float  # lambda of the paper: +1 when the prediction is too high on S ∩ R
    check_count: int  # rows of S ∩ R in the check sample
    residual: float  # mean of l - lbar over S ∩ R on the check rows, unit scale
    violation: float  # (check_count / n_check) * |residual|: the mass-weighted violation
    z: float
    p_raw: float
    p_value: float = 1.0  # Bonferroni-adjusted over all candidates tested
    threshold: float = 0.0
    accepted: bool = False
    count: int = 0  # rows of the whole table in S
    mass: float = 0.0
    residual_label_units: float = 0.0
    _sum: float = field(default=0.0, repr=False)  # -sum of the check rows' residuals (the Chernoff test's input)
    _rows: np.ndarray | None = field(default=None, repr=False)  # the check rows of S ∩ R
    se: float = 0.0  # standard error of ``residual`` on the check rows, unit scale
    se_label_units: float = 0.0
    # an accepted finding's critical value for its selection-adjusted interval and the false coverage-statement
    # rate it keeps (see _adjust_intervals); None: the plain 95% one
    ci_z: float | None = None
    ci_fcr: float | None = None

    def ci(self, z: float | None = None) -> tuple:
        """A two-sided normal interval of the residual, label units: at ``z`` if given, else at the finding's
        selection-adjusted ``ci_z`` (an accepted finding), else the plain 95% one."""
        z = z if z is not None else (self.ci_z if self.ci_z is not None else 1.959964)
        return (
            self.residual_label_units - z * self.se_label_units,
            self.residual_label_units + z * self.se_label_units,
        )

    @property
    def name(self) -> str:
        return self.rule.label()


@dataclass
class Discovery:
    findings: list  # every distinct candidate, accepted ones first, by violation
    n_candidates: int  # candidates tested on the check rows (before merging duplicates)
    n_search: int
    n_check: int
    thresholds: dict
    seconds: float
    info: dict = field(default_factory=dict)

    def accepted(self, kind: str | None = None) -> list:
        return [f for f in self.findings if f.accepted and (kind is None or f.kind == kind)]

    def top(self, k: int) -> list:
        """The k strongest accepted findings of each kind (mean first, then moments in order)."""
        kinds = sorted({f.kind for f in self.findings}, key=lambda s: (s != "mean", s))
        return [f for kind in kinds for f in self.accepted(kind)[:k]]

    def to_groups_json(self, k: int) -> dict:
        """The top findings in the ``mmc-groups`` format ``--groups`` reads, with descriptive fields."""
        groups: list = []
        names: set = set()
        for f in self.top(k):
            name = unique_name(f"found ({f.kind}): {f.name}", names)
            d = f.rule.group(name).to_dict()
            d.update(
                kind=f.kind,
                count=int(f.count),
                mass=float(f.mass),
                region=f.region,
                violation=float(f.violation),
                p_value=float(f.p_value),
            )
            d["mean_residual" if f.kind == "mean" else "moment_error"] = float(f.residual_label_units)
            groups.append(d)
        return {"format": "mmc-groups", "version": 1, "groups": groups}

    def table(self) -> list:
        """One row per candidate (for a dashboard table)."""
        return [
            {
                "group": f.name,
                "kind": f.kind,
                "region": f.region,
                "accepted": f.accepted,
                "count": f.count,
                "mass": f.mass,
                "check_count": f.check_count,
                "residual": f.residual_label_units,
                "violation": f.violation,
                "p_value": f.p_value,
            }
            for f in self.findings
        ]


def unique_name(name: str, taken: set) -> str:
    name = loadable_name(name)  # control and bidi characters of a rule's values escaped (mmc_core.groups.group_set)
    name = name if len(name) <= 190 else name[:187] + "..."
    out, k = name, 2
    while out in taken:
        out, k = f"{name} #{k}", k + 1
    taken.add(out)
    return out


class DiscoveryFeatures(FeatureMatrix):
    """A FeatureMatrix that also keeps the table (rules are evaluated on it)."""

    def __init__(self, table, features, n):
        super().__init__(table, features, n)
        self.table = table


def oracle_audit(
    F: DiscoveryFeatures,
    lbar: np.ndarray,
    target: np.ndarray,
    regions: np.ndarray,
    region_names: list,
    search: np.ndarray,
    check: np.ndarray,
    oracle: SetOracle,
    min_count: int,
    kind: str,
    stop=None,
    progress=None,
):
    """LearningOracleConsistencyAuditor over every region: candidates S ∩ R with their check statistics.

    ``lbar`` and ``target`` are per row of F (unit scale); ``regions`` the region id of each row; ``search``
    and ``check`` disjoint row indices. Returns a list of :class:`Finding` (not yet judged). ``stop()`` is
    polled before every oracle call (True raises :class:`DiscoveryStopped`); ``progress(region_name)`` is
    called after each region.
    """
    out = []
    n_check = check.size
    diff = target - lbar  # l - lbar: r- of the paper; r+ = -diff
    for rid in np.unique(regions[search]):
        if stop is not None and stop():
            raise DiscoveryStopped("discovery stopped by the user")
        if progress is not None:
            progress(region_names[int(rid)])
        rows = search[regions[search] == rid]
        if rows.size < 2 * min_count:
            continue
        # The oracle maximises sum r; r+ = lbar - l, so S+ (prediction too high) is the set with the largest
        # sum of -diff, S- the largest sum of diff.
        s_plus, s_minus = oracle.learn_pair(F, rows, lbar[rows] - target[rows], min_count)
        for rule, sign in ((s_plus, 1.0), (s_minus, -1.0)):
            if rule is None:
                continue
            out.append(Finding(rule, kind, region_names[int(rid)], int(rid), sign, 0, 0.0, 0.0, 0.0, 1.0))
    if not out:
        return out
    memb = GroupSet([f.rule.group(f"c{i}") for i, f in enumerate(out)]).evaluate(F.table, F.n)
    in_check = np.zeros(F.n, bool)
    in_check[check] = True
    for i, f in enumerate(out):
        rows = memb.group_rows(i + 1)
        f.count, f.mass = int(rows.size), rows.size / F.n
        v = rows[in_check[rows] & (regions[rows] == f.region_id)]
        f.check_count = int(v.size)
        if v.size == 0:
            continue
        d = diff[v]
        f.residual = float(d.mean())
        f.violation = v.size / n_check * abs(f.residual)
        sd = float(d.std(ddof=1)) if v.size > 1 else 0.0
        f.se = sd / math.sqrt(v.size)
        f.z = f.residual / (sd / math.sqrt(v.size)) if sd > 0 else (math.inf if f.residual else 0.0)
        f.p_raw = float(_normal_sf(np.array([f.z]))[0]) if math.isfinite(f.z) else (0.0 if f.residual else 1.0)
        f._sum, f._rows = float(-d.sum()), v  # -d: lbar - l, the paper's orientation (for the Chernoff test)
    return out


def _judge(findings: list, thresholds: dict, level: float, test: str, n_check: int):
    m = max(len(findings), 1)
    for f in findings:
        f.threshold = thresholds[f.kind]
        f.p_value = min(1.0, f.p_raw * m)
        if f.check_count == 0:
            continue
        if test == "chernoff":
            flagged, _, _ = chernoff_auditor(
                np.array([f._sum]), np.array([f.check_count]), n_check, f.threshold, level / m
            )
            f.accepted = bool(flagged[0])
        else:
            f.accepted = f.p_value < level and f.violation >= f.threshold
        # the oracle's sign and the check sample must agree: S+ is where the prediction is too high
        f.accepted = f.accepted and np.sign(-f.residual) == f.sign


def _adjust_intervals(findings: list, n_tested: int, level: float) -> None:
    """The accepted findings' intervals at 1 - R level / m (R accepted sets reported, after duplicates are
    merged, out of the m candidates judged on the check rows; :func:`mmc_core.auditing.findings.fcr_miss`): a candidate
    is accepted *because* its check-row residual is far from 0, so its plain 95% interval misses the truth more
    often than 5%. A finding accepted by the z test (p_raw < level / m <= R level / m) keeps 0 outside it."""
    from ..auditing.findings import fcr_miss, normal_isf2

    n_acc = sum(f.accepted for f in findings)
    if not n_acc:
        return
    z = normal_isf2(fcr_miss(n_acc, n_tested, level))
    for f in findings:
        if f.accepted:
            f.ci_z, f.ci_fcr = z, float(level)


def _dedup(findings: list, F: DiscoveryFeatures) -> list:
    """Identical rules, and accepted sets of one kind overlapping by Jaccard >= DEDUP_JACCARD: keep the
    one with the larger violation. Returns all findings, accepted first, each part by violation."""
    findings = sorted(findings, key=lambda f: (not f.accepted, -f.violation))
    seen, kept = set(), []
    for f in findings:
        key = (f.kind, f.rule.key())
        if key in seen:
            continue
        seen.add(key)
        kept.append(f)
    acc = [f for f in kept if f.accepted]
    if len(acc) > 1:
        memb = GroupSet([f.rule.group(f"c{i}") for i, f in enumerate(acc)]).evaluate(F.table, F.n)
        masks = [np.zeros(F.n, bool) for _ in acc]
        for i in range(len(acc)):
            masks[i][memb.group_rows(i + 1)] = True
        keep: list = []
        for i, f in enumerate(acc):
            dup = False
            for j in keep:
                if acc[j].kind != f.kind:
                    continue
                inter = np.count_nonzero(masks[i] & masks[j])
                union = np.count_nonzero(masks[i] | masks[j])
                if union and inter / union >= DEDUP_JACCARD:
                    dup = True
                    break
            if not dup:
                keep.append(i)
        drop = {id(acc[i]) for i in range(len(acc)) if i not in keep}
        kept = [f for f in kept if id(f) not in drop]
    return kept


def search_check_split(n_rows: int, search_fraction: float, seed: int):
    perm = np.random.default_rng(seed).permutation(n_rows)
    k = int(round(search_fraction * n_rows))
    return np.sort(perm[:k]), np.sort(perm[k:])


def audit_predictor(
    F: DiscoveryFeatures,
    yu: np.ndarray,
    mu: np.ndarray,
    moms: dict,
    m: int,
    odd_moments: str,
    search: np.ndarray,
    check: np.ndarray,
    oracle: SetOracle,
    min_mass: float,
    level: float,
    alpha="auto",
    beta="auto",
    test: str = "z",
    stop=None,
    progress=None,
) -> Discovery:
    """The oracle auditor on one predictor (unit scale): mean regions X(mu, i) and, for every moment a in
    ``moms``, joint regions X(mu, m_a, i, j). ``stop`` / ``progress(done, total, text)``: see
    :func:`discover`."""
    t0 = time.perf_counter()
    min_count = max(2, int(math.ceil(min_mass * search.size)))
    bmu = mean_grid(m).index(mu)
    findings = []
    names = [f"mean prediction bucket {i + 1}/{m}" for i in range(m)]
    n_regions = int(np.unique(bmu[search]).size) * (1 + len(moms) * m)  # an upper bound of the regions searched
    done = [0]

    def tick(name):
        if progress is not None:
            done[0] += 1
            progress(min(done[0], n_regions), n_regions, name)

    findings += oracle_audit(F, mu, yu, bmu, names, search, check, oracle, min_count, "mean", stop, tick)
    resid = yu - mu
    thresholds = {}
    n_tests_cells = m * (1 + len(moms) * m)
    thresholds["mean"] = (
        auto_threshold(float(np.std(resid[search])), n_tests_cells, search.size) if alpha == "auto" else float(alpha)
    )
    for a, ma in moms.items():
        lab = pseudo_label(a, resid, odd_moments)
        reg = bmu * m + moment_grid(a, m, odd_moments).index(ma)
        names_a = [f"mean bucket {i + 1}/{m}, moment-{a} bucket {j + 1}/{m}" for i in range(m) for j in range(m)]
        findings += oracle_audit(F, ma, lab, reg, names_a, search, check, oracle, min_count, f"moment_{a}", stop, tick)
        thresholds[f"moment_{a}"] = (
            auto_threshold(float(np.std(lab[search])), m * m, search.size) if beta == "auto" else float(beta)
        )
    _judge(findings, thresholds, level, test, check.size)
    n_tested = len(findings)  # the Bonferroni factor: every candidate judged on the check rows
    findings = _dedup(findings, F)
    _adjust_intervals(findings, n_tested, level)
    return Discovery(findings, n_tested, int(search.size), int(check.size), thresholds, time.perf_counter() - t0)


def make_oracle(oracle, max_depth, seed):
    if oracle is None:
        return TreeOracle(max_depth=int(max_depth), random_state=int(seed))
    if not hasattr(oracle, "learn_pair"):
        raise MMCError(
            "oracle must have a learn_pair(F, rows, r, min_count) method (see mmc_core.discovery.oracle.SetOracle)"
        )
    return oracle


def search_info(features, max_depth, min_mass, level) -> dict:
    """What both discovery records say about the search: ``discover``'s ``info`` and a fit's ``info["discovery"]``."""
    return {"features": list(features), "max_depth": int(max_depth), "min_mass": float(min_mass), "level": float(level)}


def discover(
    X,
    y,
    *,
    prediction=None,
    model=None,
    features,
    max_depth: int = 3,
    min_mass: float = 0.01,
    n_moments: int = 2,
    n_buckets: int = 5,
    odd_moments: str = MomentKind.ABSOLUTE,
    label_range=None,
    seed: int = 0,
    level: float = 0.05,
    alpha="auto",
    beta="auto",
    search_fraction: float = 0.5,
    test: str = "z",
    oracle: SetOracle | None = None,
    label_name: str = "label",
    stop=None,
    progress=None,
) -> Discovery:
    """Audit a predictor for miscalibrated sets nobody listed (``mmc discover``). No fitting.

    The predictor is ``prediction`` (a mean prediction in label units; the moments are then the constant
    mean pseudo-moments of the search rows) or a fitted ``model`` (:class:`FittedModel`, with its base
    prediction in ``prediction`` if it was fitted on one). The rows are split at random (``seed``) into a
    search part (``search_fraction``) for the oracle and a check part for the test. Returns a
    :class:`Discovery`; ``.top(k)`` are the k strongest accepted sets per kind, ``.to_groups_json(k)`` the
    same as an ``mmc-groups`` file.

    ``stop()`` (optional) is polled before every oracle call; when it returns True the audit ends with
    :class:`DiscoveryStopped`. ``progress(done, total, text)`` (optional) is called after each region
    searched (``total`` is an upper bound: empty regions are skipped).
    """
    n = _check_discover_args(X, max_depth, min_mass, level, search_fraction, seed, test)
    y = to_label_array(y, f"label '{label_name}'", n)
    t0 = time.perf_counter()
    if getattr(model, "task", "regression") == "binary" or np.isin(y, (0.0, 1.0)).all():
        # a 0/1 outcome's variance is p (1 - p): its mean says everything, and "variance over-predicted ...
        # (released units)^2" read as nonsense
        n_moments = 1
    scale, mu, moms, m, odd_moments = _predictor(
        X, y, n, model, prediction, n_moments, n_buckets, odd_moments, label_range, search_fraction, seed, label_name
    )
    yu = scale.to_unit(y, f"label '{label_name}'")
    F = DiscoveryFeatures(X, features, n)
    search, check = search_check_split(n, search_fraction, seed)
    res = audit_predictor(
        F,
        yu,
        mu,
        moms,
        m,
        odd_moments,
        search,
        check,
        make_oracle(oracle, max_depth, seed),
        min_mass,
        level,
        alpha,
        beta,
        test,
        stop=stop,
        progress=progress,
    )
    _in_label_units(res.findings, scale)
    res.seconds = time.perf_counter() - t0
    res.info = {
        **search_info(features, max_depth, min_mass, level),
        "test": test,
        "seed": int(seed),
        "buckets": int(m),
        "label_range": [scale.lo, scale.hi],
    }
    return res


def _predictor(
    X,
    y,
    n: int,
    model,
    prediction,
    n_moments: int,
    n_buckets,
    odd_moments,
    label_range,
    search_fraction,
    seed,
    label_name,
) -> tuple:
    """(scale, mu, moms, m, odd_moments): the audited predictor on the unit scale, a fitted model's or a
    prediction column's (its moments then the search rows' constant mean pseudo-moments)."""
    if model is not None:
        scale = model.scale
        base_u = None
        if model.uses_base:
            if prediction is None:
                raise MMCError("this model was fitted on a base prediction: pass it (--pred COL)")
            base_u = scale.to_unit(
                np.clip(to_label_array(prediction, "base prediction", n), scale.lo, scale.hi), "base prediction"
            )
        mu, moms = model.predict_unit(X, base_u, n)
        m, odd_moments = model.params.m, model.params.odd_moments
        moms = {a: v for a, v in moms.items() if a <= max(n_moments, 1)}
    else:
        if prediction is None:
            raise MMCError("discovery needs a prediction column (--pred) or a fitted model (--model)")
        pred = to_label_array(prediction, "prediction", n)
        if label_range is None:
            scale = LabelScale.observed(np.concatenate([y, pred]))
        else:
            scale = LabelScale(float(label_range[0]), float(label_range[1]), "declared")
        yu_ = scale.to_unit(y, f"label '{label_name}'")
        mu = scale.to_unit(np.clip(pred, scale.lo, scale.hi), "prediction")
        m = int(n_buckets)
        if not 1 <= m <= 1000:
            raise MMCError(f"n_buckets must be an integer from 1 to 1000, got {n_buckets!r}")
        if not isinstance(n_moments, numbers.Integral) or not 1 <= n_moments <= 8:
            raise MMCError(f"n_moments must be an integer from 1 (mean only) to 8, got {n_moments!r}")
        search, _ = search_check_split(n, search_fraction, seed)
        moms = {}
        for a in range(2, int(n_moments) + 1):
            v = float(np.mean(pseudo_label(a, yu_[search] - mu[search], odd_moments)))
            moms[a] = np.full(n, float(np.clip(v, *moment_projection(a, odd_moments))))
    return scale, mu, moms, m, odd_moments


def _check_discover_args(X, max_depth, min_mass, level, search_fraction, seed, test: str) -> int:
    """Check ``discover``'s arguments (an MMCError naming the first bad one); returns the number of rows."""
    validate_discovery_params(max_depth, min_mass, 5, level, search_fraction)
    check_seed(seed, "seed")
    if test not in ("z", "chernoff"):
        raise MMCError(f"test must be 'z' or 'chernoff', got {test!r}")
    n = count_rows(X)
    if n < 20:
        raise MMCError(f"discovery needs at least 20 rows, got {n}")
    return n


def _in_label_units(findings: list, scale) -> None:
    """Each finding's residual and its standard error in label units (a moment a's in units to the power a)."""
    for f in findings:
        a = 1 if f.kind == "mean" else int(f.kind.split("_")[1])
        f.residual_label_units = f.residual * scale.span**a
        f.se_label_units = f.se * scale.span**a

"""Shrunken cell corrections after the descent (``shrunken_cells``): a ridge fit over (group, band) cells.

The descent corrects a (group, bucket) cell only when that cell's own test passes, so at a few thousand rows a
miscalibration of a few tenths of a standard error spread over many cells is left alone: each cell alone is
within noise, yet together they are not. This step fits every cell at once, shrunk by the evidence for it:

* the final prediction is cut into ``CELL_BANDS`` bands at its quantiles on the fitting rows; a cell is a listed
  group's rows in one band;
* per band, the residuals y - mu are regressed on the rows' group indicators with a ridge penalty (in rows), no
  intercept (a listed whole-table group acts as a penalized one): a row moves by the sum of its cells'
  coefficients. This is the best linear unbiased predictor of a random-effects model in which every cell has its own bias, of
  variance (noise variance) / penalty: a cell with many more rows than the penalty keeps most of its own mean
  residual, one with far fewer keeps little, and overlapping cells (a group and its intersections) share a
  residual instead of each taking all of it;
* fitted on the fitting rows from per band sums (the groups' residual sums and their co-membership counts over
  (row, group, group) triples, or dense indicator blocks when rows are in many groups; one pass), one
  eigendecomposition per band of a |G| x |G| matrix for all of ``CELL_PENALTIES`` (3-10,000 rows; at most the
  ``CELL_MAX_GROUPS`` largest groups get a coefficient);
* the penalty is the one whose correction gives the lowest squared error on the held-out rows (none, unless
  some correction beats no correction there), and it is applied at the share of it that they bear out, the way
  the base map is (:func:`mmc_core.fit.recalibrate.stack_gate`): the held-out residuals regressed on the
  correction give its scale and z, weight min(1, max(scale, 0)) x min(1, z / 2); dropped when it leaves some
  group significantly more biased on the held-out rows than before
  (:func:`mmc_core.fit.recalibrate.harmed_groups`). The held-out rows choose among 8 penalties and a weight, as
  they choose the descent's kept round; nothing is fitted on them, so the intervals calibrated on them keep
  their guarantee. (A first version fitted the ridge on the fitting and held-out rows together, which gained
  more on the demo table, but the held-out residuals then shrank and the 90% intervals covered 0.929 of fresh
  rows against 0.941 when calibrated on fresh rows: tests/test_core_cells.py.)

Until 2026-11-27 each cell's mean residual was shrunk on its own (DerSimonian-Laird spread, a wild-bootstrap Q
test) and a row moved by the mean of its cells' corrections. On the known-truth demo table the Q test never
found the spread that a boosted corrector (MCGrad) fitted (benchmarks/README.md, "Ridge cells"); model files
of that step (rounds without ``"combine": "sum"``, version 4) are still applied as they were.

After the descent, not before: the descent's full corrections of the clear, significant cells come first; the
shrunken ones only take what it left. Before the descent (tried) they took part of every large error, spread it
over the overlapping cells of other groups, and left the descent too little to find: on the demo world the
error against the truth rose from 0.9 to 1.5 (benchmarks/README.md, "Shrunken cell corrections").

What it changes in the guarantees: the multicalibration the model states (``alpha_``, the achieved errors) is
measured on the final predictions, after this step, so the statement stays exact on the fitting rows.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..groups.sums import MembershipSums

__all__ = [
    "CELL_BANDS",
    "CELL_PENALTIES",
    "apply_cells",
    "fit_cells",
    "gated_cells",
    "check_cells",
    "apply_moment_cells",
    "check_moment_cells",
    "fit_moment_cells",
    "gated_moment_cells",
    "shuffled_gcv_gains",
    "shuffled_structure_z",
    "shuffled_zs",
    "shuffles_reaching",
    "structure_z",
]

CELL_BANDS = 10
# ridge penalties in rows (a cell of n_c rows keeps about n_c / (n_c + penalty) of its own mean residual); the
# held-out rows choose one of them or no correction
CELL_PENALTIES = (3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
CELL_MIN_ROWS = 20  # fewer fitting rows than 2 x this: no step
# only the largest groups get a coefficient: the per band co-membership tables are |G|^2 each and their
# eigendecompositions |G|^3 (one per band; a first version's 60, per fold and band, took 2.6 s at 300 groups and
# 0.9 s at 200: benchmarks/cells_time.py)
CELL_MAX_GROUPS = 200
CELL_MIN_HELD_OUT = 100  # fewer held-out rows cannot judge the correction
_GRAM_CHUNK = 2_000_000  # (row, group, group) triples per pass of the co-membership count
# above this many triples the co-membership counts are dense matrix products over blocks of rows (a row in
# hundreds of nested groups: 1.7 billion triples at 50,000 rows took 33 s counted one by one)
_DENSE_TRIPLES = 20_000_000
_DENSE_ROWS = 10_000


def _bands(mu: np.ndarray, edges) -> np.ndarray:
    return np.searchsorted(np.asarray(edges, dtype=float), mu, side="right")


def _step(mu: np.ndarray, sums: MembershipSums, values: np.ndarray, ok: np.ndarray | None, edges) -> np.ndarray:
    """One round's sum of ``values[g, band]`` over every row's groups, in its band of ``mu`` (and, with ``ok``,
    divided by the number of its cells that have one: the mean of a saved empirical-Bayes round): one pass over
    the (row, group) pairs, or per band one over the signatures when the membership has them."""
    band = _bands(mu, edges)
    okf = None if ok is None else ok.astype(float)
    if sums._by_signature:
        # rows that share their groups share these sums: per band, one sum over the signatures and a gather
        num, den = np.zeros(sums.n), np.zeros(sums.n)
        for k in range(values.shape[1]):
            sel = band == k
            if sel.any():
                num[sel] = sums.row_sums(values[:, k])[sel]
                if okf is not None:
                    den[sel] = sums.row_sums(okf[:, k])[sel]
    else:
        # (group, band) of every pair in 4 bytes, built in place from the narrow group codes and 1-byte bands:
        # at 22M pairs the int64 temporaries took 1 of the 1.1 s this pass cost
        pr = sums.pr
        key = sums._pair_groups().astype(np.int32)
        key *= values.shape[1]
        key += band.astype(np.uint8 if values.shape[1] <= 256 else np.int32)[pr]
        num = np.bincount(pr, weights=values.ravel()[key], minlength=sums.n).astype(float)
        if okf is not None:
            den = np.bincount(pr, weights=okf.ravel()[key], minlength=sums.n).astype(float)
    if okf is None:
        return num
    return np.where(den > 0, num / np.maximum(den, 1.0), 0.0)


def _round_change(mu: np.ndarray, sums: MembershipSums, rd: dict) -> np.ndarray:
    values = np.asarray(rd["values"], dtype=float)
    if rd.get("combine") == "sum":
        return _step(mu, sums, values, None, rd["edges"])
    return _step(mu, sums, values, np.asarray(rd["ok"], dtype=bool), rd["edges"])


def apply_cells(mu: np.ndarray, sums: MembershipSums, cells: dict) -> np.ndarray:
    """The corrections ``cells`` (:func:`fit_cells`) applied to a prediction (unit scale), round by round (each
    round's bands are of the prediction so far), kept in [0, 1]."""
    out = np.clip(np.asarray(mu, dtype=float), 0.0, 1.0)
    for rd in cells["rounds"]:
        out = np.clip(out + _round_change(out, sums, rd), 0.0, 1.0)
    return out


def _kept_groups(sums: MembershipSums) -> np.ndarray:
    """Index of each group among the ones that get a coefficient (the ``CELL_MAX_GROUPS`` largest), else -1."""
    sizes = np.asarray(sums.memb.sizes)
    out = np.full(sizes.size, -1, dtype=np.int64)
    keep = np.sort(np.argsort(-sizes, kind="stable")[:CELL_MAX_GROUPS])
    out[keep] = np.arange(keep.size)
    return out


def _cell_sums(r: np.ndarray, sums: MembershipSums, key: np.ndarray, n_keys: int, kept: np.ndarray) -> np.ndarray:
    """Per key, the kept groups' sums of ``r``, shape (n_keys, H): the ridge's X'r."""
    return sums.cell_table(key, n_keys, r)[kept >= 0].T


def _stats(y: np.ndarray, mu: np.ndarray, sums: MembershipSums, key: np.ndarray, n_keys: int, kept: np.ndarray):
    """Per key (a band): the kept groups' residual sums (K, H) and their co-membership counts (K, H, H), H =
    number of kept groups: the ridge's X'r and X'X."""
    H = int(kept.max()) + 1 if kept.size and kept.max() >= 0 else 0
    xr = _cell_sums(y - mu, sums, key, n_keys, kept)
    gram = np.zeros(n_keys * H * H)
    if H:
        indptr, rg = sums.memb._row_major()
        # the kept groups' pairs only (a row of many small groups would otherwise make deg^2 triples to drop)
        cg_all = kept[rg.astype(np.int64)]
        keep_pair = cg_all >= 0
        cg = cg_all[keep_pair]
        deg = np.bincount(np.repeat(np.arange(indptr.size - 1), np.diff(indptr))[keep_pair], minlength=indptr.size - 1)
        indptr = np.concatenate([[0], np.cumsum(deg)])
        tri = deg.astype(np.int64) ** 2
        if int(tri.sum()) > _DENSE_TRIPLES:
            # rows in many kept groups (nested thresholds): dense indicator blocks and a matrix product per key
            # cost n |H|^2 flops in BLAS, far less than counting the triples one by one
            dense = gram.reshape(n_keys, H, H)
            for k in np.unique(key):
                rows_k = np.flatnonzero(key == k)
                for lo in range(0, rows_k.size, _DENSE_ROWS):
                    rows = rows_k[lo : lo + _DENSE_ROWS]
                    t = deg[rows]
                    pos = np.repeat(indptr[rows] - (np.cumsum(t) - t), t) + np.arange(int(t.sum()))
                    block = np.zeros((rows.size, H))
                    block[np.repeat(np.arange(rows.size), t), cg[pos]] = 1.0
                    dense[k] += block.T @ block
            return xr, dense
        cum = np.cumsum(tri)
        if not cum.size or not cum[-1]:
            return xr, gram.reshape(n_keys, H, H)
        cuts = np.unique(np.searchsorted(cum, np.arange(_GRAM_CHUNK, int(cum[-1]), _GRAM_CHUNK), side="right"))
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), deg.size]):
            if hi <= lo:
                continue
            # every (row, group, group) triple of rows lo..hi-1: the row's pairs indexed by k // deg and k % deg
            rows = np.arange(lo, hi)
            t = tri[rows]
            rep = np.repeat(rows, t)
            k = np.arange(int(t.sum())) - np.repeat(np.cumsum(t) - t, t)
            d = deg[rep]
            a, b = cg[indptr[rep] + k // d], cg[indptr[rep] + k % d]
            gram += np.bincount((key[rep].astype(np.int64) * H + a) * H + b, minlength=n_keys * H * H)
    return xr, gram.reshape(n_keys, H, H)


def _ridge(xr: np.ndarray, gram: np.ndarray, penalties) -> list:
    """[coefficients] of the ridge of the residuals on the group indicators (no intercept: every cell's bias is
    shrunk toward 0, and "no correction" is the limit of a large penalty), one per penalty, from the sums of
    :func:`_stats`. (An unpenalized intercept per band was tried: its noise, about 1/100 of the residual
    variance per band of 130 rows, outweighed what the cells gained, and cross-validation chose no correction
    on the demo table: benchmarks/README.md, "Ridge cells".)"""
    w, v = np.linalg.eigh((gram + gram.T) / 2)
    t = v.T @ xr
    return [v @ (t / (np.maximum(w, 0.0) + lam)) for lam in penalties]


def fit_cells(y: np.ndarray, mu: np.ndarray, sums: MembershipSums) -> dict:
    """The ridge corrections of the (group, band) cells of the prediction ``mu`` (unit scale) on the rows of
    ``y``, one per penalty in ``CELL_PENALTIES`` (see the module docstring; :func:`gated_cells` chooses among
    them on held-out rows). Returns ``{"edges", "values"}``: the bands' inner edges (list) and an array
    (penalties, |G|, bands) of each cell's value; ``values`` is None with too few rows or a constant label."""
    y = np.asarray(y, dtype=float)
    mu = np.clip(np.asarray(mu, dtype=float), 0.0, 1.0)
    edges = np.unique(np.quantile(mu, np.linspace(0.0, 1.0, CELL_BANDS + 1)[1:-1])) if mu.size else np.zeros(0)
    if mu.size < 2 * CELL_MIN_ROWS or not np.std(y) > 0:
        return {"edges": edges.tolist(), "values": None}
    nb = edges.size + 1
    kept = _kept_groups(sums)
    xr, gram = _stats(y, mu, sums, _bands(mu, edges), nb, kept)
    values = np.zeros((len(CELL_PENALTIES), sums.G, nb))
    sel = kept >= 0
    for j in range(nb):
        for i, c in enumerate(_ridge(xr[j], gram[j], CELL_PENALTIES)):
            values[i, sel, j] = c[kept[sel]]
    return {"edges": edges.tolist(), "values": values}


def _round(edges, values: np.ndarray, penalty: float, weight: float) -> dict:
    return {"combine": "sum", "edges": list(edges), "values": values.tolist(), "penalty": penalty, "weight": weight}


def gated_cells(y, mu, sums: MembershipSums, held_out) -> tuple:
    """(cells or None, their check): the corrections of :func:`fit_cells` on the fitting rows (``y``, their
    prediction ``mu``, ``sums``), the penalty and the weight chosen on ``held_out`` = (y_h, mu_h, sums_h) as in
    the module docstring. The check: {"penalty", "scale", "z", "weight", "rounds", "kept", "harmed"} (penalty
    None: no penalty's correction lowered the held-out squared error; rounds: corrections judged)."""
    from .recalibrate import HARM_LEVEL, harmed_groups, stack_gate

    check = {"z": 0.0, "rounds": 0, "kept": False, "harmed": []}
    n_held = 0 if held_out is None else int(np.asarray(held_out[0]).size)
    if n_held < CELL_MIN_HELD_OUT:
        check["skipped"] = f"{n_held} held-out rows to check them on ({CELL_MIN_HELD_OUT} needed)"
        return None, check
    if np.asarray(y).size < 2 * CELL_MIN_ROWS:
        check["skipped"] = f"{np.asarray(y).size} fitting rows ({2 * CELL_MIN_ROWS} needed)"
        return None, check
    cand = fit_cells(y, mu, sums)
    if cand["values"] is None:
        return None, check
    y_h, sums_h = np.asarray(held_out[0], dtype=float), held_out[2]
    mu_h = np.clip(np.asarray(held_out[1], dtype=float), 0.0, 1.0)
    e = y_h - mu_h
    changes = [np.clip(mu_h + _step(mu_h, sums_h, v, None, cand["edges"]), 0.0, 1.0) - mu_h for v in cand["values"]]
    sse = [float(np.sum((e - ch) ** 2)) for ch in changes]
    check.update(rounds=1, penalty=None, weight=0.0)
    best = int(np.argmin(sse))
    if not sse[best] < float(e @ e):  # no penalty's correction beats none on the held-out rows (ties: none)
        return None, check
    scale, z, weight = stack_gate(e, changes[best])
    check.update(penalty=CELL_PENALTIES[best], scale=scale, z=z, weight=weight)
    if not weight > 0:
        return None, check
    harmed = harmed_groups([(y_h, mu_h, sums_h, weight * changes[best])], HARM_LEVEL) if HARM_LEVEL > 0 else []
    if harmed:
        check["harmed"] = [sums_h.memb.names[g] for g in harmed]
        return None, check
    check["kept"] = True
    return {"rounds": [_round(cand["edges"], weight * cand["values"][best], CELL_PENALTIES[best], weight)]}, check


# ---- moments: the same ridge over (group, band) cells, on the log scale -----------------------------------
# penalized IRLS steps of the log-link fit (a Gamma GLM's: unit weights, working response eta + s / m - 1), from
# zero. Four steps reach the penalized fit where the log changes are within about +-0.5 (0.006 off at most for a
# curve of ten bands from -0.5 to 0.5) but not beyond (0.58 off at +-1): they stop early there, which acts as more
# shrinkage. Iterating to convergence (step-limited) changed no known-truth world but made fertil2's held-out
# group variance error worse (0.183 -> 0.223, z 2.5; benchmarks/README.md, "The curve's own penalty")
MOMENT_CELL_ITERS = 4
MOMENT_CELL_LOG_CAP = 3.0  # a row's moment moves by at most e^3 either way
# the stages of the moment's correction, (bands, of what): whole groups first (one band: a group's evidence is
# pooled over its rows, not split in ten); then whole groups again with one curve along tenths of the mean, the
# spread along the mean that the descent's (group, mean bucket, moment bucket) cells found when it still
# corrected the moments, fitted on every row at once (per-group bands of the mean alone moved the groups'
# averages with their own noise: the known-truth worlds' worst group 0.113 -> 0.094 in `wage`, 0.101 -> 0.080
# in `wage-exact`, the log score of fresh rows better in every world; benchmarks/README.md, "One curve along the
# mean"), or along tenths of the mean's part the groups do not explain (``CURVE_ALONG``); then (group, tenth of
# the mean) cells for what one curve cannot say (a count label whose groups'
# spreads rise with the mean differently: in fertil2 the curve is dropped by the harm check and these cells
# do what they did before); then (group, tenth of the moment so far) cells of what is left
MOMENT_CELL_STAGES = ((1, "moment"), (CELL_BANDS, "curve"), (CELL_BANDS, "mean"), (CELL_BANDS, "moment"))
# the nested groups' (intersections') penalty is that of a random effect of their own, dispersion / tau^2, tau^2
# estimated on the fitting rows by the method of moments (:func:`nested_penalty`), and at least the other
# groups'. Against the held-out rows' choice of 1, 10 or 100 x the others' (the default before): the known-truth
# worlds' worst group 0.086 -> 0.078 (wage), 0.135 -> 0.128 (skewed), 0.078 -> 0.076 (feature), misses of 10%
# over 10 seeds 13 -> 10; real tables and null worlds unchanged beyond noise (benchmarks/README.md, "The
# intersections' penalty from their own spread"). The curve stage's curve likewise gets a random effect's
# penalty from the spread of its bands beyond the groups (:func:`curve_penalty`), at most the groups': sharing
# the groups' penalty, a strong curve (a spread that follows a feature) made the held-out rows pick the
# smallest and left the groups nearly unshrunk (`feature` world's worst group 0.076 -> 0.054, against the
# variance around the fit's own mean 0.073 -> 0.052, the other worlds within 0.001 of it; benchmarks/README.md,
# "The curve's own penalty"). This cap (rows) stands for tau^2 <= 0: nothing of their own
NESTED_PENALTY_CAP = 1e8
# a stage is applied only when its held-out evidence reaches this z (one-sided 1.2% under no effect): a weight
# ramping from z = 0 (min(1, z / 2), the mean cells' rule) applied noise in 17% of 190 table-derived null worlds
# (a group's variance made 1.1x off), a ramp from z = 1 in 10%, a gate at z = 2 in 5.3%, this gate in 3.2%
# (upper 95% bound 6.7%), at +0.6% of the group variance error on 19 real tables' held-out rows and no change
# in the known-truth worlds (benchmarks/README.md, "The moment cells' gate", "The moment gate at z = 2.25")
MOMENT_GATE_Z = 2.25
# the gate of the two stages along the mean: their ten bands and the candidates' penalties give noise more
# chances to look good; with the curve (in place of per-group bands) at 2.25 a group was made 1.1x off in 8 of
# 190 null worlds, at 3 in 6 of 190, the fits the other stages make (per-group bands at 2.25: 11;
# benchmarks/README.md, "One curve along the mean")
MEAN_BAND_GATE_Z = 3.0
# what the curve stage's curve may follow, the held-out rows choosing: the mean prediction, or the mean's part
# that the groups do not explain (:func:`mean_centre`). Along the mean itself a band mixes the groups' shifts of
# the mean with the spread that follows it inside them: where a feature moves both the mean and the spread and
# the groups move only the mean, the curve gave high-mean groups a higher variance that their shrunken
# coefficients only partly took back (the `feature` world's worst group 0.111 -> 0.078, corr(sd) 0.912 ->
# 0.946, no known-truth world worse; a count label whose spread follows the mean across groups keeps the
# curve along the mean; benchmarks/README.md, "One curve along the mean within groups")
CURVE_ALONG = ("mean", "mean_within")
# a stage that passes its z gate is kept only if the held-out evidence for its structure (its change beyond
# one level, :func:`structure_z`) is reached by at most 2 of the same choice (every candidate and penalty, then
# the winner's structure z) redone on this many shuffles of the held-out ratios s / v over the rows: a
# permutation p <= 3 / 101, exact whatever the tails (:func:`shuffled_structure_z`). The gate's normal reference
# assumes light tails and one candidate: on heavy-tailed labels the held-out rows' choice among the candidates
# and a mean of such ratios made noise pass it (charity's gift, ratio kurtosis 9-100: z >= 3 in 3 of 60 tests,
# 0.13% nominal). Against the gate alone: fits creating a 1.1x misstatement in the table-derived null worlds 8 of
# 190 -> 2, 4 of 120 -> 0, on four fresh tables' 5 of 40 -> 2; 19 real tables unchanged, 12 0.3584 -> 0.3604
# (cps91, z 0.8), the known-truth worlds unchanged but `equal`. The structure, not the whole change: shuffled
# ratios keep their mean, so a level off the predictions' gave every shuffle the z of the level (cps91: 20-36) and
# the stage was dropped for it (the level is set after the stages anyway); and p <= 3 / 101, not 1 / 101: at 1%
# two of the four fresh tables lost real group structure (worse than each group's own variance beyond 2 se;
# benchmarks/README.md, "Shuffled held-out ratios")
MOMENT_PERMUTATIONS = 100
MOMENT_PERMUTATIONS_REACHING = 2
MOMENT_PERMUTATION_SEED = 20261207
# a fit keeps its held-out stages only when at least one of them is strong: its structure z reached by at most 9
# of this many shuffles (p <= 10 / 1001, about 1%); the others then at the level above. Each stage holds its own
# level, but a fit tries up to four stages, so noise passed one of them in up to four times as many fits: of 400
# table-derived null worlds 8 fits kept a stage, 6 of them only stages between 1% and 3%, and all 6 created a
# 1.1x misstatement; of 245 fits on 40 real tables 95 kept a stage, 88 of them a strong one (benchmarks/README.md,
# "One strong stage per fit")
MOMENT_STRONG_PERMUTATIONS = 1000
MOMENT_STRONG_REACHING = 9
# the level of a moment (a constant factor on every row) after the cells, from the fitting and held-out rows
# together: the descent and the cells leave the fitting rows' level at their own in-sample residuals, which are
# smaller than new rows' (the mean was fitted on them), and a level from the fitting rows alone (75% of the
# post-processing rows) is noisier than one from all of them (benchmarks/README.md, "The moment's level")
LEVEL_MIN_HELD_OUT = 20
# the penalties (in rows, times the ratios' dispersion, as :func:`moment_penalties`) that the whole groups'
# shrinkage on every post-processing row chooses from by GCV: with 1,000 among them it created a 1.1x
# misstatement in 12 of 190 table-derived null worlds (the default before it: 6), from 3,000 in none more (and
# none more in 120 of another 12 tables), while the group variance error of 31 real tables was better on 1-4 and
# worse on none (benchmarks/README.md, "Whole groups shrunk on every post-processing row"); smaller ones only
# past the shuffle test below
GROUP_SHRINK_PENALTIES = (3000.0, 10000.0)
# the smaller penalties the round may choose too, once its GCV gain over no change is beyond chance: reached by at
# most ``GROUP_REACHING`` of ``GROUP_PERMUTATIONS`` seeded shuffles of the ratios' ranks over the rows, each
# redoing the choice among all the penalties (p <= 1/1001). A small table's groups can differ in spread by a
# factor of 2 and still be left at the pooled constant by the large penalties, while the small ones chosen without
# the test moved groups of null worlds by chance (benchmarks/README.md, "Small penalties for groups whose spreads
# differ")
GROUP_SMALL_PENALTIES = (30.0, 100.0, 300.0, 1000.0)
GROUP_PERMUTATIONS = 1000
GROUP_REACHING = 0
GROUP_PERMUTATION_SEED = 20261208
_SHUFFLE_BLOCK = 4_000_000  # shuffled rows x shuffles held at once
# after that round, a second one over the whole groups on the QLIKE scale: the log-link ridge (Fisher scoring to
# ``GROUP_QLIKE_ITERS`` steps) at the penalty (in rows, not scaled by the ratios' dispersion) of least QLIKE
# over ``GROUP_CV_FOLDS`` seeded folds of every post-processing row, kept only when the ratios' ranks after the
# first round still differ between groups beyond chance (the same shuffle test at the same level). The first
# round's GCV weighs rows by their squared ratio, so a few rows of a heavy tail decide its penalty; QLIKE, the
# loss a variance is judged by, weighs each row's ratio linearly (benchmarks/README.md, "Whole groups on the
# QLIKE scale")
GROUP_QLIKE_PENALTIES = (3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
GROUP_CV_FOLDS = 5
GROUP_QLIKE_ITERS = 8
_QLIKE_ETA_CAP = 30.0  # a log ratio far past any a fit keeps (MOMENT_CELL_LOG_CAP): e^-eta stays finite


def _log_change(v: np.ndarray, sums: MembershipSums, values: np.ndarray, edges) -> np.ndarray:
    """A round's log change of every row: the sum of its cells' values in its band of ``v`` (the moment so far,
    or the mean for a round banded by the mean)."""
    return np.clip(_step(v, sums, values, None, edges), -MOMENT_CELL_LOG_CAP, MOMENT_CELL_LOG_CAP)


def _banding(rd: dict, v: np.ndarray, mu, sums: MembershipSums) -> np.ndarray:
    """What a moment round's bands are of: the moment so far, the mean prediction (``"by": "mean"``), or the
    mean's part that the groups do not explain (``"by": "mean_within"``: the mean minus the sum of the row's
    groups' ``"centre"`` values, :func:`mean_centre`)."""
    by = rd.get("by", "moment")
    if by == "moment":
        return v
    if mu is None:
        raise ValueError("a moment cell round banded by the mean needs the mean predictions")
    mu = np.asarray(mu, dtype=float)
    if by == "mean_within":
        return mu - sums.row_sums(np.asarray(rd["centre"], dtype=float))
    return mu


def mean_centre(mu: np.ndarray, sums: MembershipSums) -> np.ndarray:
    """The groups' part of the mean prediction (|G|,): the least-squares coefficients of ``mu`` on the (kept)
    groups' indicators, the whole table's among them, so that ``mu`` minus the sum of a row's coefficients is
    what membership does not explain. The indicators of overlapping groups are collinear (a column's values sum
    to the whole table): a ridge of 1e-6 rows picks the least-norm solution without changing the fit."""
    mu = np.asarray(mu, dtype=float)
    kept = _kept_groups(sums)
    xr, gram = _stats(mu, np.zeros_like(mu), sums, np.zeros(mu.size, dtype=np.int64), 1, kept)
    h = gram.shape[1]
    theta = np.linalg.solve(gram[0] + 1e-6 * np.eye(h), xr[0]) if h else np.zeros(0)
    out = np.zeros(sums.G)
    out[kept >= 0] = theta[kept[kept >= 0]]
    return out


def apply_moment_cells(v: np.ndarray, sums: MembershipSums, cell: dict, bounds: tuple, mu=None) -> np.ndarray:
    """A moment's predictions (unit scale) through its cell rounds: each multiplies them by e^(the sum of the
    row's cells' values, in its band of the prediction so far, or of the mean ``mu`` (unit scale) for a round
    with ``"by": "mean"``, or of the mean minus its groups' part for ``"by": "mean_within"``), kept within
    ``bounds``."""
    v = np.asarray(v, dtype=float)
    for rd in cell["rounds"]:
        d = _log_change(_banding(rd, v, mu, sums), sums, np.asarray(rd["values"], dtype=float), rd["edges"])
        v = np.clip(v * np.exp(d), *bounds)
    return v


def nested_groups(gram_total: np.ndarray) -> np.ndarray:
    """Which groups lie inside at least two larger ones (the whole table counted), from their co-membership
    counts (H, H): the intersections of columns' values (``a=1 & b=2`` lies in ``a=1``, ``b=2`` and the whole
    table), a narrower threshold inside a wider one; not the groups only the whole table contains."""
    n_g = np.diag(gram_total)
    inside = np.isclose(gram_total, n_g[:, None]) & (n_g[None, :] > n_g[:, None])
    return inside.sum(axis=1) >= 2


def fit_moment_cells(
    s: np.ndarray,
    v: np.ndarray,
    sums: MembershipSums,
    bands: int = CELL_BANDS,
    by: np.ndarray | None = None,
    curve: bool = False,
) -> dict:
    """Log-scale ridge corrections of a moment prediction ``v`` > 0 (unit scale) for its pseudo-labels ``s``
    (e.g. squared residuals): a row's prediction is multiplied by e^(the sum of its coefficients), fitted by
    penalized IRLS for a log link with unit weights (the Gamma GLM's, whose loss is QLIKE, log m + s / m: right
    for the conditional mean of s whatever the noise's law), one fit per candidate penalty. The coefficients:
    one per (group, band) cell, the bands (``bands``, at the quantiles) of ``v`` or of ``by`` (the mean
    prediction); with ``curve`` (and ``by``), one per group, the same in every band, and one curve along the
    bands of ``by`` (the whole table's cells): a spread that follows the mean the same way in every group is then
    one curve fitted on every row, and each group's coefficient is what the curve does not explain
    (:class:`_MomentDesign`).
    A coefficient of n_c rows keeps about n_c / (n_c + penalty) of its own log ratio, and overlapping groups
    share it, as the mean's cells do. The candidates: each of ``CELL_PENALTIES`` (scaled by
    :func:`moment_penalties`) for every coefficient, the groups nested in others (:func:`nested_groups`) at
    least that and at least the penalty their own spread beyond their parents' calls for (:func:`nested_penalty`),
    so that an intersection's own coefficient is only what its parents' do not explain, and only as much of it
    as intersections differ at all; with ``curve``, the curve's coefficients at their own penalty
    (:func:`curve_penalty`) when that is smaller. Returns ``{"edges", "values", "penalties", "nested",
    "nested_penalty", "curve_penalty"}``
    (values (candidates, |G|, bands): a row's log change is the sum of its groups' values in its band; None
    with too few rows or a constant ``s``; penalties and nested: each candidate's penalty and the nested
    groups' penalty over it; nested_penalty: :func:`nested_penalty`'s, None without nested groups;
    curve_penalty: :func:`curve_penalty`'s, None without ``curve``)."""
    s, v = np.asarray(s, dtype=float), np.asarray(v, dtype=float)
    band_of = v if by is None else np.asarray(by, dtype=float)
    cuts = np.linspace(0.0, 1.0, bands + 1)[1:-1]
    edges = np.unique(np.quantile(band_of, cuts)) if band_of.size and cuts.size else np.zeros(0)
    if v.size < 2 * CELL_MIN_ROWS or not np.std(s) > 0 or not np.all(v > 0):
        return {"edges": edges.tolist(), "values": None}
    if curve and (by is None or not sums.memb.sizes[0] == v.size):  # saved as the whole table's cells
        raise ValueError("a moment curve along the mean needs the mean and the whole table as the first group")
    nb = edges.size + 1
    key = _bands(band_of, edges)
    kept = _kept_groups(sums)
    ratio = s / v
    xr0, gram = _stats(ratio, np.ones_like(ratio), sums, key, nb, kept)
    nested = nested_groups(gram.sum(axis=0))
    design = _MomentDesign(gram, kept, sums.G, nested, curve)
    lams = moment_penalties(ratio)
    ridge = _LogRidge(ratio, sums, key, band_of, edges, design, xr0)
    if curve:
        ridge.curve_lam = curve_penalty(ratio, ridge, lams[0])
    if nested.any():
        lam_n = nested_penalty(ratio, ridge, lams[0])
        cands = [(lam, max(1.0, lam_n / lam)) for lam in lams]
    else:
        lam_n, cands = None, [(lam, 1.0) for lam in lams]
    return {
        "edges": edges.tolist(),
        "values": np.stack([ridge.values(lam, r) for lam, r in cands]),
        "penalties": [c[0] for c in cands],
        "nested": [c[1] for c in cands],
        "nested_penalty": lam_n,
        "curve_penalty": ridge.curve_lam,
    }


class _LogRidge:
    """The penalized IRLS fit of :func:`fit_moment_cells` at a penalty ``lam`` (rows) and a nested groups'
    ratio ``r`` (their penalty lam r): ``values(lam, r)`` is its (|G|, bands) table of log changes. (X'X + lam D)
    theta = b with D = diag(1, or r for a nested coefficient): with X'X scaled to D^-1/2 X'X D^-1/2 = V w V',
    theta = D^-1/2 V (V' D^-1/2 b) / (w + lam), so one eigendecomposition per block and ratio serves every
    penalty."""

    def __init__(self, ratio, sums, key, band_of, edges, design, xr0):
        self.ratio, self.sums, self.key, self.band_of, self.edges = ratio, sums, key, band_of, edges
        self.design, self.xr0, self.nb = design, xr0, edges.size + 1
        self.kept = design.kept
        self.curve_lam: float | None = None  # the curve's own penalty (rows); None: the groups' lam
        self._eig: dict = {}

    def _eigen(self, r: float, rc: float) -> list:
        if (r, rc) not in self._eig:
            dh = np.where(self.design.nested, np.sqrt(r), np.where(self.design.along, np.sqrt(rc), 1.0))
            self._eig[r, rc] = [
                (dh, np.linalg.eigh((g + g.T) / 2 / dh[:, None] / dh[None, :])) for g in self.design.blocks
            ]
        return self._eig[r, rc]

    def curve_at(self, lam: float) -> float:
        """The curve's penalty (rows) when the groups' is ``lam``: its own, never above ``lam``."""
        return lam if self.curve_lam is None else min(lam, self.curve_lam)

    def change(self, values: np.ndarray) -> np.ndarray:
        """(n,): every fitting row's log change under a (|G|, bands) table."""
        return _log_change(self.band_of, self.sums, values, self.edges)

    def values(self, lam: float, r: float, rc: float | None = None) -> np.ndarray:
        """The (|G|, bands) log changes at the groups' penalty ``lam``, the nested groups' at ``lam r`` and the
        curve's at ``lam rc`` (default: the curve's own penalty ``curve_lam``, never above ``lam``)."""
        if rc is None:
            rc = self.curve_at(lam) / lam
        design, eig = self.design, self._eigen(r, rc)
        theta = [np.zeros(g.shape[0]) for g in design.blocks]
        xr = self.xr0
        for it in range(MOMENT_CELL_ITERS):
            if it:
                d = self.change(design.values(theta))
                xr = _cell_sums(self.ratio * np.exp(-d) - 1.0, self.sums, self.key, self.nb, self.kept)
            # Fisher scoring of the log link: (X'X + P) theta' = X'X theta + X'r
            for j, (b, (dh, (w, vec))) in enumerate(zip(design.rhs(xr), eig)):
                rhs = (design.blocks[j] @ theta[j] + b) / dh
                theta[j] = (vec @ ((vec.T @ rhs) / (np.maximum(w, 0.0) + lam))) / dh
        return design.values(theta)


def nested_penalty(ratio: np.ndarray, ridge: _LogRidge, lam: float) -> float:
    """The nested groups' ridge penalty (rows) for :func:`fit_moment_cells`: the residual dispersion over tau^2,
    the variance of the nested cells' own log deviations beyond their parents', so that a nested cell of n_c rows
    keeps n_c / (n_c + penalty) of its own, the best linear predictor of a random effect of variance tau^2.
    tau^2 by the method of moments (:func:`_random_effect_penalty`) over the nested cells of at least ``CELL_MIN_ROWS``
    rows, from the parents' fit alone (the nested groups held at 0, the others at penalty ``lam``, the curve at
    its own); ``NESTED_PENALTY_CAP`` when that is not positive. A cell of the curve's design is a whole group."""
    design = ridge.design
    e = ratio * np.exp(-ridge.change(ridge.values(lam, NESTED_PENALTY_CAP / lam))) - 1.0
    key, nb = (ridge.key, ridge.nb) if not design.curve else (np.zeros_like(ridge.key), 1)
    rows, sums_e, sums_e2 = (_cell_sums(x, ridge.sums, key, nb, ridge.kept) for x in (np.ones_like(e), e, e * e))
    ok = (rows >= CELL_MIN_ROWS) & design.nested[None, : rows.shape[1]]
    lev = _leverage(design, design.nested, lam, ridge.curve_at(lam))
    lev = lev[:, : design.H] if design.curve else lev[:, : rows.shape[1]]
    return _random_effect_penalty(e, rows[ok], sums_e[ok], sums_e2[ok], lev[ok])


def curve_penalty(ratio: np.ndarray, ridge: _LogRidge, lam: float) -> float:
    """The curve's own ridge penalty (rows) in the curve's design of :func:`fit_moment_cells`: as
    :func:`nested_penalty`'s, a random effect's, the dispersion over tau^2 of the bands' log deviations beyond
    the groups' (fitted at penalty ``lam``, nested groups and curve held at 0). The curve and the groups'
    coefficients get different penalties because their evidence differs: a band has a tenth of the rows, and a
    spread that follows a feature makes the curve large while the groups differ little."""
    design = ridge.design
    e = ratio * np.exp(-ridge.change(ridge.values(lam, NESTED_PENALTY_CAP / lam, NESTED_PENALTY_CAP / lam))) - 1.0
    a0 = design.a0
    rows, sums_e, sums_e2 = (
        _cell_sums(x, ridge.sums, ridge.key, ridge.nb, ridge.kept)[:, a0] for x in (np.ones_like(e), e, e * e)
    )
    ok = rows >= CELL_MIN_ROWS
    lev = _leverage(design, design.along, lam, lam)[0, design.H :]
    return _random_effect_penalty(e, rows[ok], sums_e[ok], sums_e2[ok], lev[ok])


def _random_effect_penalty(e, n, sums_e, sums_e2, lev) -> float:
    """dispersion / tau^2 (rows, at most ``NESTED_PENALTY_CAP``) from cells of ``n`` rows with Pearson residual
    sums ``sums_e`` and ``sums_e2`` of a fit without their own coefficients, ``lev`` their n_c h_c: a cell's mean
    residual c has E[n_c c^2] = (1 - h_c) (n_c tau^2 + v_c), v_c the variance of its residuals and h_c the share
    of its mean the fit takes (its leverage), so tau^2 = sum(n_c c^2 - (1 - h_c) v_c) / sum(n_c (1 - h_c)) (the
    method of moments, DerSimonian and Laird's, with the fit's degrees of freedom); the cap when that is not
    positive."""
    if not n.size:
        return NESTED_PENALTY_CAP
    c = sums_e / n
    spread = np.maximum(sums_e2 / n - c * c, 0.0)
    free = 1.0 - np.clip(lev / n, 0.0, 1.0)
    tau2 = float(np.sum(n * c * c - free * spread) / max(float(np.sum(n * free)), 1e-12))
    if not tau2 > 0:
        return NESTED_PENALTY_CAP
    return float(min(max(np.var(e), 1e-12) / tau2, NESTED_PENALTY_CAP))


def _leverage(design: _MomentDesign, own: np.ndarray, lam: float, curve_lam: float) -> np.ndarray:
    """(blocks, coefficients): n_c h_c of every coefficient marked ``own`` (0 elsewhere) in the ridge of the
    others but the nested groups and those marked (at penalty ``lam``, the curve's at ``curve_lam``):
    with u_c its rows' mean design row over them and A = (X'X + P)^-1, h_c = n_c u_c' A u_c, from the
    co-membership counts (n_c u_c is the cell's row of them)."""
    out = np.zeros((len(design.blocks), design.blocks[0].shape[0]))
    par = ~(design.nested | own)
    pen = np.where(design.along, curve_lam, lam)[par]
    mine = np.flatnonzero(own)
    for b, g in enumerate(design.blocks):  # one block with the curve
        m = g[np.ix_(mine, par)]
        a = np.linalg.inv(g[np.ix_(par, par)] + np.diag(pen))
        out[b, mine] = np.sum((m @ a) * m, axis=1)
    return out


class _MomentDesign:
    """The ridge's design for :func:`fit_moment_cells` as independent blocks of its X'X: ``blocks`` (their X'X),
    ``rhs(xr)`` (their X'r from the (band, kept group) sums), ``values(theta)`` (the (|G|, bands) table of every
    row's log change) and ``nested`` (which of a block's coefficients get the nested groups' penalty)."""

    def __init__(self, gram: np.ndarray, kept: np.ndarray, n_groups: int, nested: np.ndarray, curve: bool):
        self.kept, self.sel, self.n_groups, self.curve = kept, kept >= 0, n_groups, curve
        self.nb, self.H = gram.shape[0], gram.shape[1]
        if not curve:  # (group, band) cells: bands share no row, one block per band
            self.blocks, self.nested, self.along = list(gram), nested, np.zeros_like(nested)
            return
        self.nested = np.concatenate([nested, np.zeros(self.nb, dtype=bool)])
        self.along = np.concatenate([np.zeros_like(nested), np.ones(self.nb, dtype=bool)])
        # whole groups (H) and the curve (nb): X'X = [[sum of the bands' co-memberships, each group's rows per
        # band], [its transpose, each band's rows]]; the whole table (group 0, the largest, always kept) is
        # the curve's sum, which the penalty tells apart
        self.a0 = int(kept[0])
        counts = np.stack([np.diag(g) for g in gram])  # (nb, H)
        big = np.zeros((self.H + self.nb, self.H + self.nb))
        big[: self.H, : self.H] = gram.sum(axis=0)
        big[: self.H, self.H :] = counts.T
        big[self.H :, : self.H] = counts
        big[self.H :, self.H :] = np.diag(counts[:, self.a0])
        self.blocks = [big]

    def rhs(self, xr: np.ndarray) -> list:
        if not self.curve:
            return list(xr)
        return [np.concatenate([xr.sum(axis=0), xr[:, self.a0]])]

    def values(self, theta: list) -> np.ndarray:
        out = np.zeros((self.n_groups, self.nb))
        if not self.curve:
            out[self.sel] = np.asarray(theta).T[self.kept[self.sel]]
            return out
        out[self.sel] = theta[0][: self.H][self.kept[self.sel], None]
        out[0] += theta[0][self.H :]
        return out


def moment_penalties(ratio: np.ndarray) -> tuple:
    """The ridge penalties (in rows) tried for a moment's cells: ``CELL_PENALTIES`` times the pseudo-labels'
    dispersion relative to a Gaussian's (the variance of s / v over 2, at least 1, at most 1000): a cell's log
    ratio is that much noisier per row when the residuals have heavy tails, so the same evidence needs that many
    more rows. (Measured against the unscaled penalties on 19 tables: null-world misstatements 11 -> 10 of 190,
    real tables' group variance error 0.1899 -> 0.1891, no table worse beyond 1 se; benchmarks/README.md.)"""
    r = np.asarray(ratio, dtype=float)
    phi = float(np.var(r)) / 2.0 if r.size > 1 else 1.0
    f = min(max(phi, 1.0), 1e3) if math.isfinite(phi) else 1.0
    return tuple(lam * f for lam in CELL_PENALTIES)


def _qlike_scale(ratio: np.ndarray, d: np.ndarray) -> float:
    """The share w in [0, 1] of a log change ``d`` that minimizes the held-out QLIKE mean(w d + ratio e^(-w d))
    (convex in w: a few Newton steps from 1, kept in the interval)."""
    w = 1.0
    for _ in range(20):
        e = ratio * np.exp(-w * d)
        g, h = float(np.mean(d * (1.0 - e))), float(np.mean(d * d * e))
        if not h > 0:
            break
        w_new = min(max(w - g / h, 0.0), 1.0)
        if abs(w_new - w) < 1e-6:
            return w_new
        w = w_new
    return w


def structure_z(ratio: np.ndarray, change: np.ndarray) -> float:
    """The :func:`stack_gate` z of a log change's part beyond one level (``change`` minus its mean) against the
    held-out ratios ``ratio`` beyond theirs (ratio / its mean - 1): the evidence that the change follows the rows,
    not only that the predictions' level is off (which the level round after the stages sets)."""
    from .recalibrate import stack_gate

    level = float(np.mean(ratio))
    if not level > 0:  # every held-out squared residual 0: nothing to judge a structure by
        return 0.0
    return stack_gate(ratio / level - 1.0, change - float(np.mean(change)))[1]


def shuffled_structure_z(
    ratio: np.ndarray, changes: np.ndarray, permutations: int, exp_neg: np.ndarray | None = None
) -> np.ndarray:
    """(permutations,): a stage's choice and :func:`structure_z` redone on seeded shuffles of the held-out ratios
    ``ratio`` (n,) over the rows, 0 where a shuffle leaves no candidate better than no change. ``changes`` (C, n):
    every candidate's held-out log change, fixed by the fitting rows, so a shuffle redoes only the held-out choice
    (lowest QLIKE among the C candidates) and the winner's z: under no effect the ratios are exchangeable over the
    rows, whatever their tails. ``exp_neg``: e^(-changes) when the caller has it already. The same seed every
    call: the first k of more shuffles are the k shuffles."""
    return np.fromiter(itertools.islice(shuffled_zs(ratio, changes, exp_neg), permutations), float, permutations)


def shuffles_reaching(z: float, shuffles, permutations: int, most: int) -> int:
    """How many of the next ``permutations`` shuffles' structure z (an iterator, :func:`shuffled_zs`) reach
    ``z``, counted until more than ``most`` do (the answer is then ``most`` + 1: the test has failed, and the rest
    cannot change that)."""
    reaching = 0
    for zj in itertools.islice(shuffles, permutations):
        reaching += int(zj >= z)
        if reaching > most:
            break
    return reaching


def shuffled_zs(ratio: np.ndarray, changes: np.ndarray, exp_neg: np.ndarray | None):
    """The seeded shuffles' structure z, one at a time, for ever (see :func:`shuffled_structure_z`): each the
    :func:`structure_z` of the winner on the shuffled ratios, from what is fixed per candidate (its change
    beyond its level c, c'c and each row's HC3 factor), so that a shuffle costs a few passes over the rows."""
    d = np.asarray(changes, dtype=float)
    e = np.exp(-d) if exp_neg is None else np.asarray(exp_neg, dtype=float)
    d_mean, none = d.mean(axis=1), float(np.mean(ratio))
    c = d - d_mean[:, None]
    sxx = np.einsum("ij,ij->i", c, c)
    with np.errstate(divide="ignore", invalid="ignore"):
        lev = c * c / sxx[:, None]
        usable = (sxx > 0) & ~np.any(lev >= 1 - 1e-12, axis=1)  # as stack_gate: no z without spread or leverage 1
        q = np.where(usable[:, None], (c / (1 - lev)) ** 2, 0.0)
    qc = q * c
    qcc = np.einsum("ij,ij->i", qc, c)
    rng = np.random.default_rng(MOMENT_PERMUTATION_SEED)
    shuffled = np.empty_like(ratio, dtype=float)
    while True:
        shuffled[:] = ratio
        rng.shuffle(shuffled)  # the same draws as ratio[rng.permutation(n)]
        losses = d_mean + (e @ shuffled) / shuffled.size
        b = int(np.argmin(losses))
        level = float(np.mean(shuffled))
        if not (losses[b] < none and level > 0 and usable[b] and shuffled.size > 1):
            yield 0.0
            continue
        r = shuffled / level - 1.0
        scale = float(c[b] @ r) / sxx[b]
        # sum over rows of (c u / (1 - lev))^2 with u = r - scale c, expanded
        terms = float(q[b] @ (r * r)) - 2.0 * scale * float(qc[b] @ r) + scale * scale * qcc[b]
        se = math.sqrt(max(terms, 0.0)) / sxx[b]
        yield scale / se if se > 0 else (1e9 if scale > 0 else 0.0)


def _moment_stage(
    s, v, sums, s_h, v_h, sums_h, bands: int, by=None, by_h=None, curve: bool = False, strength: str = ""
) -> tuple:
    """One stage of :func:`gated_moment_cells`: (round or None, check); bands of the moment, or of ``by`` /
    ``by_h`` (the mean) on the fitting / held-out rows when given; ``curve``: whole groups and one curve, along
    the mean or along its part the groups do not explain (``CURVE_ALONG``), whichever candidate the held-out rows
    prefer. ``strength``: "" (the shuffles' level only), "judge" (a kept stage's ``check["strong"]`` also says
    whether it is strong: ``MOMENT_STRONG_REACHING`` of ``MOMENT_STRONG_PERMUTATIONS`` shuffles at most) or
    "need" (kept only when strong)."""
    from .recalibrate import stack_gate

    check: dict = {"bands": bands, "by": "moment" if by is None else "mean", "z": 0.0, "kept": False, "harmed": []}
    if curve:
        check["curve"] = True  # whole groups and one curve along the mean (:class:`_MomentDesign`)
    ratio = s_h / v_h
    options: list[tuple] = []  # (round's extra keys, band of the fitting rows, of the held-out rows)
    if by is None:
        options.append(({}, None, v_h))
    elif not curve:
        options.append(({"by": "mean"}, by, by_h))
    else:
        for along in CURVE_ALONG:
            if along == "mean":
                options.append(({"by": "mean"}, by, by_h))
            else:  # the centre is the fitting rows' least squares; the held-out rows get the same coefficients
                centre = mean_centre(by, sums)
                extra = {"by": "mean_within", "centre": centre.tolist()}
                options.append((extra, by - sums.row_sums(centre), by_h - sums_h.row_sums(centre)))
    cands, changes, exps, losses = [], [], [], []
    for extra, band, band_h in options:
        cand = fit_moment_cells(s, v, sums, bands, band, curve)
        if cand["values"] is None:
            continue
        for i, vals in enumerate(cand["values"]):
            d = _log_change(band_h, sums_h, vals, cand["edges"])
            cands.append((extra, cand, i))
            changes.append(d)
            exps.append(np.exp(-d))
            losses.append(float(np.mean(d + ratio * exps[-1])))
    if not cands:
        return None, check
    check.update(penalty=None, weight=0.0)
    best = int(np.argmin(losses))
    if not losses[best] < float(np.mean(ratio)):  # QLIKE at no change (ties: none)
        return None, check
    extra, cand, i = cands[best]
    d = changes[best]
    _, z, _ = stack_gate(ratio - 1.0, d)  # the evidence: the ratio residual against the change
    scale = _qlike_scale(ratio, d)  # the share borne out, on the loss's own (multiplicative) scale
    weight = scale if z >= (MOMENT_GATE_Z if by is None else MEAN_BAND_GATE_Z) else 0.0
    check.update(penalty=cand["penalties"][i], nested=cand["nested"][i], scale=scale, z=z, weight=weight)
    if cand["nested_penalty"] is not None:
        check["nested_penalty"] = cand["nested_penalty"]
    if curve:
        check["along"] = "mean" if extra.get("by") == "mean" else "mean within groups"
        check["curve_penalty"] = cand["curve_penalty"]
    if not weight > 0:
        return None, check
    if MOMENT_PERMUTATIONS > 0:
        z_structure = structure_z(ratio, d)
        shuffles = shuffled_zs(ratio, np.asarray(changes), np.asarray(exps))
        reaching = shuffles_reaching(z_structure, shuffles, MOMENT_PERMUTATIONS, MOMENT_PERMUTATIONS)
        check.update(z_structure=z_structure, p_shuffled=(1 + reaching) / (1 + MOMENT_PERMUTATIONS))
        if reaching > MOMENT_PERMUTATIONS_REACHING:  # shuffled held-out rows show as much: noise, or only a level
            check["weight"] = 0.0
            return None, check
        if strength:  # the same shuffles, then more of them
            most = MOMENT_STRONG_REACHING
            more = MOMENT_STRONG_PERMUTATIONS - MOMENT_PERMUTATIONS
            n_strong = reaching + shuffles_reaching(z_structure, shuffles, max(more, 0), most - reaching)
            check["strong"] = n_strong <= most
            if check["strong"]:
                check["p_strong"] = (1 + n_strong) / (1 + MOMENT_STRONG_PERMUTATIONS)
            elif strength == "need":
                check["weight"] = 0.0
                return None, check
    if harmed := _harmed_on_held_out(ratio, ratio * np.exp(-weight * d), sums_h):
        check["harmed"] = harmed
        return None, check
    check["kept"] = True
    rd = {
        "edges": list(cand["edges"]),
        "values": (weight * cand["values"][i]).tolist(),
        "penalty": cand["penalties"][i],
        "weight": weight,
        **extra,
    }
    return rd, check


def _held_out_stages(s, v, sums, s_h, v_h, sums_h, mu, mu_h, strength: str) -> tuple:
    """``MOMENT_CELL_STAGES`` in order on the fitting rows, each judged on the held-out rows
    (:func:`_moment_stage`): (kept rounds, the fitting and held-out rows' predictions after them, the stages'
    checks). ``strength`` "judge": each kept stage is judged strong or not until one is; "need": each stage is
    kept only when strong until one is; after a strong stage, the others at the shuffles' level alone."""
    rounds: list = []
    checks: list[dict] = []
    for bands, of in MOMENT_CELL_STAGES:
        if of in ("curve", "mean") and (mu is None or mu_h is None):
            continue
        by, by_h = (mu, mu_h) if of in ("curve", "mean") else (None, None)
        now = "" if _any_strong(checks) else strength
        rd, st = _moment_stage(s, v, sums, s_h, v_h, sums_h, bands, by, by_h, of == "curve", now)
        checks.append(st)
        if rd is not None:
            rounds.append(rd)
            one = {"rounds": [rd]}
            v = apply_moment_cells(v, sums, one, (0.0, np.inf), mu)
            v_h = apply_moment_cells(v_h, sums_h, one, (0.0, np.inf), mu_h)
    return rounds, v, v_h, checks


def _any_strong(checks: list) -> bool:
    """Whether some stage of ``checks`` was kept and judged strong (the rule one strong stage per fit reads)."""
    return any(st["kept"] and st.get("strong") for st in checks)


def _harmed_on_held_out(before: np.ndarray, after: np.ndarray, sums_h: MembershipSums) -> list:
    """The names of the groups whose held-out ratio s / v, over the held-out rows' mean ratio, is off 1 beyond
    chance after a change and more than before (:func:`mmc_core.fit.recalibrate.harmed_by`, Bonferroni over the
    groups at ``HARM_LEVEL``, each group's spread at least :func:`_ratio_sd_floor`'s).

    Relative to the held-out rows' own level, as :func:`structure_z` judges a stage: the level round after the
    stages sets the level. Judged against 1, a change that puts the groups right relative to each other but
    leaves the held-out level where it was (or moves it, as a heavy tail's few rows in the fitting rows do) looked
    like harm to every group far from that level, and right corrections were dropped (a county murder count
    whose held-out rows' mean ratio was 0.25: every stage dropped at permutation p 0.01, the test rows' group
    variance error 3.03, against 0.47 with the stages kept (benchmarks/README.md, "The harm check relative to
    the held-out level")."""
    from .recalibrate import HARM_LEVEL, harmed_by

    level_before, level_after = float(np.mean(before)), float(np.mean(after))
    if level_before > 0 and level_after > 0:
        before, after = before / level_before, after / level_after
    harmed = harmed_by([(sums_h, before - 1.0, after - 1.0)], HARM_LEVEL, sd_floor=_ratio_sd_floor(after, sums_h))
    return [sums_h.memb.names[g] for g in harmed]


def _ratio_sd_floor(after: np.ndarray, sums_h: MembershipSums) -> np.ndarray:
    """Each group's least standard deviation of its held-out ratios s / v after a change (|G|,): the
    coefficient of variation of every held-out row's ratio times the group's mean ratio. Squared residuals are
    heavy-tailed (a log-normal noise's ratio has a coefficient of variation near 3.5); a group's few hundred
    held-out rows rarely contain the tail, so their own spread understates the uncertainty of their mean, and
    the harm check dropped a right correction of a high-spread group whose held-out rows happened to miss it
    (the `skewed` known-truth world, seed 8: every stage dropped, a group left 9x off; benchmarks/README.md,
    "The harm check on heavy tails")."""
    cv = float(np.std(after) / np.mean(after)) if after.size > 1 and np.mean(after) > 0 else 0.0
    cnt = np.maximum(sums_h.group_sums(), 1.0)
    return cv * sums_h.group_sums(after) / cnt


def gated_moment_cells(s, v, sums: MembershipSums, held_out, mu=None) -> tuple:
    """(cell or None, its check) for one moment: in stages (``MOMENT_CELL_STAGES``: whole groups; when the means
    are given - ``mu`` on the fitting rows, ``held_out[3]`` on the held-out ones - whole groups with one curve
    along the bands of the mean or of its part within groups (``CURVE_ALONG``), then (group, band of the mean)
    cells; then (group, band of the moment) cells),
    :func:`fit_moment_cells` on the fitting rows (pseudo-labels ``s``, predictions ``v`` so far), the candidate
    penalty whose correction gives the held-out rows ``held_out`` = (s_h, v_h, sums_h[, mu_h]) the lowest QLIKE
    loss (none unless one beats no correction), applied at the share of it that minimizes their QLIKE when the
    evidence for it reaches z >= ``MOMENT_GATE_Z`` (``MEAN_BAND_GATE_Z`` for the two stages along the mean; the
    stacked gate of the mean's cells, on the ratio residual s_h / v_h - 1 against the log change; not at all
    below) and when the z of its structure beyond one level is reached by at most
    ``MOMENT_PERMUTATIONS_REACHING`` of the same choice on ``MOMENT_PERMUTATIONS`` shuffles of the held-out
    ratios (:func:`shuffled_structure_z`; ``check["stages"][j]["z_structure"]``, ``["p_shuffled"]``), and
    dropped when some group's held-out ratio residual, relative to the held-out level, grows beyond chance
    (Bonferroni over the groups at ``HARM_LEVEL``). The stages are kept only when one of them is strong (at most
    ``MOMENT_STRONG_REACHING`` of ``MOMENT_STRONG_PERMUTATIONS`` shuffles reach it; ``["strong"]``,
    ``["p_strong"]``); otherwise they are fitted again, each kept only when strong until one is
    (``check["weak_stages"]``: the first pass's checks). Nothing is fitted on the held-out rows by these stages;
    then one round of whole groups fitted on the fitting and held-out rows together
    (:func:`shrunken_groups_round`, also when the held-out rows are too few for the stages; ``check["groups"]``),
    a second on the QLIKE scale (:func:`qlike_groups_round`; ``check["groups_qlike"]``) and the level
    (:func:`_level_round`). The cell: ``{"rounds": [...]}``, each round {"edges", "values", "penalty",
    "weight"[, "by": "mean" | "mean_within", "centre"]}."""
    check: dict = {"kept": False, "stages": []}
    n_held = 0 if held_out is None else int(np.asarray(held_out[0]).size)
    s, v = np.asarray(s, dtype=float), np.asarray(v, dtype=float)
    if n_held == 0:
        check["skipped"] = "no held-out rows to check them on"
        return None, check
    s_h, v_h, sums_h = np.asarray(held_out[0], dtype=float), np.asarray(held_out[1], dtype=float), held_out[2]
    mu_h = held_out[3] if len(held_out) > 3 else None
    if not (np.all(v > 0) and np.all(v_h > 0)):
        return None, check
    rounds = []
    if n_held < CELL_MIN_HELD_OUT:
        check["skipped"] = f"{n_held} held-out rows to check them on ({CELL_MIN_HELD_OUT} needed)"
    elif v.size < 2 * CELL_MIN_ROWS:
        check["skipped"] = f"{v.size} fitting rows ({2 * CELL_MIN_ROWS} needed)"
    else:
        staged = _held_out_stages(s, v, sums, s_h, v_h, sums_h, mu, mu_h, "judge")
        if MOMENT_PERMUTATIONS > 0 and staged[0] and not _any_strong(staged[3]):
            # only weak stages, what noise passes in a fit at up to four times a stage's level: again, each stage
            # kept only when strong (those before the first weak one see the same rows and fail again)
            check["weak_stages"] = staged[3]
            staged = _held_out_stages(s, v, sums, s_h, v_h, sums_h, mu, mu_h, "need")
        rounds, v, v_h, check["stages"] = staged
    for key, whole_groups in (("groups", shrunken_groups_round), ("groups_qlike", qlike_groups_round)):
        if (out := whole_groups([(s, v, sums), (s_h, v_h, sums_h)])) is None:
            continue
        rd, check[key] = out
        if rd is None:
            continue
        one = {"rounds": [rd]}
        moved_h = apply_moment_cells(v_h, sums_h, one, (0.0, np.inf), mu_h)
        if harmed := _harmed_on_held_out(s_h / v_h, s_h / moved_h, sums_h):
            check[key]["harmed"] = harmed  # a group's held-out rows contradict their fitting rows: none
        else:
            rounds.append(rd)
            v, v_h = apply_moment_cells(v, sums, one, (0.0, np.inf), mu), moved_h
    if (level := _level_round(s, v, s_h, v_h, sums.G, n_held)) is not None:
        rounds.append(level)
        check["level"] = math.exp(level["values"][0][0])
    if not rounds:
        return None, check
    check["kept"] = True
    return {"rounds": rounds}, check


def shrunken_groups_round(parts) -> tuple | None:
    """A whole-groups round of a moment fitted on every post-processing row, its penalty chosen by generalized
    cross-validation: (round, check), or None when no candidate penalty beats no change. ``parts``: the
    (pseudo-labels, predictions so far, MembershipSums) of the fitting and of the held-out rows.

    The held-out stages judge a correction on a quarter of the post-processing rows: on a table of a few hundred
    to a few thousand rows a real difference between groups' spreads (a tenth or two on the log scale) never
    reaches their gate, and each group's own variance then predicts new rows better than the fit. This round is
    the first (linear) step of the log-link ridge over the whole groups on every row: the ratio residual
    e = s / v - mean(s / v) on the group indicators, a row's log change the sum of its groups' coefficients. Its
    penalty is the one of ``GROUP_SHRINK_PENALTIES`` (times the ratios' dispersion) with the least GCV, the
    residual sum of squares over n (1 - effective coefficients / n)^2, a closed-form estimate of the error on
    new rows, from one eigendecomposition of the co-membership counts; it keeps about n_g / (n_g + penalty) of
    a group's own ratio. Those penalties are large: smaller ones, chosen by chance on heavy-tailed ratios, moved
    small groups of table-derived null worlds beyond 1.1x. So the smaller ``GROUP_SMALL_PENALTIES`` compete
    only when the GCV gain over all the penalties, on the ratios' ranks, is beyond chance
    (:func:`shuffled_gcv_gains`; at most ``GROUP_REACHING`` of ``GROUP_PERMUTATIONS`` shuffles reach it;
    ``check["p_shuffled"]``, ``["small"]``). The caller drops the round where a group's held-out rows contradict
    it (as a stage's); the level round that follows re-levels."""
    if (ready := _round_rows(parts)) is None:
        return None
    parts, ratio = ready
    n = ratio.size
    sums = parts[0][2]
    kept = _kept_groups(sums)
    e = ratio - ratio.mean()
    pieces, lo = [], 0
    for _, _, sm in parts:  # X'e and X'X over every row: the sums of the parts'
        pieces.append(_stats(e[lo : lo + sm.n], np.zeros(sm.n), sm, np.zeros(sm.n, dtype=np.int64), 1, kept))
        lo += sm.n
    xr = np.sum([x[0] for x, _ in pieces], axis=0)
    gram = np.sum([g[0] for _, g in pieces], axis=0)
    scale = moment_penalties(ratio)[0] / CELL_PENALTIES[0]
    large = [scale * p for p in GROUP_SHRINK_PENALTIES]
    every = [scale * p for p in GROUP_SMALL_PENALTIES] + large
    ee = float(e @ e)
    best, rel_gcv, theta = ridge_gcv_choice(gram, xr, ee, n, every)
    check: dict = {}
    if best is not None and best < large[0]:
        passed, check["p_shuffled"] = _ranks_beyond_chance(ratio, parts, kept, gram, every)
        if not passed:
            best, rel_gcv, theta = ridge_gcv_choice(gram, xr, ee, n, large)
        else:
            theta = _log_link_steps(ratio, parts, kept, gram, best, theta)
        check["small"] = passed
    if best is None:
        return None
    values = np.zeros((sums.G, 1))
    values[kept >= 0, 0] = theta[kept[kept >= 0]]
    check = {"penalty": best, "gcv_gain": 1.0 - rel_gcv, "rows": n, **check}
    return {"edges": [], "values": values.tolist(), "penalty": best, "weight": 1.0}, check


def _round_rows(parts) -> tuple | None:
    """A whole-groups round's rows: the non-empty ``parts`` (pseudo-labels and predictions as floats, their
    MembershipSums) and the ratios s / v over them in order; None with fewer than 2 x ``CELL_MIN_ROWS`` rows, a
    ratio that is not finite or all ratios equal (nothing to tell the groups apart by)."""
    parts = [(np.asarray(s, dtype=float), np.asarray(v, dtype=float), sm) for s, v, sm in parts if np.size(s)]
    if not parts:
        return None
    ratio = np.concatenate([s / v for s, v, _ in parts])
    if ratio.size < 2 * CELL_MIN_ROWS or not np.all(np.isfinite(ratio)) or not np.std(ratio) > 0:
        return None
    return parts, ratio


def _ranks_beyond_chance(ratio, parts, kept: np.ndarray, gram: np.ndarray, penalties) -> tuple:
    """(passed, p): is the GCV gain of the whole groups' ridge (``penalties``) on the ranks of ``ratio`` reached by
    at most ``GROUP_REACHING`` of ``GROUP_PERMUTATIONS`` seeded shuffles of those ranks over the rows? Exact
    whatever the tails, and a few rows of a heavy tail, which dominate the ratios' own GCV gain, weigh no more
    than any other row, so a difference in spread shows at fewer rows. The shuffles stop once too many reach."""
    u = _midranks(ratio)
    u -= u.mean()
    n = u.size
    gain = 1.0 - ridge_gcv_choice(gram, _parts_group_sums(u, parts, kept), float(u @ u), n, penalties)[1]
    tried, reaching = 0, 0
    for gains in shuffled_gcv_gains(u, [sm for _, _, sm in parts], kept, gram, penalties):
        gains = gains[: GROUP_PERMUTATIONS - tried]
        tried += gains.size
        reaching += int(np.sum(gains >= gain))
        if reaching > GROUP_REACHING or tried >= GROUP_PERMUTATIONS:
            break
    return reaching <= GROUP_REACHING, (reaching + 1) / (tried + 1)


def qlike_groups_round(parts) -> tuple | None:
    """A whole-groups round of a moment on the QLIKE scale, on every post-processing row: (round, check), or None
    when the ratios' ranks show no difference between groups beyond chance (no check then) or no penalty's
    cross-validated QLIKE beats no change (``check["penalty"]`` None). ``parts``: the (pseudo-labels,
    predictions so far, MembershipSums) of the fitting and of the held-out rows.

    After :func:`shrunken_groups_round`, whose GCV of the ratios s / v lets a few rows of a heavy tail choose the
    penalty, this round fits the log-link ridge of s / v on the group indicators (a row's log change the sum of
    its groups' coefficients; :func:`_qlike_ridge`) at the penalty of ``GROUP_QLIKE_PENALTIES`` with the least
    QLIKE, sum(s / v') + log v', over ``GROUP_CV_FOLDS`` seeded folds of the rows, each fold predicted from the
    others. It runs only when the ranks of s / v still differ between the groups beyond chance
    (:func:`_ranks_beyond_chance`, ``check["p_shuffled"]``): a fold-chosen penalty alone created 1.1x
    misstatements in 146 of 500 table-derived null worlds. The level is the level round's."""
    if (ready := _round_rows(parts)) is None:
        return None
    parts, ratio = ready
    n = ratio.size
    kept = _kept_groups(parts[0][2])
    fold = np.random.default_rng(GROUP_PERMUTATION_SEED).permutation(n) % GROUP_CV_FOLDS
    grams, lo = np.zeros((GROUP_CV_FOLDS, int(np.sum(kept >= 0)), int(np.sum(kept >= 0)))), 0
    for *_, sm in parts:  # each fold's co-membership counts, from the parts' rows
        grams += _stats(np.zeros(sm.n), np.zeros(sm.n), sm, fold[lo : lo + sm.n], GROUP_CV_FOLDS, kept)[1]
        lo += sm.n
    gram = grams.sum(axis=0)
    scale = moment_penalties(ratio)[0] / CELL_PENALTIES[0]
    every = [scale * p for p in GROUP_SMALL_PENALTIES + GROUP_SHRINK_PENALTIES]
    passed, p = _ranks_beyond_chance(ratio, parts, kept, gram, every)
    if not passed:
        return None
    lams = np.asarray(GROUP_QLIKE_PENALTIES)
    loss = np.zeros(lams.size + 1)  # the last: no change (one constant from the other folds)
    for k in range(GROUP_CV_FOLDS):
        train = fold != k
        theta, c, change = _qlike_ridge(ratio, parts, kept, gram - grams[k], lams, train)
        eta = np.clip(c[:, None] + change, -_QLIKE_ETA_CAP, _QLIKE_ETA_CAP)[:, ~train]
        loss[:-1] += np.sum(ratio[~train] * np.exp(-eta) + eta, axis=1)
        c0 = math.log(float(ratio[train].mean()))
        loss[-1] += float(np.sum(ratio[~train] * math.exp(-c0) + c0))
    j = int(np.argmin(loss))
    check: dict = {"p_shuffled": p, "rows": n, "penalty": None if j == lams.size else float(lams[j])}
    if j == lams.size:
        return None, check
    theta = _qlike_ridge(ratio, parts, kept, gram, lams[j : j + 1], np.ones(n, dtype=bool))[0][0]
    values = np.zeros((kept.size, 1))
    values[kept >= 0, 0] = theta[kept[kept >= 0]]
    return {"edges": [], "values": values.tolist(), "penalty": float(lams[j]), "weight": 1.0}, check


def _qlike_ridge(ratio, parts, kept: np.ndarray, gram: np.ndarray, lams: np.ndarray, train: np.ndarray) -> tuple:
    """The log-link ridge of ``ratio`` (n,) on the kept groups' indicators over the ``train`` rows, for each
    penalty of ``lams`` (L,): minimizes sum(r e^-(c + X theta) + c + X theta) + lam |theta|^2 / 2 over theta and
    the unpenalized constant c by ``GROUP_QLIKE_ITERS`` Fisher-scoring steps from (log mean r, 0) (each row's
    information is 1, so the information is fixed: the train rows' count, X'1 and X'X = ``gram``). Returns theta
    (L, H), c (L,) and every row's X theta (L, n)."""
    L, H = lams.size, gram.shape[0]
    info = np.zeros((L, H + 1, H + 1))
    info[:, 0, 0] = max(int(train.sum()), 1)
    info[:, 0, 1:] = info[:, 1:, 0] = np.diag(gram)  # an indicator's square is itself: X'1 = diag(X'X)
    info[:, 1:, 1:] = gram[None] + lams[:, None, None] * np.eye(H)[None]
    inverse = np.linalg.inv(info)
    theta, full, cols = np.zeros((L, H)), np.zeros((L, kept.size)), kept >= 0
    c = np.full(L, math.log(float(ratio[train].mean())))
    for it in range(GROUP_QLIKE_ITERS + 1):
        full[:, cols] = theta[:, kept[cols]]
        change = np.vstack([np.concatenate([sm.row_sums(f) for *_, sm in parts]) for f in full])
        if it == GROUP_QLIKE_ITERS:
            break
        eta = np.clip(c[:, None] + change, -_QLIKE_ETA_CAP, _QLIKE_ETA_CAP)
        w = np.where(train, ratio * np.exp(-eta) - 1.0, 0.0)  # the score of each row's log
        grad, lo = np.zeros((L, H + 1)), 0
        grad[:, 0] = w.sum(axis=1)
        for *_, sm in parts:
            grad[:, 1:] += sm.replicate_group_sums(w[:, lo : lo + sm.n])[:, cols]
            lo += sm.n
        grad[:, 1:] -= lams[:, None] * theta
        step = np.einsum("lij,lj->li", inverse, grad)
        c, theta = c + step[:, 0], theta + step[:, 1:]
    return theta, c, change


def _midranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0 .. n-1 of ``x`` (n,), ties at their mean rank (so that the ranks are a function of the values
    alone, as a permutation test needs)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    first = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    last = np.r_[first[1:], xs.size] - 1
    ranks = np.empty(x.size)
    ranks[order] = np.repeat((first + last) / 2.0, last - first + 1)
    return ranks


def _parts_group_sums(x: np.ndarray, parts, kept: np.ndarray) -> np.ndarray:
    """The kept groups' sums of ``x`` (n,), the rows of the ``parts`` (each (.., .., MembershipSums)) in order."""
    out, lo = np.zeros(int(np.sum(kept >= 0))), 0
    for *_, sm in parts:
        out += sm.group_sums(x[lo : lo + sm.n])[kept >= 0]
        lo += sm.n
    return out


def _log_link_steps(ratio, parts, kept: np.ndarray, gram: np.ndarray, lam: float, theta: np.ndarray) -> np.ndarray:
    """``MOMENT_CELL_ITERS`` - 1 more Fisher-scoring steps of the log-link ridge over the whole groups from
    ``theta`` (the first, linear step): at a small penalty the coefficients are large, and one step on s / v
    misstates a group's log ratio (a ratio of 2 as a log change of 1). Each step's gradient is the ratio
    residual s / (v e^change) over its mean, minus 1 (the level is the level round's), its information X'X +
    lam; ``ratio``: s / v over the parts' rows in order."""
    a = gram + lam * np.eye(gram.shape[0])
    full = np.zeros(kept.size)
    for _ in range(MOMENT_CELL_ITERS - 1):
        full[kept >= 0] = theta[kept[kept >= 0]]
        change = np.concatenate([sm.row_sums(full) for *_, sm in parts])
        r = ratio * np.exp(-np.clip(change, -MOMENT_CELL_LOG_CAP, MOMENT_CELL_LOG_CAP))
        level = float(r.mean())
        if not level > 0:
            break
        grad = _parts_group_sums(r / level - 1.0, parts, kept)
        theta = theta + np.linalg.solve(a, grad - lam * theta)
    return theta


def shuffled_gcv_gains(e: np.ndarray, sums_parts, kept: np.ndarray, gram: np.ndarray, penalties):
    """Blocks of the seeded shuffles' GCV gains (1 - the least GCV over no change's, 0 where no penalty beats no
    change), for ever: :func:`ridge_gcv_choice` redone on ``e`` (n,) shuffled over the rows of the parts
    (``sums_parts``, their MembershipSums in order), the indicators and so ``gram`` fixed. Under no difference
    between the groups the ratios are exchangeable over the rows, whatever their tails. The same seed every call."""
    w, vec = _gram_eigen(gram)
    ee, n = float(e @ e), e.size
    rng = np.random.default_rng(GROUP_PERMUTATION_SEED)
    block = max(1, min(GROUP_PERMUTATIONS, _SHUFFLE_BLOCK // max(n, 1)))
    cols = kept >= 0
    while True:
        shuffled = rng.permuted(np.broadcast_to(e, (block, n)), axis=1)
        xe, lo = np.zeros((block, int(cols.sum()))), 0
        for sm in sums_parts:
            xe += sm.replicate_group_sums(shuffled[:, lo : lo + sm.n])[:, cols]
            lo += sm.n
        gcv = np.stack([_gcv(w, xe @ vec, ee, n, lam) for lam in penalties])
        yield np.maximum(1.0 - gcv.min(axis=0) / (ee / n), 0.0)


def _gram_eigen(xtx: np.ndarray) -> tuple:
    w, vec = np.linalg.eigh((xtx + xtx.T) / 2)
    return np.maximum(w, 0.0), vec


def _gcv(w: np.ndarray, bt: np.ndarray, ee: float, n: int, lam: float):
    """GCV of the ridge at penalty ``lam`` from X'X's eigenvalues ``w`` and X'e in its eigenbasis ``bt`` (..., H);
    inf when the effective coefficients reach n."""
    dof = float(np.sum(w / (w + lam)))
    if dof >= n:
        return np.full(np.shape(bt)[:-1], np.inf)
    return (ee - np.sum(bt * bt * (w + 2.0 * lam) / (w + lam) ** 2, axis=-1)) / (n * (1.0 - dof / n) ** 2)


def ridge_gcv_choice(xtx: np.ndarray, xte: np.ndarray, ee: float, n: int, penalties) -> tuple:
    """The ridge of a residual e on indicators X (no intercept) at the candidate penalty of least generalized
    cross-validation, GCV = RSS / (n (1 - dof / n)^2), dof = tr X (X'X + lam)^-1 X', all from one
    eigendecomposition of X'X: ``xtx`` (H, H), ``xte`` = X'e (H,), ``ee`` = e'e over ``n`` rows. Returns
    (penalty, its GCV over no change's, coefficients (H,)), or (None, 1.0, None) when no penalty beats no
    change (GCV e'e / n)."""
    w, vec = _gram_eigen(xtx)
    bt = vec.T @ xte
    best, best_gcv = None, ee / n
    for lam in penalties:
        gcv = float(_gcv(w, bt, ee, n, lam))
        if gcv < best_gcv:
            best, best_gcv = lam, gcv
    if best is None:
        return None, 1.0, None
    return best, best_gcv / (ee / n), vec @ (bt / (w + best))


def _level_round(s, v, s_h, v_h, n_groups: int, n_held: int) -> dict | None:
    """A round that multiplies every row's moment by c = (sum of the pseudo-labels) / (sum of the predictions)
    over the fitting and held-out rows together (QLIKE's best constant factor), through the whole-table group
    ``all`` (group 0, one band); None with fewer than ``LEVEL_MIN_HELD_OUT`` held-out rows or no change."""
    if n_held < LEVEL_MIN_HELD_OUT:
        return None
    c = (float(s.sum()) + float(s_h.sum())) / (float(v.sum()) + float(v_h.sum()))
    if not (math.isfinite(c) and c > 0) or abs(math.log(c)) < 1e-12:
        return None
    values = np.zeros((n_groups, 1))
    values[0, 0] = min(max(math.log(c), -MOMENT_CELL_LOG_CAP), MOMENT_CELL_LOG_CAP)
    return {"edges": [], "values": values.tolist(), "penalty": 0.0, "weight": 1.0}  # no ridge: one constant


def check_cells(cells, G: int, bad) -> None:
    """A model file's cells: {"rounds": [{"edges": increasing numbers in [0, 1], "values": G lists of
    len(edges) + 1 finite numbers, and either "combine": "sum" (a ridge round: a row moves by the sum of its
    cells' values) or "ok": the shape of "values" of 0/1 (an empirical-Bayes round, files before 2026-11-27: the
    mean over its cells marked ok)}]}; ``bad(msg)`` makes the error to raise."""
    rounds = cells.get("rounds") if isinstance(cells, dict) else None
    if not isinstance(rounds, list):
        raise bad('cells must be {"rounds": [...]}')

    def finite(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    def flag(v):
        return v in (0, 1) and not isinstance(v, float)

    for i, rd in enumerate(rounds):
        edges = rd.get("edges") if isinstance(rd, dict) else None
        if not isinstance(edges, list) or not all(finite(e) and 0.0 <= e <= 1.0 for e in edges):
            raise bad(f"cells.rounds[{i}].edges must be a list of numbers in [0, 1]")
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise bad(f"cells.rounds[{i}].edges must increase")
        nb = len(edges) + 1
        combine = rd.get("combine", "mean")
        if combine not in ("mean", "sum"):
            raise bad(f'cells.rounds[{i}].combine must be "sum" or "mean" (or absent), got {combine!r}')
        for key, ok in (("values", finite), ("ok", flag))[: 1 if combine == "sum" else 2]:
            tab = rd.get(key)
            if (
                not isinstance(tab, list)
                or len(tab) != G
                or not all(isinstance(row, list) and len(row) == nb and all(ok(v) for v in row) for row in tab)
            ):
                raise bad(f"cells.rounds[{i}].{key} must be {G} lists of {nb} numbers (one per group)")


def check_moment_cells(mc, moments, G: int, bad) -> dict:
    """A model file's moment_cells: {"a": {"rounds": [{"edges": increasing numbers (>= 0 unless by is
    "mean_within"), "values": G lists of len(edges) + 1 finite numbers, "penalty": a number >= 0, "weight": a
    number in (0, 1][, "by": "moment" | "mean" | "mean_within", "centre": G finite numbers with "mean_within"]},
    ...]}} for fitted moments a. Returns them keyed by int; ``bad(msg)`` makes the error to raise."""
    if not isinstance(mc, dict):
        raise bad('moment_cells must be {"<moment>": {"rounds": [...]}}')

    def finite(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    out = {}
    for key, cell in mc.items():
        a = int(key) if isinstance(key, str) and key.isdigit() else None
        if a is None or a not in moments:
            raise bad(f"moment_cells: {key!r} is not a fitted moment ({', '.join(map(str, moments)) or 'none'})")
        rounds = cell.get("rounds") if isinstance(cell, dict) else None
        if not isinstance(rounds, list) or not rounds:
            raise bad(f'moment_cells.{key} must be {{"rounds": [one or more rounds]}}')
        for i, rd in enumerate(rounds):
            where = f"moment_cells.{key}.rounds[{i}]"
            edges = rd.get("edges") if isinstance(rd, dict) else None
            by = rd.get("by", "moment") if isinstance(rd, dict) else None
            if by not in ("moment", "mean", "mean_within"):
                raise bad(f'{where}.by must be "moment", "mean" or "mean_within", got {by!r}')
            within = by == "mean_within"  # a mean minus its groups' part is signed; the others are not
            if not isinstance(edges, list) or not all(finite(e) and (within or e >= 0.0) for e in edges):
                raise bad(f"{where}.edges must be a list of {'numbers' if within else 'numbers >= 0'}")
            if any(b <= e for e, b in zip(edges, edges[1:])):
                raise bad(f"{where}.edges must increase")
            nb = len(edges) + 1
            tab = rd.get("values")
            if (
                not isinstance(tab, list)
                or len(tab) != G
                or not all(isinstance(row, list) and len(row) == nb and all(finite(x) for x in row) for row in tab)
            ):
                raise bad(f"{where}.values must be {G} lists of {nb} finite numbers (one per group)")
            pen, w = rd.get("penalty"), rd.get("weight")
            if not (finite(pen) and pen >= 0):  # 0: the level round (one constant, no ridge)
                raise bad(f"{where}.penalty must be a number >= 0")
            if not (finite(w) and 0.0 < w <= 1.0):
                raise bad(f"{where}.weight must be a number in (0, 1]")
            centre = rd.get("centre")
            if within != (centre is not None):
                raise bad(f'{where}.centre must be given exactly when by is "mean_within"')
            if within and not (isinstance(centre, list) and len(centre) == G and all(finite(x) for x in centre)):
                raise bad(f"{where}.centre must be {G} finite numbers (one per group)")
        out[a] = {"rounds": rounds}
    return out

"""Shrunken cell corrections after the descent (``shrunken_cells``): empirical Bayes over (group, band) cells.

The descent corrects a (group, bucket) cell only when that cell's own test passes, so at a few thousand rows a
miscalibration of a few hundredths spread over many cells is left alone: each cell alone is within noise, yet
together they are not. This step corrects every cell *in proportion to the evidence for it*, the way a
random-effects meta-analysis pools many small studies:

* the final prediction is cut into ``CELL_BANDS`` bands at its quantiles on the fitting rows; a cell is a listed
  group's rows in one band, used when it has at least ``CELL_MIN_ROWS`` fitting rows;
* per cell, the mean residual m_c and the squared standard error s_c^2 of that mean, from the band's pooled
  residual variance over the cell's rows (a cell's own variance follows its mean where the label's spread
  does: a rare 0/1 label, a skewed one);
* the spread of the cells' true biases, tau^2, by DerSimonian and Laird (1986): Q = sum_c m_c^2 / s_c^2 has
  expectation K + tau^2 sum_c 1 / s_c^2 over K cells, so tau^2 = (Q - K) / sum_c 1 / s_c^2, and 0 unless Q
  exceeds the top ``CELL_Q_LEVEL`` of its values over ``CELL_Q_DRAWS`` wild-bootstrap draws of the residuals
  (random signs on each row's residual around its band's mean: the null keeps the cells' overlap and the
  label's skew and tails; the normal approximation K + sqrt(2 K) ignored the overlap, and pure noise passed
  it in 27% of draws);
* each cell's correction is m_c shrunk by tau^2 / (tau^2 + s_c^2) (the posterior mean under a normal prior of
  variance tau^2): a cell a few standard errors off moves most of the way, one within noise hardly at all. A row
  moves by the mean correction of its cells (its groups, in its band);
* at most ``CELL_ROUNDS`` rounds (bands re-cut on the corrected prediction), fewer when tau^2 is 0;
* checked on the held-out rows: dropped when the squared error there is worse by ``CELL_REJECT_Z`` standard
  errors or more, or when some group ends significantly more biased there than before (the base map's check,
  :func:`mmc_core.recalibrate._harmed_groups`). Only a veto, not the base map's soft gate (its stacked scale x min(1, z / 2)):
  on ~500 held-out rows the squared error cannot see a correction of a few hundredths in a fifth of the rows.

After the descent, not before: the descent's full corrections of the clear, significant cells come first; the
shrunken ones only take what it left. Before the descent (tried) they took part of every large error, spread it
over the overlapping cells of other groups, and left the descent too little to find: on the demo world the
error against the truth rose from 0.9 to 1.5 (benchmarks/README.md, "Shrunken cell corrections").

What it changes in the guarantees: the multicalibration the model states (``alpha_``, the achieved errors) is
measured on the final predictions, after this step, so the statement stays exact on the fitting rows.
"""

from __future__ import annotations

import math

import numpy as np

from .sums import MembershipSums

__all__ = ["CELL_BANDS", "CELL_ROUNDS", "apply_cells", "describe_cells", "fit_cells", "gated_cells", "check_cells"]

CELL_BANDS = 5
# more rounds re-fit the same rows' noise: on heavy-tailed labels 20 rounds raised the test cell error where 2
# did not (benchmarks/README.md)
CELL_ROUNDS = 2
CELL_MIN_ROWS = 20
# the Q test: Q must exceed the CELL_Q_LEVEL upper quantile of its wild-bootstrap null (CELL_Q_DRAWS draws); the
# normal approximation K + z sqrt(2 K) ignored the cells' overlap, and pure noise passed it in 27% of draws
CELL_Q_DRAWS = 19
CELL_Q_LEVEL = 0.1
CELL_REJECT_Z = 1.0
CELL_MIN_HELD_OUT = 100  # fewer held-out rows cannot veto anything


def _bands(mu: np.ndarray, edges) -> np.ndarray:
    return np.searchsorted(np.asarray(edges, dtype=float), mu, side="right")


def _step(mu: np.ndarray, sums: MembershipSums, values: np.ndarray, ok: np.ndarray, edges) -> np.ndarray:
    """One round's change of every row: the mean of the corrections of the row's cells (its groups in its band
    of ``mu``) that have one (``ok``): one pass over the (row, group) pairs, or per band one over the signatures
    when the membership has them."""
    band = _bands(mu, edges)
    if sums._by_signature:
        # rows that share their groups share these sums: per band, one sum over the signatures and a gather
        num, den = np.zeros(sums.n), np.zeros(sums.n)
        okf = ok.astype(float)
        for k in range(values.shape[1]):
            sel = band == k
            if sel.any():
                num[sel] = sums.row_sums(values[:, k])[sel]
                den[sel] = sums.row_sums(okf[:, k])[sel]
    else:
        # (group, band) of every pair in 4 bytes, built in place from the narrow group codes and 1-byte bands:
        # at 22M pairs the int64 temporaries took 1 of the 1.1 s this pass cost
        pr = sums.pr
        key = sums._pair_groups().astype(np.int32)
        key *= values.shape[1]
        key += band.astype(np.uint8 if values.shape[1] <= 256 else np.int32)[pr]
        num = np.bincount(pr, weights=values.ravel()[key], minlength=sums.n).astype(float)
        den = np.bincount(pr, weights=ok.ravel().astype(float)[key], minlength=sums.n).astype(float)
    return np.where(den > 0, num / np.maximum(den, 1.0), 0.0)


def apply_cells(mu: np.ndarray, sums: MembershipSums, cells: dict) -> np.ndarray:
    """The corrections ``cells`` (:func:`fit_cells`) applied to a prediction (unit scale), round by round (each
    round's bands are of the prediction so far), kept in [0, 1]."""
    out = np.clip(np.asarray(mu, dtype=float), 0.0, 1.0)
    for rd in cells["rounds"]:
        values = np.asarray(rd["values"], dtype=float)
        ok = np.asarray(rd["ok"], dtype=bool)
        out = np.clip(out + _step(out, sums, values, ok, rd["edges"]), 0.0, 1.0)
    return out


def _null_q(r, b, nb, sums: MembershipSums, ok, n, w, rng) -> float:
    """The Q a spread of pure noise reaches: the ``CELL_Q_LEVEL`` upper quantile of Q over ``CELL_Q_DRAWS``
    wild-bootstrap draws of the residuals (each row's residual around its band's mean, times a random sign),
    so the null keeps the cells' overlap (a group's cells hold its intersections' rows), the label's skew and
    tails, and the same standard errors."""
    nbr = np.maximum(np.bincount(b, minlength=nb), 1)
    centred = r - (np.bincount(b, weights=r, minlength=nb) / nbr)[b]
    qs = np.empty(CELL_Q_DRAWS)
    for j in range(CELL_Q_DRAWS):
        rs = centred * rng.choice((-1.0, 1.0), size=r.size)
        ms = sums.cell_table(b, nb, rs)[ok] / n[ok]
        qs[j] = float(np.sum(w * ms * ms))
    # Q must exceed all but the top CELL_Q_LEVEL share of the draws (19 draws, level 0.1: all but one)
    return float(np.sort(qs)[-max(int(round(CELL_Q_LEVEL * (CELL_Q_DRAWS + 1))), 1)])


def fit_cells(y: np.ndarray, mu: np.ndarray, sums: MembershipSums, seed: int = 0) -> dict:
    """The shrunken corrections of the (group, band) cells of the prediction ``mu`` (unit scale) on the rows of
    ``y`` (see the module docstring).

    Returns ``{"rounds": [{"edges", "values" (|G| x bands), "ok" (|G| x bands, 0/1), "tau2"}, ...]}`` (lists,
    unit scale; no rounds when the cells' means are no more spread than noise makes them)."""
    y = np.asarray(y, dtype=float)
    mu = np.clip(np.asarray(mu, dtype=float), 0.0, 1.0)
    rounds = []
    sd = float(np.std(y)) if y.size else 0.0
    rng = np.random.default_rng(seed)
    for _ in range(CELL_ROUNDS):
        if mu.size < 2 * CELL_MIN_ROWS or sd <= 0:
            break
        edges = np.unique(np.quantile(mu, np.linspace(0.0, 1.0, CELL_BANDS + 1)[1:-1]))
        nb = edges.size + 1
        b = _bands(mu, edges)
        r = y - mu
        n, s1 = sums.cell_table(b, nb), sums.cell_table(b, nb, r)
        ok = n >= CELL_MIN_ROWS
        # each cell's standard error from its band's pooled residual variance, not the cell's own: where the
        # spread follows the mean (a rare 0/1 label, a skewed one) the cells with low means have small
        # variances, and weighing them by those made calibrated predictions look biased (corrections in 20 of
        # 20 calibrated draws, pushing a 2% rate down by a fifth; an all-0 cell had no variance at all)
        nb_rows = np.bincount(b, minlength=nb).astype(float)
        sb, sb2 = np.bincount(b, weights=r, minlength=nb), np.bincount(b, weights=r * r, minlength=nb)
        vb = np.maximum(sb2 - sb * sb / np.maximum(nb_rows, 1.0), 0.0) / np.maximum(nb_rows - 1.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            m = np.where(ok, s1 / np.maximum(n, 1.0), 0.0)
            se2 = np.where(ok, vb[None, :] / np.maximum(n, 1.0), np.inf)
        ok &= se2 > 0  # a band of one label value has no standard error to weigh its cells' means by
        if not ok.any():
            break
        w = 1.0 / se2[ok]
        q, k = float(np.sum(w * m[ok] ** 2)), int(ok.sum())
        tau2 = (q - k) / float(np.sum(w)) if q > _null_q(r, b, nb, sums, ok, n, w, rng) else 0.0
        if not tau2 > 0:
            break
        values = np.where(ok, tau2 / (tau2 + se2) * m, 0.0)
        step = _step(mu, sums, values, ok, edges)
        rounds.append({"edges": edges.tolist(), "values": values.tolist(), "ok": ok.astype(int).tolist(), "tau2": tau2})
        mu = np.clip(mu + step, 0.0, 1.0)
        if float(np.max(np.abs(step))) < 1e-4 * sd:
            break
    return {"rounds": rounds}


def gated_cells(y, mu, sums: MembershipSums, held_out) -> tuple:
    """(cells or None, their check): :func:`fit_cells` on the fitting rows (``y``, their prediction ``mu``,
    ``sums``), vetoed on ``held_out`` = (y_h, mu_h, sums_h) as in the module docstring. The check:
    {"z": held-out squared-error reduction in standard errors, "rounds", "kept", "harmed"} (rounds fitted)."""
    from .recalibrate import HARM_LEVEL, _gate, _harmed_groups

    check = {"z": 0.0, "rounds": 0, "kept": False, "harmed": []}
    n_held = 0 if held_out is None else int(np.asarray(held_out[0]).size)
    if n_held < CELL_MIN_HELD_OUT:
        check["skipped"] = f"{n_held} held-out rows to check them on ({CELL_MIN_HELD_OUT} needed)"
        return None, check
    if np.asarray(y).size < 2 * CELL_MIN_ROWS:
        check["skipped"] = f"{np.asarray(y).size} fitting rows ({2 * CELL_MIN_ROWS} needed)"
        return None, check
    if CELL_ROUNDS <= 0:
        return None, check
    cells = fit_cells(y, mu, sums)
    if not cells["rounds"]:
        return None, check
    y_h, mu_h, sums_h = (np.asarray(held_out[0], dtype=float), np.asarray(held_out[1], dtype=float), held_out[2])
    full = apply_cells(mu_h, sums_h, cells)
    _, z, _ = _gate((mu_h - y_h) ** 2 - (full - y_h) ** 2)
    check.update(z=z, rounds=len(cells["rounds"]))
    if z <= -CELL_REJECT_Z:
        return None, check
    harmed = _harmed_groups([(y_h, mu_h, sums_h, full - mu_h)], HARM_LEVEL) if HARM_LEVEL > 0 else []
    if harmed:
        check["harmed"] = [sums_h.memb.names[g] for g in harmed]
        return None, check
    check["kept"] = True
    return cells, check


def describe_cells(info: dict) -> str | None:
    """One sentence on the step for the fit summary, dashboard and report (None when it was not tried)."""
    c = info.get("shrunken_cells") if isinstance(info, dict) else None
    if not isinstance(c, dict):
        return None

    def num(key, cast=float):  # a model file's info is not validated: a bad value reads as 0
        v = c.get(key)
        return cast(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else cast(0)

    if c.get("kept"):
        n = num("rounds", int)
        return (
            f"each group's prediction bands corrected by their mean residual shrunk by the evidence "
            f"({n} round{'s' if n != 1 else ''}; on the held-out rows the squared error changed by z = {num('z'):.1f}, "
            f"dropped only at z <= -{CELL_REJECT_Z:g})"
        )
    if isinstance(c.get("skipped"), str):
        return f"no shrunken cell corrections (only {c['skipped']})"
    harmed = c.get("harmed")
    if isinstance(harmed, list) and harmed:
        names = [str(v) for v in harmed]
        return f"no shrunken cell corrections (they left {', '.join(names[:3])} more biased on held-out rows)"
    if num("rounds", int):
        return f"no shrunken cell corrections (held-out squared error worse: z = {num('z'):.1f})"
    return "no shrunken cell corrections (the cells' mean residuals are within noise)"


def check_cells(cells, G: int, bad) -> None:
    """A model file's cells: {"rounds": [{"edges": increasing numbers in [0, 1], "values": G lists of
    len(edges) + 1 finite numbers, "ok": the same shape of 0/1}]}; ``bad(msg)`` makes the error to raise."""
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
        for key, ok in (("values", finite), ("ok", flag)):
            tab = rd.get(key)
            if (
                not isinstance(tab, list)
                or len(tab) != G
                or not all(isinstance(row, list) and len(row) == nb and all(ok(v) for v in row) for row in tab)
            ):
                raise bad(f"cells.rounds[{i}].{key} must be {G} lists of {nb} numbers (one per group)")

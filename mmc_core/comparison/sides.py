"""The two sides of a comparison and what is summed over their rows: a :class:`Side` (a model's or a column's
predictions, :func:`side`), the per-(group, cell) sums of per-row quantities (:func:`cell_sums`,
:func:`cell_moments`) and the :class:`Layout` of those quantities for the values compared.

Both the paired comparison and the periods (:mod:`mmc_core.comparison.compare_models`) and the Dask engine build on these; apart
so that the statistics read apart from the data they are computed from.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..common.errors import DataError, MMCError
from ..common.tables import as_table, to_label_array

__all__ = ["Layout", "Side", "cell_moments", "cell_sums", "side"]


@dataclasses.dataclass(frozen=True)
class Side:
    """What one side of a comparison predicts for each row (label units): the mean, and when it has them a
    variance and interval ends, or (a classifier) its decisions at a threshold. ``name`` is how findings call
    it."""

    name: str
    mean: np.ndarray
    variance: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    decision: np.ndarray | None = None  # a classifier's 0/1 decisions at a threshold (labels then 0/1)


def side(
    source,
    table=None,
    *,
    name: str,
    base=None,
    method: str = "calibrated",
    delta: float = 0.1,
    threshold: float | None = None,
) -> Side:
    """A :class:`Side` from a fitted model (``FittedModel`` or a fitted ``MomentMulticalibrator``: its mean, its
    variance when it has one and its ``method`` intervals at ``delta``), from a prediction column (1-D array: the
    mean only), or from a dict with "mean" and optionally "variance", "lower", "upper". ``threshold``: a
    probability's decisions (mean >= threshold) for the rates of a classifier (default 0.5 for a binary model,
    none otherwise)."""
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0 < threshold < 1):
        raise MMCError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")
    model = getattr(source, "model_", source)
    if hasattr(model, "predict") and hasattr(model, "groups"):
        if table is None:
            raise MMCError(f"side {name!r}: a model needs the table to predict on")
        table = as_table(table)
        pred = model.predict(table, None if base is None else to_label_array(base, f"side {name!r}: base"))
        variance = pred.get("moment_2")
        lower = upper = None
        if getattr(model, "task", "regression") != "binary" and model.moments:
            from ..intervals import available_methods, predict_intervals

            if method not in available_methods(model):
                raise MMCError(
                    f"side {name!r}: interval method {method!r} is not available for this model "
                    f"(available: {', '.join(available_methods(model))})"
                )
            lower, upper = predict_intervals(model, table, base, method=method, delta=delta)
        mean = np.asarray(pred["mean"], float)
        if getattr(model, "task", "regression") == "binary" and threshold is None:
            threshold = 0.5
        return Side(name, mean, variance, lower, upper, _decisions(mean, threshold))
    if isinstance(source, dict):
        unknown = set(source) - {"mean", "variance", "lower", "upper"}
        if unknown or "mean" not in source:
            raise MMCError(f"side {name!r}: a dict needs 'mean' and may have 'variance', 'lower', 'upper'")
        cols = {k: to_label_array(v, f"side {name!r}: {k}") for k, v in source.items() if v is not None}
        if ("lower" in cols) != ("upper" in cols):
            raise MMCError(f"side {name!r}: interval ends come in pairs: pass both 'lower' and 'upper'")
        if "variance" in cols and (cols["variance"] < 0).any():
            raise DataError(f"side {name!r}: variance has negative values")
        return Side(
            name,
            cols["mean"],
            cols.get("variance"),
            cols.get("lower"),
            cols.get("upper"),
            _decisions(cols["mean"], threshold),
        )
    mean = to_label_array(source, f"side {name!r}: mean")
    return Side(name, mean, decision=_decisions(mean, threshold))


def _decisions(mean, threshold):
    return None if threshold is None else (np.asarray(mean) >= threshold).astype(float)


# ---- the delta method over (group, cell) means ------------------------------------------------------------
def cell_sums(sums, Q: np.ndarray, cells: np.ndarray | None, n_cells: int, shift: np.ndarray):
    """Per (group, cell) sums of the K rows of ``Q`` minus ``shift`` and of their pairwise products: count (C,),
    S1 (C, K), S2 (C, K, K), with C = groups x ``n_cells``. Sums add across row blocks (Dask partitions) when
    every block uses the same ``shift``; a shift near the quantities' means keeps the covariance of values far
    from zero (widths, large labels) from cancelling catastrophically."""
    K, n = Q.shape
    Qc = Q - np.asarray(shift, float)[:, None]
    if cells is None and not sums.by_signature:
        layers = sums.memb.layers(first_fit=False)
        if layers is not None:
            return _group_sums_by_layers(Qc, layers, sums.memb.n_groups)
    cells_ = np.zeros(n, dtype=np.int64) if cells is None else cells
    cnt = sums.cell_sums(cells_, n_cells)
    S1 = np.stack([sums.cell_sums(cells_, n_cells, Qc[k]) for k in range(K)], axis=1)
    S2 = np.empty((cnt.size, K, K))
    for k in range(K):
        for j in range(k, K):
            S2[:, k, j] = S2[:, j, k] = sums.cell_sums(cells_, n_cells, Qc[k] * Qc[j])
    return cnt, S1, S2


def _group_sums_by_layers(Qc, layers, G: int):
    """:func:`cell_sums` per group (one cell) through the membership's layers (each row's group in each layer, G
    for none; :meth:`mmc_core.groups.membership.Membership.layers`): a ``bincount`` per (layer, quantity or product) over the
    rows in order, with the row's own weight: no gather of a weight per (row, group) pair (8x faster than the
    pairs on a million rows of 200 groups), and each group's rows are added in row order as over the pairs."""
    K = Qc.shape[0]
    cnt, S1, S2 = np.zeros(G + 1), np.zeros((G + 1, K)), np.zeros((G + 1, K, K))
    for keys in layers:
        cnt += np.bincount(keys, minlength=G + 1)
        for k in range(K):
            S1[:, k] += np.bincount(keys, weights=Qc[k], minlength=G + 1)
            for j in range(k, K):
                S2[:, k, j] += np.bincount(keys, weights=Qc[k] * Qc[j], minlength=G + 1)
    iu = np.triu_indices(K, 1)
    S2[:, iu[1], iu[0]] = S2[:, iu[0], iu[1]]
    return cnt[:G], S1[:G], S2[:G]


def cell_moments(cnt, S1, S2, shift):
    """Means (C, K) and covariances (C, K, K, ddof 1) from :func:`cell_sums`."""
    with np.errstate(invalid="ignore", divide="ignore"):
        M = S1 / cnt[:, None]
        S = (S2 - cnt[:, None, None] * M[:, :, None] * M[:, None, :]) / (cnt - 1)[:, None, None]
    return M + np.asarray(shift, float)[None, :], S


class Layout:
    """Which rows of the quantity matrix hold each side's residual, squared residual, variance, coverage and
    width; built from what the sides have (``has``: per side, (has a variance, has intervals)), so that every
    block of rows (a Dask partition) lays its quantities out alike."""

    def __init__(self, has, target: float):
        self.at, k = [], 0
        for flags in has:
            has_var, has_int = flags[0], flags[1]
            has_dec = len(flags) > 2 and flags[2]
            at = {"r": k, "r2": k + 1}
            k += 2
            if has_var:
                at["v"], k = k, k + 1
            if has_int:
                at["c"], at["w"], k = k, k + 1, k + 2
            if has_dec:
                at["d"], at["dy"], at["y"], k = k, k + 1, k + 2, k + 3
            self.at.append(at)
        self.K, self.target = k, target

    @classmethod
    def of(cls, sides, target: float) -> Layout:
        return cls([(s.variance is not None, s.lower is not None, s.decision is not None) for s in sides], target)

    def rows(self, sides, y) -> np.ndarray:
        """The (K, n) quantities of ``sides`` on labels ``y``."""
        Q = np.empty((self.K, y.size))
        for s, at in zip(sides, self.at):
            r = y - s.mean
            Q[at["r"]], Q[at["r2"]] = r, r * r
            if "v" in at:
                Q[at["v"]] = s.variance
            if "c" in at:
                Q[at["c"]] = (y >= s.lower) & (y <= s.upper)
                Q[at["w"]] = s.upper - s.lower
            if "d" in at:
                Q[at["d"]], Q[at["dy"]], Q[at["y"]] = s.decision, s.decision * y, y
        return Q

    def value(self, M, i: int, what: str, compared: bool):
        """Side ``i``'s value ``what`` per cell and its gradient over the K quantities, (C,), (C, K); NaN where the
        side lacks what the value needs. ``compared``: the form that is compared (|mean error|, |log R|, |coverage
        - target|) rather than the value shown."""
        at, C, K = self.at[i], M.shape[0], M.shape[1]
        grad = np.zeros((C, K))
        need = {
            "rmse": ("r2",),
            "mean_error": ("r",),
            "spread": ("r", "r2", "v"),
            "coverage": ("c",),
            "width": ("w",),
            "selection_rate": ("d",),
            "tpr": ("dy", "y"),
            "fpr": ("d", "dy", "y"),
        }
        if any(k not in at for k in need[what]):
            return np.full(C, np.nan), grad
        with np.errstate(invalid="ignore", divide="ignore"):
            if what == "rmse":
                val = np.sqrt(M[:, at["r2"]])
                grad[:, at["r2"]] = 0.5 / val
            elif what == "mean_error":
                val = M[:, at["r"]]
                grad[:, at["r"]] = 1.0
                if compared:
                    sg = np.sign(val)
                    val, grad = np.abs(val), grad * sg[:, None]
            elif what == "spread":
                mr, mv = M[:, at["r"]], M[:, at["v"]]
                var = M[:, at["r2"]] - mr * mr
                val = var / mv
                grad[:, at["r"]] = -2 * mr / var
                grad[:, at["r2"]] = 1 / var
                grad[:, at["v"]] = -1 / mv
                if compared:  # |log R|, gradient of log R times its sign
                    lr = np.log(val)
                    val, grad = np.abs(lr), grad * np.sign(lr)[:, None]
                else:  # R itself: d R = R d log R
                    grad = grad * val[:, None]
            elif what == "coverage":
                val = M[:, at["c"]]
                grad[:, at["c"]] = 1.0
                if compared:
                    gap = val - self.target
                    val, grad = np.abs(gap), grad * np.sign(gap)[:, None]
            elif what == "width":
                val = M[:, at["w"]]
                grad[:, at["w"]] = 1.0
            elif what == "selection_rate":
                val = M[:, at["d"]]
                grad[:, at["d"]] = 1.0
            elif what == "tpr":  # mean(d y) / mean(y)
                my, mdy = M[:, at["y"]], M[:, at["dy"]]
                val = mdy / my
                grad[:, at["dy"]], grad[:, at["y"]] = 1 / my, -mdy / my**2
            else:  # fpr: mean(d (1 - y)) / mean(1 - y)
                my, mdy, md = M[:, at["y"]], M[:, at["dy"]], M[:, at["d"]]
                val = (md - mdy) / (1 - my)
                grad[:, at["d"]], grad[:, at["dy"]] = 1 / (1 - my), -1 / (1 - my)
                grad[:, at["y"]] = (md - mdy) / (1 - my) ** 2
        return val, np.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0)

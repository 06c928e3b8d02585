"""Learning oracles for the oracle-efficient auditor (paper Section 4.2), and their rules.

An oracle takes rows x with real labels r and returns a set S (an indicator over the feature space) meant to
maximise sum_{x in S} r(x) over its hypothesis class H: the paper's (rho, p)-agnostic learning oracle, with
hypotheses in {0, 1}. Here H is "conjunctions of up to ``max_depth`` column conditions" and every returned
set is a *rule* in the group grammar of :mod:`mmc_core.groups.group_set` (a conjunction, or with ``form="leaves"`` a
disjunction of conjunctions in the ``any`` field), so it can be stored in a model's JSON, read by a person
and replayed exactly on new rows. Membership is always recomputed from the rule, never from the learner.

:class:`TreeOracle` is a scikit-learn regression tree; scikit-learn is imported only when a tree is fitted,
so ``import mmc_core`` stays numpy-only. Any object with a ``learn_pair`` method of the same signature can be
plugged in instead (see :class:`SetOracle`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..common.errors import MMCError
from ..groups.conditions import Condition, is_numeric_column, missing_mask, table_column
from ..groups.group_set import Group

__all__ = ["FeatureMatrix", "Rule", "SetOracle", "TreeOracle", "MAX_CATEGORIES"]

MAX_CATEGORIES = 30  # a text column's most frequent values get an indicator each; rarer values share "other"


@dataclass(frozen=True)
class Rule:
    """A set as data: OR over ``terms`` of the AND of each term's conditions."""

    terms: tuple  # tuple[tuple[Condition, ...], ...]

    def group(self, name: str) -> Group:
        if len(self.terms) == 1:
            return Group(name, tuple(self.terms[0]))
        return Group(name, (), tuple(tuple(t) for t in self.terms))

    def label(self) -> str:
        parts = [" & ".join(c.label() for c in t) for t in self.terms]
        return parts[0] if len(parts) == 1 else " | ".join(f"({p})" for p in parts)

    def key(self) -> tuple:
        return tuple(
            sorted(
                tuple(sorted((c.column, c.op, repr(c.value), repr(c.values), repr(c.lo), repr(c.hi)) for c in t))
                for t in self.terms
            )
        )


class FeatureMatrix:
    """The feature columns encoded once for the learner.

    Numeric and boolean columns are used as float (missing values stay NaN; the tree routes them, the rule
    read back from it treats a missing value as failing every comparison, as the group grammar does). Text
    and categorical columns get one 0/1 indicator per frequent value (a split reads back as ``col == v`` or
    ``col != v``). Columns are read through the group grammar's own column reader, so the learner sees the
    values the rules will be evaluated on.
    """

    def __init__(self, table, features, n: int | None = None, max_categories: int = MAX_CATEGORIES):
        features = list(features)
        if not features:
            raise MMCError("discovery needs at least one feature column")
        if len(set(features)) != len(features):
            raise MMCError("a feature column is listed twice")
        blocks: list[np.ndarray] = []
        self.source: list[
            tuple[str, str | None]
        ] = []  # source[j] = (column, None) numeric, or (column, value) indicator
        for c in features:
            arr = table_column(table, c)
            if is_numeric_column(arr):
                blocks.append(arr.astype(np.float32)[:, None])
                self.source.append((c, None))
                continue
            miss = missing_mask(arr)
            vals, counts = np.unique(arr[~miss].astype(str), return_counts=True)
            if vals.size == 0:
                raise MMCError(f"feature column '{c}' has no values")
            keep = vals[np.argsort(-counts, kind="stable")[:max_categories]]
            text = np.where(miss, "", arr.astype(str))
            blocks.append(np.stack([(text == v) & ~miss for v in keep], axis=1).astype(np.float32))
            self.source.extend((c, str(v)) for v in keep)
        self.X = np.concatenate(blocks, axis=1) if blocks else np.zeros((0, 0), np.float32)
        self.features = features
        self.n = self.X.shape[0]

    def condition(self, j: int, threshold: float, left: bool) -> Condition:
        """The condition for the left (x <= t) or right (x > t) child of a split on encoded column j."""
        col, val = self.source[j]
        if val is not None:  # indicator: <= 0.5 means "is not v"
            return Condition(col, "!=" if left else "==", value=val)
        return Condition(col, "<=" if left else ">", value=self.threshold(j, float(threshold)))

    def threshold(self, j: int, t: float):
        """The shortest decimal v with the same partition of column j as t: a <= v < b for the largest value
        a <= t and the smallest value b > t (the tree's threshold is their midpoint; a short number reads
        better and splits the rows identically)."""
        key = (j, t)
        cache = self.__dict__.setdefault("_thr", {})
        if key not in cache:
            x = self.X[:, j].astype(float)
            with np.errstate(invalid="ignore"):
                below, above = x[x <= t], x[x > t]
            a = float(below.max()) if below.size else -math.inf
            b = float(above.min()) if above.size else math.inf
            v = t
            for digits in range(1, 18):
                c = float(f"{t:.{digits}g}")
                if a <= c < b:
                    v = c
                    break
            cache[key] = int(v) if v.is_integer() and abs(v) < 2**53 else v
        return cache[key]


def simplify(conds) -> tuple:
    """Merge the conditions of one path: tightest bounds per numeric column, one ==/not in per text column."""
    out: list = []
    num: dict = {}
    txt: dict = {}
    for c in conds:
        if c.op in ("<=", ">"):
            lo_hi = num.setdefault(c.column, [None, None])
            if c.op == ">":
                lo_hi[0] = c.value if lo_hi[0] is None else max(lo_hi[0], c.value)
            else:
                lo_hi[1] = c.value if lo_hi[1] is None else min(lo_hi[1], c.value)
        else:
            txt.setdefault(c.column, []).append(c)
    for col, (lo, hi) in num.items():
        if lo is not None:
            out.append(Condition(col, ">", value=lo))
        if hi is not None:
            out.append(Condition(col, "<=", value=hi))
    for col, cs in txt.items():
        eq = [c for c in cs if c.op == "=="]
        if eq:
            out.append(eq[0])
            continue
        vals = tuple(sorted({c.value for c in cs}))
        out.append(Condition(col, "!=", value=vals[0]) if len(vals) == 1 else Condition(col, "not in", values=vals))
    return tuple(out)


class SetOracle:
    """Interface of a learning oracle.

    ``learn_pair(F, rows, r, min_count)`` gets the encoded features, the row indices of one region R and the
    residual label r on those rows; it returns ``(S_plus, S_minus)``: rules (or None) for a set with a large
    positive sum of r and one with a large negative sum (the paper's runs of the oracle on r+ and r- = -r+;
    rows outside R have label 0 and add nothing to either sum, so only R's rows are passed). Every set must
    hold at least ``min_count`` of R's rows.
    """

    def learn_pair(self, F: FeatureMatrix, rows: np.ndarray, r: np.ndarray, min_count: int):
        raise NotImplementedError


class TreeOracle(SetOracle):
    """A depth-limited scikit-learn regression tree on the residuals of one region.

    The squared-error tree fitted on -r is the mirror image of the one fitted on r, so one tree answers both
    the r+ and the r- run. The returned set is a tree node (a conjunction of the conditions on its path;
    every node holds at least ``min_count`` rows) with the largest sum of r+ (resp. r-), ties within a share
    ``tie`` of it going to the node with the largest sum / sqrt(count) (the most specific set carrying the
    violation); with
    ``form="leaves"`` also the union of all leaves of positive sum (the tree's own 0/1 hypothesis, a
    disjunction) competes. ``n_trees`` > 1 adds trees fitted on bootstrap halves with random feature subsets
    (a small ensemble: more candidate nodes, each scored on all of R's rows).
    """

    def __init__(
        self, max_depth: int = 3, form: str = "node", n_trees: int = 1, random_state: int = 0, tie: float = 0.1
    ):
        if not isinstance(max_depth, int) or isinstance(max_depth, bool) or not 1 <= max_depth <= 8:
            raise MMCError(f"max depth must be an integer from 1 to 8, got {max_depth!r}")
        if form not in ("node", "leaves"):
            raise MMCError(f"rule form must be 'node' or 'leaves', got {form!r}")
        if not isinstance(n_trees, int) or not 1 <= n_trees <= 20:
            raise MMCError(f"n_trees must be an integer from 1 to 20, got {n_trees!r}")
        if not isinstance(tie, (int, float)) or not 0 <= tie < 1:
            raise MMCError(f"tie must be in [0, 1), got {tie!r}")
        self.max_depth, self.form, self.n_trees, self.random_state = max_depth, form, n_trees, random_state
        self.tie = float(tie)

    def _trees(self, X, r, min_count):
        from sklearn.tree import DecisionTreeRegressor  # lazy: mmc_core stays numpy-only at import

        rng = np.random.default_rng(self.random_state)
        for t in range(self.n_trees):
            if t == 0:
                rows, feats = np.arange(X.shape[0]), np.arange(X.shape[1])
            else:
                rows = rng.choice(X.shape[0], size=X.shape[0] // 2, replace=False)
                feats = np.sort(rng.choice(X.shape[1], size=max(1, (2 * X.shape[1]) // 3), replace=False))
            leaf = max(1, min_count if t == 0 else min_count // 2)
            if rows.size < 2 * leaf:
                continue
            tree = DecisionTreeRegressor(
                max_depth=self.max_depth, min_samples_leaf=leaf, random_state=self.random_state + t
            )
            tree.fit(X[np.ix_(rows, feats)] if t else X, r[rows])
            yield tree.tree_, feats

    def learn_pair(self, F: FeatureMatrix, rows: np.ndarray, r: np.ndarray, min_count: int):
        X = F.X[rows]
        cands: list = []  # (rule, membership over R's rows)
        for tr, feats in self._trees(X, r, min_count):
            paths: dict[int, tuple] = {0: ()}
            member = {0: np.ones(X.shape[0], bool)}
            leaves = []
            for node in range(tr.node_count):  # parents precede children in sklearn's node order
                lc, rc = tr.children_left[node], tr.children_right[node]
                if lc == -1:
                    leaves.append(node)
                    continue
                j = int(feats[tr.feature[node]])
                thr = tr.threshold[node]
                col = X[:, j]
                # Rule semantics (a missing value fails both comparisons), not the tree's routing of NaN.
                with np.errstate(invalid="ignore"):
                    member[lc] = member[node] & (col <= thr)
                    member[rc] = member[node] & (col > thr)
                paths[lc] = paths[node] + (F.condition(j, thr, True),)
                paths[rc] = paths[node] + (F.condition(j, thr, False),)
            for node, path in paths.items():
                if path:
                    cands.append(((simplify(path),), member[node]))
            if self.form == "leaves":
                sums = {lf: float(r[member[lf]].sum()) for lf in leaves}
                for sign in (1.0, -1.0):
                    pos = [lf for lf in leaves if sign * sums[lf] > 0 and paths[lf]]
                    if len(pos) > 1:
                        cands.append(
                            (tuple(simplify(paths[lf]) for lf in pos), np.logical_or.reduce([member[lf] for lf in pos]))
                        )
        if not cands:
            return None, None
        # Scores on R's rows through the *rule* (the set that will be stored), not the tree's routing.
        scores = np.array([float(r[m].sum()) for _, m in cands])
        counts = np.array([int(m.sum()) for _, m in cands])
        ok = counts >= min_count
        out: list[Rule | None] = []
        for sign in (1.0, -1.0):
            s = np.where(ok, sign * scores, -np.inf)
            best = float(s.max())
            if not np.isfinite(best) or best <= 0:
                out.append(None)
                continue
            # Among the sets within a share `tie` of the largest sum, the one with the largest sum / sqrt(count):
            # a superset padded with unbiased rows, or a subset cut by a noise split, scores lower than the
            # set that carries the signal. (An agnostic oracle with rho = tie * best on the tree's nodes.)
            near = s >= (1.0 - self.tie) * best
            z = np.where(near, s / np.sqrt(np.maximum(counts, 1)), -np.inf)
            out.append(Rule(cands[int(np.argmax(z))][0]))
        return tuple(out)

"""What a fit will do, decided once before the descent starts: the rows it fits on and holds out, the bucket counts it
tries, the descent's thresholds, grids and floors for each count, and the stages around the descent.

Both engines build it with :func:`plan_fit` (the numpy engine from the fitting rows' arrays, the Dask engine from
the same figures computed by reductions over partitions) and follow it; the estimator keeps the fit's plan as
``plan_`` and its threshold preview (``planned_thresholds``) reads the same record, so the preview, the two engines
and the model cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..paper.descent_params import DescentParams
from .cells import CELL_MIN_HELD_OUT, CELL_MIN_ROWS
from .fit_params import build_params
from .thresholds import AUTO_BUCKETS, effective_rule

__all__ = ["STAGES", "FitPlan", "base_map_of", "plan_fit"]

# the stages a fit can run, in order: the base map (a recalibration of the base prediction), the descent (the
# paper's alternating descent with early stopping on the held-out rows), the shrunken cell corrections of the mean
# and of the moments (judged on the held-out rows), the interval calibration (on the held-out rows). The first four
# are the stages the fit summary reports (mmc_core.estimator.stages.STAGE_LABELS)
STAGES = ("base map", "descent", "mean cells", "moment cells", "intervals")


@dataclass(frozen=True)
class FitPlan:
    """One fit's plan (see the module docstring).

    Attributes
    ----------
    n_fit, n_held_out : int
        Rows the descent fits on; rows held out (early stopping, the bucket choice, the cells' gates and the
        interval calibration).
    n_groups : int
        Groups calibrated on.
    task : {"regression", "binary"}
        The label's task.
    moments : tuple of int
        The central moments fitted (2..K; empty for a mean only).
    bucket_counts : tuple of int
        The bucket counts tried (one, or the candidates of ``n_buckets="auto"``, chosen on the held-out rows).
    early_stopping : bool
        Whether the held-out rows choose the round the model keeps.
    base_map : {"none", "affine", "group-linear"}
        The map of the base prediction fitted before the descent ("none": the base as given, or no base).
    stages : tuple of str
        The stages of :data:`STAGES` this fit runs, in order.
    threshold_rules : tuple of (str, str)
        The rules alpha and beta are set by ("se", "auto" or "given").
    """

    n_fit: int
    n_held_out: int
    n_groups: int
    task: str
    moments: tuple
    bucket_counts: tuple
    early_stopping: bool
    base_map: str
    stages: tuple
    threshold_rules: tuple
    descents: Mapping = field(repr=False)  # bucket count -> (DescentParams, {moment: initial prediction})

    def has(self, stage: str) -> bool:
        """Whether the fit runs ``stage`` (one of :data:`STAGES`)."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
        return stage in self.stages

    def descent(self, m: int) -> tuple[DescentParams, dict]:
        """The descent's parameters for ``m`` buckets and the moments' initial predictions {moment: value}."""
        params, init = self.descents[m]
        return params, dict(init)

    def as_dict(self) -> dict:
        """The plan as plain values (the thresholds of each bucket count included), e.g. to show or log."""
        return {
            "n_fit": self.n_fit,
            "n_held_out": self.n_held_out,
            "n_groups": self.n_groups,
            "task": self.task,
            "moments": list(self.moments),
            "bucket_counts": list(self.bucket_counts),
            "early_stopping": self.early_stopping,
            "base_map": self.base_map,
            "stages": list(self.stages),
            "threshold_rules": {"alpha": self.threshold_rules[0], "beta": self.threshold_rules[1]},
            "thresholds": {
                str(m): {"alpha": p.alpha, "beta": p.beta, "moment_betas": {str(a): b for a, b in p.moment_betas}}
                for m, (p, _) in self.descents.items()
            },
        }


def base_map_of(est, has_base: bool) -> str:
    """The map of the base prediction a fit prepares its rows with: "none" without a base prediction."""
    if not has_base or est.base_recalibration == "none":
        return "none"
    return "affine" if est.base_recalibration == "affine" else "group-linear"  # "group-logistic" too: its first map


def plan_fit(
    est,
    *,
    n_fit: int,
    n_held_out: int,
    n_groups: int,
    moments: tuple,
    task: str,
    stats,
    early: bool,
    base_map: str,
    intervals: bool = True,
) -> FitPlan:
    """The plan of ``est``'s fit on rows described by these counts and figures.

    Parameters
    ----------
    est : MomentMulticalibrator
        Its parameters, already checked at the top of the fit (:func:`mmc_core.fit.parameters.check_parameters`).
    n_fit, n_held_out, n_groups : int
        Fitting rows, held-out rows, groups.
    moments : tuple of int
        The central moments fitted.
    task : str
        "regression" or "binary".
    stats : FitStats or the Dask engine's figures
        What the thresholds and grids are chosen from (:func:`mmc_core.fit.fit_params.build_params`).
    early : bool
        Whether early stopping is on (:func:`mmc_core.fit.fit_steps.check_held_out` decided it).
    base_map : str
        The map of the base the rows were prepared with ("none", "affine" or "group-linear").
    intervals : bool
        False when the caller calibrates no intervals (a cross-fit's folds).

    Returns
    -------
    FitPlan
    """
    counts = AUTO_BUCKETS if est.n_buckets == "auto" else (int(est.n_buckets),)
    follow = bool(est.shrunken_cells) and n_held_out >= CELL_MIN_HELD_OUT and n_fit >= 2 * CELL_MIN_ROWS
    descents = {
        m: build_params(est, m, n_groups, n_fit, moments, None, None, None, stats, moment_cells_follow=follow)
        for m in counts
    }
    stages = ["descent"]
    if base_map != "none":
        stages.insert(0, "base map")
    if est.shrunken_cells and n_held_out:
        stages += ["mean cells", "moment cells"] if moments else ["mean cells"]
    if intervals and n_held_out and task != "binary":
        stages.append("intervals")
    return FitPlan(
        n_fit=int(n_fit),
        n_held_out=int(n_held_out),
        n_groups=int(n_groups),
        task=task,
        moments=tuple(moments),
        bucket_counts=tuple(counts),
        early_stopping=bool(early),
        base_map=base_map,
        stages=tuple(stages),
        threshold_rules=(effective_rule(est.alpha, est.step), effective_rule(est.beta, est.step)),
        descents=descents,
    )

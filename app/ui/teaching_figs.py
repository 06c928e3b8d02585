"""Teaching mode: a step-by-step controller around :class:`mmc_core.fit.fresh.FreshDescent` and its figures.

Why one module of ~560 lines: every figure of a lesson step is drawn from the same exact population state
the controller keeps (the support, its probabilities, the current predictors); split, each figure would need
the controller's internals. The words of a step are in :mod:`app.ui.teaching_text`.

Everything is computed exactly on the synthetic distribution's finite support (its probabilities are known),
so the figures show population truths, while the algorithm itself only sees fresh samples, as in the paper.
No Streamlit here: the page (``teaching_page.py``) keeps a :class:`Lesson` in session state.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.charts import OKABE_ITO
from app.figures.figure_style import legend_line, message_only
from mmc_core import GroupSet
from mmc_core.common import DiscreteBetaDistribution, demo_distribution
from mmc_core.fit import FreshDescent
from mmc_core.paper import DescentParams

__all__ = [
    "Lesson",
    "LessonConfig",
    "min_rows",
    "group_table",
    "cells_figure",
    "potential_figure",
    "truth_figure",
    "two_point_figure",
]

FONT = dict(family="DejaVu Sans, Arial, Helvetica, sans-serif", size=13, color="#222222")
PRED, TRUE, EXTRA = OKABE_ITO["blue"], OKABE_ITO["vermillion"], OKABE_ITO["green"]
TOL = "#dcc3a5"  # light tan band behind the truth markers


def min_rows(alpha: float, beta: float, delta: float) -> int:
    """Smallest n with 2 sqrt(ln(2/delta) / (2n)) <= min(alpha, beta) (the paper's condition), rounded up."""
    eps = min(alpha, beta) / 2
    n = math.log(2 / delta) / (2 * eps * eps)
    return int(math.ceil(n / 10_000) * 10_000)


def strong_distribution() -> DiscreteBetaDistribution:
    """A teaching population with large, large-group effects (easy to see in a few audits): outcome 0-100
    given sex, race (A/B), age (young/old) and a score 0-4; race B, women of race B and older people are
    noisier."""
    return DiscreteBetaDistribution(
        features={
            "sex": (("F", "M"), (0.5, 0.5)),
            "race": (("A", "B"), (0.6, 0.4)),
            "age": (("young", "old"), (0.5, 0.5)),
            "score": (tuple(range(5)), tuple([0.2] * 5)),
        },
        intercept=0.35,
        score_slope=0.04,
        mean_effects={("race", "B"): -0.12, ("sex", "F"): 0.08, ("age", "old"): 0.12},
        base_sd=0.06,
        sd_effects={("race", "B"): 0.05, ("age", "old"): 0.03},
        interaction_sd={(("sex", "F"), ("race", "B")): 0.05},
        label_name="outcome",
        label_range=(0.0, 100.0),
    )


POPULATIONS = {
    "strong": ("strong group effects (easy to see)", strong_distribution),
    "reference": ("the reference population of the synthetic_scores table (subtle effects)", demo_distribution),
}


@dataclass(frozen=True)
class LessonConfig:
    alpha: float = 0.02
    beta: float = 0.02
    m: int = 5
    delta: float = 1e-3
    columns: tuple = ("sex", "race", "age")
    start: str = "zero"  # "zero" (the paper) or "mean" (label mean and variance)
    seed: int = 0
    population: str = "strong"  # a key of POPULATIONS

    @property
    def n(self) -> int:
        return min_rows(self.alpha, self.beta, self.delta)


@dataclass
class Lesson:
    """One teaching run: the descent, the exact population quantities, and a trace of every step."""

    config: LessonConfig
    fd: FreshDescent = field(init=False)
    trace: list = field(default_factory=list)
    last: dict | None = None
    seconds: float = 0.0

    def __post_init__(self):
        c = self.config
        self.dist = POPULATIONS.get(c.population, POPULATIONS["reference"])[1]()
        self.support, self.prob = self.dist.support()
        self.true_mean = self.dist.true_mean(self.support)
        self.true_var = self.dist.true_sd(self.support) ** 2
        cols = [col for col in c.columns if col in self.support]
        self.groups = GroupSet.from_columns(self.support, cols, 1)
        self.memb = self.groups.evaluate(self.support, len(self.prob))
        params = DescentParams(c.alpha, c.beta, c.m, (2,), "paper")
        if c.start == "mean":
            m0 = float(np.sum(self.prob * self.true_mean))
            v0 = float(np.sum(self.prob * (self.true_var + (self.true_mean - m0) ** 2)))
        else:
            m0 = v0 = 0.0
        self.fd = FreshDescent(
            self.dist.sample, self.groups, params, c.n, c.delta, c.seed, init_mean=m0, init_moment=v0, truth=self.dist
        )
        self.phi0 = self.fd.potential()
        self.trace.append(
            {"step": 0, "kind": "start", "potential": self.phi0, "mean_updates": 0, "moment_updates": 0, "samples": 0}
        )

    # -- stepping --
    @property
    def done(self) -> bool:
        return self.fd.done

    def step(self) -> dict:
        if self.fd.done:
            return {"kind": "converged"}
        t = time.perf_counter()
        n_log = len(self.fd.model.log)
        ev = self.fd.step()
        self.seconds += time.perf_counter() - t
        ev = dict(ev)
        ev["log_before"] = n_log
        self.last = ev
        self.trace.append(
            {
                "step": len(self.trace),
                "kind": ev["kind"],
                "potential": ev.get("potential", self.phi()),
                "mean_updates": self.fd.mean_updates,
                "moment_updates": self.fd.moment_updates,
                "samples": self.fd.audits * self.fd.n,
                "group": ev.get("group", ""),
            }
        )
        return ev

    def run_for(self, seconds: float, max_steps: int = 1000) -> int:
        """Steps until ``seconds`` have passed (at least one step unless done)."""
        t0, k = time.perf_counter(), 0
        while not self.fd.done and k < max_steps:
            self.step()
            k += 1
            if time.perf_counter() - t0 >= seconds:
                break
        return k

    def phi(self) -> float:
        return self.fd.potential()

    # -- population quantities --
    def predictions(self, upto: int | None = None):
        mu, moms = self.fd.model.predict_unit(self.support, n=len(self.prob), upto=upto)
        return mu, moms[2]


def _weighted_mean(v, w):
    s = float(np.sum(w))
    return float(np.sum(v * w) / s) if s > 0 else float("nan")


def _tolerance(lesson: Lesson, rows, cells, thr: float) -> float:
    """What the auditor lets pass on a group, as an average over its rows: sum over the group's occupied cells
    c of P(c)/P(G) * (thr / (P(c) - eps_n) + 2 sqrt(ln(2/delta) / (2 P(c) n))), the paper's single-set test
    (alg:auditor-single-set) solved for the cell's unweighted error. Infinite if some cell is too small to
    be audited at all (P(c) <= eps_n)."""
    c = lesson.config
    n = lesson.fd.n
    eps_n = math.sqrt(math.log(2 / c.delta) / (2 * n))
    w = lesson.prob[rows]
    pg = float(w.sum())
    if pg <= 0:
        return float("nan")
    mass = np.bincount(cells, weights=w)
    mass = mass[mass > 0]
    if np.any(mass <= eps_n):
        return float("inf")
    tol = thr / (mass - eps_n) + 2 * np.sqrt(math.log(2 / c.delta) / (2 * mass * n))
    return float(np.sum(mass / pg * tol))


def group_table(lesson: Lesson, scale: float = 100.0) -> pd.DataFrame:
    """Per group: mass, predicted vs true mean, predicted variance vs its target, in label units, and the
    tolerance the auditor allows each at this sample size (``mean_tol``, ``var_tol``)."""
    mu, m2 = lesson.predictions()
    p, tm, tv = lesson.prob, lesson.true_mean, lesson.true_var
    target = tv + (tm - mu) ** 2  # E[(y - mu(x))^2 | x]: what the moment predictor is fitted to
    params = lesson.fd.model.params
    bi, bj = params.mean_grid.index(mu), params.grid(2).index(m2)
    c = lesson.config
    rows = []
    for g, name in enumerate(lesson.groups.names):
        r = lesson.memb.group_rows(g)
        w = p[r]
        rows.append(
            {
                "group": name,
                "mass": float(w.sum()),
                "pred_mean": scale * _weighted_mean(mu[r], w),
                "true_mean": scale * _weighted_mean(tm[r], w),
                "pred_var": scale**2 * _weighted_mean(m2[r], w),
                "target_var": scale**2 * _weighted_mean(target[r], w),
                "true_var": scale**2 * _weighted_mean(tv[r], w),
                "mean_tol": scale * _tolerance(lesson, r, bi[r], c.alpha),
                "var_tol": scale**2 * _tolerance(lesson, r, bi[r] * c.m + bj[r], c.beta),
            }
        )
    return pd.DataFrame(rows)


def _layout(fig, title, height, subtitle=None, legend_below_px: int | None = None):
    """Title (and a grey subtitle) in a fixed band above the plot; optional legend ``legend_below_px`` pixels
    under the plot area (below the x-axis title)."""
    text = f"<b>{title}</b>" + (f"<br><span style='font-size:12px;color:#555'>{subtitle}</span>" if subtitle else "")
    top = 92 if subtitle else 60
    bottom = 62 + (34 if legend_below_px is not None else 0)
    fig.update_layout(
        title=dict(
            text=text,
            x=0,
            xanchor="left",
            xref="container",
            y=1,
            yref="container",
            yanchor="top",
            pad=dict(t=12, l=8),
            font=dict(size=15),
        ),
        height=height,
        font=FONT,
        margin=dict(l=70, r=24, t=top, b=bottom),
        plot_bgcolor="white",
        paper_bgcolor="white",
        hoverlabel=dict(font_size=12),
    )
    if legend_below_px is not None:
        plot_h = max(80.0, height - top - bottom)
        fig.update_layout(
            legend=dict(
                orientation="h", yanchor="top", y=-legend_below_px / plot_h, x=0, xanchor="left", font=dict(size=12)
            )
        )
    else:
        fig.update_layout(showlegend=False)
    fig.update_xaxes(showline=True, linecolor="#888", gridcolor="#ececec")
    fig.update_yaxes(showline=True, linecolor="#888", gridcolor="#ececec")
    return fig


def truth_figure(lesson: Lesson, units: str = "points", scale: float = 100.0) -> go.Figure:
    """Per group: predicted vs true mean, and predicted variance vs the variance around the current mean."""
    t = group_table(lesson, scale)
    names = t["group"].tolist()
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.05,
        subplot_titles=(f"Mean ({units})", f"Variance ({units}²)"),
    )
    for col, (pv, tv, extra) in enumerate(
        (("pred_mean", "true_mean", None), ("pred_var", "target_var", "true_var")), start=1
    ):
        show = col == 2
        cx, cy = [], []
        for n, a, b in zip(names, t[pv], t[tv]):
            cx += [a, b, None]
            cy += [n, n, None]
        fig.add_trace(
            go.Scatter(
                x=cx, y=cy, mode="lines", line=dict(color="#cccccc", width=3), hoverinfo="skip", showlegend=False
            ),
            1,
            col,
        )
        tol = t["mean_tol" if col == 1 else "var_tol"].to_numpy(dtype=float)
        cap = 100.0 if col == 1 else 2500.0
        tol = np.where(np.isfinite(tol), np.minimum(tol, cap), cap)
        fig.add_trace(
            go.Scatter(
                x=t[tv],
                y=names,
                mode="markers",
                showlegend=False,
                marker=dict(color="rgba(0,0,0,0)", size=1),
                error_x=dict(type="data", array=tol, color=TOL, thickness=10, width=0),
                hoverinfo="skip",
            ),
            1,
            col,
        )
        if show:
            tolerance = "tolerance: what the auditor lets pass at this sample size"
            fig.add_trace(legend_line(tolerance, dict(color=TOL, width=10)), 1, col)

        # the dots, drawn in this order: (column, hover label, the trace's own style)
        truth = "truth: E[y|x] (left), E[(y − μ(x))²|x] = what m₂ targets (right)"
        dots = [(tv, "truth", dict(name=truth, marker=dict(color=TRUE, size=12, symbol="diamond"), showlegend=show))]
        if extra:
            var_marker = dict(color=EXTRA, size=9, symbol="x-thin-open", line=dict(width=2))
            dots.append((extra, "Var(y|x)", dict(name="true Var(y | x)", marker=var_marker)))
        pred = "prediction: μ (left), m₂ (right)"
        dots.append(
            (pv, "predicted", dict(name=pred, marker=dict(color=PRED, size=11, symbol="circle"), showlegend=show))
        )
        for column, what, style in dots:
            hover = f"%{{y}}: %{{x:.3g}}<extra>{what}</extra>"
            fig.add_trace(go.Scatter(x=t[column], y=names, mode="markers", hovertemplate=hover, **style), 1, col)
    fig.update_yaxes(autorange="reversed", type="category")
    lo = float(np.nanmin(np.concatenate([t["pred_mean"], t["true_mean"] - np.minimum(t["mean_tol"], 100)])))
    hi = float(np.nanmax(np.concatenate([t["pred_mean"], t["true_mean"] + np.minimum(t["mean_tol"], 100)])))
    fig.update_xaxes(title_text=f"group average ({units})", row=1, col=1, range=[max(lo, 0) - 2, min(hi, 100) + 2])
    vhi = float(np.nanmax(np.concatenate([t["pred_var"], t["target_var"], t["true_var"]])))
    fig.update_xaxes(title_text=f"group average ({units}²)", row=1, col=2, range=[0, vhi * 1.25])
    _layout(
        fig,
        "Predictions against the truth, per group",
        230 + 28 * len(names),
        "exact population averages over each group (the algorithm only ever sees samples)",
        legend_below_px=52,
    )
    return fig


def cell_stats(lesson: Lesson, ev: dict):
    """Population mass-weighted residuals of the event's group, before its update.

    Returns (kind, matrix) with matrix shape (m,) for mean-bucket cells or (m, m) for joint cells."""
    m = lesson.config.m
    params = lesson.fd.model.params
    mu, m2 = lesson.predictions(upto=ev["log_before"])
    g = ev["group_index"]
    r = lesson.memb.group_rows(g)
    p, tm, tv = lesson.prob[r], lesson.true_mean[r], lesson.true_var[r]
    i = params.mean_grid.index(mu[r])
    if ev["kind"] == "moment_update":
        j = params.grid(2).index(m2[r])
        target = tv + (tm - mu[r]) ** 2
        z = np.zeros((m, m))
        np.add.at(z, (i, j), p * (m2[r] - target))
        return "moment", z
    if ev.get("partition"):
        j = params.grid(2).index(m2[r])
        z = np.zeros((m, m))
        np.add.at(z, (i, j), p * (mu[r] - tm))
        return "joint", z
    z1 = np.zeros(m)
    np.add.at(z1, i, p * (mu[r] - tm))
    return "mean", z1


def _mean_cells(fig, z, mean_labels: list, chosen: list, thr: float, sym: str, units: str) -> str:
    """A mean update's cells as bars of their violation against ±threshold, the moved ones in red; the subtitle."""
    m = len(mean_labels)
    colors = [OKABE_ITO["vermillion"] if (i, None) in chosen else "#9ab7d3" for i in range(m)]
    fig.add_trace(
        go.Bar(
            x=mean_labels,
            y=z,
            marker_color=colors,
            name="population violation",
            hovertemplate="%{x}: %{y:.4f}<extra></extra>",
            showlegend=False,
        )
    )
    for s in (thr, -thr):
        fig.add_hline(y=s, line=dict(color="#333", dash="dash", width=1.5))
    fig.add_annotation(
        text=f"±{sym} = {thr:g}",
        x=1,
        xref="paper",
        y=thr,
        yanchor="bottom",
        xanchor="right",
        showarrow=False,
        font=dict(size=12),
    )
    fig.update_yaxes(
        title_text="Σ P(x)·(μ(x) − E[y|x]) over the cell<br>(mass-weighted, [0, 1] scale)",
        zeroline=True,
        zerolinecolor="#888",
    )
    fig.update_xaxes(title_text=f"mean bucket: predicted μ ({units})")
    sub = "bars: each cell's true mass-weighted mean error before the update;<br>red = the cells the update moved"
    return sub


def _joint_cells(
    fig, lesson: Lesson, kind: str, z, mean_labels: list, chosen: list, thr: float, sym: str, units: str
) -> str:
    """A moment (or joint) update's cells as a mean × variance bucket heatmap, the moved ones outlined; the
    subtitle."""
    m = len(mean_labels)
    vmax = max(float(np.max(np.abs(z))), thr * 1.2)
    mom_edges = lesson.fd.model.params.grid(2).edges() * 100**2
    mom_labels = [f"{mom_edges[j]:.0f}–<br>{mom_edges[j + 1]:.0f}" for j in range(m)]
    text = [[f"{z[i, j]:+.3f}" if z[i, j] != 0 else "" for j in range(m)] for i in range(m)]
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=mom_labels,
            y=mean_labels,
            colorscale="RdBu_r",
            zmid=0,
            zmin=-vmax,
            zmax=vmax,
            text=text,
            texttemplate="%{text}",
            textfont=dict(size=12),
            xgap=2,
            ygap=2,
            colorbar=dict(title=dict(text="violation", side="right"), thickness=12),
            hovertemplate="%{y}, %{x}: %{z:.4f}<extra></extra>",
        )
    )
    for i, j in chosen:
        fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=i - 0.5, y1=i + 0.5, line=dict(color="black", width=3))
    fig.update_xaxes(title_text=f"variance bucket: predicted m₂ ({units}²)", type="category", tickangle=0)
    fig.update_yaxes(title_text=f"mean bucket: predicted μ ({units})", type="category")
    what = "m₂(x) − E[(y − μ(x))²|x]" if kind == "moment" else "μ(x) − E[y|x]"
    sub = (
        f"cells: Σ P(x)·({what}) before the update;<br>outlined in black = the cells the update moved "
        f"(threshold {sym} = {thr:g})"
    )
    return sub


def cells_figure(lesson: Lesson, ev: dict | None, units: str = "points") -> go.Figure:
    """The audited group's cells and the population violation of each, with the chosen cells marked."""
    fig = go.Figure()
    if ev and ev.get("kind") == "converged":  # after "Run to end": Step has nothing left to do
        message_only(fig, "Converged: no cell violates its threshold, so the auditor has nothing to choose.")
        return _layout(fig, "The auditor's choice", 380)
    if not ev or ev.get("kind") not in ("mean_update", "moment_update"):
        message_only(fig, "Press Step: the auditor's chosen cells appear here.", color="#555")
        return _layout(fig, "The auditor's choice", 380)
    kind, z = cell_stats(lesson, ev)
    c = lesson.config
    thr = c.beta if kind == "moment" else c.alpha
    sym = "β" if kind == "moment" else "α"
    m = c.m
    edges = np.linspace(0, 100, m + 1)
    mean_labels = [f"{edges[i]:.0f}–{edges[i + 1]:.0f}" for i in range(m)]
    chosen = [tuple(cell) for cell in ev["cells"]]
    title = f"The auditor's choice: group “{ev['group']}”"
    if kind == "mean":
        sub = _mean_cells(fig, z, mean_labels, chosen, thr, sym, units)
    else:
        sub = _joint_cells(fig, lesson, kind, z, mean_labels, chosen, thr, sym, units)
    return _layout(fig, title, 380, sub)


def potential_figure(lesson: Lesson) -> go.Figure:
    """The potential E[(μ(x) − E[y|x])²] against the number of mean updates, with the proof's guarantee."""
    t = pd.DataFrame(lesson.trace)
    a = lesson.config.alpha
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=t["mean_updates"],
            y=t["potential"],
            mode="lines+markers",
            name="potential Φ",
            line=dict(color=PRED, width=2.5),
            marker=dict(size=6),
            hovertemplate="after %{x} mean updates: Φ = %{y:.4f}<extra></extra>",
        )
    )
    k = np.arange(0, max(int(t["mean_updates"].max()), 1) + 2)
    worst = lesson.phi0 - a * a * k
    fig.add_trace(
        go.Scatter(
            x=k,
            y=np.maximum(worst, 0),
            mode="lines",
            name="worst case allowed: Φ₀ − α²·k",
            line=dict(color=TRUE, dash="dash", width=2),
            hoverinfo="skip",
        )
    )
    fig.update_xaxes(title_text="mean updates k (cells moved)", rangemode="tozero")
    fig.update_yaxes(title_text="Φ = E[(μ(x) − E[y|x])²] ([0, 1] scale)", rangemode="tozero")
    bound = lesson.phi0 / (a * a)
    return _layout(
        fig,
        "The potential argument",
        380,
        f"each mean update lowers Φ by at least α² = {a * a:.4g},<br>so there are at most "
        f"Φ₀/α² = {bound:,.0f} ≤ 1/α² = {1 / a**2:,.0f} of them",
        legend_below_px=50,
    )


def two_point_figure() -> go.Figure:
    """The paper's example: labels fixed by x, so the true variance is 0, yet pooled over 'predicted variance 0'
    the labels vary with variance 1/4."""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.16,
        subplot_titles=("Pool by predicted variance only", "Pool by (predicted mean, predicted variance)"),
    )
    for col, x, text in (
        (1, ["x₁ (y = 0)", "x₂ (y = 1)"], ["μ = 0, Var = 0", "μ = 1, Var = 0"]),
        (2, ["cell μ = 0", "cell μ = 1"], ["Var of y = 0 ✓", "Var of y = 0 ✓"]),
    ):
        fig.add_trace(
            go.Bar(
                x=x,
                y=[0.5, 0.5],
                marker_color=[PRED, TRUE],
                showlegend=False,
                text=text,
                textposition="inside",
                hovertemplate="%{x}: probability %{y}<extra></extra>",
            ),
            1,
            col,
        )
    fig.add_annotation(
        text="cell “Var = 0”: variance of y = 1/4 ≠ 0",
        x=0.5,
        y=0.62,
        xref="x",
        yref="y",
        showarrow=False,
        font=dict(size=12, color="#b00"),
        row=1,
        col=1,
    )
    fig.update_yaxes(title_text="probability", range=[0, 0.75], row=1, col=1)
    fig.update_yaxes(range=[0, 0.75], row=1, col=2)
    return _layout(
        fig,
        "Why moments are conditioned on the mean: the two-point example",
        340,
        "the true predictors (Var = 0 everywhere) fail a naive variance-calibration test, "
        "<br>but pass once the cells also fix the predicted mean",
    )

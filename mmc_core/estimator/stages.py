"""What each stage of a fit changed, measured on the rows held out of it.

A fit moves the predictions in up to five stages: the base prediction as given ("start"; "constant": the label's
mean without one), the base map, the
descent (its kept round), the mean's cell corrections and the moments' cell corrections
(:meth:`mmc_core.fit.model.FittedModel.stages`). Most of the mean's gain on real tables comes from the base map and the
mean's cells, not from the descent's updates (early stopping often keeps round 0), and the variance is moved by
the descent's moment updates and by its own cells: this table says which, so the descent view is not read as
the whole fit.

The rows are the held-out ones: they chose the kept round and judged the cell steps, so their errors are
slightly optimistic for the stages they chose, but none of the stages was fitted on them (except the variance's
level and its whole-group shrinkage, at penalties of thousands of rows).
"""

from __future__ import annotations

import math

import numpy as np

from .fit_rows import VARIANCE_POWER_Z

__all__ = [
    "STAGE_LABELS",
    "STAGE_MIN_SHARE",
    "describe_base_variance",
    "describe_stages",
    "stage_effects",
    "stage_rows",
    "stage_sentences",
]

STAGE_MIN_SHARE = 0.02  # groups with fewer of the rows are left out of the variance error (too noisy)
STAGE_LABELS = {
    "start": "base prediction as given",
    "constant": "the label's mean (no base prediction)",
    "base map": "base map",
    "descent": "descent (kept round)",
    "mean cells": "mean's cell corrections",
    "moment cells": "variance's cell corrections",
}


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def stage_effects(
    model, memb, y_unit: np.ndarray, base_unit: np.ndarray | None = None, variance_unit: np.ndarray | None = None
) -> list[dict]:
    """The held-out effect of each stage of ``model`` on the rows of ``memb`` (labels ``y_unit``, base
    ``base_unit`` and base variance ``variance_unit`` on the unit scale, shape (n,)).

    Returns
    -------
    list of dict, one per stage in order, in the label's units:
        ``stage`` (a key of :data:`STAGE_LABELS`); ``rmse``: root mean squared error of the mean;
        ``mean_moved``: mean absolute change of the mean from the stage before (None for the first); and for a
        model with a variance: ``variance_moved``, the mean absolute log change of the predicted variance from
        the stage before (0.1: about 10%), and ``variance_error``, the mass-weighted mean over groups with at
        least :data:`STAGE_MIN_SHARE` of the rows of |log(mean predicted variance / mean squared residual)|.
    """
    y = np.asarray(y_unit, dtype=float)
    span = model.scale.span
    n = memb.n
    sums = memb.sums()
    sizes = np.asarray(memb.sizes, dtype=float)
    ok = sizes >= max(STAGE_MIN_SHARE * n, 1.0)
    out: list[dict] = []
    prev_mu = prev_v = None
    for name, mu, moms in model.stages(memb, base_unit, variance_unit):
        if name == "start" and not model.uses_base:
            name = "constant"
        r2 = (y - mu) ** 2
        row: dict = {
            "stage": name,
            "rmse": _finite(math.sqrt(float(np.mean(r2))) * span) if n else None,
            "mean_moved": None if prev_mu is None else _finite(float(np.mean(np.abs(mu - prev_mu))) * span),
        }
        v = moms.get(2)
        if v is not None:
            v = np.maximum(v, 1e-300)
            row["variance_moved"] = None if prev_v is None else _finite(float(np.mean(np.abs(np.log(v / prev_v)))))
            pv, ov = sums.group_sums(v)[ok], sums.group_sums(r2)[ok]
            good = (pv > 0) & (ov > 0)
            row["variance_error"] = (
                _finite(float(np.average(np.abs(np.log(pv[good] / ov[good])), weights=sizes[ok][good])))
                if good.any()
                else None
            )
            prev_v = v
        prev_mu = mu
        out.append(row)
    return out


def _valid(stages) -> list[dict]:
    """The stage records of a model file's info that can be shown (the info is checked by the schema, but an
    older file has none)."""
    if not isinstance(stages, list):
        return []
    return [s for s in stages if isinstance(s, dict) and s.get("stage") in STAGE_LABELS]


def describe_stages(stages) -> str | None:
    """One sentence on which stage changed the mean and which the variance, from :func:`stage_effects`'s records
    (None without them): the held-out error of each before and after, and the stages that moved it."""
    rows = _valid(stages)
    if len(rows) < 2:
        return None
    parts = []
    worse: list[str] = []
    for key, what in (
        ("rmse", "the mean's RMSE"),
        ("variance_error", "the variance's group error (mean |log(predicted / observed)|)"),
    ):
        if any(not isinstance(r.get(key), (int, float)) or isinstance(r.get(key), bool) for r in rows):
            continue
        vals: list[tuple[str, float]] = [(r["stage"], float(r[key])) for r in rows]
        first = abs(float(vals[0][1]))
        dec = max(0, 3 - math.floor(math.log10(first))) if first > 0 and math.isfinite(first) else 3

        def fmt(x, dec=dec):
            return f"{x:,.{dec}f}"  # "4,717" for a dollar label: thousands separated, as everywhere (issue 35)

        steps = [
            f"{STAGE_LABELS[s]} {'+' if b > a else '-'}{fmt(abs(b - a))}"
            for (_, a), (s, b) in zip(vals, vals[1:])
            if float(fmt(abs(b - a)).replace(",", "")) > 0
        ]
        moved = "; ".join(steps) if steps else "no stage changed it"
        parts.append(f"{what} {fmt(vals[0][1])} -> {fmt(vals[-1][1])} ({moved})")
        if any(" +" in step for step in steps):
            worse.append(key)
    if not parts:
        return None
    out = "On the held-out rows, " + ", and ".join(parts) + "."
    if worse:
        # a stage that made an error larger says why it can (issue 35), as stage_sentences does
        why = []
        if "rmse" in worse:
            why.append(
                "a mean correction follows its fitting rows, and on other rows the part of it that was noise adds error"
            )
        if "variance_error" in worse:
            why.append(
                "the variance's group error is taken around each stage's own mean, so a stage that moves only the "
                "mean changes it too"
            )
        out += (
            " A + is a stage that made the error larger on these rows: "
            + "; ".join(why)
            + ". The later stages and the audit of the test rows decide."
        )
    return out


def stage_rows(stages) -> list[dict]:
    """:func:`stage_effects`'s records as display rows (the stage's label first), for tables in the dashboard
    and the reports."""
    out = []
    for r in _valid(stages):
        row: dict = {"stage": STAGE_LABELS[r["stage"]]}
        for key in ("rmse", "mean_moved", "variance_error", "variance_moved"):
            if key in r:
                v = r[key]
                row[key] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        out.append(row)
    return out


def _pct_off(err: float) -> str:
    """A group error |log ratio| as the typical percentage a group's variance is off by."""
    return f"{math.expm1(err):.0%}"


def stage_sentences(stages, info: dict, n_mean_updates: int, n_moment_updates: int) -> list[str]:
    """One plain sentence per stage the fit ran, in order, from :func:`stage_effects`'s records (empty without
    them): what the stage does and what it changed on the held-out rows. ``n_mean_updates`` /
    ``n_moment_updates``: the kept log's updates of the mean and of the moments (the descent's)."""
    rows = _valid(stages)
    if len(rows) < 2:
        return []
    binary = info.get("task") == "binary"
    first = rows[0].get("rmse")
    dec = 3
    if isinstance(first, (int, float)) and first > 0 and math.isfinite(first):
        dec = max(0, 3 - math.floor(math.log10(first)))
    text = _stage_heads(info, n_mean_updates, n_moment_updates, any("variance_error" in r for r in rows))
    out = []
    for i, (a, b) in enumerate(zip(rows, rows[1:])):
        head = text.get(b["stage"])
        if head is None:
            continue
        moved = _change(a, b, i == len(rows) - 2, binary, dec)
        out.append(f"{head}" + (f": {moved}." if moved else "."))
    return out


def _num(x) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def _change(a: dict, b: dict, last: bool, binary: bool, dec: int) -> str:
    """What one stage changed on the held-out rows: its RMSE (a classifier's Brier score) and the groups'
    variance error, each with why a worse figure can happen."""
    # a metric that got worse says why it can and what decides (issue 35), as app.services.pipeline.worse_note does
    # for the test rows
    decide = (
        "the audit of the test rows (Results page) says whether it ends up right"
        if last
        else "the later stages and the audit of the test rows (Results page) decide"
    )
    what = "Brier score" if binary else "RMSE"
    parts = []
    ra, rb = _num(a.get("rmse")), _num(b.get("rmse"))
    if ra is not None and rb is not None:
        sa, sb = (f"{ra * ra:.4f}", f"{rb * rb:.4f}") if binary else (f"{ra:,.{dec}f}", f"{rb:,.{dec}f}")
        if sa != sb:
            parts.append(f"held-out {what} {sa} -> {sb}")
            if rb > ra:
                parts[-1] += (
                    " (worse here: the stage's corrections follow its fitting rows, and on other rows the part "
                    f"of a correction that was noise adds error; {decide})"
                )
    va, vb = _num(a.get("variance_error")), _num(b.get("variance_error"))
    if va is not None and vb is not None and _pct_off(va) != _pct_off(vb):
        line = f"groups' variances off by {_pct_off(va)} -> {_pct_off(vb)} (typical group"
        if vb > va:
            line += f"; worse here: {_why_variance_worse(b, ra, rb)}; {decide}"
        parts.append(line + ")")
    return "; ".join(parts)


def _why_variance_worse(b: dict, ra, rb) -> str:
    # variance_error compares each group's mean predicted variance with its mean squared residual
    # around the stage's own mean (stage_effects): a stage that moves only the mean changes it too
    vm, mm = _num(b.get("variance_moved")), _num(b.get("mean_moved"))
    if vm is not None and vm < 1e-9 and ra is not None and rb is not None and rb != ra:
        return (
            "this stage leaves the predicted variances as they were, and a group's variance is "
            "compared with its squared errors around the stage's mean, which this stage made "
            + ("smaller" if rb < ra else "larger")
        )
    if mm is not None and mm > 0:
        return (
            "a group's variance is compared with its squared errors around the stage's mean, which this stage moved too"
        )
    return "the stage's variance corrections follow its fitting rows and are partly noise on others"


def _updates(info: dict, n: int, key: str, word: str) -> str:
    # the run summary counts every update the descent made (info["mean_updates"]), the kept model's log only
    # those up to the kept round: the same term for both, and both numbers when they differ (issue 35: "0
    # corrections" stood next to "1 mean update")
    made = info.get(key)
    if isinstance(made, int) and not isinstance(made, bool) and made != n:
        return f"{n:,} {word}{'s' if n != 1 else ''} kept of the {made:,} the descent made"
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def _stage_heads(info: dict, n_mean_updates: int, n_moment_updates: int, has_var: bool) -> dict:
    """What each stage does, in one clause per stage."""
    kept = info.get("kept_round")
    lg = ((info.get("base_recalibration") or {}) if isinstance(info.get("base_recalibration"), dict) else {}).get(
        "logistic"
    )
    return {
        "base map": "Base map: the base prediction recalibrated on the fitting rows (a line, per group when the "
        "held-out rows bear that out"
        + (
            "; then a logistic curve per group, kept because the whole fit with it predicted the held-out rows better)"
            if isinstance(lg, dict) and lg.get("kept")
            else ")"
        ),
        "descent": f"Descent: {_updates(info, n_mean_updates, 'mean_updates', 'mean update')} (corrections of "
        "groups' means)"
        + (
            f" and {_updates(info, n_moment_updates, 'moment_updates', 'moment update')} (of their variances)"
            if has_var
            else ""
        )
        + ", where a group's cell was off beyond chance"
        + (f" (the model of round {kept}, chosen on the held-out rows)" if isinstance(kept, int) else ""),
        "mean cells": "Mean cell corrections: small corrections of every group's prediction bands at once, each "
        "shrunk by the rows behind it",
        "moment cells": "Variance cell corrections: each group's variance rescaled by the evidence for it, where "
        "the held-out rows bear that out",
    }


def describe_base_variance(info: dict) -> str | None:
    """One sentence on where the variance started when the fit had a base variance (``variance_column``), from
    ``info["base_variance"]``; None without one."""
    bv = (info or {}).get("base_variance")
    if not bv:
        return None
    p = float(bv["power"])
    if p == 0.0:
        return (
            f"the base variance column '{bv['column']}' was not used: no power of it beat one constant's Gaussian "
            f"log score on the fitting rows by {VARIANCE_POWER_Z:g} standard errors, so the variance started from the "
            "constant"
        )
    how = "as given" if p == 1.0 else f"to the power {p:g} (part-way to one constant on the log scale)"
    return (
        f"the variance started from the base variance column '{bv['column']}', used {how}: of the powers "
        f"{', '.join(sorted(bv['log_scores'], key=float))}, the best Gaussian log score on the fitting rows "
        f"among those beating one constant by {VARIANCE_POWER_Z:g} standard errors"
    )

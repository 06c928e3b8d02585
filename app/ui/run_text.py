"""The Run page's words, without Streamlit: what the chosen parameters imply (before a run) and the sentences of
a finished run's summary (after it). :mod:`app.ui.run_page` lays them out; the tests read them directly.
"""

from __future__ import annotations

import math

from app.services.specs import count, missed_reason

__all__ = ["SE_RULE_TEXT", "implications", "se_implications", "thresholds_used_text", "converged_text"]


def implications(
    settings, n_rows: int, n_groups: int, lo: float | None, hi: float | None, units: str, preview: dict | None = None
) -> list:
    """Plain-language consequences of the parameters, as markdown bullet strings. With "auto" thresholds,
    ``preview`` holds the values the run will use (None: known only once the base model is fitted)."""
    m, k, g = settings.n_buckets, settings.n_moments, settings.gamma
    if "se" in (settings.alpha, settings.beta) and settings.step == "exact":
        return se_implications(settings, n_groups, lo, hi, units, preview)
    # with the paper's step an "se" threshold is the "auto" noise rule (the per-cell test needs the exact step)
    auto = any(v in ("auto", "se") for v in (settings.alpha, settings.beta))
    if auto and not preview:
        return [
            ("**Thresholds α, β: automatic.** They are" if k >= 2 else "**Threshold α: automatic.** It is")
            + " set just above the sampling noise of the fitting rows once the base model's residuals are known "
            "(at the start of the run); the run summary shows " + ("them." if k >= 2 else "it."),
            f"**Buckets:** m = {m} per predictor; **moments:** 2..{k}" if k >= 2 else f"**Buckets:** m = {m}.",
        ]
    a = float(preview["alpha"]) if auto and preview else float(settings.alpha)
    b = float(preview["beta"]) if auto and preview else float(settings.beta)
    span = (hi - lo) if (lo is not None and hi is not None and hi > lo) else None
    u = f" {units}" if units else ""
    out = []
    if auto:
        out.append(
            f"**Automatic thresholds** for this data: α = **{a:.3g}**"
            + (f", β = **{b:.3g}**" if k >= 2 else "")
            + " (just above the sampling noise of a cell with 5% of the fitting rows, so the descent does not chase "
            "noise)."
        )
    err = a / g
    txt = f"**Mean, per cell:** error ≤ α / P(S). For a group of mass γ = {g:g}: ≤ {err:.3g} on the [0, 1] scale"
    if span:
        txt += f" = **{err * span:.3g}{u}**"
    out.append(txt + "; for the whole population ≤ " + (f"{a * span:.3g}{u}." if span else f"{a:g}."))
    if k >= 2:
        vb = (b + 2 * a) / g + 2 / m
        txt = (
            f"**Variance, per cell:** the paper's worst case is (β + 2α) / P(S) + 2/m = {vb:.3g} on the [0, 1]² "
            "scale for a γ-mass group (the 2/m comes from conditioning on mean buckets)"
        )
        if span:
            txt += f", i.e. {vb * span**2:,.4g}{u}²" if u else f", i.e. {vb * span**2:,.4g} label units²"
        out.append(txt + ". The Results page shows the errors actually reached.")
    out.append(
        f"**Iterations:** at most 1/α² − 1 = **{1 / a**2 - 1:,.0f}** mean updates"
        + (
            f", each followed by at most (k − 1)(1/β² − 1) = {(k - 1) * (1 / b**2 - 1):,.0f} moment updates."
            if k >= 2
            else "."
        )
    )
    bw = f"{span / m:.3g}{u}" if span else f"{1 / m:.3g} of the range"
    cells = n_groups * m + (n_groups * m * m * (k - 1) if k >= 2 else 0)
    out.append(f"**Buckets:** m = {m} mean buckets, each {bw} wide; {n_groups} groups give {cells:,} cells to audit.")
    if n_rows and not auto:
        # sampling noise of a gamma-mass cell's mass-weighted residual, for a label SD of about 0.15 on [0, 1]
        noise = 2 * 0.15 * math.sqrt(g) / math.sqrt(n_rows)
        if a < noise:
            es_on = settings.early_stopping is True or (
                settings.early_stopping == "auto" and float(settings.calibration_fraction) > 0
            )
            advice = (
                "Raise α; early stopping (on) keeps the round that does best on the held-out rows, which limits "
                "the damage."
                if es_on
                else "Raise α or turn on early stopping."
            )
            out.append(
                f"⚠️ With {n_rows:,} fitting rows, α = {a:g} is below the sampling noise of a γ-mass cell "
                f"(≈ {noise:.2g}): the descent will partly fit noise. {advice}"
            )
    return out


SE_RULE_TEXT = (
    "**Thresholds: the per-cell standard-error test** (the library default, as `mmc fit`). A cell is "
    "corrected only when its mean residual is at least z of *its own* standard errors from 0 "
    "(Bonferroni at family-wise level 0.1 over every audited cell) and it has enough fitting rows, so "
    "the descent does not chase noise."
)


def se_implications(
    settings, n_groups: int, lo: float | None, hi: float | None, units: str, preview: dict | None
) -> list:
    """The "se" rule in plain words, with the z and the smallest correctable error the estimator computes
    (``preview`` from :func:`app.services.pipeline.planned_thresholds`; None: known once the base model is fitted)."""
    m, k = settings.n_buckets, settings.n_moments
    out = [SE_RULE_TEXT]
    span = (hi - lo) if (lo is not None and hi is not None and hi > lo) else None
    u = f" {units}" if units else ""
    if not preview or preview.get("rule") != "se":
        out.append(
            "The test's z and the smallest error it corrects are computed at the start of the run (they need "
            "the base model's residuals); the run summary shows them."
        )
    else:
        z, nf, sd = preview["z"], max(int(preview["n_fit"]), 1), float(preview["resid_sd"])
        out.append(
            f"**z = {z:.2f}** for cells (group × bucket), **z = {preview['z_group']:.2f}** for whole groups; "
            f"cells with fewer than {preview['min_count']} fitting rows are never corrected."
        )
        parts = []
        min_rows = int(preview["min_count"])
        sizes = [(min_rows, f"the smallest corrected size, {min_rows} rows")]
        for share, what in ((0.05, "5% of the fitting rows"), (settings.gamma, f"γ = {settings.gamma:g} of them")):
            # a share below the smallest corrected size is never corrected: no error to quote for it
            if share * nf >= min_rows + 0.5 and all(abs(share * nf - r) > 0.5 for r, _ in sizes):
                sizes.append((max(int(round(share * nf)), 1), f"{what} ({max(int(round(share * nf)), 1):,} rows)"))
        for rows, what in sizes:
            d = z * sd / math.sqrt(max(rows, 1))
            parts.append(
                f"a cell of {what}: ±{d * span:.3g}{u}" if span else f"a cell of {what}: ±{d:.3g} of the label range"
            )
        out.append(
            "**Smallest mean error corrected** (z × residual SD / √rows, with the residual SD of all "
            f"{nf:,} fitting rows): " + "; ".join(parts) + ". Smaller errors are left as noise."
        )
        out.append(
            f"After the fit, the {'α and β' if k >= 2 else 'α'} shown are the values the kept model *achieves* on "
            "the fitting rows (every cell's mass-weighted error is below them), so the paper's guarantees hold with "
            "them."
        )
    out.append(
        f"**Buckets:** m = {m} per predictor; **moments:** " + ("the variance" if k == 2 else f"2..{k}")
        if k >= 2
        else f"**Buckets:** m = {m}; mean only."
    )
    if settings.early_stopping == "auto":
        out.append(
            "**Early stopping:** on (the round with the lowest held-out squared error is kept)."
            if settings.calibration_fraction > 0
            else "**Early stopping:** off (no rows are held out)."
        )
    return out


def thresholds_used_text(info: dict, alpha: float, beta: float, moment_betas: dict, auto: bool) -> str:
    """The caption of a run with given (or "auto") thresholds: the thresholds the descent used and, when the kept
    model misses them (:func:`app.services.specs.missed_reason`), the values it achieves, which are the ones its
    guarantees are stated with (``alpha``, ``beta``, ``moment_betas``: the model's stated values)."""
    used = info.get("thresholds_used") or {}
    ua = float(used.get("alpha", alpha))
    ubs = {int(a): float(b) for a, b in (used.get("betas") or {}).items()}
    has_moments = bool(ubs) or bool(moment_betas)

    def betas(b2, others) -> str:
        return f", β = {b2:.3g}" + "".join(f", β{a} = {v:.3g}" for a, v in sorted(others.items()) if a != 2)

    text = f"Thresholds used: α = {ua:.3g}" + (betas(ubs.get(2, beta), ubs) if has_moments else "")
    text += " (automatic: just above the sampling noise)." if auto else " (set by you)."
    stated = {2: beta, **{int(a): float(b) for a, b in moment_betas.items()}}
    if alpha > ua or (has_moments and any(stated.get(a, b) > b for a, b in ubs.items())):
        text += (
            f" The kept model does not meet them ({missed_reason(info)}): it achieves α = {alpha:.3g}"
            + (betas(beta, stated) if has_moments else "")
            + " on the fitting rows, and its guarantees are stated with these values."
        )
    return text


def converged_text(info: dict) -> str:
    """The first sentence of a converged run's summary. Round 0 is the moment pass before the first mean audit,
    so a fit whose mean needed no update has 0 rounds but moment updates: said in words, not as "0 rounds"."""
    left = info.get("moments_left_to_cells") is True
    moments = (
        "no moment update: the variance is left to the cell step after it"
        if left
        else count(info["moment_updates"], "moment update")
    )
    if not info["rounds"]:
        # not "the mean needed no update": the base map and the cells may still have moved it, and a cell the
        # fitting rows do not show may still be off on fresh ones (the audit's findings say so)
        return (
            "Converged in the first pass: no mean cell was off by more than its threshold on the fitting rows, so "
            f"the descent made no mean update; {moments}."
        )
    tail = f"{moments})." if left else f"{moments}, the first moment pass included)."
    return f"Converged in {count(info['rounds'], 'round')} ({count(info['mean_updates'], 'mean update')}, {tail}"

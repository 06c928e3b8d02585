"""The regression report's words: the run's parameters and the data summary as key/value rows, the reading
notes and the note on discovered groups. Plain text only (no fpdf2, no figures), so :mod:`app.report.pdf` lays them
out and the tests read them without building a PDF.
"""

from __future__ import annotations

from mmc_core.estimator import describe as describe_base
from mmc_core.estimator import describe_cells, describe_stages
from mmc_core.fit import NO_GROUP_MOMENT_Z
from mmc_core.paper import SHRINK_MIN

from ..figures.figure_style import below_gamma, format_number, interval_text, short_name
from ..services.specs import base_variance_text, descent_thresholds, missed_reason, outside_range_note, threshold_rules

__all__ = ["reading_notes", "param_rows", "data_rows", "outside_note", "discovered_groups", "DISCOVERED_NOTE"]


def reading_notes(has_moments: bool, has_intervals: bool, methods=("guaranteed", "calibrated")) -> tuple[str, str, str]:
    """The report's "how to read", "what it promises" and "what it does not promise" paragraphs, for what the
    model fits: a mean-only model has no moment threshold β and no variance, and intervals are spoken of only
    when the audit has some (a mean-only model's report must not promise what it does not have)."""
    if has_moments:
        what = (
            "The model predicts, for every row, a mean and central moments (the variance and, if fitted, higher "
            "moments) of the label."
        )
        example = ", and their spread matches the predicted variance"
        errors = "the mean error is below α and every moment error below β"
    else:
        what = (
            "The model predicts, for every row, the mean of the label (no variance: it was fitted for the mean only)."
        )
        example = ""
        errors = "the mean error is below α"
    how = (
        f"{what} Multicalibration means these predictions are correct on average not only overall but inside "
        "every group listed here and inside every bucket of predicted values within a group: among rows of a "
        f"group whose predicted mean is about 40, the labels average about 40{example}. The audit measures this "
        "on the data given to the report, which should be rows the model was not fitted on; all numbers are in "
        "the label's own units unless an axis says otherwise."
    )
    promises = (
        f"**What it promises.** On the fitting rows the guarantees hold by construction: in every cell {errors} "
        "(weighted by the cell's share of rows). On new rows they hold up to sampling error, which is small for "
        "large groups and large for small ones."
    )
    if has_intervals and "guaranteed" in methods:
        promises += (
            " The 'guaranteed' intervals cover the label with probability at least 1 − δ in every cell of mass at "
            "least γ (they are honest, and wide); the 'calibrated' intervals aim at 1 − δ in every group using "
            "held-out (or out-of-fold) rows, and are much narrower."
        )
    elif has_intervals:  # a mean-only model: no guaranteed intervals (they need the moments)
        promises += (
            " The 'calibrated' intervals aim at 1 − δ in every group using held-out (or out-of-fold) rows; a "
            "mean-only model has no 'guaranteed' intervals (they need the predicted moments)."
        )
    spread = (
        "a calibrated variance describes a group of similar rows, not one person"
        if has_moments
        else ("a calibrated mean describes a group of similar rows, not one person")
    )
    not_promises = (
        "**What it does not promise.** It says nothing about groups that were not defined (check that the groups "
        "match the people you care about), nothing reliable about groups below γ (marked †), and "
        f"nothing about individuals: {spread}. It does not make a model fair in other senses (equal error rates, "
        "equal outcomes), and calibrated predictions can still be uninformative."
        + (" Coverage is an average over rows, not a per-person promise." if has_intervals else "")
    )
    return how, promises, not_promises


def outside_note(audit) -> str:
    """The Label row's closing note when audited labels lie outside the model's label range, else ""."""
    note = outside_range_note(audit.params) if audit is not None and isinstance(audit.params, dict) else None
    return f". Note: {note}." if note else ""


def _rounds_text(info: dict) -> tuple:
    rounds = info.get("rounds", "–")
    kept = info.get("kept_round")
    rounds_txt = f"{rounds}" + (
        f" (kept round {kept}: stopped at the best held-out error)"
        if kept is not None and rounds != "–" and kept != rounds
        else ""
    )
    conv = info.get("converged")
    conv_txt = (
        "yes"
        if conv
        else (
            "no (stopped by the user)"
            if info.get("stopped_by_user")
            else "no (round cap or early stop: the guarantees below are not reached)"
        )
    )
    if conv is None:
        conv_txt = "unknown"
    return rounds, rounds_txt, conv_txt


def _range_source_text(sc, info: dict) -> str:
    src = getattr(sc, "source", "declared")
    src_txt = {
        "declared": "declared by the user",
        "robust": "robust: clipped at quantiles of the data (not declared)",
    }.get(src, "observed min/max of the fitting data (not declared)")
    note = info.get("label_note")
    if src == "robust" and isinstance(note, str) and note.strip():
        src_txt += f"; {note.strip()}"
    elif src not in ("declared", "robust") and isinstance(note, str) and note.strip().startswith("observed"):
        # the dashboard's observed range is of all the table's rows (app.services.specs), not the fitting rows'
        src_txt = f"the {note.strip()} (not declared)"
    return src_txt


def _thresholds_text(model, info: dict) -> str:
    """The Thresholds row: α (and β) as stated, and how they were chosen or why the kept model differs."""
    p = model.params
    moments = tuple(p.moments)
    used_alpha, used_beta = descent_thresholds(model)
    # a mean-only model has no moment threshold: β is neither stated nor explained
    applied = threshold_rules(model)  # older files kept "se" for a paper-step fit: it was the "auto" rule
    rules = (("α", "alpha"), ("β", "beta")) if moments else (("α", "alpha"),)
    auto = [n_ for n_, r in rules if applied[r] == "auto"]
    se = [n_ for n_, r in rules if applied[r] == "se"]
    auto_txt = f"; {' and '.join(auto)} chosen automatically just above the sampling noise" if auto else ""
    missed = not se and (p.alpha > used_alpha or (used_beta is not None and p.beta > used_beta))
    if missed:  # early stopping kept a round that misses the thresholds the descent used
        auto_txt += (
            f"; the descent used α = {format_number(used_alpha, 3)}"
            + (f", β = {format_number(used_beta, 3)}" if used_beta is not None else "")
            + f", and the kept model achieves the values stated here ({missed_reason(info)})"
        )
    if se:
        auto_txt += (
            f"; {' and '.join(se)}: the values the model achieves on its fitting rows (cells were corrected "
            f"only when |t| >= {float(info.get('z', 0)):.2f} against their own standard error, whole "
            f"groups at {float(info.get('z_group', 0)):.2f}"
            + (
                "; the moments left to the cell step after the descent, which made no moment update"
                if moments and p.z_moment >= NO_GROUP_MOMENT_Z
                else "; whole groups' moments left to the cell step after the descent"
                if moments and p.z_group_moment >= NO_GROUP_MOMENT_Z
                else f"; a whole group's moments from |t| >= {p.z_group_moment:g}, part-way: the share "
                f"max({SHRINK_MIN:g}, 1 − {p.moment_shrink:g}/t²) of the gap to its own fitting-row moment"
                if moments and getattr(p, "moment_shrink", 0) > 0 and p.z_group_moment >= 0
                else ""
            )
            + ")"
        )
    return (
        f"α = {format_number(p.alpha, 3)} (means)"
        + (f", β = {format_number(p.beta, 3)} (moments)" if moments else "")
        + f"; mass-weighted, label scaled to [0, 1]{auto_txt}"
    )


def _update_rows(model, info: dict) -> list:
    """The Mean updates and (for a model with moments) Moment updates rows, against the paper's bounds."""
    p = model.params
    used_alpha, _ = descent_thresholds(model)
    mb = 1.0 / used_alpha**2 - 1.0  # the paper's bound is on the threshold the descent used
    beta_bound = 1.0 / p.beta**2 - 1.0 if p.beta > 0 else float("inf")
    rows = [
        (
            "Mean updates",
            f"{info.get('mean_updates', '–'):,} of at most 1/α² − 1 = {mb:,.0f}"
            if isinstance(info.get("mean_updates"), int)
            else "–",
        )
    ]
    if tuple(p.moments):
        rows.append(
            (
                "Moment updates",
                (
                    f"{info.get('moment_updates'):,} in total, the largest moment pass "
                    f"{info.get('max_moment_updates_per_call', '–'):,} "
                    f"(bound 1/β² − 1 = {beta_bound:,.0f} per pass)"
                )
                if isinstance(info.get("moment_updates"), int)
                and isinstance(info.get("max_moment_updates_per_call"), int)
                else str(info.get("moment_updates", "–")),
            )
        )
    return rows


def param_rows(model, audit, delta, gamma, label, units: str = "") -> list:
    """The report's "Model and run" table: (key, text) rows of the label, thresholds, predictors, the fit's
    progress and stages, the fitting rows and the audit settings.

    Parameters
    ----------
    model : mmc_core.FittedModel
    audit : the model's audit (for the note on labels outside the range), or None
    delta, gamma : the audit's interval miscoverage and smallest covered cell mass
    label : the label's name
    units : the label's units as printed (default "<label> units")

    Returns
    -------
    list of (str, str)
    """
    p, info, sc = model.params, dict(model.info or {}), model.scale
    moments = tuple(p.moments)
    k = max(moments) if moments else 1
    rounds, rounds_txt, conv_txt = _rounds_text(info)
    odd = (
        "; odd moments as E|y − μ|^a"
        if p.odd_moments == "absolute" and any(a % 2 for a in moments)
        else ("; odd moments signed" if any(a % 2 for a in moments) else "")
    )
    secs = f", descent {float(info['seconds']):.2f} s" if "seconds" in info else ""
    base_text = describe_base(model.init_mean, info)
    rows = [
        (
            "Label",
            f"{label} in {interval_text(sc.lo, sc.hi, 6)}, range {_range_source_text(sc, info)}" + outside_note(audit),
        ),
        ("Mode", str(info.get("mode", "–"))),
        ("Thresholds", _thresholds_text(model, info)),
        (
            "Predictors",
            (("mean and variance" if k == 2 else f"mean and central moments 2..{k}{odd}") if moments else "mean only")
            + f"; m = {p.m} buckets per predictor (mean bucket width {format_number((sc.hi - sc.lo) / p.m, 3)} {units or label + ' units'})",
        ),
        (
            "Step rule",
            f"{p.step}"
            + (
                " (shift each violating cell by its mean residual)"
                if p.step == "exact"
                else " (the paper's fixed step α or β)"
            ),
        ),
        ("Converged", f"{conv_txt}; {rounds_txt} round{'s' if rounds != 1 else ''}{secs}"),
        *_update_rows(model, info),
        *([("Base prediction", base_text)] if base_text else []),
        *([("Base variance", bv_text)] if (bv_text := base_variance_text(info)) else []),
        *([("After the descent", cells_text)] if (cells_text := describe_cells(info)) else []),
        *([("What each stage changed", stages_text)] if (stages_text := describe_stages(info.get("stages"))) else []),
        (
            "Fitting rows",
            f"{info.get('n_fit', '–'):,} fitted, {info.get('n_calibration', 0):,} held out"
            + (
                "; intervals calibrated on all of them out of fold (5-fold cross-fitting)"
                if (model.extras.get("intervals") or {}).get("rows") == "cross-fit"
                else " for interval calibration"
            )
            if isinstance(info.get("n_fit"), int)
            else "–",
        ),
        (
            "Audit settings",
            f"δ = {delta:g} (target coverage {1 - delta:.0%}), γ = {gamma:g} (smallest cell mass the guarantees cover)",
        ),
    ]
    return rows


def data_rows(audit, model, y, data_name, gamma) -> tuple[list, list]:
    """The report's "Data" table and its notes: rows audited, groups, the smallest groups, groups below γ and
    discovered groups.

    Parameters
    ----------
    audit : the audit of ``model`` on the rows
    model : mmc_core.FittedModel
    y : the audited labels (only their count is used)
    data_name : the data's name as printed
    gamma : the smallest cell mass the guarantees cover

    Returns
    -------
    rows : list of (str, str)
    notes : list of str, sentences printed under the table
    """
    bg = audit.by_group
    n = len(y)
    rows = [("Data", f"{data_name}: {n:,} labelled rows audited")]
    notes = []
    if len(bg):
        rows.append(("Groups", f"{len(bg):,} (overlapping; the whole population is the group 'all')"))
        if "count" in bg:
            small = bg.sort_values("count").head(3)
            rows.append(
                (
                    "Smallest groups",
                    "; ".join(f"{short_name(g, 40)} ({int(c):,} rows)" for g, c in zip(small.index, small["count"])),
                )
            )
            empty = [str(g) for g, c in zip(bg.index, bg["count"]) if int(c) == 0]
            if empty:
                more = f" and {len(empty) - 8} more" if len(empty) > 8 else ""
                notes.append(f"{len(empty)} group(s) have no rows in this data: " + ", ".join(empty[:8]) + more)
        below = [g for g, b in zip(bg.index, below_gamma(audit, bg.index)) if b]
        rows.append(
            (
                "Groups below γ",
                (
                    f"{len(below)}: "
                    + ", ".join(short_name(g, 40) for g in below[:6])
                    + (f" and {len(below) - 6} more (marked † in the figures)" if len(below) > 6 else "")
                )
                if below
                else f"none (every group has mass ≥ γ = {gamma:g})",
            )
        )
    found = discovered_groups(model)
    if found:
        rows.append(
            (
                "Discovered groups",
                f"{len(found)}: "
                + "; ".join(short_name(g, 60) for g in found[:6])
                + (f" and {len(found) - 6} more" if len(found) > 6 else ""),
            )
        )
        notes.append(DISCOVERED_NOTE)
    return rows, notes


DISCOVERED_NOTE = (
    "Discovered groups were not listed by the analyst: the learning-oracle auditor (the dashboard's "
    "Discover, or mmc fit --discover) found them as rules on rows other than the audited ones, and "
    "kept each only after its error was significant on held-out check rows (Bonferroni-adjusted "
    "over every candidate tested). They were then calibrated like the listed groups; their names "
    "start with 'found:' or 'learned:'."
)


def discovered_groups(model) -> list:
    """Names of the groups of ``model`` that were discovered (the dashboard's Discover: ``info
    ["discovered_groups"]``; ``mmc fit --discover``: ``info["learned_sets"]``), in the model's order."""
    info = dict(getattr(model, "info", None) or {})
    names = {g.get("name") for g in info.get("discovered_groups") or [] if isinstance(g, dict)}
    names |= {n for n in info.get("learned_sets") or [] if isinstance(n, str)}
    return [n for n in model.groups.names if n in names]

"""How the base prediction was used, in one sentence (:func:`describe`) for the CLI summary, the dashboard and
the PDF report: the affine line, the group-linear map with what the out-of-sample rows bore out of it, or why
the base was used as given. Apart from :mod:`mmc_core.fit.recalibrate`, which fits the maps, so that the wording
reads on its own.
"""

from __future__ import annotations

import math

from ..fit.recalibrate import GATE_MIN_ROWS, MIN_GAIN_Z, WITHIN_NOISE_Z, within_slopes

__all__ = ["describe"]


def describe(init_mean: dict, info: dict) -> str | None:
    """One sentence on how the base prediction was used, for the CLI summary, the dashboard and the PDF report.

    Slopes are of the label on the base: 1 + the fitted slope.

    Parameters
    ----------
    init_mean : dict
        The model's initial mean (``FittedModel.init_mean``).
    info : dict
        The model's fit record (``FittedModel.info``), whose ``base_recalibration`` is the map's check.

    Returns
    -------
    str or None
        None for a model without a base prediction.
    """
    kind = init_mean.get("kind")
    if kind == "base-affine":
        return f"recalibrated by a line: label ≈ {init_mean['intercept']:.3g} + {init_mean['slope']:.3g} × base (unit scale)"
    check = info.get("base_recalibration")
    logistic = _logistic_clause(init_mean, check)
    if kind == "base-group-linear":
        if not init_mean.get("logistic"):
            return _group_linear_sentence(init_mean, info, check) + (f"; {logistic}" if logistic else "")
        if isinstance(check, dict) and check.get("kept"):
            return f"{_group_linear_sentence(init_mean, info, check)}; then {logistic}"
        return f"{_as_given_sentence(check).replace('used as given', 'no group-linear map', 1)}; then {logistic}"
    if kind == "base":
        return _as_given_sentence(check) + (f"; {logistic}" if logistic else "")
    return None


def _logistic_clause(init_mean: dict, check) -> str | None:
    """The per-group logistic map of a 0/1 label's base, applied or not (None when it was not tried)."""
    lg = check.get("logistic") if isinstance(check, dict) else None
    if not isinstance(lg, dict):
        return None
    final = lg.get("final") if isinstance(lg.get("final"), dict) else None
    if not init_mean.get("logistic"):
        if final is not None:
            return (
                "no per-group logistic map (the whole fit with it did not predict the held-out rows clearly "
                f"better: log loss {final['with']:.4f} against {final['without']:.4f} without it, standard error "
                f"{final['se']:.4f})"
            )
        if lg.get("harmed"):
            return f"no per-group logistic map (it left {_group_list(lg['harmed'])} more biased on out-of-sample rows)"
        if lg.get("no_held_out"):
            return "no per-group logistic map (no held-out rows to check the whole fit with it on)"
        if lg.get("too_few"):
            return "no per-group logistic map (fewer rows of the rarer label than it has coefficients)"
        if lg.get("rows", 0) < GATE_MIN_ROWS:
            return "no per-group logistic map (too few rows to choose its penalty and check it)"
        return f"no per-group logistic map (rows it was not fitted on {_borne_out(lg)})"
    w = float(lg.get("weight", 1.0))
    share = "as fitted" if w >= 0.995 else f"at {w:.0%} of its fit"
    return (
        f"mapped per group on the logit scale (an intercept, a slope and a bend per group, penalty {lg['lam']:g} "
        f"chosen by cross-validation; {share}: rows it was not fitted on bear out {lg['scale']:.0%} of it, "
        f"z = {_z_text(lg['z'])}, log loss {lg['gain']:.4f} lower per row"
        + (
            f"; the whole fit with it: held-out log loss {final['with']:.4f} against {final['without']:.4f} without)"
            if final is not None
            else ")"
        )
    )


def _gate_notes(check) -> list:
    """What the out-of-sample rows said of the applied map (its weight and z)."""
    z = check.get("z") if isinstance(check, dict) else None
    w = check.get("weight", 1.0) if isinstance(check, dict) else 1.0
    if not isinstance(z, (int, float)):
        return []
    # a model saved before 2026-11-27 has no scale: its z was the squared-error gain's
    scale = (check or {}).get("scale")
    if not isinstance(scale, (int, float)):
        return [f"out-of-sample squared error lower, z = {z:.1f}" + ("" if w >= 1 else f", {w:.0%} of the fitted map")]
    # the slopes stated are the applied ones: the weight scaled every coefficient of the map
    if w >= 1:
        return [f"as fitted: rows it was not fitted on bear it out in full, z = {_z_text(z)}"]
    if z >= MIN_GAIN_Z:
        return [
            f"slopes as applied, {w:.0%} of the fitted map: the share of it that rows it was not "
            f"fitted on bear out, z = {_z_text(z)}"
        ]
    return [
        f"slopes as applied, {w:.0%} of the fitted map: rows it was not fitted on bear out "
        f"{scale:.0%} of it, at z = {_z_text(z)} (all of that share needs z >= {MIN_GAIN_Z:g})"
    ]


def _within_text(init_mean: dict, check, notes: list) -> str:
    """The within-group slope (or a bent map's slopes; the bend's own check appended to ``notes``)."""
    n_bent = sum(1 for b in init_mean.get("bends") or [] if b)
    if n_bent:
        slopes = within_slopes(init_mean)
        bz = check.get("bend_z") if isinstance(check, dict) else None
        bw = check.get("bend_weight", 1.0) if isinstance(check, dict) else 1.0
        if isinstance(bz, (int, float)):
            bs = (check or {}).get("bend_scale")
            if isinstance(bs, (int, float)):
                notes.append(
                    f"the bend {'as fitted' if bw >= 1 else f'at {bw:.0%} of its fit'}: {bs:.0%} of it borne "
                    f"out, z = {_z_text(bz)}"
                )
            else:
                notes.append(f"bend: z = {bz:.1f}" + ("" if bw >= 1 else f", {bw:.0%} of the fitted bend"))
        within = (
            f"slope {' → '.join(f'{v:.2f}' for v in slopes)} within (bent at {n_bent} "
            f"point{'s' if n_bent > 1 else ''} of the base's range)"
        )
    else:
        within = f"slope {1 + init_mean['slope']:.2f} within"
    wz = check.get("within_z") if isinstance(check, dict) else None
    if isinstance(wz, (int, float)) and math.isfinite(wz) and abs(wz) < WITHIN_NOISE_Z:
        # a slope fitted to noise is stated as such, not as a finding about the groups (a bent map's
        # segments start from the same within slope)
        within += f" (the straight slope indistinguishable from 1: |z| = {abs(wz):.1f} on the fitting rows)"
    return within


def _group_linear_sentence(init_mean: dict, info: dict, check) -> str:
    notes = _gate_notes(check)
    within = _within_text(init_mean, check, notes)
    tail = f" ({'; '.join(notes)})" if notes else ""
    dropped = check.get("between_dropped_for") if isinstance(check, dict) else None
    if init_mean.get("group_part"):
        cells = info.get("shrunken_cells")
        untouched = info.get("kept_mean_updates") == 0 and not (isinstance(cells, dict) and cells.get("kept"))
        return (
            f"recalibrated within the groups: {within}{tail}; the groups' means are left as the base has "
            f"them, for the descent and the cell step to correct, each on its own test"
            # said outright when neither did: the groups' means are then the base's own, errors included
            + ("; on this fit neither changed them" if untouched else "")
        )
    if dropped:
        return (
            f"recalibrated within the groups: {within}; no between-group slope (it left "
            f"{_group_list(dropped)} more biased on out-of-sample rows){tail}"
        )
    return f"recalibrated within and between the groups: {within}, {1 + init_mean['between']:.2f} between{tail}"


def _as_given_sentence(check) -> str:
    """A base used as given, and why the group-linear map was not applied."""
    if isinstance(check, dict) and check.get("map_dropped_for"):
        return (
            f"used as given (a group-linear recalibration would have left "
            f"{_group_list(check['map_dropped_for'])} more biased on out-of-sample rows)"
        )
    if isinstance(check, dict) and check.get("between_dropped_for"):
        return (
            "used as given (with the between-group slope a group-linear recalibration left "
            f"{_group_list(check['between_dropped_for'])} more biased on out-of-sample rows; without it, "
            + (
                f"rows it was not fitted on {_borne_out(check)})"
                if isinstance(check.get("scale"), (int, float))
                else f"it did not lower the out-of-sample squared error: z = {check.get('z', 0.0):.1f})"
            )
        )
    if isinstance(check, dict) and isinstance(check.get("scale"), (int, float)):
        if check.get("rows", 0) < GATE_MIN_ROWS:
            return f"used as given (fewer than {GATE_MIN_ROWS} out-of-sample rows to check a recalibration on)"
        return f"used as given (rows a group-linear recalibration was not fitted on {_borne_out(check)})"
    if isinstance(check, dict) and isinstance(check.get("z"), (int, float)):
        return (
            f"used as given (a group-linear recalibration did not lower the out-of-sample squared error: "
            f"z = {check['z']:.1f})"
        )
    return "used as given"


def _group_list(names, most: int = 3) -> str:
    """'group a' / 'groups a, b, c and 2 more'."""
    names = [str(v) for v in names]
    if len(names) == 1:
        return f"group {names[0]}"
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return f"groups {', '.join(names[:most])}{more}"


def _z_text(z: float) -> str:
    """A z for the summary sentence (a change the rows bear out exactly has an enormous one)."""
    return f"{z:.1f}" if abs(z) < 100 else ("> 100" if z > 0 else "< -100")


def _borne_out(check: dict) -> str:
    """What the out-of-sample rows said of a map that was not applied."""
    z = _z_text(check.get("z", 0.0))
    return f"bear out {check['scale']:.0%} of it, z = {z}" if check["scale"] > 0 else f"do not bear it out, z = {z}"

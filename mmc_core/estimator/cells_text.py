"""The cell steps in words (:func:`describe_cells`): what the mean's and the moments' shrunken cell corrections
(mmc_core.fit.cells) did in a fit, from the fit's ``info``, for the fit summary, the Run page and the report."""

from __future__ import annotations

import math

__all__ = ["describe_cells"]


def describe_cells(info: dict) -> str | None:
    """One sentence on the steps after the descent for the fit summary, dashboard and report: what the mean's
    cells and then the moments' cells changed (None when neither was tried)."""
    parts = [t for t in (_describe_mean_cells(info), _describe_moment_cells(info)) if t]
    return "; ".join(parts) or None


def _describe_moment_cells(info) -> str | None:
    mc = info.get("moment_cells") if isinstance(info, dict) else None
    if not isinstance(mc, dict):
        return None
    out = []
    for key, c in sorted(mc.items()):
        if not isinstance(c, dict):
            continue
        what = "the variance" if key == "2" else f"moment {key}"
        stages = [st for st in c.get("stages") or [] if isinstance(st, dict)]
        kept = [st for st in stages if st.get("kept")]
        if c.get("broke_given"):
            out.append(f"{what} as the descent left it (its cell corrections would break the given alpha or beta)")
        elif kept:
            how = " and ".join(
                (
                    "whole groups"
                    if st.get("bands") == 1
                    else "whole groups with one curve along the mean within groups"
                    if st.get("by") == "mean" and st.get("curve") and st.get("along") == "mean within groups"
                    else "whole groups with one curve along the mean"
                    if st.get("by") == "mean" and st.get("curve")
                    else "each group's bands of the mean"
                    if st.get("by") == "mean"
                    else "each group's bands"
                )
                + f" ({_num(st, 'weight'):.0%}, z = {_num(st, 'z'):.1f}"
                + (
                    f", shuffled p = {_num(st, 'p_strong'):.3f})"
                    if "p_strong" in st
                    else f", shuffled p = {_num(st, 'p_shuffled'):.2f})"
                    if "p_shuffled" in st
                    else ")"
                )
                for st in kept
            )
            out.append(
                f"{what} scaled by a log-scale ridge fit of the squared residuals over {how}, "
                "at the share the held-out rows bear out"
            )
        elif any(isinstance(st, dict) and st.get("kept") for st in c.get("weak_stages") or []):
            out.append(
                f"{what} as the descent left it (the held-out rows bear out only weak corrections, none reaching "
                "p = 0.01 on 1,000 shuffles of those rows: with four stages tried, noise passes weaker ones too often)"
            )
        elif isinstance(c.get("skipped"), str):
            out.append(f"{what} as the descent left it (only {c['skipped']})")
        else:
            out.append(f"{what} as the descent left it (the held-out rows do not bear out a correction)")
        groups = c.get("groups")
        if isinstance(groups, dict) and not c.get("broke_given"):
            harmed = groups.get("harmed")
            if isinstance(harmed, list) and harmed:
                out[-1] += (
                    ", its whole groups not shrunk toward their own (the held-out rows of "
                    f"{', '.join(map(str, harmed[:3]))}{' ...' if len(harmed) > 3 else ''} contradict it)"
                )
            else:
                chance = (
                    f"; the smaller penalties allowed, the groups' spreads differing beyond chance (shuffled p = "
                    f"{_num(groups, 'p_shuffled'):.3f})"
                    if groups.get("small") is True
                    else ""
                )
                out[-1] += (
                    ", then its whole groups shrunk toward their own on every post-processing row "
                    f"(penalty {_num(groups, 'penalty'):,.0f} rows, by cross-validation{chance})"
                )
        qlike = c.get("groups_qlike")
        if isinstance(qlike, dict) and not c.get("broke_given") and qlike.get("penalty") is not None:
            harmed = qlike.get("harmed")
            out[-1] += (
                ", its whole groups not moved on the QLIKE scale (the held-out rows of "
                f"{', '.join(map(str, harmed[:3]))}{' ...' if len(harmed) > 3 else ''} contradict it)"
                if isinstance(harmed, list) and harmed
                else ", then its whole groups moved on the QLIKE scale, their ranks still differing beyond chance "
                f"(shuffled p = {_num(qlike, 'p_shuffled'):.3f}; penalty {_num(qlike, 'penalty'):,.0f} rows, by "
                "cross-validation over folds of the rows)"
            )
        level = c.get("level")
        if isinstance(level, (int, float)) and not isinstance(level, bool) and level > 0 and not c.get("broke_given"):
            out[-1] += (
                f", then its level set to the fitting and held-out rows' together (x{level:.3g}: in-sample residuals "
                "are smaller than new rows')"
            )
    return "; ".join(out) or None


def _num(c: dict, key: str, cast=float):
    """A model file's info value, or 0 (the info is not validated)."""
    v = c.get(key)
    return cast(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else cast(0)


def _describe_mean_cells(info) -> str | None:
    c = info.get("shrunken_cells") if isinstance(info, dict) else None
    if not isinstance(c, dict):
        return None

    def num(key, cast=float):
        return _num(c, key, cast)

    ridge = "weight" in c  # the ridge step (2026-11-27); older files describe the empirical-Bayes one
    if c.get("broke_given"):
        return "no shrunken cell corrections (they would break the given alpha or beta on the fitting rows)"
    if c.get("kept"):
        if ridge:
            return (
                f"each group's prediction bands corrected by a ridge fit of the residuals over every (group, band) "
                f"cell at once (penalty {num('penalty'):g} rows, chosen on the held-out rows), applied at "
                f"{num('weight'):.0%}: the held-out rows bear out {num('scale'):.0%} of it, z = {num('z'):.1f}"
            )
        n = num("rounds", int)
        return (
            f"each group's prediction bands corrected by their mean residual shrunk by the evidence "
            f"({n} round{'s' if n != 1 else ''}; on the held-out rows the squared error changed by z = {num('z'):.1f}, "
            f"dropped only at z <= -1)"
        )
    if isinstance(c.get("skipped"), str):
        return f"no shrunken cell corrections (only {c['skipped']})"
    harmed = c.get("harmed")
    if isinstance(harmed, list) and harmed:
        names = [str(v) for v in harmed]
        return f"no shrunken cell corrections (they left {', '.join(names[:3])} more biased on held-out rows)"
    if num("rounds", int):
        if ridge and c.get("penalty") is None:
            return "no shrunken cell corrections (none lowered the squared error on the held-out rows)"
        if ridge:
            return f"no shrunken cell corrections (the held-out rows do not bear them out: z = {num('z'):.1f})"
        return f"no shrunken cell corrections (held-out squared error worse: z = {num('z'):.1f})"
    return "no shrunken cell corrections (the cells' mean residuals are within noise)"

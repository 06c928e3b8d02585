"""The bundled demo tables: loading, provenance, regeneration, error messages."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.services import demo_data
from app.services.demo_data import DemoDataset, get_dataset, list_datasets, load_dataset

REPO = Path(__file__).resolve().parents[1]
DEMO_DIR = REPO / "demo_datasets"
README = DEMO_DIR / "README.md"

# Shapes of the shipped tables (rows, columns) and their columns.
EXPECTED = {
    "islp_wage": (
        (3000, 9),
        ["year", "age", "maritl", "race", "education", "jobclass", "health", "health_ins", "wage"],
    ),
    "nels_catholic": (
        (7430, 12),
        [
            "read12",
            "math12",
            "female",
            "asian",
            "hispan",
            "black",
            "motheduc",
            "fatheduc",
            "lfaminc",
            "hsgrad",
            "cathhs",
            "parcath",
        ],
    ),
    "synthetic_scores": (
        (6000, 10),
        ["sex", "race", "age", "score", "outcome", "base_pred", "true_mean", "true_var", "true_m3", "true_m4"],
    ),
    "loanapp": (
        (1989, 55),
        [
            "occ",
            "loanamt",
            "msa",
            "suffolk",
            "appinc",
            "unit",
            "married",
            "dep",
            "emp",
            "yjob",
            "self",
            "atotinc",
            "cototinc",
            "hexp",
            "price",
            "other",
            "liq",
            "rep",
            "gdlin",
            "lines",
            "mortg",
            "cons",
            "pubrec",
            "hrat",
            "obrat",
            "fixadj",
            "term",
            "apr",
            "prop",
            "inss",
            "gift",
            "cosign",
            "unver",
            "review",
            "netw",
            "unem",
            "min30",
            "bd",
            "mi",
            "old",
            "vr",
            "sch",
            "black",
            "hispan",
            "male",
            "approve",
            "mortno",
            "mortperf",
            "mortlat1",
            "mortlat2",
            "chist",
            "multi",
            "loanprc",
            "thick",
            "white",
        ],
    ),
}

# The real tables must stay byte-identical to what was extracted (see demo_datasets/README.md).
REAL_SHA256 = {
    "islp_wage.csv": "8137a930eedf615a1dc655369988373e995785760484ffefc52aaddf6b19c68b",
    "nels_catholic.csv": "8e419b115c0366b9eff86e98c4414f224fb2ce6dc76a39fdb68f6f688a026bc4",
    "loanapp.csv": "58b6602f92cefef5f9d49829ac011fd1d1bcf65597342c5874ddd1e898d774c0",
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def _no_demo_dir_override(monkeypatch):
    monkeypatch.delenv(demo_data.ENV_VAR, raising=False)


def test_names_and_order():
    assert [d.name for d in list_datasets()] == ["islp_wage", "nels_catholic", "synthetic_scores", "loanapp"]
    assert all(isinstance(d, DemoDataset) for d in list_datasets())


def test_dataset_description_is_frozen():
    ds = get_dataset("islp_wage")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.label = "age"  # type: ignore[misc]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_loads_by_name_with_expected_shape(name):
    df = load_dataset(name)
    shape, columns = EXPECTED[name]
    assert isinstance(df, pd.DataFrame)
    assert df.shape == shape
    assert list(df.columns) == columns
    ds = get_dataset(name)
    assert ds.path.is_file() and ds.path.name == ds.file
    assert ds.load().equals(df)


@pytest.mark.parametrize("ds", list_datasets(), ids=lambda d: d.name)
def test_suggestions_refer_to_real_columns(ds):
    df = load_dataset(ds.name)
    assert ds.label in df.columns
    assert pd.api.types.is_numeric_dtype(df[ds.label]) and df[ds.label].notna().all()
    assert ds.groups and set(ds.groups) <= set(df.columns)
    assert set(ds.numeric_groups) <= set(ds.groups)
    for col in ds.numeric_groups:
        assert pd.api.types.is_numeric_dtype(df[col])
    assert set(ds.ground_truth) <= set(df.columns)
    assert ds.label not in ds.groups and ds.label not in ds.ground_truth
    if ds.base_prediction is not None:
        assert ds.base_prediction in df.columns
        assert pd.api.types.is_numeric_dtype(df[ds.base_prediction])
    if ds.label_range is not None:
        lo, hi = ds.label_range
        assert lo < hi
        assert df[ds.label].between(lo, hi).all()
        if ds.base_prediction is not None:
            assert df[ds.base_prediction].between(lo, hi).all()
    assert ds.title and ds.description and ds.source


def test_real_tables_have_no_base_prediction_and_synthetic_has_one():
    assert get_dataset("islp_wage").base_prediction is None
    assert get_dataset("nels_catholic").base_prediction is None
    syn = get_dataset("synthetic_scores")
    assert syn.base_prediction == "base_pred"
    assert syn.label_range == (0.0, 100.0)
    assert set(syn.groups) == {"sex", "race", "age"}
    assert set(get_dataset("nels_catholic").groups) == {"female", "asian", "hispan", "black", "lfaminc"}


def test_binary_demo_is_a_classifier_table():
    ds = get_dataset("loanapp")
    df = load_dataset("loanapp")
    assert ds.task == "binary" and ds.base_prediction is None
    assert set(df[ds.label].unique()) == {0, 1}
    assert df[ds.label].mean() == pytest.approx(1745 / 1989)
    for leak in ("action", "reject", "typur", "inson"):  # decided with or after the outcome: not shipped
        assert leak not in df.columns
    assert all(get_dataset(n).task == "regression" for n in ("islp_wage", "nels_catholic", "synthetic_scores"))


def test_nels_hsgrad_missing_marker_is_nan():
    df = load_dataset("nels_catholic")
    assert pd.api.types.is_float_dtype(df["hsgrad"])
    assert int(df["hsgrad"].isna().sum()) == 1460
    assert set(df["hsgrad"].dropna().unique()) == {0.0, 1.0}
    # No other column has missing values, and no "." survived anywhere.
    assert int(df.drop(columns="hsgrad").isna().sum().sum()) == 0
    assert all(pd.api.types.is_numeric_dtype(df[c]) for c in df.columns)


def test_wage_table_content():
    df = load_dataset("islp_wage")
    assert int(df.isna().sum().sum()) == 0
    assert df["race"].value_counts().to_dict() == {"1. White": 2480, "2. Black": 293, "3. Asian": 190, "4. Other": 37}
    assert 20 < df["wage"].min() < df["wage"].max() < 320
    assert df["age"].between(18, 80).all()


def test_synthetic_ground_truth_is_consistent():
    df = load_dataset("synthetic_scores")
    assert int(df.isna().sum().sum()) == 0
    assert (df["true_var"] > 0).all() and (df["true_m4"] > 0).all()
    # The empirical mean tracks the true mean: outcome - true_mean has mean 0 and, rows being independent,
    # variance mean(true_var) / n; allow 5 of those standard errors (two-sided normal tail 6e-7).
    n = len(df)
    assert abs(df["outcome"].mean() - df["true_mean"].mean()) <= 5 * np.sqrt(df["true_var"].mean() / n)
    # The base model misses race D by exactly 9 points in the population (from the generator's finite support);
    # the table's race-D rows average that gap up to 5 standard errors of their composition.
    from mmc_core.common.synthetic import demo_distribution

    dist = demo_distribution()
    sup, prob = dist.support()
    in_d = np.asarray(sup["race"]) == "D"
    gap = 100 * (dist.true_mean(sup) - dist.base_prediction(sup))[in_d]
    w = prob[in_d] / prob[in_d].sum()
    pop_gap, pop_sd = float(w @ gap), float(np.sqrt(w @ (gap - w @ gap) ** 2))
    assert pop_gap == pytest.approx(9.0)
    d = df[df["race"] == "D"]
    assert abs((d["true_mean"] - d["base_pred"]).mean() - pop_gap) <= 5 * pop_sd / np.sqrt(len(d))


def test_real_files_unchanged():
    for file, digest in REAL_SHA256.items():
        assert sha256(DEMO_DIR / file) == digest, f"{file} differs from the extracted original"


def test_every_dataset_documented_with_correct_checksum():
    text = README.read_text(encoding="utf-8")
    for ds in list_datasets():
        assert re.search(rf"^## {re.escape(ds.file)}:", text, re.MULTILINE), f"no README section for {ds.file}"
        section = text.split(f"## {ds.file}:", 1)[1].split("\n## ", 1)[0]
        assert "Source" in section and "License" in section, f"{ds.file}: provenance or license missing"
        for col in EXPECTED[ds.name][1]:
            assert f"| `{col}` |" in section, f"column {col} of {ds.file} not described in the README"
        # The checksum line in the README must match the file (update it when regenerating).
        assert re.search(rf"`{re.escape(ds.file)}` {sha256(ds.path)}", text), f"README sha256 of {ds.file} is stale"


def test_synthetic_regenerates_byte_identically(tmp_path):
    out = tmp_path / "synthetic_scores.csv"
    # The exact command documented in demo_datasets/README.md (plus --out, to leave the checkout alone).
    proc = subprocess.run(
        [sys.executable, "-m", "app.services.demo_data", "--regenerate-synthetic", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == (DEMO_DIR / "synthetic_scores.csv").read_bytes(), (
        "synthetic_scores.csv no longer matches mmc_core.common.synthetic.demo_distribution(): "
        "run `python -m app.services.demo_data --regenerate-synthetic` and update demo_datasets/README.md"
    )


def test_synthetic_table_matches_generator():
    from mmc_core.common.synthetic import demo_distribution

    t = demo_distribution().sample_table(demo_data.SYNTHETIC_ROWS, np.random.default_rng(demo_data.SYNTHETIC_SEED))
    df = load_dataset("synthetic_scores")
    assert list(df.columns) == list(t)
    for col, values in t.items():
        if np.issubdtype(np.asarray(values).dtype, np.number):
            np.testing.assert_allclose(df[col].to_numpy(), values, atol=5e-7, rtol=0)
        else:
            assert list(df[col]) == list(values)


@pytest.mark.parametrize("bad", ["wage", "ISLP_WAGE", "", None])
def test_unknown_name_lists_valid_names(bad):
    for fn in (load_dataset, get_dataset):
        with pytest.raises(ValueError) as exc:
            fn(bad)
        msg = str(exc.value)
        assert "unknown demo dataset" in msg
        for name in ("islp_wage", "nels_catholic", "synthetic_scores"):
            assert name in msg


def test_env_var_overrides_and_falls_back(tmp_path, monkeypatch):
    (tmp_path / "islp_wage.csv").write_text("year,age,wage\n2006,30,100.5\n", encoding="utf-8")
    monkeypatch.setenv(demo_data.ENV_VAR, str(tmp_path))
    df = load_dataset("islp_wage")
    assert df.shape == (1, 3)
    assert demo_data.dataset_path("islp_wage") == tmp_path / "islp_wage.csv"
    # A table missing from $MMC_DEMO_DIR is still found in the checkout.
    assert load_dataset("nels_catholic").shape == (7430, 12)


def test_missing_files_give_a_helpful_error(tmp_path, monkeypatch):
    monkeypatch.setenv(demo_data.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(demo_data, "__file__", str(tmp_path / "pkg" / "app" / "services" / "demo_data.py"))
    with pytest.raises(FileNotFoundError, match="MMC_DEMO_DIR"):
        load_dataset("islp_wage")


def test_module_cli_lists_datasets():
    proc = subprocess.run(
        [sys.executable, "-m", "app.services.demo_data"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    for ds in list_datasets():
        assert ds.name in proc.stdout and str(ds.path) in proc.stdout

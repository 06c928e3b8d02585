"""The project installs as a real package.

Fast checks look at pyproject.toml and the scripts. The slow test builds a brand-new virtual
environment, runs a regular (non-editable) ``pip install`` of a copy of the repository into it, and uses
the installed package from outside the repository: the console script, both packages, and the bundled
demo tables. Downloads come from pip's cache after the first run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PACKAGES = ("mmc_core", "app")
DEMO_FILES = ("islp_wage.csv", "nels_catholic.csv", "synthetic_scores.csv", "loanapp.csv", "README.md")


def _modules(root: Path = REPO) -> set[str]:
    """Every Python module of mmc_core/ and app/ under ``root``, as a path relative to it."""
    out = set()
    for pkg in PACKAGES:
        for p in (root / pkg).rglob("*.py"):
            rel = p.relative_to(root)
            if "__pycache__" not in rel.parts and not any(part.startswith(".") for part in rel.parts):
                out.add(rel.as_posix())
    return out


# ---- fast, static checks --------------------------------------------------------------------------
def test_metadata():
    project = PYPROJECT["project"]
    assert project["name"] == "mmc-audit"
    assert project["requires-python"] == ">=3.11"
    assert project["scripts"] == {"mmc": "app.cli:main"}
    deps = " ".join(project["dependencies"])
    for name in ("numpy", "pandas", "streamlit", "plotly", "scikit-learn", "pyarrow", "kaleido", "fpdf2"):
        assert name in deps
    extras = project["optional-dependencies"]
    assert {"test", "bench"} <= set(extras)
    assert any(d.startswith("pytest") for d in extras["test"])
    assert any(d.startswith("tqdm") for d in extras["bench"])


def test_every_subpackage_is_declared():
    """A folder of .py files under mmc_core/ or app/ that is not in [tool.setuptools] packages would be
    silently left out of `pip install .`."""
    declared = set(PYPROJECT["tool"]["setuptools"]["packages"])
    folders = {str(Path(m).parent).replace("/", ".") for m in _modules()}
    missing = folders - declared
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"


def test_streamlit_config_copies_identical():
    a = (REPO / ".streamlit" / "config.toml").read_text(encoding="utf-8")
    b = (REPO / "app" / ".streamlit" / "config.toml").read_text(encoding="utf-8")
    assert a == b, ".streamlit/config.toml and app/.streamlit/config.toml must stay identical"
    cfg = tomllib.loads(a)
    assert cfg["browser"]["gatherUsageStats"] is False
    assert cfg["server"]["headless"] is True and cfg["server"]["address"] == "127.0.0.1"
    assert cfg["server"]["fileWatcherType"] == "none"


@pytest.mark.parametrize(
    "script", ["scripts/test.sh", "scripts/test_min_versions.sh", "scripts/dashboard.sh", ".ci/run"]
)
def test_shell_scripts_parse(script):
    path = REPO / script
    assert path.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n")
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/test.sh" in readme and "bash scripts/dashboard.sh" in readme
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


# ---- the real install -----------------------------------------------------------------------------
def _run(cmd, *, cwd, env, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with `pip install <copy of the repo>` (not editable).

    Returns (venv, a directory outside the repository, environment, modules of the copy installed).
    """
    base = tmp_path_factory.mktemp("install")
    src = base / "src"
    # Install from a copy of the checkout: pip builds in-tree and would otherwise leave build/ and
    # *.egg-info in it. Version control, environments, caches and generated output are left out.
    ignore = shutil.ignore_patterns(
        ".git",
        ".venv",
        ".venv-min",
        "venv",
        "__pycache__",
        "*.pyc",
        "*.egg-info",
        "build",
        "dist",
        ".pytest_cache",
        ".hypothesis",
        "artifacts",
        "results",
    )
    shutil.copytree(REPO, src, ignore=ignore, symlinks=True)
    venv = base / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MMC_DEMO_DIR")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    t0 = time.monotonic()
    _run([sys.executable, "-m", "venv", str(venv)], cwd=base, env=env)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src)], cwd=base, env=env, timeout=900)
    print(f"\nclean venv + pip install: {time.monotonic() - t0:.1f} s")
    outside = base / "elsewhere"
    outside.mkdir()
    modules = _modules(src)  # what was installed from (the checkout may change meanwhile)
    shutil.rmtree(src)  # the installed package must not depend on the source tree
    return venv, outside, env, modules


@pytest.mark.slow
def test_installed_package_works_outside_the_repo(installed):
    venv, outside, env, _ = installed
    py = str(venv / "bin" / "python")
    code = (
        "import pathlib, sys, sysconfig, mmc_core, app\n"
        "from app.services.demo_data import load_dataset, dataset_path, list_datasets\n"
        "site = pathlib.Path(sysconfig.get_paths()['purelib']).resolve()\n"
        f"repo = pathlib.Path({str(REPO)!r}).resolve()\n"
        "for mod in (mmc_core, app):\n"
        "    p = pathlib.Path(list(mod.__path__)[0]).resolve()\n"
        "    assert p.is_relative_to(site) and not p.is_relative_to(repo), p\n"
        "for ds in list_datasets():\n"
        "    p = dataset_path(ds.name).resolve()\n"
        "    assert p.is_relative_to(site), p\n"
        "df = load_dataset('islp_wage')\n"
        "assert df.shape == (3000, 9), df.shape\n"
        "print('OK', len(load_dataset('synthetic_scores')))\n"
    )
    out = _run([py, "-c", code], cwd=outside, env=env)
    assert "OK 6000" in out


@pytest.mark.slow
def test_installed_files_complete(installed):
    venv, outside, env, modules = installed
    py = str(venv / "bin" / "python")
    site = Path(
        _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=outside, env=env).strip()
    )
    missing = sorted(m for m in modules if not (site / m).is_file())
    assert not missing, f"modules not installed by `pip install .`: {missing}"
    for f in DEMO_FILES:
        assert (site / "app" / "demo_datasets" / f).read_bytes() == (REPO / "demo_datasets" / f).read_bytes()
    assert (site / "app" / ".streamlit" / "config.toml").read_bytes() == (
        REPO / ".streamlit" / "config.toml"
    ).read_bytes()
    assert not (site / "demo_datasets").exists(), "demo_datasets must not be installed as a top-level folder"


@pytest.mark.slow
def test_console_script(installed):
    venv, outside, env, _ = installed
    mmc = str(venv / "bin" / "mmc")
    assert Path(mmc).is_file(), "console script `mmc` not installed"
    assert "usage" in _run([mmc, "--help"], cwd=outside, env=env, timeout=120).lower()
    assert "usage" in _run([mmc, "fit", "--help"], cwd=outside, env=env, timeout=120).lower()

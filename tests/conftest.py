"""Test-suite configuration: marker selection, and ``__main__`` restored after every test.

The markers ``slow`` and ``browser`` are registered in pyproject.toml ([tool.pytest.ini_options]).
Plain ``pytest`` deselects them (addopts ``-m "not slow and not browser"``); the full suite, as run by
``bash scripts/test.sh`` and CI, is ``pytest -m "slow or not slow"`` (the later ``-m`` wins).
"""

from __future__ import annotations

import sys

import pytest


def pytest_report_header(config):
    expr = config.getoption("markexpr", default="")
    if expr and "not slow" in expr and "slow or" not in expr:
        return [
            f"marker selection: -m {expr!r} (fast tests only); "
            'full suite: pytest -m "slow or not slow"  or  bash scripts/test.sh'
        ]
    return [f"marker selection: -m {expr!r}" if expr else "marker selection: none (all tests)"]


@pytest.fixture(autouse=True)
def _main_module_restored():
    """Each test leaves ``sys.modules["__main__"]`` as it found it. Streamlit's AppTest runs its script as
    ``__main__`` and leaves it there (for ``AppTest.from_function`` a temporary file, deleted afterwards); Dask's
    worker processes, spawned by a later test, re-run ``__main__`` and died on it ("Nanny failed to start")."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main

"""Test-suite configuration: marker selection only.

The markers ``slow`` and ``browser`` are registered in pyproject.toml ([tool.pytest.ini_options]).
Plain ``pytest`` deselects them (addopts ``-m "not slow and not browser"``); the full suite, as run by
``bash scripts/test.sh`` and CI, is ``pytest -m "slow or not slow"`` (the later ``-m`` wins).
"""

from __future__ import annotations


def pytest_report_header(config):
    expr = config.getoption("markexpr", default="")
    if expr and "not slow" in expr and "slow or" not in expr:
        return [
            f"marker selection: -m {expr!r} (fast tests only); "
            'full suite: pytest -m "slow or not slow"  or  bash scripts/test.sh'
        ]
    return [f"marker selection: -m {expr!r}" if expr else "marker selection: none (all tests)"]

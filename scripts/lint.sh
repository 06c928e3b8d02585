#!/usr/bin/env bash
# Lint, format and type checks: ruff (lint and format check) over the repository and mypy over mmc_core and app (both configured in pyproject.toml),
# with the exact tool versions of the `lint` extra, installed into .venv. CI (.ci/run) runs this first and
# fails on any finding.
#
#   bash scripts/lint.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/setup.sh
source scripts/setup.sh

ensure_python
install_project ".[lint]"
rc=0
log "ruff check"
"$VENV/bin/ruff" check . || rc=1
log "ruff format --check"
"$VENV/bin/ruff" format --check . || rc=1
log "mypy (mmc_core, app)"
"$VENV/bin/mypy" || rc=1
log "lint finished in ${SECONDS} s (exit code $rc)"
exit "$rc"

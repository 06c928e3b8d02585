#!/usr/bin/env bash
# Set up everything on a fresh Debian machine and run the WHOLE test suite (slow and browser tests too).
#
#   bash scripts/test.sh                 # what CI (.ci/run) and the README run
#   bash scripts/test.sh -k demo_data    # extra arguments go to pytest
#
# Steps: apt-get install chromium chromium-driver poppler-utils fonts-droid-fallback fonts-nanum fonts-symbola (only when missing; needs root or
# password-less sudo, otherwise the browser/PDF-rendering tests skip), python3 -m venv .venv,
# pip install -e ".[test]", pytest -m "slow or not slow" -q -ra --durations=15 -n WORKERS --dist loadfile (one
# worker per core, at most 4; MMC_TEST_WORKERS overrides, 0 = in this process; a test file's tests stay on one
# worker, so a browser test's fixed port is never taken twice; the 15 slowest tests are listed, to keep CI
# well under its 30 minutes). Exits non-zero when a test fails
# and also when pytest collects no test at all (its exit code 5).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/setup.sh
source scripts/setup.sh
APT_PACKAGES=(chromium chromium-driver poppler-utils fonts-droid-fallback fonts-nanum fonts-symbola)

ensure_python
apt_install "${APT_PACKAGES[@]}"
install_project ".[test]"

# ---- tests ----------------------------------------------------------------------------------------
log "setup done in ${SECONDS} s; pytest (all markers)"
rc=0
"$VENV/bin/python" -m pytest -m "slow or not slow" -q -ra --durations=15 $(test_workers) "$@" || rc=$?
log "finished in ${SECONDS} s (pytest exit code $rc)"
if [ "$rc" -eq 5 ]; then
    log "ERROR: pytest collected no tests"
    exit 1
fi
exit "$rc"

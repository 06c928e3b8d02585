#!/usr/bin/env bash
# Minimum-versions tier: install the OLDEST supported releases of the runtime dependencies (the exact pins
# of constraints/minimum.txt, which equal the lower bounds in pyproject.toml) into a second venv,
# .venv-min/, and run the fast tests there (plain pytest: not slow, not browser), so the bounds stay true.
#
#   bash scripts/test_min_versions.sh            # what CI (.ci/run) runs after scripts/test.sh
#   bash scripts/test_min_versions.sh -k report  # extra arguments go to pytest
#
# When you raise a lower bound in pyproject.toml, raise the pin in constraints/minimum.txt with it (this
# script checks that the two agree). Assumes the Debian packages of scripts/test.sh are already there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/setup.sh
source scripts/setup.sh
VENV=.venv-min
CONSTRAINTS=constraints/minimum.txt

ensure_python
# every pin of the constraints file must be a lower bound of pyproject.toml, and the other way round
"$PYTHON" - "$CONSTRAINTS" <<'PY'
import re, sys, tomllib
pins = dict(re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", l.split("#")[0].strip()).groups()
            for l in open(sys.argv[1]) if l.split("#")[0].strip())
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"] + project["optional-dependencies"]["dask"]  # the dask extra is pinned too
bounds = dict(re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[a-z,]+\])?>=([^,;\s]+)", d.split(";")[0].strip()).groups()
              for d in deps)
if pins != bounds:
    sys.exit(f"ERROR: {sys.argv[1]} {pins} != lower bounds of pyproject.toml {bounds}")
PY
export PIP_CONSTRAINT="$PWD/$CONSTRAINTS"   # = pip install -c constraints/minimum.txt -e ".[test]"
install_project ".[test]"
"$VENV/bin/python" -m pip list 2>/dev/null | grep -iE "^(numpy|pandas|scikit-learn|streamlit|plotly|pyarrow|kaleido|fpdf2|dask|distributed) " >&2

# ---- tests ----------------------------------------------------------------------------------------
log "setup done in ${SECONDS} s; pytest (fast tier) against the minimum versions"
rc=0
"$VENV/bin/python" -m pytest -q -ra $(test_workers) "$@" || rc=$?
log "minimum versions: finished in ${SECONDS} s (pytest exit code $rc)"
if [ "$rc" -eq 5 ]; then
    log "ERROR: pytest collected no tests"
    exit 1
fi
exit "$rc"

#!/usr/bin/env bash
# The documentation site: installs the `docs` extra into .venv, checks that the CLI reference page is current
# (docs/gen_cli_reference.py --check), then `mkdocs build --strict` into site/ (any warning, such as a broken
# link or a docstring mkdocstrings cannot parse, fails the build). CI (.ci/run) runs this.
#
#   bash scripts/docs.sh            # then open site/index.html
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/setup.sh
source scripts/setup.sh

ensure_python
install_project ".[docs]"
export NO_MKDOCS_2_WARNING=1  # mkdocs-material's banner about its successor
rc=0
log "CLI reference up to date"
"$VENV/bin/python" docs/gen_cli_reference.py --check || rc=1
log "mkdocs build --strict"
"$VENV/bin/mkdocs" build --strict --site-dir site || rc=1
log "docs finished in ${SECONDS} s (exit code $rc)"
exit "$rc"

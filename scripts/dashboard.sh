#!/usr/bin/env bash
# Set up everything on a fresh Debian machine and start the mmc-audit dashboard on a bundled demo
# data set (http://127.0.0.1:8501 unless told otherwise).
#
#   bash scripts/dashboard.sh            # extra arguments go to `mmc dashboard` (see `mmc dashboard --help`)
#
# Steps: apt-get install chromium when it is missing (needed at run time only by the PDF export;
# needs root or password-less sudo) and fonts-droid-fallback, fonts-nanum, fonts-symbola (Chinese, Japanese, Korean and symbols in the PDF),
# python3 -m venv .venv, pip install -e ., then exec .venv/bin/mmc dashboard "$@".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/setup.sh
source scripts/setup.sh

ensure_python
if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then
    apt_install chromium || log "WARNING: could not install chromium: the PDF export will not work"
fi
apt_install fonts-droid-fallback fonts-nanum fonts-symbola || log "WARNING: could not install the fallback fonts: CJK, Korean and symbols in the PDF are written as codes"
install_project "."

log "starting the dashboard (Ctrl-C stops it)"
exec "$VENV/bin/mmc" dashboard "$@"

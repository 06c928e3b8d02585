#!/usr/bin/env bash
# Set up everything on a fresh Debian machine and start the mmc-audit dashboard on a bundled demo
# data set (http://127.0.0.1:8501 unless told otherwise).
#
#   bash scripts/dashboard.sh            # extra arguments go to `mmc dashboard` (see `mmc dashboard --help`)
#
# Steps: apt-get install chromium when it is missing (needed at run time only by the PDF export;
# needs root or password-less sudo), python3 -m venv .venv, pip install -e ., then
# exec .venv/bin/mmc dashboard "$@".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '==> %s\n' "$*" >&2; }

# ---- system packages ------------------------------------------------------------------------------
apt_install() {  # apt_install PKG... : install the packages that are missing, if we are allowed to
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            log "WARNING: not root and no password-less sudo: cannot install ${missing[*]}"
            return 0
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        log "WARNING: apt-get not found: install ${missing[*]} yourself"
        return 0
    fi
    log "apt-get install ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

python_ok() { "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

if ! python_ok "$PYTHON"; then
    apt_install python3 python3-venv
    python_ok "$PYTHON" || { log "ERROR: need Python >= 3.11 with venv (set PYTHON=...)"; exit 1; }
fi
if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then
    apt_install chromium || log "WARNING: could not install chromium: the PDF export will not work"
fi

# ---- virtual environment --------------------------------------------------------------------------
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    log "$VENV is broken; recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
log "pip install -e . (log: $VENV/pip-install.log)"
if ! "$VENV/bin/python" -m pip install -e "." >"$VENV/pip-install.log" 2>&1; then
    tail -n 40 "$VENV/pip-install.log" >&2
    log "ERROR: pip install failed"
    exit 1
fi

log "starting the dashboard (Ctrl-C stops it)"
exec "$VENV/bin/mmc" dashboard "$@"

#!/usr/bin/env bash
# Set up everything on a fresh Debian machine and run the WHOLE test suite (slow and browser tests too).
#
#   bash scripts/test.sh                 # what CI (.ci/run) and the README run
#   bash scripts/test.sh -k demo_data    # extra arguments go to pytest
#
# Steps: apt-get install chromium chromium-driver poppler-utils (only when missing; needs root or
# password-less sudo, otherwise the browser/PDF-rendering tests skip), python3 -m venv .venv,
# pip install -e ".[test]", pytest -m "slow or not slow" -q -ra. Exits non-zero when a test fails
# and also when pytest collects no test at all (its exit code 5).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
APT_PACKAGES=(chromium chromium-driver poppler-utils)
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
apt_install "${APT_PACKAGES[@]}"

# ---- virtual environment --------------------------------------------------------------------------
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    log "$VENV is broken; recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
log "pip install -e .[test] (log: $VENV/pip-install.log)"
if ! "$VENV/bin/python" -m pip install -e ".[test]" >"$VENV/pip-install.log" 2>&1; then
    tail -n 40 "$VENV/pip-install.log" >&2
    log "ERROR: pip install failed"
    exit 1
fi

# ---- tests ----------------------------------------------------------------------------------------
log "setup done in ${SECONDS} s; pytest (all markers)"
rc=0
"$VENV/bin/python" -m pytest -m "slow or not slow" -q -ra "$@" || rc=$?
log "finished in ${SECONDS} s (pytest exit code $rc)"
if [ "$rc" -eq 5 ]; then
    log "ERROR: pytest collected no tests"
    exit 1
fi
exit "$rc"

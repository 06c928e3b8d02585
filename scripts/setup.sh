# Shared by scripts/test.sh and scripts/dashboard.sh (sourced, not run): system packages and the venv.
PYTHON="${PYTHON:-python3}"
VENV=.venv
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '==> %s\n' "$*" >&2; }

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

ensure_python() {
    if ! python_ok "$PYTHON"; then
        apt_install python3 python3-venv
        python_ok "$PYTHON" || { log "ERROR: need Python >= 3.11 with venv (set PYTHON=...)"; exit 1; }
    fi
}

install_project() {  # install_project SPEC : create .venv if needed and pip install -e SPEC into it
    if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
        log "$VENV is broken; recreating it"
        rm -rf "$VENV"
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating $VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    log "pip install -e $1 (log: $VENV/pip-install.log)"
    if ! "$VENV/bin/python" -m pip install -e "$1" >"$VENV/pip-install.log" 2>&1; then
        tail -n 40 "$VENV/pip-install.log" >&2
        log "ERROR: pip install failed"
        exit 1
    fi
}

test_workers() {  # pytest-xdist options: one worker per core, at most 4 (MMC_TEST_WORKERS overrides; 0 = none)
    local n="${MMC_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}"
    [ "$n" -gt 4 ] && [ -z "${MMC_TEST_WORKERS:-}" ] && n=4
    if [ "$n" -gt 1 ]; then echo "-n $n --dist loadfile"; fi
}

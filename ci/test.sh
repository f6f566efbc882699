#!/usr/bin/env bash
# The test command: bash ci/test.sh [tox run args]
#   bash ci/test.sh                 # default envs: lint, runtime, core, integration, torch, tf, paddle
#   bash ci/test.sh -e core         # one env
#   bash ci/test.sh -e tf -- -k tf  # args after -- go to pytest
# Bootstraps tox + tox-uv into a venv under ${XDG_CACHE_HOME:-$HOME/.cache}/disc-ci/bootstrap
# (reused across runs) from python3.11 (or python3), then runs tox; tox's exit code is ours.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TOOLS=(tox==4.67.15 tox-uv==1.37.1 uv==0.13.9)
boot="${XDG_CACHE_HOME:-$HOME/.cache}/disc-ci/bootstrap"
stamp="$boot/.disc-ci-tools"

py=""
for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then py="$candidate"; break; fi
done
if [ -z "$py" ]; then
    echo "ci/test.sh: no python3.11 or python3 on PATH" >&2
    exit 2
fi

if [ ! -x "$boot/bin/tox" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${TOOLS[*]}" ]; then
    echo "ci/test.sh: bootstrapping ${TOOLS[*]} into $boot"
    rm -rf "$boot"
    mkdir -p "$(dirname "$boot")"
    log="$(dirname "$boot")/bootstrap.log"
    # Debian/Ubuntu ship venv without ensurepip unless python3.X-venv is installed: fall back
    # to a pip-less venv filled by the system pip (pip >= 22.3 has --python).
    if "$py" -m venv "$boot" >"$log" 2>&1; then
        installer=("$boot/bin/python" -m pip)
    elif "$py" -m venv --without-pip "$boot" >>"$log" 2>&1 && "$py" -m pip --version >/dev/null 2>&1; then
        installer=("$py" -m pip --python "$boot/bin/python")
    else
        cat "$log" >&2
        echo "ci/test.sh: cannot create a venv with $py; install its venv module (python3.11-venv)" >&2
        exit 2
    fi
    if ! "${installer[@]}" install --disable-pip-version-check "${TOOLS[@]}" >>"$log" 2>&1; then
        cat "$log" >&2
        echo "ci/test.sh: installing ${TOOLS[*]} failed (log above)" >&2
        rm -rf "$boot"
        exit 2
    fi
    echo "${TOOLS[*]}" >"$stamp"
fi

# CI runs the HTML coverage report in a real headless browser (disc-core's
# tests/report/test_report_browser.py fails there without one; elsewhere it skips). Install
# Debian's chromium when CI is set, the core env is selected (explicitly or by default) and
# the browser is missing.
wants_core() {
    local envs="" next=0 arg
    for arg in "$@"; do
        if [ "$next" = 1 ]; then envs+=",$arg"; next=0; continue; fi
        case "$arg" in
            --) break ;;
            -e|--env) next=1 ;;
            --env=*) envs+=",${arg#--env=}" ;;
            -e*) envs+=",${arg#-e}" ;;
        esac
    done
    [ -z "$envs" ] || [[ "$envs," == *",core,"* || "$envs," == *",ALL,"* ]]
}
ci_set() { case "${CI:-}" in ""|0|false|False|FALSE|no) return 1 ;; esac; }
if ci_set && [ ! -x /usr/bin/chromium ] && wants_core "$@"; then
    echo "ci/test.sh: CI is set and /usr/bin/chromium is missing: installing Debian's chromium"
    as_root=(env DEBIAN_FRONTEND=noninteractive)
    [ "$(id -u)" = 0 ] || as_root=(sudo -n "${as_root[@]}")
    log="$(dirname "$boot")/chromium-install.log"
    started=$SECONDS
    if { "${as_root[@]}" apt-get update -qq && \
         "${as_root[@]}" apt-get install -y -qq chromium; } >"$log" 2>&1; then
        echo "ci/test.sh: installed chromium in $((SECONDS - started)) s"
    else
        tail -n 20 "$log" >&2
        echo "ci/test.sh: could not install chromium (needs root, or sudo without a password," \
             "and apt); the HTML report browser test will fail. Install it with:" \
             "apt-get install chromium" >&2
    fi
fi

export UV_PYTHON_DOWNLOADS=never
exec "$boot/bin/tox" run "$@"

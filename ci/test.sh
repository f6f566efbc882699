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

export UV_PYTHON_DOWNLOADS=never
exec "$boot/bin/tox" run "$@"

#!/usr/bin/env bash
# The demo command: bash ci/demo.sh
# Creates (or reuses) .venv at the repository root with pip, installs torch 2.13.0 (the CPU
# build) and disc-runtime, disc-core and disc-torch editable (again only when their
# pyproject.toml changed), then trains a small GPT with and without DISC
# (examples/torch_transformer_train.py; arguments are passed through, e.g. --quick).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

py=""
for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then py="$candidate"; break; fi
done
if [ -z "$py" ]; then
    echo "ci/demo.sh: no python3.11 or python3 on PATH" >&2
    exit 2
fi

if [ ! -x .venv/bin/python ]; then
    echo "ci/demo.sh: creating .venv with $py"
    "$py" -m venv .venv
fi

want="$(cat packages/disc-runtime/pyproject.toml packages/disc-core/pyproject.toml \
        packages/disc-torch/pyproject.toml | sha256sum)"
stamp=.venv/.disc-demo-installed
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "ci/demo.sh: installing torch 2.13.0, disc-runtime, disc-core and disc-torch into .venv"
    log=.venv/disc-demo-install.log
    if ! .venv/bin/python -m pip install --disable-pip-version-check \
            --cache-dir "${HOME}/.cache/pip" torch==2.13.0 \
            -e packages/disc-runtime -e packages/disc-core -e packages/disc-torch \
            >"$log" 2>&1; then
        cat "$log" >&2
        echo "ci/demo.sh: pip install failed (log above)" >&2
        exit 2
    fi
    echo "$want" >"$stamp"
fi

exec .venv/bin/python examples/torch_transformer_train.py "$@"

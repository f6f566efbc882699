#!/usr/bin/env bash
# The full framework version matrix (not part of the default run; see ci/matrix.md):
#   bash ci/matrix.sh                 # torch, tf and paddle, every version below
#   bash ci/matrix.sh tf              # one framework
#   DISC_MATRIX_TF="2.16.* 2.21.*" bash ci/matrix.sh tf   # chosen versions
# Each version runs that framework's tox env (through ci/test.sh) with the version overridden
# (DISC_TORCH_VERSION / DISC_TF_VERSION / DISC_PADDLE_VERSION) in its own tox work dir under
# .tox/matrix/, so the default envs in .tox/ are left alone and a rerun reuses each env.
# Exit status: 0 when every version passed, 1 otherwise (after running all of them).
set -euo pipefail
set -f  # versions like 2.16.* are not globs
cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -A VERSIONS=(
    [torch]="${DISC_MATRIX_TORCH:-2.13.0 2.14.1}"
    [tf]="${DISC_MATRIX_TF:-2.16.* 2.17.* 2.18.* 2.19.* 2.20.* 2.21.*}"
    [paddle]="${DISC_MATRIX_PADDLE:-3.0.0 3.1.1 3.2.2 3.3.1}"
)
declare -A VARIABLE=([torch]=DISC_TORCH_VERSION [tf]=DISC_TF_VERSION [paddle]=DISC_PADDLE_VERSION)

frameworks=("$@")
[ ${#frameworks[@]} -gt 0 ] || frameworks=(torch tf paddle)

results=()
status=0
for fw in "${frameworks[@]}"; do
    if [ -z "${VARIABLE[$fw]:-}" ]; then
        echo "ci/matrix.sh: unknown framework '$fw' (torch, tf or paddle)" >&2
        exit 2
    fi
    for version in ${VERSIONS[$fw]}; do
        workdir=".tox/matrix/$fw-${version//\*/x}"
        echo "=== $fw $version (tox work dir $workdir)"
        start=$SECONDS
        if env "${VARIABLE[$fw]}=$version" bash ci/test.sh --workdir "$workdir" -e "$fw"; then
            outcome=passed
        else
            outcome=FAILED
            status=1
        fi
        results+=("$fw $version: $outcome ($((SECONDS - start)) s)")
    done
done

echo "=== matrix summary"
printf '%s\n' "${results[@]}"
exit $status

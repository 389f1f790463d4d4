#!/usr/bin/env bash
# Make the lock files from the requirement files, with uv (https://docs.astral.sh/uv/):
#
#   pip install 'uv>=0.13,<0.14'        # once; a single binary, nothing else is installed
#   bash scripts/lock.sh                # keep the current pins where the ranges allow them
#   bash scripts/lock.sh --upgrade      # the newest versions inside the ranges
#   LOCK_MATCH_PYTHON=.venv/bin/python bash scripts/lock.sh   # pin what that venv has
#
# requirements.txt → requirements.lock (the runtime: the image, ./start_service.sh's set),
# requirements-dev.txt → requirements-dev.lock (run_tests.sh), deploy/requirements-gpu.txt →
# deploy/requirements-gpu.lock (the GPU image's extras, on top of requirements.lock),
# deploy/requirements-pip.txt → deploy/requirements-pip.lock (the pip the image installs with).
# Each lock is universal (markers for every platform and Python >= 3.11) and lists the hash of
# every file of each pinned version, so the same lock serves this machine's Python 3.11, the
# Debian bookworm image (3.11) and the CUDA image on Ubuntu 24.04 (3.12). Then
# scripts/check_lock.py checks the result against the ranges.
set -euo pipefail
cd "$(dirname "$0")/.."
UV="${UV:-uv}"
command -v "$UV" >/dev/null || { echo "error: uv not found" >&2; echo "hint: pip install 'uv>=0.13,<0.14' (or UV=/path/to/uv)" >&2; exit 2; }
common=(--universal --python-version 3.11 --generate-hashes --quiet
        --custom-compile-command "bash scripts/lock.sh" "$@")
match=()
if [[ -n "${LOCK_MATCH_PYTHON:-}" ]]; then
    freeze="$(mktemp)"; trap 'rm -f "$freeze"' EXIT
    "$LOCK_MATCH_PYTHON" -m pip freeze --all --exclude-editable | grep -v ' @ ' > "$freeze"
    match=(-c "$freeze")
fi
"$UV" pip compile requirements.txt "${common[@]}" ${match[@]+"${match[@]}"} -o requirements.lock
"$UV" pip compile requirements-dev.txt "${common[@]}" ${match[@]+"${match[@]}"} -o requirements-dev.lock
"$UV" pip compile deploy/requirements-gpu.txt -c requirements.lock "${common[@]}" \
    -o deploy/requirements-gpu.lock
"$UV" pip compile deploy/requirements-pip.txt "${common[@]}" -o deploy/requirements-pip.lock
PY="${PYTHON:-python3}"; if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; fi
"$PY" scripts/check_lock.py

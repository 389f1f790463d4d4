#!/usr/bin/env bash
# Install Chord's test dependencies into .venv and run the test suite (CPU only).
# Usage: bash run_tests.sh [pytest args…]      no arguments: the default suite (not slow);
#        bash run_tests.sh -m slow             the slow tier; bash run_tests.sh -m "" everything
# The browser test needs Chromium from the system's packages (Debian/Ubuntu:
# `apt-get install chromium`); without it that test is skipped with a reason.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
# The locked set (requirements-dev.lock: exact versions, every file's hash), so every machine
# tests the same packages; scripts/check_lock.py then fails fast when requirements*.txt were
# edited without a new lock (bash scripts/lock.sh; tests/unit/test_lockfiles.py checks it too).
stamp=.venv/.chord-dev-installed
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ] || [ requirements-dev.lock -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-dev.lock
    .venv/bin/python scripts/check_lock.py --quiet
    touch "$stamp"
fi
if [ "$#" -eq 0 ]; then
    # the default suite: everything but the tests marked slow (browser, Ray, faults, load);
    # `bash run_tests.sh -m slow` runs those, and .ci/run runs both
    set -- -m "not slow"
fi
# the type checker first (mypy.ini: runtime/, service/ and library/ under every --strict flag):
# a broken seam fails here
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Start the Chord web app (Streamlit). Run ./start_service.sh --help for options.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: ./start_service.sh [--host HOST] [--port PORT] [--model MODEL] [--no-install] [-- STREAMLIT_ARGS...]

Starts Chord's browser app (streamlit run app.py) from this folder.

  --host HOST     address to listen on (default: localhost, or $CHORD_HOST).
                  Use --host 0.0.0.0 to let other machines connect — Chord has no login,
                  so only do that on a trusted network.
  --port PORT     port (default: 8501, or $CHORD_PORT)
  --model MODEL   model to preselect: hub id, local folder or "test" (sets CHORD_MODEL)
  --no-install    do not create .venv or install requirements; use the current python
  -h, --help      show this help

Before starting, it creates .venv (python3 -m venv) if missing and installs requirements.txt
when that file changed since the last install. Anything after "--" goes to streamlit.

Environment: CHORD_MODEL, CHORD_CACHE_DIR, CHORD_DATA_DIR, CHORD_DEVICE, CHORD_MAX_MEMORY,
CHORD_ALLOW_OFFLOAD, CHORD_DTYPE (see README), CHORD_HOST, CHORD_PORT.

Examples:
  ./start_service.sh                         # http://localhost:8501
  CHORD_MODEL=test ./start_service.sh        # try it without model weights
  ./start_service.sh --host 0.0.0.0 --port 8600
EOF
}

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOST="${CHORD_HOST:-localhost}"
PORT="${CHORD_PORT:-8501}"
INSTALL=1
EXTRA=()

while [[ $# -gt 0 ]]; do
    case "$1" in
        --host) HOST="${2:?--host needs a value}"; shift 2 ;;
        --host=*) HOST="${1#*=}"; shift ;;
        --port) PORT="${2:?--port needs a value}"; shift 2 ;;
        --port=*) PORT="${1#*=}"; shift ;;
        --model) export CHORD_MODEL="${2:?--model needs a value}"; shift 2 ;;
        --model=*) export CHORD_MODEL="${1#*=}"; shift ;;
        --no-install) INSTALL=0; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "error: unknown option: $1" >&2; echo "hint: see ./start_service.sh --help" >&2; exit 2 ;;
    esac
done

if ! [[ "$PORT" =~ ^[0-9]+$ ]] || (( PORT < 1 || PORT > 65535 )); then
    echo "error: port must be a number from 1 to 65535, got '$PORT'" >&2
    exit 2
fi

cd "$HERE"
PYTHON=python3
if (( INSTALL )); then
    if [[ ! -x .venv/bin/python ]]; then
        echo "creating virtual environment in .venv" >&2
        python3 -m venv .venv
    fi
    PYTHON=.venv/bin/python
    STAMP=.venv/.chord-requirements.sha256
    WANT="$(sha256sum requirements.txt | cut -d' ' -f1)"
    if [[ ! -f "$STAMP" ]] || [[ "$(cat "$STAMP")" != "$WANT" ]]; then
        echo "installing requirements.txt into .venv (first run can take a few minutes)" >&2
        "$PYTHON" -m pip install --upgrade pip >/dev/null
        "$PYTHON" -m pip install -r requirements.txt
        echo "$WANT" > "$STAMP"
    fi
elif [[ -x .venv/bin/python ]]; then
    PYTHON=.venv/bin/python
fi

echo "Chord: http://${HOST}:${PORT}  (Ctrl+C stops it)" >&2
exec "$PYTHON" -m streamlit run app.py \
    --server.address "$HOST" --server.port "$PORT" --server.headless true \
    --browser.gatherUsageStats false ${EXTRA[@]+"${EXTRA[@]}"}

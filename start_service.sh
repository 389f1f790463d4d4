#!/usr/bin/env bash
# Start the Chord web app (Streamlit). Run ./start_service.sh --help for options.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: ./start_service.sh [--host HOST] [--port PORT] [--model MODEL] [--gpus LIST] [--api-port PORT [--api-gpus LIST]] [--no-install] [-- STREAMLIT_ARGS...]

Starts Chord's browser app (streamlit run app.py) from this folder.

  --host HOST     address to listen on (default: localhost, or $CHORD_HOST).
                  Use --host 0.0.0.0 to let other machines connect — Chord has no login,
                  so only do that on a trusted network.
  --port PORT     port (default: 8501, or $CHORD_PORT)
  --model MODEL   model to preselect: hub id, local folder or "test" (sets CHORD_MODEL)
  --gpus LIST     GPUs the app's workers use, e.g. 0,1 (sets CHORD_GPUS). Numbers are
                  nvidia-smi's, or positions in CUDA_VISIBLE_DEVICES when that is set
  --api-port PORT also start the HTTP service (python -m chord_core serve) on HOST:PORT
                  beside the app. It plans and loads its OWN workers (two processes cannot
                  share one set); both write the same job store, so API jobs show in History.
                  A HOST other than localhost needs CHORD_API_KEY (or CHORD_API_NO_AUTH=1).
                  Supervised: when either process exits, the other is stopped and the
                  script exits non-zero (a container's restart policy starts both again)
  --api-gpus LIST GPUs for the service's workers (default: the same as the app's: each
                  process then holds its own copy of the model on them)
  --cpu-torch     install the CPU build of PyTorch (about 200 MB) before requirements.txt,
                  instead of the default CUDA build (several GB): for machines without an
                  NVIDIA GPU. Same as CHORD_CPU_TORCH=1
  --no-install    do not create .venv or install requirements; use the current python
  --dry-run       print the settings and the command it would run, then exit
  -h, --help      show this help

Before starting, it creates .venv (python3 -m venv) if missing and installs requirements.txt
when that file changed since the last install. Anything after "--" goes to streamlit.

Environment: CHORD_MODEL, CHORD_CACHE_DIR, CHORD_DATA_DIR, CHORD_DEVICE, CHORD_MAX_MEMORY,
CHORD_ALLOW_OFFLOAD, CHORD_DTYPE, CHORD_GPUS, CHORD_STRATEGY (see README), CHORD_HOST,
CHORD_PORT, CHORD_MEDIA_ROOTS (folders a typed path may read), CHORD_ALLOWED_HOSTS (more
host names the browser may use, e.g. this machine's address with --host 0.0.0.0).
OMP_NUM_THREADS defaults to min(8, cores) and CUDA_DEVICE_ORDER to PCI_BUS_ID
(GPU numbers as nvidia-smi shows them) when they are not set.

Examples:
  ./start_service.sh                         # http://localhost:8501
  CHORD_MODEL=test ./start_service.sh        # try it without model weights
  ./start_service.sh --host 0.0.0.0 --port 8600
  ./start_service.sh --gpus 1                # only the second GPU
  ./start_service.sh --gpus 0 --api-port 8080 --api-gpus 1   # app on GPU 0, API on GPU 1
EOF
}

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOST="${CHORD_HOST:-localhost}"
PORT="${CHORD_PORT:-8501}"
INSTALL=1
DRY=0
CPU_TORCH="${CHORD_CPU_TORCH:-0}"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
EXTRA=()
API_PORT=""
API_GPUS=""

while [[ $# -gt 0 ]]; do
    case "$1" in
        --host) HOST="${2:?--host needs a value}"; shift 2 ;;
        --host=*) HOST="${1#*=}"; shift ;;
        --port) PORT="${2:?--port needs a value}"; shift 2 ;;
        --port=*) PORT="${1#*=}"; shift ;;
        --model) export CHORD_MODEL="${2:?--model needs a value}"; shift 2 ;;
        --model=*) export CHORD_MODEL="${1#*=}"; shift ;;
        --gpus) export CHORD_GPUS="${2:?--gpus needs a value}"; shift 2 ;;
        --gpus=*) export CHORD_GPUS="${1#*=}"; shift ;;
        --api-port) API_PORT="${2:?--api-port needs a value}"; shift 2 ;;
        --api-port=*) API_PORT="${1#*=}"; shift ;;
        --api-gpus) API_GPUS="${2:?--api-gpus needs a value}"; shift 2 ;;
        --api-gpus=*) API_GPUS="${1#*=}"; shift ;;
        --cpu-torch) CPU_TORCH=1; shift ;;
        --no-install) INSTALL=0; shift ;;
        --dry-run) DRY=1; INSTALL=0; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "error: unknown option: $1" >&2; echo "hint: see ./start_service.sh --help" >&2; exit 2 ;;
    esac
done

if ! [[ "$PORT" =~ ^[0-9]+$ ]] || (( PORT < 1 || PORT > 65535 )); then
    echo "error: port must be a number from 1 to 65535, got '$PORT'" >&2
    exit 2
fi

if [[ -n "${CHORD_GPUS:-}" ]] && ! [[ "$CHORD_GPUS" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
    echo "error: --gpus must list GPU numbers like 0,1, got '$CHORD_GPUS'" >&2
    echo "hint: see nvidia-smi for the numbers; e.g. ./start_service.sh --gpus 0,1" >&2
    exit 2
fi
if [[ -n "$API_PORT" ]] && { ! [[ "$API_PORT" =~ ^[0-9]+$ ]] || (( API_PORT < 1 || API_PORT > 65535 )) || [[ "$API_PORT" == "$PORT" ]]; }; then
    echo "error: --api-port must be a number from 1 to 65535 other than --port, got '$API_PORT'" >&2
    echo "hint: e.g. ./start_service.sh --api-port 8080" >&2
    exit 2
fi
if [[ -n "$API_GPUS" ]] && ! [[ "$API_GPUS" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
    echo "error: --api-gpus must list GPU numbers like 0,1, got '$API_GPUS'" >&2
    exit 2
fi
if [[ -z "${OMP_NUM_THREADS:-}" ]]; then
    cores="$(nproc 2>/dev/null || echo 1)"
    export OMP_NUM_THREADS=$(( cores < 8 ? cores : 8 ))
fi
export CUDA_DEVICE_ORDER="${CUDA_DEVICE_ORDER:-PCI_BUS_ID}"

cd "$HERE"
PYTHON=python3
if (( INSTALL )); then
    if [[ ! -x .venv/bin/python ]]; then
        echo "creating virtual environment in .venv" >&2
        if ! python3 -m venv .venv; then
            rm -rf .venv
            echo "error: python3 cannot make a virtual environment here" >&2
            echo "hint: on Debian/Ubuntu install it first: sudo apt-get install python3-venv" >&2
            exit 1
        fi
    fi
    PYTHON=.venv/bin/python
    # the CPU build first (once): pip then keeps it, since it satisfies requirements.txt
    if [[ "$CPU_TORCH" == 1 ]] && ! "$PYTHON" -c \
            "import sys, torch; sys.exit('+cpu' not in torch.__version__)" 2>/dev/null; then
        echo "installing the CPU build of PyTorch ($TORCH_CPU_INDEX)" >&2
        "$PYTHON" -m pip install --upgrade pip >/dev/null
        "$PYTHON" -m pip install --force-reinstall torch torchvision --index-url "$TORCH_CPU_INDEX"
    fi
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

# DNS-rebinding guard: the app's WebSocket accepts only these Host names (and same-origin
# Origins): localhost, --host (the machine's name for 0.0.0.0), and CHORD_ALLOWED_HOSTS
# (comma-separated; "*" = any).
ALLOWED=(localhost 127.0.0.1 ::1)
case "$HOST" in
    0.0.0.0|::) ALLOWED+=("$(hostname)") ;;
    *) ALLOWED+=("$HOST") ;;
esac
IFS=',' read -r -a MORE_HOSTS <<< "${CHORD_ALLOWED_HOSTS:-}"
for h in ${MORE_HOSTS[@]+"${MORE_HOSTS[@]}"}; do
    h="${h// /}"
    if [[ -n "$h" ]]; then ALLOWED+=("$h"); fi
done
HOST_ARGS=()
for h in "${ALLOWED[@]}"; do HOST_ARGS+=(--server.allowedHosts "$h"); done

CMD=("$PYTHON" -m streamlit run app.py
     --server.address "$HOST" --server.port "$PORT" --server.headless true
     --browser.gatherUsageStats false "${HOST_ARGS[@]}" ${EXTRA[@]+"${EXTRA[@]}"})
API_CMD=()
if [[ -n "$API_PORT" ]]; then
    API_CMD=("$PYTHON" -m chord_core serve --host "$HOST" --port "$API_PORT")
    GPUS_FOR_API="${API_GPUS:-${CHORD_GPUS:-}}"
    if [[ -n "$GPUS_FOR_API" ]]; then API_CMD+=(--gpus "$GPUS_FOR_API"); fi
fi
if (( DRY )); then
    env | grep -E '^(CHORD_|OMP_NUM_THREADS=|CUDA_DEVICE_ORDER=|CUDA_VISIBLE_DEVICES=)' | sort
    echo "${CMD[*]}"
    if (( ${#API_CMD[@]} )); then echo "${API_CMD[*]}"; fi
    exit 0
fi
echo "Chord: http://${HOST}:${PORT}  (Ctrl+C stops it)" >&2
if (( ${#API_CMD[@]} == 0 )); then
    exec "${CMD[@]}"
fi
# The service beside the app, supervised: both start at once, and when either exits — for any
# reason, at any time (a public --host without CHORD_API_KEY, a crash, a kill) — the other is
# stopped and the script exits non-zero, so Docker/compose/Kubernetes restart the whole unit
# instead of keeping a container that serves half of Chord. bash's `wait -n` returns as soon as
# the first child exits (no polling, no fixed start-up delay).
API_PID=""
APP_PID=""
stop_both() {  # TERM to what still runs, KILL after 10 s (Docker's own stop grace)
    local pid left=0
    kill -TERM $APP_PID $API_PID 2>/dev/null || true
    while (( left < 100 )) && { kill -0 "$APP_PID" 2>/dev/null || kill -0 "$API_PID" 2>/dev/null; }; do
        sleep 0.1; left=$(( left + 1 ))
    done
    for pid in "$APP_PID" "$API_PID"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop_both EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"${API_CMD[@]}" &
API_PID=$!
"${CMD[@]}" &
APP_PID=$!
echo "Chord service: http://${HOST}:${API_PORT}  (GET /health)" >&2
set +e
wait -n   # bash >= 4.3: the first of the two children to exit
status=$?
set -e
if ! kill -0 "$API_PID" 2>/dev/null; then who="the HTTP service (chord_core serve)"; else who="the app (streamlit)"; fi
echo "error: $who exited with status $status; stopping the other and exiting" >&2
echo "hint: its log is above; a container restart policy (or Kubernetes) starts both again" >&2
exit $(( status == 0 ? 1 : status ))

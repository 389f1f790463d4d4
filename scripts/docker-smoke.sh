#!/usr/bin/env bash
# Build Chord's image with podman on this machine and check that it serves.
#
#   sudo bash scripts/docker-smoke.sh          # about 10 minutes the first time
#
# Not part of run_tests.sh or CI: it builds a multi-GB image. Needs podman, buildah, runc,
# debootstrap, docker-compose and catatonit (Debian: apt-get install podman buildah runc
# debootstrap docker-compose catatonit) and root. No registry is needed: the base is a Debian bookworm made here with
# debootstrap and imported as localhost/debian-bookworm, passed as --build-arg BASE with
# bookworm's apt pins. Python packages: the same requirements.lock as the GPU image (hashes
# checked); a local wheel folder (SMOKE_WHEELS, default /opt/pypi-more/files) is mounted as a
# --find-links folder so torch is not downloaded again (same files, same hashes).
#
# Steps, each under `timeout` (a hung step fails instead of waiting for a person): base image →
# build → image size and layers → settings (--dry-run inside the image) → the API refuses
# 0.0.0.0 without a key (the container exits non-zero by itself) → run with CHORD_MODEL=test and
# the API (--api-port), published on 127.0.0.1 → /_stcore/health says "ok" → GET / is the
# Streamlit page → the WebSocket takes localhost and CHORD_ALLOWED_HOSTS, refuses another Host
# → the API's /health is 200 and its routes need the key → the image's HEALTHCHECK passes → the
# app runs as a non-root user → the API is killed inside the container: the container exits
# non-zero within seconds (supervision) → compose.yaml's two services (SMOKE_COMPOSE=0 skips).
# Exit 0 when every step passed, with each step's time; the first failing step prints why (and
# the container's log) and exits 1.
#
# Settings (environment): SMOKE_IMAGE (localhost/chord:smoke), SMOKE_BASE
# (localhost/debian-bookworm), SMOKE_WORK (/tmp/chord-smoke: rootfs, logs), SMOKE_WHEELS,
# SMOKE_PORT (18501), SMOKE_API_PORT (18080), SMOKE_TIMEOUT_S (300: waiting for a URL or a job),
# SMOKE_STEP_TIMEOUT_S (180: each podman/compose command), SMOKE_BUILD_TIMEOUT_S (2400),
# SMOKE_REBUILD_BASE=1 (debootstrap again), SMOKE_SKIP_BUILD=1 (test an existing image),
# SMOKE_NETWORK=host (no bridged network), SMOKE_COMPOSE=0 (skip compose.yaml's two services,
# run through docker-compose and podman's Docker API without the GPU reservation: a job sent to
# the API must land in the store the app reads).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${SMOKE_IMAGE:-localhost/chord:smoke}"
BASE="${SMOKE_BASE:-localhost/debian-bookworm}"
WORK="${SMOKE_WORK:-/tmp/chord-smoke}"
WHEELS="${SMOKE_WHEELS:-/opt/pypi-more/files}"
PORT="${SMOKE_PORT:-18501}"
API_PORT="${SMOKE_API_PORT:-18080}"
TIMEOUT_S="${SMOKE_TIMEOUT_S:-300}"
STEP_S="${SMOKE_STEP_TIMEOUT_S:-180}"
BUILD_S="${SMOKE_BUILD_TIMEOUT_S:-2400}"
# Debian bookworm's packages (its main archive) for the image's apt step
BOOKWORM_PINS="python3-venv=3.11.2-1+b1 python3.11-venv=3.11.2-6+deb12u8 ca-certificates=20230311+deb12u1"
NAME="chord-smoke-$$"
KEY="smoke-$$-$RANDOM"
ALIAS="chord-smoke.test"   # a name the browser might use: CHORD_ALLOWED_HOSTS
# runc and lowered limits: crun and the default ulimits fail on these machines.
PODMAN=(timeout -k 10 "$STEP_S" podman --runtime runc)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096)

# podman without systemd cannot schedule the periodic health check and says so on every run;
# the check itself is run by hand below (podman healthcheck run).
pm() { "${PODMAN[@]}" "$@" 2> >(grep -v 'get systemd connection' >&2); }
TIMES=()
STEP_NAME="" STEP_T0=$SECONDS
step() {  # start a step; the previous one's time goes into the summary
    if [[ -n "$STEP_NAME" ]]; then TIMES+=("$(printf '%5d s  %s' $(( SECONDS - STEP_T0 )) "$STEP_NAME")"); fi
    STEP_NAME="$*"; STEP_T0=$SECONDS
    printf '\n==> %s\n' "$*"
}
fail() {
    printf 'FAILED: %s\n' "$*" >&2
    if "${PODMAN[@]}" container exists "$NAME" 2>/dev/null; then
        echo "--- last lines of the container's log ---" >&2
        "${PODMAN[@]}" logs --tail 40 "$NAME" >&2 || true
    fi
    exit 1
}
cleanup() {
    "${PODMAN[@]}" rm -f -v -t 5 "$NAME" >/dev/null 2>&1 || true
    if [[ -n "${COMPOSE_FILE_CPU:-}" ]]; then
        DOCKER_HOST="$SOCK" docker-compose -p chordsmoke -f "$COMPOSE_FILE_CPU" down -v >/dev/null 2>&1 || true
    fi
    if [[ -n "${SERVICE_PID:-}" ]]; then kill "$SERVICE_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

need_tools() {
    step "tools"
    local t missing=()
    for t in podman debootstrap curl timeout; do command -v "$t" >/dev/null || missing+=("$t"); done
    if [[ "${SMOKE_COMPOSE:-1}" == 1 ]]; then
        command -v docker-compose >/dev/null || missing+=(docker-compose)
        # compose.yaml's `init: true` runs podman's init binary
        [[ -x /usr/libexec/podman/catatonit ]] || missing+=(catatonit)
    fi
    if (( ${#missing[@]} )); then
        fail "missing: ${missing[*]} (apt-get install podman buildah runc debootstrap curl docker-compose catatonit; SMOKE_COMPOSE=0 skips compose)"
    fi
    podman --version
}

make_base() {
    step "base image $BASE"
    if [[ "${SMOKE_REBUILD_BASE:-0}" != 1 ]] && podman image exists "$BASE"; then
        echo "present (SMOKE_REBUILD_BASE=1 makes it again)"; return
    fi
    rm -rf "$WORK/rootfs"; mkdir -p "$WORK"
    local t0=$SECONDS
    timeout 1200 debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian \
        > "$WORK/debootstrap.log" 2>&1 || fail "debootstrap (log: $WORK/debootstrap.log)"
    tar -C "$WORK/rootfs" -c . | timeout 600 podman import - "$BASE" >/dev/null 2>>"$WORK/debootstrap.log" \
        || fail "podman import (log: $WORK/debootstrap.log)"
    echo "debootstrap + import: $(( SECONDS - t0 )) s"
}

build_image() {
    step "build $IMAGE"
    local args=(--build-arg "BASE=$BASE" --build-arg "APT_SNAPSHOT=" --build-arg "APT_PINS=$BOOKWORM_PINS")
    if [[ -d "$WHEELS" ]]; then args+=(-v "$WHEELS:/wheels:ro" --build-arg WHEELS_DIR=/wheels); fi
    local ca="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
    if [[ -f "$ca" ]]; then args+=(-v "$ca:/run/host-ca.crt:ro" --build-arg PIP_CA_FILE=/run/host-ca.crt); fi
    echo "podman build --format docker --network host ${args[*]} -t $IMAGE ."
    local t0=$SECONDS
    timeout -k 30 "$BUILD_S" podman build --runtime runc --format docker --network host "${LIMITS[@]}" "${args[@]}" \
        -t "$IMAGE" "$HERE" > "$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log" >&2; fail "build (log: $WORK/build.log)"; }
    echo "build: $(( SECONDS - t0 )) s (log: $WORK/build.log)"
    grep -E '^torch [0-9]' "$WORK/build.log" || true
}

report_size() {
    step "image size"
    local bytes
    bytes="$(podman image inspect --format '{{.Size}}' "$IMAGE")" || fail "no image $IMAGE"
    echo "$IMAGE: $(( bytes / 1000000 )) MB ($bytes bytes); its layers:"
    "${PODMAN[@]}" history --format '{{.Size}}\t{{.CreatedBy}}' "$IMAGE" | cut -c1-150
    pm run --rm --network none "${LIMITS[@]}" --entrypoint sh "$IMAGE" -c \
        'python --version; grep -iE "^(pip|torch|torchvision|pillow|streamlit|transformers|pynvvideocodec)==" /opt/venv/chord-packages.txt' \
        || fail "cannot run python in the image"
}

check_settings() {
    step "settings: start_service.sh --dry-run inside the image"
    local out
    out="$(pm run --rm --network none "${LIMITS[@]}" "$IMAGE" --dry-run)" \
        || fail "--dry-run in the image"
    echo "$out"
    grep -q -- "--server.address 0.0.0.0" <<<"$out" \
        || fail "the image's app does not listen on 0.0.0.0 (CHORD_HOST)"
    grep -q "^CHORD_DATA_DIR=/data$" <<<"$out" || fail "CHORD_DATA_DIR is not /data"
}

start_container() {
    step "run $NAME: CHORD_MODEL=test, app and API published on 127.0.0.1:$PORT, :$API_PORT"
    # As `docker run -p 127.0.0.1:…` does: the image's own CHORD_HOST=0.0.0.0 inside a bridged
    # network, published on this machine's loopback only. SMOKE_NETWORK=host instead shares
    # the host's interfaces; the app is then bound to 127.0.0.1.
    local net=(-p "127.0.0.1:$PORT:8501" -p "127.0.0.1:$API_PORT:8080") args=(--api-port 8080)
    if [[ "${SMOKE_NETWORK:-bridge}" == host ]]; then
        net=(--network host -e CHORD_HOST=127.0.0.1); args=(--port "$PORT" --api-port "$API_PORT")
    fi
    pm run -d --name "$NAME" "${net[@]}" "${LIMITS[@]}" -e CHORD_MODEL=test \
        -e CHORD_API_KEY="$KEY" -e CHORD_CPU_WORKERS=1 -e CHORD_ALLOWED_HOSTS="$ALIAS" \
        "$IMAGE" "${args[@]}" >/dev/null || fail "podman run"
}

check_api_needs_key() {
    step "API on 0.0.0.0 without CHORD_API_KEY: refused, the container exits non-zero by itself"
    local out rc=0 t0=$SECONDS
    out="$(pm run --rm --network none "${LIMITS[@]}" "$IMAGE" --api-port 8080 2>&1)" || rc=$?
    echo "$out" | grep -E '^(error|hint):' || true
    # 124/137: timeout stopped it (the container stayed up); 143: something else stopped it
    [[ $rc != 0 && $rc != 124 && $rc != 137 && $rc != 143 && "$out" == *"without an API key"* ]] \
        || fail "the container did not stop by itself on a refused API (exit $rc)"
    echo "exit $rc after $(( SECONDS - t0 )) s"
}

wait_for() {  # URL EXPECTED-BODY-SUBSTRING: poll until 200 and the body holds it
    local url="$1" want="$2" t0=$SECONDS body
    while (( SECONDS - t0 < TIMEOUT_S )); do
        "${PODMAN[@]}" container inspect -f '{{.State.Running}}' "$NAME" 2>/dev/null | grep -q true \
            || fail "the container stopped while waiting for $url"
        if body="$(curl -fsS --max-time 5 "$url" 2>/dev/null)" && [[ "$body" == *"$want"* ]]; then
            echo "$url → 200 \"${body:0:60}\" after $(( SECONDS - t0 )) s"; return 0
        fi
        sleep 2
    done
    fail "$url did not answer 200 with \"$want\" within $TIMEOUT_S s"
}

check_app() {
    step "app: /_stcore/health and the page"
    wait_for "http://127.0.0.1:$PORT/_stcore/health" "ok"
    local page; page="$(curl -fsS --max-time 10 "http://127.0.0.1:$PORT/")" || fail "GET / failed"
    [[ "$page" == *'<div id="root">'* && "$page" == *"<script"* ]] \
        || fail "GET / is not the Streamlit page: ${page:0:200}"
    echo "GET / → 200, Streamlit shell ($(wc -c <<<"$page") bytes)"
    local h code
    for h in "localhost:$PORT=101" "$ALIAS:8501=101" "rebind.example:8501=403"; do
        code="$(websocket "${h%=*}")"
        [[ "$code" == "${h#*=}" ]] || fail "WebSocket with Host ${h%=*}: $code, expected ${h#*=}"
        echo "WebSocket handshake, Host ${h%=*} → $code"
    done
}

websocket() {  # HOST: the status of a WebSocket handshake to the app sent with that Host
    curl -s -o /dev/null -m 3 -w '%{http_code}' -H "Host: $1" -H "Origin: http://$1" \
        -H "Connection: Upgrade" -H "Upgrade: websocket" -H "Sec-WebSocket-Version: 13" \
        -H "Sec-WebSocket-Key: Y2hvcmQtc21va2UtdGVzdA==" "http://127.0.0.1:$PORT/_stcore/stream" || true
}

check_api() {
    step "API: /health and the key"
    wait_for "http://127.0.0.1:$API_PORT/health" '"ready"'
    local code
    code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$API_PORT/v1/models")"
    [[ "$code" == 401 ]] || fail "GET /v1/models without the key answered $code, expected 401"
    code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 \
        -H "Authorization: Bearer $KEY" "http://127.0.0.1:$API_PORT/v1/models")"
    [[ "$code" == 200 ]] || fail "GET /v1/models with the key answered $code, expected 200"
    echo "/v1/models: 401 without the key, 200 with it"
}

check_container() {
    step "HEALTHCHECK and user"
    pm healthcheck run "$NAME" || fail "the image's HEALTHCHECK failed"
    "${PODMAN[@]}" exec "$NAME" python /app/scripts/container_health.py
    local uid; uid="$("${PODMAN[@]}" exec "$NAME" id -u)"
    [[ "$uid" != 0 ]] || fail "the app runs as root"
    echo "user: $("${PODMAN[@]}" exec "$NAME" id)"
}

kill_api() {
    step "kill the API inside the running container: the container exits non-zero by itself"
    local t0 code state
    pm exec "$NAME" python -c '
import os, signal
def cmd(p):
    try:
        with open(f"/proc/{p}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""
pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and b"chord_core\0serve" in cmd(p)]
assert pids, "no chord_core serve process in the container"
for p in pids:
    os.kill(p, signal.SIGKILL)
print("SIGKILL to the API, pid", *pids)' || fail "could not kill the API in $NAME"
    t0=$SECONDS
    code="$(pm wait "$NAME")" || fail "the container did not exit within $STEP_S s of the API's death"
    state="$("${PODMAN[@]}" container inspect -f '{{.State.Status}}' "$NAME")"
    [[ "$code" != 0 && "$state" == exited ]] || fail "after the API died: exit $code, state $state"
    echo "container $state with exit $code, $(( SECONDS - t0 )) s after the API was killed"
    "${PODMAN[@]}" logs --tail 3 "$NAME" 2>&1 | grep -E '^(error|hint):' || true
    pm rm -v "$NAME" >/dev/null || fail "remove $NAME"
}

check_compose() {
    step "compose.yaml through docker-compose and podman's Docker API (CPU: no GPU reservation)"
    command -v docker-compose >/dev/null || fail "SMOKE_COMPOSE=1 needs docker-compose (apt-get install docker-compose)"
    SOCK="unix://$WORK/podman.sock"; COMPOSE_FILE_CPU="$WORK/compose.cpu.yaml"
    podman --runtime runc system service --time=0 "$SOCK" > "$WORK/podman-service.log" 2>&1 &
    SERVICE_PID=$!
    # The same services, volumes, entry points and health checks; here: this image, the test
    # model, loopback ports, lower ulimits, and no nvidia device reservation (no GPU here).
    python3 - "$HERE/compose.yaml" "$COMPOSE_FILE_CPU" "$IMAGE" "$PORT" "$API_PORT" <<'PY' || fail "rewrite compose.yaml"
import sys, yaml
src, dst, image, port, api_port = sys.argv[1:]
doc = yaml.safe_load(open(src))
ports = {"app": f"127.0.0.1:{port}:8501", "api": f"127.0.0.1:{api_port}:8080"}
for name, svc in doc["services"].items():
    svc.pop("deploy"); svc.pop("build", None)
    svc.update(image=image, ports=[ports[name]],
               ulimits={"nofile": {"soft": 1024, "hard": 1024}, "nproc": {"soft": 4096, "hard": 4096}})
    svc["environment"].update(CHORD_MODEL="test", CHORD_CPU_WORKERS="1")
yaml.safe_dump(doc, open(dst, "w"), sort_keys=False)
PY
    local n=0   # podman's Docker API is up once its socket exists (30 s at most)
    until [[ -S "${SOCK#unix://}" ]]; do
        (( n++ < 60 )) || fail "podman system service did not open $SOCK (log: $WORK/podman-service.log)"
        sleep 0.5
    done
    DOCKER_HOST="$SOCK" CHORD_API_KEY="$KEY" timeout -k 10 "$STEP_S" docker-compose -p chordsmoke -f "$COMPOSE_FILE_CPU" up -d \
        || fail "docker-compose up"
    NAME=chordsmoke_app_1 wait_for "http://127.0.0.1:$PORT/_stcore/health" "ok"
    NAME=chordsmoke_api_1 wait_for "http://127.0.0.1:$API_PORT/health" '"ready"'
    local c; for c in chordsmoke_app_1 chordsmoke_api_1; do
        pm healthcheck run "$c" || fail "HEALTHCHECK of $c"; echo "$c: healthy"
    done
    local job
    job="$(curl -fsS -m 60 -H "Authorization: Bearer $KEY" -F task=describe \
        -F "file=@$(make_clip)" "http://127.0.0.1:$API_PORT/v1/jobs" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')" \
        || fail "POST /v1/jobs to the api service"
    NAME=chordsmoke_api_1 wait_for_job "$job"
    pm exec chordsmoke_app_1 python -c "import sqlite3,sys; c=sqlite3.connect('/data/chord.sqlite3'); \
sys.exit(0 if c.execute('select count(*) from results where job_id=?', ('$job',)).fetchone()[0] else 1)" \
        || fail "the app service's store lacks the API's job $job"
    echo "the API's job $job is in the store the app reads (shared chord-data volume)"
    local t0=$SECONDS
    DOCKER_HOST="$SOCK" CHORD_API_KEY="$KEY" timeout -k 10 "$STEP_S" docker-compose -p chordsmoke -f "$COMPOSE_FILE_CPU" down -v \
        >/dev/null 2>&1 || fail "docker-compose down"
    echo "docker-compose down (both services stopped, volumes removed): $(( SECONDS - t0 )) s"
    COMPOSE_FILE_CPU=""
}

make_clip() {  # a 2-second synthetic clip made in the image (PyAV), copied out
    pm run --rm --network none "${LIMITS[@]}" -v "$WORK:/out" --user 0 --entrypoint python "$IMAGE" \
        -c "from chord_core.testing.odd_files import make_timed_video as m; m('/out/clip.mp4', [0, 0.5, 1, 1.5, 2])" \
        || fail "making a test clip"
    echo "$WORK/clip.mp4"
}

wait_for_job() {  # JOB_ID: poll the api service until the job is done
    local t0=$SECONDS state
    while (( SECONDS - t0 < TIMEOUT_S )); do
        state="$(curl -fsS -m 5 -H "Authorization: Bearer $KEY" "http://127.0.0.1:$API_PORT/v1/jobs/$1" \
            | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || true)"
        [[ "$state" == done ]] && { echo "job $1 done after $(( SECONDS - t0 )) s"; return 0; }
        [[ "$state" == failed || "$state" == cancelled ]] && fail "job $1 $state"
        sleep 2
    done
    fail "job $1 not done within $TIMEOUT_S s"
}

main() {
    mkdir -p "$WORK"
    need_tools
    make_base
    if [[ "${SMOKE_SKIP_BUILD:-0}" != 1 ]]; then build_image; fi
    report_size
    check_settings
    check_api_needs_key
    start_container
    check_app
    check_api
    check_container
    kill_api
    if [[ "${SMOKE_COMPOSE:-1}" == 1 ]]; then check_compose; fi
    step "done"
    printf '\nstep times:\n'; printf '%s\n' "${TIMES[@]}"
    echo "PASSED: every step ($(( SECONDS )) s)"
}

main "$@"

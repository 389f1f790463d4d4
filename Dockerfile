# Chord in a container: the Streamlit app (8501) and, when asked, the HTTP API (8080).
#
#   docker build -t chord .                          # CUDA 13.0 base + the locked torch (CUDA 13.0)
#   docker run --gpus all -p 127.0.0.1:8501:8501 \
#       -v "$HOME/.cache/huggingface:/cache/huggingface" -v chord-data:/data chord
#
# Build arguments (defaults are the GPU image; README "Docker" has the details):
#   BASE         the base image, by digest: any Debian/Ubuntu whose python3 is >= 3.11
#                (fastapi >= 0.165 needs it). The default is NVIDIA's CUDA 13.0 "base" flavour on
#                Ubuntu 24.04 (Python 3.12): the CUDA runtime and forward-compatibility
#                libraries only. CUDA 13.0 matches the torch wheel the lock pins (PyPI's Linux
#                build, whose nvidia-* dependencies are CUDA 13.0's libraries: they are not
#                installed twice, as the "runtime" flavour's cuBLAS/cuFFT/… would be); the host
#                driver must be >= 580.65.06 (CUDA 13.0's minimum, README "GPU image").
#                scripts/docker-smoke.sh builds from a Debian bookworm base made locally with
#                debootstrap (Python 3.11), because no registry can be reached where it was written.
#   APT_SNAPSHOT the archive date apt installs from (Ubuntu's snapshot service, apt >= 2.7, which
#                Ubuntu 24.04 has): with APT_PINS below, the same packages on every build.
#                Empty = the base's sources as they are (Debian bookworm: the pins alone).
#   APT_PINS     the packages installed with apt, each as name=version
#   LOCK         the Python packages: a lock file with every version and hash (requirements.lock,
#                made by scripts/lock.sh), installed with pip --require-hashes. Another torch
#                build (e.g. a CUDA 12.x index for an older driver): make a lock for it
#                (README "Locked installs") and pass it here.
#   GPU_EXTRAS   1 = also deploy/requirements-gpu.lock (PyNvVideoCodec: NVDEC), 0 = not
#   WHEELS_DIR   a folder of local wheels pip may also use (empty = none), e.g. mounted into the
#                build with `podman build -v /host/wheels:/wheels:ro` (hashes are still checked)
#   PIP_CA_FILE  a CA bundle for pip's TLS (empty = the base's ca-certificates), for networks that
#                intercept TLS; mount it into the build, it is not copied into the image
#   CHORD_UID    the uid of the non-root user "chord" (match your host user for bind mounts)
ARG BASE=nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1
FROM ${BASE}

ARG APT_SNAPSHOT=20260928T000000Z
ARG APT_PINS="python3-venv=3.12.3-0ubuntu2.1 python3.12-venv=3.12.3-1ubuntu0.17"
ARG LOCK=requirements.lock
ARG GPU_EXTRAS=1
ARG WHEELS_DIR=""
ARG PIP_CA_FILE=""
ARG CHORD_UID=1000

# NVIDIA_DRIVER_CAPABILITIES: "video" makes the container toolkit mount the driver's NVDEC
# library (libnvcuvid) beside CUDA's; NVIDIA_REQUIRE_CUDA makes it refuse, at `docker run`, a
# host driver too old for CUDA 13.0 instead of failing at the first kernel.
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,video \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0" \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# Python >= 3.11 from the base's own packages, pinned, in a venv that start_service.sh
# --no-install uses (python3 on PATH).
RUN set -eux; \
    if [ -n "${APT_SNAPSHOT}" ]; then apt-get update --snapshot "${APT_SNAPSHOT}"; else apt-get update; fi; \
    apt-get install -y --no-install-recommends ${APT_PINS}; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/venv

# One pip run installs the whole locked set, every file checked against its hash, so nothing
# is installed and then replaced (a from-scratch build once got pillow 13 with torchvision, then
# 12.3 from requirements.txt), and `pip check` proves the set consistent. In the same layer,
# what the service never reads at run time is removed: static archives (*.a: triton's CUPTI,
# 171 MB; only a linker reads them) and the packages' own test suites (pandas, pyarrow, …).
# The list of what was installed stays in the image (/opt/venv/chord-packages.txt).
COPY deploy/requirements-pip.lock deploy/requirements-gpu.lock /tmp/locks/
COPY ${LOCK} /tmp/locks/chord.lock
RUN set -eux; \
    opts="--require-hashes ${WHEELS_DIR:+--find-links ${WHEELS_DIR}} ${PIP_CA_FILE:+--cert ${PIP_CA_FILE}}"; \
    pip install $opts -r /tmp/locks/requirements-pip.lock; \
    extra=""; if [ "${GPU_EXTRAS}" = 1 ]; then extra="-r /tmp/locks/requirements-gpu.lock"; fi; \
    pip install $opts -r /tmp/locks/chord.lock $extra; \
    pip check; \
    pip freeze --all > /opt/venv/chord-packages.txt; \
    site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"; \
    find "$site" -name '*.a' -type f -delete; \
    find "$site" -mindepth 2 -maxdepth 3 -type d -name tests -prune -exec rm -rf {} +; \
    rm -rf /tmp/locks /root/.cache; \
    python -c "import torch, torchvision, transformers, streamlit, fastapi, ray, cv2, av, supervision, scipy, pandas; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

# A non-root user; the code stays root-owned (read-only to the app).
RUN groupadd --non-unique --gid "${CHORD_UID}" chord \
    && useradd --non-unique --uid "${CHORD_UID}" --gid "${CHORD_UID}" --create-home \
       --shell /usr/sbin/nologin chord \
    && mkdir -p /cache/huggingface /cache/chord /data \
    && chown -R chord:chord /cache /data && chmod 0700 /data

WORKDIR /app
COPY app.py start_service.sh multigpu_config.yaml ./
# the original documents' import paths (chord_inference, chord_parallel, chord_monitor)
COPY chord_inference.py chord_parallel.py chord_monitor.py ./
COPY .streamlit/ .streamlit/
COPY views/ views/
COPY chord_ui/ chord_ui/
COPY chord_core/ chord_core/
COPY scripts/container_health.py scripts/container_health.py

# Weights are downloaded once into the HF cache volume (or mounted for offline hosts); the
# compiled decode steps are kept in the Chord cache volume (a container that finds them starts
# its workers without compiling again); uploads and the job store live in the data volume. CHORD_HOST=0.0.0.0: the app must listen on the
# container's interface (normal runs keep localhost). CHORD_ALLOWED_HOSTS: the names a browser
# uses to reach it besides localhost (e.g. "server,10.0.0.5"), see README "Docker".
ENV HF_HOME=/cache/huggingface \
    CHORD_CACHE_DIR=/cache/chord \
    CHORD_DATA_DIR=/data \
    CHORD_HOST=0.0.0.0 \
    CHORD_PORT=8501 \
    CHORD_API_HOST=0.0.0.0 \
    CHORD_API_PORT=8080 \
    CHORD_ALLOWED_HOSTS=""
VOLUME ["/cache/huggingface", "/cache/chord", "/data"]
EXPOSE 8501 8080

USER chord
# The app's /_stcore/health, and the API's /health when the container runs it (--api-port or
# `python -m chord_core serve`). The app answers at once (the model loads in its workers); the
# API's /health is 503 until a worker has loaded the model: failures in the first 5 minutes do
# not count (a larger model may need `docker run --health-start-period 15m`).
HEALTHCHECK --interval=30s --timeout=10s --start-period=300s --retries=3 \
    CMD ["python", "/app/scripts/container_health.py"]
ENTRYPOINT ["/app/start_service.sh", "--no-install"]
CMD []

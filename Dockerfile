# Chord in a container: the Streamlit app (8501) and, when asked, the HTTP API (8080).
#
#   docker build -t chord .                                   # CUDA base + CUDA build of torch
#   docker run --gpus all -p 127.0.0.1:8501:8501 \
#       -v "$HOME/.cache/huggingface:/cache/huggingface" -v chord-data:/data chord
#
# Build arguments (defaults are the GPU image; README "Docker" has the details):
#   BASE         the base image: any Debian/Ubuntu whose python3 is >= 3.11 (requirements.txt
#                needs it: fastapi >= 0.165). The default is NVIDIA's CUDA
#                runtime on Ubuntu 24.04 (Python 3.12); Ubuntu 22.04's 3.10 is too old.
#                scripts/docker-smoke.sh builds from a Debian bookworm base (Python 3.11) made
#                locally with debootstrap, because no registry can be reached where it was written.
#   TORCH_INDEX  where torch/torchvision (and their dependencies) come from: PyTorch's CUDA 12.8
#                wheel index by default, alone, as PyTorch's install command has it (with PyPI
#                beside it pip would take PyPI's torch whenever its version is higher);
#                empty = PyPI's default build (on Linux a CUDA build that brings its own CUDA
#                libraries); https://download.pytorch.org/whl/cpu for a smaller CPU-only image.
#                torch and torchvision must come from the same index: PyPI's CUDA torchvision
#                on a CPU torch fails at import ("operator torchvision::nms does not exist").
#   TORCH_SPEC   which torch/torchvision to install; empty = the torch and torchvision lines of
#                requirements.txt, e.g. "torch==2.14.1 torchvision==0.29.1".
#   WHEELS_DIR   a folder of local wheels pip may also use (empty = none), e.g. mounted into the
#                build with `podman build -v /host/wheels:/wheels:ro`
#   PIP_CA_FILE  a CA bundle for pip's TLS (empty = the base's ca-certificates), for networks that
#                intercept TLS; mount it into the build, it is not copied into the image
#   CHORD_UID    the uid of the non-root user "chord" (match your host user for bind mounts)
ARG BASE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
FROM ${BASE}

ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_SPEC=""
ARG WHEELS_DIR=""
ARG PIP_CA_FILE=""
ARG CHORD_UID=1000

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# Python >= 3.11 from the base's own packages, in a venv that start_service.sh --no-install uses
# (python3 on PATH). ca-certificates for the model download.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && python -m pip install ${PIP_CA_FILE:+--cert "$PIP_CA_FILE"} --upgrade pip

# The same requirements.txt that ./start_service.sh installs; torch first, from TORCH_INDEX,
# so that the requirements step keeps that build. The list of what was installed stays in the
# image (/opt/venv/chord-packages.txt).
COPY requirements.txt /app/requirements.txt
RUN set -eux; \
    spec="${TORCH_SPEC:-$(grep -E '^(torch|torchvision)[<>=! ]' /app/requirements.txt | tr '\n' ' ')}"; \
    opts="${WHEELS_DIR:+--find-links ${WHEELS_DIR}} ${PIP_CA_FILE:+--cert ${PIP_CA_FILE}}"; \
    if [ -n "${TORCH_INDEX}" ]; then \
        pip install $opts --index-url "${TORCH_INDEX}" $spec; \
    else \
        pip install $opts $spec; \
    fi; \
    pip install $opts -r /app/requirements.txt; \
    pip freeze > /opt/venv/chord-packages.txt; \
    python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

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
COPY pages/ pages/
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

"""A real ``python -m chord_core serve`` on 127.0.0.1 (test model, CPU workers) for the
service tests, with its own media root, data dir and small limits so 413s are cheap."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
MAX_BODY_MB = 2
MAX_TASKS = 8


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    media: Path
    data: Path
    log: Path
    first_health: dict | None = None  # the first /health answer that was a 503 (loading)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp: Path, *args: str, wait_ready: bool = True, timeout: float = 120.0
                 ) -> Server:
    """Start the service as a subprocess and wait until it answers (ready workers if asked)."""
    media, data = tmp / "media", tmp / "data"
    media.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data))
    log = tmp / "server.log"
    proc = subprocess.Popen([sys.executable, "-m", "chord_core", "serve", "--model", "test",
                             "--port", str(port), *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    server = Server(f"http://127.0.0.1:{port}", proc, media, data, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2):
                return server  # 200: a worker is ready
        except urllib.error.HTTPError as exc:
            if exc.code == 503 and server.first_health is None:
                server.first_health = json.loads(exc.read())
            if exc.code == 503 and not wait_ready:
                return server
        except OSError:
            pass
        time.sleep(0.3)
    stop_server(server)
    raise RuntimeError(f"service not ready in {timeout} s: {log.read_text()[-2000:]}")


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(5)


@pytest.fixture(scope="session")
def server(tiny_model_dir, tmp_path_factory) -> Server:
    """The service the tests share: 2 CPU workers, no API key (bound to 127.0.0.1)."""
    srv = start_server(tmp_path_factory.mktemp("service"), "--cpu-workers", "2",
                       "--max-body-mb", str(MAX_BODY_MB), "--max-tasks", str(MAX_TASKS))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def media(server: Server) -> dict[str, Path]:
    """Files inside the server's media root: a short clip, two images."""
    from chord_core.testing.videos import make_video

    rng = np.random.default_rng(0)
    out = {"clip": make_video(server.media / "clip.mp4", duration_s=2.0, fps=10.0,
                              size_wh=(160, 120)).path}
    for name, wh in (("img", (160, 120)), ("img2", (200, 150))):
        out[name] = server.media / f"{name}.png"
        Image.fromarray(rng.integers(0, 255, (wh[1], wh[0], 3), dtype=np.uint8)
                        ).save(out[name])
    return out

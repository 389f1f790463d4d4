"""Starting and stopping a real ``python -m chord_core serve`` on 127.0.0.1 (test model, CPU
workers) for the service tests, with its own media root, data dir and small limits so 413s
are cheap. (A uniquely named module: ``conftest`` names clash across test folders.)"""

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
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MAX_BODY_MB = 2
MAX_TASKS = 8
HARDEN_KEY = "hardening-key-of-a-real-serve"
HARDEN_ENV = {  # small limits, so a test reaches each in seconds
    "CHORD_API_KEY": HARDEN_KEY, "CHORD_API_MAX_STREAMS": "3",
    "CHORD_API_READ_TIMEOUT_S": "2", "CHORD_API_BODY_TIMEOUT_S": "3",
}


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


def start_server(tmp: Path, *args: str, wait_ready: bool = True, timeout: float = 120.0,
                 env: dict[str, str] | None = None) -> Server:
    """Start the service as a subprocess and wait until it answers (ready workers if asked);
    ``env`` adds variables."""
    media, data = tmp / "media", tmp / "data"
    media.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data), **(env or {}))
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


def kill_server(server: Server) -> None:
    """Stop at once (SIGKILL; its workers die with it, ``runtime/lifeline.py``): for a
    service whose model may still be loading, which SIGTERM takes 5–12 s to stop here."""
    server.proc.kill()
    server.proc.wait(10)


def read_events(client: Any, url: str, timeout: float = 60) -> list[tuple[str, dict]]:
    """A job's whole event stream (``GET …/events`` through an ``httpx.Client``), as
    ``(event, data)`` pairs; the answer must be a ``text/event-stream``."""
    out, event = [], ""
    with client.stream("GET", url, timeout=timeout) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith(
            "text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                out.append((event, json.loads(line[6:])))
    return out

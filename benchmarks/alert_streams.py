"""Idle alert-stream subscribers against the service's other routes (issue 40,
docs/reliability.md): N subscribers open ``/v1/alerts/events`` on one key and read nothing
more; while they are held, ``/health`` and ``GET /v1/alerts`` (a route of the thread pool)
are timed one after the other.

The service is a real ``python -m chord_core serve`` (the test model, one CPU worker, a key,
a fresh data dir), waited for until ``/health`` says ready; only 127.0.0.1, bounded in count
and time.

    python benchmarks/alert_streams.py [--subscribers 1000] [--samples 20] [--data DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-streams-key"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _subscribe(port: int) -> tuple[asyncio.StreamWriter, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /v1/alerts/events?timeout=600 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 f"Authorization: Bearer {KEY}\r\n\r\n".encode())
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 60)
    return writer, int(line.split(b" ", 2)[1]) if line else 0


async def _timed(port: int, path: str) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                 "Connection: close\r\n\r\n".encode())
    await writer.drain()
    await asyncio.wait_for(reader.read(), 60)
    writer.close()
    return time.perf_counter() - started


async def _measure(port: int, subscribers: int, samples: int) -> dict[str, float]:
    before = [await _timed(port, "/health") for _ in range(samples)]
    opened = []
    for start in range(0, subscribers, 100):  # 100 at a time: a burst, bounded
        opened += await asyncio.gather(*(_subscribe(port)
                                         for _ in range(min(100, subscribers - start))))
    held = sum(1 for _, code in opened if code == 200)
    await asyncio.sleep(1.0)
    health = [await _timed(port, "/health") for _ in range(samples)]
    alerts = [await _timed(port, "/v1/alerts?limit=5") for _ in range(samples)]
    for writer, _ in opened:
        writer.close()
    return {"held": held, "health_before_p50_s": statistics.median(before),
            "health_p50_s": statistics.median(health), "health_max_s": max(health),
            "alerts_p50_s": statistics.median(alerts), "alerts_max_s": max(alerts)}


def _wait_ready(port: int, proc: subprocess.Popen) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except (OSError, urllib.error.HTTPError):
            time.sleep(0.5)
    raise SystemExit("the service did not become ready")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--data", default="")
    args = ap.parse_args()
    data = Path(args.data or tempfile.mkdtemp(prefix="chord-streams-"))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORD_")}
    (data / "media").mkdir(parents=True, exist_ok=True)
    log = (data / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "chord_core", "serve", "--model", "test",
                             "--cpu-workers", "1", "--port", str(port)], cwd=ROOT, env={
        **env, "CHORD_DATA_DIR": str(data), "CHORD_API_KEY": KEY,
        "CHORD_MEDIA_ROOTS": str(data / "media")}, stdout=subprocess.DEVNULL, stderr=log)
    try:
        _wait_ready(port, proc)
        figures = asyncio.run(_measure(port, args.subscribers, args.samples))
    finally:
        proc.terminate()
        proc.wait(20)
    print(f"subscribers={args.subscribers} " + " ".join(
        f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

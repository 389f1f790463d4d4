"""Idle alert-stream subscribers against the service's other routes (issue 40,
docs/reliability.md): N subscribers open ``/v1/alerts/events`` on one key and read nothing
more; while they are held, ``/health``, ``GET /v1/alerts`` (a route of the thread pool) and a
job submit (``POST /v1/jobs``, a describe of a 1 s clip, timed to its 202) are timed one after
the other. The submits are timed before the subscribers too (their jobs waited for, so they do
not run while the subscribers are measured).

The service is a real ``python -m chord_core serve`` (the test model, one CPU worker, a key,
a fresh data dir), waited for until ``/health`` says ready; only 127.0.0.1, bounded in count
and time.

    python benchmarks/alert_streams.py [--subscribers 1000] [--samples 20] [--submits 10]
                                       [--data DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


async def _exchange(port: int, head: str, body: bytes = b"") -> tuple[float, bytes]:
    """(seconds to the whole answer, the answer) of one request on a new connection."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{head}\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                 f"Connection: close\r\n\r\n".encode() + body)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 120)
    writer.close()
    return time.perf_counter() - started, answer


async def _timed(port: int, path: str) -> float:
    return (await _exchange(port, f"GET {path} HTTP/1.1"))[0]


async def _submit(port: int, clip: Path) -> tuple[float, str]:
    """(seconds to the 202, the job id) of a describe submit."""
    body = json.dumps({"task": "describe", "video_path": str(clip),
                       "max_new_tokens": 1}).encode()
    took, answer = await _exchange(port, "POST /v1/jobs HTTP/1.1\r\nContent-Type: "
                                   f"application/json\r\nContent-Length: {len(body)}", body)
    head, _, doc = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 202"):
        raise SystemExit(f"a submit was not accepted: {answer[:300]!r}")
    return took, str(json.loads(doc)["job_id"])


async def _finished(port: int, job_ids: list[str]) -> None:
    """Wait (at most 5 min) until the jobs submitted before the subscribers ended."""
    deadline = time.monotonic() + 300
    for job_id in job_ids:
        while time.monotonic() < deadline:
            _, answer = await _exchange(port, f"GET /v1/jobs/{job_id} HTTP/1.1")
            state = json.loads(answer.partition(b"\r\n\r\n")[2]).get("state")
            if state in ("done", "failed", "cancelled"):
                break
            await asyncio.sleep(0.2)


async def _measure(port: int, subscribers: int, samples: int, submits: int,
                   clip: Path) -> dict[str, float]:
    before = [await _timed(port, "/health") for _ in range(samples)]
    submitted = [await _submit(port, clip) for _ in range(submits)]
    await _finished(port, [job_id for _, job_id in submitted])
    opened = []
    for start in range(0, subscribers, 100):  # 100 at a time: a burst, bounded
        opened += await asyncio.gather(*(_subscribe(port)
                                         for _ in range(min(100, subscribers - start))))
    held = sum(1 for _, code in opened if code == 200)
    await asyncio.sleep(1.0)
    health = [await _timed(port, "/health") for _ in range(samples)]
    alerts = [await _timed(port, "/v1/alerts?limit=5") for _ in range(samples)]
    held_submits = [(await _submit(port, clip))[0] for _ in range(submits)]
    for writer, _ in opened:
        writer.close()
    figures = {"held": held, "health_before_p50_s": statistics.median(before),
               "health_p50_s": statistics.median(health), "health_max_s": max(health),
               "alerts_p50_s": statistics.median(alerts), "alerts_max_s": max(alerts)}
    if submits:
        figures |= {"submit_before_p50_s": statistics.median(t for t, _ in submitted),
                    "submit_p50_s": statistics.median(held_submits),
                    "submit_max_s": max(held_submits)}
    return figures


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
    ap.add_argument("--submits", type=int, default=10,
                    help="job submits timed before and while the subscribers are held")
    ap.add_argument("--data", default="")
    args = ap.parse_args()
    data = Path(args.data or tempfile.mkdtemp(prefix="chord-streams-"))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORD_")}
    (data / "media").mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from chord_core.testing.videos import make_video

    clip = make_video(data / "media" / "clip.mp4", duration_s=1.0, fps=4.0,
                      size_wh=(64, 48)).path
    log = (data / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "chord_core", "serve", "--model", "test",
                             "--cpu-workers", "1", "--port", str(port)], cwd=ROOT, env={
        **env, "CHORD_DATA_DIR": str(data), "CHORD_API_KEY": KEY,
        "CHORD_MEDIA_ROOTS": str(data / "media")}, stdout=subprocess.DEVNULL, stderr=log)
    try:
        _wait_ready(port, proc)
        figures = asyncio.run(_measure(port, args.subscribers, args.samples, args.submits,
                                       Path(clip)))
    finally:
        proc.terminate()
        proc.wait(20)
    print(f"subscribers={args.subscribers} " + " ".join(
        f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

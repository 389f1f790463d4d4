"""Figures for the service's hardening (issue 25, docs/reliability.md): memory of the worst
request the caps allow, a big body without the key, a big header, stalled sockets.

Starts its own service on 127.0.0.1 (test model, CPU workers, a key, a temporary data dir and
media root), sends only to it, stops it. Worker memory is each worker process's RSS, sampled
every 0.1 s while a job runs (peak − before).

    python benchmarks/service_hardening.py [--workers 1] [--stalled 50] [--header-mb 64]
        [--only worst_ground_within_caps ...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
KEY = "bench-key"
AUTH = {"authorization": f"Bearer {KEY}"}
MIB = 1024 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp: Path, workers: int) -> tuple[subprocess.Popen, str]:
    import httpx

    port = _free_port()
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(tmp / "media"), CHORD_DATA_DIR=str(tmp / "data"),
               CHORD_API_KEY=KEY)
    proc = subprocess.Popen([sys.executable, "-m", "chord_core", "serve", "--model", "test",
                             "--port", str(port), "--cpu-workers", str(workers)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL,
                            stderr=(tmp / "server.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"the service did not start: {(tmp / 'server.log').read_text()[-2000:]}")


class RssPeak:
    """Peak RSS of each child process of ``pid`` while the block runs (MiB)."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.before = self._sample()
        self.peak = dict(self.before)
        self._stop = threading.Event()

    def _sample(self) -> dict[int, float]:
        out = {}
        for p in [self.root, *self.root.children(recursive=True)]:
            try:
                out[p.pid] = p.memory_info().rss / MIB
            except Exception:
                continue
        return out

    def __enter__(self) -> "RssPeak":
        def run() -> None:
            while not self._stop.wait(0.1):
                for pid, rss in self._sample().items():
                    self.peak[pid] = max(rss, self.peak.get(pid, 0.0))
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def growth(self, pid: int | None = None) -> float:
        """The largest peak − before over the children (or of ``pid``)."""
        pids = [pid] if pid is not None else [p for p in self.peak if p != self.root.pid]
        return max((self.peak[p] - self.before.get(p, self.peak[p]) for p in pids), default=0.0)


def job(url: str, pid: int, body: dict[str, Any]) -> dict[str, Any]:
    import httpx

    with RssPeak(pid) as rss:
        t0 = time.monotonic()
        r = httpx.post(url + "/v1/jobs", json=body, headers=AUTH, timeout=60)
        if r.status_code != 202:
            return {"status": r.status_code, "error": r.json().get("error")}
        jid = r.json()["job_id"]
        while httpx.get(f"{url}/v1/jobs/{jid}", headers=AUTH).json()["state"] not in \
                ("done", "failed", "cancelled"):
            time.sleep(0.2)
        took = time.monotonic() - t0
    doc = httpx.get(f"{url}/v1/jobs/{jid}/result", headers=AUTH).json()
    s = doc.get("sampling", {})
    return {"status": 202, "frames": len(s.get("frame_indices", ())),
            "visual_tokens": s.get("visual_tokens"), "input_wh": s.get("input_wh"),
            "seconds": round(took, 1), "worker_rss_growth_mib": round(rss.growth(), 1)}


def _status_line(s: socket.socket) -> str:
    """The answer's status line; "reset" when the server closed before one came."""
    try:
        return s.recv(200).split(b"\r\n", 1)[0].decode() or "closed"
    except OSError:
        return "reset"


def big_body_without_key(url: str, pid: int, mib: int) -> dict[str, Any]:
    """POST ``mib`` MiB of JSON to chat without the key, /health timed meanwhile."""
    import httpx

    chunk = b"[" * MIB
    stall: list[float] = []

    def health() -> None:
        t0 = time.monotonic()
        httpx.get(url + "/health", timeout=30)
        stall.append(time.monotonic() - t0)

    with RssPeak(pid) as rss:
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: "
                      + str(mib * MIB).encode() + b"\r\n\r\n")
            threading.Thread(target=health).start()
            sent = 0
            try:
                for _ in range(mib):
                    s.sendall(chunk)
                    sent += 1
            except OSError:
                pass
            answer = _status_line(s)
            took = time.monotonic() - t0
    time.sleep(0.5)
    return {"answer": answer, "seconds": round(took, 2), "mib_sent_before_close": sent,
            "service_rss_growth_mib": round(rss.growth(pid), 1),
            "health_s": round(stall[0], 3) if stall else None}


def big_header(url: str, pid: int, mib: int) -> dict[str, Any]:
    with RssPeak(pid) as rss:
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            try:
                for _ in range(mib):
                    s.sendall(b"a" * MIB)
            except OSError:
                pass
            answer = _status_line(s)
        took = time.monotonic() - t0
    return {"answer": answer, "seconds": round(took, 2),
            "service_rss_growth_mib": round(rss.growth(pid), 1)}


def stalled(url: str, n: int) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=120)
        if i % 2:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half the headers
        socks.append(s)
    t0, closed = time.monotonic(), []
    for s in socks:
        while s.recv(65536):
            pass
        closed.append(time.monotonic() - t0)
        s.close()
    return {"sockets": n, "all_closed_after_s": round(max(closed), 2),
            "first_closed_after_s": round(min(closed), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--stalled", type=int, default=50)
    ap.add_argument("--header-mb", type=int, default=64)
    ap.add_argument("--body-mb", type=int, default=100)
    ap.add_argument("--only", nargs="*", default=[], metavar="CASE",
                    help="run only these cases (e.g. worst_ground_within_caps)")
    ap.add_argument("--ground-tokens", type=int, default=16,
                    help="max_new_tokens per grounded frame (time, not memory)")
    args = ap.parse_args(argv)
    from chord_core.testing.videos import make_video

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "media").mkdir()
        clip = str(make_video(tmp / "media" / "c.mp4", duration_s=20.0, fps=30.0,
                              size_wh=(640, 480)).path)
        proc, url = start(tmp, args.workers)
        try:
            base = {"task": "describe", "video_path": clip, "prompt": "What happens?"}
            cases = [
                ("probe_request", lambda: job(url, proc.pid, {
                    **base, "fps": 30, "max_frames": 1000000, "token_budget": 1000000000})),
                ("worst_describe_within_caps", lambda: job(url, proc.pid, {
                    **base, "fps": 30, "max_frames": 768, "token_budget": 24000,
                    "max_pixels": 1003520, "max_new_tokens": 2048})),
                ("body_without_key", lambda: big_body_without_key(url, proc.pid,
                                                                  args.body_mb)),
                ("big_header", lambda: big_header(url, proc.pid, args.header_mb)),
                ("stalled_sockets", lambda: stalled(url, args.stalled)),
                ("default_request", lambda: job(url, proc.pid, base)),
                # memory, not time: 186 frames is what 24,000 tokens pay for; each frame's
                # answer is held to --ground-tokens (the random model never stops early)
                ("worst_ground_within_caps", lambda: job(url, proc.pid, {
                    "task": "ground", "video_path": clip, "target": "the square", "fps": 30,
                    "max_frames": 186, "token_budget": 24000, "max_pixels": 1003520,
                    "max_new_tokens": args.ground_tokens})),
            ]
            for name, case in cases:
                if args.only and name not in args.only:
                    continue
                print(json.dumps({name: case()}), flush=True)  # each figure as it comes
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Waiting without polling, seen from a client: a /v1/chat/completions client that hangs up
gets its job cancelled (heard from the server's ``http.disconnect``, not polled). Uses the
shared service (``server`` fixture)."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx


def _store_rows(data: Path, label: str) -> list[dict]:
    with sqlite3.connect(data / "chord.sqlite3", timeout=10) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(
            "SELECT job_id, state, spec_json FROM jobs WHERE spec_json LIKE ?",
            (f'%"label": "{label}"%',))]


def test_a_chat_client_that_hangs_up_gets_its_job_cancelled(server, media) -> None:
    """Both workers are busy with long grounding jobs; a chat request queues behind them and
    its client closes the connection: the waiting request hears it and cancels the job."""
    with httpx.Client(base_url=server.url, timeout=30) as c:
        busy = [c.post("/v1/jobs", json={"task": "ground", "video_path": str(media["clip"]),
                                         "target": "anything", "fps": 10, "label": "busy"}
                       ).json()["job_id"] for _ in range(2)]
        body = json.dumps({"model": "test", "max_tokens": 16, "messages": [{
            "role": "user", "content": [{"type": "video_url",
                                         "video_url": {"url": str(media["clip"])}},
                                        {"type": "text", "text": "hang-up test"}]}]}).encode()
        url = urlparse(server.url)
        sock = socket.create_connection((url.hostname, url.port), timeout=10)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n"
                     + f"Host: {url.hostname}:{url.port}\r\n".encode()
                     + b"Content-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        deadline = time.monotonic() + 60
        while not any("hang-up test" in r["spec_json"] for r in _store_rows(server.data,
                                                                             "api chat")):
            assert time.monotonic() < deadline, "the chat job was never stored"
            time.sleep(0.1)
        sock.close()  # the client hangs up while its job waits
        deadline = time.monotonic() + 60
        while True:
            rows = [r for r in _store_rows(server.data, "api chat")
                    if "hang-up test" in r["spec_json"]]
            if rows and rows[0]["state"] == "cancelled":
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.2)
        for job_id in busy:
            c.delete(f"/v1/jobs/{job_id}")

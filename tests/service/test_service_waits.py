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
import pytest


def _store_rows(data: Path, label: str) -> list[dict]:
    with sqlite3.connect(data / "chord.sqlite3", timeout=10) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(
            "SELECT job_id, state, spec_json FROM jobs WHERE spec_json LIKE ?",
            (f'%"label": "{label}"%',))]


def test_a_chat_client_that_hangs_up_gets_its_job_cancelled(server, media) -> None:
    """Both workers are busy with long grounding jobs; a chat request queues behind them and
    its client closes the connection: the waiting request hears it and cancels the job."""
    from chord_core.testing.videos import make_video

    # 30 s at 10 fps: each busy job reads 300 frames (the 3 s clip's 30 were done before the
    # chat job was even stored once grounding got faster, and the chat job then simply ran)
    long_clip = make_video(server.media / "long-busy.mp4", duration_s=30.0, fps=10.0,
                           size_wh=(160, 120)).path
    with httpx.Client(base_url=server.url, timeout=30) as c:
        busy = [c.post("/v1/jobs", json={"task": "ground", "video_path": str(long_clip),
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


def _row(data: Path, sql: str, *params) -> dict | None:
    with sqlite3.connect(data / "chord.sqlite3", timeout=10) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute(sql, params).fetchone()
        return None if row is None else dict(row)


def _until(what: str, check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.1)
    return got


@pytest.mark.slow
def test_a_hung_up_batch_predict_leaves_the_jobs_an_identical_request_shares(
        server, media) -> None:
    """Two identical /batch_predict requests share their jobs (one per content key) and
    their parent. Both workers are busy (six grounding jobs queued ahead); the first request is waiting, a second identical
    one comes, and the second's client hangs up: it cancels nothing the first still waits
    on (nor ends the parent), and the first gets every answer once the workers are free."""
    import base64
    import threading
    import uuid

    uid = uuid.uuid4().hex[:8]
    image = base64.b64encode(media["img"].read_bytes()).decode()
    tasks = [{"image_data": image, "text": f"shared {uid} {i}", "id": i} for i in range(3)]
    with httpx.Client(base_url=server.url, timeout=120) as c:
        busy = [c.post("/v1/jobs", json={"task": "ground", "video_path": str(media["clip"]),
                                         "target": "anything", "fps": 10, "label": "busy"}
                       ).json()["job_id"] for _ in range(6)]  # queued ahead of the tasks
        answer: dict = {}
        first = threading.Thread(target=lambda: answer.update(
            r=httpx.post(server.url + "/batch_predict", json={"tasks": tasks}, timeout=120)))
        first.start()
        kids = "SELECT parent, COUNT(*) AS n FROM jobs WHERE spec_json LIKE ? GROUP BY parent"
        parent = _until("the first request's jobs stored", lambda: (
            r := _row(server.data, kids, f"%shared {uid}%")) and r["n"] == 3 and r)["parent"]
        time.sleep(1.0)  # the first request is waiting on its jobs' handles by now
        body = json.dumps({"tasks": tasks}).encode()
        url = urlparse(server.url)
        sock = socket.create_connection((url.hostname, url.port), timeout=10)
        sock.sendall(b"POST /batch_predict HTTP/1.1\r\n"
                     + f"Host: {url.hostname}:{url.port}\r\n".encode()
                     + b"Content-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        attempts = "SELECT attempts FROM jobs WHERE job_id = ?"
        _until("the second request opened the same parent",
               lambda: _row(server.data, attempts, parent)["attempts"] >= 2)
        sock.close()  # the second client hangs up while both wait
        time.sleep(3.0)  # uvicorn hears a closed socket at once; a slow server only
        # makes this check pass without testing, never fail wrongly
        states = "SELECT COUNT(*) AS n FROM jobs WHERE spec_json LIKE ? AND state = 'cancelled'"
        assert _row(server.data, states, f"%shared {uid}%")["n"] == 0
        assert _row(server.data, "SELECT state FROM jobs WHERE job_id = ?",
                    parent)["state"] in ("running", "done")  # done: the busy jobs ended
        for job_id in busy:
            c.delete(f"/v1/jobs/{job_id}")
        first.join(120)
    r = answer["r"]
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert [p["id"] for p in preds] == [0, 1, 2]
    assert all(p.get("entailment") and "error" not in p for p in preds), preds
    assert _row(server.data, "SELECT state FROM jobs WHERE job_id = ?", parent)["state"] == "done"

"""Issue 40, medium: a body trickled one byte at a time is cut at its whole-body limit (408),
``POST /v1/jobs`` with a urlencoded form is a 415, the alerts' signal folder and file are
private whatever the umask, and an API key file others may read is said on stderr. Through a
real keyed ``serve`` (``keyed_server``: a 3 s body limit), a real writer process and the real
``serve`` reading a key file."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from service_server import HARDEN_KEY as KEY

from chord_core.runtime.store import Store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def url(keyed_server) -> str:
    return keyed_server.url


def test_a_body_trickled_a_byte_at_a_time_gets_a_408_at_its_whole_limit(url):
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(f"POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer "
                     f"{KEY}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n"
                     f"\r\n".encode())
        answer = b""
        try:
            while time.monotonic() - started < 15:  # each pause 0.5 s: under the 2 s limit
                sock.sendall(b" ")
                time.sleep(0.5)
        except OSError:  # the service closed the connection
            pass
        while chunk := sock.recv(65536):
            answer += chunk
    took = time.monotonic() - started
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:300]
    doc = json.loads(body)
    assert "request body was not received within 3 s" in doc["error"]
    assert "CHORD_API_BODY_TIMEOUT_S" in doc["hint"]
    assert took < 12  # cut near 3 s, not held while the bytes kept coming


@pytest.mark.parametrize("ctype,body", [
    ("application/x-www-form-urlencoded", "task=describe&video_path=/media/a.mp4"),
    ("text/plain", '{"task": "describe", "video_path": "/media/a.mp4"}'),
])
def test_a_job_that_is_not_json_or_multipart_is_a_415(url, ctype, body):
    r = httpx.post(url + "/v1/jobs", content=body, timeout=10,
                   headers={"Authorization": f"Bearer {KEY}", "Content-Type": ctype})
    assert r.status_code == 415, r.text
    doc = r.json()
    assert ctype in doc["error"] and "application/json" in doc["hint"]


WRITER = """
import os, sys
os.umask(int(sys.argv[2], 8))
from chord_core.library.alerts import store_alert
from chord_core.library.index import LibraryIndex
index = LibraryIndex(sys.argv[1])
print(store_alert(index, "w", {"clip_key": "k", "statement": "a van parks",
                  "path": "/media/clip.mp4", "job_id": "j1"},
                  {"start_s": 1.0, "end_s": 2.0, "probability": 0.9, "evidence": []}))
"""


@pytest.mark.parametrize("umask", ["000", "022"])
def test_the_alerts_signal_folder_and_file_are_private_under_any_umask(tmp_path, umask):
    db = tmp_path / "chord.sqlite3"
    Store(db).close()
    subprocess.run([sys.executable, "-c", WRITER, str(db), umask], cwd=ROOT, check=True,
                   capture_output=True, timeout=60)
    folder = tmp_path / "chord.sqlite3-signals"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "alerts").stat().st_mode) == 0o600


def test_a_loose_signal_folder_and_file_made_before_are_tightened(tmp_path):
    db = tmp_path / "chord.sqlite3"
    Store(db).close()
    folder = tmp_path / "chord.sqlite3-signals"
    folder.mkdir()
    (folder / "alerts").write_text("0\n")
    os.chmod(folder, 0o777)
    os.chmod(folder / "alerts", 0o666)
    subprocess.run([sys.executable, "-c", WRITER, str(db), "022"], cwd=ROOT, check=True,
                   capture_output=True, timeout=60)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "alerts").stat().st_mode) == 0o600


@pytest.mark.parametrize("mode,warned", [(0o644, True), (0o600, False)])
def test_an_api_key_file_others_may_read_is_said(tmp_path, mode, warned):
    key = tmp_path / "key"
    key.write_text("a-key-of-24-characters-x\n")
    os.chmod(key, mode)
    # the port is refused after the key was read: serve stops there, at once
    out = subprocess.run([sys.executable, "-m", "chord_core", "serve", "--model", "test",
                          "--api-key-file", str(key), "--port", "99999"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "CHORD_DATA_DIR": str(tmp_path / "data")})
    assert out.returncode == 2 and "port must be" in out.stderr
    said = "may be read by other users of this machine (mode 644)" in out.stderr
    assert said is warned, out.stderr
    assert "a-key-of-24" not in out.stderr  # the key itself is never shown

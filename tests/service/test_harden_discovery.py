"""Issue 40, high: the CLI trusts no service it did not check. A ``service.json`` someone else
could have written (a loose mode, a folder others may write, a pid that is not ``chord_core
serve``, a service that cannot prove the file's token) gets neither the API key nor the clip;
a ``--server`` that is not Chord (HTML, JSON without a job id, a job id with ``../``, a
redirect, an event stream that never ends) is a clear error within a bounded wait. All through
the real CLI (``python -m chord_core describe``) against a real service or a listener on
127.0.0.1 that records what it was sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from chord_core.service import discovery
from chord_core.testing.videos import make_video

ROOT = Path(__file__).resolve().parents[2]
KEY = "the-users-secret-key"


class Listener:
    """A stranger on 127.0.0.1: answers as ``mode`` says and records every request."""

    def __init__(self, mode: str) -> None:
        self.mode, self.seen = mode, []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                listener.seen.append((self.command, self.path,
                                      self.headers.get("Authorization", "")))
                listener.reply(self)

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def reply(self, h: BaseHTTPRequestHandler) -> None:
        if h.command == "POST":
            length = int(h.headers.get("Content-Length") or 0)
            h.rfile.read(min(length, 1 << 20))
        body, kind, status = b"{}", "application/json", 200
        if self.mode in ("trickle-body", "trickle-headers") and h.command == "POST":
            self._trickle(h)
            return
        if h.path.startswith("/v1/identity") and self.mode == "fakeproof":
            body = json.dumps({"service": "chord", "proof": "0" * 64}).encode()
        elif self.mode in ("html", "fakeproof") or h.path.startswith("/health") and self.mode != "events":
            body, kind = b"<html><body>It works!</body></html>", "text/html"
        elif self.mode == "redirect":
            h.send_response(302)
            h.send_header("Location", "http://127.0.0.1:1/steal")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        elif h.path.startswith("/v1/jobs") and h.command == "POST":
            body = json.dumps({"no_job": True} if self.mode == "nojob" else
                              {"job_id": "../../etc/passwd" if self.mode == "dotdot"
                               else "job-endless"}).encode()
        elif h.path.endswith("/events"):
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.end_headers()
            try:
                while True:  # progress forever, the job never ends
                    h.wfile.write(b'event: progress\ndata: {"stage": "generating", "message": "..."}\n\n')
                    h.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                return
        h.send_response(status)
        h.send_header("Content-Type", kind)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _trickle(self, h: BaseHTTPRequestHandler) -> None:
        """A reply that never ends: a header line, or a byte of the body, every 0.3 s."""
        out = h.wfile
        try:
            out.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            if self.mode == "trickle-body":
                out.write(b"Content-Length: 100000\r\n\r\n")
            for k in range(100000):
                out.write(b" " if self.mode == "trickle-body" else b"X-%d: 1\r\n" % k)
                out.flush()
                time.sleep(0.3)
        except OSError:
            return

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def clip(tmp_path: Path) -> Path:
    return make_video(tmp_path / "c.mp4", duration_s=1.0, fps=5.0, size_wh=(64, 48)).path


def _env(data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORD_")}
    return {**env, "CHORD_DATA_DIR": str(data), "CHORD_API_KEY": KEY, **extra}


STRANGERS = [  # each a real CLI process, about 1 s (the endless stream: the 2 s wait)
    ("html", "text/html, not JSON"),
    ("nojob", "no Chord job id (none)"),
    ("dotdot", "no Chord job id ('../../etc/passwd')"),
    ("redirect", "it redirected (302)"),
    ("events", "did not end within 2 s"),
    ("trickle-body", "its reply did not arrive whole within 2 s (CHORD_REMOTE_REPLY_S)"),
    ("trickle-headers", "its reply did not arrive whole within 2 s (CHORD_REMOTE_REPLY_S)"),
]


@pytest.mark.parametrize("mode,says", STRANGERS)
def test_a_server_that_is_not_chord_is_a_clear_error_in_bounded_time(
        tmp_path: Path, clip: Path, mode: str, says: str) -> None:
    stranger = Listener(mode)
    try:
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "chord_core", "describe", str(clip),
                              "--server", stranger.url, "--model", "test"], cwd=ROOT,
                             env=_env(tmp_path / "data", CHORD_REMOTE_WAIT_S="2",
                                      CHORD_REMOTE_REPLY_S="2"),
                             capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
    finally:
        stranger.close()
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and says in out.stderr, out.stderr
    assert "hint:" in out.stderr and out.stdout == ""
    assert took < 30
    if mode == "dotdot":  # the bad id was never used in a URL
        assert not any(".." in path for _, path, _ in stranger.seen)


def test_a_server_url_that_is_not_http_is_refused(tmp_path: Path, clip: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "chord_core", "describe", str(clip),
                          "--server", "file:///etc", "--model", "test"], cwd=ROOT,
                         env=_env(tmp_path / "data"), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "is not an http(s) URL" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def _plant(data: Path, url: str, pid: int, mode: int = 0o600, token: str = "") -> Path:
    data.mkdir(parents=True, exist_ok=True)
    path = data / "service.json"
    path.write_text(json.dumps({"url": url, "pid": pid, "model": "test",
                                "token": token or "ab" * 32}))
    os.chmod(path, mode)
    return path


def _runs_here(data: Path, clip: Path) -> str:
    """Start the real CLI, wait until it says the clip runs here (or it reaches a service),
    stop it there (the local model load is not what is tested); its stderr so far."""
    proc = subprocess.Popen([sys.executable, "-m", "chord_core", "describe", str(clip),
                             "--model", "test"], cwd=ROOT, env=_env(data),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "the clip runs here" in line or "running on the Chord service" in line:
                break
    finally:
        proc.kill()
        proc.wait(10)
    return "".join(lines)


@pytest.fixture()
def decoy():
    """A process whose command line reads like a service (``… chord_core … serve``)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             "chord_core", "serve"])
    yield proc.pid
    proc.kill()
    proc.wait(5)


PLANTED = [  # each a real CLI process, stopped once it said where the clip runs (about 1 s)
    ("loose-mode", "other users may read or change it (mode 644)"),
    ("shared-folder", "other users may write to its folder (mode 777)"),
    ("not-chord-pid", "is not a Chord service (its command is"),
    ("no-proof", "could not prove it is the one that wrote service.json"),
]


@pytest.mark.parametrize("case,says", PLANTED)
def test_a_planted_service_file_gets_neither_the_key_nor_the_clip(
        tmp_path: Path, clip: Path, decoy: int, case: str, says: str) -> None:
    stranger = Listener("fakeproof")
    data = tmp_path / "data"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        pid = sleeper.pid if case == "not-chord-pid" else decoy
        _plant(data, stranger.url, pid, 0o644 if case == "loose-mode" else 0o600)
        if case == "shared-folder":
            os.chmod(data, 0o777)
        said = _runs_here(data, clip)
    finally:
        sleeper.kill()
        sleeper.wait(5)
        stranger.close()
    assert says in said, said
    assert "Traceback" not in said
    assert not any(auth for _, _, auth in stranger.seen), stranger.seen  # no key sent
    assert not any(method == "POST" for method, _, _ in stranger.seen)  # no clip sent
    if case == "no-proof":  # asked to prove itself, with a challenge, and nothing more
        assert [path.split("?")[0] for _, path, _ in stranger.seen] == ["/v1/identity"]


def test_the_real_service_proves_its_token_and_no_other(server) -> None:
    doc, why = discovery.find_service(server.data)
    assert doc is not None, why
    assert discovery.verify(doc["url"], doc["token"]) == ""
    assert "could not prove" in discovery.verify(doc["url"], "cd" * 32)
    assert (discovery.discovery_path(server.data).stat().st_mode & 0o777) == 0o600


NOBODY = 65534
FOREIGN = [
    ("foreign-file", f"it belongs to another user (uid {NOBODY})"),
    ("foreign-folder", f"its folder belongs to another user (uid {NOBODY})"),
]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user needs root")
@pytest.mark.parametrize("case,says", FOREIGN)
def test_a_service_file_of_another_user_is_refused_before_any_request(
        tmp_path: Path, clip: Path, decoy: int, case: str, says: str) -> None:
    """A ``service.json`` of another user (uid 65534, ``nobody``), or one of ours in a folder
    of another user (who could replace it): the real CLI says whose it is and runs the clip
    itself; the port it names is never even asked (no identity check, no key, no clip)."""
    stranger = Listener("fakeproof")
    data = tmp_path / "data"
    try:
        path = _plant(data, stranger.url, decoy)  # 0600, an otherwise well-formed file
        os.chmod(data, 0o755)  # no one else may write: only the owner is wrong
        os.chown(path if case == "foreign-file" else data, NOBODY, NOBODY)
        said = _runs_here(data, clip)
    finally:
        stranger.close()
    assert f"{path} is not trusted: {says}" in said, said
    assert "no key or clip is sent to it, the clip runs here" in said
    assert "Traceback" not in said
    assert stranger.seen == []  # refused on the file alone: nothing was sent to its port

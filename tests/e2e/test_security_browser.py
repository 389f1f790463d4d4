"""Security against the real server (issue 11): a foreign Host or Origin cannot open the app's
WebSocket (DNS rebinding), and in a real browser a canary outside the media roots typed into
the path box or the Batch folder box is never served at any ``/media/…`` URL the pages
expose, while no page load reaches a host other than 127.0.0.1. Only 127.0.0.1 traffic."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
START_TIMEOUT_S = 90.0
CANARY = b"-----BEGIN PGP PRIVATE KEY BLOCK-----\nCHORD-CANARY-e2e\n" * 40


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """``streamlit run app.py`` as shipped (.streamlit/config.toml) with one media root that
    holds a clip, and a private folder outside it with canaries (an ANSI-openable text file
    and a real video)."""
    from chord_core.testing.videos import make_video

    tmp = tmp_path_factory.mktemp("sec")
    roots, outside = tmp / "roots", tmp / "outside"
    roots.mkdir()
    outside.mkdir(mode=0o700)
    (outside / "secret.asc").write_bytes(CANARY)
    make_video(outside / "private.mp4", duration_s=1.0, fps=10.0, size_wh=(160, 120), seed=7)
    make_video(roots / "ok.mp4", duration_s=1.0, fps=10.0, size_wh=(160, 120), seed=3)
    (roots / "link.mp4").symlink_to(outside / "private.mp4")
    port = _free_port()
    env = dict(os.environ, CHORD_MODEL="test", CHORD_CACHE_DIR=str(tmp / "cache"),
               CHORD_DATA_DIR=str(tmp / "data"), HF_HUB_OFFLINE="1",
               CHORD_MEDIA_ROOTS=str(roots))
    log = (tmp / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"app did not start: {(tmp / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield {"url": url, "port": port, "roots": roots, "outside": outside}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _handshake(port: int, host: str, origin: str | None = None) -> str:
    """The status line of a raw WebSocket handshake on the app's stream endpoint."""
    lines = ["GET /_stcore/stream HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
             "Sec-WebSocket-Version: 13"] + ([f"Origin: {origin}"] if origin else [])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return s.recv(4096).split(b"\r\n")[0].decode()


@pytest.mark.parametrize(("host", "origin", "status"), [
    ("localhost:{port}", None, 101),
    ("127.0.0.1:{port}", "http://127.0.0.1:{port}", 101),
    ("[::1]:{port}", None, 101),
    ("rebind.example:{port}", None, 403),
    ("rebind.example:{port}", "http://rebind.example:{port}", 403),
    ("127.0.0.1:{port}", "http://rebind.example:{port}", 403),
    ("localhost.rebind.example", None, 403),
], ids=["localhost", "same-origin", "ipv6", "foreign-host", "foreign-both", "foreign-origin",
        "suffix-trick"])
def test_websocket_refuses_foreign_host_and_origin(secured: dict[str, object], host: str,
                                                   origin: str | None, status: int) -> None:
    port = int(secured["port"])
    line = _handshake(port, host.format(port=port), origin and origin.format(port=port))
    assert line.split()[1] == str(status), line


def test_start_service_adds_host_and_chord_allowed_hosts(tmp_path: Path) -> None:
    """start_service.sh passes --host and CHORD_ALLOWED_HOSTS on; other names stay refused."""
    port = _free_port()
    env = dict(os.environ, CHORD_MODEL="test", CHORD_DATA_DIR=str(tmp_path / "data"),
               CHORD_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1",
               CHORD_ALLOWED_HOSTS="chord.test, *.lan.test")
    with (tmp_path / "server.log").open("w") as log:
        proc = subprocess.Popen([str(ROOT / "start_service.sh"), "--no-install", "--host",
                                 "127.0.0.1", "--port", str(port)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _healthy(url):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    (tmp_path / "server.log").read_text()[-2000:]
                time.sleep(0.5)
            got = {h: _handshake(port, f"{h}:{port}").split()[1]
                   for h in ("127.0.0.1", "chord.test", "box.lan.test", "rebind.example")}
            assert got == {"127.0.0.1": "101", "chord.test": "101", "box.lan.test": "101",
                           "rebind.example": "403"}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.mark.e2e
def test_canary_never_served_and_nothing_external(secured: dict[str, object]) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium package")
    sync_api = pytest.importorskip("playwright.sync_api")
    url, roots, outside = str(secured["url"]), Path(secured["roots"]), Path(secured["outside"])
    requested: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1400})
            page.set_default_timeout(60_000)
            page.on("request", lambda r: requested.append(r.url))
            page.goto(url)
            page.get_by_role("heading", name="Analyze a clip").wait_for()
            box = page.get_by_role("textbox", name="…or the path of a video on this machine")
            for typed in (outside / "secret.asc", outside / "private.mp4", roots / "link.mp4",
                          roots / ".." / "outside" / "private.mp4"):
                box.fill(str(typed))
                box.press("Enter")
                page.get_by_text("is not a video file under the media roots").wait_for()
                assert page.locator("[data-testid=stVideo]").count() == 0
            box.fill(str(roots / "ok.mp4"))  # the control: a clip under the root is served
            box.press("Enter")
            page.locator("[data-testid=stVideo]").first.wait_for()
            media = _media_urls(page)
            page.goto(f"{url}/batch")
            folder = page.get_by_role("textbox", name="…and/or a folder on this machine")
            folder.fill(str(outside))
            folder.press("Enter")
            page.get_by_text("is not a folder under the media roots").wait_for()
            media |= _media_urls(page)
        finally:
            browser.close()
    media |= {u for u in requested if "/media/" in u}
    assert media, "the control clip should have produced a /media/ URL"
    private = (outside / "private.mp4").read_bytes()
    for u in media:
        with urllib.request.urlopen(u, timeout=10) as r:
            body = r.read()
        assert b"CHORD-CANARY" not in body and body != private, u
    assert any(body == (roots / "ok.mp4").read_bytes() for body in _bodies(media))
    external = [u for u in requested if not u.startswith(("http://127.0.0.1", "data:", "blob:"))]
    assert not external, f"page loads reached other hosts: {external[:5]}"


def _media_urls(page: object) -> set[str]:
    srcs = page.eval_on_selector_all("video, img, source, a",
                                     "els => els.map(e => e.src || e.href || '')")
    return {s for s in srcs if "/media/" in s}


def _bodies(urls: set[str]) -> list[bytes]:
    out = []
    for u in urls:
        with urllib.request.urlopen(u, timeout=10) as r:
            out.append(r.read())
    return out

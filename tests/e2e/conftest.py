"""Fixtures for the browser tests: a real ``streamlit run app.py`` on a free port with the test
model, and headless Debian Chromium driven by Playwright (never ``playwright install``)."""

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
from e2e_browser import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
START_TIMEOUT_S = 90.0


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
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path | str]]:
    """Start the app with CHORD_MODEL=test and temp cache/data dirs; stop it afterwards.
    Yields its ``url``, ``data`` dir (the store, uploads, exports) and server ``log``."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium package to run e2e tests")
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) not installed")
    tmp = tmp_path_factory.mktemp("e2e")
    port = _free_port()
    # the tests' own folders are the media roots a user would configure for their videos
    # tests/app's session fixture keeps its settings in the environment until the session
    # ends (one CPU worker, its engine stand-in): the app started here must not take them
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("CHORD_CPU_WORKERS", "CHORD_TEST_ENGINE_MODE")}
    env = dict(inherited, CHORD_MODEL="test", CHORD_CACHE_DIR=str(tmp / "cache"),
               CHORD_DATA_DIR=str(tmp / "data"), HF_HUB_OFFLINE="1",
               CHORD_MEDIA_ROOTS=str(tmp_path_factory.getbasetemp()))
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
                pytest.fail(f"app did not start (exit {proc.poll()}); log: "
                            f"{(tmp / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield {"url": url, "data": tmp / "data", "log": tmp / "server.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def app_url(app_server: dict[str, Path | str]) -> str:
    return str(app_server["url"])


@pytest.fixture(scope="module")
def browser(app_url: str) -> Iterator[object]:
    """Headless system Chromium, once per test module (after the module's app is up)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                               headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def browser_page(browser: object) -> Iterator[object]:
    """A page 1440×1800 (tall: Streamlit scrolls inside the page, so full-page screenshots
    only show the viewport)."""
    page = browser.new_page(viewport={"width": 1440, "height": 1800})
    page.set_default_timeout(60_000)
    yield page


@pytest.fixture(scope="session")
def e2e_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from chord_core.testing.videos import make_video

    path = tmp_path_factory.mktemp("e2e-clips") / "green-square.mp4"
    make_video(path, duration_s=4.0, fps=10.0, size_wh=(480, 270))
    return path


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS

"""Fixtures for the Streamlit AppTest tests: one job manager with worker processes for the
whole session, the test model, temp data dirs, a clip, polling.

The app's job manager (``chord_ui.resources.cluster``, a ``st.cache_resource``) is created
once, here, with one CPU worker running ``chord_fake_worker.worker_main`` — the real worker
with a switchable engine (``truth_engine`` / ``slow_engine`` below). Every AppTest shares it,
as every browser session shares it in a real server. At the end of the session it is shut
down and no worker process may be left alive.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import chord_fake_worker as fake
import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
RESULT_TIMEOUT_S = 240.0
WORKER_START_TIMEOUT_S = 240.0
IDLE_TIMEOUT_S = 15.0


@pytest.fixture(scope="session")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """Start the app's job manager (1 CPU worker, CHORD_MODEL=test) and its store in a
    session data dir; shut it down at the end and check that no worker process leaked."""
    import psutil

    import chord_core.runtime.executors as executors_module
    from chord_ui import resources

    base = tmp_path_factory.mktemp("app-server")
    cache = tmp_path_factory.getbasetemp() / "app-cache"
    cache.mkdir(exist_ok=True)
    mp = pytest.MonkeyPatch()
    for name, value in {"CHORD_MODEL": "test", "CHORD_CPU_WORKERS": "1",
                        "CHORD_CACHE_DIR": str(cache), "CHORD_DATA_DIR": str(base / "data"),
                        fake.MODE_ENV: str(base / "engine-mode")}.items():
        mp.setenv(name, value)
    mp.setattr(executors_module, "worker_main", fake.worker_main)
    fake.set_mode("real")
    pids: set[int] = set()
    manager = None
    try:
        manager = resources.cluster().manager
        manager.wait_ready(WORKER_START_TIMEOUT_S)
        assert manager.model_state()["state"] == "ready", manager.model_state()
        yield {"manager": manager, "store": resources.store()}
    finally:
        if manager is not None:  # restarted workers have new pids: collect them last
            pids = {int(w["pid"]) for w in manager.workers() if w["pid"]}
        resources.cluster.clear()  # on_release shuts the workers down
        mp.undo()
    alive = [p for p in pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"worker processes left running after shutdown: {alive}"


def settle(manager: object, timeout: float = IDLE_TIMEOUT_S) -> None:
    """Cancel whatever a test left running and wait until the workers are idle."""
    for status in manager.jobs():
        if not status.state.finished:
            manager.cancel(status.job_id)
    deadline = time.monotonic() + timeout
    while any(w["job"] for w in manager.workers()) and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture()
def app_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, app_server: dict[str, object],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """CHORD_MODEL=test, a per-test data dir (uploads, exports) and one model cache; the
    shared manager is left idle and on the real engine afterwards."""
    cache = tmp_path_factory.getbasetemp() / "app-cache"
    data = tmp_path / "data"
    monkeypatch.setenv("CHORD_MODEL", "test")
    monkeypatch.setenv("CHORD_CACHE_DIR", str(cache))
    monkeypatch.setenv("CHORD_DATA_DIR", str(data))
    # typed paths are read only under the media roots: the tests' clips live in pytest's temp
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(tmp_path_factory.getbasetemp()))
    monkeypatch.chdir(ROOT)
    yield {"cache": cache, "data": data}
    fake.set_mode("real")
    settle(app_server["manager"])


@pytest.fixture(scope="session")
def app_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-second synthetic H.264 clip (moving green square), made once for the session."""
    from chord_core.testing.videos import make_video

    path = tmp_path_factory.mktemp("app-clips") / "square.mp4"
    make_video(path, duration_s=3.0, fps=10.0, size_wh=(320, 240))
    return path


@pytest.fixture()
def new_app(app_env: dict[str, Path]) -> Callable[[], object]:
    """Factory: a fresh AppTest of app.py (the Analyze page is the default)."""
    from streamlit.testing.v1 import AppTest

    def make() -> AppTest:
        return AppTest.from_file(APP, default_timeout=120)

    return make


@pytest.fixture()
def poll() -> Callable[..., object]:
    """``poll(at, done, timeout=…)``: see ``poll_app``."""
    return poll_app


def poll_app(at: object, done: Callable[[object], bool], timeout: float = RESULT_TIMEOUT_S,
             every: float = 0.5) -> object:
    """Rerun ``at`` until ``done(at)`` holds — AppTest runs scripts synchronously, so the
    worker processes make progress between reruns. Fails with what the page last showed."""
    deadline = time.monotonic() + timeout
    while True:
        at.run()
        if at.exception:
            pytest.fail(f"page raised: {[e.value for e in at.exception]}")
        if done(at):
            return at
        if time.monotonic() > deadline:
            shown = [m.value for m in at.markdown] + [e.value for e in at.error]
            pytest.fail(f"timed out after {timeout} s; page showed: {shown[-12:]}")
        time.sleep(every)


@pytest.fixture()
def truth() -> Callable[..., object]:
    """``truth(request)`` → the ground-truth Result ``truth_engine`` answers with."""
    return fake.truth_result


@pytest.fixture()
def truth_engine(app_env: dict[str, Path]) -> None:
    """Make the workers answer grounding requests with the clip's ground truth."""
    fake.set_mode("truth")


@pytest.fixture()
def slow_engine(app_env: dict[str, Path]) -> None:
    """Make the workers 'work' for up to 60 s, reporting frames, until cancelled."""
    fake.set_mode("slow")


@pytest.fixture(autouse=True)
def _main_module_restored() -> Iterator[None]:
    """Streamlit's script runner installs the page script as ``sys.modules["__main__"]`` and
    never puts the old one back. multiprocessing's spawn re-runs ``__main__.__file__`` in every
    child, so after an ``AppTest.from_function`` test (a temp script that only runs inside
    AppTest) every later worker, reader pool and request reader of the session died at start
    ("name '__args' is not defined"). Each app test gets the session's ``__main__`` back."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main

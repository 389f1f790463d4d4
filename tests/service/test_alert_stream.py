"""Alerts stored by another process reach a service's alert stream at once: the writer (a
real ``python`` process on the same store, as a ``watch`` command is) announces each alert
in the store's signal file, the service's stream is woken by the file event. The periodic
re-read is set to two minutes here, so only the signal can deliver within the test's wait.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from service_server import free_port

from chord_core.runtime.store import Store

ROOT = Path(__file__).resolve().parents[2]
WRITER = """
import sys
from chord_core.library.alerts import store_alert
from chord_core.library.index import LibraryIndex
index = LibraryIndex(sys.argv[1])
n = int(sys.argv[2])
print(store_alert(index, "w-other", {"clip_key": f"k{n}", "statement": "a van parks",
                  "path": f"/media/yard/clip{n}.mp4", "job_id": f"j{n}"},
                  {"start_s": 1.0, "end_s": 2.5, "probability": 0.91, "evidence": []}))
"""


def _write_elsewhere(db: Path, n: int) -> int:
    done = subprocess.run([sys.executable, "-c", WRITER, str(db), str(n)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout.strip())


@pytest.fixture
def service(tmp_path, monkeypatch):
    import uvicorn

    from chord_core.service import alert_stream
    from chord_core.service.app import create_app
    from chord_core.service.runtime import ServiceRuntime
    from chord_core.service.settings import ServiceSettings

    monkeypatch.setattr(alert_stream, "ALERT_FALLBACK_S", 120.0)
    monkeypatch.setattr(alert_stream, "ALERT_RECHECK_S", 120.0)
    store = Store(tmp_path / "chord.sqlite3")
    port = free_port()
    app = create_app(ServiceRuntime(manager=None, store=store), ServiceSettings(port=port))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", tmp_path / "chord.sqlite3"
    srv.should_exit = True
    thread.join(10)
    store.close()


def _read_events(url: str, out: queue.Queue) -> None:
    with httpx.stream("GET", url + "/v1/alerts/events", params={"timeout": 60},
                      timeout=90) as r:
        got = 0
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: {}":
                out.put(json.loads(line[6:]))
                got += 1
            if got == 2:
                return  # hangs up: Starlette cancels the stream
    out.put(None)


def test_an_alert_stored_by_another_process_reaches_the_stream_at_once(service):
    url, db = service
    first = _write_elsewhere(db, 1)  # before the stream: its first read sends it
    events: queue.Queue = queue.Queue()
    threading.Thread(target=_read_events, args=(url, events), daemon=True).start()
    got = events.get(timeout=30)
    assert got["id"] == first and got["watch"] == "w-other"
    # the stream now waits (its re-read is two minutes away); another process stores one
    started = time.monotonic()
    second = _write_elsewhere(db, 2)
    got = events.get(timeout=30)  # woken by the signal file, not the re-read
    assert got is not None and got["id"] == second, got
    assert got["path"] == "/media/yard/clip2.mp4" and got["probability"] == 0.91
    print(f"delivered {time.monotonic() - started:.2f} s after the writer started")
    assert (db.parent / "chord.sqlite3-signals" / "alerts").read_text().strip() == str(second)


def test_the_signal_wakes_a_listener_in_this_process_too(tmp_path):
    from chord_core.library.alert_signal import announce, listen

    woken = threading.Event()
    db = tmp_path / "chord.sqlite3"
    assert listen(db, woken.set) is True
    assert listen(db, woken.set) is True  # one observer per store: a second call is free
    announce(db, 7)
    assert woken.wait(10)

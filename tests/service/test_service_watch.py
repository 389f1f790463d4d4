"""``CHORD_WATCH`` in ``serve``: a real service process (a CPU worker, the tiny model) with a
watched folder. A file whose name is not valid UTF-8 is skipped with a message and does not
stop the watch (it used to kill the watch thread while ``/health`` said 200); a clip dropped
after it is analysed once, by the service's own job manager, and found by
``GET /v1/search``; after a restart of the service the folder's rescan takes nothing again."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from service_server import start_server, stop_server

from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow


def _rows(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # the watch tables are not made yet
            return []


def _wait_watch_state(db: Path, state: str, log: Path, timeout: float = 180) -> list[tuple]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _rows(db, "SELECT path, state, job_id FROM library_watch_files")
        if rows and all(r[1] == state for r in rows):
            return rows
        time.sleep(0.3)
    raise AssertionError(f"watch rows {_rows(db, 'SELECT * FROM library_watch_files')}; "
                         f"log: {log.read_text()[-3000:]}")


def test_a_clip_dropped_in_a_chord_watch_folder_is_analysed_once(tmp_path):
    folder = tmp_path / "media" / "cams"
    folder.mkdir(parents=True)
    env = {"CHORD_WATCH": f"{folder}|describe"}
    args = ("--cpu-workers", "1")
    server = start_server(tmp_path, *args, env=env)
    db = server.data / "chord.sqlite3"
    try:
        bad = make_video(tmp_path / "bad.mp4", duration_s=1.0, fps=5.0, size_wh=(96, 72),
                         seed=4).path
        os.replace(bad, os.path.join(os.fsencode(folder), b"caf\xe9-cam.mp4"))
        deadline = time.monotonic() + 60
        while "not valid UTF-8" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.3)
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        src = make_video(tmp_path / "incoming.mp4", duration_s=1.0, fps=5.0,
                         size_wh=(96, 72), seed=3).path
        os.replace(src, folder / "gatecam.mp4")  # dropped in whole, as a mover does
        [(path, _, job_id)] = _wait_watch_state(db, "done", server.log)
        assert Path(path).name == "gatecam.mp4"
        with httpx.Client(base_url=server.url, timeout=30) as c:
            job = c.get(f"/v1/jobs/{job_id}").json()
            assert job["state"] == "done" and job["task"] == "describe", job
            hits = c.get("/v1/search", params={"q": "gatecam"}).json()["hits"]
            assert {h["source"] for h in hits} == {job_id}
    finally:
        stop_server(server)
    server = start_server(tmp_path, *args, env=env)  # the same data folder, started again
    try:
        time.sleep(7)  # past the 5 s settle time of its first rescan: the clip is known
    finally:
        stop_server(server)
    assert _rows(db, "SELECT COUNT(*) FROM jobs WHERE video_name = 'gatecam.mp4'") == [(1,)]
    assert _rows(db, "SELECT state, job_id FROM library_watch_files") == [("done", job_id)]

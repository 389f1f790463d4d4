"""``CHORD_WATCH`` in the app: a real ``streamlit run app.py`` started with a watched folder
(the tiny model, the app's own job manager). The first page load starts the watch (once per
server); a clip dropped in the folder is analysed once, and reloading the page (the script
runs again) starts no second watcher and takes nothing twice."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from chord_core.testing.videos import make_video

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def watched_folder(tmp_path_factory: pytest.TempPathFactory):
    """A folder under the e2e media root, named in CHORD_WATCH while this module's app
    starts (the app inherits this process's environment); put back afterwards."""
    folder = tmp_path_factory.mktemp("watched")
    before = os.environ.get("CHORD_WATCH")
    os.environ["CHORD_WATCH"] = f"{folder}|describe"
    yield folder
    if before is None:
        os.environ.pop("CHORD_WATCH", None)
    else:
        os.environ["CHORD_WATCH"] = before


@pytest.fixture(scope="module")
def app_server(watched_folder, app_server):  # noqa: ANN001 — the conftest's, started after
    return app_server


def _rows(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # the watch tables are not made yet
            return []


def _wait_done(db: Path, log: Path, timeout: float = 180) -> list[tuple]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _rows(db, "SELECT path, state, job_id FROM library_watch_files")
        if rows and all(r[1] in ("done", "error") for r in rows):
            return rows
        time.sleep(0.3)
    raise AssertionError(f"watch rows {rows}; log: {Path(log).read_text()[-3000:]}")


def test_a_clip_dropped_in_the_apps_watch_folder_is_analysed_once(
        app_server, app_url, browser_page, watched_folder, tmp_path):
    page = browser_page
    page.goto(app_url)
    page.get_by_role("heading", name="Analyze a clip").wait_for()
    src = make_video(tmp_path / "incoming.mp4", duration_s=1.0, fps=5.0, size_wh=(96, 72),
                     seed=5).path
    os.replace(src, watched_folder / "dockcam.mp4")  # dropped in whole
    db = Path(app_server["data"]) / "chord.sqlite3"
    [(path, state, job_id)] = _wait_done(db, Path(app_server["log"]))
    assert (Path(path).name, state) == ("dockcam.mp4", "done")
    assert _rows(db, f"SELECT state, task FROM jobs WHERE job_id = '{job_id}'") == [
        ("done", "describe")]
    page.reload()  # the script runs again: the watch it started is reused, not doubled
    page.get_by_role("heading", name="Analyze a clip").wait_for()
    time.sleep(7)  # past the 5 s settle time of a rescan
    assert _rows(db, "SELECT COUNT(*) FROM jobs WHERE video_name = 'dockcam.mp4'") == [(1,)]
    assert _rows(db, "SELECT state FROM library_watch_files") == [("done",)]

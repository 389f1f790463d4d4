"""``CHORD_WATCH`` with standing checks in the app, as a new user sets it up: a real
``streamlit run app.py`` started with a watched folder, a statement (``CHORD_WATCH_CHECKS``)
and a hook (``CHORD_WATCH_HOOK``); the tiny model in the app's own model worker. The one
thing faked is the scorer at the model boundary (``fake_scorer_site/sitecustomize.py``: the
green square in the left third "entails" the statement), in every process the app starts.

A clip dropped in the folder is described once, checked once, and its alert fires **in the
app**: a toast on the open page, the Library's alerts section with the hook's run. Only the
app's own process watches (a model worker re-runs ``app.py`` when spawned: it must not), so
reloading the page or the worker's start takes nothing twice."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

import psutil
import pytest

from chord_core.testing.videos import make_video

expect = pytest.importorskip("playwright.sync_api", reason="playwright not installed").expect

pytestmark = pytest.mark.e2e
STATEMENT = "the green square is on the left"
FAKE_SITE = Path(__file__).resolve().parent / "fake_scorer_site"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def watched_folder(tmp_path_factory: pytest.TempPathFactory):
    """A folder under the e2e media root, named in CHORD_WATCH (with a statement, a hook and
    the fake scorer on the path) while this module's app starts; put back afterwards."""
    folder = tmp_path_factory.mktemp("watched")
    hook = f"{sys.executable} -c \"print('paged the guard')\""
    names = ("CHORD_WATCH", "CHORD_WATCH_CHECKS", "CHORD_WATCH_HOOK", "PYTHONPATH",
             "CHORD_API_KEY")
    before = {k: os.environ.get(k) for k in names}
    os.environ.update(CHORD_WATCH=f"{folder}|describe", CHORD_WATCH_CHECKS=STATEMENT,
                      CHORD_WATCH_HOOK=hook,
                      PYTHONPATH=os.pathsep.join([str(FAKE_SITE), str(ROOT)]))
    yield folder
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


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


def _wait(db: Path, log: Path, sql: str, ok, timeout: float = 240) -> list[tuple]:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    rows: list[tuple] = []
    while time.monotonic() < deadline:
        rows = _rows(db, sql)
        if ok(rows):
            return rows
        time.sleep(0.3)
    raise AssertionError(f"{sql}: {rows}; checks "
                         f"{_rows(db, 'SELECT * FROM library_alert_checks')}; "
                         f"log: {Path(log).read_text()[-3000:]}")


def test_a_clip_dropped_in_the_apps_watch_folder_fires_its_alert_in_the_app(
        app_server, app_url, browser_page, watched_folder, tmp_path):
    page = browser_page
    page.goto(app_url)
    page.get_by_role("heading", name="Analyze a clip").wait_for()
    page.wait_for_timeout(1500)  # the toast check has noted what this session has seen
    src = make_video(tmp_path / "incoming.mp4", duration_s=2.0, fps=5.0, size_wh=(192, 108),
                     seed=5).path  # the square starts at the left: the statement holds
    os.replace(src, watched_folder / "dockcam.mp4")  # dropped in whole
    db, log = Path(app_server["data"]) / "chord.sqlite3", Path(app_server["log"])
    [(path, state, job_id)] = _wait(db, log, "SELECT path, state, job_id FROM "
                                    "library_watch_files", lambda r: r and r[0][1] != "claimed"
                                    and r[0][1] != "submitted")
    assert (Path(path).name, state) == ("dockcam.mp4", "done")
    assert _rows(db, f"SELECT state, task FROM jobs WHERE job_id = '{job_id}'") == [
        ("done", "describe")]
    # the check ran in the app's worker and fired: the toast on the open page
    toast = page.locator("[data-testid=stToast]", has_text="dockcam.mp4")
    toast.wait_for(timeout=180_000)
    assert STATEMENT in toast.inner_text()
    [(statement, owner)] = _rows(db, "SELECT statement, owner FROM library_alert_checks "
                                     "WHERE state = 'done'")
    assert statement == STATEMENT
    # claimed under the app's own lease: the server this test started (its parent is this
    # process), not a model worker (whose parent is the server)
    [(pid,)] = _rows(db, f"SELECT pid FROM owners WHERE owner_id = '{owner}'")
    assert psutil.Process(pid).ppid() == os.getpid(), (pid, log.read_text()[-2000:])
    text = log.read_text()  # and only the server started a job manager and a watcher
    assert text.count("job manager started") == 1, text[-4000:]
    assert text.count("chord_core.library.background: watching") == 1, text[-4000:]
    [(hook,)] = _wait(db, log, "SELECT outcome FROM library_hook_runs", lambda r: r)
    assert hook == "exit 0"
    page.goto(app_url + "/library")  # the alerts section: the alert and its hook's run
    card = page.locator("[class*=st-key-library-alert-]").first
    # the card's lines arrive one by one as the page's script runs: wait for each (read at
    # once, the card once had only its first line: a failure of the clean-clone slow tier)
    for part in ("dockcam.mp4", STATEMENT, "Hook: exit 0", "paged the guard"):
        expect(card).to_contain_text(part, timeout=60_000)
    page.reload()  # the script runs again: the watch it started is reused, not doubled
    page.get_by_role("heading", name="Library").wait_for()
    time.sleep(7)  # past the 5 s settle time of a rescan
    assert _rows(db, "SELECT COUNT(*) FROM jobs WHERE video_name = 'dockcam.mp4' GROUP BY "
                     "task ORDER BY task") == [(1,), (1,)]  # one describe, one entail
    assert _rows(db, "SELECT state FROM library_watch_files") == [("done",)]
    assert _rows(db, "SELECT COUNT(*) FROM library_alerts") == [(1,)]

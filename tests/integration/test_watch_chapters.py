"""``python -m chord_core watch DIR --task chapters`` as a real process (a CPU worker, the
tiny model): each settled clip becomes one chapters run, a parent job whose chunks are its
children in the store; the run's chapters are found by search; a restart does no clip
again and takes the clip added while it was down."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _start(media: Path, data: Path, folder: Path, log: Path) -> subprocess.Popen:
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data))
    return subprocess.Popen(
        [sys.executable, "-m", "chord_core", "watch", str(folder), "--task", "chapters",
         "--model", "test", "--cpu-workers", "1", "--settle-s", "1.0", "--rescan-s", "1.0"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("a"))


def _query(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # the tables are not made yet
            return []


def _wait_done(db: Path, names: set[str], log: Path, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = {Path(p).name: (s, j, e) for p, s, j, e in _query(
            db, "SELECT path, state, job_id, error FROM library_watch_files")}
        if names <= {n for n, r in rows.items() if r[0] in ("done", "error")}:
            return rows
        time.sleep(0.5)
    raise AssertionError(f"not done: {names}; log: {log.read_text()[-3000:]}")


def _runs(db: Path) -> dict[str, tuple[str, str, int]]:
    """Chapters runs by clip: (run id, state, children)."""
    return {name: (job, state, _query(db, f"SELECT COUNT(*) FROM jobs WHERE parent = '{job}'"
                                          )[0][0])
            for job, name, state in _query(
                db, "SELECT job_id, video_name, state FROM jobs WHERE "
                    "json_extract(spec_json, '$.long_run') = 'chapters'")}


def test_each_clip_becomes_one_chapters_run_found_by_search(tmp_path, tiny_model_dir):
    from chord_core.library.index import LibraryIndex
    from chord_core.library.search import Filters, search

    media, data, log = tmp_path / "media", tmp_path / "data", tmp_path / "watch.log"
    folder, db = media / "lectures", data / "chord.sqlite3"
    folder.mkdir(parents=True)
    make_video(folder / "week1.mp4", duration_s=6.0, fps=5.0, size_wh=(96, 72), seed=1)
    proc = _start(media, data, folder, log)
    try:
        rows = _wait_done(db, {"week1.mp4"}, log)
    finally:
        proc.terminate()
        proc.wait(30)
    state, run, error = rows["week1.mp4"]
    assert state == "done" and run.startswith("lvc-"), (rows, log.read_text()[-2000:])
    runs = _runs(db)
    assert runs["week1.mp4"][:2] == (run, "done") and runs["week1.mp4"][2] >= 1, runs
    [(summary,)] = _query(db, f"SELECT summary_json FROM jobs WHERE job_id = '{run}'")
    doc = json.loads(summary)["document"]
    assert doc["schema"] == "chord.chapters/v1" and doc["chapters"]
    with LibraryIndex(db) as index:
        hits = search(index, "week1", filters=Filters(task="chapters"))["hits"]
    assert hits and {h["source"] for h in hits} == {run}
    assert hits[0]["kind"] == "chapter" and hits[0]["end_s"] <= 6.2

    make_video(folder / "week2.mp4", duration_s=4.0, fps=5.0, size_wh=(96, 72), seed=2)
    proc = _start(media, data, folder, log)  # again: week1 is not done twice
    try:
        _wait_done(db, {"week1.mp4", "week2.mp4"}, log)
        time.sleep(3)  # several rescans
    finally:
        proc.terminate()
        proc.wait(30)
    again = _runs(db)
    assert set(again) == {"week1.mp4", "week2.mp4"} and again["week1.mp4"] == runs["week1.mp4"]
    assert again["week2.mp4"][1] == "done"
    assert len(_query(db, "SELECT * FROM library_watch_files")) == 2

"""A watched clip swapped for a symlink to a file outside the media roots, before a
standing check's backfill, through real ``watch`` processes: the outside file is never
analysed. The first run describes the clip; the clip is then replaced by a link to a
"secret" video elsewhere; the second run (one statement more: a backfill of the clips done
before) claims the check, and the check's job is refused where the clip is opened (the
confined open, ``media/confined.py``): the check ends ``error`` with the reason, no job
reads the outside file, and the link itself is not taken as a new clip."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _watch(folder: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "chord_core", "watch", str(folder), "--once", "--settle-s",
         "0", "--model", "test", "--cpu-workers", "1", "--max-new-tokens", "4", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_a_clip_swapped_for_a_link_outside_before_its_backfill_is_not_analysed(tmp_path):
    media, data, outside = tmp_path / "media", tmp_path / "data", tmp_path / "outside"
    folder = media / "yard"
    folder.mkdir(parents=True)
    outside.mkdir()
    clip = make_video(folder / "gate.mp4", duration_s=1.0, fps=5.0, size_wh=(96, 72),
                      seed=1).path
    secret = make_video(outside / "secret.mp4", duration_s=1.0, fps=5.0, size_wh=(96, 72),
                        seed=9).path
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data))
    first = _watch(folder, env)
    assert f"done: {clip}" in first.stderr
    clip.unlink()
    clip.symlink_to(secret)  # swapped while no watcher ran
    _watch(folder, env, "--statement", "a person climbs the fence")
    db = data / "chord.sqlite3"
    with sqlite3.connect(db) as conn:
        checks = conn.execute("SELECT path, state, error, job_id FROM library_alert_checks"
                              ).fetchall()
        jobs = conn.execute("SELECT job_id, task, state, video_path FROM jobs").fetchall()
        results = {j for (j,) in conn.execute("SELECT job_id FROM results")}
        files = conn.execute("SELECT path, state FROM library_watch_files").fetchall()
    [(path, state, error, job_id)] = checks
    assert (path, state) == (str(clip), "error"), checks
    assert "not a file under the media roots" in error, error
    by_task = {task: (j, s) for j, task, s, _ in jobs}
    assert by_task["entail"] == (job_id, "failed")  # refused where it was opened
    assert job_id not in results  # nothing of the outside file was stored
    assert [p for *_, p in jobs if "secret" in p] == []
    assert files == [(str(clip), "done")]  # the link was not taken as a new clip
    assert len(results) == 1  # the one description of the real clip, before the swap

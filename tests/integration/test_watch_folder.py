"""A watched folder with real processes: ``python -m chord_core watch`` with a CPU worker and
the tiny model. Files appear over time, one is copied in slowly (a partial write), one is
not a video, one is renamed after it was analysed; the watcher is killed (-9) while a job
runs and started again. Each complete file is analysed exactly once: one job per content
in the store, one done row per file; the broken one has an error row saying why."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from typing import Any
from pathlib import Path

import pytest

from chord_core.testing.videos import make_text_as_mp4, make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _start(media: Path, data: Path, folder: Path, log: Path) -> subprocess.Popen:
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data))
    return subprocess.Popen(
        [sys.executable, "-m", "chord_core", "watch", str(folder), "--task", "describe",
         "--model", "test", "--cpu-workers", "1", "--settle-s", "1.0", "--rescan-s", "1.0",
         "--max-new-tokens", "8"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=log.open("a"))


def _rows(data: Path) -> dict[str, tuple[str, str]]:
    db = data / "chord.sqlite3"
    if not db.exists():
        return {}
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            rows = conn.execute("SELECT path, state, COALESCE(error, '') FROM "
                                "library_watch_files").fetchall()
        except sqlite3.OperationalError:
            return {}
    return {Path(p).name: (s, e) for p, s, e in rows}


def _wait(data: Path, want: dict[str, Any], log: Path, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _rows(data)
        if all(rows.get(n, ("",))[0] in ((s,) if isinstance(s, str) else s)
               for n, s in want.items()):
            return rows
        time.sleep(0.3)
    raise AssertionError(f"rows {_rows(data)} != {want}; log: {log.read_text()[-3000:]}")


def _slow_copy(src: Path, dst: Path, pieces: int = 6, pause_s: float = 0.4) -> None:
    """Write ``dst`` in pieces, pausing less than the settle time between them."""
    data = src.read_bytes()
    step = len(data) // pieces + 1
    with dst.open("wb") as f:
        for i in range(0, len(data), step):
            f.write(data[i:i + step])
            f.flush()
            time.sleep(pause_s)


def test_each_complete_file_is_analysed_exactly_once(tmp_path, tiny_model_dir):
    media, data, log = tmp_path / "media", tmp_path / "data", tmp_path / "watch.log"
    folder = media / "cams"
    folder.mkdir(parents=True)
    make_video(folder / "a.mp4", duration_s=1.0, fps=5.0, size_wh=(96, 72), seed=1)
    proc = _start(media, data, folder, log)
    try:
        _wait(data, {"a.mp4": "done"}, log)
        make_video(folder / "b.mp4", duration_s=1.0, fps=5.0, size_wh=(96, 72), seed=2)
        src = make_video(tmp_path / "c-src.mp4", duration_s=2.0, fps=5.0, size_wh=(96, 72),
                         seed=3).path
        _slow_copy(src, folder / "c.mp4")
        make_text_as_mp4(folder / "broken.mp4")
        rows = _wait(data, {"b.mp4": "done", "c.mp4": "done", "broken.mp4": "error"}, log)
        assert "video" in rows["broken.mp4"][1].lower(), rows["broken.mp4"]
        (folder / "a.mp4").rename(folder / "a-renamed.mp4")
        _wait(data, {"a-renamed.mp4": "done"}, log)  # the same content: its row follows
        # killed while a job runs, a file added while it is down, then started again
        # a longer clip, so the kill most often lands while its job runs; on a fast machine
        # it may be done already, and then the restart must not take it again either
        make_video(folder / "d.mp4", duration_s=20.0, fps=5.0, size_wh=(96, 72), seed=4)
        _wait(data, {"d.mp4": ("submitted", "done")}, log)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        make_video(folder / "e.mp4", duration_s=1.0, fps=5.0, size_wh=(96, 72), seed=5)
        proc = _start(media, data, folder, log)
        rows = _wait(data, {"d.mp4": "done", "e.mp4": "done"}, log)
        time.sleep(3)  # several rescans: nothing is taken again
    finally:
        proc.terminate()
        proc.wait(20)
    assert set(_rows(data)) == {"a-renamed.mp4", "b.mp4", "c.mp4", "broken.mp4", "d.mp4",
                                "e.mp4"}
    with sqlite3.connect(data / "chord.sqlite3") as conn:
        jobs = conn.execute("SELECT video_name, COUNT(*), SUM(state = 'done') FROM jobs "
                            "GROUP BY key").fetchall()
        results = conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    assert sorted(n for n, _, _ in jobs) == ["a.mp4", "b.mp4", "broken.mp4", "c.mp4",
                                             "d.mp4", "e.mp4"]
    assert all(count == 1 for _, count, _ in jobs), jobs  # one job per content, ever
    assert results == 5  # every complete file has its one result; the broken one none

"""``python -m chord_core watch --once`` as a real process, on files an attacker or a
careless user leaves in a watched folder: an empty (0-byte) file, a name that is not valid
UTF-8, a name holding a line break and an ESC sequence. Before, the first kept ``--once``
waiting forever (the empty file was "settling" again and again), the second killed the watch
thread, and the third printed a forged ``done:`` line (and sent ESC to the terminal). Now
each is said on one line (``skipped:``, control characters escaped), nothing is claimed for
them, and the command exits."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_watch_once_skips_an_empty_file_and_a_non_utf8_name_and_exits(tmp_path):
    media, data = tmp_path / "media", tmp_path / "data"
    folder = media / "cams"
    folder.mkdir(parents=True)
    (folder / "empty.mp4").write_bytes(b"")
    with open(os.path.join(os.fsencode(folder), b"caf\xe9.mp4"), "wb") as fh:
        fh.write(b"\x00" * 64)
    (folder / "evil\x1b[2J\ndone: forged.mp4").write_bytes(b"")
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data))
    done = subprocess.run(
        [sys.executable, "-m", "chord_core", "watch", str(folder), "--once", "--settle-s",
         "0", "--model", "test", "--cpu-workers", "1"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120, errors="replace")
    assert done.returncode == 0, done.stderr[-3000:]
    skipped = sorted(ln for ln in done.stderr.splitlines() if ln.startswith("skipped: "))
    assert len(skipped) == 3, done.stderr[-3000:]
    assert "caf\ufffd.mp4 (the name is not valid UTF-8" in skipped[0]
    assert skipped[1].startswith(f"skipped: {folder / 'empty.mp4'} (empty (0 bytes)")
    assert skipped[2].startswith(f"skipped: {folder}/evil\\x1b[2J\\ndone: forged.mp4 (")
    assert "\x1b" not in done.stderr and not any(
        ln.startswith("done:") for ln in done.stderr.splitlines())  # no forged line
    assert "Traceback" not in done.stderr
    with sqlite3.connect(data / "chord.sqlite3") as conn:
        assert conn.execute("SELECT COUNT(*) FROM library_watch_files").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)


@pytest.mark.slow
def test_a_folder_of_1500_new_files_is_claimed_whole(tmp_path):
    """The rescan is not a page's listing (stopped at 1,000: the last 500 files of a
    folder were never taken). Every file is claimed, in one transaction, in seconds."""
    import time

    media, data = tmp_path / "media", tmp_path / "data"
    folder = media / "cams"
    folder.mkdir(parents=True)
    for i in range(1500):
        (folder / f"cam-{i:05d}.mp4").write_bytes(b"not a video %d" % i)
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data))
    log = tmp_path / "watch.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "chord_core", "watch", str(folder), "--settle-s", "0",
         "--model", "test", "--cpu-workers", "1", "--rescan-s", "3600"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        deadline, count = time.monotonic() + 90, 0
        while count < 1500 and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                with sqlite3.connect(data / "chord.sqlite3", timeout=5) as conn:
                    count = conn.execute("SELECT COUNT(*) FROM library_watch_files"
                                         ).fetchone()[0]
            except sqlite3.OperationalError:  # not made yet
                continue
        assert count == 1500, log.read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("rescan_s", ["2", "0.7"], ids=["idle-equals-rescan", "rescan-faster"])
def test_idle_exit_ends_watch_when_rescans_find_nothing(tmp_path, rescan_s: str):
    """``--idle-exit S`` ends ``watch`` S seconds after the folder went idle, however often
    it is rescanned meanwhile: each rescan that found nothing re-armed the timer, so with S
    equal to the rescan period (the README's 30 s and 30 s) it never fired."""
    import time

    media, data = tmp_path / "media", tmp_path / "data"
    (media / "cams").mkdir(parents=True)
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data))
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "chord_core", "watch", str(media / "cams"), "--idle-exit", "2",
         "--rescan-s", rescan_s, "--model", "test", "--cpu-workers", "1"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=45, errors="replace")  # hung: fails here
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - t0 < 40, "watch did not end at its idle time"

"""Retention of the files clients sent (``<data dir>/uploads/api``), and the data dir's mode.

Uploads are content-named and shared by every job that sent the same bytes, so they cannot
go when one job ends. Before (issue 25) they were never removed: 2,417 files after one
probing session. Now a file is removed once it is older than ``CHORD_API_UPLOAD_RETENTION_H``
hours (storing the same bytes again renews it) and no unfinished job of this service reads
it. Left-over partial files (``.part-*``, ``.body-*`` of a request cut off by a crash) go
by the same age. ``0`` keeps everything.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobRunner

log = logging.getLogger(__name__)

MAX_SWEEP_INTERVAL_S = 300.0


def sweep_uploads(folder: Path, max_age_s: float, in_use: Iterable[str],
                  now: float | None = None) -> int:
    """Remove regular files in ``folder`` older than ``max_age_s`` that are not in
    ``in_use`` (resolved paths); returns how many went."""
    keep = {os.path.realpath(p) for p in in_use}
    cutoff = (time.time() if now is None else now) - max_age_s
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_mtime >= cutoff or \
                    os.path.realpath(entry.path) in keep:
                continue
            os.unlink(entry.path)
            removed += 1
        except FileNotFoundError:
            continue  # another sweep or a refused upload took it
    if removed:
        log.info("removed %d upload(s) older than %.3g h from %s", removed, max_age_s / 3600,
                 folder)
    return removed


def paths_in_use(manager: JobRunner) -> list[str]:
    """The input files of the manager's unfinished jobs."""
    return [st.spec.request.video_path for st in manager.jobs() if not st.state.finished]


class UploadSweeper:
    """A daemon thread that sweeps the uploads folder every so often (a quarter of the
    retention, at most every 5 minutes)."""

    def __init__(self, folder: Callable[[], Path], retention_h: float,
                 in_use: Callable[[], Iterable[str]]) -> None:
        self.folder, self.max_age_s, self.in_use = folder, retention_h * 3600.0, in_use
        self.interval_s = min(MAX_SWEEP_INTERVAL_S, max(0.5, self.max_age_s / 4))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "UploadSweeper":
        if self.max_age_s > 0:
            self._thread = threading.Thread(target=self._run, name="chord-upload-sweep",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                sweep_uploads(self.folder(), self.max_age_s, self.in_use())
            except Exception:  # a sweep that fails must never stop the service
                log.exception("sweeping old uploads failed; trying again later")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def warn_if_open(folder: Path) -> str | None:
    """A warning when ``folder`` (the data dir, which the operator may have made) lets
    other users in; Chord leaves its mode alone but says how to fix it."""
    try:
        mode = stat.S_IMODE(os.stat(folder).st_mode)
    except OSError:
        return None
    if not mode & 0o077:
        return None
    message = (f"warning: the data dir {folder} is open to other users (mode {mode:04o}); "
               f"uploads and the job store are private files, but their names show: "
               f"chmod 700 {folder}")
    log.warning("%s", message)
    return message

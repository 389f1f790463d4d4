"""Telling every process on a job store that an alert was stored, at once, without polling.

SQLite tells no one of a write, so an alerts stream in ``serve`` used to find an alert
stored by another process (a ``python -m chord_core watch`` on the same store) only when
it re-read the table, once a second. Now whoever stores an alert also writes its id to a
small **signal file** in a folder beside the store (``chord.sqlite3-signals/alerts``), and
each process that streams alerts watches that folder with ``watchdog`` (inotify on Linux:
the kernel wakes the stream; nothing loops). A watched folder of its own, not the data
folder: the database and its WAL change on every write and would wake the watcher each time.

``listen(db)`` starts the one observer of this process for that store (once; later calls
return at once) and says whether events are live; when they are not (no watchdog, an
inotify limit, a file system without events), the caller keeps its periodic re-read.
``announce(db, alert_id)`` is called after the alert's row is committed.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

SIGNAL_NAME = "alerts"
_lock = threading.Lock()
_observers: dict[Path, Any] = {}  # signal folder → its observer (None: no events there)


def signal_dir(db: str | Path) -> Path:
    """The folder of a store's signal files: beside the store, named after it."""
    db = Path(db)
    return db.with_name(db.name + "-signals")


def announce(db: str | Path, alert_id: int) -> None:
    """Say that alert ``alert_id`` is stored (after its commit). A failure is logged, not
    raised: the alert is stored, and streams still find it on their periodic re-read."""
    folder = signal_dir(db)
    try:
        private_signal_dir(folder)
        fd = os.open(folder / SIGNAL_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC |
                     os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fd, 0o600)  # one made before (0644 under umask 022) is tightened
            fh.write(f"{int(alert_id)}\n")
    except OSError as exc:
        log.warning("alert %s stored; streams in other processes were not woken (%s): they "
                    "find it on their next re-read", alert_id, exc)


def private_signal_dir(folder: Path) -> None:
    """The signal folder, made 0700 (``mkdir``'s mode is cut by the umask only, so under
    umask 000 it was 0777, under 022 0755: issue 40); a looser one found is tightened (it
    is Chord's own folder). Its file is 0600: which alert was stored last is the user's."""
    folder.mkdir(mode=0o700, exist_ok=True)
    if stat.S_IMODE(folder.stat().st_mode) & 0o077:
        os.chmod(folder, 0o700)


def listen(db: str | Path, wake: Callable[[], None]) -> bool:
    """Call ``wake()`` whenever any process announces an alert on the store ``db`` (one
    observer per store and process, started on the first call). True when events are live."""
    folder = signal_dir(db).resolve()
    with _lock:
        if folder not in _observers:
            _observers[folder] = _observe(folder, wake)
        return _observers[folder] is not None


def _observe(folder: Path, wake: Callable[[], None]) -> Any:
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:
        log.warning("watchdog is not installed: alert streams re-read the table instead")
        return None

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            if not event.is_directory and Path(str(event.src_path)).name == SIGNAL_NAME:
                wake()

    observer = Observer()
    try:
        private_signal_dir(folder)
        observer.schedule(Handler(), str(folder), recursive=False)
        observer.start()
    except OSError as exc:
        log.warning("no file events for %s (%s): alert streams re-read the table instead",
                    folder, exc)
        return None
    return observer

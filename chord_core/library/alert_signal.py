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
        folder.mkdir(exist_ok=True)
        (folder / SIGNAL_NAME).write_text(f"{int(alert_id)}\n")
    except OSError as exc:
        log.warning("alert %s stored; streams in other processes were not woken (%s): they "
                    "find it on their next re-read", alert_id, exc)


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
        folder.mkdir(exist_ok=True)
        observer.schedule(Handler(), str(folder), recursive=False)
        observer.start()
    except OSError as exc:
        log.warning("no file events for %s (%s): alert streams re-read the table instead",
                    folder, exc)
        return None
    return observer

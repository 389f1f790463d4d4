"""Watch folders: every new or changed video under a folder is analysed once, with the
folder's settings, as soon as it is complete.

How a file goes through (``FolderWatcher.step``, called a few times a second):

1. **Seen** — by a ``watchdog`` file event (created, modified, moved) or by the periodic
   rescan (``rescan_s``; the fallback for file systems without events, e.g. network mounts,
   and for events missed while Chord was stopped).
2. **Settled** — its size and mtime have not changed for ``settle_s`` seconds: a copy still
   being written keeps changing and is not taken (a copy that stalls longer than that is
   taken, and fails as a truncated file with an error row).
3. **Claimed** — its request key (content sha256 + settings) is inserted in the watch table
   (``watch_table.py``; atomic: one watcher wins). A known key is not analysed again: a
   renamed file keeps its row, a restart finds every row it left.
4. **Submitted** to the ``JobManager`` (an ordinary job, in the store like any other; a
   ``done`` job with the same key is reused), then marked ``done`` or ``error`` (the job's
   message: "not a video", "truncated"…) when the job ends.

Only folders and files under the media roots (``CHORD_MEDIA_ROOTS``) are watched and read;
each file is checked where it is opened (``check_regular_video``), symlinks resolved.
``on_done(row, result_doc)`` is called for each analysed file (the standing checks use it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from chord_core.errors import ChordError, ConfigError
from chord_core.library.index import LibraryIndex
from chord_core.library.watch_table import WatchTable

log = logging.getLogger(__name__)

WATCH_TASKS = ("describe", "ground", "entail", "chapters")
STEP_S = 0.25


@dataclass(frozen=True)
class WatchSettings:
    """One watched folder and what is done with its clips."""

    folder: str
    task: str = "describe"
    query: str = ""
    model: str = "test"
    max_new_tokens: int = 512
    settle_s: float = 5.0
    rescan_s: float = 30.0
    statements: tuple[str, ...] = ()  # standing checks (alerts.py)
    threshold: float = 0.8
    hook: str = ""  # a local command run per alert (alerts.py)

    def __post_init__(self) -> None:
        if self.task not in WATCH_TASKS:
            raise ConfigError(f"a watch folder's task is one of {', '.join(WATCH_TASKS)}, "
                              f"not {self.task!r}", hint="e.g. --task describe")
        if self.task in ("ground", "entail") and not self.query.strip():
            raise ConfigError(f"--task {self.task} needs --query (what to find or check)",
                              hint='e.g. --query "a person climbs the fence"')
        if not (0.0 <= self.settle_s <= 3600 and 0.5 <= self.rescan_s <= 86400):
            raise ConfigError("settle time must be 0–3600 s and the rescan 0.5–86400 s",
                              hint="e.g. --settle-s 5 --rescan-s 30")
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"the alert threshold is a probability in (0, 1], got "
                              f"{self.threshold}", hint="e.g. --threshold 0.8")

    @property
    def watch_id(self) -> str:
        """The same folder with the same task, query and model is the same watch."""
        ident = json.dumps([str(Path(self.folder)), self.task, self.query.strip(), self.model,
                            self.max_new_tokens])
        return "w-" + hashlib.sha256(ident.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "statements": list(self.statements), "watch": self.watch_id}


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    since: float


@dataclass
class FolderWatcher:
    """Watches ``settings.folder`` and submits its settled clips to ``manager``."""

    manager: Any
    store: Any
    settings: WatchSettings
    index: LibraryIndex | None = None
    on_done: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    _events: queue.SimpleQueue = field(default_factory=queue.SimpleQueue, repr=False)
    _seen: dict[str, _Seen] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        from chord_core.library.index import store_path
        from chord_core.media.roots import resolve_folder

        self.folder = resolve_folder(self.settings.folder)  # under the media roots
        self.settings = WatchSettings(**{**asdict(self.settings), "folder": str(self.folder),
                                         "statements": tuple(self.settings.statements)})
        self.index = self.index or LibraryIndex(store_path(self.store))
        self.table = WatchTable(self.index, self.settings.watch_id)
        self._observer: Any = None
        self._next_rescan = 0.0
        self._chapters: Any = None

    # -- life -----------------------------------------------------------------------------
    def start(self) -> FolderWatcher:
        """Resume what a previous run left, then listen for file events."""
        for row in self.table.take_over_orphans():
            self._submit(row["key"], row["path"])
        for row in self.table.rows("submitted"):
            if str(row["job_id"]).startswith("lvc-"):  # a chapters run cut short: resumed
                self._chapters_runner().put(row["key"], row["path"])
        self._observer = _observe(self.folder, self._events.put)
        return self

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(5)
            self._observer = None
        if self._chapters is not None:
            self._chapters.stop()

    def run(self, stop: threading.Event) -> None:
        """Step until ``stop`` is set (the CLI's and the app's loop)."""
        self.start()
        try:
            while not stop.wait(STEP_S):
                self.step()
        finally:
            self.stop()

    def busy(self) -> bool:
        """Files still settling, or claimed or submitted and not finished."""
        return bool(self._seen) or bool(self.table.rows("claimed")) or \
            bool(self.table.rows("submitted"))

    # -- one step ---------------------------------------------------------------------------
    def step(self, now: float | None = None) -> None:
        """Take in events (and the rescan when due), claim settled files, follow jobs."""
        now = time.monotonic() if now is None else now
        while True:
            try:
                self._note(self._events.get_nowait(), now)
            except queue.Empty:
                break
        if now >= self._next_rescan:
            self._next_rescan = now + self.settings.rescan_s
            for path in self._listing():
                self._note(str(path), now)
        for path in [p for p, s in self._seen.items() if now - s.since >= self.settings.settle_s]:
            self._settled(path, now)
        self._follow()

    def _listing(self) -> list[Path]:
        from chord_core.media.roots import list_videos

        try:
            return list(list_videos(str(self.folder)).paths)
        except ChordError:
            return []  # an empty folder (or one gone): nothing to take

    def _note(self, path: str, now: float) -> None:
        """A file seen: (re)start its settle clock when its size or mtime changed."""
        from chord_core.media.roots import is_video_name

        if not is_video_name(path):
            return
        try:
            st = os.stat(path)
        except OSError:
            self._seen.pop(path, None)  # gone (renamed away, deleted)
            return
        old = self._seen.get(path)
        if old is None or (old.size, old.mtime_ns) != (st.st_size, st.st_mtime_ns):
            self._seen[path] = _Seen(st.st_size, st.st_mtime_ns, now)

    def _settled(self, path: str, now: float) -> None:
        """Stable for settle_s? then claim it (once per content) and submit it."""
        seen = self._seen[path]
        self._note(path, now)
        if path not in self._seen or self._seen[path] is not seen:
            return  # changed again (or gone): the clock restarted
        del self._seen[path]
        if seen.size == 0:
            self._seen[path] = _Seen(0, seen.mtime_ns, now)  # still empty: look again later
            return
        try:
            key = self._key(path, seen)
        except ChordError as exc:
            log.info("%s not taken: %s", path, exc.message)
            return
        if self.table.claim(key, path, seen.size, seen.mtime_ns):
            self._submit(key, path)

    def _key(self, path: str, seen: _Seen) -> str:
        from chord_core.media.roots import check_regular_video
        from chord_core.runtime.batch import request_key

        real = check_regular_video(path)  # under the roots, a regular video file, now
        known = self.table.known_key(str(real), seen.size, seen.mtime_ns)
        if known:
            return known
        key = request_key(real, self._task, self.settings.query, self.settings.model,
                          self._sampling(), self.settings.max_new_tokens)
        self.table.remember(str(real), seen.size, seen.mtime_ns, key)
        return key

    @property
    def _task(self) -> str:
        return "describe" if self.settings.task == "chapters" else self.settings.task

    @staticmethod
    def _sampling() -> Any:
        from chord_core.config import SamplingConfig

        return SamplingConfig()

    # -- jobs -----------------------------------------------------------------------------
    def _submit(self, key: str, path: str) -> None:
        if self.settings.task == "chapters":
            self._chapters_runner().put(key, path)
            return
        from chord_core.analysis.request import AnalysisRequest
        from chord_core.runtime.jobs import JobSpec

        job_id = self.store.find_done(key)
        if job_id is None:
            req = AnalysisRequest(path, self.settings.task, self.settings.query,
                                  self._sampling(), self.settings.max_new_tokens)
            job_id = self.manager.submit(JobSpec(req, model=self.settings.model, key=key,
                                                 label=Path(path).name))
        self.table.mark(key, "submitted", job_id=job_id)
        log.info("watch %s: %s → job %s", self.settings.watch_id, Path(path).name, job_id)

    def _follow(self) -> None:
        """Rows whose job ended: done (with the result) or error (with the job's message)."""
        for row in self.table.rows("submitted"):
            if row["job_id"].startswith("lvc-"):
                continue  # a chapters run: its thread marks it
            state, error = self._job_state(row["job_id"])
            if state == "done":
                self.table.mark(row["key"], "done")
                self._done(row, self.store.get_result(row["job_id"]) or {})
            elif state in ("failed", "cancelled"):
                self.table.mark(row["key"], "error", error=error or state)

    def _job_state(self, job_id: str) -> tuple[str, str]:
        try:
            status = self.manager.status(job_id)
            if status.state.finished or self.store.get_job(job_id) is None:
                err = status.error or {}
                return status.state.value, _error_text(err)
        except KeyError:
            pass
        row = self.store.get_job(job_id) or {"state": "failed",
                                             "error": {"message": "the job is gone"}}
        return str(row["state"]), _error_text(row.get("error") or {})

    def _done(self, row: dict[str, Any], doc: dict[str, Any]) -> None:
        if self.on_done is not None:
            try:
                self.on_done(row, doc)
            except ChordError as exc:
                log.warning("watch %s: after %s: %s", self.settings.watch_id, row["path"], exc)

    def _chapters_runner(self) -> Any:
        if self._chapters is None:
            from chord_core.library.watch_chapters import ChaptersQueue

            self._chapters = ChaptersQueue(self)
        return self._chapters


def _error_text(err: dict[str, Any]) -> str:
    message = str(err.get("message") or "")
    return f"{message} ({err['hint']})" if err.get("hint") and message else message


def _observe(folder: Path, put: Callable[[str], None]) -> Any:
    """A watchdog observer feeding paths of created, modified and moved files to ``put``;
    None when events are not available (the rescan still finds every file)."""
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:
        log.warning("watchdog is not installed: %s is rescanned only", folder)
        return None

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            if not event.is_directory:
                put(str(getattr(event, "dest_path", "") or event.src_path))

    observer = Observer()
    try:
        observer.schedule(Handler(), str(folder), recursive=True)
        observer.start()
    except OSError as exc:  # inotify limits, a file system without events
        log.warning("no file events for %s (%s): it is rescanned only", folder, exc)
        return None
    return observer

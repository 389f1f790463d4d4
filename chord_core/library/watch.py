"""Watch folders: every new or changed video under a folder is analysed once, with the
folder's settings, as soon as it is complete.

A watcher is **one thread blocked on its inbox** (``queue.Queue.get`` with the time to its
next timer): file events, finished jobs and timers wake it; nothing polls. How a file goes
through:

1. **Seen** — by a ``watchdog`` file event (created, modified, moved) or by the rescan
   (every ``rescan_s``, a timer: the fallback for file systems without events, e.g. network
   mounts, and for files that arrived while Chord was stopped).
2. **Settled** — its size and mtime held for ``settle_s`` (a timer per file): a copy still
   being written keeps changing and is not taken. An empty (0-byte) file is not taken and
   not waited for: a later write brings it back.
3. **Claimed** — its request key (content sha256 + settings) inserted in the watch table
   under the job manager's lease (``watch_table.py``), all files settled together in one
   transaction. A known key is not analysed again (a renamed file keeps its row); a claim
   whose owner is gone (a process that died, or never renewed its lease) is taken over.
4. **Submitted** to the ``JobManager`` (an ordinary job; a ``done`` job with the same key is
   reused) and **followed by its handle**: the handle's done callback posts the end to the
   inbox, where the row is marked ``done`` or ``error`` (with the job's message).

Only folders and files under the media roots (``CHORD_MEDIA_ROOTS``) are watched and read:
each file is checked where it is hashed and confined there (``media.confined``), and its job
carries the roots, so the worker opens it under them too (a file swapped for a symlink to
a file elsewhere is refused, not read). A name that is not valid UTF-8 is skipped with a
message (it cannot be stored or shown); an error in one step is logged and the watcher
goes on, so one bad file never stops the folder.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, Callable

from chord_core.errors import ChordError, ConfigError
from chord_core.library.index import LibraryIndex
from chord_core.library.watch_settings import STOP, WATCH_TASKS, Inbox, WatchSettings
from chord_core.library.watch_table import WatchTable

__all__ = ["FolderWatcher", "WatchSettings", "WATCH_TASKS", "lease_owner", "utf8_name"]

log = logging.getLogger(__name__)

RETRY_S = 2.0  # a step that failed (a store busy past its timeout) is tried again after this
# A rescan lists up to this many files, for this long (a page's listing stops at 1,000: a
# folder of 1,500 new files had its last 500 never taken)
RESCAN_MAX, RESCAN_S = 50_000, 60.0
RECHECK_S = 30.0  # a file another live process claimed is looked at again this often


def lease_owner(manager: Any) -> str:
    """The id of the manager's lease in its store: the owner of this process's claims."""
    owner = getattr(manager, "owner_id", None) or getattr(getattr(manager, "parents", None),
                                                          "owner", None)
    if not owner:
        raise ConfigError("a watch folder needs a job manager with a store (its lease owns "
                          "the claims)", hint="start the manager with a store "
                          "(cluster.start_manager(store=StoreView.open()))")
    return str(owner)


def utf8_name(path: str) -> bool:
    """Whether ``path`` can be stored and shown (file systems allow any bytes)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class FolderWatcher:
    """Watches ``settings.folder`` and submits its settled clips to ``manager`` (see the
    module docstring). ``on_done(row, result_doc)`` runs for each analysed clip (standing
    checks), ``on_row(row)`` for each row that ended (done or error: the CLI prints it)."""

    def __init__(self, manager: Any, store: Any, settings: WatchSettings,
                 index: LibraryIndex | None = None,
                 on_done: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
                 on_row: Callable[[dict[str, Any]], None] | None = None) -> None:
        from chord_core.library.index import store_path
        from chord_core.media.roots import resolve_folder

        self.manager, self.store, self.on_done, self.on_row = manager, store, on_done, on_row
        self.folder = resolve_folder(settings.folder)  # under the media roots
        self.settings = WatchSettings(**{**asdict(settings), "folder": str(self.folder),
                                         "statements": tuple(settings.statements)})
        self.index = index or LibraryIndex(store_path(store))
        self.table = WatchTable(self.index, self.settings.watch_id, lease_owner(manager))
        self.inbox = Inbox()
        self.checks: Any = None  # the StandingChecks on this watcher, if any
        self.once = False  # ``watch --once``: the files there now, then ``finished``
        self.idle_exit: float | None = None
        self.finished = threading.Event()
        self._seen: dict[str, list[Any]] = {}  # path → [size, mtime_ns, due, timer set]
        self._handled: dict[str, tuple[int, int]] = {}  # path → (size, mtime) taken or left
        self._ready: list[tuple[str, int, int]] = []  # settled, to claim together
        self._jobs: dict[str, str] = {}  # key → job id, submitted and not finished
        self._idle_gen = 0
        self._idle_armed = False  # an --idle-exit timer is waiting (since the folder went idle)
        self._scanned = False  # the first rescan ran (before it, nothing is known to be idle)
        self._observer: Any = None
        self._chapters: Any = None
        self._thread: threading.Thread | None = None

    # -- life -----------------------------------------------------------------------------
    def start(self) -> FolderWatcher:
        """Resume what a dead owner left, listen for file events, start the thread."""
        self._resume()
        if not self.once:
            self._observer = _observe(self.folder, self._on_event)
        self.inbox.post(self._rescan)
        self._thread = threading.Thread(target=self._run, name="chord-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(5)
            self._observer = None
        self.inbox.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        if self._chapters is not None:
            self._chapters.stop()
        if self.checks is not None:
            self.checks.stop()

    def busy(self) -> bool:
        """Files settling or to claim, jobs not finished, checks or hooks still running."""
        return bool(self._seen or self._ready or self._jobs or
                    (self._chapters is not None and self._chapters.busy()) or
                    (self.checks is not None and self.checks.busy()))

    def _run(self) -> None:
        while True:
            msg = self.inbox.next_message()
            if msg is STOP:
                return
            for fn in ([msg] if msg is not None else []) + self.inbox.due():
                self._safely(fn)  # type: ignore[arg-type]
            if self._ready:
                self._safely(self._claim_ready)
            self._check_idle()

    def _safely(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except ChordError as exc:  # a full disk, a store busy past its timeout: said, retried
            log.warning("watch %s: %s (%s); trying again in %.0f s", self.folder, exc.message,
                        exc.hint, RETRY_S)
            self.inbox.after(RETRY_S, fn)
        except Exception:  # noqa: BLE001 — a bug in one step must not stop the folder
            log.exception("watch %s: a step failed; the watcher goes on", self.folder)

    def _check_idle(self) -> None:
        """``--once``: finished when nothing is left; ``--idle-exit S``: when nothing was
        left and nothing new came for S seconds (a timer armed once when the folder went
        idle, cancelled by any change). Re-armed on every idle round, the timer was pushed
        back by each rescan that found nothing: with S equal to the rescan period (30 s,
        the README's example) it never fired, and ``watch`` never exited."""
        if self.busy() or not self._scanned:
            self._idle_gen += 1  # cancels the armed timer
            self._idle_armed = False
            return
        if self.once:
            self.finished.set()
        elif self.idle_exit is not None and not self.finished.is_set() \
                and not self._idle_armed:
            self._idle_armed, gen = True, self._idle_gen

            def fire() -> None:
                if gen == self._idle_gen and not self.busy():
                    self.finished.set()
                elif gen == self._idle_gen:
                    self._idle_armed = False  # busy again: the next idle round re-arms
            self.inbox.after(self.idle_exit, fire)

    # -- files ----------------------------------------------------------------------------
    def _on_event(self, path: str) -> None:  # watchdog's thread: only a post
        self.inbox.post(lambda: self._note(path))

    def _rescan(self) -> None:
        from chord_core.media.roots import MAX_DEPTH, list_videos

        self._scanned = True
        if not self.once:
            self.inbox.after(self.settings.rescan_s, self._rescan)
        try:
            listing = list_videos(str(self.folder), limit=RESCAN_MAX, max_seconds=RESCAN_S)
        except ChordError:
            return  # an empty folder (or one gone): nothing to take
        if listing.truncated:
            log.warning("watch %s: the rescan stopped at %d files (%d at most, %.0f s, %d "
                        "folder levels): split the folder, or files past that are taken only "
                        "when they change", self.folder, len(listing.paths), RESCAN_MAX,
                        RESCAN_S, MAX_DEPTH)
        for path in listing.paths:
            self._note(str(path))

    def _note(self, path: str) -> None:
        """A file seen: (re)start its settle clock when its size or mtime changed."""
        from chord_core.media.roots import is_video_name

        if not is_video_name(path):
            return
        try:
            st = os.stat(path)
        except OSError:
            self._seen.pop(path, None)  # gone (renamed away, deleted)
            return
        sig = (st.st_size, st.st_mtime_ns)
        if self._handled.get(path) == sig:
            return  # taken (or left) before, unchanged since
        if not utf8_name(path):
            self._handled[path] = sig
            shown = os.fsencode(path).decode("utf-8", "replace")
            log.warning("watch %s: %s is not taken: its name is not valid UTF-8",
                        self.folder, shown)
            self._row_ended({"path": shown, "state": "skipped",
                             "error": "the name is not valid UTF-8: rename the file"})
            return
        entry = self._seen.get(path)
        due = time.monotonic() + self.settings.settle_s
        if entry is None:
            self._seen[path] = [*sig, due, True]
            self.inbox.after(self.settings.settle_s, lambda: self._settle(path))
        elif (entry[0], entry[1]) != sig:
            entry[0], entry[1], entry[2] = sig[0], sig[1], due  # its timer looks again

    def _settle(self, path: str) -> None:
        entry = self._seen.get(path)
        if entry is None:
            return
        wait = entry[2] - time.monotonic()
        if wait > 0:  # changed since the timer was set: wait the rest
            self.inbox.after(wait, lambda: self._settle(path))
            return
        del self._seen[path]
        try:
            st = os.stat(path)
        except OSError:
            return
        if (st.st_size, st.st_mtime_ns) != (entry[0], entry[1]):
            self._note(path)
            return
        self._handled[path] = (st.st_size, st.st_mtime_ns)
        if st.st_size == 0:
            log.info("watch %s: %s is empty (0 bytes): not taken until it has content",
                     self.folder, path)
            self._row_ended({"path": path, "state": "skipped",
                             "error": "empty (0 bytes): taken once something is written"})
            return
        self._ready.append((path, st.st_size, st.st_mtime_ns))

    def _claim_ready(self) -> None:
        """Every settled file: keyed, claimed in one transaction, the claims submitted."""
        ready, self._ready = self._ready, []
        files = []
        for path, size, mtime_ns in ready:
            try:
                files.append((self._key(path, size, mtime_ns), path, size, mtime_ns))
            except ChordError as exc:
                log.info("%s not taken: %s", path, exc.message)
        try:
            taken = self.table.claim_many(files) if files else []
        except ChordError:
            self._ready[:0] = ready  # tried again (``_safely``'s retry)
            raise
        for key, path in self.table.held_by_others([k for k, _, _, _ in files]):
            self._handled.pop(path, None)  # another live owner's claim: looked at again
            self.inbox.after(RECHECK_S, partial(self._note, path))  # once it may be gone
        with self.manager.holding():  # one burst: the dispatcher batches them together
            submitted = [(key, self._submit(key, path)) for key, path in taken]
        self._mark_submitted([(k, j) for k, j in submitted if j])

    def _key(self, path: str, size: int, mtime_ns: int) -> str:
        from chord_core.media.confined import confine
        from chord_core.media.roots import check_regular_video, job_roots
        from chord_core.runtime.batch import request_key

        real = check_regular_video(path)  # under the roots, a regular video file, now
        known = self.table.known_key(str(path), size, mtime_ns)
        if known:
            return known
        confine(real, job_roots())  # hashed through a descriptor opened under the roots
        return request_key(real, self._task, self.settings.query, self.settings.model,
                           self._sampling(), self.settings.max_new_tokens)

    @property
    def _task(self) -> str:
        return "describe" if self.settings.task == "chapters" else self.settings.task

    @staticmethod
    def _sampling() -> Any:
        from chord_core.config import SamplingConfig

        return SamplingConfig()

    # -- jobs -----------------------------------------------------------------------------
    def _resume(self) -> None:
        """Rows a gone owner left (claimed, or submitted and unfinished): taken over and
        submitted again (the manager's key finds a job already running or done)."""
        rows = self.table.take_over_orphans()
        with self.manager.holding():
            submitted = [(r["key"], self._submit(r["key"], r["path"], r.get("job_id")))
                         for r in rows]
        self._mark_submitted([(k, j) for k, j in submitted if j])

    def _submit(self, key: str, path: str, job_id: str | None = None) -> str | None:
        """Submit (or find) the file's job and follow its handle; its id (None: chapters,
        whose thread marks the row)."""
        if self.settings.task == "chapters":
            self._chapters_runner().put(key, path)
            return None
        handle = self._known_handle(job_id) or self._known_handle(self.store.find_done(key))
        if handle is None:
            from chord_core.analysis.request import AnalysisRequest
            from chord_core.media.roots import job_roots
            from chord_core.runtime.jobs import JobSpec

            req = AnalysisRequest(path, self.settings.task, self.settings.query,
                                  self._sampling(), self.settings.max_new_tokens,
                                  media_roots=job_roots())
            handle = self.manager.submit(JobSpec(req, model=self.settings.model, key=key,
                                                 label=Path(path).name))
        self._jobs[key] = str(handle)
        handle.add_done_callback(lambda h: self.inbox.post(lambda: self._ended(key, h)))
        log.info("watch %s: %s → job %s", self.settings.watch_id, Path(path).name, handle)
        return str(handle)

    def _known_handle(self, job_id: str | None) -> Any:
        if not job_id:
            return None
        try:
            return self.manager.handle(job_id)
        except KeyError:  # not this manager's, and not finished in the store
            return None

    def _mark_submitted(self, marks: list[tuple[str, str]]) -> None:
        if marks:
            self.table.mark_many(marks, "submitted")

    def _ended(self, key: str, handle: Any) -> None:
        """A followed job finished: its row done (and ``on_done``) or error."""
        status = handle.status()
        if status.state.value == "done":
            self.table.mark(key, "done")
            doc = status.result.to_dict() if status.result is not None else (
                self.store.get_result(handle.job_id) or {})
            self._jobs.pop(key, None)
            self._done(self.table.row(key), doc)
        else:
            self.table.mark(key, "error", error=_error_text(status.error or {})
                            or status.state.value)
            self._jobs.pop(key, None)
            self._row_ended(self.table.row(key))

    def _done(self, row: dict[str, Any], doc: dict[str, Any]) -> None:
        self._row_ended(row)
        if self.on_done is not None:
            try:
                self.on_done(row, doc)
            except ChordError as exc:
                log.warning("watch %s: after %s: %s", self.settings.watch_id, row["path"], exc)

    def _row_ended(self, row: dict[str, Any]) -> None:
        if self.on_row is not None:
            self.on_row(row)

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
                put(os.fsdecode(getattr(event, "dest_path", "") or event.src_path))

    observer = Observer()
    try:
        observer.schedule(Handler(), str(folder), recursive=True)
        observer.start()
    except OSError as exc:  # inotify limits, a file system without events
        log.warning("no file events for %s (%s): it is rescanned only", folder, exc)
        return None
    return observer

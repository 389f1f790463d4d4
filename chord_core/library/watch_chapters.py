"""Watch folders with ``--task chapters``: each settled clip becomes a long-video chapters
run (``longvideo.chapters.ChaptersRun``), one clip at a time on a thread of its own, so the
watcher keeps noticing files while a long clip is described chunk by chunk.

A run's id is a content key of the clip and its settings; the manager keeps the run as a
parent job with its chunks as children in the store (``runtime/parents.py``): a watcher
restarted mid-run resumes the run where it stopped (nothing is described twice), and the
finished run's chapters are indexed for search (``LibraryIndex._sync_runs``).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from chord_core.errors import ChordError
from chord_core.runtime.handles import CancelFlag

log = logging.getLogger(__name__)


class ChaptersQueue:
    """Chapters runs for a ``FolderWatcher``, in the order their clips settled."""

    def __init__(self, watcher: Any) -> None:
        self.watcher = watcher
        self._todo: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()  # None: end
        self._cancel = CancelFlag()  # a run waiting on its chunks wakes on it
        self._pending = 0  # clips put and not finished (read by the watcher's thread)
        self._count = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="chord-watch-chapters",
                                        daemon=True)
        self._thread.start()

    def put(self, key: str, path: str) -> None:
        with self._count:
            self._pending += 1
        self._todo.put((key, path))

    def busy(self) -> bool:
        return self._pending > 0

    def stop(self) -> None:
        self._cancel.set()
        self._todo.put(None)
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._cancel.is_set():
            item = self._todo.get()
            if item is None:
                return
            try:
                self._run(*item)
            finally:
                with self._count:
                    self._pending -= 1
                self.watcher.inbox.post(lambda: None)  # the watcher sees it idle

    def _run(self, key: str, path: str) -> None:
        from chord_core.analysis.request import probe_input
        from chord_core.longvideo.chapters import ChaptersRun
        from chord_core.longvideo.settings import LongVideoSettings
        from chord_core.media.content_keys import file_hash

        from chord_core.media.confined import confine
        from chord_core.media.roots import job_roots

        w, table = self.watcher, self.watcher.table
        try:
            confine(path, job_roots())  # probed, hashed and read under the media roots only
            info = probe_input(path)
            run = ChaptersRun(w.manager, info, file_hash(path), LongVideoSettings(),
                              w.settings.model, cancel=self._cancel)
            table.mark(key, "submitted", job_id=run.run)  # resumed by a later owner
            doc = run()
        except ChordError as exc:
            if not self._cancel.is_set():  # stopped: the next start resumes the run
                table.mark(key, "error", error=f"{exc.message} ({exc.hint})" if exc.hint
                           else exc.message)
            return
        table.mark(key, "done")
        row, result = table.row(key), doc.to_dict()
        w.inbox.post(lambda: w._done(row, result))  # noqa: SLF001 — on the watcher's thread

"""Long-video runs of the app (chapters, long grounding, search) in background threads.

A long run is many jobs (one per chunk) driven by ``chord_core.longvideo`` over the app's
shared job manager; it takes minutes, so it runs in a thread of the server, never in a
page script. ``LongRunManager.start`` is idempotent per run key (a rerun, a second click or
a second tab finds the run already going, or finished). The run is a parent job of the
shared job manager (``longvideo.runs``); progress comes from its row in the job store (its
summary's ``progress``: stage, chunks done of total, time left, written after every chunk),
so it survives a reload; the thread's own last event is the fallback while the row does not
exist yet. Finished chunks are in the store: a run cancelled, or cut short by a restart,
resumes where it stopped when started again.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Callable

from chord_core.errors import ChordError, JobCancelled, internal_error
from chord_core.runtime.handles import CancelFlag

if TYPE_CHECKING:
    from chord_core.runtime.store_rows import StoreReader

log = logging.getLogger(__name__)


class RunState(StrEnum):
    """Where a long run stands (a ``StrEnum``: it compares and prints as its word)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_finished(self) -> bool:
        return self is not RunState.RUNNING


@dataclass
class LongRun:
    """One run's state; read through ``snapshot`` under the manager's lock."""

    key: str
    kind: str  # chapters | ground | search
    state: RunState = RunState.RUNNING
    run_id: str = ""  # the run's parent job (its row in the store: progress, chunks)
    event: dict[str, Any] | None = None
    doc: Any = None  # ChaptersDoc | Result | SearchDoc
    error: dict[str, str] | None = None
    started: float = field(default_factory=time.time)
    cancel: threading.Event = field(default_factory=CancelFlag, repr=False)  # wakes a run

    def snapshot(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "state": self.state, "run_id": self.run_id,
                "event": self.event, "doc": self.doc, "error": self.error,
                "elapsed_s": time.time() - self.started}


Work = Callable[[LongRun, Callable[[Any], None]], Any]


class LongRunManager:
    """Thread-safe registry of long runs by key (clip content, task, query, model)."""

    def __init__(self, store: StoreReader | None = None) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, LongRun] = {}
        self.store = store

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            run = self._runs.get(key)
            return None if run is None else run.snapshot()

    def by_run(self, run_id: str) -> dict[str, Any] | None:
        """The run whose parent job is ``run_id`` (a link's ``?job=``), if this server has it."""
        with self._lock:
            run = next((r for r in self._runs.values() if r.run_id == run_id), None)
            return None if run is None else run.snapshot()

    def adopt(self, key: str, kind: str, run_id: str, doc: Any) -> dict[str, Any]:
        """File a run finished before this server started (its parent row's document) under
        ``key``, so a reload or a link shows it; a run this server has is kept instead."""
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = LongRun(key, kind, RunState.DONE, run_id, doc=doc)
            return run.snapshot()

    def start(self, key: str, kind: str, work: Work, run_id: str = "") -> bool:
        """Run ``work(run, on_progress)`` in a thread unless this key is running or done.
        True when this call started it. A failed or cancelled run starts again. ``run_id``
        (its parent job) is known from the start, so the page's URL can name it at once."""
        with self._lock:
            current = self._runs.get(key)
            if current is not None and current.state in (RunState.RUNNING, RunState.DONE):
                return False
            run = LongRun(key, kind, run_id=run_id)
            self._runs[key] = run
        threading.Thread(target=self._run, args=(run, work), name=f"long-{kind}",
                         daemon=True).start()
        log.info("long-video %s run started (%s)", kind, key)
        return True

    def cancel(self, key: str) -> None:
        with self._lock:
            run = self._runs.get(key)
        if run is not None:
            run.cancel.set()

    def progress(self, key: str) -> dict[str, Any] | None:
        """The run's progress: stage, done, total, eta_s (seconds left or None), from the
        store's row of the run when it has one, else from the last event."""
        snap = self.get(key)
        if snap is None:
            return None
        if snap["run_id"] and self.store is not None:
            try:
                row = self.store.get_job(snap["run_id"]) or {}
            except ChordError as exc:
                log.info("run row of %s unreadable: %s", snap["run_id"], exc)
                row = {}
            stored = (row.get("summary") or {}).get("progress")
            if stored:
                return dict(stored)
        return snap["event"]

    def _event(self, run: LongRun, event: Any) -> None:
        with self._lock:
            run.event = {"stage": event.stage, "done": event.done, "total": event.total,
                         "eta_s": None, "message": event.message}

    def _run(self, run: LongRun, work: Work) -> None:
        try:
            doc = work(run, lambda e: self._event(run, e))
        except JobCancelled:
            with self._lock:
                run.state = RunState.CANCELLED
            return
        except ChordError as exc:
            log.warning("long-video %s run failed: %s", run.kind, exc)
            with self._lock:
                run.state, run.error = RunState.FAILED, exc.to_dict()
            return
        except Exception as exc:  # noqa: BLE001 — shown on the page, logged with traceback
            log.exception("long-video %s run crashed", run.kind)
            with self._lock:
                run.state = RunState.FAILED
                run.error = internal_error(exc, "the server log")
            return
        with self._lock:
            run.state, run.doc = RunState.DONE, doc


# -- the work of each kind (called in the run's thread) ------------------------------------

def chapters_work(manager: Any, info: Any, video_key: str, settings: Any, model: str,
                  in_flight: int) -> Work:
    def work(run: LongRun, on_progress: Callable[[Any], None]) -> Any:
        from chord_core.longvideo.chapters import ChaptersRun

        chapters = ChaptersRun(manager, info, video_key, settings, model,
                               in_flight=in_flight, on_progress=on_progress, cancel=run.cancel)
        run.run_id = chapters.run
        return chapters()

    return work


def ground_work(manager: Any, info: Any, video_key: str, target: str, settings: Any,
                model: str, in_flight: int) -> Work:
    def work(run: LongRun, on_progress: Callable[[Any], None]) -> Any:
        from chord_core.longvideo.ground import ground_long, ground_run_id
        from chord_core.longvideo.settings import (
            GROUND_LONG_BATCH,
            GROUND_LONG_TOKENS,
            ground_long_sampling,
        )

        # the CLI's and the service's defaults (the benchmark's): 448×252, 64 answer tokens,
        # 128 frames a generate call
        sampling = ground_long_sampling()
        run.run_id = ground_run_id(video_key, target, settings, model, sampling,
                                   GROUND_LONG_TOKENS)
        return ground_long(manager, info, video_key, target, settings, model,
                           sampling=sampling, in_flight=in_flight, on_progress=on_progress,
                           cancel=run.cancel, batch_size=GROUND_LONG_BATCH,
                           max_new_tokens=GROUND_LONG_TOKENS)

    return work


def search_work(manager: Any, info: Any, video_key: str, doc: Any, query: str,
                model: str, in_flight: int) -> Work:
    def work(run: LongRun, on_progress: Callable[[Any], None]) -> Any:
        from chord_core.longvideo.search import search

        return search(manager, info, video_key, doc, query, model,
                      in_flight=in_flight, on_progress=on_progress, cancel=run.cancel)

    return work

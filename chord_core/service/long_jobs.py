"""Long-video runs driven by the service (issue 38): ``POST /v1/jobs`` with ``task`` chapters,
ground-long or search-long.

A run is the same ``longvideo`` run the CLI and the app drive (``ChaptersRun``,
``ground_long``, chapters then ``search``): its parent row is the run's (its id a content key
of the clip, the model and the settings), its chunks are children submitted to the service's
``JobManager`` through ``run_stage``. Here it is driven on a thread of the service process,
one per run (``MAX_LIVE`` at most), and kept in a registry by its parent's id: the route
answers with the id at once, GET reads the registry (state, progress, the document once
done), the event stream follows it (``LongJob.watch``: a ``child`` event as each chunk starts
and ends, ``progress`` after each, nothing polled), DELETE sets its ``CancelFlag`` (the stage
in flight cancels its children at once).

The request that started a run is kept in its parent row's spec (``origin``). A restarted
``serve`` drives every run of its own that a crash (or SIGTERM) left open again
(``LongRuns.resume``): the manager has resumed the chunks that were in flight under their
ids, and the run attaches to them, reuses the ones stored done and submits the rest, so each
chunk runs once and the parent ends once. A search-long is a parent of its own (``lvs-``)
over the chapters run it needs, which holds the search under it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable

from chord_core.errors import ChordError, JobCancelled, internal_error
from chord_core.runtime.handles import CancelFlag, Watchers

log = logging.getLogger(__name__)

MAX_LIVE = 16  # long runs driven at once by one service
MAX_EVENTS = 20_000  # events one run keeps for its streams (the oldest go first)
MAX_KEPT = 64  # finished runs kept in memory (older ones are read from their rows)
FINISHED = ("done", "failed", "cancelled")


class LongJob:
    """One run the service drives: its state, progress, document, and its event log."""

    def __init__(self, job_id: str, task: str, query: str, label: str) -> None:
        self.job_id, self.task, self.query, self.label = job_id, task, query, label
        self.state = "queued"
        self.submitted_at, self.started_at = time.time(), None  # type: float, float | None
        self.finished_at: float | None = None
        self.progress: dict[str, Any] | None = None
        self.document: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.cancel = CancelFlag()
        self._lock = threading.Lock()
        self._log: deque[tuple[int, str, dict[str, Any]]] = deque(maxlen=MAX_EVENTS)
        self._seq = 0
        self._watchers = Watchers(job_id)
        self._children: dict[str, str] = {}  # child id → the last state told

    # -- the stream's side -----------------------------------------------------------------
    def watch(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn()`` (on any thread: keep it quick) on each event and state change;
        returns the function that stops it."""
        return self._watchers.watch(fn)

    def since(self, cursor: int) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """The events after ``cursor`` (0: all it still keeps) and the new cursor."""
        with self._lock:
            return [(name, data) for seq, name, data in self._log if seq > cursor], self._seq

    def view(self) -> dict[str, Any]:
        with self._lock:
            return {"job_id": self.job_id, "state": self.state, "task": self.task,
                    "query": self.query, "label": self.label,
                    "submitted_at": self.submitted_at, "started_at": self.started_at,
                    "finished_at": self.finished_at, "worker": None,
                    "progress": self.progress, "error": self.error,
                    "document": self.document if self.state == "done" else None}

    # -- the run's side --------------------------------------------------------------------
    def record(self, name: str, data: dict[str, Any]) -> None:
        with self._lock:
            self._seq += 1
            self._log.append((self._seq, name, data))
            if name == "progress":
                self.progress = data
        self._notify()

    def set_state(self, state: str, *, document: dict[str, Any] | None = None,
                  error: dict[str, Any] | None = None) -> None:
        with self._lock:
            self.state = state
            if state == "running" and self.started_at is None:
                self.started_at = time.time()
            if state in FINISHED:
                self.finished_at, self.document, self.error = time.time(), document, error
        self._notify()

    def on_progress(self, event: Any) -> None:
        """A ``ProgressEvent`` of the run (after each chunk: stage, done of total)."""
        self.record("progress", event.to_dict())

    def child(self, handle: Any) -> None:
        """Follow a chunk job the run started or attached to: ``child`` events as it starts
        and as it ends (the end is told before the stage hears of it)."""
        with self._lock:
            if handle.job_id in self._children:
                return
            self._children[handle.job_id] = ""

        def told(final: bool) -> None:
            st = handle.status()
            state = st.state.value
            if not final and state != "running":
                return
            with self._lock:
                if self._children.get(handle.job_id) == state:
                    return
                self._children[handle.job_id] = state
            self.record("child", {"job_id": handle.job_id, "label": st.spec.label,
                                  "event": "end" if st.state.finished else "start",
                                  "state": state})

        handle.add_done_callback(lambda _h: told(True))
        if not handle.done():
            handle.on_change(lambda: told(False))
            told(False)  # it may have started before the watch

    def _notify(self) -> None:
        self._watchers.notify()  # a stream's callback that raises never stops the run


class Watched:
    """The manager as a run sees it: every child handle it asks for is followed by its
    ``LongJob`` (its ``child`` events); everything else is the manager's own."""

    def __init__(self, manager: Any, job: LongJob) -> None:
        self._manager, self._job = manager, job

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)

    def handle(self, job_id: str) -> Any:
        handle = self._manager.handle(job_id)  # KeyError: not the manager's (stored done)
        self._job.child(handle)
        return handle


Work = Callable[[LongJob], dict[str, Any]]


class LongRuns:
    """The service's long runs by parent id (see the module docstring)."""

    def __init__(self, manager: Any, store: Any, model: str, width: int = 0) -> None:
        self.manager, self.store, self.model = manager, store, model
        self.width = width  # the workers' batch slots in all (0: unknown)
        self._lock = threading.Lock()
        self._jobs: dict[str, LongJob] = {}

    def get(self, job_id: str) -> LongJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def live(self) -> int:
        with self._lock:
            return sum(1 for j in self._jobs.values() if j.state not in FINISHED)

    def in_flight(self) -> int:
        """Chunk jobs queued at once per run: as the CLI's, two batches of the workers'
        batch slots (``settings.chunks_in_flight``); the slots unknown, two per worker."""
        from chord_core.longvideo.settings import chunks_in_flight

        if self.width:
            return chunks_in_flight(self.width)
        try:
            return max(2, 2 * len(self.manager.workers()))
        except Exception:  # noqa: BLE001 — a manager without workers' rows
            return 2

    def claim(self, job: LongJob) -> tuple[LongJob, bool]:
        """(the run under ``job``'s id, whether it is ``job``, new): the same run asked
        again while it goes, or once done, is that run; a failed or cancelled one starts
        again (its finished chunks are kept). Raises ChordError when too many go."""
        with self._lock:
            same = self._jobs.get(job.job_id)
            if same is not None and same.state not in ("failed", "cancelled"):
                return same, False
            going = sum(1 for j in self._jobs.values() if j.state not in FINISHED)
            if going >= MAX_LIVE:
                from chord_core.errors import ResourceError

                raise ResourceError(f"{going} long-video runs are going on this service; "
                                    f"it drives at most {MAX_LIVE} at once",
                                    hint="wait for one to finish, or cancel one")
            self._jobs[job.job_id] = job
            ended = sorted((j for j in self._jobs.values() if j.state in FINISHED),
                           key=lambda j: j.finished_at or 0.0)
            for old in ended[:max(0, len(ended) - MAX_KEPT)]:
                del self._jobs[old.job_id]  # GET reads it from its parent row now
            return job, True

    def drop(self, job: LongJob) -> None:
        with self._lock:
            if self._jobs.get(job.job_id) is job:
                del self._jobs[job.job_id]

    def drive(self, job: LongJob, work: Work) -> None:
        """Run ``work(job)`` on a thread of its own; its end sets the job's state."""
        threading.Thread(target=self._drive, args=(job, work), daemon=True,
                         name=f"long-{job.task}-{job.job_id}").start()

    def _drive(self, job: LongJob, work: Work) -> None:
        job.set_state("running")
        try:
            document = work(job)
        except JobCancelled:
            job.set_state("cancelled")
        except ChordError as exc:
            log.info("long run %s failed: %s", job.job_id, exc.message)
            job.set_state("failed", error=exc.to_dict())
        except Exception as exc:  # noqa: BLE001 — the run fails, the service goes on
            log.exception("long run %s crashed", job.job_id)
            job.set_state("failed", error=internal_error(exc, "the service's log"))
        else:
            job.set_state("done", document=document)
        log.info("long run %s (%s) ended %s", job.job_id, job.task, job.state)

    def open_rows(self) -> list[dict[str, Any]]:
        """Unfinished top-level parents a request to this service started (``origin``),
        of the served model: the runs a restart drives again."""
        if self.store is None:
            return []
        rows = [r for state in ("running", "queued")
                for r in self.store.list_jobs(limit=1000, state=state, top_level=True)]
        return [r for r in rows if isinstance((r.get("spec") or {}).get("origin"), dict)
                and (r["spec"]["origin"].get("service") is not None)
                and r.get("model") == self.model]

    def resume(self, start: Callable[[dict[str, Any]], Any]) -> int:
        """Drive again each run ``open_rows`` finds, by ``start(request)`` (the request
        it was started with); one that cannot start again (its clip is gone) ends failed
        with the reason. Returns how many were started."""
        started = 0
        for row in self.open_rows():
            body = row["spec"]["origin"]["service"]
            try:
                start(body)
                started += 1
            except ChordError as exc:
                log.warning("long run %s not resumed: %s", row["job_id"], exc.message)
                self.manager.parents.finish(row["job_id"], "failed",
                                            row.get("summary") or {}, error=exc.to_dict())
            except Exception as exc:  # noqa: BLE001 — one bad row must not stop the others
                log.exception("long run %s not resumed", row["job_id"])
                self.manager.parents.finish(row["job_id"], "failed",
                                            row.get("summary") or {},
                                            error=internal_error(exc, "the service's log"))
        if started:
            log.info("driving %d long-video run(s) a stop left unfinished", started)
        return started

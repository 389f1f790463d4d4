"""The job record, from submit to result: ``JobSpec`` (what to analyse, with which model) →
``JobStatus`` (a frozen snapshot: state, progress events, then the ``Result`` or the error).

The UI, the CLI, the service and the store all speak these; ``manager.JobManager`` runs them
(``JobTable`` is its read side). A failing job — bad file, bad option, even an unexpected bug —
is recorded as ``failed`` with a readable error and never touches other jobs' results.

States: queued → running → done | failed | cancelled (a queued job can be cancelled too).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chord_core.analysis.request import AnalysisRequest
from chord_core.errors import ChordError
from chord_core.types import ProgressEvent, Result, SamplingPlan, VideoInfo

if TYPE_CHECKING:
    import threading

    from chord_core.runtime.handles import JobHandle
    from chord_core.runtime.scheduling import JobEntry
    from chord_core.runtime.store_rows import StoreReader

log = logging.getLogger(__name__)

MAX_EVENTS_KEPT = 200


class JobState(StrEnum):
    """Where a job stands (a ``StrEnum``: it compares and prints as its word). The app's
    ``session.OutcomeState`` is this enum too."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self.value in FINISHED_STATES

    is_finished = finished  # the name WorkerState, TaskPhase and RunState use


# the states a job ends in (the store, the UI and the service all ask this)
FINISHED_STATES = frozenset({"done", "failed", "cancelled"})


@dataclass(frozen=True)
class JobSpec:
    """What to analyse and with which model (``model`` is a hub id, folder or ``test``)."""

    request: AnalysisRequest
    model: str | None = None
    label: str = ""
    key: str = ""
    batch_id: str | None = None
    # frames chosen by the caller (long video: one chunk's frames, its bounds) instead of the
    # planner's; ``info`` spares a probe per job. Stored with the job, so a resumed chunk job
    # reads the same frames (without them it would come back as a whole-clip describe).
    info: VideoInfo | None = None
    plan: SamplingPlan | None = None
    # the parent job (a long-video run) this job is one chunk of; None for a job of its own
    parent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"request": self.request.to_dict(), "model": self.model,
                               "label": self.label, "key": self.key, "batch_id": self.batch_id}
        for name in ("info", "plan"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.to_dict()
        if self.parent is not None:
            out["parent"] = self.parent
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        info, plan = data.get("info"), data.get("plan")
        return cls(AnalysisRequest.from_dict(data["request"]), data.get("model"),
                   data.get("label", ""), data.get("key", ""), data.get("batch_id"),
                   VideoInfo.from_dict(info) if info else None,
                   SamplingPlan.from_dict(plan) if plan else None, data.get("parent"))


@dataclass(frozen=True)
class JobStatus:
    """A snapshot of one job; safe to hand to any thread (it is never mutated)."""

    job_id: str
    spec: JobSpec
    state: JobState
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    last_event: ProgressEvent | None = None
    events: tuple[ProgressEvent, ...] = ()
    result: Result | None = None
    error: dict[str, str] | None = None
    worker: str | None = None
    # cancelled, and its workers are still handing back the frames they finished (the
    # partial result lands in ``result`` within moments; ``settling`` then turns False)
    settling: bool = False
    # finished, but the store refused the write (a full disk): the result is here, and is
    # written when space returns (``store_link``); the store's row is still unfinished
    pending_write: bool = False

    @property
    def elapsed_s(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.finished_at or time.time()) - self.started_at

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "state": self.state.value,
                "submitted_at": self.submitted_at, "started_at": self.started_at,
                "finished_at": self.finished_at, "error": self.error, "worker": self.worker,
                "last_event": self.last_event.to_dict() if self.last_event else None,
                "result": self.result.to_dict() if self.result else None,
                "pending_write": self.pending_write}


class JobTable:
    """What every executor shares: a table of jobs (``_jobs[id].status``) under ``_lock``,
    and the read side of the executor interface (status / jobs / handle / wait). Finished
    jobs let go of (``retention.py``) are read back from ``_archive``, the store that holds
    them. Each entry carries a ``completion`` the dispatcher sets when the job finishes."""

    _jobs: dict[str, JobEntry]
    _lock: threading.RLock
    _archive: StoreReader | None = None

    def status(self, job_id: str) -> JobStatus:
        """The job's latest snapshot. Takes no lock (one dict read; a snapshot is replaced
        whole, never changed): an event loop may call it while the dispatcher writes."""
        entry = self._jobs.get(job_id)
        if entry is not None:
            return entry.status
        stored = stored_status(self._archive, job_id) if self._archive is not None else None
        if stored is None:
            raise KeyError(f"no job {job_id!r}")
        return stored

    def jobs(self) -> list[JobStatus]:
        """The jobs held in memory (unfinished ones, and the latest finished ones)."""
        with self._lock:
            return [j.status for j in self._jobs.values()]

    def holding(self) -> threading.RLock:
        """The table's lock: ``with table.holding(): submit(a); submit(b)`` makes the
        dispatcher see the jobs together (one burst, batched together)."""
        return self._lock

    def handle(self, job_id: str) -> JobHandle:
        """The ``handles.JobHandle`` of a job in memory, or of a finished one in the store;
        KeyError for an unknown id."""
        from chord_core.runtime.handles import JobHandle

        entry = self._jobs.get(job_id)  # no lock, as in ``status``
        if entry is not None:
            return JobHandle(job_id, entry.completion, lambda: entry.status)
        return JobHandle.finished(self.status(job_id))

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus:
        """Block until the job finishes (tests and the CLI); returns its final status."""
        return self.handle(job_id).result(timeout)


def stored_status(store: StoreReader, job_id: str) -> JobStatus | None:
    """A finished job as the store holds it (its result included), or None."""
    row = store.get_job(job_id)
    if row is None or row["state"] not in FINISHED_STATES:
        return None
    try:
        spec = JobSpec.from_dict(row["spec"])
        doc = store.get_result(job_id)
        result = Result.from_dict(doc) if doc else None
    except (KeyError, TypeError, ValueError, ChordError) as exc:
        log.warning("stored job %s cannot be read back (%s)", job_id, exc)
        return None
    return JobStatus(job_id, spec, JobState(row["state"]), row["submitted_at"] or 0.0,
                     row["started_at"], row["finished_at"], result=result,
                     error=row["error"], worker=row["worker"])

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
from enum import Enum
from typing import Any

from chord_core.analysis.request import AnalysisRequest
from chord_core.types import ProgressEvent, Result, SamplingPlan, VideoInfo

log = logging.getLogger(__name__)

MAX_EVENTS_KEPT = 200


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self.value in FINISHED_STATES


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
    # frames chosen by the caller (long video: one chunk's frames) instead of the planner's;
    # ``info`` spares a probe per job. Not stored: such jobs are resumed by their caller.
    info: VideoInfo | None = None
    plan: SamplingPlan | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request.to_dict(), "model": self.model, "label": self.label,
                "key": self.key, "batch_id": self.batch_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        return cls(AnalysisRequest.from_dict(data["request"]), data.get("model"),
                   data.get("label", ""), data.get("key", ""), data.get("batch_id"))


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
                "result": self.result.to_dict() if self.result else None}


class JobTable:
    """What every executor shares: a table of jobs (``_jobs[id].status``) under ``_lock``,
    and the read side of the executor interface (status / jobs / wait)."""

    _jobs: dict[str, Any]
    _lock: Any

    def status(self, job_id: str) -> JobStatus:
        with self._lock:
            if job_id not in self._jobs:
                raise KeyError(f"no job {job_id!r}")
            return self._jobs[job_id].status

    def jobs(self) -> list[JobStatus]:
        with self._lock:
            return [j.status for j in self._jobs.values()]

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus:
        """Block until the job finishes (tests and the CLI); returns its final status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.status(job_id)
            if st.state.finished:
                return st
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{job_id} still {st.state.value} after {timeout} s")
            time.sleep(0.05)

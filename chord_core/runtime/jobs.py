"""Job runner: analyses run off the caller's thread, with progress, cancel and results kept.

``JobRunner`` is the in-process executor: one worker thread owns one ``Engine`` (the model is
loaded once, and reloaded only when a job asks for another model). The Streamlit app keeps
one runner per server (``st.cache_resource``) and polls ``status()``; tests use it directly.
A failing job — bad file, bad option, even an unexpected bug — is recorded as ``failed`` with a
readable error and never stops the worker or touches other jobs' results.

States: queued → running → done | failed | cancelled (a queued job can be cancelled too).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable

from chord_core.config import ModelConfig
from chord_core.analysis.engine import AnalysisRequest, Engine
from chord_core.errors import ChordError, JobCancelled, internal_error
from chord_core.types import ModelInfo, ProgressEvent, Result, SamplingPlan, VideoInfo

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
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


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


@dataclass
class _Job:
    status: JobStatus
    cancel: threading.Event = field(default_factory=threading.Event)


EngineFactory = Callable[[ModelConfig], Engine]


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


class JobRunner(JobTable):
    """Queue + one worker thread + one engine. Thread-safe."""

    def __init__(self, model_cfg: ModelConfig | None = None, *,
                 engine_factory: EngineFactory = Engine) -> None:
        self.model_cfg = model_cfg or ModelConfig()
        self._factory = engine_factory
        self._engine: Engine | None = None
        self._jobs: dict[str, _Job] = {}
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._model_state: dict[str, Any] = {"state": "not_loaded", "model": None,
                                             "info": None, "error": None}
        self._thread = threading.Thread(target=self._loop, name="chord-worker", daemon=True)
        self._thread.start()

    # -- public API -----------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> str:
        job_id = f"job-{next(self._ids):05d}-{int(time.time() * 1000) % 100000:05d}"
        with self._lock:
            self._jobs[job_id] = _Job(JobStatus(job_id, spec, JobState.QUEUED, time.time()))
        self._queue.put(job_id)
        return job_id

    def cancel(self, job_id: str) -> bool:
        """Ask a job to stop. Queued jobs are cancelled at once; running ones at the next
        stage boundary or frame. Returns False when the job had already finished."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.status.state.finished:
                return False
            job.cancel.set()
            if job.status.state is JobState.QUEUED:
                job.status = replace(job.status, state=JobState.CANCELLED,
                                     finished_at=time.time())
            return True

    def model_state(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._model_state)

    def shutdown(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    # -- worker ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            job_id = self._queue.get()
            if job_id is None:
                return
            with self._lock:
                job = self._jobs[job_id]
                if job.status.state is not JobState.QUEUED:
                    continue
                job.status = replace(job.status, state=JobState.RUNNING, started_at=time.time(),
                                     worker="thread")
            self._run(job)

    def _run(self, job: _Job) -> None:
        job_id = job.status.job_id
        try:
            engine = self._engine_for(job.status.spec.model)
            spec = job.status.spec
            result = engine.analyze(spec.request, info=spec.info, sampling_plan=spec.plan,
                                    on_progress=lambda ev: self._event(job_id, ev),
                                    cancel=job.cancel)
            self._finish(job_id, JobState.DONE, result=result)
        except JobCancelled:
            self._finish(job_id, JobState.CANCELLED)
        except ChordError as exc:
            log.warning("%s failed: %s", job_id, exc)
            self._finish(job_id, JobState.FAILED, error=exc.to_dict())
        except Exception as exc:  # noqa: BLE001 — a bug must not kill the worker thread
            log.exception("%s crashed", job_id)
            self._finish(job_id, JobState.FAILED, error=internal_error(exc))

    def _engine_for(self, model: str | None) -> Engine:
        cfg = self.model_cfg if not model else replace(self.model_cfg, model=model)
        if self._engine is not None and self._engine.model_cfg.model == cfg.model:
            return self._engine
        if self._engine is not None:
            self._engine.unload()
        self._set_model_state("loading", cfg.model)
        engine = self._factory(cfg)
        try:
            engine.load()
        except Exception as exc:
            err = exc.to_dict() if isinstance(exc, ChordError) else {"message": str(exc)}
            self._set_model_state("failed", cfg.model, error=err)
            raise
        self._engine = engine
        self._set_model_state("ready", cfg.model, info=engine.model_info)
        return engine

    def _set_model_state(self, state: str, model: str, *, info: ModelInfo | None = None,
                         error: dict | None = None) -> None:
        with self._lock:
            self._model_state = {"state": state, "model": model,
                                 "info": info.to_dict() if info else None, "error": error}

    def _event(self, job_id: str, event: ProgressEvent) -> None:
        with self._lock:
            st = self._jobs[job_id].status
            events = (st.events + (event,))[-MAX_EVENTS_KEPT:]
            self._jobs[job_id].status = replace(st, last_event=event, events=events)

    def _finish(self, job_id: str, state: JobState, *, result: Result | None = None,
                error: dict | None = None) -> None:
        with self._lock:
            st = self._jobs[job_id].status
            self._jobs[job_id].status = replace(st, state=state, result=result, error=error,
                                                finished_at=time.time())

"""The seams of the runtime as ``Protocol``s, where ``Any`` stood: what the manager needs of
a job store, what the service, the batch runner and the CLI need of a job manager, and what
a worker calls on its engine (``analysis.engine.Engine``, or a scripted one in tests).

Structural: ``store.Store`` and ``manager.JobManager`` satisfy them without naming them, and
so does a spy or a test double at the boundary (e.g. a store wrapper that records writes).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from chord_core.runtime.store_rows import StoreReader

if TYPE_CHECKING:
    import sqlite3
    import threading

    from chord_core.analysis.ground_chunks import GroundChunk
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.config import ModelConfig
    from chord_core.types import ModelInfo, ProgressEvent, Result, SamplingPlan, VideoInfo

    from chord_core.runtime.groups import EndPolicy, GroupHandle, GroupSpec, Summarise
    from chord_core.runtime.handles import JobHandle
    from chord_core.runtime.jobs import JobSpec, JobStatus
    from chord_core.runtime.parents import ParentJobs


class JobStore(StoreReader, Protocol):
    """The job rows and results (``store.Store``): what the manager, its lease and the
    batch runner read and write. Readers above the runtime get only ``StoreReader``
    (``store_read.StoreView``): the manager is the one writer."""

    def add_job(self, job_id: str, *, video_path: str, task: str, query: str = "",
                model: str = "", key: str = "", spec: Mapping[str, Any] | None = None,
                batch_id: str | None = None, video_name: str | None = None,
                state: str = "queued", submitted_at: float | None = None,
                owner: str | None = None, parent: str | None = None) -> None: ...

    def update_state(self, job_id: str, state: str, *, worker: str | None = None,
                     error: Mapping[str, Any] | None = None,
                     progress: Mapping[str, Any] | None = None,
                     owner: str | None = None) -> None: ...

    def save_result(self, job_id: str, result: Mapping[str, Any] | Any, *,
                    state: str = "done", owner: str | None = None) -> None: ...

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...


class JobRunner(Protocol):
    """A job manager as its callers use it (``manager.JobManager``). ``parents`` writes the
    rows of parent jobs (long-video runs, batches, ``/batch_predict`` requests)."""

    parents: ParentJobs

    def submit(self, spec: JobSpec, *, job_id: str | None = None) -> JobHandle: ...

    def submit_group(self, group: GroupSpec, children: Sequence[JobSpec], *,
                     policy: EndPolicy = ..., reuse_done: bool = True,
                     summarise: Summarise | None = None) -> GroupHandle: ...

    def handle(self, job_id: str) -> JobHandle: ...

    def status(self, job_id: str) -> JobStatus: ...

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus: ...

    def cancel(self, job_id: str) -> bool: ...

    def jobs(self) -> list[JobStatus]: ...

    def holding(self) -> Any: ...

    def workers(self) -> list[dict[str, Any]]: ...

    def model_state(self) -> dict[str, Any]: ...

    def shutdown(self, timeout: float = 10.0, *, abort: bool = False) -> None: ...



class WorkerEngine(Protocol):
    """What a worker (``workers.serve``) calls on its engine: load (and warm up) the model,
    run one task or a batch of them, read ahead, and let go of the model for another. A
    batch call returns, per request, a Result or the error (a dict or a ChordError)."""

    model_cfg: ModelConfig

    def load(self) -> Any: ...

    def warmup(self, on_step: Any = None, tasks: Sequence[str] | None = None
               ) -> dict[str, float]: ...

    @property
    def model_info(self) -> ModelInfo | None: ...

    def unload(self) -> None: ...

    def analyze(self, request: AnalysisRequest, *,
                on_progress: Callable[[ProgressEvent], None] | None = None,
                cancel: threading.Event | None = None, info: VideoInfo | None = None,
                sampling_plan: SamplingPlan | None = None,
                probe_s: float = 0.0) -> Result: ...

    def ground_chunk(self, info: VideoInfo, sampling_plan: SamplingPlan,
                     request: AnalysisRequest, **kwargs: Any) -> GroundChunk: ...

    def entail_many(self, requests: Sequence[AnalysisRequest], **kwargs: Any
                    ) -> list[Any]: ...

    def describe_many(self, requests: Sequence[AnalysisRequest], **kwargs: Any
                      ) -> list[Any]: ...


EngineFactory = Callable[["ModelConfig"], WorkerEngine]

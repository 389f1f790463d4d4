"""The seams of the runtime as ``Protocol``s, where ``Any`` stood: what the manager needs of
a job store, and what the service, the batch runner and the CLI need of a job manager.

Structural: ``store.Store`` and ``manager.JobManager`` satisfy them without naming them, and
so does a spy or a test double at the boundary (e.g. a store wrapper that records writes).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Mapping, Protocol

if TYPE_CHECKING:
    import sqlite3

    from chord_core.runtime.handles import JobHandle
    from chord_core.runtime.jobs import JobSpec, JobStatus


class JobStore(Protocol):
    """The job rows and results (``store.Store``): what the manager, its lease and the
    batch runner read and write."""

    def add_job(self, job_id: str, *, video_path: str, task: str, query: str = "",
                model: str = "", key: str = "", spec: Mapping[str, Any] | None = None,
                batch_id: str | None = None, owner: str | None = None,
                **more: Any) -> None: ...

    def update_state(self, job_id: str, state: str, *, owner: str | None = None,
                     **more: Any) -> None: ...

    def save_result(self, job_id: str, result: Any, *, state: str = "done",
                    owner: str | None = None) -> None: ...

    def get_job(self, job_id: str) -> dict[str, Any] | None: ...

    def get_result(self, job_id: str) -> dict[str, Any] | None: ...

    def find_done(self, key: str) -> str | None: ...

    def list_jobs(self, limit: int = 50, offset: int = 0, state: str | None = None,
                  batch_id: str | None = None) -> list[dict[str, Any]]: ...

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...


class JobRunner(Protocol):
    """A job manager as its callers use it (``manager.JobManager``)."""

    def submit(self, spec: JobSpec, *, job_id: str | None = None) -> JobHandle: ...

    def handle(self, job_id: str) -> JobHandle: ...

    def status(self, job_id: str) -> JobStatus: ...

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus: ...

    def cancel(self, job_id: str) -> bool: ...

    def jobs(self) -> list[JobStatus]: ...

    def holding(self) -> Any: ...

    def workers(self) -> list[dict[str, Any]]: ...

    def model_state(self) -> dict[str, Any]: ...

    def shutdown(self, timeout: float = 10.0, *, abort: bool = False) -> None: ...


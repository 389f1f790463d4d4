"""The job store's records and its read seam, as types: ``JobRow`` (a ``jobs`` row, its JSON
columns decoded), ``BatchRow``, and ``StoreReader`` (the reads ``store.Store`` and
``store_read.StoreView`` both have). Types only: the store and its readers import them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Protocol, TypedDict


class JobRow(TypedDict):
    """One ``jobs`` row as the store returns it (its JSON columns decoded)."""

    job_id: str
    batch_id: str | None
    key: str
    state: str  # queued | running | done | failed | cancelled
    video_path: str
    video_name: str
    task: str
    query: str
    model: str
    spec: dict[str, Any]  # the JobSpec's fields (``label``; a parent's ``long_run``)
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    worker: str | None
    attempts: int
    error: dict[str, Any] | None  # an error record (``errors.ChordError.to_dict``)
    progress: dict[str, Any] | None
    owner: str | None  # the lease of the process that runs it (leases.py)
    parent: str | None  # its parent job (a long run's chunk, a batch's clip)
    summary: dict[str, Any] | None  # a parent's plan, progress and document


class BatchRow(TypedDict):
    """One ``batches`` row with ``counts``: how many of its jobs are in each state."""

    batch_id: str
    created_at: float
    out_dir: str
    summary: dict[str, Any] | None
    counts: dict[str, int]


class StoreReader(Protocol):
    """What a reader may ask of the job store (``store.Store`` and ``StoreView`` have it)."""

    @property
    def path(self) -> Path: ...

    @property
    def notices(self) -> list[str]: ...

    def get_job(self, job_id: str) -> JobRow | None: ...

    def get_result(self, job_id: str) -> dict[str, Any] | None: ...

    def find_done(self, key: str) -> str | None: ...

    def list_jobs(self, limit: int = 50, offset: int = 0, state: str | None = None,
                  batch_id: str | None = None, *, top_level: bool = False,
                  parent: str | None = None) -> list[JobRow]: ...

    def count_jobs(self, state: str | None = None, batch_id: str | None = None, *,
                   top_level: bool = False, parent: str | None = None) -> int: ...

    def get_batch(self, batch_id: str) -> BatchRow | None: ...

    def read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]: ...

    def close(self) -> None: ...


__all__ = ["BatchRow", "JobRow", "StoreReader"]

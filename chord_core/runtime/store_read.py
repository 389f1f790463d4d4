"""The job store's read side: the one door through which everything above the runtime (History,
the Library, the CLI's views, the service's views) reads jobs, results and batches.

Only the job manager writes the store (``store_link.StoreLink`` for job rows and results,
``JobManager.parents`` for parent rows and deletes); readers hold a ``StoreView``, which has
no write method at all, so a page or a route cannot write a row by mistake. The records
come back typed (``JobRow``, ``BatchRow``) where callers indexed plain dicts.

``StoreView.open()`` opens the store file for reading (a CLI that only reads, the app before
its workers start); a manager started with a view (``cluster.start_manager(store=view)``)
writes that view's store, so the app's pages and its manager share one connection.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chord_core.runtime import store_history
from chord_core.runtime.store import Store, default_store_path
from chord_core.runtime.store_rows import BatchRow, JobRow, StoreReader

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobStore


class StoreView:
    """A read-only view of a job store: the reads of ``StoreReader`` and History's queries,
    no writes. ``open`` makes one over the store file (its own connection, closed by
    ``close``); ``StoreView(store)`` views a store the runtime already has open."""

    def __init__(self, store: StoreReader, *, owned: bool = False) -> None:
        self._store = store
        self._owned = owned

    @classmethod
    def open(cls, path: str | Path | None = None) -> StoreView:
        """The store at ``path`` (default: ``chord.sqlite3`` in the data dir), for reading.
        A damaged file is moved aside as when the manager opens it (``notices`` says so)."""
        return cls(Store(path), owned=True)

    @property
    def path(self) -> Path:
        return self._store.path

    @property
    def notices(self) -> list[str]:
        """What the user should be told about the store (a damaged file moved aside)."""
        return self._store.notices

    def get_job(self, job_id: str) -> JobRow | None:
        return self._store.get_job(job_id)

    def get_result(self, job_id: str) -> dict[str, Any] | None:
        """The job's stored ``chord.result/v1`` document, if it has one."""
        return self._store.get_result(job_id)

    def find_done(self, key: str) -> str | None:
        """The newest done job with this content key and a stored result, if any."""
        return self._store.find_done(key)

    def list_jobs(self, limit: int = 50, offset: int = 0, state: str | None = None,
                  batch_id: str | None = None, *, top_level: bool = False,
                  parent: str | None = None) -> list[JobRow]:
        return self._store.list_jobs(limit, offset, state, batch_id, top_level=top_level,
                                     parent=parent)

    def count_jobs(self, state: str | None = None, batch_id: str | None = None, *,
                   top_level: bool = False, parent: str | None = None) -> int:
        return self._store.count_jobs(state, batch_id, top_level=top_level, parent=parent)

    def get_batch(self, batch_id: str) -> BatchRow | None:
        return self._store.get_batch(batch_id)

    def read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """Rows of one SELECT (``Store.read`` refuses anything else)."""
        return self._store.read(sql, params)

    def children(self, job_id: str, limit: int = 100_000) -> list[JobRow]:
        """A parent's children (a run's chunks, a batch's clips), oldest first."""
        return list(reversed(self.list_jobs(limit=limit, parent=job_id)))

    def history(self, query: store_history.HistoryQuery, now: float | None = None
                ) -> list[JobRow]:
        """One page of History's rows (``store_history.history_rows``)."""
        return store_history.history_rows(self, query, now)

    def history_count(self, query: store_history.HistoryQuery) -> int:
        return store_history.history_count(self, query)

    def history_tasks(self) -> list[str]:
        return store_history.history_tasks(self)

    def first_child_video(self, parent_id: str) -> str:
        return store_history.first_child_video(self, parent_id)

    def close(self) -> None:
        """Close the view's own connection (a view of another's store leaves it open)."""
        if self._owned:
            if isinstance(self._store, Store):
                self._store.close()

    def __enter__(self) -> StoreView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def writable(store: JobStore | StoreView | None) -> JobStore | None:
    """The store a manager writes: the one under a view (the runtime's own), else as given.
    Only the runtime calls this (``cluster.start_manager``): the manager is the writer."""
    if not isinstance(store, StoreView):
        return store
    inner = store._store
    if not isinstance(inner, Store):
        raise TypeError(f"a view of {type(inner).__name__} cannot be written: start the "
                        "manager with the Store itself")
    return inner


__all__ = ["BatchRow", "JobRow", "StoreReader", "StoreView", "default_store_path", "writable"]

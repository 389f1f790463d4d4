"""Parent jobs: a long-video run (chapters, long grounding, a search) is one job whose
children are ordinary jobs of the manager.

The manager is the only writer of job rows; ``JobManager.parents`` is its side for parents.
A parent's row (``store_parents``) carries the run's summary — its plan, its progress after
every child, its final document — and each child is submitted with ``JobSpec.parent`` set and
a fixed id under the parent (``<run>-c0007``), so the child's row carries ``parent`` and its
spec keeps the chunk's frames (``info``/``plan``). Started again after a crash, the run reads
its summary and its children's stored results back from here and submits only the children
that did not finish. History lists the parent as one row with its children inside.

The long run itself (which children, in what order, how they combine) is driven from above
(``chord_core.longvideo.runs``); the runtime never imports it.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from chord_core.errors import AlreadyRunning, ChordError, store_failure
from chord_core.runtime import store_parents
from chord_core.types import Result

if TYPE_CHECKING:
    from chord_core.runtime.groups import GroupHandle
    from chord_core.runtime.protocols import JobStore
    from chord_core.runtime.store_rows import JobRow

log = logging.getLogger(__name__)


class ParentJobs:
    """Parent rows of the manager's store (no store: nothing is kept and nothing resumes).
    A store that fails (a full disk) never stops a run: the error is logged and kept in
    ``problem``, and the run goes on from memory."""

    def __init__(self, store: JobStore | None, owner: str | None = None) -> None:
        self.store, self.owner = store, owner  # owner: the manager's lease (leases.py)
        # the groups this manager drives now, by parent id (``group_start.py``)
        self.live: dict[str, GroupHandle] = {}
        self.problem: dict[str, Any] | None = None  # the last store error; None: writes go

    def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.store is None:
            return None
        try:
            return fn(self.store, *args, **kwargs)
        except AlreadyRunning:
            raise  # not a store problem: the caller is told, the run is not started
        except (ChordError, sqlite3.Error) as exc:
            self.problem = (exc if isinstance(exc, ChordError) else store_failure(exc)).to_dict()
            log.error("store: parent row not written: %s", self.problem["message"])
        except (ValueError, KeyError) as exc:
            log.warning("store: parent row not written: %s", exc)
        return None

    def open(self, job_id: str, *, kind: str, video_path: str, model: str, label: str,
             query: str = "", spec: Mapping[str, Any] | None = None,
             parent: str | None = None) -> dict[str, Any]:
        """Start (or take up again) the parent ``job_id``; returns its stored row ({} without
        a store). ``spec`` is what the run was started with (``long_run``: its kind).
        Raises ``AlreadyRunning`` when another live process drives it."""
        doc = {**dict(spec or {}), "long_run": kind, "label": label}
        row = self._write(store_parents.open_parent, job_id, video_path=video_path,
                               task=kind, query=query, model=model, spec=doc,
                               video_name=label, parent=parent, owner=self.owner)
        return dict(row or {})

    def summarise(self, job_id: str, summary: Mapping[str, Any]) -> None:
        """The parent's summary now (plan, progress, document so far)."""
        self._write(store_parents.set_summary, job_id, summary)

    def finish(self, job_id: str, state: str, summary: Mapping[str, Any],
               error: Mapping[str, Any] | None = None) -> None:
        """The parent ended (done, failed or cancelled) with this summary."""
        self._write(store_parents.set_summary, job_id, summary, state=state,
                         error=error)

    def stored_result(self, child_id: str) -> Result | None:
        """A child's result when the store has it done (a run resumed skips that child)."""
        if self.store is None:
            return None
        try:
            row = self.store.get_job(child_id)
            doc = self.store.get_result(child_id) if row and row["state"] == "done" else None
            return None if doc is None else Result.from_dict(doc)
        except (ChordError, KeyError, TypeError, ValueError) as exc:
            log.warning("stored result of %s unreadable (%s); running it again", child_id, exc)
            return None

    def done_ids(self, child_ids: Sequence[str]) -> set[str]:
        """Which children the store has done (one query; their results are not read)."""
        return set() if self.store is None else store_parents.done_ids(self.store, child_ids)

    def delete(self, job_id: str) -> int:
        """Delete a job with its children from the store (History's delete); how many rows
        went. Raises ``AlreadyRunning`` for a row still running under a live lease."""
        return 0 if self.store is None else store_parents.delete_tree(self.store, job_id)

    def children(self, job_id: str) -> list[JobRow]:
        """The parent's children as stored, oldest first ([] without a store)."""
        return [] if self.store is None else store_parents.children(self.store, job_id)

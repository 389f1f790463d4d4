"""The History page's query of the job store: top-level jobs (one row per job or run),
filtered by task, state and text in the file name, sorted, one page at a time.

A long-video run, a batch or a ``/batch_predict`` request is a parent job (its children carry
``parent``): only parents and jobs without one are History rows, whoever made them. The name
filter looks at the stored file name and the job's label (an upload's own name, which the
stored file, named by its content hash, does not keep); a parent matches by its own name or
by one of its children's (a batch holding ``street-cam.mp4`` is found by "street"). SQL does the filtering, sorting and
paging, so a page costs the same with ten rows stored or a hundred thousand.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from chord_core.runtime.store import _JOB_COLUMNS, _job_dict
from chord_core.runtime.store_rows import JobRow, StoreReader
from chord_core.runtime.store_states import state_name

# ORDER BY per sort; "longest": the job's own run time (a queued job has none: last)
_RUN_S = ("CASE WHEN started_at IS NULL OR state = 'queued' THEN -1 "
          "ELSE COALESCE(finished_at, ?) - started_at END")
ORDERS = {"newest": "submitted_at DESC, rowid DESC",
          "oldest": "submitted_at ASC, rowid ASC",
          "longest": f"{_RUN_S} DESC, submitted_at DESC, rowid DESC"}
_NAME = "lower(video_name || ' ' || COALESCE(json_extract(spec_json, '$.label'), ''))"
MAX_NAME_CHARS = 200  # a filter text longer than any file name is cut, not sent whole


@dataclass(frozen=True)
class HistoryQuery:
    """What the History page asks for: filters (None: any), a sort of ``ORDERS``, a page."""

    task: str | None = None
    state: str | None = None
    name: str = ""
    order: str = "newest"
    limit: int = 20
    offset: int = 0

    def where(self) -> tuple[str, list[Any]]:
        clauses, params = ["parent IS NULL"], []
        if self.task:
            clauses.append("task = ?")
            params.append(self.task)
        if self.state:
            clauses.append("state = ?")
            params.append(state_name(self.state))
        text = self.name.strip().lower()[:MAX_NAME_CHARS]
        if text:  # a parent (a batch) is found by its own name or by one of its clips'
            clauses.append(f"(instr({_NAME}, ?) > 0 OR job_id IN (SELECT parent FROM jobs "
                           f"WHERE parent IS NOT NULL AND instr({_NAME}, ?) > 0))")
            params += [text, text]
        return " WHERE " + " AND ".join(clauses), params


def history_rows(store: StoreReader, query: HistoryQuery, now: float | None = None
                 ) -> list[JobRow]:
    """One page of top-level job rows (no results), in ``query.order``."""
    if query.order not in ORDERS:
        raise ValueError(f"unknown sort {query.order!r}; one of {', '.join(ORDERS)}")
    where, params = query.where()
    if query.order == "longest":
        params = [*params, time.time() if now is None else now]
    rows = store.read(f"SELECT {', '.join(_JOB_COLUMNS)} FROM jobs{where} "
                      f"ORDER BY {ORDERS[query.order]} LIMIT ? OFFSET ?",
                      (*params, max(0, int(query.limit)), max(0, int(query.offset))))
    return [_job_dict(r) for r in rows]


def history_count(store: StoreReader, query: HistoryQuery) -> int:
    """How many top-level rows match ``query``'s filters (its sort and page aside)."""
    where, params = query.where()
    return int(store.read(f"SELECT COUNT(*) FROM jobs{where}", tuple(params))[0][0])


def history_tasks(store: StoreReader) -> list[str]:
    """The tasks of top-level rows stored, for the task filter (sorted)."""
    rows = store.read("SELECT DISTINCT task FROM jobs WHERE parent IS NULL AND task <> '' "
                      "ORDER BY task")
    return [str(r[0]) for r in rows]


__all__ = ["HistoryQuery", "ORDERS", "history_rows", "history_count", "history_tasks"]


def first_child_video(store: StoreReader, parent_id: str) -> str:
    """The clip of a parent's first child ("" when it has none): a batch's row shows its
    first clip's thumbnail, since the batch itself has no one clip."""
    rows = store.read("SELECT video_path FROM jobs WHERE parent = ? AND video_path IS NOT NULL "
                      "ORDER BY submitted_at, rowid LIMIT 1", (parent_id,))
    return str(rows[0]["video_path"]) if rows else ""

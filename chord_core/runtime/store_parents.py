"""Parent jobs' rows in the job store: a long-video run is one job row whose children (its
chunk jobs) carry ``parent``.

A parent's row is an ordinary ``jobs`` row (History lists it, ``?job=`` opens it) with two
columns of its own: ``summary_json`` holds what the run planned and how far it got (``plan``,
``progress``, and at the end its ``document``: chapters, a search, a long grounding result),
and its state says whether the run is going (``running``), stopped part-way (``queued``
after a crash: its children's results are kept), or ended. A parent is done by its
document, not by a ``results`` row (a chord.chapters/v1 document is not a chord.result/v1).
Only the job runtime writes these rows (``runtime.parents.ParentJobs``).
"""

from __future__ import annotations

import json
import socket
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from chord_core.errors import AlreadyRunning
from chord_core.runtime.jobs import FINISHED_STATES
from chord_core.runtime.leases import owner_gone
from chord_core.runtime.store_rows import JobRow, StoreReader

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobStore


def open_parent(store: JobStore, job_id: str, *, video_path: str, task: str, query: str = "",
                model: str = "", spec: Mapping[str, Any] | None = None,
                video_name: str | None = None, parent: str | None = None,
                owner: str | None = None) -> JobRow | None:
    """The parent's row, made ``running`` (a new row, or one a previous run left unfinished:
    its summary is kept); a done one is left as it is. Returns the row (None: gone). A ``parent`` the
    store does not have (chapters read from a file) is left out. ``owner``: the lease of the
    process that drives it, so another live process never claims it as an orphan; a row
    another live process drives is not taken (``AlreadyRunning``: the same run started twice
    would run its chunks twice), one whose owner is gone is."""
    parent = parent if parent and store.get_job(parent) is not None else None
    if store.get_job(job_id) is None:
        try:
            store.add_job(job_id, video_path=video_path, task=task, query=query, model=model,
                          spec=spec, video_name=video_name, owner=owner)
        except ValueError:
            pass  # another process made it meanwhile
    with store.transaction() as conn:
        live = _live_owner(conn, job_id, owner)
        if live is not None:
            raise AlreadyRunning(
                f"{video_name or job_id}: this {task} run is already going in another process "
                f"(pid {live['pid']} on {live['host']}: {live['label'] or '?'})",
                hint="wait for it to finish, then run this again: its result is read back "
                     "at once; or stop that process (its finished chunks are kept)")
        conn.execute("UPDATE jobs SET state = 'running', started_at = ?, finished_at = NULL, "
                     "error_json = NULL, attempts = attempts + 1, parent = ?, owner = ? "
                     "WHERE job_id = ? AND state <> 'done'",
                     (time.time(), parent, owner, job_id))
    return store.get_job(job_id)


def _live_owner(conn: Any, job_id: str, owner: str | None) -> Any:
    """The ``owners`` row of the live process that drives the unfinished parent ``job_id``
    when that is not ``owner``; None when it may be taken (no owner, ours, or gone)."""
    row = conn.execute("SELECT owner, state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    if row is None or row["owner"] in (None, owner) or row["state"] == "done":
        return None
    lease = conn.execute("SELECT * FROM owners WHERE owner_id = ?", (row["owner"],)).fetchone()
    if lease is None or owner_gone(lease, time.time(), socket.gethostname()):
        return None
    return lease


def set_summary(store: JobStore, job_id: str, summary: Mapping[str, Any], *,
                state: str | None = None, error: Mapping[str, Any] | None = None) -> None:
    """Write the parent's summary; with ``state`` (done, failed, cancelled), how it ended."""
    sets: list[str] = ["summary_json = ?"]
    params: list[Any] = [json.dumps(dict(summary), default=str)]
    if state is not None:
        if state not in FINISHED_STATES:
            raise ValueError(f"a parent job ends done, failed or cancelled, not {state!r}")
        sets += ["state = ?", "finished_at = ?", "error_json = ?"]
        params += [state, time.time(), None if error is None else json.dumps(dict(error))]
    with store.transaction() as conn:
        cur = conn.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE job_id = ?",
                           (*params, job_id))
        if cur.rowcount == 0:
            raise KeyError(f"no job {job_id!r}")


def children(store: StoreReader, job_id: str, limit: int = 100_000) -> list[JobRow]:
    """The parent's chunk jobs, in the order they were submitted."""
    return list(reversed(store.list_jobs(limit=limit, parent=job_id)))


def is_parent(row: Mapping[str, Any] | None) -> bool:
    """Whether a job row is a parent job (a long-video run), by its spec."""
    return row is not None and bool((row.get("spec") or {}).get("long_run"))


def delete_tree(store: JobStore, job_id: str) -> int:
    """Delete the job ``job_id`` with its children (a run's chunks, its searches), in one
    transaction; returns how many rows went. A row that is unfinished under a live lease
    (this process's or another's) is not deleted: ``AlreadyRunning`` (cancel it first) —
    its driver would write it again, or lose its result."""
    with store.transaction() as conn:
        ids, todo = [], [job_id]
        while todo:
            jid = todo.pop()
            ids.append(jid)
            todo += [str(r["job_id"]) for r in conn.execute(
                "SELECT job_id FROM jobs WHERE parent = ?", (jid,))]
        for jid in ids:
            row = conn.execute("SELECT owner, state, video_name FROM jobs WHERE job_id = ?",
                               (jid,)).fetchone()
            if row is None or row["state"] not in ("queued", "running") or not row["owner"]:
                continue
            lease = conn.execute("SELECT * FROM owners WHERE owner_id = ?",
                                 (row["owner"],)).fetchone()
            if lease is not None and not owner_gone(lease, time.time(), socket.gethostname()):
                raise AlreadyRunning(
                    f"{row['video_name'] or jid} is {row['state']} in a live process (pid "
                    f"{lease['pid']}: {lease['label'] or '?'}); it was not deleted",
                    hint="cancel it first (or wait for it to finish), then delete it")
        marks = ", ".join("?" for _ in ids)
        conn.execute(f"DELETE FROM results WHERE job_id IN ({marks})", ids)
        return int(conn.execute(f"DELETE FROM jobs WHERE job_id IN ({marks})", ids).rowcount)


def done_ids(store: StoreReader, job_ids: Sequence[str]) -> set[str]:
    """Which of ``job_ids`` the store has done with a result (what a resumed run reuses),
    in one query a few hundred ids at a time, no result read."""
    out: set[str] = set()
    ids = list(job_ids)
    for k in range(0, len(ids), 500):  # under SQLite's bound on a statement's variables
        part = ids[k:k + 500]
        marks = ",".join("?" * len(part))
        out.update(str(r["job_id"]) for r in store.read(
            "SELECT j.job_id FROM jobs j JOIN results r ON r.job_id = j.job_id "
            f"WHERE j.state = 'done' AND j.job_id IN ({marks})", tuple(part)))
    return out

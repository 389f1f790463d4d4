"""A job row's states in the store: the moves ``Store.update_state`` allows, the columns each
move stamps, and the owner check of a write (``leases.py``: a process changes only the rows
its lease owns)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from chord_core.runtime.jobs import FINISHED_STATES

STATES = ("queued", "running", "done", "failed", "cancelled")
FINISHED = FINISHED_STATES
# Allowed moves through update_state (done only via save_result; same state = progress update).
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "failed", "cancelled"}),
    "running": frozenset({"queued", "failed", "cancelled"}),
    "failed": frozenset({"queued"}),
    "cancelled": frozenset({"queued"}),
    "done": frozenset(),
}


class NotOwner(ValueError):
    """A write to a job row that another process's lease owns (``leases.py``): refused, so
    one process never changes another's jobs."""


def state_name(value: Any) -> str:
    """A state (a ``JobState`` or its text) as the store writes it; ValueError if unknown."""
    text = str(getattr(value, "value", value))
    if text not in STATES:
        raise ValueError(f"unknown job state {value!r}; states are {', '.join(STATES)}")
    return text


def state_columns(old: str, new: str) -> tuple[list[str], list[Any]]:
    """The ``SET`` clauses and their parameters of a move from ``old`` to ``new``: entering
    ``running`` stamps ``started_at`` and counts an attempt, ``queued`` clears the run's
    columns, a finished state stamps ``finished_at``."""
    sets, params = ["state = ?"], [new]
    if new == old:
        return sets, params
    now: Any = time.time()
    if new == "running":
        sets += ["started_at = ?", "finished_at = NULL", "attempts = attempts + 1",
                 "error_json = NULL"]
        params.append(now)
    elif new == "queued":
        sets += ["started_at = NULL", "finished_at = NULL", "worker = NULL",
                 "progress_json = NULL"]
    elif new in FINISHED:
        sets.append("finished_at = ?")
        params.append(now)
    return sets, params


def current_state(conn: sqlite3.Connection, job_id: str, owner: str | None = None) -> str:
    """The row's state; KeyError for an unknown job, ``NotOwner`` when ``owner`` is given and
    the row is another lease's."""
    row = conn.execute("SELECT state, owner FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    if row is None:
        raise KeyError(f"no job {job_id!r}")
    if owner is not None and row["owner"] != owner:
        raise NotOwner(f"job {job_id} belongs to {row['owner']}, not to {owner}")
    return str(row["state"])

"""One owner per job: each process that runs jobs holds a lease in the store.

A process with a ``JobManager`` on a store (the app, ``serve``, ``batch``, a Ray driver) writes
one ``owners`` row — owner id, pid, host, the process's start time, a heartbeat and an
expiry — and renews it from its dispatcher every ``HEARTBEAT_S``. Each job row it adds
carries that owner id, and every later write of the row is refused (``store.NotOwner``) when
the row is no longer its own: one process never changes another's jobs.

On start a process claims the *orphans* — unfinished jobs whose owner is gone — and only
those (``claim_orphans``). An owner is gone when:

* it runs on this host and its pid is dead, or is now another process (the start time of a
  pid differs: a restarted container's ``serve`` is often pid 1 again). This is exact and
  immediate: a ``serve`` killed with ``kill -9`` and restarted resumes its jobs at once;
* it runs on another host (a shared data volume) and its lease expired (``LEASE_TTL_S``
  without a heartbeat);
* it has no ``owners`` row (it shut down cleanly and released its lease; or an older Chord
  wrote the job).

Claiming is one ``BEGIN IMMEDIATE`` transaction of conditional UPDATEs (``… AND owner IS
<the gone owner>``): two processes starting at once cannot both take a job. A claimed job
that was ``running`` when its owner died ``RESUME_LIMIT`` times fails with a reason instead
of taking down process after process.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from chord_core.errors import ResumeError

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobStore

log = logging.getLogger(__name__)

LEASE_TTL_S = 30.0   # another host's lease counts as gone this long after its last heartbeat
HEARTBEAT_S = 2.0    # how often the dispatcher renews its lease
RESUME_LIMIT = 3     # a job found running after its owner died this many times fails


def process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat``,
    field 22), '' where /proc is not there: with the pid it names one process for good."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces
    return fields[19] if len(fields) > 19 else ""


def pid_alive(pid: int, start: str) -> bool:
    """Whether ``pid`` on this host is still the process that started at ``start``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive, but is it ours?
        pass
    return not start or process_start(pid) in ("", start)


def owner_gone(row: Any, now: float, host: str) -> bool:
    """Whether the owner in ``owners`` row ``row`` is gone (see the module docstring)."""
    if row["host"] == host:
        return not pid_alive(int(row["pid"]), str(row["proc_start"]))
    return float(row["expires_at"]) < now


class Lease:
    """This process's lease on ``store``: acquire at start, ``renew`` from the dispatcher,
    ``release`` at a clean shutdown (its unfinished jobs then count as orphans)."""

    def __init__(self, store: JobStore, *, label: str | None = None,
                 ttl_s: float = LEASE_TTL_S) -> None:
        self.store, self.ttl_s = store, ttl_s
        self.owner_id = f"own-{uuid.uuid4().hex[:12]}"
        self.pid, self.host = os.getpid(), socket.gethostname()
        self.label = (label if label is not None else " ".join(sys.argv))[:200]

    def acquire(self) -> None:
        now = time.time()
        with self.store.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO owners (owner_id, pid, host, proc_start, "
                         "label, started_at, heartbeat_at, expires_at) VALUES "
                         "(?, ?, ?, ?, ?, ?, ?, ?)",
                         (self.owner_id, self.pid, self.host, process_start(self.pid),
                          self.label, now, now, now + self.ttl_s))
        log.info("lease %s taken (pid %d on %s)", self.owner_id, self.pid, self.host)

    def renew(self) -> bool:
        """Push the expiry on; False (and the row written again) when the row was gone — a
        process on another host took this one for dead, and may have claimed its jobs."""
        now = time.time()
        with self.store.transaction() as conn:
            cur = conn.execute("UPDATE owners SET heartbeat_at = ?, expires_at = ? "
                               "WHERE owner_id = ?", (now, now + self.ttl_s, self.owner_id))
            renewed = cur.rowcount > 0
        if not renewed:
            log.error("lease %s had lapsed and was dropped by another process; taking it "
                      "again (jobs that process claimed are its own now)", self.owner_id)
            self.acquire()
        return renewed

    def release(self) -> None:
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM owners WHERE owner_id = ?", (self.owner_id,))

    def claim_orphans(self) -> list[str]:
        """Take the unfinished jobs whose owner is gone, atomically; returns their ids,
        oldest first, now ``queued`` and this lease's. Jobs found running after
        ``RESUME_LIMIT`` deaths of their owner are failed instead (with the reason)."""
        now, claimed, given_up = time.time(), [], []
        with self.store.transaction() as conn:
            owners = conn.execute("SELECT * FROM owners").fetchall()
            gone = {str(r["owner_id"]) for r in owners
                    if r["owner_id"] != self.owner_id and owner_gone(r, now, self.host)}
            live = {str(r["owner_id"]) for r in owners} - gone
            rows = conn.execute("SELECT job_id, owner, state, attempts FROM jobs WHERE state "
                                "IN ('queued', 'running') ORDER BY submitted_at, rowid")
            for row in [r for r in rows if r["owner"] not in live]:
                if row["state"] == "running" and int(row["attempts"]) >= RESUME_LIMIT:
                    self._give_up(conn, row, now)
                    given_up.append(str(row["job_id"]))
                elif self._take(conn, row):
                    claimed.append(str(row["job_id"]))
            conn.executemany("DELETE FROM owners WHERE owner_id = ?", [(g,) for g in gone])
        if claimed or given_up:
            log.info("lease %s: resumed %d job(s) whose owner is gone%s", self.owner_id,
                     len(claimed), f"; failed {len(given_up)}" if given_up else "")
        return claimed

    def _take(self, conn: sqlite3.Connection, row: sqlite3.Row) -> bool:
        """One conditional UPDATE: the row is taken only if its owner is still the gone one."""
        cur = conn.execute("UPDATE jobs SET owner = ?, state = 'queued', started_at = NULL, "
                           "finished_at = NULL, worker = NULL, progress_json = NULL "
                           "WHERE job_id = ? AND owner IS ? AND state IN ('queued', 'running')",
                           (self.owner_id, row["job_id"], row["owner"]))
        return cur.rowcount == 1

    def _give_up(self, conn: Any, row: Any, now: float) -> None:
        import json

        error = ResumeError(f"the process running this job died {row['attempts']} times "
                            "while it ran; it was not resumed again",
                            hint="the clip may take the whole process down (memory?): check "
                                 "it with `python -m chord_core probe`, or submit it again "
                                 "to retry").to_dict()
        conn.execute("UPDATE jobs SET owner = ?, state = 'failed', finished_at = ?, "
                     "error_json = ? WHERE job_id = ? AND owner IS ?",
                     (self.owner_id, now, json.dumps(error), row["job_id"], row["owner"]))

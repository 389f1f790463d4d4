"""The job manager's side of the job store: writes that never stop a job, this process's
lease, and the jobs whose owner is gone.

A store problem (a full disk, a damaged file) is logged once and kept for the UI and CLI to
show (``problem``); the jobs keep running and their results stay in memory and with the
caller. A write the store refused for lack of space is kept, in order with the writes after
it (``unwritten``), and made again every ``RETRY_S`` until it goes through: a job finished on
a full disk is ``done`` in memory with ``pending_write``, and ``done`` in the store once space
returns. If the process dies first, its row is still unfinished and its owner gone: the next
start runs it again, once (``leases.py``).

Every write of a job row names this process's lease; ``resumable`` claims the jobs whose
owner is gone and hands them back with the same ids, so a restart neither loses nor repeats
work, and never takes a live process's jobs.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import contextmanager
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

from chord_core.errors import ChordError, DuplicateJob, ResumeError, store_failure
from chord_core.runtime.jobs import JobSpec
from chord_core.runtime.leases import HEARTBEAT_S, Lease
from chord_core.runtime.protocols import JobStore
from chord_core.runtime.store_states import NotOwner

RETRY_S = 2.0  # how often writes a full disk refused are tried again

log = logging.getLogger(__name__)




@dataclass(frozen=True)
class StoreWrite:
    """One write of a job row: what it is (for the log), its job, and the call on the store
    (a typed method of ``JobStore``, bound with its arguments — no method named by string)."""

    what: str
    job_id: str
    call: Callable[[JobStore], Any]


class StoreLink:
    """The store as the manager writes it: deferred, retried, under this process's lease."""

    def __init__(self, store: JobStore | None, *, lease: Lease | None = None) -> None:
        self.store = store
        self.lease = lease if lease is not None or store is None else Lease(store)
        self.problem: dict[str, Any] | None = None  # the last error; None: writes go through
        self._held: list[StoreWrite] | None = None
        self.unwritten: list[StoreWrite] = []  # refused; tried again in order
        self._next_retry = self._next_beat = 0.0
        self._beat_failing = False

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Writes made inside are held and made, in order, when the block ends: the
        dispatcher hands idle workers their next tasks first and writes the store after,
        while the GPUs are busy again. (Writes have no return value worth waiting for.)"""
        if self._held is not None:  # already deferring: the outer block writes them
            yield
            return
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            for write in held:
                self._put(write)

    # the three writes of a job row, each under this process's lease (``owner``)
    def add_job(self, job_id: str, **row: Any) -> None:
        """``store.add_job`` (a new job row: ``video_path``, ``task``, ``spec`` …)."""
        owner = self.owner()
        self._put(StoreWrite("add_job", job_id,
                             lambda s: s.add_job(job_id, owner=owner, **row)))

    def update_state(self, job_id: str, state: str, *, worker: str | None = None,
                     error: Mapping[str, Any] | None = None) -> None:
        """``store.update_state``: the job's new state (with its worker or error)."""
        owner = self.owner()
        self._put(StoreWrite("update_state", job_id, lambda s: s.update_state(
            job_id, state, worker=worker, error=error, owner=owner)))

    def save_result(self, job_id: str, result: Mapping[str, Any], *,
                    state: str = "done") -> None:
        """``store.save_result``: the job's result (``state``: done, or a cancelled job's
        partial result)."""
        owner = self.owner()
        self._put(StoreWrite("save_result", job_id, lambda s: s.save_result(
            job_id, result, state=state, owner=owner)))

    def owner(self) -> str | None:
        """This process's lease id (None without a store)."""
        return self.lease.owner_id if self.lease is not None else None

    def _put(self, write: StoreWrite) -> None:
        """Make ``write`` if there is a store; a failure is logged, never raised. Inside
        ``deferred`` it is held until the block ends; while earlier writes wait for space it
        queues behind them (a job's writes stay in order)."""
        if self.store is None:
            return
        if self._held is not None:
            self._held.append(write)
        elif self.unwritten:
            self.unwritten.append(write)
        else:
            self._call(write)

    def _call(self, write: StoreWrite) -> None:
        assert self.store is not None
        try:
            write.call(self.store)
        except (ChordError, sqlite3.Error) as exc:
            err = (exc if isinstance(exc, ChordError) else store_failure(exc)).to_dict()
            if err != self.problem:
                log.error("store: %s failed: %s", write.what, err["message"])
            self.problem = err
            self.unwritten.append(write)
        except NotOwner as exc:
            log.warning("store: %s refused: %s (another process owns the job now)",
                        write.what, exc)
        except (ValueError, KeyError) as exc:
            log.warning("store: %s failed: %s", write.what, exc)
        else:
            self.problem = None

    def unwritten_jobs(self) -> set[str]:
        """The ids of the jobs with a write waiting for space."""
        return {w.job_id for w in self.unwritten}

    def retry_due(self, *, force: bool = False) -> list[str]:
        """Try the refused writes again, in order, stopping at the first that still fails
        (every ``RETRY_S``, or now if ``force``); returns the job ids whose writes all went
        through now."""
        now = time.monotonic()
        if not self.unwritten or (now < self._next_retry and not force):
            return []
        self._next_retry = now + RETRY_S
        waiting, self.unwritten = self.unwritten, []
        for i, write in enumerate(waiting):
            self._call(write)
            if self.unwritten:  # still refused: it and the rest wait for the next try
                self.unwritten += waiting[i + 1:]
                break
        if not self.unwritten:
            log.info("store: %d delayed write(s) went through", len(waiting))
        return sorted({w.job_id for w in waiting} - self.unwritten_jobs())

    def next_due(self) -> list[float]:
        """When (``time.monotonic``) the lease is next renewed and refused writes next tried:
        the dispatcher's timers (it sleeps until the first)."""
        due = [self._next_beat] if self.lease is not None else []
        return due + ([self._next_retry] if self.unwritten else [])

    def heartbeat(self) -> None:
        """Renew the lease every ``HEARTBEAT_S`` (from the dispatcher's tick)."""
        now = time.monotonic()
        if self.lease is None or now < self._next_beat:
            return
        self._next_beat = now + HEARTBEAT_S
        try:
            self.lease.renew()
        except (ChordError, sqlite3.Error) as exc:
            if not self._beat_failing:  # once, not every 2 s: the problem is shown anyway
                log.warning("lease %s not renewed: %s (trying every %.0f s)",
                            self.lease.owner_id, exc, HEARTBEAT_S)
            self._beat_failing = True
        else:
            self._beat_failing = False

    def take_lease(self) -> bool:
        """Write this process's lease (at start, before any job row names it: a lease first
        written at the first renewal was logged as "lapsed"); False when the store refused."""
        if self.lease is None:
            return False
        try:
            self.lease.acquire()
        except (ChordError, sqlite3.Error) as exc:  # a full disk: run, resume next time
            log.error("store: could not take a lease: %s", exc)
            return False
        self._next_beat = time.monotonic() + HEARTBEAT_S
        return True

    def release(self) -> None:
        """Give the lease back (clean shutdown): this process's unfinished jobs become
        orphans for the next start to resume."""
        if self.lease is None:
            return
        try:
            self.lease.release()
        except (ChordError, sqlite3.Error) as exc:
            log.warning("lease %s not released: %s (it lapses by itself)",
                        self.lease.owner_id, exc)

    def resumable(self, by_key: dict[str, str]) -> Iterator[tuple[str, JobSpec]]:
        """(job id, spec) of each job this process claimed from a gone owner, oldest first.
        ``by_key`` is the caller's live content-key → job table: a claimed job whose key is
        already there is a duplicate left by an older Chord and is cancelled; one whose spec
        cannot be read is marked failed."""
        store = self.store
        if store is None or self.lease is None or not self.take_lease():
            return
        try:
            claimed = self.lease.claim_orphans()
        except (ChordError, sqlite3.Error) as exc:  # a full disk: run, resume next time
            log.error("store: could not take a lease or claim unfinished jobs: %s", exc)
            return
        for job_id in claimed:
            row = store.get_job(job_id)
            if row is None or (row["spec"] or {}).get("long_run"):
                continue  # a parent job: its driver (a long-video run) takes it up again
            try:
                spec = JobSpec.from_dict(row["spec"])
            except (KeyError, TypeError, ChordError) as exc:
                log.warning("stored job %s cannot be resumed (%s); marking it failed",
                            job_id, exc)
                self.update_state(job_id, "failed", error=ResumeError(
                    f"could not resume: {exc}", hint="submit the clip again").to_dict())
                continue
            if spec.key and spec.key in by_key:
                self.update_state(job_id, "cancelled", error=DuplicateJob(
                    f"same clip and settings as job {by_key[spec.key]}",
                    hint=f"its result is job {by_key[spec.key]}'s").to_dict())
                continue
            yield job_id, spec
            log.info("resumed stored job %s", job_id)


def mark_pending_writes(jobs: dict[str, Any], unwritten: set[str]) -> None:
    """Set each finished job's ``pending_write`` to whether a write of it waits for space
    (under the manager's lock)."""
    for job in jobs.values():
        st = job.status
        if st.state.finished and st.pending_write != (st.job_id in unwritten):
            job.status = replace(st, pending_write=st.job_id in unwritten)

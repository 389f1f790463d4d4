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
from dataclasses import replace
from typing import Any, Iterator

from chord_core.errors import ChordError, DuplicateJob, ResumeError, store_failure
from chord_core.runtime.jobs import JobSpec
from chord_core.runtime.leases import HEARTBEAT_S, Lease
from chord_core.runtime.protocols import JobStore
from chord_core.runtime.store_states import NotOwner

RETRY_S = 2.0  # how often writes a full disk refused are tried again
OWNED_WRITES = ("add_job", "update_state", "save_result")  # they name the lease (owner=)

log = logging.getLogger(__name__)




class StoreLink:
    """The store as the manager writes it: deferred, retried, under this process's lease."""

    def __init__(self, store: JobStore | None, *, lease: Lease | None = None) -> None:
        self.store = store
        self.lease = lease if lease is not None or store is None else Lease(store)
        self.problem: dict | None = None  # the last error, None while writes go through
        self._held: list[tuple[str, tuple, dict]] | None = None
        self.unwritten: list[tuple[str, tuple, dict]] = []  # refused; tried again in order
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
            for method, args, kwargs in held:
                self.write(method, *args, **kwargs)

    def write(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``store.<method>`` if there is a store; a failure is logged, never raised.
        Inside ``deferred`` the call is held until the block ends; while earlier writes wait
        for space it queues behind them (a job's writes stay in order)."""
        if self.store is None:
            return None
        if self.lease is not None and method in OWNED_WRITES:
            kwargs.setdefault("owner", self.lease.owner_id)
        if self._held is not None:
            self._held.append((method, args, kwargs))
            return None
        if self.unwritten:
            self.unwritten.append((method, args, kwargs))
            return None
        return self._call(method, args, kwargs)

    def _call(self, method: str, args: tuple, kwargs: dict) -> Any:
        try:
            out = getattr(self.store, method)(*args, **kwargs)
        except (ChordError, sqlite3.Error) as exc:
            err = (exc if isinstance(exc, ChordError) else store_failure(exc)).to_dict()
            if err != self.problem:
                log.error("store: %s failed: %s", method, err["message"])
            self.problem = err
            self.unwritten.append((method, args, kwargs))
        except NotOwner as exc:
            log.warning("store: %s refused: %s (another process owns the job now)", method,
                        exc)
        except (ValueError, KeyError) as exc:
            log.warning("store: %s failed: %s", method, exc)
        else:
            self.problem = None
            return out
        return None

    def unwritten_jobs(self) -> set[str]:
        """The ids of the jobs with a write waiting for space."""
        return {str(args[0]) for _, args, _ in self.unwritten if args}

    def retry_due(self, *, force: bool = False) -> list[str]:
        """Try the refused writes again, in order, stopping at the first that still fails
        (every ``RETRY_S``, or now if ``force``); returns the job ids whose writes all went
        through now."""
        now = time.monotonic()
        if not self.unwritten or (now < self._next_retry and not force):
            return []
        self._next_retry = now + RETRY_S
        waiting, self.unwritten = self.unwritten, []
        for i, (method, args, kwargs) in enumerate(waiting):
            self._call(method, args, kwargs)
            if self.unwritten:  # still refused: it and the rest wait for the next try
                self.unwritten += waiting[i + 1:]
                break
        if not self.unwritten:
            log.info("store: %d delayed write(s) went through", len(waiting))
        return sorted({str(a[0]) for _, a, _ in waiting if a} - self.unwritten_jobs())

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
                self.write("update_state", job_id, "failed", error=ResumeError(
                    f"could not resume: {exc}", hint="submit the clip again").to_dict())
                continue
            if spec.key and spec.key in by_key:
                self.write("update_state", job_id, "cancelled", error=DuplicateJob(
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

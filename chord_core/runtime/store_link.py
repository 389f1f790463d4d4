"""The job manager's side of the job store: writes that never stop a job, and the jobs a
previous run left unfinished.

A store problem (a full disk, a damaged file) is logged once and kept for the UI and CLI to
show (``problem``); the jobs keep running and their results stay in memory and with the
caller. ``resumable`` hands back what a previous run left queued or running, with the same
job ids, so a restart neither loses nor repeats work.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import contextmanager
from typing import Any, Iterator

from chord_core.errors import ChordError
from chord_core.runtime.jobs import JobSpec

log = logging.getLogger(__name__)


class StoreLink:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.problem: dict | None = None  # the last error, None while writes go through
        self._held: list[tuple[str, tuple, dict]] | None = None

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
        Inside ``deferred`` the call is held until the block ends."""
        if self.store is None:
            return None
        if self._held is not None:
            self._held.append((method, args, kwargs))
            return None
        try:
            return getattr(self.store, method)(*args, **kwargs)
        except (ChordError, sqlite3.Error) as exc:
            err = exc.to_dict() if isinstance(exc, ChordError) else {
                "type": "StoreError", "message": f"the job store failed: {exc}",
                "hint": "check the disk that holds CHORD_DATA_DIR"}
            if err != self.problem:
                log.error("store: %s failed: %s", method, err["message"])
            self.problem = err
        except (ValueError, KeyError) as exc:
            log.warning("store: %s failed: %s", method, exc)
        return None

    def resumable(self, by_key: dict[str, str]) -> Iterator[tuple[str, JobSpec]]:
        """(job id, spec) of each job a previous run left queued or running, oldest first.
        ``by_key`` is the caller's live content-key → job table: a stored job whose key is
        already there is a duplicate left by an older Chord and is cancelled; one whose spec
        cannot be read is marked failed."""
        self.write("requeue_running")
        for row in reversed(self.store.list_jobs(limit=100_000, state="queued")):
            if (row["spec"] or {}).get("long_run"):
                continue  # a parent job: its driver (a long-video run) takes it up again
            try:
                spec = JobSpec.from_dict(row["spec"])
            except (KeyError, TypeError, ChordError) as exc:
                log.warning("stored job %s cannot be resumed (%s); marking it failed",
                            row["job_id"], exc)
                self.write("update_state", row["job_id"], "failed", error={
                    "type": "ResumeError", "message": f"could not resume: {exc}",
                    "hint": "submit the clip again"})
                continue
            if spec.key and spec.key in by_key:
                self.write("update_state", row["job_id"], "cancelled", error={
                    "type": "Duplicate", "hint": "",
                    "message": f"same clip and settings as job {by_key[spec.key]}"})
                continue
            yield row["job_id"], spec
            log.info("resumed stored job %s", row["job_id"])

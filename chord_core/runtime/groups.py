"""Job groups: a parent job whose children are ordinary jobs, driven by the runtime.

``JobManager.submit_group(group, children, policy=…)`` opens the parent's row (under the
manager's lease, ``manager.parents``), submits the children with ``JobSpec.parent`` set —
a child whose content key the store has done is that job, not run again; one the manager
runs already is attached to — and returns a ``GroupHandle``. The group then follows its
children's handles (a done callback each, on the dispatcher thread: nothing polls): it
writes the parent's summary as each child finishes, and ends the parent once the last has,
by its ``EndPolicy``. Callers build child specs and read the outcome; none of them counts
children or decides when a parent ends (the Batch page, ``chord batch`` and
``/batch_predict`` each did, three times over, before).

A ``GroupHandle`` is awaited or waited on like a ``JobHandle``: ``done()``,
``result(timeout)`` (the ``GroupOutcome``), ``add_done_callback(fn)``, ``await handle``;
``cancel()`` stops the unfinished children and ends the parent cancelled. Submitting a group
whose parent is live in this manager returns the live group (a request sent twice shares
one). After a crash the children are resumed by the manager (same ids); ``follow_group``
attaches a group to a stored parent's children so its row ends when they have.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable, Sequence

from chord_core.errors import GroupFailed
from chord_core.runtime.handles import Completion, JobHandle, woken_by
from chord_core.runtime.jobs import JobSpec, JobState, JobStatus, stored_status

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobRunner

log = logging.getLogger(__name__)


class EndPolicy(StrEnum):
    """How a group's parent ends once every child has.

    ``ALL``: done, whatever each child's outcome (each child's result or error is its
    own: a ``/batch_predict`` request answers every task); cancelled only by the group's
    ``cancel``. ``BEST_EFFORT``: every child runs; the parent fails if any failed
    (``GroupFailed``: how many, the first's error), and ends cancelled if a child was
    cancelled (Cancel all). ``FIRST_FAILURE``: the first child that fails cancels the
    others; the parent fails with its error."""

    ALL = "all"
    BEST_EFFORT = "best_effort"
    FIRST_FAILURE = "first_failure"


@dataclass(frozen=True)
class GroupSpec:
    """The parent: its id (a content key, so the same group asked again is the same row),
    kind (``long_run`` in its row: batch, batch_predict, live…), the label History shows,
    and what else its row keeps. ``noun`` names the children in its messages."""

    parent_id: str
    kind: str
    label: str
    model: str = ""
    video_path: str = ""
    query: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    noun: str = "job"
    hint: str = "each child's own error is stored with it (History lists them)"
    # inputs that could not become children (an unreadable clip): (label, message) each,
    # counted as failed children when the parent ends
    failed_before: tuple[tuple[str, str], ...] = ()
    # the row the children name as their parent ("": this group's own); a live stream's
    # chunk is a group whose children belong to the stream run's row
    children_parent: str = ""


@dataclass(frozen=True)
class GroupChild:
    """One child as the group holds it: its place, its job id, and ``reused`` when the
    store had its content key done before (it was not run again)."""

    index: int
    job_id: str
    label: str
    reused: bool = False


@dataclass(frozen=True)
class GroupOutcome:
    """How the group ended: the parent's state, its error (a ``to_dict`` record), and every
    child's final status in the children's order."""

    state: JobState
    error: dict[str, Any] | None
    statuses: tuple[JobStatus, ...]


Summarise = Callable[["GroupHandle"], dict[str, Any]]


class GroupHandle:
    """A submitted group (see the module docstring)."""

    def __init__(self, manager: JobRunner, group: GroupSpec, policy: EndPolicy,
                 summarise: Summarise | None) -> None:
        self.manager, self.group, self.policy = manager, group, policy
        self.children: list[GroupChild] = []
        self._summarise = summarise or default_summary
        self._lock = threading.Lock()
        self._left = 0
        self._cancelled = False
        self._first_failure: tuple[GroupChild, dict[str, Any]] | None = None
        self._completion = Completion()
        self._outcome: GroupOutcome | None = None
        self._on_end: Callable[[GroupHandle], None] | None = None
        # a stage (``run_stage``): children started a window at a time, its row left to
        # its driver; ``on_child`` hears of each child that finished
        self.owns_row = True
        self._pending: list[tuple[int, JobSpec]] = []  # not started yet, in order
        self._window = 0  # children in flight at most (0: all at once)
        self._running = 0
        self._pumping = False
        self._ending = False
        self._stopping = False  # the unfinished children are being cancelled (first failure,
        # or a cancel): a child the window is starting right then is cancelled once submitted
        self.on_child: Callable[[GroupChild, JobStatus | None], None] | None = None
        # finished children only the store knows (a request sent again after a restart):
        # read once, not once per summary (each child's end summarises every child)
        self._stored: dict[str, JobStatus] = {}

    @property
    def parent_id(self) -> str:
        return self.group.parent_id

    # -- reading ---------------------------------------------------------------------------
    def status(self, child: GroupChild) -> JobStatus | None:
        """A child's latest status (None: neither the manager nor the store knows it)."""
        try:
            return self.manager.status(child.job_id)
        except KeyError:
            if child.job_id in self._stored:
                return self._stored[child.job_id]
            store = self.manager.parents.store  # one finished before this process started
            st = stored_status(store, child.job_id) if store is not None else None
            if st is not None and st.state.finished:  # its row changes no more
                self._stored[child.job_id] = st
            return st

    def _handle(self, job_id: str) -> JobHandle:
        """A child's handle: the manager's, or a finished one from the store (KeyError when
        neither knows it)."""
        try:
            return self.manager.handle(job_id)
        except KeyError:
            st = self.status(GroupChild(-1, job_id, ""))
            if st is None:
                raise
            return JobHandle.finished(st)

    def statuses(self) -> list[JobStatus | None]:
        return [self.status(c) for c in self.children]

    def counts(self) -> dict[str, int]:
        """Children by state now (a reused child counts as ``skipped``)."""
        return tally((st.state.value if st else "gone", child.reused)
                     for child, st in zip(self.children, self.statuses()))[0]

    def finished(self) -> int:
        """How many children have finished (reused ones included)."""
        return sum(1 for st in self.statuses() if st is not None and st.state.finished)

    @property
    def first_failure(self) -> tuple[GroupChild, dict[str, Any]] | None:
        """The first child that failed, with its own error record (None: none failed)."""
        return self._first_failure

    # -- waiting ---------------------------------------------------------------------------
    def done(self) -> bool:
        return self._completion.is_set()

    def result(self, timeout: float | None = None) -> GroupOutcome:
        """Block until the group ended; its outcome. TimeoutError after ``timeout``."""
        if not self._completion.wait(timeout):
            raise TimeoutError(f"{self.parent_id}: {self.finished()} of "
                               f"{len(self.children)} {self.group.noun}(s) finished after "
                               f"{timeout} s")
        assert self._outcome is not None
        return self._outcome

    def add_done_callback(self, fn: Callable[[GroupHandle], None]) -> None:
        """``fn(handle)`` once the group ended (at once, here, when it has)."""
        if not self._completion.add(fn, self):
            fn(self)

    def __await__(self) -> Generator[Any, None, GroupOutcome]:
        yield from woken_by(self.add_done_callback)
        assert self._outcome is not None
        return self._outcome

    # -- acting ----------------------------------------------------------------------------
    def cancel(self, *, stop_children: bool = True) -> int:
        """Cancel the unfinished children; the parent ends cancelled once they have
        answered. Returns how many were cancelled. ``stop_children=False`` only marks the
        group cancelled (its children are shared with another waiter: they finish, and the
        parent then ends cancelled)."""
        with self._lock:
            self._cancelled = True
            self._drop_pending()
        n = self._cancel_unfinished() if stop_children else 0
        self._maybe_end()  # nothing was running: the pending ones were all it had
        return n

    def _drop_pending(self) -> None:
        """Children not started yet never will be: they count as ended (under the lock)."""
        self._left -= len(self._pending)
        self._pending.clear()

    def abandon(self) -> None:
        """This process stops driving the group now (Ctrl-C or SIGTERM of ``chord batch``):
        the parent ends cancelled at once and its unfinished children stay queued in the
        store, for the same command to resume."""
        with self._lock:
            if self.done() or self._ending:
                return
            self._cancelled, self._ending = True, True
            self._left = -1  # the children's later ends change nothing
        statuses = tuple(st for st in self.statuses() if st is not None)
        self._outcome = GroupOutcome(JobState.CANCELLED, None, statuses)
        self.manager.parents.finish(self.parent_id, "cancelled", self._summarise(self))
        if self._on_end is not None:
            self._on_end(self)
        self._completion.set()

    def _cancel_unfinished(self) -> int:
        with self._lock:
            self._stopping = True
            self._drop_pending()
        n = 0
        for child in self.children:
            st = self.status(child)
            if st is not None and not st.state.finished:
                n += bool(self.manager.cancel(child.job_id))
        return n

    # -- driving (the runtime's side) ------------------------------------------------------
    def _follow(self) -> None:
        """A done callback on every child; a group with none ends now."""
        with self._lock:
            self._left = len(self.children)
            self._running = len(self.children) - len(self._pending)
        if not self.children:
            self._maybe_end()
            return
        for child in self.children[:len(self.children) - len(self._pending)]:
            self._handle(child.job_id).add_done_callback(self._when_done(child))
        self._pump()

    def _when_done(self, child: GroupChild) -> Callable[[Any], None]:
        def done(_handle: Any) -> None:
            self._child_done(child)
        return done

    def _child_done(self, child: GroupChild) -> None:
        st = self.status(child)
        failed = st is not None and st.state is JobState.FAILED
        stop = False
        with self._lock:
            if self._left < 0:  # abandoned
                return
            self._left -= 1
            self._running -= 1
            if failed and self._first_failure is None:
                assert st is not None
                self._first_failure = (child, st.error or {"message": "failed"})
                stop = self.policy is EndPolicy.FIRST_FAILURE
        try:
            if self.on_child is not None:
                self.on_child(child, st)
            if stop:
                self._cancel_unfinished()
            self._pump()
            if not self._maybe_end() and self.owns_row and not self.done():
                self.manager.parents.summarise(self.parent_id, self._summarise(self))
        except Exception:  # noqa: BLE001 — a callback must never take the dispatcher down
            log.exception("group %s: a child's end was not taken in", self.parent_id)

    def _maybe_end(self) -> bool:
        """End the group if no child is left to finish (once, whoever gets here first)."""
        with self._lock:
            if self._left != 0 or self._ending:
                return self._ending
            self._ending = True
        self._end()
        return True

    def _pump(self) -> None:
        """Start pending children while the window has room (a stage). Re-entered from a
        child that was done already (its callback runs at once), it leaves the starting to
        the loop already running, so a long run resumed with every child done does not
        recurse once per child."""
        with self._lock:
            if self._pumping:
                return
            self._pumping = True
        while True:
            with self._lock:  # the decision to stop and the flag change together: a child
                # that ends after it pumps on its own, one that ended before is seen here
                full = self._window and self._running >= self._window
                if full or not self._pending or self._cancelled or self._stopping:
                    self._pumping = False
                    return
                index, spec = self._pending.pop(0)
                self._running += 1
            try:
                self._start(index, spec)
            except BaseException:
                with self._lock:
                    self._pumping = False
                raise

    def _start(self, index: int, spec: JobSpec) -> None:
        """Start child ``index`` under its fixed id: done before (the store has its result)
        it is reused; one the manager runs already (resumed after a restart) is attached
        to; else it is submitted."""
        child = self.children[index]
        st = self.status(child)  # the manager's, else the store's (read once, then kept)
        if st is not None and st.state is JobState.DONE and st.result is not None:
            child = self.children[index] = replace(child, reused=True)
        elif st is None or st.state.finished:  # unknown, or failed/cancelled before: again
            self.manager.submit(replace(spec, parent=self.group.children_parent
                                        or self.parent_id), job_id=child.job_id)
        with self._lock:  # the group stopped while this child was being started: the
            stopping = self._stopping  # cancel's sweep may have missed it, so cancel it here
        if stopping and not child.reused:
            self.manager.cancel(child.job_id)
        self._handle(child.job_id).add_done_callback(self._when_done(child))

    def _end(self) -> None:
        statuses = [st for st in self.statuses() if st is not None]
        state, error = self._end_state(statuses)
        self._outcome = GroupOutcome(state, error, tuple(statuses))
        if self.owns_row:
            self.manager.parents.finish(self.parent_id, state.value, self._summarise(self),
                                        error=error)
        log.info("group %s (%s) ended %s", self.parent_id, self.group.kind, state.value)
        if self._on_end is not None:
            self._on_end(self)
        self._completion.set()

    def _end_state(self, statuses: Sequence[JobStatus]
                   ) -> tuple[JobState, dict[str, Any] | None]:
        failed = [st for st in statuses if st.state is JobState.FAILED]
        cancelled = self._cancelled or (self.policy is not EndPolicy.ALL and any(
            st.state is JobState.CANCELLED for st in statuses))
        if failed and self.policy is EndPolicy.FIRST_FAILURE and self._first_failure:
            child, err = self._first_failure
            return JobState.FAILED, GroupFailed(
                f"{child.label or child.job_id}: {err.get('message', 'failed')}",
                hint=(err.get("hint") or self.group.hint)).to_dict()
        if cancelled:
            return JobState.CANCELLED, None
        before = self.group.failed_before
        if (failed or before) and self.policy is EndPolicy.BEST_EFFORT:
            label, message = next(
                ((c.label or c.job_id, (s.error or {}).get("message")) for c in self.children
                 if (s := self.status(c)) is not None and s.state is JobState.FAILED),
                before[0] if before else ("", ""))
            return JobState.FAILED, GroupFailed(
                f"{len(failed) + len(before)} of {len(statuses) + len(before)} "
                f"{self.group.noun}(s) failed; the first, {label}: {message}",
                hint=self.group.hint).to_dict()
        return JobState.DONE, None


def tally(states: Iterable[tuple[str, bool]]) -> tuple[dict[str, int], int]:
    """``(state, skipped)`` of each child → children by state (a skipped one, done before,
    counts as ``skipped``) and how many have finished (``gone``: a job the store lost,
    counted finished). Every parent's summary counts its children with this."""
    counts: dict[str, int] = {}
    finished = 0
    for state, skipped in states:
        key = "skipped" if skipped else state
        counts[key] = counts.get(key, 0) + 1
        finished += state == "gone" or JobState(state).finished
    return counts, finished


def default_summary(handle: GroupHandle) -> dict[str, Any]:
    """The parent's summary: its children's counts, each child's job and state, and its
    progress (``{"stage": <noun>s, "done", "total"}``)."""
    pairs = list(zip(handle.children, handle.statuses()))
    counts, done = tally((st.state.value if st else "gone", child.reused)
                         for child, st in pairs)
    items = [{"job_id": child.job_id, "label": child.label, "reused": child.reused,
              "state": st.state.value if st else "gone", "error": st.error if st else None}
             for child, st in pairs]
    return {"counts": counts, "items": items,
            "progress": {"stage": f"{handle.group.noun}s", "done": done,
                         "total": len(items)}}

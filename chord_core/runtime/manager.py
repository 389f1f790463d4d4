"""Job manager: what the app, the CLI and the service submit jobs (and groups) to.

``JobManager`` runs one worker per WorkerSpec wherever its ``Executor`` puts them (local
processes, threads for tests, Ray actors). One dispatcher thread owns the bookkeeping: it
reads the executor's events (messages, and deaths: restart and re-queue, nothing lost or
done twice — ``crashes.py``), plans new jobs, splits long grounding jobs over the workers
and feeds idle workers (``scheduling.py``, groups taking turns: ``fairness.py``); it starts
and stops the workers, so their parent-death signal (``lifeline.py``) follows it. It has no
fixed tick: it blocks in ``executor.events`` until a message, a death, a ``wake`` (submit,
cancel, shutdown) or its next timer. ``submit`` returns a ``handles.JobHandle`` (a content
``key`` an unfinished or done job has is that job); ``submit_group`` a ``GroupHandle``.
With a store the manager holds a lease (``leases.py``) and resumes only orphaned jobs.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import replace
from typing import Any, Sequence

from chord_core.analysis.ground_chunks import merge_chunks
from chord_core.errors import ChordError, JobCancelled, from_record, internal_error
from chord_core.runtime import crashes, group_start, retention
from chord_core.runtime.balancer import Balancer
from chord_core.runtime.cancelling import drop_tasks, settle, settle_overdue
from chord_core.runtime.executors import Executor, ProcessExecutor, stop_all
from chord_core.runtime.handles import JobHandle
from chord_core.runtime.jobs import MAX_EVENTS_KEPT, JobSpec, JobState, JobStatus, JobTable
from chord_core.runtime.messages import (Done, Event, Failed, Progress, Ready, Started,
                                         Stopped, Warming, WorkerDied)
from chord_core.runtime.parents import ParentJobs
from chord_core.runtime.protocols import JobStore
from chord_core.runtime.fairness import FairShare
from chord_core.runtime.groups import EndPolicy, GroupHandle, GroupSpec, Summarise
from chord_core.runtime.scheduling import (JobEntry, TaskPhase, TaskState, WorkerSlot,
                                           WorkerState, burst_unit, feed_idle, hint_busy,
                                           job_event, make_tasks, next_timer,
                                           requeue_after_death, workers_model_state)
from chord_core.runtime.store_link import StoreLink, mark_pending_writes
from chord_core.runtime.workers import WorkerSpec
from chord_core.types import ModelInfo, ProgressEvent, Result

log = logging.getLogger(__name__)

MAX_ATTEMPTS = crashes.MAX_ATTEMPTS
ERROR_RETRY_S = 0.05  # a dispatcher round cut short by an error is run again after this


class JobManager(JobTable):
    """Workers (one per WorkerSpec, see ``cluster.build_specs``) + balancer + store.
    ``executor`` runs the workers: local processes unless given."""

    def __init__(self, specs: list[WorkerSpec], *, weights: dict[str, float] | None = None,
                 split_ground: bool = True, store: JobStore | None = None,
                 executor: Executor | None = None, resume: bool = True) -> None:
        if not specs:
            raise ValueError("JobManager needs at least one worker spec")
        self._executor = executor or ProcessExecutor()
        self._specs = list(specs)
        self._workers = {s.worker_id: WorkerSlot(s) for s in specs}
        # shares of work per worker; the app and the seed API set weights and speed-based
        # correction on it (``set_weights`` / ``set_adjustment``), used from the next task
        self.balancer = Balancer({s.worker_id: (weights or {}).get(s.worker_id, 1.0)
                                  for s in specs})
        self._jobs: dict[str, JobEntry] = {}
        self._tasks: dict[str, TaskState] = {}
        self._fair = FairShare()  # turns between groups (streams, runs, batches, lone jobs)
        self._lock = threading.RLock()
        self._split = split_ground
        self._link = StoreLink(store)
        # parent jobs' rows (long-video runs, batches), under this process's lease
        self.parents = ParentJobs(store, self._link.lease.owner_id if self._link.lease else None)
        self._by_key: dict[str, str] = {}  # content key → its unfinished or done job
        self._stop, self._abort, self._stop_timeout = threading.Event(), False, 10.0
        self._ready = threading.Event()  # every worker loaded its model (or failed to)
        self._finished_now: list[JobEntry] = []  # their handles resolve after the round
        self._retry_at: float | None = None  # a round an error cut short goes again then
        if store is not None and resume:  # resume False: a tool that resumes only its own
            self._resume_from_store()
        elif store is not None:
            self._link.take_lease()
        self._thread = threading.Thread(target=self._dispatch, name="chord-dispatch", daemon=True)
        self._thread.start()

    # -- public API ------------------------------------------------------------------------
    def submit(self, spec: JobSpec, *, job_id: str | None = None) -> JobHandle:
        """Queue a job; returns its handle (which is its id). ``job_id``: a stored job resumed,
        or a child's fixed id (``spec.parent``; stored). A job whose ``key`` an unfinished or
        done job already has is that job (its handle is returned; nothing is queued twice)."""
        resumed = job_id is not None and spec.parent is None
        with self._lock:
            same = self._by_key.get(spec.key) if spec.key else None
            if same is not None and not resumed:
                log.info("%s is already job %s; not queued again", spec.label or spec.key, same)
                return self.handle(same)
            job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
            self._jobs[job_id] = JobEntry(JobStatus(job_id, spec, JobState.QUEUED, time.time()))
            if spec.key:
                self._by_key[spec.key] = job_id
            if not resumed:  # stored before the dispatcher can start it (and store "running")
                req = spec.request
                model = spec.model or self._specs[0].model_cfg.model
                self._link.add_job(job_id, video_path=req.video_path, task=req.task,
                                   query=req.query, model=model, key=spec.key,
                                   batch_id=spec.batch_id, spec=spec.to_dict(), parent=spec.parent)
        self._executor.wake()  # the dispatcher plans it now
        return self.handle(job_id)

    def submit_group(self, group: GroupSpec, children: Sequence[JobSpec], *,
                     policy: EndPolicy = EndPolicy.BEST_EFFORT, reuse_done: bool = True,
                     summarise: Summarise | None = None) -> GroupHandle:
        """Open the parent ``group``, submit ``children`` under it and end it by ``policy``
        once they have (``groups.py``, ``group_start.py``); the live parent again is it."""
        return group_start.submit_group(self, group, children, policy=policy,
                                        reuse_done=reuse_done, summarise=summarise)

    def _resume_from_store(self) -> None:
        """Jobs whose owner is gone (a process that died or stopped) are claimed and queued
        again, same ids; a live process's jobs are left alone (``leases.py``)."""
        for job_id, spec in self._link.resumable(self._by_key):
            self.submit(spec, job_id=job_id)

    @property
    def owner_id(self) -> str | None:
        """This manager's lease id (``leases.py``; None without a store): its rows' owner."""
        return self._link.owner()

    def store_problem(self) -> dict[str, Any] | None:
        """The last error from the job store (e.g. its disk is full), for the UI and CLI to
        show; None when every write went through. Jobs keep running either way."""
        return self._link.problem

    def cancel(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.status.state.finished:
                return False
            drop_tasks(job, self._tasks, self._workers, keep=True)
            self._finish(job, JobState.CANCELLED)
            settle(job, self._tasks, self._workers, self._link)  # now, or when tasks answer
        self._executor.wake()  # its workers' next tasks go out now
        self._resolve_finished()
        return True

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Block until every worker has loaded its model (or failed to)."""
        if not self._ready.wait(timeout):
            raise TimeoutError(f"workers not ready after {timeout} s")

    def model_state(self) -> dict[str, Any]:
        """The workers' model: ready (with its info) as soon as one worker has it, loading
        while any is starting, else failed (with the loader's error)."""
        with self._lock:
            return workers_model_state(list(self._workers.values()))

    def workers(self) -> list[dict[str, Any]]:
        """Per-worker view for the UI: devices, state, current job, busy time, restarts."""
        with self._lock:
            speeds = self.balancer.speeds()
            return [w.row(self._tasks, speeds.get(wid, 1.0)) for wid, w in self._workers.items()]

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's machines when the workers run on several (Ray); else empty."""
        return self._executor.nodes()

    def kill_worker(self, worker_id: str) -> None:
        """Stop a worker abruptly (fault testing); the dispatcher restarts it."""
        with self._lock:
            handle = self._workers[worker_id].handle
            if handle is not None:
                handle.kill()

    def shutdown(self, timeout: float = 10.0, *, abort: bool = False) -> None:
        """Stop the dispatcher and the workers. Normally workers finish the task in hand
        (up to ``timeout``); ``abort`` (Ctrl-C, SIGTERM) stops them at once. Jobs that did
        not finish are left queued in the store, for the next start to resume."""
        self._abort, self._stop_timeout = abort, timeout
        self._stop.set()
        self._executor.wake()
        self._thread.join(timeout + 10)
        if self._thread.is_alive():  # the dispatcher is stuck: stop the workers from here
            self._stop_workers()

    # -- workers ----------------------------------------------------------------------------
    def _spawn(self, w: WorkerSlot) -> None:
        w.handle = self._executor.start(w.spec)
        w.state, w.batch, w.warming = WorkerState.STARTING, [], None

    def _stop_workers(self) -> None:
        """Tell every worker to stop (or terminate them when aborting), wait, kill what is
        left, and put the jobs that did not finish back to queued in the store."""
        stop_all([w.handle for w in self._workers.values()
                  if w.handle is not None and not w.state.is_finished],
                 abort=self._abort, timeout=self._stop_timeout)
        self._executor.close()
        with self._lock:
            for job in self._jobs.values():
                if job.status.state is JobState.RUNNING:
                    self._link.update_state(job.status.job_id, "queued")
            self._link.retry_due(force=True)  # space may have come back meanwhile
        self._link.release()  # its unfinished jobs are orphans now: the next start takes them

    def _on_worker_died(self, w: WorkerSlot, exitcode: int | None) -> None:
        """Re-queue (or give up) the tasks the worker held; restart it after a back-off, or
        give it up when it keeps dying before it is ready (see ``crashes.py``). The
        executor told its last messages first: a result sent just before dying counts."""
        starting = w.state == "starting"
        self._requeue_after_death(w)
        if not crashes.count_death(w, starting, exitcode):
            self._fail_orphans()  # given up: nothing may wait for it

    def _requeue_after_death(self, w: WorkerSlot) -> None:
        """Re-queue what the dead worker ran (``scheduling.requeue_after_death``); the jobs of
        tasks that have now died alone MAX_ATTEMPTS times fail, naming their clip. A
        cancelled task it was stopping hands back nothing."""
        for tid in [t for t in w.batch if self._tasks[t].state == "stopping"]:
            self._stopped(self._tasks[tid], None)
        for ts in requeue_after_death(w, self._tasks, MAX_ATTEMPTS):
            self.balancer.finished(w.spec.worker_id, ts.task.cost, 0.0)
            job = self._jobs[ts.task.job_id]
            drop_tasks(job, self._tasks, self._workers)
            if not job.status.state.finished:
                err = crashes.poisoned_clip_error(ts.task.request.video_path, ts.attempts,
                                                  w.spec.worker_id)
                log.error("%s: %s", job.status.job_id, err["message"])
                self._finish(job, JobState.FAILED, error=err)

    # -- dispatcher -------------------------------------------------------------------------
    def _dispatch(self) -> None:
        with self._lock:
            for w in self._workers.values():
                self._spawn(w)
        while not self._stop.is_set():
            try:
                # blocks until a message, a death, a wake (submit, cancel, shutdown) or the
                # next timer: no fixed tick
                events = self._executor.events(timeout=self._wait_s())
                with self._lock, self._link.deferred():  # store writes after the feeding
                    retention.evict_finished(self, self._tasks, self._link)  # writes all made
                    for event in events:
                        self._handle(event)
                    for w in crashes.due_restarts(self._workers.values()):
                        self._spawn(w)  # a dead worker's back-off is over
                    settle_overdue(self._jobs, self._tasks, self._workers, self._link)
                    self._plan_new_jobs()
                    self._feed_idle_workers()
                    self._fail_orphans()  # no worker left: nothing queued waits forever
                    hint_busy(self._workers, self._tasks)  # jobs queued behind a call
            except Exception:  # noqa: BLE001 — the dispatcher must survive any one bad job
                log.exception("dispatcher error")
                self._retry_at = time.monotonic() + ERROR_RETRY_S  # the rest of the round
            try:  # the jobs finished before an error are resolved all the same
                self._after_tick()
            except Exception:  # noqa: BLE001
                log.exception("dispatcher error")
        self._stop_workers()

    def _wait_s(self) -> float | None:
        """Seconds to the dispatcher's next timer (``scheduling.next_timer``; None: none)."""
        retry, self._retry_at = self._retry_at, None  # a round an error cut short: soon
        return next_timer(self._workers, self._jobs, self._link.next_due()
                          + ([retry] if retry is not None else []), self._executor.max_wait_s)

    def _after_tick(self) -> None:
        """Outside the lock, once the tick's writes were made: resolve the handles of the
        jobs it finished; renew the lease; retry writes a full disk refused, and say which
        finished jobs wait for theirs (``pending_write``)."""
        self._resolve_finished()
        with self._lock:  # the link is shared with submit and cancel
            self._link.heartbeat()
            written = self._link.retry_due()
            if written or self._link.unwritten:
                mark_pending_writes(self._jobs, self._link.unwritten_jobs())
            if all(w.state in ("ready", "failed") for w in self._workers.values()):
                self._ready.set()

    def _resolve_finished(self) -> None:
        with self._lock:
            done, self._finished_now = self._finished_now, []
        for job in done:
            job.completion.set()

    def _handle(self, msg: Event) -> None:
        w = self._workers[msg.worker_id]
        if isinstance(msg, Ready):
            w.ready(msg.model_info, msg.error, msg.startup)
        elif isinstance(msg, Warming):
            w.warmed(msg.step)
        elif isinstance(msg, Started):
            pass  # the task was marked running when it was sent
        elif isinstance(msg, Progress):
            self._on_progress(msg.task_id, msg.event)
        elif isinstance(msg, Done):
            self._on_done(w, msg.task_id, msg.payload, msg.busy_s)
        elif isinstance(msg, Failed):
            self._on_failed(w, msg.task_id, msg.error, msg.partial)
        elif isinstance(msg, Stopped):
            w.state = WorkerState.STOPPED
        elif isinstance(msg, WorkerDied) and not w.state.is_finished:
            if self._stop.is_set():  # the shutdown asked for: its end, not a death
                crashes.ended_at_shutdown(w, msg.exitcode)
            else:
                self._on_worker_died(w, msg.exitcode)

    def _plan_new_jobs(self) -> None:
        """Probe + plan queued jobs, feeding idle workers as it goes (the first clip starts
        early); a burst of batchable jobs goes out a call's worth at a time (``burst_unit``)."""
        new = [job for job in self._jobs.values()
               if not job.planned and job.status.state is JobState.QUEUED]
        for i, job in enumerate(new):
            job.planned, job.t0 = True, time.time()
            try:
                make_tasks(job, self._tasks, self._workers, self.balancer, split=self._split)
            except ChordError as exc:
                self._finish(job, JobState.FAILED, error=exc.to_dict())
            except Exception as exc:  # noqa: BLE001 — one odd file must not stall the queue
                log.exception("planning %s failed", job.status.job_id)
                self._finish(job, JobState.FAILED, error=internal_error(exc))
            unit = burst_unit(job.status.spec.request.task, self._workers)
            if unit is None or i + 1 == len(new) or (i + 1) % unit == 0:
                self._feed_idle_workers()

    def _feed_idle_workers(self) -> None:
        feed_idle(self._workers, self._tasks, self.balancer, self._start_job, self._fair)

    def _fail_orphans(self) -> None:
        """If no worker can run anything, unfinished jobs fail with the workers' error —
        those queued then and, called from every tick, those submitted afterwards (they
        would otherwise wait for a worker that never comes)."""
        if any(w.state != "failed" for w in self._workers.values()):
            return
        err = crashes.no_worker_error([w.error or {} for w in self._workers.values()])
        for job in self._jobs.values():
            if not job.status.state.finished:
                self._finish(job, JobState.FAILED, error=err)

    # -- task events ------------------------------------------------------------------------
    def _start_job(self, job_id: str, wid: str) -> None:
        job = self._jobs[job_id]
        if job.status.state is JobState.QUEUED:
            job.status = replace(job.status, state=JobState.RUNNING, started_at=time.time(),
                                 worker=wid)
        elif job.status.worker and wid not in job.status.worker.split("+"):
            job.status = replace(job.status, worker=f"{job.status.worker}+{wid}")
        else:
            return
        self._link.update_state(job_id, "running", worker=job.status.worker)
        job.completion.changed()

    def _on_progress(self, tid: str, event: ProgressEvent) -> None:
        ts = self._tasks.get(tid)
        if ts is None or ts.state != "running":
            return
        ts.last_event = event
        job = self._jobs[ts.task.job_id]
        event = job_event(job, self._tasks, event)
        st = job.status
        events = (st.events + (event,))[-MAX_EVENTS_KEPT:]
        job.status = replace(st, last_event=event, events=events)
        job.completion.changed()

    def _on_done(self, w: WorkerSlot, tid: str, payload: Any, busy_s: float) -> None:
        w.ended(tid)
        w.busy_s, w.tasks_done, w.deaths_in_row = w.busy_s + busy_s, w.tasks_done + 1, 0
        ts = self._tasks.get(tid)
        if ts is not None and ts.state == "stopping":  # finished as the cancel arrived
            return self._stopped(ts, payload)
        if ts is None or ts.state != "running":
            return  # cancelled meanwhile, or a duplicate after a restart: ignore
        ts.state, ts.payload = TaskPhase.DONE, payload
        self.balancer.finished(w.spec.worker_id, ts.task.cost, busy_s)
        job = self._jobs[ts.task.job_id]
        if job.status.state.finished:
            return
        if ts.task.kind == "analyze":
            self._finish(job, JobState.DONE, result=payload)
        elif all(self._tasks[t].state == "done" for t in job.tasks):  # a split grounding
            self._finish(job, JobState.DONE, result=merge_chunks(
                job.status.spec.request, job.info, job.plan,
                [self._tasks[t].payload for t in job.tasks],
                ModelInfo.from_dict(w.model_info or {"id": "", "dtype": ""}),
                probe_s=job.probe_s, t0=job.t0))

    def _on_failed(self, w: WorkerSlot, tid: str, error: dict[str, Any],
                   partial: Any = None) -> None:
        w.ended(tid)
        ts = self._tasks.get(tid)
        if ts is not None and ts.state == "stopping":  # cancelled: with its finished frames
            return self._stopped(ts, partial)
        if ts is None or ts.state != "running":
            return
        ts.state = TaskPhase.FAILED
        self.balancer.finished(w.spec.worker_id, ts.task.cost, 0.0)
        job = self._jobs[ts.task.job_id]
        if not job.status.state.finished:
            cancelled = isinstance(from_record(error), JobCancelled)
            self._finish(job, JobState.CANCELLED if cancelled else JobState.FAILED,
                         error=None if cancelled else error)

    def _stopped(self, ts: TaskState, payload: Any) -> None:
        ts.state, ts.payload = TaskPhase.STOPPED, payload
        settle(self._jobs[ts.task.job_id], self._tasks, self._workers, self._link)

    def _finish(self, job: JobEntry, state: JobState, *, result: Result | None = None,
                error: dict[str, Any] | None = None) -> None:
        job.status = replace(job.status, state=state, result=result, error=error,
                             finished_at=time.time())
        self._finished_now.append(job)
        key = job.status.spec.key
        if state is not JobState.DONE and key and self._by_key.get(key) == job.status.job_id:
            del self._by_key[key]  # a failed or cancelled clip may be submitted again
        if result is not None:
            self._link.save_result(job.status.job_id, result.to_dict())
        else:
            self._link.update_state(job.status.job_id, state.value, error=error)

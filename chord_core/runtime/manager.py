"""Job manager: worker processes per GPU group, a balancer, split jobs, restarts, a store.

``JobManager`` is what the app, the CLI and the service submit jobs to (submit / status / jobs
/ cancel / wait / model_state / shutdown). Its workers run where its ``Executor`` puts them
(``executors.py``: local processes by default, threads for tests, Ray actors). One dispatcher
thread owns all bookkeeping: it reads the executor's events (the workers' typed messages and
their deaths: restart + re-queue of the task they held — nothing lost, nothing done twice; see
``crashes.py`` for retries and back-off), plans new jobs (probe + sampling plan, in this
process: no model needed), splits long grounding jobs over all replicas, and hands each idle
worker its next task (its own queue first, else stolen from the longest queue).

Same clip + same settings = one job: a job submitted with a content ``key`` that an unfinished
or done job already has (one resumed from the store, say) is not added again — ``submit``
returns the existing job's id. Workers are started and stopped from the dispatcher thread:
their parent-death signal (``lifeline.py``) fires when the thread that started them exits.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from chord_core.runtime import crashes
from chord_core.runtime.balancer import Balancer, plan_cost
from chord_core.analysis.ground_chunks import GroundChunk, merge_chunks
from chord_core.errors import ChordError, internal_error
from chord_core.runtime.jobs import MAX_EVENTS_KEPT, JobSpec, JobState, JobStatus, JobTable
from chord_core.types import ModelInfo, ProgressEvent, Result
from chord_core.runtime.executors import Executor, ProcessExecutor, WorkerHandle
from chord_core.runtime.messages import (
    Done,
    Event,
    Failed,
    Progress,
    Ready,
    Started,
    Stopped,
    WorkerDied,
)
from chord_core.runtime.workers import Task, WorkerSpec

log = logging.getLogger(__name__)

MAX_ATTEMPTS = crashes.MAX_ATTEMPTS
MIN_FRAMES_PER_CHUNK = 4
BATCHED_TASKS = ("describe", "entail")  # queued jobs of these tasks share a model call


@dataclass
class _Worker:
    spec: WorkerSpec
    handle: WorkerHandle | None = None
    state: str = "starting"          # starting | ready | restarting | failed | stopped
    batch: list = field(default_factory=list)  # task ids in flight (several: a describe batch)
    queue: deque = field(default_factory=deque)
    restarts: int = 0
    busy_s: float = 0.0
    tasks_done: int = 0
    model_info: dict | None = None
    error: dict | None = None
    startup: dict | None = None      # where the worker's start-up time went (seconds)
    respawn_at: float = 0.0          # monotonic time of the next start while "restarting"
    deaths_in_row: int = 0           # deaths without a finished task in between (back-off)
    start_failures: int = 0          # deaths before "ready", in a row

    @property
    def current(self) -> str | None:
        """The task the worker is on (the first unfinished one of its batch)."""
        return self.batch[0] if self.batch else None


@dataclass
class _TaskState:
    task: Task
    worker: str | None = None
    state: str = "pending"           # pending | running | done | failed
    attempts: int = 0                # times its worker died while it ran alone
    solo: bool = False               # run it alone (it was in a batch whose worker died)
    last_event: ProgressEvent | None = None
    payload: Any = None


@dataclass
class _Job:
    status: JobStatus
    tasks: list[str] = field(default_factory=list)
    planned: bool = False
    info: Any = None
    plan: Any = None
    t0: float = 0.0
    probe_s: float = 0.0


class JobManager(JobTable):
    """Workers (one per WorkerSpec, see ``cluster.build_specs``) + balancer + store.
    ``executor`` runs the workers: local processes unless given."""

    def __init__(self, specs: list[WorkerSpec], *, weights: dict[str, float] | None = None,
                 split_ground: bool = True, store: Any = None,
                 executor: Executor | None = None) -> None:
        if not specs:
            raise ValueError("JobManager needs at least one worker spec")
        self._executor = executor or ProcessExecutor()
        self._workers = {s.worker_id: _Worker(s) for s in specs}
        self._balancer = Balancer({s.worker_id: (weights or {}).get(s.worker_id, 1.0)
                                   for s in specs})
        self._jobs: dict[str, _Job] = {}
        self._tasks: dict[str, _TaskState] = {}
        self._lock = threading.RLock()
        self._split = split_ground
        self._store = store
        self._store_error: dict | None = None
        self._by_key: dict[str, str] = {}  # content key → its unfinished or done job
        self._stop = threading.Event()
        self._abort = False
        self._stop_timeout = 10.0
        self._t_started = time.time()
        if store is not None:
            self._resume_from_store()
        self._thread = threading.Thread(target=self._dispatch, name="chord-dispatch", daemon=True)
        self._thread.start()

    # -- public API ------------------------------------------------------------------------
    def submit(self, spec: JobSpec, *, job_id: str | None = None) -> str:
        """Queue a job; returns its id. ``job_id`` is given only when resuming a stored job.
        A job whose ``key`` an unfinished or done job already has is that job (its id is
        returned; nothing is queued twice)."""
        resumed = job_id is not None
        with self._lock:
            same = self._by_key.get(spec.key) if spec.key else None
            if same is not None and not resumed:
                log.info("%s is already job %s; not queued again", spec.label or spec.key, same)
                return same
            job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
            self._jobs[job_id] = _Job(JobStatus(job_id, spec, JobState.QUEUED, time.time()))
            if spec.key:
                self._by_key[spec.key] = job_id
            if not resumed:  # stored before the dispatcher can start it (and store "running")
                req = spec.request
                self._persist("add_job", job_id, video_path=req.video_path, task=req.task,
                              query=req.query, model=spec.model or self._model_name(),
                              key=spec.key, batch_id=spec.batch_id, spec=spec.to_dict())
        return job_id

    def _resume_from_store(self) -> None:
        """Jobs a previous run left queued or running are queued again (same ids)."""
        self._persist("requeue_running")
        rows = self._store.list_jobs(limit=100_000, state="queued")
        for row in reversed(rows):
            try:
                spec = JobSpec.from_dict(row["spec"])
            except (KeyError, TypeError, ChordError) as exc:
                log.warning("stored job %s cannot be resumed (%s); marking it failed",
                            row["job_id"], exc)
                self._persist("update_state", row["job_id"], "failed", error={
                    "type": "ResumeError", "message": f"could not resume: {exc}",
                    "hint": "submit the clip again"})
                continue
            if spec.key and spec.key in self._by_key:  # a duplicate left by an older Chord
                self._persist("update_state", row["job_id"], "cancelled", error={
                    "type": "Duplicate", "hint": "",
                    "message": f"same clip and settings as job {self._by_key[spec.key]}"})
                continue
            self.submit(spec, job_id=row["job_id"])
            log.info("resumed stored job %s", row["job_id"])

    def _persist(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Write to the store if there is one; a store problem is logged, never fatal to
        the jobs themselves (their results stay in memory and on the caller's side)."""
        if self._store is None:
            return None
        try:
            return getattr(self._store, method)(*args, **kwargs)
        except (ChordError, sqlite3.Error) as exc:
            err = exc.to_dict() if isinstance(exc, ChordError) else {
                "type": "StoreError", "message": f"the job store failed: {exc}",
                "hint": "check the disk that holds CHORD_DATA_DIR"}
            if err != self._store_error:
                log.error("store: %s failed: %s", method, err["message"])
            self._store_error = err
        except (ValueError, KeyError) as exc:
            log.warning("store: %s failed: %s", method, exc)
        return None

    def store_problem(self) -> dict | None:
        """The last error from the job store (e.g. its disk is full), for the UI and CLI to
        show; None when every write went through. Jobs keep running either way."""
        return self._store_error

    def _model_name(self) -> str:
        return next(iter(self._workers.values())).spec.model_cfg.model

    def cancel(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.status.state.finished:
                return False
            self._drop_tasks(job)
            self._finish(job, JobState.CANCELLED)
            return True

    def _drop_tasks(self, job: _Job) -> None:
        """Stop the job's tasks: running ones are cancelled, queued ones taken off."""
        for tid in job.tasks:
            ts = self._tasks[tid]
            handle = self._workers[ts.worker].handle if ts.worker else None
            if ts.state == "running" and handle is not None:
                handle.cancel(tid)
            elif ts.state == "pending" and ts.worker:
                self._dequeue(ts)
            ts.state = "failed"

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Block until every worker has loaded its model (or failed to)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(w.state in ("ready", "failed") for w in self._workers.values()):
                    return
            time.sleep(0.05)
        raise TimeoutError(f"workers not ready after {timeout} s")

    def model_state(self) -> dict[str, Any]:
        with self._lock:
            info = next((w.model_info for w in self._workers.values() if w.model_info), None)
            error = next((w.error for w in self._workers.values() if w.error), None)
            starting = any(w.state == "starting" for w in self._workers.values())
            state = "ready" if info else "loading" if starting else "failed"
            model = next(iter(self._workers.values())).spec.model_cfg.model
            return {"state": state, "model": model, "info": info, "error": error}

    def workers(self) -> list[dict[str, Any]]:
        """Per-worker view for the UI: devices, state, current job, busy time, restarts."""
        with self._lock:
            out = []
            speeds = self._balancer.speeds()
            for wid, w in self._workers.items():
                cur = self._tasks.get(w.current) if w.current else None
                out.append({"worker": wid, "devices": list(w.spec.devices), "state": w.state,
                            "job": cur.task.job_id if cur else None, "queued": len(w.queue),
                            "busy_s": w.busy_s, "tasks_done": w.tasks_done,
                            "restarts": w.restarts, "speed": speeds.get(wid, 1.0),
                            "pid": w.handle.pid if w.handle else None,
                            "startup": w.startup})
            return out

    def summary(self) -> dict[str, Any]:
        """Per-worker busy time, wall time and speed-up (Σ busy / wall) since start."""
        rows = self.workers()
        wall = time.time() - self._t_started
        busy = sum(r["busy_s"] for r in rows)
        return {"workers": rows, "wall_s": wall, "busy_s": busy,
                "speedup": busy / wall if wall > 0 else 0.0}

    def set_auto_balancing(self, adjustment_factor: float, *, check_interval_s: float = 0.0,
                           max_correction: float = 0.0) -> None:
        """0 = split work by the configured weights only; > 0 = also by measured speed,
        corrected at most every ``check_interval_s`` and within 1 ± ``max_correction``."""
        self._balancer.set_adjustment(adjustment_factor, check_interval_s=check_interval_s,
                                      max_correction=max_correction)

    def balancer_weights(self) -> dict[str, float]:
        """Configured share per worker (what ``set_balancer_weights`` last set)."""
        return self._balancer.weights()

    def set_balancer_weights(self, weights: dict[str, float]) -> None:
        """New shares for workers (by worker id), applied to work handed out from now on."""
        self._balancer.set_weights(weights)

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
        self._thread.join(timeout + 10)
        if self._thread.is_alive():  # the dispatcher is stuck: stop the workers from here
            self._stop_workers()

    # -- workers ----------------------------------------------------------------------------
    def _spawn(self, w: _Worker) -> None:
        w.handle = self._executor.start(w.spec)
        w.state, w.batch = "starting", []

    def _stop_workers(self) -> None:
        """Tell every worker to stop (or terminate them when aborting), wait, kill what is
        left, and put the jobs that did not finish back to queued in the store."""
        handles = [w.handle for w in self._workers.values()
                   if w.handle is not None and w.state not in ("stopped", "failed")]
        for h in handles:
            if self._abort:
                h.terminate()
            else:
                h.stop()
        deadline = time.monotonic() + (2.0 if self._abort else self._stop_timeout)
        for h in handles:
            if not h.join(max(0.1, deadline - time.monotonic())):
                h.kill()
                h.join(2.0)
        self._executor.close()
        with self._lock:
            for job in self._jobs.values():
                if job.status.state is JobState.RUNNING:
                    self._persist("update_state", job.status.job_id, "queued")

    def _respawn_due(self) -> None:
        now = time.monotonic()
        for w in self._workers.values():
            if w.state == "restarting" and now >= w.respawn_at:
                self._spawn(w)

    def _on_worker_died(self, w: _Worker, exitcode: int | None) -> None:
        """Re-queue (or give up) the tasks the worker held; restart it after a back-off, or
        give it up when it keeps dying before it is ready (see ``crashes.py``). The
        executor told its last messages first: a result sent just before dying counts."""
        wid = w.spec.worker_id
        starting = w.state == "starting"
        self._requeue_after_death(w)
        w.batch, w.restarts, w.deaths_in_row = [], w.restarts + 1, w.deaths_in_row + 1
        w.start_failures = w.start_failures + 1 if starting else 0
        if w.start_failures >= crashes.MAX_START_FAILURES:
            w.state, w.error = "failed", crashes.start_failure_error(wid, w.start_failures)
            log.error("%s", w.error["message"])
            self._fail_orphans()
            return
        delay = crashes.restart_delay_s(w.deaths_in_row)
        w.state, w.respawn_at = "restarting", time.monotonic() + delay
        log.warning("worker %s died (exit code %s); restarting it in %.1f s", wid,
                    exitcode, delay)

    def _requeue_after_death(self, w: _Worker) -> None:
        """Tasks that died together are re-queued to run alone (none is blamed yet); a task
        that died alone counts an attempt, and its job fails after MAX_ATTEMPTS."""
        together = sum(self._tasks[t].state == "running" for t in w.batch) > 1
        for tid in reversed(w.batch):
            ts = self._tasks[tid]
            if ts.state != "running":
                continue
            ts.solo = ts.solo or together
            ts.attempts += 0 if together else 1
            if ts.attempts < MAX_ATTEMPTS:
                ts.state = "pending"
                w.queue.appendleft(tid)
                log.warning("worker %s died running %s; re-queued%s", w.spec.worker_id, tid,
                            " to run alone" if together else f" (attempt {ts.attempts + 1})")
                continue
            self._balancer.finished(w.spec.worker_id, ts.task.cost, 0.0)
            job = self._jobs[ts.task.job_id]
            self._drop_tasks(job)
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
                events = self._executor.events(timeout=0.05)  # wakes on a message or a death
                with self._lock:
                    for event in events:
                        self._handle(event)
                    self._respawn_due()
                    self._plan_new_jobs()
                    self._feed_idle_workers()
            except Exception:  # noqa: BLE001 — the dispatcher must survive any one bad job
                log.exception("dispatcher error")
        self._stop_workers()

    def _handle(self, msg: Event) -> None:
        w = self._workers[msg.worker_id]
        if isinstance(msg, Ready):
            # A worker whose start-up model failed to load still serves jobs that name
            # another model; jobs for the missing model fail with the loader's message.
            w.model_info, w.error, w.state = msg.model_info, msg.error, "ready"
            w.start_failures, w.startup = 0, msg.startup
        elif isinstance(msg, Started):
            pass  # the task was marked running when it was sent
        elif isinstance(msg, Progress):
            self._on_progress(msg.task_id, msg.event)
        elif isinstance(msg, Done):
            self._on_done(w, msg.task_id, msg.payload, msg.busy_s)
        elif isinstance(msg, Failed):
            self._on_failed(w, msg.task_id, msg.error)
        elif isinstance(msg, Stopped):
            w.state = "stopped"
        elif isinstance(msg, WorkerDied) and w.state not in ("failed", "stopped"):
            self._on_worker_died(w, msg.exitcode)

    def _plan_new_jobs(self) -> None:
        """Probe + plan queued jobs one at a time, handing work to idle workers as it goes,
        so the first clip starts while later ones are still being probed. Describe jobs
        that arrived together are handed out a worker batch at a time: an idle worker given
        the first clip of a burst alone would spend a whole generate call on it."""
        new = [job for job in self._jobs.values()
               if not job.planned and job.status.state is JobState.QUEUED]
        batch = max((w.spec.model_cfg.batch_size for w in self._workers.values()), default=1)
        for i, job in enumerate(new):
            job.planned, job.t0 = True, time.time()
            try:
                self._make_tasks(job)
            except ChordError as exc:
                self._finish(job, JobState.FAILED, error=exc.to_dict())
            except Exception as exc:  # noqa: BLE001 — one odd file must not stall the queue
                log.exception("planning %s failed", job.status.job_id)
                self._finish(job, JobState.FAILED, error=internal_error(exc))
            describe = job.status.spec.request.task == "describe"
            if not describe or i + 1 == len(new) or (i + 1) % batch == 0:
                self._feed_idle_workers()

    def _make_tasks(self, job: _Job) -> None:
        from chord_core.analysis.request import probe_input
        from chord_core.media.sampling import plan_sampling

        req, spec = job.status.spec.request, job.status.spec
        t = time.perf_counter()
        job.info = spec.info or probe_input(req.video_path)
        job.probe_s = time.perf_counter() - t
        job.plan = spec.plan or plan_sampling(job.info, req.task, req.sampling)
        cost = plan_cost(job.plan, req.max_new_tokens)
        ready = [wid for wid, w in self._workers.items() if w.state != "failed"]
        if (req.task == "ground" and self._split and len(ready) > 1
                and getattr(req, "ground_method", "per_frame") == "per_frame"
                and job.plan.num_frames >= MIN_FRAMES_PER_CHUNK * 2 and not req.annotated_video):
            align = req.batch_size or self._workers[ready[0]].spec.model_cfg.batch_size
            parts = self._balancer.split(job.plan.num_frames, ready, align=align)
            for wid, start, end in parts:
                sub = replace(job.plan, frame_indices=job.plan.frame_indices[start:end],
                              timestamps_s=job.plan.timestamps_s[start:end])
                share = cost * (end - start) / job.plan.num_frames
                self._add_task(job, "ground_chunk", share, self._balancer.choose(share, [wid]),
                               plan=sub)
        else:
            self._add_task(job, "analyze", cost, self._balancer.choose(cost, ready),
                           plan=job.plan)

    def _add_task(self, job: _Job, kind: str, cost: float, worker: str, plan: Any = None) -> None:
        tid = f"{job.status.job_id}/t{len(job.tasks)}"
        task = Task(tid, job.status.job_id, kind, job.status.spec.request,
                    job.status.spec.model, job.info, plan, cost, job.probe_s)
        self._tasks[tid] = _TaskState(task, worker=worker)
        self._workers[worker].queue.append(tid)
        job.tasks.append(tid)

    def _feed_idle_workers(self) -> None:
        for wid, w in self._workers.items():
            if w.state != "ready" or w.current is not None:
                continue
            tid = w.queue.popleft() if w.queue else self._steal(wid)
            if tid is None:
                continue
            batch = [tid] + self._batch_mates(wid, self._tasks[tid].task)
            for t in batch:
                ts = self._tasks[t]
                ts.worker, ts.state = wid, "running"
                self._start_job(ts.task.job_id, wid)
            w.batch = batch
            w.handle.run([self._tasks[t].task for t in batch])

    def _batch_mates(self, wid: str, first: Task) -> list[str]:
        """Queued describe tasks that can share ``first``'s generate call: same model, plain
        describe; up to the worker's batch size, from its own queue, then from the longest
        other queue (the balancer is told)."""
        limit = self._workers[wid].spec.model_cfg.batch_size

        def fits(task: Task) -> bool:  # describes with describes, entails with entails
            r = task.request
            return (task.kind == "analyze" and r.task in BATCHED_TASKS
                    and r.task == first.request.task and not r.annotated_video
                    and task.model == first.model)

        if not fits(first) or limit <= 1 or self._tasks[first.task_id].solo:
            return []
        mates: list[str] = []
        donors = [self._workers[wid]] + sorted(
            (w for w in self._workers.values() if w.spec.worker_id != wid),
            key=lambda w: -len(w.queue))
        for donor in donors:
            for tid in list(donor.queue):
                if len(mates) >= limit - 1:
                    return mates
                task = self._tasks[tid].task
                if fits(task) and not self._tasks[tid].solo:
                    donor.queue.remove(tid)
                    if donor.spec.worker_id != wid:
                        self._balancer.move(task.cost, donor.spec.worker_id, wid)
                    mates.append(tid)
        return mates

    @staticmethod
    def _task_ended(w: _Worker, tid: str) -> None:
        if tid in w.batch:
            w.batch.remove(tid)

    def _steal(self, thief: str) -> str | None:
        donor = max((w for w in self._workers.values() if len(w.queue) > 0),
                    key=lambda w: len(w.queue), default=None)
        if donor is None:
            return None
        tid = donor.queue.pop()
        self._balancer.move(self._tasks[tid].task.cost, donor.spec.worker_id, thief)
        return tid

    def _dequeue(self, ts: _TaskState) -> None:
        q = self._workers[ts.worker].queue
        if ts.task.task_id in q:
            q.remove(ts.task.task_id)

    def _fail_orphans(self) -> None:
        """If no worker can run anything, queued jobs fail with the load error."""
        if any(w.state != "failed" for w in self._workers.values()):
            return
        err = next((w.error for w in self._workers.values() if w.error), None)
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
        self._persist("update_state", job_id, "running", worker=job.status.worker)

    def _on_progress(self, tid: str, event: ProgressEvent) -> None:
        ts = self._tasks.get(tid)
        if ts is None or ts.state != "running":
            return
        ts.last_event = event
        job = self._jobs[ts.task.job_id]
        if len(job.tasks) > 1 and event.stage == "grounding_frames":
            done = sum(self._tasks[t].last_event.done for t in job.tasks
                       if self._tasks[t].last_event and
                       self._tasks[t].last_event.stage == "grounding_frames")
            done += sum(self._tasks[t].task.plan.num_frames for t in job.tasks
                        if self._tasks[t].state == "done")
            n = job.plan.num_frames
            event = ProgressEvent("grounding_frames",
                                  f"frame {done}/{n} on {len(job.tasks)} workers", done, n,
                                  time.time() - job.t0)
        st = job.status
        events = (st.events + (event,))[-MAX_EVENTS_KEPT:]
        job.status = replace(st, last_event=event, events=events)

    def _on_done(self, w: _Worker, tid: str, payload: Any, busy_s: float) -> None:
        self._task_ended(w, tid)
        w.busy_s, w.tasks_done, w.deaths_in_row = w.busy_s + busy_s, w.tasks_done + 1, 0
        ts = self._tasks.get(tid)
        if ts is None or ts.state != "running":
            return  # cancelled meanwhile, or a duplicate after a restart: ignore
        ts.state, ts.payload = "done", payload
        self._balancer.finished(w.spec.worker_id, ts.task.cost, busy_s)
        job = self._jobs[ts.task.job_id]
        if job.status.state.finished:
            return
        if ts.task.kind == "analyze":
            self._finish(job, JobState.DONE, result=payload)
        elif all(self._tasks[t].state == "done" for t in job.tasks):
            self._finish(job, JobState.DONE, result=self._merge(job, w))

    def _on_failed(self, w: _Worker, tid: str, error: dict) -> None:
        self._task_ended(w, tid)
        ts = self._tasks.get(tid)
        if ts is None or ts.state != "running":
            return
        ts.state = "failed"
        self._balancer.finished(w.spec.worker_id, ts.task.cost, 0.0)
        job = self._jobs[ts.task.job_id]
        if not job.status.state.finished:
            cancelled = error.get("type") == "JobCancelled"
            self._finish(job, JobState.CANCELLED if cancelled else JobState.FAILED,
                         error=None if cancelled else error)

    def _merge(self, job: _Job, w: _Worker) -> Result:
        chunks: list[GroundChunk] = [self._tasks[t].payload for t in job.tasks]
        info = ModelInfo.from_dict(w.model_info or {"id": "", "dtype": ""})
        return merge_chunks(job.status.spec.request, job.info, job.plan, chunks, info,
                            probe_s=job.probe_s, t0=job.t0)

    def _finish(self, job: _Job, state: JobState, *, result: Result | None = None,
                error: dict | None = None) -> None:
        job.status = replace(job.status, state=state, result=result, error=error,
                             finished_at=time.time())
        key = job.status.spec.key
        if state is not JobState.DONE and key and self._by_key.get(key) == job.status.job_id:
            del self._by_key[key]  # a failed or cancelled clip may be submitted again
        if result is not None:
            self._persist("save_result", job.status.job_id, result.to_dict())
        else:
            self._persist("update_state", job.status.job_id, state.value, error=error)

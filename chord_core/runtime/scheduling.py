"""The job manager's bookkeeping records, and how queued tasks are shared among workers.

Each worker has its own queue (``WorkerSlot.queue``); the balancer chose it when the task was
made. An idle worker takes from its own queue first, else steals the last task of the longest
one; describe (and entail) tasks ride along with a worker's first task to share one model
call, and several idle workers share a burst of them by speed (``batch_mates``' ``share``).
Everything here runs on the manager's dispatcher thread, under its lock.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import islice
from typing import Any

from chord_core.analysis.entail_batch import MIN_BATCH as ENTAIL_MIN_BATCH
from chord_core.analysis.entail_batch import MIN_SPLIT as ENTAIL_MIN_SPLIT
from chord_core.runtime.balancer import Balancer, plan_cost
from chord_core.runtime.executors import WorkerHandle
from chord_core.runtime.fairness import FairShare
from chord_core.runtime.handles import Completion
from chord_core.runtime.jobs import JobStatus
from chord_core.runtime.tasks import BATCHED_TASKS, traits
from chord_core.runtime.workers import Task, WorkerSpec
from chord_core.types import ProgressEvent, SamplingPlan

log = logging.getLogger(__name__)

MIN_FRAMES_PER_CHUNK = 4
# an entail call takes this many forward passes' worth of pairs: the worker builds the next
# pass's inputs while the model runs one, and the gap between calls is paid less often
ENTAIL_PASSES_PER_CALL = 4
READ_AHEAD_TASKS = 2  # queued tasks a worker is told about at least (``upcoming``)
# the fewest tasks of a kind a call takes when idle workers share what is queued
# (``batch_mates``' ``share``): an entail call below 8 pairs pays its fixed costs for little
MIN_SHARE = {"entail": ENTAIL_MIN_SPLIT, "describe": 1}


class WorkerState(StrEnum):
    """Where a worker stands. (A ``StrEnum``: it compares, prints and serialises as its
    value, so the UI's rows and the service's /health read the same as before.)"""

    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_finished(self) -> bool:
        """It runs nothing more (given up, or stopped at shutdown)."""
        return self in (WorkerState.FAILED, WorkerState.STOPPED)


class TaskPhase(StrEnum):
    """Where a task stands: pending → running → done | failed; a cancelled grounding task
    running → stopping (its worker was told) → stopped (it answered)."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    STOPPING = "stopping"
    STOPPED = "stopped"

    @property
    def is_finished(self) -> bool:
        """No worker holds it any more."""
        return self in (TaskPhase.DONE, TaskPhase.FAILED, TaskPhase.STOPPED)


@dataclass
class WorkerSlot:
    """A worker as the manager tracks it: its spec, handle, state and queue."""

    spec: WorkerSpec
    handle: WorkerHandle | None = None
    state: WorkerState = WorkerState.STARTING
    batch: list[str] = field(default_factory=list)  # task ids in flight (several: a describe batch)
    queue: deque[str] = field(default_factory=deque)
    restarts: int = 0
    busy_s: float = 0.0
    tasks_done: int = 0
    model_info: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    startup: dict[str, Any] | None = None     # where the worker's start-up time went (seconds)
    warming: dict[str, Any] | None = None     # the start-up step in hand (``Warming``), until ready
    respawn_at: float = 0.0          # monotonic time of the next start while "restarting"
    deaths_in_row: int = 0           # deaths without a finished task in between (back-off)
    start_failures: int = 0          # deaths before "ready", in a row
    call: tuple[str, int] = ("", 0)  # the call in hand: its first task id and its size
    hinted: tuple[str, ...] = ()     # the task ids it was last told to read ahead

    def ready(self, model_info: dict[str, Any] | None, error: dict[str, Any] | None,
              startup: dict[str, Any] | None) -> None:
        """It loaded its model (or failed to: a worker whose start-up model did not load
        still serves jobs that name another model; jobs for the missing one fail with the
        loader's message). A background warm-up goes on (``warming`` kept)."""
        self.model_info, self.error, self.state = model_info, error, WorkerState.READY
        self.start_failures, self.startup = 0, startup
        self.warming = (self.warming or {}) if (self.warming or {}).get("background") else None

    def warmed(self, step: dict[str, Any]) -> None:
        """A start-up step in hand; ``{"startup": …}``: the background warm-up ended."""
        if "startup" in step:
            self.startup, self.warming = step["startup"], None
        else:
            self.warming = step or None

    @property
    def current(self) -> str | None:
        """The task the worker is on (the first unfinished one of its batch)."""
        return self.batch[0] if self.batch else None

    def ended(self, task_id: str) -> None:
        if task_id in self.batch:
            self.batch.remove(task_id)

    def row(self, tasks: dict[str, TaskState], speed: float) -> dict[str, Any]:
        """The UI's view: devices, state, current job, queue, busy time, restarts."""
        cur = tasks.get(self.current) if self.current else None
        return {"worker": self.spec.worker_id, "devices": list(self.spec.devices),
                "state": self.state, "job": cur.task.job_id if cur else None,
                "queued": len(self.queue), "busy_s": self.busy_s, "tasks_done": self.tasks_done,
                "restarts": self.restarts, "speed": speed,
                "pid": self.handle.pid if self.handle else None, "startup": self.startup,
                "node": self.handle.node if self.handle else None, "error": self.error,
                "model_loaded": self.model_info is not None, "warming": self.warming}


@dataclass
class TaskState:
    """One task (a whole job, or a slice of a grounding job) and where it stands."""

    task: Task
    worker: str | None = None
    group: str = ""                  # its parent job, or its own job (``fairness.FairShare``)
    # stopped: ``payload`` = the frames it had finished, or None
    state: TaskPhase = TaskPhase.PENDING
    attempts: int = 0                # times its worker died while it ran alone
    solo: bool = False               # run it alone (it was in a batch whose worker died)
    last_event: ProgressEvent | None = None
    payload: Any = None


@dataclass
class JobEntry:
    """A job's record (``status``) and its planning: clip info, plan, task ids."""

    status: JobStatus
    tasks: list[str] = field(default_factory=list)
    planned: bool = False
    info: Any = None
    plan: Any = None
    t0: float = 0.0
    probe_s: float = 0.0
    settle_by: float = 0.0           # cancelled: monotonic time to stop waiting for partials
    completion: Completion = field(default_factory=Completion)  # set when it finished


def batch_mates(workers: dict[str, WorkerSlot], tasks: dict[str, TaskState],
                balancer: Balancer, wid: str, first: Task, share: float = 1.0) -> list[str]:
    """Queued tasks that can share ``first``'s model call — same task (describe or entail),
    same model, no annotated video — up to the worker's batch size, from its own queue, then
    from the longest other queue (the balancer is told). Entail calls take several forward
    passes' worth (``ENTAIL_PASSES_PER_CALL``).

    ``share``: this worker's part of what is queued, when this dispatch feeds several idle
    workers (its speed over theirs: ``feed_idle``). The call then takes only that part (at
    least ``MIN_SHARE`` of its task), so one request's tasks run on every idle GPU at once
    instead of as one call on one of them while the others wait: a client that sends one
    request after another (the OFA-VE loop) gets each answer in about 1/N of the time. A
    busy host (one worker idle at a time) batches as before."""
    limit = workers[wid].spec.model_cfg.batch_size
    if first.request.task == "entail":  # passes of at least entail_batch.MIN_BATCH pairs
        limit = max(limit, ENTAIL_MIN_BATCH) * ENTAIL_PASSES_PER_CALL

    def fits(task: Task) -> bool:  # describes with describes, entails with entails
        r = task.request
        return (task.kind == "analyze" and r.task in BATCHED_TASKS
                and r.task == first.request.task and not r.annotated_video
                and task.model == first.model)

    if not fits(first) or limit <= 1 or tasks[first.task_id].solo:
        return []
    if share < 1.0:
        queued = 1 + sum(1 for w in workers.values() for tid in w.queue
                         if fits(tasks[tid].task) and not tasks[tid].solo)
        part = math.ceil(queued * share - 1e-9)
        limit = min(limit, max(MIN_SHARE.get(first.request.task, 1), part))
    mates: list[str] = []
    donors = [workers[wid]] + sorted(
        (w for w in workers.values() if w.spec.worker_id != wid), key=lambda w: -len(w.queue))
    for donor in donors:
        for tid in list(donor.queue):
            if len(mates) >= limit - 1:
                return mates
            task = tasks[tid].task
            if fits(task) and not tasks[tid].solo:
                donor.queue.remove(tid)
                if donor.spec.worker_id != wid:
                    balancer.move(task.cost, donor.spec.worker_id, wid)
                mates.append(tid)
    return mates


def upcoming(w: WorkerSlot, tasks: dict[str, TaskState], n: int) -> tuple[Task, ...]:
    """The tasks at the head of ``w``'s queue, about as many as it was just given (``n``;
    at least ``READ_AHEAD_TASKS``): what it will probably run next, so it can read their
    frames meanwhile (``RunTasks.ahead``)."""
    head = [tasks[t].task for t in islice(w.queue, max(n, READ_AHEAD_TASKS)) if t in tasks]
    return tuple(t for t in head if t.info is not None and t.plan is not None)


def burst_unit(task: str, workers: dict[str, WorkerSlot]) -> int | None:
    """How many jobs of a burst of ``task`` the manager plans between feeding idle workers:
    a call's worth for each ready worker. A describe call is a worker batch (the first clips
    start early, not one alone), an entail call a forward pass (``entail_batch.MIN_BATCH``:
    a request's 32 pairs are one call on one worker, or shared among several, not a call of
    8 and then one of 24). None for a task that is not batched (each is fed at once)."""
    if task not in BATCHED_TASKS:
        return None
    batch = max((w.spec.model_cfg.batch_size for w in workers.values()), default=1)
    call = max(batch, ENTAIL_MIN_BATCH) if task == "entail" else batch
    return call * max(1, sum(w.state == "ready" for w in workers.values()))


def hand_out(w: WorkerSlot, tasks: dict[str, TaskState], batch: list[str]) -> None:
    """Send ``w`` the call ``batch`` with the tasks queued behind it (read meanwhile)."""
    ahead = upcoming(w, tasks, len(batch))
    w.batch, w.call, w.hinted = batch, (batch[0], len(batch)), tuple(t.task_id for t in ahead)
    assert w.handle is not None  # a ready worker has one
    w.handle.run([tasks[t].task for t in batch], ahead)


def feed_idle(workers: dict[str, WorkerSlot], tasks: dict[str, TaskState], balancer: Balancer,
              start_job: Any, fair: FairShare) -> None:
    """Hand each idle ready worker its next task (its own queue, the group whose turn it is:
    ``fairness.FairShare``; else one stolen) with the batch mates that go with it;
    ``start_job(job_id, worker_id)`` marks each job running."""
    idle = [wid for wid, w in workers.items() if w.state == "ready" and w.current is None]
    speeds = balancer.speeds() if len(idle) > 1 else {}
    for n, wid in enumerate(idle):
        w = workers[wid]
        tid = fair.take(w.queue, tasks) if w.queue else steal(workers, tasks, balancer, wid)
        if tid is None:
            continue
        left = sum(speeds.get(x, 1.0) for x in idle[n:])  # the idle ones not fed yet
        mates = batch_mates(workers, tasks, balancer, wid, tasks[tid].task,
                            share=speeds.get(wid, 1.0) / left if speeds else 1.0)
        for t in mates:
            fair.served(tasks[t].group)
        batch = [tid] + mates
        for t in batch:
            ts = tasks[t]
            ts.worker, ts.state = wid, TaskPhase.RUNNING
            start_job(ts.task.job_id, wid)
        hand_out(w, tasks, batch)


def next_timer(workers: dict[str, WorkerSlot], jobs: dict[str, Any], due: list[float],
               cap: float | None) -> float | None:
    """Seconds to the dispatcher's next timer — a worker's restart after its back-off, a
    cancelled job's settle deadline, and ``due`` (``time.monotonic`` stamps: the lease's
    renewal, a refused write's retry) — at most ``cap`` (what the executor may be left
    waiting); None when there is none: the dispatcher sleeps until it is woken."""
    now = time.monotonic()
    due = due + [w.respawn_at for w in workers.values() if w.state == "restarting"]
    due += [job.settle_by for job in jobs.values() if job.status.settling]
    if cap is not None:
        due.append(now + cap)
    return None if not due else max(0.0, min(due) - now)


def hint_busy(workers: dict[str, WorkerSlot], tasks: dict[str, TaskState]) -> None:
    """Tell each busy worker the tasks queued behind its call when they changed since it
    was told: jobs queued while it runs (a service's next requests) get their frames read
    during this call, not at the start of theirs."""
    for w in workers.values():
        if w.state != "ready" or not w.batch or w.handle is None:
            continue
        ahead = upcoming(w, tasks, w.call[1])
        ids = tuple(t.task_id for t in ahead)
        if ids and ids != w.hinted:
            w.hinted = ids
            w.handle.expect(w.call[0], ahead)


def steal(workers: dict[str, WorkerSlot], tasks: dict[str, TaskState], balancer: Balancer,
          thief: str) -> str | None:
    """The last task of the longest queue, moved to ``thief`` (the balancer is told)."""
    donor = max((w for w in workers.values() if len(w.queue) > 0), key=lambda w: len(w.queue),
                default=None)
    if donor is None:
        return None
    tid = donor.queue.pop()
    balancer.move(tasks[tid].task.cost, donor.spec.worker_id, thief)
    return tid


def dequeue(workers: dict[str, WorkerSlot], ts: TaskState) -> None:
    """Take a pending task off its worker's queue."""
    assert ts.worker is not None  # pending on a worker
    q = workers[ts.worker].queue
    if ts.task.task_id in q:
        q.remove(ts.task.task_id)


def job_tasks(req: Any, plan: SamplingPlan, workers: dict[str, WorkerSlot], balancer: Balancer,
              *, split: bool = True) -> list[tuple[str, float, str, SamplingPlan]]:
    """(kind, cost, worker, plan) of the tasks one planned job becomes. A per-frame grounding
    job long enough is split over every worker that can run ("ground_chunk" tasks: frames
    in proportion to speed, aligned to batches); anything else is one "analyze" task on the
    worker the balancer picks."""
    cost = plan_cost(plan, req.max_new_tokens)
    ready = [wid for wid, w in workers.items() if w.state != "failed"]
    if (traits(req.task).splits and split and len(ready) > 1
            and getattr(req, "ground_method", "per_frame") == "per_frame"
            and plan.num_frames >= MIN_FRAMES_PER_CHUNK * 2 and not req.annotated_video):
        align = req.batch_size or workers[ready[0]].spec.model_cfg.batch_size
        out = []
        for wid, start, end in balancer.split(plan.num_frames, ready, align=align):
            sub = replace(plan, frame_indices=plan.frame_indices[start:end],
                          timestamps_s=plan.timestamps_s[start:end])
            share = cost * (end - start) / plan.num_frames
            out.append(("ground_chunk", share, balancer.choose(share, [wid]), sub))
        return out
    return [("analyze", cost, balancer.choose(cost, ready), plan)]


def make_tasks(job: JobEntry, tasks: dict[str, TaskState], workers: dict[str, WorkerSlot],
               balancer: Balancer, *, split: bool) -> None:
    """Probe and plan a new job (unless its spec brought ``info``/``plan``) and queue its
    tasks (``job_tasks``) on the workers the balancer chose."""
    from chord_core.analysis.request import probe_input
    from chord_core.media.sampling import plan_sampling

    req, spec = job.status.spec.request, job.status.spec
    t = time.perf_counter()
    job.info = spec.info or probe_input(req.video_path, decode_images=False)
    job.probe_s = time.perf_counter() - t
    job.plan = spec.plan or plan_sampling(job.info, req.task, req.sampling)
    for kind, cost, worker, plan in job_tasks(req, job.plan, workers, balancer, split=split):
        tid = f"{job.status.job_id}/t{len(job.tasks)}"
        task = Task(tid, job.status.job_id, kind, req, spec.model, job.info, plan, cost,
                    job.probe_s)
        tasks[tid] = TaskState(task, worker=worker, group=spec.parent or job.status.job_id)
        workers[worker].queue.append(tid)
        job.tasks.append(tid)


def requeue_after_death(w: WorkerSlot, tasks: dict[str, TaskState], max_attempts: int
                        ) -> list[TaskState]:
    """Put back the tasks a dead worker was running. Tasks that died together are re-queued
    to run alone (none is blamed yet); a task that died alone counts an attempt. Returns the
    tasks that have now used up ``max_attempts`` (their jobs fail)."""
    together = sum(tasks[t].state == "running" for t in w.batch) > 1
    given_up = []
    for tid in reversed(w.batch):
        ts = tasks[tid]
        if ts.state != "running":
            continue
        ts.solo = ts.solo or together
        ts.attempts += 0 if together else 1
        if ts.attempts < max_attempts:
            ts.state = TaskPhase.PENDING
            w.queue.appendleft(tid)
            log.warning("worker %s died running %s; re-queued%s", w.spec.worker_id, tid,
                        " to run alone" if together else f" (attempt {ts.attempts + 1})")
        else:
            given_up.append(ts)
    return given_up


def workers_model_state(workers: list[WorkerSlot]) -> dict[str, Any]:
    info = next((w.model_info for w in workers if w.model_info), None)
    error = next((w.error for w in workers if w.error), None)
    starting = any(w.state == "starting" for w in workers)
    state = "ready" if info else "loading" if starting else "failed"
    return {"state": state, "model": workers[0].spec.model_cfg.model, "info": info,
            "error": error}


def job_event(job: JobEntry, tasks: dict[str, TaskState], event: ProgressEvent
              ) -> ProgressEvent:
    """A task's progress as its job's: frames of a split grounding job count over every
    worker's share (done shares included)."""
    if len(job.tasks) < 2 or event.stage != "grounding_frames":
        return event
    # a finished share counts its frames once (its last event also said them: "frame 24/16")
    seen = [tasks[t].last_event for t in job.tasks if tasks[t].state != "done"]
    done = sum(e.done for e in seen if e is not None and e.stage == "grounding_frames")
    done += sum(p.num_frames for t in job.tasks
                if tasks[t].state == "done" and (p := tasks[t].task.plan) is not None)
    n = job.plan.num_frames
    done = min(done, n)
    return ProgressEvent("grounding_frames", f"frame {done}/{n} on {len(job.tasks)} workers",
                         done, n, time.time() - job.t0)

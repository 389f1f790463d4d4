"""Cancelling a job without losing what it finished.

A cancelled job is ``cancelled`` at once (callers see it), but a running grounding task is
not simply dropped: its worker is told to stop and its task is ``stopping`` until the worker
answers with the frames it finished (``Failed.partial``, or a ``Done`` that crossed the
cancel). Meanwhile the job is ``settling``; once every such task answered — or after
``SETTLE_S`` or the worker's death — the job gets the partial result of its finished frames
(done shares of a split job included), kept in the store as a cancelled job's result::

    running ──cancel──▶ stopping ──answer──▶ stopped ──all answered──▶ result (partial)

Descriptions and verdicts keep nothing: half an answer over all frames means nothing alone.
Everything here runs on the manager's dispatcher thread or under its lock.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from chord_core.analysis.ground_chunks import GroundChunk, merge_chunks
from chord_core.runtime.scheduling import JobEntry, TaskPhase, TaskState, WorkerSlot, dequeue
from chord_core.runtime.tasks import traits
from chord_core.runtime.workers import Task
from chord_core.types import ModelInfo, Result

log = logging.getLogger(__name__)

SETTLE_S = 30.0  # how long a cancelled job waits for its workers' finished frames


def keeps_partial(task: Task) -> bool:
    """Whether a cancelled task hands back what it did: per-frame grounding (its finished
    frames) does; a description or a verdict cut short does not."""
    r = task.request
    return traits(r.task).keeps_partial and \
        getattr(r, "ground_method", "per_frame") == "per_frame"


def drop_tasks(job: JobEntry, tasks: dict[str, TaskState], workers: dict[str, WorkerSlot],
               *, keep: bool = False) -> None:
    """Stop the job's tasks: running ones are cancelled, queued ones taken off. ``keep``:
    running grounding tasks are to hand back their finished frames (``stopping``)."""
    for tid in job.tasks:
        ts = tasks[tid]
        handle = workers[ts.worker].handle if ts.worker else None
        running = ts.state == "running" and handle is not None
        if running and handle is not None:
            handle.cancel(tid)
        elif ts.state == "pending" and ts.worker:
            dequeue(workers, ts)
        if ts.state in ("running", "pending"):
            ts.state = TaskPhase.STOPPING if running and keep and keeps_partial(ts.task) \
                else TaskPhase.FAILED
    if keep:
        job.settle_by = time.monotonic() + SETTLE_S


def settle(job: JobEntry, tasks: dict[str, TaskState], workers: dict[str, WorkerSlot],
           link: Any, *, force: bool = False) -> None:
    """Once no task of the cancelled job is ``stopping`` (or ``force``), give it the partial
    result of what its tasks finished, if any, and keep that in the store (``link``)."""
    stopping = [t for t in job.tasks if tasks[t].state == "stopping"]
    if stopping and not force:
        if not job.status.settling:
            job.status = replace(job.status, settling=True)
        return
    for tid in stopping:
        tasks[tid].state = TaskPhase.FAILED
    info = next((w.model_info for w in workers.values() if w.model_info), None)
    result = partial_result(job, tasks, ModelInfo.from_dict(info or {"id": "", "dtype": ""}))
    job.status = replace(job.status, settling=False, result=result or job.status.result)
    if result is not None:
        log.info("%s: cancelled; kept %d finished frame(s)", job.status.job_id,
                 result.sampling.num_frames)
        link.save_result(job.status.job_id, result.to_dict(), state="cancelled")


def settle_overdue(jobs: dict[str, JobEntry], tasks: dict[str, TaskState],
                   workers: dict[str, WorkerSlot], link: Any) -> None:
    """Cancelled jobs whose workers did not answer within SETTLE_S keep what arrived."""
    now = time.monotonic()
    for job in jobs.values():
        if job.status.settling and now >= job.settle_by:
            log.warning("%s: no answer to cancel after %.0f s; keeping what arrived",
                        job.status.job_id, SETTLE_S)
            settle(job, tasks, workers, link, force=True)


def partial_result(job: JobEntry, tasks: dict[str, TaskState], model: ModelInfo
                   ) -> Result | None:
    """The partial Result of a one-task job, or the merged frames (``partial``) of a split
    job's done and stopped shares; None when nothing was finished."""
    kept = [tasks[t].payload for t in job.tasks
            if tasks[t].state in ("done", "stopped") and tasks[t].payload is not None]
    chunks = [c for c in kept if isinstance(c, GroundChunk) and c.outputs]
    if not chunks:
        return next((r for r in kept if isinstance(r, Result)), None)
    return merge_chunks(job.status.spec.request, job.info, job.plan, chunks, model,
                        probe_s=job.probe_s, t0=job.t0, partial=True)

"""Chunk jobs through the job runtime, kept in the job store so a restart resumes.

A long-video run is one batch row of the store (``lv-…``: its id is a content key of the
clip, the model and every setting, so the same run started again finds its work). Each chunk
job has a fixed id under it (``<run>-c0007``); a finished one is a ``done`` job with its
``chord.result/v1`` result, written the moment it finishes. Started again, a run loads the
chunks already done and submits only the others: nothing is done twice. The batch row's
summary says how far the run got (chunks done, elapsed, time left), for whoever watches.

Chunk jobs are handed to a ``JobManager`` — worker processes on every GPU, or one thread
(``cluster.in_process_manager``) — a few at a time (``in_flight``), so a three-hour clip
never queues hundreds of jobs whose frames would all be read at once. The executor should have no store
of its own: this module writes the rows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from chord_core.errors import ChordError, JobCancelled
from chord_core.runtime.jobs import JobSpec
from chord_core.types import ProgressEvent, Result

log = logging.getLogger(__name__)

POLL_S = 0.05


def run_id(kind: str, video_key: str, model: str, settings: dict[str, Any]) -> str:
    """A run's id: the same clip (by content), model and settings give the same id."""
    payload = json.dumps({"kind": kind, "video": video_key, "model": model,
                          "settings": settings}, sort_keys=True, default=str)
    return f"lv{kind[0]}-" + hashlib.sha256(payload.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ChunkJob:
    """One job of a run: its fixed id and what to run."""

    job_id: str
    spec: JobSpec


class RunStore:
    """A run's rows in the job store (``store`` None: nothing kept; no resume)."""

    def __init__(self, store: Any, run: str, label: str = "") -> None:
        self.store, self.run = store, run
        self.doc: dict[str, Any] = {}  # the batch row's summary: plan, progress, document
        if store is not None:
            store.add_batch(run, label)
            self.doc = dict((store.get_batch(run) or {}).get("summary") or {})

    def done(self, job_id: str) -> Result | None:
        if self.store is None:
            return None
        doc = self.store.get_result(job_id)
        return None if doc is None else Result.from_dict(doc)

    def save(self, job: ChunkJob, result: Result) -> None:
        if self.store is None:
            return
        req = job.spec.request
        try:
            self.store.add_job(job.job_id, video_path=req.video_path, task=req.task,
                               query=req.query, model=job.spec.model or "",
                               key=job.spec.key, batch_id=self.run, video_name=job.spec.label,
                               spec={"longvideo": self.run})
        except ValueError:
            pass  # a row left by a run killed between these two writes
        self.store.save_result(job.job_id, result)

    def progress(self, update: dict[str, Any]) -> None:
        """Merge ``update`` into the run's summary row (plan, progress, final document)."""
        self.doc.update(update)
        if self.store is not None:
            try:
                self.store.set_batch_summary(self.run, self.doc)
            except ChordError as exc:  # a full disk must not stop the run
                log.warning("run progress not stored: %s", exc)

    def final(self) -> dict[str, Any] | None:
        """The run's final document, when it finished before."""
        return self.doc.get("document")


ProgressFn = Callable[[ProgressEvent], None]


class _Tally:
    """Done counts and an estimate of the time left from the jobs finished in this run."""

    def __init__(self, total: int, resumed: int, stage: str, on_progress: ProgressFn | None
                 ) -> None:
        self.total, self.resumed, self.done = total, resumed, resumed
        self.stage, self.on_progress, self.t0 = stage, on_progress, time.perf_counter()

    def eta_s(self) -> float | None:
        ran = self.done - self.resumed
        if ran <= 0:
            return None
        return (time.perf_counter() - self.t0) / ran * (self.total - self.done)

    def tick(self, note: str = "") -> dict[str, Any]:
        eta = self.eta_s()
        left = "" if eta is None else f", about {eta:.0f} s left"
        msg = f"{self.stage} {self.done}/{self.total}{left}" + (f" ({note})" if note else "")
        if self.on_progress is not None:
            self.on_progress(ProgressEvent(self.stage, msg, self.done, self.total,
                                           time.perf_counter() - self.t0))
        return {"stage": self.stage, "done": self.done, "total": self.total,
                "resumed": self.resumed, "eta_s": eta,
                "elapsed_s": round(time.perf_counter() - self.t0, 3)}


def run_jobs(executor: Any, runs: RunStore, jobs: Sequence[ChunkJob], *, in_flight: int,
             stage: str = "chunks", on_progress: ProgressFn | None = None,
             cancel: threading.Event | None = None) -> dict[str, Result]:
    """Run ``jobs`` (skipping those the store already has) at most ``in_flight`` at a time;
    returns job id → result. Each result is stored as soon as it arrives. A job that fails
    stops the run (its error, naming the chunk) after cancelling the others in flight."""
    results = {j.job_id: r for j in jobs if (r := runs.done(j.job_id)) is not None}
    if results:
        log.info("%s: %d of %d %s already done; resuming", runs.run, len(results), len(jobs),
                 stage)
    todo = [j for j in jobs if j.job_id not in results]
    tally = _Tally(len(jobs), len(results), stage, on_progress)
    runs.progress({"progress": tally.tick("resumed" if results else "")})
    running: dict[str, ChunkJob] = {}
    try:
        while todo or running:
            if cancel is not None and cancel.is_set():
                raise JobCancelled("the long-video run was cancelled",
                                   hint="run it again: finished chunks are kept")
            while todo and len(running) < max(1, in_flight):
                job = todo.pop(0)
                running[executor.submit(job.spec)] = job
            finished = _collect(executor, running)
            for job, result in finished:
                runs.save(job, result)
                results[job.job_id] = result
                tally.done += 1
                runs.progress({"progress": tally.tick()})
            if not finished:
                time.sleep(POLL_S)
    except BaseException:
        for exec_id in running:
            executor.cancel(exec_id)
        raise
    return results


def _collect(executor: Any, running: dict[str, ChunkJob]) -> list[tuple[ChunkJob, Result]]:
    """Finished jobs, taken out of ``running``; a failed one raises its error."""
    out = []
    for exec_id in list(running):
        st = executor.status(exec_id)
        if not st.state.finished:
            continue
        job = running.pop(exec_id)
        if st.state.value == "done" and st.result is not None:
            out.append((job, st.result))
            continue
        err = st.error or {"message": st.state.value, "hint": ""}
        if st.state.value == "cancelled":
            raise JobCancelled(f"{job.spec.label or job.job_id} was cancelled",
                               hint="run it again: finished chunks are kept")
        cls = _error_class(err.get("type", ""))
        raise cls(f"{job.spec.label or job.job_id}: {err.get('message', 'failed')}",
                  hint=(err.get("hint") or "") + " (finished chunks are kept: run the same "
                       "command again to resume)")
    return out


def _error_class(name: str) -> type[ChordError]:
    import chord_core.errors as errors

    cls = getattr(errors, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, ChordError) else ChordError

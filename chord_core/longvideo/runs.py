"""A long-video run as a parent job: its chunk jobs are ordinary jobs of the job runtime.

A run (chapters, long grounding, a search) is one parent job (``lv…-``: its id is a content
key of the clip, the model and every setting, so the same run started again finds its work).
Its chunk jobs are children with fixed ids under it (``<run>-c0007``), submitted to the
``JobManager`` with ``JobSpec.parent`` set: the manager writes every row — the parent's
(``manager.parents``: plan, progress after every chunk, the final document) and each
child's, whose spec keeps the chunk's frames. Started again after a crash, a run reads its
plan and its children's stored results back and submits only the others: nothing is done
twice, and History shows the run as one row with its chunks inside.

Chunk jobs go to the manager — worker processes on every GPU, or one thread
(``cluster.in_process_manager``) — a few at a time (``in_flight``), so a three-hour clip
never queues hundreds of jobs whose frames would all be read at once. A manager without a
store keeps nothing (no resume). The chunks are a stage the runtime drives
(``JobManager.run_stage``: the window, the reuse of chunks done before, the first failure
stopping the rest); a run waits on the stage's handle and, with a ``handles.CancelFlag``, on
a Cancel too: nothing polls.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from chord_core.errors import ChordError, InternalError, JobCancelled, from_record
from chord_core.longvideo.eta import ChunkPace, work_seconds
from chord_core.media.roots import is_under, job_roots
from chord_core.runtime.group_start import run_stage
from chord_core.runtime.jobs import JobSpec
from chord_core.types import ProgressEvent, Result

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobRunner

log = logging.getLogger(__name__)


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


class ParentRun:
    """A run's parent job in the manager's store (``manager.parents``; a manager without
    one keeps nothing). ``doc`` is its summary: plan, progress, final document."""

    def __init__(self, manager: JobRunner, run: str, *, kind: str, video_path: str, label: str,
                 model: str, query: str = "", spec: dict[str, Any] | None = None,
                 parent: str | None = None) -> None:
        self.run, self.parents = run, getattr(manager, "parents", None)
        self.video_path = video_path
        row = self.parents.open(run, kind=kind, video_path=video_path, model=model,
                                label=label, query=query, spec=spec, parent=parent) \
            if self.parents is not None else {}
        self.doc: dict[str, Any] = dict(row.get("summary") or {})

    def done_before(self, job_ids: Sequence[str]) -> int:
        """How many of these children the store has done (one query, no result read: the
        stage reads each one's result once, when it reuses it)."""
        return 0 if self.parents is None else len(self.parents.done_ids(job_ids))

    def progress(self, update: dict[str, Any]) -> None:
        """Merge ``update`` into the run's summary (plan, progress, final document)."""
        self.doc.update(update)
        if self.parents is not None:
            self.parents.summarise(self.run, self.doc)

    def final(self) -> dict[str, Any] | None:
        """The run's final document, when it finished before. Runs are keyed on the clip's
        content, so the same bytes under another path (a copy, a clip moved or renamed since)
        get the earlier run's document: it names the path asked about now, not the old one
        (which may be gone: a player or an export would open it)."""
        done = self.doc.get("document")
        video = done.get("video") if isinstance(done, dict) else None
        if isinstance(video, dict) and self.video_path and video.get("path") != self.video_path:
            return {**done, "video": {**video, "path": self.video_path}}
        return done

    def finish(self, document: dict[str, Any]) -> None:
        """The run is done: its document goes into the parent's summary."""
        self.doc["document"] = document
        if self.parents is not None:
            self.parents.finish(self.run, "done", self.doc)

    @contextmanager
    def running(self) -> Iterator[None]:
        """The run's work: a Cancel or an error inside ends the parent cancelled or failed
        (with the error's message; finished chunks are kept)."""
        try:
            yield
        except BaseException as exc:
            if self.parents is not None and self.doc.get("document") is None:
                cancelled = not isinstance(exc, Exception) or isinstance(exc, JobCancelled)
                err = (exc if isinstance(exc, ChordError) else InternalError(
                    f"stopped: {type(exc).__name__}: {exc}"[:500],
                    hint="run it again: finished chunks are kept")).to_dict()
                self.parents.finish(self.run, "cancelled" if cancelled else "failed",
                                    self.doc, error=None if cancelled else err)
            raise


ProgressFn = Callable[[ProgressEvent], None]


class _Tally:
    """Done counts and the time left, from the pace of the chunks finished in this run
    (longvideo/eta.py: their own work, not the wait for a worker or the model's load)."""

    def __init__(self, total: int, resumed: int, stage: str, on_progress: ProgressFn | None
                 ) -> None:
        self.total, self.resumed, self.done = total, resumed, resumed
        self.stage, self.on_progress, self.t0 = stage, on_progress, time.perf_counter()
        self.pace = ChunkPace(total, resumed)

    def finished(self, results: Sequence[Result]) -> None:
        """Chunks' results came in (now, together: a worker's batch): each one is timed
        before any is ticked, so the first tick of a batch knows the batch's pace."""
        now = time.time()
        for result in results:
            self.pace.finished(now, work_seconds(result))

    def tick(self, note: str = "") -> dict[str, Any]:
        estimate = self.pace.estimate(self.done)
        eta = estimate["eta_s"]
        left = "" if eta is None else f", about {eta:.0f} s left"
        msg = f"{self.stage} {self.done}/{self.total}{left}" + (f" ({note})" if note else "")
        if self.on_progress is not None:
            self.on_progress(ProgressEvent(self.stage, msg, self.done, self.total,
                                           time.perf_counter() - self.t0))
        return {"stage": self.stage, "done": self.done, "total": self.total,
                "resumed": self.resumed, **estimate,
                "elapsed_s": round(time.perf_counter() - self.t0, 3)}


def run_jobs(manager: JobRunner, runs: ParentRun, jobs: Sequence[ChunkJob], *, in_flight: int,
             stage: str = "chunks", on_progress: ProgressFn | None = None,
             cancel: threading.Event | None = None,
             on_result: Callable[[Result], None] | None = None) -> dict[str, Result]:
    """Run ``jobs`` as a stage of ``runs`` (``group_start.run_stage``: each under its fixed
    id, at most ``in_flight`` at a time; one done before is reused, one the manager runs
    already is attached to); returns job id → result. The first job that fails stops the
    run (its error, naming the chunk) after the runtime cancelled the others in flight; a
    Cancel (a ``CancelFlag`` at once, a plain event when the next child finishes) stops it
    with ``JobCancelled``. Finished chunks are kept either way. ``on_result`` sees every
    child's result, resumed ones included (the CLI's line of which reader ran)."""
    done_before = runs.done_before([j.job_id for j in jobs])
    if done_before:
        log.info("%s: %d of %d %s already done; resuming", runs.run, done_before, len(jobs),
                 stage)
    tally = _Tally(len(jobs), done_before, stage, on_progress)
    runs.progress({"progress": tally.tick("resumed" if done_before else "")})
    stop_on_cancel = cancel is not None and not hasattr(cancel, "on_set")

    def one_done(child: Any, status: Any) -> None:  # on the dispatcher thread
        if child.reused:
            return  # counted as done before
        if status is not None and status.result is not None:
            tally.finished([status.result])  # its pace, before the tick that reports it
        tally.done += 1
        runs.progress({"progress": tally.tick()})
        if stop_on_cancel and cancel is not None and cancel.is_set():
            group.cancel()

    group = run_stage(manager, runs.run, [(j.job_id, _confined(j.spec)) for j in jobs],
                      in_flight=in_flight, label=stage, on_child=one_done)
    hook = getattr(cancel, "on_set", None)
    unhook = hook(group.cancel) if hook is not None else None
    try:
        if cancel is not None and cancel.is_set():
            group.cancel()
        outcome = group.result()
    except BaseException:
        group.cancel()  # Ctrl-C here: the chunks in flight stop, finished ones are kept
        raise
    finally:
        if unhook is not None:
            unhook()
    results = _results(group, outcome)
    for result in results.values():
        if on_result is not None:
            on_result(result)
    return results


def _results(group: Any, outcome: Any) -> dict[str, Result]:
    """The stage's results by job id, or its failure or cancel as the run's error."""
    if outcome.state.value == "done":
        return {c.job_id: st.result for c, st in zip(group.children, group.statuses())
                if st is not None and st.result is not None}
    if outcome.state.value == "cancelled":
        raise JobCancelled("the long-video run was cancelled",
                           hint="run it again: finished chunks are kept")
    err = dict(outcome.error or {"message": "failed"})
    failure = InternalError(str(err.get("message", "failed")))
    first = group.first_failure  # (child, its own error record)
    if first is not None:
        child, record = first
        failure = from_record(record) or failure
        failure.message = f"{child.label or child.job_id}: {failure.message}"
    failure.hint = (failure.hint or "") + (" (finished chunks are kept: run the same "
                                           "command again to resume)")
    failure.args = (failure.message,)
    raise failure


def _confined(spec: JobSpec) -> JobSpec:
    """The chunk's request carries the media roots when its clip lies under them, so the
    worker opens the file under them again (``media.confined``) as it does for a short job:
    a link swapped in after the run was planned is refused in the chunk too. A clip outside
    the roots (the CLI's own file, the app's example clip) was not read under them before
    either, and stays so."""
    request = spec.request
    roots = job_roots()
    if request.media_roots is not None or not roots:
        return spec
    # by its name, not resolved: a link swapped in after planning must not lead the check
    # outside (the confined open then walks the name without following links)
    if not is_under(Path(os.path.abspath(request.video_path)), [Path(r) for r in roots]):
        return spec
    return replace(spec, request=replace(request, media_roots=roots))

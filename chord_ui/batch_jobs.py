"""Batch bookkeeping for the Batch page: queue many clips, follow them, sum them up.

No Streamlit here (the page keeps a ``BatchRun`` in its session state), so it is testable
without a browser. Every clip gets a content key (``store.content_key``: file bytes, task,
query, model, sampling) — the same key the CLI's ``chord batch`` uses — and a clip whose key
already has a stored result is not run again but shown as skipped. The summary has the CLI
batch's shape (``batch.BatchSummary``): per-clip state and worker, busy time per worker, wall
time and speed-up = Σ busy / wall (how many workers were kept busy on average).
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import SamplingConfig
from chord_core.errors import ChordError, InputError
from chord_core.media.roots import check_regular_video, list_videos
from chord_core.runtime.batch import BatchItem, BatchSummary, out_name
from chord_core.runtime.groups import EndPolicy
from chord_core.runtime.jobs import FINISHED_STATES, JobSpec
from chord_ui.batch_parent import PageSummary, group_spec, parent_id
from chord_ui.formatting import human_duration, progress_fraction, sentence_start, stage_text

log = logging.getLogger(__name__)

FINISHED = FINISHED_STATES | {"skipped"}  # a clip whose result was already there


@dataclass(frozen=True)
class PendingClip:
    """A clip chosen for the batch but not queued yet."""

    name: str
    path: str
    source: str  # "upload" or "folder"


@dataclass
class BatchClip:
    """One clip of a submitted batch: its job, or why it was not run."""

    name: str
    path: str
    key: str = ""
    job_id: str | None = None
    skipped: str = ""              # why it was not run again ("" = queued now)
    error: dict | None = None      # it could not even be queued (unreadable file)


@dataclass
class BatchRun:
    """A submitted batch, as the page remembers it."""

    batch_id: str
    task: str
    query: str
    model: str
    started_at: float
    clips: list[BatchClip]
    busy0: dict[str, float] = field(default_factory=dict)
    finished_at: float | None = None


@dataclass(frozen=True)
class ClipState:
    """A clip's live state for the table."""

    clip: BatchClip
    state: str
    worker: str = ""
    stage: str = ""
    progress: float = 0.0
    elapsed_s: float = 0.0
    error: dict | None = None
    started_at: float | None = None
    finished_at: float | None = None


@dataclass(frozen=True)
class BatchMetrics:
    counts: dict[str, int]
    total: int
    finished: bool
    wall_s: float
    busy_s: dict[str, float]
    speedup: float
    per_min: float


# -- choosing clips ------------------------------------------------------------------------

def folder_clips(text: str) -> tuple[list[PendingClip], bool]:
    """Regular video files in a folder under the media roots (recursive, bounded), or one
    such file; and whether a bound (``media_roots.MAX_LISTED`` files, depth, time) cut the
    list short. Raises InputError (one message for missing and outside the roots)."""
    listing = list_videos(text)
    raw = text.strip().strip('"').strip("'")
    folder = Path(os.path.realpath(Path(raw).expanduser())) if raw else Path()
    out = []
    for p in listing.paths:
        name = str(p.relative_to(folder)) if p.is_relative_to(folder) and p != folder else p.name
        out.append(PendingClip(name, str(p), "folder"))
    return out, listing.truncated


def recheck(clips: Sequence[PendingClip]) -> tuple[list[PendingClip], list[str]]:
    """Folder clips checked again just before queueing (a file may have been swapped for a
    FIFO or a link since it was listed): (clips still fine, names left out)."""
    kept, dropped = [], []
    for c in clips:
        if c.source != "folder":
            kept.append(c)
            continue
        try:
            check_regular_video(c.path)
        except InputError:
            dropped.append(c.name)
        else:
            kept.append(c)
    return kept, dropped


# -- submitting ----------------------------------------------------------------------------

def submit_batch(clips: Sequence[PendingClip], task: str, query: str,
                 sampling: SamplingConfig, max_new_tokens: int, model: str,
                 manager: Any) -> BatchRun:
    """Queue the clips as the children of one runtime group (``batch_parent``: the same
    clips and settings again are the same parent; a clip done before is reused from the
    manager's store, not run again); returns the run. Raises ChordError (e.g. an empty grounding target) before anything is queued."""
    from chord_core.media.roots import job_roots

    if not clips:
        raise ChordError("no clips to queue", hint="upload videos or give a folder first")
    query = query.strip()
    template = AnalysisRequest(clips[0].path, task, query, sampling=sampling,
                               max_new_tokens=max_new_tokens,
                               media_roots=job_roots())  # the worker re-checks at open
    keyed = _keyed(clips, task, query, model, sampling, max_new_tokens)
    run = BatchRun(parent_id(task, query, model, [c.key for c in keyed if c.key],
                             [c.path for c in keyed if c.error is not None]),
                   task, query, model, time.time(), keyed,
                   busy0={w["worker"]: w["busy_s"] for w in manager.workers()})
    seen: dict[str, str] = {}
    queued: list[BatchClip] = []
    for clip in run.clips:
        if clip.error is not None:
            continue
        if clip.key in seen:
            clip.skipped = f"same content as {seen[clip.key]}"
            continue
        seen[clip.key] = clip.name
        queued.append(clip)
    children = [JobSpec(replace(template, video_path=c.path), model=model, label=c.name,
                        key=c.key, batch_id=run.batch_id) for c in queued]
    summary = PageSummary(run, queued)
    group = manager.submit_group(group_spec(run), children, policy=EndPolicy.BEST_EFFORT,
                                 summarise=summary.doc)
    for clip, child in zip(queued, group.children):
        clip.job_id = child.job_id
        if child.reused:
            clip.skipped = "done before"
    for clip in run.clips:  # a repeat shows its first's job
        if clip.skipped and clip.skipped.startswith("same content as"):
            clip.job_id = next(c.job_id for c in queued if c.key == clip.key)
    log.info("batch %s: %d clips, %d queued", run.batch_id, len(run.clips),
             sum(1 for c in run.clips if c.job_id and not c.skipped))
    return run


def _keyed(clips: Sequence[PendingClip], task: str, query: str, model: str,
           sampling: SamplingConfig, max_new_tokens: int) -> list[BatchClip]:
    """Every clip with its content key, or the error that kept it from having one."""
    from chord_core.runtime.batch import request_key

    out = []
    for pc in clips:
        clip = BatchClip(pc.name, pc.path)
        try:
            clip.key = request_key(pc.path, task, query, model, sampling, max_new_tokens)
        except ChordError as exc:
            clip.error = exc.to_dict()
        out.append(clip)
    return out


# -- following -----------------------------------------------------------------------------

def clip_state(clip: BatchClip, manager: Any, store: Any) -> ClipState:
    """The clip's state now, from the manager (or the store for jobs it no longer knows)."""
    if clip.error is not None:
        return ClipState(clip, "failed", stage="could not be queued", error=clip.error)
    if clip.skipped:
        return ClipState(clip, "skipped", stage=sentence_start(clip.skipped),
                         progress=1.0)
    try:
        st = manager.status(clip.job_id)
    except KeyError:
        row = store.get_job(clip.job_id) or {}
        state = str(row.get("state") or "failed")
        return ClipState(clip, state, worker=row.get("worker") or "", stage=state,
                         progress=1.0 if state == "done" else 0.0, error=row.get("error"))
    state = st.state.value
    if state == "failed":
        stage = (st.error or {}).get("message", "failed")
    elif state == "queued":
        stage = "Waiting for a worker"
    elif state in ("done", "cancelled"):  # not the last stage it went through ("Generating")
        stage = "Done" if state == "done" else "Cancelled"
    else:
        stage = stage_text(st.last_event, state)
    return ClipState(clip, state, worker=st.worker or "", stage=stage,
                     progress=progress_fraction(st.events, state), elapsed_s=st.elapsed_s,
                     error=st.error, started_at=st.started_at, finished_at=st.finished_at)


def batch_metrics(run: BatchRun, states: Sequence[ClipState],
                  workers: Sequence[dict[str, Any]], now: float | None = None) -> BatchMetrics:
    """Counts, wall time, busy time per worker since the batch began, speed-up, clips/min.
    Busy time includes the running part of jobs still in progress."""
    now = time.time() if now is None else now
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    finished = all(s.state in FINISHED for s in states)
    end = run.finished_at if run.finished_at is not None else now
    wall = max(0.0, end - run.started_at)
    busy = {w["worker"]: max(0.0, w["busy_s"] - run.busy0.get(w["worker"], 0.0))
            for w in workers}
    for s in states:
        if s.state == "running" and s.worker in busy and s.started_at is not None:
            busy[s.worker] += max(0.0, now - s.started_at)
    speedup = sum(busy.values()) / wall if wall > 0 else 0.0
    per_min = counts.get("done", 0) / (wall / 60.0) if wall > 0 else 0.0
    return BatchMetrics(counts, len(states), finished, wall, busy, speedup, per_min)


def finished_at(states: Sequence[ClipState], now: float | None = None) -> float:
    """When the last clip finished (now if none ran: all skipped or not queued)."""
    ends = [s.finished_at for s in states if s.finished_at is not None]
    return max(ends) if ends else (time.time() if now is None else now)


def devices_text(devices: Sequence[int]) -> str:
    return "CPU" if not devices else ", ".join(f"cuda:{d}" for d in devices)


def worker_rows(states: Sequence[ClipState], workers: Sequence[dict[str, Any]],
                metrics: BatchMetrics) -> list[dict[str, Any]]:
    """Per-worker panel: where it runs, what it runs now, what it did for this batch."""
    by_job = {s.clip.job_id: s.clip.name for s in states if s.clip.job_id}
    rows = []
    for w in workers:
        mine = [s for s in states if s.worker and w["worker"] in s.worker.split("+")]
        job = w.get("job")
        rows.append({"worker": w["worker"], "devices": devices_text(w.get("devices") or ()),
                     "state": w["state"], "running": by_job.get(job, job or "—"),
                     "assigned": len(mine),
                     "done": sum(1 for s in mine if s.state == "done"),
                     "busy (s)": round(metrics.busy_s.get(w["worker"], 0.0), 1),
                     "restarts": w.get("restarts", 0)})
    return rows


def table_rows(states: Sequence[ClipState]) -> list[dict[str, Any]]:
    """The live per-clip table."""
    return [{"clip": s.clip.name, "state": s.state, "worker": s.worker or "—",
             "stage": s.stage, "progress": round(100.0 * s.progress, 1),
             "elapsed": human_duration(s.elapsed_s) if s.elapsed_s else "—"}
            for s in states]


# -- results -------------------------------------------------------------------------------

def result_doc(clip: BatchClip, manager: Any, store: Any) -> dict[str, Any] | None:
    """The clip's chord.result/v1 document (manager memory first, then the store)."""
    if not clip.job_id:
        return None
    try:
        st = manager.status(clip.job_id)
    except KeyError:
        st = None
    if st is not None and st.result is not None:
        return st.result.to_dict()
    return store.get_result(clip.job_id)


def summary(run: BatchRun, states: Sequence[ClipState], metrics: BatchMetrics,
            names: dict[str, str]) -> dict[str, Any]:
    """summary.json: the CLI batch summary plus the model and throughput."""
    items = [BatchItem(video=s.clip.path, out_json=names.get(s.clip.name, ""),
                       job_id=s.clip.job_id, state="done" if s.state == "skipped" else s.state,
                       skipped=s.state == "skipped", worker=s.worker or None, error=s.error)
             for s in states]
    assignment = {w: [s.clip.name for s in states if s.worker and w in s.worker.split("+")]
                  for w in metrics.busy_s}
    doc = BatchSummary(run.batch_id, run.task, run.query, items, metrics.wall_s,
                       dict(metrics.busy_s), assignment).to_dict()
    doc.update(model=run.model, clips_per_min=round(metrics.per_min, 3),
               started_at=run.started_at, finished_at=run.finished_at)
    return doc


def batch_zip(run: BatchRun, states: Sequence[ClipState], metrics: BatchMetrics,
              manager: Any, store: Any) -> bytes:
    """A ZIP of every result JSON (done and skipped clips) plus summary.json. Each result
    carries the user's own file name in ``video.name``, as the Analyze download does."""
    buf = io.BytesIO()
    used: set[str] = set()
    names: dict[str, str] = {}
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for s in states:
            if s.state not in ("done", "skipped"):
                continue
            doc = result_doc(s.clip, manager, store)
            if doc is None:
                continue
            doc = {**doc, "video": {**(doc.get("video") or {}), "name": s.clip.name}}
            name = out_name(Path(s.clip.name.replace("/", "_")), run.task, used)
            names[s.clip.name] = name
            zf.writestr(name, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        doc = summary(run, states, metrics, names)
        zf.writestr("summary.json", json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return buf.getvalue()


def cancel_all(run: BatchRun, manager: Any) -> int:
    """Cancel every clip still queued or running; returns how many were cancelled."""
    n = 0
    for c in run.clips:
        if c.job_id and not c.skipped and manager.cancel(c.job_id):
            n += 1
    return n

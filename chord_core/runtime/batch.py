"""Batch runs: many clips through the job manager, one result JSON per clip plus a summary.

A batch is a runtime group (``runtime/groups.py``): one parent row (id ``batch-…``, a
content key of the output folder and the clips' keys, so the same command finds it again)
whose summary is the batch's summary and progress, and whose children are the clips'
ordinary jobs (``parent``). The runtime writes every row and ends the parent (done, failed:
how many and the first error, or cancelled); History lists the batch as one row with its
clips inside.

Resumable: every clip has a content key (file hash + task + query + model + sampling); a clip
whose key already has a stored result is not run again — its JSON is written from the store.
The summary says which worker ran what, each worker's busy time, the wall time, and the
speed-up Σ busy / wall (how many workers were kept busy on average).

Same clip + same settings = one job, ever: a clip whose key has an unfinished job (one a killed
run left queued, resumed by the manager) is attached to that job, not submitted again.
Results are written atomically; a result file the disk refuses (full, read-only) is noted
on its item and the run goes on — the result is in the store, and re-running the same command
writes it without analysing again. SIGTERM stops a run like Ctrl-C (``stop_on_sigterm``):
workers are stopped and unfinished jobs stay queued for the next run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from chord_core.analysis.request import AnalysisRequest
from chord_core.errors import BatchStopped, InputError, OutputError
from chord_core.media.video_files import check_regular_file
from chord_core.runtime.groups import EndPolicy, GroupHandle, GroupSpec, tally
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.protocols import JobRunner
from chord_core.runtime.store_rows import StoreReader

log = logging.getLogger(__name__)

VIDEO_SUFFIXES = {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ts",
                  ".wmv", ".flv", ".3gp"}


def collect_videos(paths: Sequence[str | Path]) -> list[Path]:
    """Files as given, plus the video files inside given folders (sorted, recursive)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.suffix.lower() in VIDEO_SUFFIXES
                              and f.is_file()))
        elif p.exists() or p.is_symlink():
            check_regular_file(p)  # a pipe or device named here would hang the hashing
            out.append(p)
        else:
            raise InputError(f"{p} does not exist", hint="give video files or folders of them")
    if not out:
        raise InputError("no video files found in " + ", ".join(map(str, paths)),
                         hint=f"supported: {', '.join(sorted(VIDEO_SUFFIXES))}")
    return list(dict.fromkeys(p.resolve() for p in out))


@dataclass
class BatchItem:
    video: str
    out_json: str
    job_id: str | None = None
    state: str = "queued"
    skipped: bool = False
    worker: str | None = None
    error: dict[str, Any] | None = None
    write_error: str | None = None   # why out_json could not be written (result is stored)


@dataclass
class BatchSummary:
    batch_id: str
    task: str
    query: str
    items: list[BatchItem] = field(default_factory=list)
    wall_s: float = 0.0
    busy_s: dict[str, float] = field(default_factory=dict)
    assignment: dict[str, list[str]] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    nodes: dict[str, str] = field(default_factory=dict)  # worker → machine (Ray), when known

    @property
    def speedup(self) -> float:
        return sum(self.busy_s.values()) / self.wall_s if self.wall_s > 0 else 0.0

    def unwritten(self) -> list[BatchItem]:
        """Finished items whose result file could not be written."""
        return [it for it in self.items if it.write_error]

    def counts(self) -> dict[str, int]:
        return tally((it.state, bool(it.skipped)) for it in self.items)[0]

    def to_dict(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "task": self.task, "query": self.query,
                "counts": self.counts(), "wall_s": round(self.wall_s, 3),
                "busy_s": {k: round(v, 3) for k, v in self.busy_s.items()},
                "speedup": round(self.speedup, 3), "assignment": self.assignment,
                "plan": self.plan, "nodes": self.nodes,
                "items": [asdict(i) for i in self.items]}


def request_key(video: str | Path, task: str, query: str, model: str,
                sampling: Any, max_new_tokens: int) -> str:
    """The content key of one clip's analysis: file content, task, query, model and every
    setting that changes the result (sampling, output length). Equal keys = same result."""
    from chord_core.runtime.store import content_key

    settings = {**(asdict(sampling) if not isinstance(sampling, dict) else sampling),
                "max_new_tokens": max_new_tokens}
    return content_key(video, task, query, model, settings)


def out_name(video: Path, task: str, used: set[str]) -> str:
    """``clip.ground.json``; clips with the same name in different folders get a suffix."""
    base = f"{video.stem}.{task}"
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}-{n}"
    used.add(name)
    return name + ".json"


def run_batch(manager: JobRunner, store: StoreReader, videos: Sequence[Path], request: AnalysisRequest,
              out_dir: Path, *, model: str,
              on_update: Callable[[BatchSummary], None] | None = None) -> BatchSummary:
    """Run ``request`` (its video path is replaced per clip) over ``videos``: one runtime
    group (``JobManager.submit_group``, best effort), whose parent the runtime ends; this
    writes each clip's JSON as it finishes and reports progress."""
    from chord_core.runtime.outputs import check_folder

    check_folder(out_dir, "batch results")
    keys = {v: request_key(v, request.task, request.query, model, request.sampling,
                           request.max_new_tokens) for v in videos}
    ident = json.dumps([str(out_dir.resolve()), sorted(keys.values())])
    batch_id = "batch-" + hashlib.sha256(ident.encode()).hexdigest()[:12]
    summary = BatchSummary(batch_id, request.task, request.query)
    used: set[str] = set()
    specs = []
    for v in videos:
        summary.items.append(BatchItem(str(v), str(out_dir / out_name(v, request.task, used))))
        specs.append(JobSpec(AnalysisRequest(**{**asdict(request), "video_path": str(v),
                                                "sampling": request.sampling}),
                             model=model, key=keys[v], batch_id=batch_id, label=v.name))
    group = manager.submit_group(
        GroupSpec(batch_id, kind="batch", label=f"batch of {len(videos)} clip(s)",
                  model=model, video_path=str(out_dir), query=request.query,
                  spec={"task": request.task, "out_dir": str(out_dir), "clips": len(videos)},
                  noun="clip", hint="each clip's error is in summary.json"),
        specs, policy=EndPolicy.BEST_EFFORT, summarise=lambda h: batch_doc(summary, h))
    for item, child in zip(summary.items, group.children):
        item.job_id = child.job_id
        if child.reused:  # its key was done before: its JSON is written from the store
            item.state, item.skipped = "done", True
            _write_item(item, store.get_result(child.job_id))
    try:
        _wait(manager, summary, on_update)
        group.result(timeout=60)  # the runtime ended the parent after the last clip
    except BaseException:
        group.abandon()  # stopped: the parent ends cancelled, unfinished clips stay queued
        raise
    try:
        _write_json(out_dir / "summary.json", summary.to_dict())
    except OSError as exc:
        log.warning("could not write %s: %s", out_dir / "summary.json", exc)
    return summary


def batch_doc(summary: BatchSummary, group: GroupHandle | None = None) -> dict[str, Any]:
    """The batch parent's summary: the batch's summary, each clip's state as the runtime
    has it now (``group``), and its progress."""
    doc = summary.to_dict()
    states = {c.job_id: st for c, st in zip(group.children, group.statuses())
              if st is not None} if group is not None else {}
    for item in doc["items"]:
        st = states.get(item["job_id"])
        if st is not None and not item["skipped"]:
            item["state"] = st.state.value
    counts, done = tally((i["state"], bool(i["skipped"])) for i in doc["items"])
    return {**doc, "counts": counts,
            "progress": {"stage": "clips", "done": done, "total": len(doc["items"])}}


UPDATE_S = 1.0  # how often ``on_update`` hears of the workers' busy time meanwhile


def _wait(manager: JobRunner, summary: BatchSummary,
          on_update: Callable[[BatchSummary], None] | None) -> None:
    """Wait on the jobs' handles: each finished job is handled once, as it finishes (its
    JSON written or its error noted); ``on_update`` hears of it at once, and of the
    workers' busy time every ``UPDATE_S`` in between."""
    t0 = time.time()
    busy0 = {w["worker"]: w["busy_s"] for w in manager.workers()}
    pending = [it for it in summary.items if not it.skipped]
    finished: queue.SimpleQueue[BatchItem] = queue.SimpleQueue()
    for it in pending:
        manager.handle(str(it.job_id)).add_done_callback(_put_on(finished, it))
    left = len(pending)
    while True:
        try:  # the first finished item blocks up to UPDATE_S; those also in, at once
            got = finished.get(timeout=UPDATE_S) if left else None
            while got is not None:
                _finished(manager, got)
                left -= 1
                got = finished.get_nowait() if left and not finished.empty() else None
        except queue.Empty:
            pass
        for it in pending:
            if not JobState(it.state).finished:
                st = manager.status(str(it.job_id))
                it.state, it.worker = st.state.value, st.worker
        _refresh(manager, summary, pending, busy0, t0)
        if on_update is not None:
            on_update(summary)
        if not left:
            return


def _put_on(q: queue.SimpleQueue[BatchItem], it: BatchItem) -> Callable[[Any], None]:
    """A done callback that puts ``it`` on ``q``."""
    return lambda _: q.put(it)


def _finished(manager: JobRunner, it: BatchItem) -> None:
    """One finished item: its result file written, or its error noted."""
    st = manager.status(str(it.job_id))
    it.state, it.worker = st.state.value, st.worker
    if st.state is JobState.DONE and st.result is not None:
        _write_item(it, st.result.to_dict())
    else:
        it.error = st.error or {"message": st.state.value}


def _refresh(manager: JobRunner, summary: BatchSummary, pending: list[BatchItem],
             busy0: dict[str, float], t0: float) -> None:
    rows = manager.workers()
    summary.busy_s = {w["worker"]: w["busy_s"] - busy0.get(w["worker"], 0.0) for w in rows}
    summary.assignment = {w["worker"]: [Path(i.video).name for i in pending if i.worker
                                        and w["worker"] in i.worker.split("+")]
                          for w in rows}
    summary.nodes.update({w["worker"]: w["node"] for w in rows if w.get("node")})
    summary.wall_s = time.time() - t0


def _write_json(path: Path, doc: dict[str, Any] | None) -> None:
    from chord_core.runtime.outputs import write_json

    if doc is not None:
        write_json(path, doc)


def _write_item(item: BatchItem, doc: dict[str, Any] | None) -> None:
    """Write one clip's result file; a refusal (disk full…) is noted on the item, not
    raised: the result is in the store and the other clips go on."""
    try:
        _write_json(Path(item.out_json), doc)
        item.write_error = None
    except OSError as exc:
        item.write_error = exc.strerror or str(exc)
        log.warning("could not write %s: %s (the result is in the job store)", item.out_json,
                    item.write_error)


# -- stopping and problems -------------------------------------------------------------------

def stopped(exc: BaseException) -> BatchStopped:
    """The BatchStopped for Ctrl-C (exit 130) or SIGTERM (``Terminated``, exit 143)."""
    by = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
    err = BatchStopped(f"stopped by {by}; clips not finished stay queued in the job store",
                       hint="run the same command again: finished clips are not analysed "
                            "again and the queued ones resume")
    err.exit_code = 143 if by == "SIGTERM" else 130
    return err


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt."""


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM raises ``Terminated`` in the main thread, so the batch shuts its
    workers down cleanly instead of dying with them still running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def unwritten_error(summary: BatchSummary, out_dir: Path, store_path: Path) -> OutputError:
    """The error when result files could not be written: where the results are instead."""
    items = summary.unwritten()
    names = ", ".join(Path(i.out_json).name for i in items[:3]) + (" …" if len(items) > 3 else "")
    return OutputError(
        f"{len(items)} result file(s) could not be written to {out_dir} ({items[0].write_error}):"
        f" {names}; the results are kept in the job store {store_path}",
        hint="free space (or make the folder writable), then run the same command again: "
             "it writes them from the store without analysing again")

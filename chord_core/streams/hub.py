"""The live streams of one process (the ``watch`` CLI, ``serve`` or the app): each read by
its ``Ingest`` thread, recorded into segments, and every closed segment analysed as one
**chunk**: a rolling description (``describe``), the standing checks (an ``entail`` job per
statement; a run of frames at or over the threshold is an alert, stored by the library's
alert path ``library/alerts.store_alert``, pointing at the segment and the second in it),
and the grounding of a target when one is set. Chunk jobs are ordinary jobs in the runtime,
children of one parent row per stream run (``live-…-r<start>``), so the GPU is shared with
every other stream and clip by the manager's scheduling. Jobs' results stay in the store.

Stopping a stream stops its ingest (the open segment is closed and analysed) and keeps
everything: rows, recordings (until retention takes them), results and alerts.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chord_core.errors import InputError
from chord_core.streams.ingest import Ingest, IngestSettings, StreamState, StreamStatus
from chord_core.streams.segments import Segment, SegmentWriter, prune
from chord_core.streams.sources import StreamSource, parse_source
from chord_core.streams.table import StreamTable

log = logging.getLogger(__name__)

MAX_STREAMS = 64
MAX_STATEMENTS = 16


@dataclass(frozen=True)
class StreamSettings:
    """What is done with a stream (``chunk_s``: the length of a segment and of a chunk)."""

    chunk_s: float = 10.0
    describe: bool = True
    prompt: str = ""
    statements: tuple[str, ...] = ()
    threshold: float = 0.8
    target: str = ""
    model: str | None = None
    max_new_tokens: int = 128
    fps: float | None = None  # frames sampled per second of a chunk (None: the task's own)
    hook: str = ""  # a local command per alert (library/hooks.py); never from a request
    max_age_s: float | None = 7 * 86400.0
    max_bytes: int | None = 20 * 2**30
    ingest: IngestSettings = field(default_factory=IngestSettings)

    def __post_init__(self) -> None:
        if not 1.0 <= self.chunk_s <= 600.0:
            raise InputError(f"a chunk of {self.chunk_s:g} s is out of range",
                             hint="use a chunk length from 1 to 600 seconds")
        if not 0.0 <= self.threshold <= 1.0:
            raise InputError(f"threshold {self.threshold:g} is not a probability",
                             hint="use a threshold from 0 to 1, e.g. 0.8")
        if len(self.statements) > MAX_STATEMENTS or any(
                not s.strip() or len(s) > 500 for s in self.statements):
            raise InputError("standing checks: up to 16 statements of 1 to 500 characters",
                             hint="shorten or split the statements")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["statements"] = list(self.statements)
        return out


@dataclass
class _Live:
    source: StreamSource
    settings: StreamSettings
    ingest: Ingest
    folder: Path
    parent: str
    hooks: Any = None  # a library.hooks.HookRunner when the stream has a hook


class StreamHub:
    """Starts, lists and stops streams over a job manager and its store."""

    def __init__(self, manager: Any, store: Any, data_dir: str | Path) -> None:
        from chord_core.library.index import LibraryIndex, store_path

        self.manager, self.store = manager, store
        self.root = Path(data_dir) / "streams"
        self.index = LibraryIndex(store_path(store))  # the alert and stream tables too
        self.table = StreamTable(self.index)
        self._live: dict[str, _Live] = {}
        # the chunks whose jobs run (each a group of the runtime, ``run_stage``: it follows
        # the chunk's jobs and says when the last has ended), by segment path
        self._chunks: set[str] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when no chunk is pending
        # set on every state change and finished chunk (a follower waits on it, then clears)
        self.changed = threading.Event()
        # the runtime's news of a chunk, taken in order by the follower (the dispatcher's
        # thread only queues it): ("job", …) a chunk job ended, ("end", …) its last one had
        self._done: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self._follower = threading.Thread(target=self._follow, name="live-chunks", daemon=True)
        self._follower.start()

    # -- streams -------------------------------------------------------------------------
    def start(self, text: str, settings: StreamSettings | None = None) -> dict[str, Any]:
        source = parse_source(text)
        settings = settings or StreamSettings()
        with self._lock:
            old = self._live.get(source.stream_id)
            if old is not None and old.ingest.snapshot().state not in (
                    StreamState.STOPPED, StreamState.FAILED):
                return self.describe(source.stream_id)
            if len(self._live) >= MAX_STREAMS and old is None:
                raise InputError(f"{MAX_STREAMS} streams are open already",
                                 hint="stop one first (DELETE /v1/streams/ID)")
            folder = self.root / source.stream_id
            parent = f"{source.stream_id}-r{int(time.time())}"
            writer = SegmentWriter(folder, source.stream_id, settings.chunk_s,
                                   self._segment,
                                   container="mkv" if source.kind == "device" else "mp4")
            ingest = Ingest(source, writer, settings.ingest,
                            on_status=functools.partial(self._status, source.stream_id))
            self.table.opened(source.stream_id, source.shown, source.kind, settings.to_dict())
            self.manager.parents.open(parent, kind="live", video_path=str(folder),
                                      model=settings.model or "", label=source.shown)
            self._live[source.stream_id] = _Live(source, settings, ingest, folder, parent,
                                                 self._hooks(settings.hook))
        ingest.start()
        log.info("stream %s: started (%s)", source.shown, source.stream_id)
        return self.describe(source.stream_id)

    def _hooks(self, command: str) -> Any:
        from chord_core.library import watch_table
        from chord_core.library.hooks import HookRunner

        if not command:
            return None
        def record(run: Any) -> None:
            watch_table.record_hook_run(self.index, run.to_dict())

        return HookRunner(command, record)

    def stop(self, stream_id: str) -> dict[str, Any]:
        with self._lock:
            live = self._live.get(stream_id)
        if live is None:
            if self.table.stream(stream_id) is None:
                raise InputError(f"no stream {stream_id!r}", hint="list them: GET /v1/streams")
            return self.describe(stream_id)
        live.ingest.stop()
        self.manager.parents.finish(live.parent, "done", {"stream": stream_id,
                                                          "shown": live.source.shown})
        return self.describe(stream_id)

    def describe(self, stream_id: str) -> dict[str, Any]:
        row = self.table.stream(stream_id) or {"id": stream_id}
        live = self._live.get(stream_id)
        if live is not None:  # the freshest state is the ingest's own
            snap = live.ingest.snapshot().to_dict()
            row.update(state=snap["state"], last_error=snap["last_error"], status=snap)
        row["recent"] = self.table.chunks(stream_id, limit=5)
        return row

    def list_streams(self) -> list[dict[str, Any]]:
        return [self.describe(row["id"]) for row in self.table.streams()]

    def health(self) -> list[dict[str, Any]]:
        """One line per stream this process reads (``/health``): id, masked URL, state."""
        with self._lock:
            items = list(self._live.items())
        return [{"id": sid, "url": live.source.shown, **{k: v for k, v in
                 live.ingest.snapshot().to_dict().items() if k in (
                     "state", "last_error", "reconnects", "packets", "clock_jumps")}}
                for sid, live in items]

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every recorded chunk's jobs ended (True) or ``timeout`` passed."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._chunks, timeout)

    def shutdown(self) -> None:
        with self._lock:
            items = list(self._live)
        for sid in items:
            self.stop(sid)
        self._done.put(None)
        for live in list(self._live.values()):
            if live.hooks is not None:
                live.hooks.wait_idle(30)
                live.hooks.stop()
        self._follower.join(10)

    # -- chunks --------------------------------------------------------------------------
    def _status(self, stream_id: str, status: StreamStatus) -> None:
        try:
            self.table.status(stream_id, status.to_dict())
        except Exception as exc:  # noqa: BLE001 — a busy store never stops the ingest
            log.warning("stream %s: state not stored (%s)", stream_id, exc)
        self.changed.set()

    def _segment(self, seg: Segment) -> None:
        """A closed segment: its chunk jobs, its row, then the retention."""
        live = self._live.get(seg.stream_id)
        if live is None:
            return
        try:
            jobs = self._submit(live, seg)
            self.table.chunk(seg, jobs)
            self.table.deleted(prune(live.folder, live.settings.max_age_s,
                                     live.settings.max_bytes))
        except Exception as exc:  # noqa: BLE001 — one chunk's trouble never stops the ingest
            log.warning("stream %s: chunk %s not analysed: %s", live.source.shown, seg.seq, exc)

    def _submit(self, live: _Live, seg: Segment) -> dict[str, Any]:
        """The chunk's jobs, as one group of the runtime (a stage of the stream run's row:
        the jobs are that row's children); its ids by task for the chunk's row."""
        from chord_core.analysis.request import AnalysisRequest
        from chord_core.config import SamplingConfig
        from chord_core.runtime.group_start import run_stage
        from chord_core.runtime.groups import EndPolicy
        from chord_core.runtime.jobs import JobSpec

        s, base = live.settings, f"{live.parent}-c{seg.seq:06d}"
        todo: list[tuple[str, str, str]] = []
        if s.describe:
            todo.append(("describe", s.prompt, f"{base}-d"))
        todo += [("entail", st, f"{base}-e{i}") for i, st in enumerate(s.statements)]
        if s.target:
            todo.append(("ground", s.target, f"{base}-g"))
        jobs: dict[str, Any] = {"entail": {}}
        for task, query, job_id in todo:
            if task == "entail":
                jobs["entail"][query] = job_id
            else:
                jobs[task] = job_id
        if not todo:
            return jobs
        label = f"{live.source.shown} #{seg.seq}"
        children = [(job_id, JobSpec(
            AnalysisRequest(seg.path, task, query, SamplingConfig(fps=s.fps),
                            max_new_tokens=s.max_new_tokens,
                            media_roots=(str(live.folder),)),
            model=s.model, label=label)) for task, query, job_id in todo]
        what = {job_id: (task, query) for task, query, job_id in todo}
        sid, path = seg.stream_id, seg.path

        def job_ended(child: Any, status: Any) -> None:
            self._done.put(("job", sid, path, *what[child.job_id], child.job_id, status))

        with self._lock:  # counted before any job can end (wait_idle sees it at once)
            self._chunks.add(path)
        try:
            group = run_stage(self.manager, base, children, in_flight=len(children),
                              policy=EndPolicy.BEST_EFFORT, label=label,
                              children_parent=live.parent, on_child=job_ended)
        except BaseException:
            self._forget(path)
            raise
        group.add_done_callback(lambda g: self._done.put(("end", sid, path, g)))
        return jobs

    def _forget(self, path: str) -> None:
        with self._lock:
            self._chunks.discard(path)
            if not self._chunks:
                self._idle.notify_all()

    def _follow(self) -> None:
        while True:
            item = self._done.get()
            if item is None:
                return
            try:
                if item[0] == "job":
                    self._job_ended(*item[1:])
                else:
                    self._chunk_ended(*item[1:])
            except Exception as exc:  # noqa: BLE001 — one chunk's trouble stops no other
                log.warning("stream %s: a chunk result not followed: %s", item[1], exc)

    def _chunk_ended(self, stream_id: str, path: str, group: Any) -> None:
        """The chunk's last job ended: its row's state is the group's ("failed" or
        "cancelled" when one of its jobs was; its alerts were counted as each job ended)."""
        self._forget(path)
        self.table.chunk_done(stream_id, path, group.result(0).state.value, 0)
        self.changed.set()

    def _job_ended(self, stream_id: str, path: str, task: str, statement: str, job_id: str,
                   status: Any) -> None:
        from chord_core.library.alerts import moments, store_alert

        fired = 0
        if task == "entail" and status is not None and str(status.state) == "done":
            live = self._live.get(stream_id)
            threshold = live.settings.threshold if live else 0.8
            doc = status.result.to_dict() if status.result is not None else {}
            frames = (doc.get("entailment") or {}).get("frames") or []
            log.debug("chunk %s: %s frames checked, threshold %s", path, len(frames), threshold)
            check = {"clip_key": f"{stream_id}:{Path(path).name}", "statement": statement,
                     "path": path, "job_id": job_id}
            for m in moments(frames, threshold):
                alert_id = store_alert(self.index, stream_id, check, m)
                if alert_id is None:
                    continue  # fired before (this chunk, this moment)
                fired += 1
                log.warning("alert: %s at %.1f s of %s (P=%.2f)", statement, m["start_s"],
                            Path(path).name, m["probability"])
                if live is not None and live.hooks is not None:
                    live.hooks.put({"id": alert_id, "watch": stream_id, **check, **m})
        self.table.chunk_done(stream_id, path, "analysing", fired)
        self.changed.set()


__all__ = ["StreamHub", "StreamSettings"]

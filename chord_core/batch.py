"""Batch runs: many clips through the job manager, one result JSON per clip plus a summary.

Resumable: every clip has a content key (file hash + task + query + model + sampling); a clip
whose key already has a stored result is not run again — its JSON is written from the store.
The summary says which worker ran what, each worker's busy time, the wall time, and the
speed-up Σ busy / wall (how many workers were kept busy on average).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from chord_core.engine import AnalysisRequest
from chord_core.errors import InputError
from chord_core.jobs import JobSpec, JobState
from chord_core.video_files import check_regular_file

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
    error: dict | None = None


@dataclass
class BatchSummary:
    batch_id: str
    task: str
    query: str
    items: list[BatchItem] = field(default_factory=list)
    wall_s: float = 0.0
    busy_s: dict[str, float] = field(default_factory=dict)
    assignment: dict[str, list[str]] = field(default_factory=dict)
    plan: dict | None = None

    @property
    def speedup(self) -> float:
        return sum(self.busy_s.values()) / self.wall_s if self.wall_s > 0 else 0.0

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for it in self.items:
            c["skipped" if it.skipped else it.state] = c.get(
                "skipped" if it.skipped else it.state, 0) + 1
        return c

    def to_dict(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "task": self.task, "query": self.query,
                "counts": self.counts(), "wall_s": round(self.wall_s, 3),
                "busy_s": {k: round(v, 3) for k, v in self.busy_s.items()},
                "speedup": round(self.speedup, 3), "assignment": self.assignment,
                "plan": self.plan, "items": [asdict(i) for i in self.items]}


def request_key(video: str | Path, task: str, query: str, model: str,
                sampling: Any, max_new_tokens: int) -> str:
    """The content key of one clip's analysis: file content, task, query, model and every
    setting that changes the result (sampling, output length). Equal keys = same result."""
    from chord_core.store import content_key

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


def run_batch(manager: Any, store: Any, videos: Sequence[Path], request: AnalysisRequest,
              out_dir: Path, *, model: str,
              on_update: Callable[[BatchSummary], None] | None = None) -> BatchSummary:
    """Run ``request`` (its video path is replaced per clip) over ``videos``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = {v: request_key(v, request.task, request.query, model, request.sampling,
                           request.max_new_tokens) for v in videos}
    ident = json.dumps([str(out_dir.resolve()), sorted(keys.values())])
    batch_id = "batch-" + hashlib.sha256(ident.encode()).hexdigest()[:12]
    store.add_batch(batch_id, out_dir)
    summary = BatchSummary(batch_id, request.task, request.query)
    used: set[str] = set()
    for v in videos:
        item = BatchItem(str(v), str(out_dir / out_name(v, request.task, used)))
        done = store.find_done(keys[v])
        if done is not None:
            item.job_id, item.state, item.skipped = done, "done", True
            _write_json(Path(item.out_json), store.get_result(done))
        else:
            spec = JobSpec(AnalysisRequest(**{**asdict(request), "video_path": str(v),
                                              "sampling": request.sampling}),
                           model=model, key=keys[v], batch_id=batch_id, label=v.name)
            item.job_id = manager.submit(spec)
        summary.items.append(item)
    _wait(manager, summary, on_update)
    store.set_batch_summary(batch_id, summary.to_dict())
    _write_json(out_dir / "summary.json", summary.to_dict())
    return summary


def _wait(manager: Any, summary: BatchSummary,
          on_update: Callable[[BatchSummary], None] | None) -> None:
    t0 = time.time()
    busy0 = {w["worker"]: w["busy_s"] for w in manager.workers()}
    pending = [it for it in summary.items if not it.skipped]
    running = list(pending)
    while True:
        for it in list(running):
            st = manager.status(it.job_id)
            it.state, it.worker = st.state.value, st.worker
            if not st.state.finished:
                continue
            running.remove(it)  # each finished job is handled once: error or JSON written
            if st.state is JobState.DONE:
                _write_json(Path(it.out_json), st.result.to_dict())
            else:
                it.error = st.error or {"message": st.state.value}
        rows = manager.workers()
        summary.busy_s = {w["worker"]: w["busy_s"] - busy0.get(w["worker"], 0.0) for w in rows}
        summary.assignment = {w["worker"]: [Path(i.video).name for i in pending if i.worker
                                            and w["worker"] in i.worker.split("+")]
                              for w in rows}
        summary.wall_s = time.time() - t0
        if on_update is not None:
            on_update(summary)
        if not running:
            return
        time.sleep(0.2)


def _write_json(path: Path, doc: dict | None) -> None:
    if doc is None:
        return
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)

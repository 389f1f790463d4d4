"""Grounding a long clip: its frames in chunks through every worker, tracks joined after.

The clip is sampled at ``ground_fps`` over its whole length (container times, as any plan),
the plan is cut into chunks of ``ground_chunk_frames`` frames, and each chunk is an ordinary
``ground`` job (a worker reads only that chunk's frames: memory stays bounded by the chunks in
flight). :func:`join_chunks` then merges the chunks' detections — a frame grounded by two
chunks counts once — and links tracks and cuts segments over the whole clip, so a target
that crosses a chunk boundary keeps one track and one segment. The result is one
``chord.result/v1`` document, like a short clip's. The run is a parent job, each chunk a
child (:mod:`chord_core.longvideo.runs`); the joined result is the parent's document.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.config import SamplingConfig
from chord_core.longvideo.chunks import slice_plan
from chord_core.longvideo.runs import ChunkJob, ParentRun, run_id, run_jobs
from chord_core.longvideo.settings import LongVideoSettings
from chord_core.types import Result, Timing, VideoInfo

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobRunner


def ground_plan(info: VideoInfo, settings: LongVideoSettings, sampling: SamplingConfig
                ) -> Any:
    """The whole clip at ``ground_fps`` (no frame cap: chunks bound the work instead)."""
    from chord_core.media.sampling import plan_sampling

    need = max(4, math.ceil(info.duration_s * settings.ground_fps) + 2)
    return plan_sampling(info, "ground", replace(sampling, fps=settings.ground_fps,
                                                 max_frames=need))


def join_chunks(info: VideoInfo, target: str, results: Sequence[Result]) -> Result:
    """One result from chunk results in clip order: detections merged (a frame seen twice
    counts once), tracks linked and segments cut across chunk boundaries."""
    from chord_core.analysis import tracking as tr

    seen: set[int] = set()
    dets, indices, times, raw, warnings = [], [], [], [], []
    for res in results:
        for i, t in zip(res.sampling.frame_indices, res.sampling.timestamps_s):
            if i not in seen:
                indices.append(i)
                times.append(t)
        dets += [replace(d, track_id=-1) for d in res.detections if d.frame_index not in seen]
        seen.update(res.sampling.frame_indices)
        raw += list(res.raw_outputs)
        warnings += [w for w in res.warnings if w not in warnings]
    order = sorted(range(len(indices)), key=lambda k: indices[k])
    first = results[0]
    span = (times[order[-1]] - times[order[0]]) if len(order) > 1 else 0.0
    fps = (len(order) - 1) / span if span > 0 else first.sampling.fps
    plan = replace(first.sampling, frame_indices=tuple(indices[k] for k in order),
                   timestamps_s=tuple(times[k] for k in order), fps=fps,
                   visual_tokens=sum(r.sampling.visual_tokens for r in results))
    gap = tr.default_max_gap(1.0 / fps if fps > 0 else 1.0)
    linked, tracks = tr.link_tracks(dets, max_gap_s=gap)
    segments = tr.segments_from_tracks(linked, tracks, max_gap_s=gap, duration_s=info.duration_s)
    timing = Timing(**{k: sum(getattr(r.timing, k) for r in results)
                       for k in asdict(first.timing)})
    return Result(task="ground", query=target, video=info, sampling=plan, model=first.model,
                  timing=timing, detections=linked, tracks=tracks, segments=segments,
                  raw_outputs=tuple(raw), warnings=tuple(warnings), method="per_frame",
                  created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def ground_run_id(video_key: str, target: str, settings: LongVideoSettings, model: str,
                  sampling: SamplingConfig, max_new_tokens: int = 256) -> str:
    """The id of :func:`ground_long`'s run (its rows in the store: progress, chunks)."""
    key = {"target": target.strip(), "fps": settings.ground_fps, "tokens": max_new_tokens,
           "chunk": settings.ground_chunk_frames, "sampling": asdict(sampling)}
    return run_id("ground", video_key, model, key)


def ground_long(manager: JobRunner, info: VideoInfo, video_key: str, target: str,
                settings: LongVideoSettings, model: str, *, sampling: SamplingConfig,
                in_flight: int = 2, on_progress: Any = None,
                cancel: threading.Event | None = None, batch_size: int | None = None,
                max_new_tokens: int = 256, on_result: Any = None,
                origin: dict[str, Any] | None = None) -> Result:
    """Ground ``target`` over the whole clip through ``manager`` (see module docstring);
    finished chunks are kept in its store and skipped when the same run starts again.
    ``on_result``: see ``run_jobs``; ``origin``: see ``ChaptersRun``."""
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.runtime.jobs import JobSpec

    plan = ground_plan(info, settings, sampling)
    pieces = slice_plan(plan, settings.ground_chunk_frames)
    request = AnalysisRequest(info.path, "ground", target, sampling, max_new_tokens,
                              batch_size=batch_size)
    run = ground_run_id(video_key, target, settings, model, sampling, max_new_tokens)
    runs = ParentRun(manager, run, kind="ground", video_path=info.path,
                     label=Path(info.path).name, model=model, query=target.strip(),
                     spec={"task": "ground", "video_key": video_key,
                           "settings": asdict(settings),
                           **({"origin": origin} if origin else {})})
    if runs.final() is not None:
        return Result.from_dict(runs.final() or {})
    jobs = [ChunkJob(f"{run}-c{k:04d}", JobSpec(
        request, model=model, info=info, plan=piece,
        label=f"{Path(info.path).name} frames {piece.frame_indices[0]}–"
              f"{piece.frame_indices[-1]}")) for k, piece in enumerate(pieces)]
    with runs.running():
        results = run_jobs(manager, runs, jobs, in_flight=in_flight, stage="grounding",
                           on_progress=on_progress, cancel=cancel, on_result=on_result)
        joined = join_chunks(info, target, [results[j.job_id] for j in jobs])
    runs.finish(joined.to_dict())
    return joined

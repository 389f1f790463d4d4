"""Re-checking the best search hits on their frames, by entailment (as the long-video search
checks its candidate chapters): the query as a statement, an ``entail`` job over the hit's
time range only (``range_plan``: at most ``max_frames`` frames at ``fps``, times from the
container). Each checked hit gets ``checked`` = {verdict, p_entailment (the best frame's),
best_s, frames, job_id} — or {error} when its clip cannot be read any more; the hits not
checked keep ``checked: None``, so the answer says which were.
"""

from __future__ import annotations

import bisect
import time
from typing import Any, Sequence

from chord_core.errors import ChordError

CHECK_MIN_S = 1.0  # a hit shorter than this (one frame's moment) is checked over 1 s


def _frames(info: Any, start_s: float, end_s: float) -> tuple[int, int]:
    """Frame indices [a, b) whose presentation times fall in start..end."""
    times = [info.time_of(i) for i in range(info.frame_count)]
    a = max(0, bisect.bisect_left(times, start_s - 1e-6))
    b = min(info.frame_count, max(a + 1, bisect.bisect_right(times, end_s + 1e-6)))
    return a, b


def recheck(hits: Sequence[dict[str, Any]], statement: str, manager: Any, model: str, *,
            top: int = 3, fps: float = 1.0, max_frames: int = 16,
            timeout_s: float = 600.0) -> int:
    """Check the first ``top`` hits (in place); returns how many were checked."""
    from chord_core.analysis.request import AnalysisRequest, probe_input
    from chord_core.config import SamplingConfig
    from chord_core.longvideo.chunks import range_plan
    from chord_core.runtime.jobs import JobSpec

    sampling = SamplingConfig(fps=fps, max_frames=max_frames)
    jobs: list[tuple[dict[str, Any], str]] = []
    for hit in hits[:top]:
        try:
            info = probe_input(hit["video_path"])
            end = max(hit["end_s"], hit["start_s"] + CHECK_MIN_S)
            plan = range_plan(info, *_frames(info, hit["start_s"], end), "entail", sampling)
        except ChordError as exc:
            hit["checked"] = {"error": exc.message}
            continue
        req = AnalysisRequest(hit["video_path"], "entail", statement, sampling)
        jobs.append((hit, manager.submit(JobSpec(req, model=model, info=info, plan=plan))))
    deadline = time.monotonic() + timeout_s
    for hit, job_id in jobs:
        status = manager.wait(job_id, max(0.1, deadline - time.monotonic()))
        hit["checked"] = _verdict(status, job_id)
    return len(jobs)


def _verdict(status: Any, job_id: str) -> dict[str, Any]:
    if status.result is None or status.result.entailment is None:
        err = status.error or {}
        return {"error": str(err.get("message") or f"the check ended {status.state.value}"),
                "job_id": job_id}
    ent = status.result.entailment
    best = max(ent.frames, key=lambda f: f.entailment, default=None)
    return {"verdict": ent.verdict, "job_id": job_id, "frames": len(ent.frames),
            "p_entailment": round(best.entailment, 4) if best else None,
            "best_s": round(best.t_s, 3) if best else None}

"""Search over a long clip: "when does X happen?" → time ranges with evidence frames.

1. **Narrow by text.** Each chapter's words (title, summary, its chunks' descriptions) are
   matched against the query's; the best ``max_chapters`` chapters with any match are the
   candidates. When no chapter mentions the query at all, every chapter is a candidate
   (said in a warning) — the frame check still bounds the work per chapter.
2. **Check frames there.** Each candidate chapter's frames (``fps``, at most ``max_frames``)
   go to the model as one job: ``entail`` (does the frame show the statement?) or ``ground``
   (is the target in it?).
3. **Ranges.** Frames that say yes (most likely label entailment; at least one box) are
   joined into ranges where consecutive ones are at most 1.5 sampling intervals apart; a
   range's score is its best frame's, its evidence the best frames (time, index, score,
   boxes).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.config import SamplingConfig
from chord_core.longvideo.chunks import range_plan, snap_plan
from chord_core.longvideo.doc import Chapter, ChaptersDoc, Evidence, Hit, SearchDoc
from chord_core.longvideo.runs import ChunkJob, ParentRun, run_id, run_jobs
from chord_core.types import Result, VideoInfo

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobRunner

METHODS = ("entail", "ground")
EVIDENCE_FRAMES = 3
_STOP = {"the", "and", "does", "when", "what", "where", "who", "with", "into", "from", "that",
         "this", "there", "happen", "happens", "video", "are", "was", "were", "for"}


def words(text: str) -> set[str]:
    """Lower-case words of 3+ letters, cut to their first 6 letters (a crude stem: 'opens',
    'opening' and 'opened' meet), without question words."""
    return {w[:6] for w in re.findall(r"[a-z0-9]+", (text or "").lower())
            if len(w) > 2 and w not in _STOP}


def rank_chapters(doc: ChaptersDoc, query: str) -> list[tuple[Chapter, float]]:
    """Chapters with the share of the query's words they contain, best first (ties: in
    order)."""
    q = words(query)
    texts = {c.index: c.text for c in doc.chunk_texts}
    out = []
    for ch in doc.chapters:
        have = words(" ".join([ch.title, ch.summary] + [texts.get(i, "") for i in ch.chunks]))
        out.append((ch, len(q & have) / len(q) if q else 0.0))
    return sorted(out, key=lambda cs: (-cs[1], cs[0].index))


def candidates(doc: ChaptersDoc, query: str, max_chapters: int
               ) -> tuple[list[tuple[Chapter, float]], list[str]]:
    ranked = rank_chapters(doc, query)
    hits = [cs for cs in ranked if cs[1] > 0][:max_chapters]
    if hits:
        return sorted(hits, key=lambda cs: cs[0].index), []
    return sorted(ranked, key=lambda cs: cs[0].index), [
        f"no chapter's text mentions {query!r}; checking frames in all "
        f"{len(ranked)} chapters"]


def _end_frame(doc: ChaptersDoc, ch: Chapter, info: VideoInfo) -> int:
    later = [c.first_frame for c in doc.chapters if c.index > ch.index]
    return min(later) if later else max(1, info.frame_count)


def frame_scores(result: Result, method: str) -> list[Evidence]:
    """The frames of a checked chapter that say yes, with their scores."""
    if method == "entail":
        frames = result.entailment.frames if result.entailment else ()
        return [Evidence(f.t_s, f.frame_index, f.entailment) for f in frames
                if f.label == "entailment"]
    boxes: dict[int, list] = {}
    best: dict[int, float] = {}
    times: dict[int, float] = {}
    for d in result.detections:
        boxes.setdefault(d.frame_index, []).append(tuple(d.bbox))
        best[d.frame_index] = max(best.get(d.frame_index, 0.0),
                                  d.score if d.score is not None else 1.0)
        times[d.frame_index] = d.t_s
    return [Evidence(times[i], i, best[i], tuple(boxes[i])) for i in sorted(boxes)]


def ranges(yes: Sequence[Evidence], plan_times: Sequence[float], chapter: int) -> list[Hit]:
    """Yes-frames joined into ranges (see module docstring)."""
    if not yes:
        return []
    steps = [b - a for a, b in zip(plan_times, plan_times[1:]) if b > a]
    gap = 1.5 * (sorted(steps)[len(steps) // 2] if steps else 1.0)
    groups: list[list[Evidence]] = [[yes[0]]]
    for ev in yes[1:]:
        if ev.t_s - groups[-1][-1].t_s <= gap + 1e-9:
            groups[-1].append(ev)
        else:
            groups.append([ev])
    out = []
    for g in groups:
        top = sorted(g, key=lambda e: -e.score)[:EVIDENCE_FRAMES]
        out.append(Hit(g[0].t_s, g[-1].t_s, top[0].score, chapter,
                       tuple(sorted(top, key=lambda e: e.t_s))))
    return out


def _settings(doc: ChaptersDoc, query: str, method: str, max_chapters: int, fps: float,
              max_frames: int) -> tuple[dict[str, Any], list[tuple[Chapter, float]],
                                         list[str]]:
    """The search's settings (its run id's input), candidate chapters and warnings."""
    chosen, warnings = candidates(doc, query, max_chapters)
    sampling = SamplingConfig(fps=fps, max_frames=max(4, max_frames))
    return ({"query": query.strip(), "method": method, "fps": fps, "max_frames": max_frames,
             "chapters": [c.index for c, _ in chosen], "sampling": asdict(sampling)},
            chosen, warnings)


def search_run_id(video_key: str, doc: ChaptersDoc, query: str, model: str, *,
                  method: str = "entail", max_chapters: int = 3, fps: float = 1.0,
                  max_frames: int = 32) -> str:
    """The id of :func:`search`'s run (its parent job) with these arguments."""
    settings = _settings(doc, query, method, max_chapters, fps, max_frames)[0]
    return run_id("search", video_key, model, settings)


def search(manager: JobRunner, info: VideoInfo, video_key: str, doc: ChaptersDoc,
           query: str, model: str, *, method: str = "entail", max_chapters: int = 3,
           fps: float = 1.0, max_frames: int = 32, in_flight: int = 2,
           on_progress: Any = None, cancel: threading.Event | None = None,
           snap_keyframes: bool = True, on_result: Any = None) -> SearchDoc:
    """Answer "when does ``query`` happen?" in the clip (see module docstring). The search
    is a parent job under the chapters run (``doc.run_id``): History shows it there.
    ``snap_keyframes``: frames checked move to the nearest keyframe (one decoded each;
    each result's ``sampling.keyframe_moves_s`` says how far). ``on_result``: see
    ``run_jobs``."""
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.runtime.jobs import JobSpec

    t0 = time.perf_counter()
    settings, chosen, warnings = _settings(doc, query, method, max_chapters, fps, max_frames)
    sampling = SamplingConfig(fps=fps, max_frames=max(4, max_frames))
    request = AnalysisRequest(info.path, method, query.strip(), sampling)  # checks the query
    if not snap_keyframes:
        settings = {**settings, "snap_keyframes": False}
    run = run_id("search", video_key, model, settings)
    runs = ParentRun(manager, run, kind="search", video_path=info.path,
                     label=Path(info.path).name, model=model, query=query.strip(),
                     spec={"task": "describe", "video_key": video_key, "settings": settings},
                     parent=doc.run_id or None)
    if runs.final() is not None:
        return SearchDoc.from_dict(runs.final() or {})
    jobs, plans = [], []
    for ch, _ in chosen:
        end = _end_frame(doc, ch, info)
        plan = range_plan(info, ch.first_frame, end, method, sampling)
        plan = snap_plan(info, plan, ch.first_frame, end) if snap_keyframes else plan
        plans.append(plan)
        jobs.append(ChunkJob(f"{run}-h{ch.index:04d}", JobSpec(
            request, model=model, info=info, plan=plan,
            label=f"{Path(info.path).name} search in chapter {ch.index + 1}")))
    with runs.running():
        results = run_jobs(manager, runs, jobs, in_flight=in_flight, stage="checking",
                           on_progress=on_progress, cancel=cancel, on_result=on_result)
    found = _answer(query, method, info, doc, chosen, jobs, results, warnings, t0)
    runs.finish(found.to_dict())
    return found


def _answer(query: str, method: str, info: VideoInfo, doc: ChaptersDoc,
            chosen: list[tuple[Chapter, float]], jobs: list[ChunkJob],
            results: dict[str, Result], warnings: list[str], t0: float) -> SearchDoc:
    """The search's document from its checked chapters' results."""
    hits: list[Hit] = []
    checked = 0
    for (ch, _), job in zip(chosen, jobs):
        res = results[job.job_id]
        checked += res.sampling.num_frames
        hits += ranges(frame_scores(res, method), res.sampling.timestamps_s, ch.index)
        warnings += [w for w in res.warnings if w not in warnings]
    hits.sort(key=lambda h: (-h.score, h.start_s))
    return SearchDoc(query=query.strip(), method=method,
                     video={"path": info.path, "duration_s": info.duration_s},
                     candidates=tuple({"chapter": c.index, "start_s": c.start_s,
                                       "end_s": c.end_s, "title": c.title,
                                       "text_score": round(s, 4)} for c, s in chosen),
                     hits=tuple(hits), frames_checked=checked, warnings=tuple(warnings),
                     timing={"total_s": round(time.perf_counter() - t0, 3)},
                     test_model=doc.test_model)

"""Chapters: a long clip described chunk by chunk, then merged into chapters and a summary.

    probe ─▶ scene cuts ─▶ chunks ─▶ map: describe every chunk (jobs on every worker)
          ─▶ group chunks into chapters ─▶ reduce: a title and summary per chapter
          ─▶ reduce: the overall summary                       ─▶ chord.chapters/v1

Every model call is an ordinary ``describe`` job of the job runtime, on frames of the clip
chosen here (a chunk's frames; a few frames of a chapter; a few of the whole clip), so the
map and both reduce steps use the same model and spread over all workers. Chapter times
are the chunks' container times. The run is a parent job and every model call a child of it
(:mod:`chord_core.longvideo.runs`), kept in the manager's job store: a run killed half-way
resumes at the chunk where it stopped.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.config import SamplingConfig
from chord_core.longvideo import prompts as P
from chord_core.longvideo.chunks import Chunk, chunk_plan, make_chunks, range_plan, snap_plan
from chord_core.longvideo.doc import Chapter, ChaptersDoc, ChunkText
from chord_core.longvideo.runs import ChunkJob, ParentRun, run_id, run_jobs
from chord_core.longvideo.scenes import CutScan, find_cuts
from chord_core.longvideo.settings import LongVideoSettings
from chord_core.types import Result, VideoInfo

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobRunner

log = logging.getLogger(__name__)

REDUCE_FRAMES = 4
OVERALL_FRAMES = 8


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def _similarity(a: str, b: str) -> float:
    wa, wb = _words(a), _words(b)
    return len(wa & wb) / len(wa | wb) if wa and wb else 0.0


def group_chapters(chunks: Sequence[Chunk], texts: Sequence[str],
                   settings: LongVideoSettings, duration_s: float) -> list[list[int]]:
    """Consecutive chunk indices per chapter. About one chapter per ``chapter_s`` (at most
    ``max_chapters``); boundaries go where a chunk starts with the strongest scene cut and
    its text shares the fewest words with the chunk before, never leaving a chapter shorter
    than a third of ``chapter_s``."""
    n = len(chunks)
    want = max(1, min(settings.max_chapters, n, round(duration_s / settings.chapter_s)))
    if want <= 1:
        return [list(range(n))]
    ideal = [duration_s * j / want for j in range(1, want)]

    def score(i: int) -> float:
        near = min(abs(chunks[i].start_s - t) for t in ideal) / max(duration_s, 1e-9)
        return chunks[i].cut + 0.5 * (1.0 - _similarity(texts[i - 1], texts[i])) - 0.2 * near

    min_len = settings.chapter_s / 3
    chosen: list[int] = []
    for i in sorted(range(1, n), key=score, reverse=True):
        if len(chosen) == want - 1:
            break
        edges = sorted(chosen + [i])
        starts = [0.0] + [chunks[k].start_s for k in edges] + [duration_s]
        if min(b - a for a, b in zip(starts, starts[1:])) >= min_len:
            chosen.append(i)
    edges = [0] + sorted(chosen) + [n]
    return [list(range(a, b)) for a, b in zip(edges, edges[1:])]


def _request(video: str, prompt: str, max_new_tokens: int, sampling: SamplingConfig) -> Any:
    from chord_core.analysis.request import AnalysisRequest

    return AnalysisRequest(video, "describe", prompt, sampling, max_new_tokens)


def _spec(request: Any, model: str, label: str, info: VideoInfo, plan: Any) -> Any:
    from chord_core.runtime.jobs import JobSpec

    return JobSpec(request, model=model, label=label, info=info, plan=plan)


def chapters_run_id(video_key: str, settings: LongVideoSettings, model: str) -> str:
    """The id of a chapters run (its parent job) of this clip, settings and model."""
    settings_doc = {k: v for k, v in asdict(settings).items() if k != "in_flight"}
    return run_id("chapters", video_key, model, settings_doc)


class ScanAhead:
    """``find_cuts`` in a thread, started before the workers are ready: a one-shot command
    scans the clip while its model loads (an hour's keyframe scan took 6.6 s on an H100,
    after an 18 s load it had waited for). ``ChaptersRun(scan=...)`` takes its result; a run
    that planned before (resumed), or finished before, stops it unused."""

    def __init__(self, info: VideoInfo, settings: LongVideoSettings) -> None:
        self._stop = threading.Event()
        self._value: CutScan | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, args=(info, settings),
                                        name="chord-scan-ahead", daemon=True)
        self._thread.start()

    def _work(self, info: VideoInfo, settings: LongVideoSettings) -> None:
        try:
            self._value = find_cuts(info, settings, cancel=self._stop)
        except BaseException as exc:  # noqa: BLE001 — raised again by result()
            self._error = exc

    def result(self) -> CutScan:
        """The scan (waiting for it), or its error raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value

    def cancel(self) -> None:
        """Stop the scan: nothing will use it (the workers failed to start, the run was
        planned or finished before). A finished scan is left as it is."""
        self._stop.set()
        self._thread.join(timeout=5.0)

    def running(self) -> bool:
        return self._thread.is_alive()


class ChaptersRun:
    """One clip's chapters run: plan (cuts, chunks), map, reduce. See module docstring.
    ``parent``: the job it runs under (a service's search-long); ``origin``: what started it,
    kept in its row's spec (the service's request, to drive it again after a restart)."""

    def __init__(self, manager: JobRunner, info: VideoInfo, video_key: str,
                 settings: LongVideoSettings, model: str, *, in_flight: int = 2,
                 on_progress: Any = None, cancel: threading.Event | None = None,
                 on_result: Any = None, parent: str | None = None,
                 origin: dict[str, Any] | None = None, scan: ScanAhead | None = None
                 ) -> None:
        self.executor, self.info, self.settings, self.model = manager, info, settings, model
        self.scan_ahead = scan  # the cuts, scanned while the model loaded (ScanAhead)
        self.in_flight, self.on_progress, self.cancel = in_flight, on_progress, cancel
        self.on_result = on_result  # every job's result (run_jobs): the CLI's reader line
        settings_doc = {k: v for k, v in asdict(settings).items() if k != "in_flight"}
        self.run = chapters_run_id(video_key, settings, model)
        self.name = Path(info.path).name
        self.runs = ParentRun(manager, self.run, kind="chapters", video_path=info.path,
                              label=self.name, model=model, spec={
                                  "task": "describe", "video_key": video_key,
                                  "settings": settings_doc,
                                  **({"origin": origin} if origin else {})}, parent=parent)
        self.warnings: list[str] = []
        self.timing: dict[str, float] = {}

    # -- plan ----------------------------------------------------------------------------
    def plan(self) -> tuple[CutScan, tuple[Chunk, ...]]:
        """Cuts and chunks: from the store when this run planned them before, else scanned."""
        t = time.perf_counter()
        stored = self.runs.doc.get("plan")
        if stored:
            if self.scan_ahead is not None:
                self.scan_ahead.cancel()  # planned before: the stored plan is the run's
            scan = CutScan(stored["scan"]["mode"], (), stored["scan"].get("frames_examined", 0),
                           stored["scan"].get("seconds", 0.0), stored["scan"].get("reason", ""))
            self._scan_doc = stored["scan"]
            chunks = tuple(Chunk.from_dict(c) for c in stored["chunks"])
        else:
            scan = self.scan_ahead.result() if self.scan_ahead is not None else \
                find_cuts(self.info, self.settings, cancel=self.cancel)
            self._scan_doc = scan.to_dict()
            chunks = make_chunks(self.info, scan.cuts, self.settings)
            self.runs.progress({"plan": {"scan": self._scan_doc,
                                         "chunks": [c.to_dict() for c in chunks]}})
        self.timing["scan_s"] = time.perf_counter() - t
        return scan, chunks

    # -- map -------------------------------------------------------------------------------
    def describe_chunks(self, chunks: Sequence[Chunk]) -> list[ChunkText]:
        s = self.settings
        sampling = SamplingConfig(fps=s.describe_fps, max_frames=s.describe_max_frames)
        jobs = []
        for c in chunks:
            plan = chunk_plan(self.info, c, "describe", sampling)
            if s.snap_keyframes:
                plan = snap_plan(self.info, plan, c.read_first, c.end_frame)
            label = (f"{self.name} chunk {c.index + 1}/{len(chunks)} "
                     f"{P.clock(c.start_s)}–{P.clock(c.end_s)}")
            req = _request(self.info.path, P.chunk_prompt(c.start_s, c.end_s),
                           s.max_new_tokens, sampling)
            jobs.append(ChunkJob(f"{self.run}-c{c.index:04d}",
                                 _spec(req, self.model, label, self.info, plan)))
        t = time.perf_counter()
        results = self._run(jobs, "chunks")
        self.timing["map_s"] = time.perf_counter() - t
        self._results = results
        return [ChunkText(c.index, c.start_s, c.end_s, c.first_frame, results[j.job_id].text,
                          j.job_id, results[j.job_id].sampling.num_frames)
                for c, j in zip(chunks, jobs)]

    def _run(self, jobs: list[ChunkJob], stage: str) -> dict[str, Result]:
        return run_jobs(self.executor, self.runs, jobs, in_flight=self.in_flight, stage=stage,
                        on_progress=self.on_progress, cancel=self.cancel,
                        on_result=self.on_result)

    # -- reduce ----------------------------------------------------------------------------
    def reduce_chapters(self, groups: list[list[int]], texts: Sequence[ChunkText]
                        ) -> list[Chapter]:
        jobs, spans = [], []
        for k, group in enumerate(groups):
            first, last = texts[group[0]], texts[group[-1]]
            notes = [(texts[i].start_s, texts[i].end_s, texts[i].text) for i in group]
            prompt = P.chapter_prompt(first.start_s, last.end_s, notes)
            jobs.append(self._reduce_job(f"{self.run}-r{k:04d}", prompt, first.first_frame,
                                         self._end_frame(group[-1]), REDUCE_FRAMES,
                                         f"{self.name} chapter {k + 1}/{len(groups)}"))
            spans.append((first, last))
        t = time.perf_counter()
        results = self._run(jobs, "chapters")
        self.timing["reduce_s"] = time.perf_counter() - t
        chapters = []
        for k, (job, group, (first, last)) in enumerate(zip(jobs, groups, spans)):
            title, summary, warns = P.parse_title_summary(results[job.job_id].text,
                                                          f"chapter {k + 1}")
            self.warnings += warns
            chapters.append(Chapter(k, first.start_s, last.end_s, first.first_frame, title,
                                    summary, tuple(group)))
        return chapters

    def _end_frame(self, chunk_index: int) -> int:
        return self._chunks[chunk_index].end_frame

    def _reduce_job(self, job_id: str, prompt: str, a: int, b: int, frames: int,
                    label: str) -> ChunkJob:
        sampling = SamplingConfig(max_frames=frames, fps=None)
        plan = range_plan(self.info, a, b, "describe", sampling)
        req = _request(self.info.path, prompt, self.settings.max_new_tokens, sampling)
        return ChunkJob(job_id, _spec(req, self.model, label, self.info, plan))

    def overall(self, chapters: Sequence[Chapter]) -> str:
        """The whole clip's summary; more chapters than one prompt holds are summarised in
        groups first (another reduce level)."""
        notes = [(c.start_s, c.end_s, f"{c.title}. {c.summary}") for c in chapters]
        level = 0
        t = time.perf_counter()
        while not P.notes_fit(len(notes)):
            size = max(2, len(notes) // 2 if P.notes_fit(len(notes) // 2) else 8)
            groups = [notes[i: i + size] for i in range(0, len(notes), size)]
            jobs = [self._reduce_job(f"{self.run}-g{level}-{k:04d}", P.overall_prompt(g),
                                     self._frame_at(g[0][0]), self._frame_at(g[-1][1]),
                                     REDUCE_FRAMES, f"{self.name} summary part {k + 1}")
                    for k, g in enumerate(groups)]
            res = self._run(jobs, "summary")
            notes = [(g[0][0], g[-1][1], res[j.job_id].text) for g, j in zip(groups, jobs)]
            level += 1
        job = self._reduce_job(f"{self.run}-s", P.overall_prompt(notes), 0,
                               max(1, self.info.frame_count), OVERALL_FRAMES,
                               f"{self.name} summary")
        text = self._run([job], "summary")[job.job_id].text
        self.timing["summary_s"] = time.perf_counter() - t
        return " ".join(text.split()) or "(no summary)"

    def _frame_at(self, t_s: float) -> int:
        from chord_core.longvideo.stream import index_at

        return min(max(0, self.info.frame_count - 1), index_at(self.info, t_s))

    # -- all -------------------------------------------------------------------------------
    def __call__(self) -> ChaptersDoc:
        done = self.runs.final()
        if done is not None:
            if self.scan_ahead is not None:
                self.scan_ahead.cancel()
            log.info("%s: chapters already made by run %s", self.name, self.run)
            return ChaptersDoc.from_dict(done)
        with self.runs.running():
            doc = self._make()
        self.runs.finish(doc.to_dict())
        return doc

    def _make(self) -> ChaptersDoc:
        t0 = time.perf_counter()
        scan, chunks = self.plan()
        self._chunks, self._chunk_docs = chunks, [c.to_dict() for c in chunks]
        texts = self.describe_chunks(chunks)
        groups = group_chapters(chunks, [t.text for t in texts], self.settings,
                                chunks[-1].end_s if chunks else self.info.duration_s)
        chapters = self.reduce_chapters(groups, texts)
        summary = self.overall(chapters)
        self.timing["total_s"] = time.perf_counter() - t0
        first = next(iter(self._results.values()), None)
        doc = ChaptersDoc(
            video=self.info.to_dict(), model=first.model.to_dict()
            if first else {"id": self.model}, settings=asdict(self.settings),
            scan=self._scan_doc, chunks=tuple(self._chunk_docs), chunk_texts=tuple(texts),
            chapters=tuple(chapters), summary=summary,
            warnings=tuple(self.info.warnings) + tuple(self.warnings),
            timing={k: round(v, 3) for k, v in self.timing.items()}, run_id=self.run,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        return doc

"""The engine: one clip in, one ``chord.result/v1`` out.

    probe ─▶ plan ─▶ read frames ─▶ model (describe | ground each frame) ─▶ parse ─▶ tracks
                                                                           ─▶ segments ─▶ Result

``Engine`` owns one loaded model (loaded lazily, once) and runs one analysis at a time; the
job runner (``chord_core.jobs``) serialises requests onto it from a worker thread or process.
Everything it takes and returns is plain data (``AnalysisRequest`` → ``Result``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from chord_core.config import (
    MAX_NEW_TOKENS_DEFAULT,
    ModelConfig,
    SamplingConfig,
    check_max_new_tokens,
)
from chord_core.errors import ConfigError, JobCancelled
from chord_core.types import (
    Detection,
    ModelInfo,
    ProgressEvent,
    Result,
    SamplingPlan,
    Timing,
    VideoInfo,
)

if TYPE_CHECKING:
    import numpy as np

    from chord_core.model import LoadedModel

log = logging.getLogger(__name__)

ProgressFn = Callable[[ProgressEvent], None]
TASKS = ("describe", "ground")


@dataclass(frozen=True)
class AnalysisRequest:
    """One analysis to run. Plain data: it crosses thread and process boundaries."""

    video_path: str
    task: str
    query: str = ""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT
    annotated_video: str | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r}", hint=f"use one of: {', '.join(TASKS)}")
        if self.task == "ground" and not self.query.strip():
            raise ConfigError("grounding needs a target to look for",
                              hint='say what to find, e.g. "the cyclist in a red helmet"')
        if self.task == "describe":
            check_max_new_tokens(self.max_new_tokens)


def plan(video_path: str | Path, task: str, sampling: SamplingConfig | None = None
         ) -> tuple[VideoInfo, SamplingPlan]:
    """Probe a clip and decide its sampling plan — cheap, no model. The UI shows this first."""
    from chord_core.video import plan_sampling, probe

    info = probe(video_path)
    return info, plan_sampling(info, task, sampling or SamplingConfig())


class _Clock:
    """Stage timer that also turns stage changes into progress events."""

    def __init__(self, on_progress: ProgressFn | None, cancel: threading.Event | None) -> None:
        self.t0 = time.perf_counter()
        self.on_progress = on_progress
        self.cancel = cancel

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def emit(self, stage: str, message: str, done: int = 0, total: int = 0) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise JobCancelled("the analysis was cancelled", hint="run it again when needed")
        if self.on_progress is not None:
            self.on_progress(ProgressEvent(stage, message, done, total, self.elapsed()))


class Engine:
    """A loaded model plus the analysis pipeline around it."""

    def __init__(self, model_cfg: ModelConfig | None = None) -> None:
        self.model_cfg = model_cfg or ModelConfig()
        self._lm: LoadedModel | None = None
        self._lock = threading.Lock()

    # -- model ------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._lm is not None

    def load(self) -> LoadedModel:
        """Load the model once (thread-safe); later calls return the same object."""
        with self._lock:
            if self._lm is None:
                from chord_core.model import load_model

                t0 = time.perf_counter()
                self._lm = load_model(self.model_cfg)
                log.info("model %s loaded in %.1f s on %s", self._lm.info.id,
                         time.perf_counter() - t0, self._lm.info.device_map)
            return self._lm

    @property
    def model_info(self) -> ModelInfo | None:
        return None if self._lm is None else self._lm.info

    def unload(self) -> None:
        with self._lock:
            self._lm = None
        from chord_core.model import release_memory

        release_memory()

    # -- analysis ---------------------------------------------------------------------
    def analyze(self, request: AnalysisRequest, *, on_progress: ProgressFn | None = None,
                cancel: threading.Event | None = None) -> Result:
        """Run one analysis end to end. Raises ChordError subclasses on bad input."""
        from chord_core.video import plan_sampling, probe

        clock = _Clock(on_progress, cancel)
        clock.emit("probe", f"probing {Path(request.video_path).name}")
        t = time.perf_counter()
        info = probe(request.video_path)
        probe_s = time.perf_counter() - t
        sampling_plan = plan_sampling(info, request.task, request.sampling)
        clock.emit("sampling", f"sampling {sampling_plan.num_frames} frames at "
                   f"{sampling_plan.input_wh[0]}×{sampling_plan.input_wh[1]} "
                   f"({sampling_plan.visual_tokens} visual tokens)")
        if not self.loaded:
            clock.emit("loading_model", f"loading model {self.model_cfg.model}")
        t = time.perf_counter()
        lm = self.load()
        load_s = time.perf_counter() - t
        frames, sampling_plan, warnings, decode_s = self._read(info, sampling_plan, clock)
        if request.task == "describe":
            body = self._describe(lm, info, sampling_plan, frames, request, clock)
        else:
            body = self._ground(lm, info, sampling_plan, frames, request, clock)
        timing = Timing(probe_s=probe_s, load_s=load_s, decode_s=decode_s,
                        preprocess_s=body.pop("preprocess_s"), generate_s=body.pop("generate_s"),
                        postprocess_s=body.pop("postprocess_s", 0.0), total_s=clock.elapsed())
        result = Result(
            task=request.task, query=request.query, video=info, sampling=sampling_plan,
            model=lm.info, timing=timing,
            warnings=tuple(warnings) + tuple(body.pop("warnings", ())),
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), **body)
        if request.annotated_video:
            self._export(result, request.annotated_video, clock)
        clock.emit("done", "analysis finished", 1, 1)
        return result

    def _read(self, info: VideoInfo, sampling_plan: SamplingPlan, clock: _Clock
              ) -> tuple[np.ndarray, SamplingPlan, list[str], float]:
        from chord_core.video import read_frames

        n = sampling_plan.num_frames
        t = time.perf_counter()
        clock.emit("decoding", f"reading {n} frames", 0, n)
        frames, read = read_frames(
            info.path, sampling_plan.frame_indices, sampling_plan.input_wh,
            on_progress=lambda done, total: clock.emit("decoding", f"frame {done}/{total}",
                                                       done, total),
            cancel=clock.cancel)
        decode_s = time.perf_counter() - t
        warnings: list[str] = list(info.warnings) + list(sampling_plan.notes)
        if tuple(read) != tuple(sampling_plan.frame_indices):
            missing = sorted(set(sampling_plan.frame_indices) - set(read))
            warnings.append(f"{len(missing)} planned frame(s) could not be decoded "
                            f"(first missing index {missing[0] if missing else '?'}); "
                            "the result uses the frames that were read")
            sampling_plan = replace(
                sampling_plan, frame_indices=tuple(read),
                timestamps_s=tuple(i / info.fps for i in read))
        return frames, sampling_plan, warnings, decode_s

    def _describe(self, lm: LoadedModel, info: VideoInfo, sampling_plan: SamplingPlan,
                  frames: np.ndarray, request: AnalysisRequest, clock: _Clock) -> dict:
        from chord_core import model as m
        from chord_core.prompts import DEFAULT_DESCRIBE_PROMPT
        from chord_core.video import video_metadata

        clock.emit("generating", f"describing {sampling_plan.num_frames} frames", 0, 1)
        out = m.describe(lm, frames, video_metadata(info, sampling_plan.frame_indices),
                         request.query.strip() or DEFAULT_DESCRIBE_PROMPT,
                         request.max_new_tokens, cancel=clock.cancel)
        clock.emit("generating", f"{out.new_tokens} tokens generated", 1, 1)
        return {"text": out.text, "raw_outputs": (out.text,), "preprocess_s": out.preprocess_s,
                "generate_s": out.generate_s}

    def _ground(self, lm: LoadedModel, info: VideoInfo, sampling_plan: SamplingPlan,
                frames: np.ndarray, request: AnalysisRequest, clock: _Clock) -> dict:
        from chord_core import grounding as g
        from chord_core import model as m

        n = sampling_plan.num_frames
        clock.emit("grounding_frames", f"frame 0/{n}", 0, n)
        outputs = m.ground_images(
            lm, list(frames), request.query, batch_size=request.batch_size or
            self.model_cfg.batch_size,
            on_batch=lambda done, total: clock.emit("grounding_frames", f"frame {done}/{total}",
                                                    done, total),
            cancel=clock.cancel)
        t = time.perf_counter()
        clock.emit("tracking", "linking detections into tracks")
        detections, warnings = _detections(outputs, sampling_plan, info, request.query,
                                           lm.coord_mode)
        gap = g.default_max_gap(1.0 / sampling_plan.fps if sampling_plan.fps > 0 else 1.0)
        detections, tracks = g.link_tracks(detections, max_gap_s=gap)
        segments = g.segments_from_tracks(detections, tracks, max_gap_s=gap,
                                          duration_s=info.duration_s)
        return {"detections": detections, "tracks": tracks, "segments": segments,
                "raw_outputs": tuple(o.text for o in outputs), "warnings": warnings,
                "preprocess_s": sum(o.preprocess_s for o in outputs),
                "generate_s": sum(o.generate_s for o in outputs),
                "postprocess_s": time.perf_counter() - t}

    def _export(self, result: Result, out_path: str, clock: _Clock) -> None:
        from chord_core.render import export_annotated_video

        n = result.video.frame_count
        clock.emit("rendering", "writing annotated video", 0, n)
        export_annotated_video(
            result.video.path, result, out_path,
            on_progress=lambda done, total: clock.emit("rendering", f"frame {done}/{total}",
                                                       done, total),
            cancel=clock.cancel)


def _detections(outputs: Sequence, sampling_plan: SamplingPlan, info: VideoInfo, target: str,
                coord_mode: str) -> tuple[list[Detection], list[str]]:
    """Parse each frame's model text into detections on the original frame; keep warnings."""
    from chord_core import grounding as g

    detections: list[Detection] = []
    warnings: list[str] = []
    for out, idx, t_s in zip(outputs, sampling_plan.frame_indices, sampling_plan.timestamps_s):
        parsed = g.parse_boxes(out.text, out.input_wh, coords=coord_mode, default_label=target)
        warnings.extend(f"frame {idx} (t={t_s:.2f} s): {w}" for w in parsed.warnings)
        detections.extend(g.to_detection(box, info.size_wh, t_s=t_s, frame_index=idx)
                          for box in parsed.boxes)
    return detections, warnings


def analyze(video_path: str | Path, task: str, query: str = "", *,
            model_cfg: ModelConfig | None = None, sampling: SamplingConfig | None = None,
            max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT, annotated_video: str | None = None,
            on_progress: ProgressFn | None = None) -> Result:
    """One-shot convenience: load the model, analyse one clip, return the result."""
    request = AnalysisRequest(str(video_path), task, query, sampling or SamplingConfig(),
                              max_new_tokens, annotated_video)
    return Engine(model_cfg).analyze(request, on_progress=on_progress)

"""The engine: one clip in, one ``chord.result/v1`` out.

    probe ─▶ plan ─▶ read frames ─▶ model (describe | ground each frame) ─▶ parse ─▶ tracks
                                                                           ─▶ segments ─▶ Result

``Engine`` owns one loaded model (loaded lazily, once) and runs one analysis at a time — or,
with ``describe_many`` (``describe_batch.py``), several describe requests in one batched
generate; the job runner (``chord_core.runtime.jobs``) and the worker processes feed it.
Everything it takes and returns is plain data (``AnalysisRequest`` → ``Result``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from chord_core.config import (
    MAX_NEW_TOKENS_DEFAULT,
    MAX_NEW_TOKENS_RANGE,
    MAX_QUERY_CHARS,
    ModelConfig,
    SamplingConfig,
    check_max_new_tokens,
    injected_oom_faults,
)
from chord_core.analysis.describe_batch import DESCRIBE_BATCH, DescribeBatching
from chord_core.errors import ConfigError, JobCancelled, ResourceError
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

    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)

ProgressFn = Callable[[ProgressEvent], None]
TASKS = ("describe", "ground", "entail")
# ground: every sampled frame (exact), or time spans of the whole clip first (two_pass.py)
GROUND_METHODS = ("per_frame", "two_pass")
# Per-frame cap for grounding answers (a few boxes of JSON); the request's max_new_tokens
# lowers it further when smaller.
GROUND_MAX_NEW_TOKENS = 256
# Cache lengths the decode graphs are captured for at warm-up: one clip up to this many
# prompt + answer tokens, batches of clips or grounding frames up to WARM_BATCH_LEN. Longer
# requests capture their graph when they first run (a fraction of a second, logged).
WARM_SINGLE_LEN = 16_384
WARM_BATCH_LEN = 4_096


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
    min_new_tokens: int | None = None  # force output length (benchmarks); None = stop at EOS
    # ground: score each box by entailment on its crop. Off by default: on 2 × H200 (7B) it
    # cost 58 % of the grounding time (docs/benchmarks.md), above the 20 % line.
    score_boxes: bool = False
    ground_method: str = "per_frame"  # ground: "per_frame" or "two_pass" (GROUND_METHODS)

    def __post_init__(self) -> None:
        if self.ground_method not in GROUND_METHODS:
            raise ConfigError(f"unknown grounding method {self.ground_method!r}",
                              hint=f"use one of: {', '.join(GROUND_METHODS)}")
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r}", hint=f"use one of: {', '.join(TASKS)}")
        if len(self.query) > MAX_QUERY_CHARS:
            what = "target" if self.task == "ground" else "prompt"
            raise ConfigError(f"the {what} is {len(self.query):,} characters long; the limit "
                              f"is {MAX_QUERY_CHARS:,}",
                              hint=f"shorten the {what} to a sentence or two")
        if self.task == "ground" and not self.query.strip():
            raise ConfigError("grounding needs a target to look for",
                              hint='say what to find, e.g. "the cyclist in a red helmet"')
        if self.task == "entail" and not self.query.strip():
            raise ConfigError("checking a statement needs the statement",
                              hint='say what should be true, e.g. "a person opens the car '
                                   'door"')
        if self.task == "describe":
            check_max_new_tokens(self.max_new_tokens)
        elif not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS_RANGE[1]:
            raise ConfigError(f"max new tokens per grounded frame must be 1–"
                              f"{MAX_NEW_TOKENS_RANGE[1]}, got {self.max_new_tokens}",
                              hint=f"grounding answers are short; {GROUND_MAX_NEW_TOKENS} is "
                                   "plenty")

    def to_dict(self) -> dict:
        return {"video_path": self.video_path, "task": self.task, "query": self.query,
                "sampling": asdict(self.sampling), "max_new_tokens": self.max_new_tokens,
                "annotated_video": self.annotated_video, "batch_size": self.batch_size,
                "min_new_tokens": self.min_new_tokens, "score_boxes": self.score_boxes,
                "ground_method": self.ground_method}

    @classmethod
    def from_dict(cls, data: dict) -> AnalysisRequest:
        data = dict(data)
        data["sampling"] = SamplingConfig(**data.get("sampling", {}))
        return cls(**data)


def probe_input(path: str | Path) -> VideoInfo:
    """What a file holds: a video (``video.probe``), or a still image as a one-frame clip."""
    from chord_core.media.images import image_info, is_image_path
    from chord_core.media.probe import probe

    return image_info(path) if is_image_path(path) else probe(path)


def plan(video_path: str | Path, task: str, sampling: SamplingConfig | None = None
         ) -> tuple[VideoInfo, SamplingPlan]:
    """Probe a clip and decide its sampling plan — cheap, no model. The UI shows this first."""
    from chord_core.media.sampling import plan_sampling
    info = probe_input(video_path)
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


class Engine(DescribeBatching):
    """A loaded model plus the analysis pipeline around it."""

    def __init__(self, model_cfg: ModelConfig | None = None, *,
                 loaded: LoadedModel | None = None) -> None:
        """``loaded``: adopt an already loaded model (benchmarks compare two decoders on one
        copy of the weights) instead of loading ``model_cfg.model`` on first use."""
        self.model_cfg = model_cfg or ModelConfig()
        self._lm: LoadedModel | None = loaded
        self._lock = threading.Lock()
        self._faults_left = injected_oom_faults()

    # -- model ------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._lm is not None

    def load(self) -> LoadedModel:
        """Load the model once (thread-safe); later calls return the same object."""
        with self._lock:
            if self._lm is None:
                from chord_core.model.loading import load_model

                t0 = time.perf_counter()
                self._lm = load_model(self.model_cfg)
                log.info("model %s loaded in %.1f s on %s", self._lm.info.id,
                         time.perf_counter() - t0, self._lm.info.device_map)
            return self._lm

    def warmup(self) -> dict[str, float]:
        """Run one tiny describe and one tiny grounding batch so the first user request does
        not pay for CUDA context, kernel selection and allocator growth, then capture the
        decode graphs. Returns seconds per step (``total_s`` for all)."""
        import numpy as np

        from chord_core.model import loading as m
        lm = self.load()
        laps = m.Laps()
        lap, out = laps.lap, laps.steps
        frames = np.full((2, 252, 448, 3), 127, dtype=np.uint8)
        meta = {"total_num_frames": 2, "fps": 2.0, "frames_indices": [0, 1], "duration": 1.0}
        m.describe(lm, frames, meta, "warm-up", 8)
        lap("describe_s")  # the first decode graph: compiling the step lands here
        m.ground_images(lm, [frames[0]] * min(2, self.model_cfg.batch_size), "warm-up",
                        batch_size=self.model_cfg.batch_size, max_new_tokens=8)
        lap("ground_s")
        if lm.decoder is not None:  # capture decode graphs now, not on a user's request
            lm.decoder.prepare((1,), WARM_SINGLE_LEN)
            # every row count a batch of up to this many clips or frames is padded to
            top = max(DESCRIBE_BATCH, self.model_cfg.batch_size)
            lm.decoder.prepare(tuple(range(2, top + 1)), WARM_BATCH_LEN)
            lap("graphs_s")
            out["graphs"] = float(lm.decoder.stats["graphs"])
            if lm.decoder.compiled:
                from chord_core.model.decode_step import compile_stats

                out.update(compile_stats())
        out["total_s"] = laps.total()
        return out

    @property
    def model_info(self) -> ModelInfo | None:
        return None if self._lm is None else self._lm.info

    def unload(self) -> None:
        with self._lock:
            self._lm = None
        from chord_core.model.loading import release_memory

        release_memory()

    # -- analysis ---------------------------------------------------------------------
    def analyze(self, request: AnalysisRequest, *, on_progress: ProgressFn | None = None,
                cancel: threading.Event | None = None, info: VideoInfo | None = None,
                sampling_plan: SamplingPlan | None = None, probe_s: float = 0.0) -> Result:
        """Run one analysis end to end. Raises ChordError subclasses on bad input.
        ``info``/``sampling_plan`` skip the probe when the caller (the job manager) has
        already probed and planned the clip."""
        from chord_core.media.sampling import plan_sampling

        clock = _Clock(on_progress, cancel)
        if info is None:
            clock.emit("probe", f"probing {Path(request.video_path).name}")
            t = time.perf_counter()
            info = probe_input(request.video_path)
            probe_s = time.perf_counter() - t
        if sampling_plan is None:
            sampling_plan = plan_sampling(info, request.task, request.sampling)
        clock.emit("sampling", f"sampling {sampling_plan.num_frames} frames at "
                   f"{sampling_plan.input_wh[0]}×{sampling_plan.input_wh[1]} "
                   f"({sampling_plan.visual_tokens} visual tokens)")
        fresh = not self.loaded
        if fresh:
            clock.emit("loading_model", f"loading model {self.model_cfg.model}")
        t = time.perf_counter()
        lm = self.load()
        load_s = time.perf_counter() - t
        if fresh:
            clock.emit("placed", f"model {lm.info.id} {lm.placement}")
        body, sampling_plan, warnings, decode_s = self._run_with_budget(
            lm, info, sampling_plan, request, clock)
        timing = Timing(probe_s=probe_s, load_s=load_s, decode_s=decode_s,
                        preprocess_s=body.pop("preprocess_s"), generate_s=body.pop("generate_s"),
                        postprocess_s=body.pop("postprocess_s", 0.0),
                        score_s=body.pop("score_s", 0.0), total_s=clock.elapsed())
        result = Result(
            task=request.task, query=request.query, video=info, sampling=sampling_plan,
            model=lm.info, timing=timing,
            warnings=tuple(warnings) + tuple(body.pop("warnings", ())),
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), **body)
        if request.annotated_video:
            self._export(result, request.annotated_video, clock)
        clock.emit("done", "analysis finished", 1, 1)
        return result

    def _run_with_budget(self, lm: LoadedModel, info: VideoInfo, sampling_plan: SamplingPlan,
                         request: AnalysisRequest, clock: _Clock
                         ) -> tuple[dict, SamplingPlan, list[str], float]:
        """Read + model; when even batch 1 runs out of memory, halve the pixel and token
        budget and try again (twice), recording each reduction in the warnings."""
        from chord_core.media.sampling import plan_sampling

        sampling, reductions = request.sampling, []
        for attempt in range(3):
            frames, sampling_plan, warnings, decode_s = self._read(info, sampling_plan, clock)
            try:
                if request.task == "describe":
                    body = self._describe(lm, info, sampling_plan, frames, request, clock)
                elif request.task == "entail":
                    body = self._entail(lm, sampling_plan, frames, request, clock)
                else:
                    body = self._ground(lm, info, sampling_plan, frames, request, clock)
                sampling_plan = body.pop("plan", sampling_plan)  # two_pass: frames grounded
                return body, sampling_plan, reductions + warnings, decode_s
            except _OutOfMemory:
                if attempt == 2:
                    raise
                sampling = _halved(sampling)
                sampling_plan = plan_sampling(info, request.task, sampling)
                reductions.append(
                    f"out of GPU memory at batch size 1: resolution lowered to "
                    f"{sampling_plan.input_wh[0]}×{sampling_plan.input_wh[1]}, "
                    f"{sampling_plan.num_frames} frames")
                log.warning(reductions[-1])
        raise AssertionError("unreachable")

    def read_frames(self, info: VideoInfo, sampling_plan: SamplingPlan, *,
                    cancel: threading.Event | None = None
                    ) -> tuple[np.ndarray, SamplingPlan, list[str], float]:
        """The plan's frames (or the image) at the plan's size: (frames, the plan of the
        frames actually read, warnings, seconds). No model needed."""
        return self._read(info, sampling_plan, _Clock(None, cancel))

    def entail_many(self, requests: Sequence[AnalysisRequest], *,
                    infos: Sequence[VideoInfo | None] | None = None,
                    plans: Sequence[SamplingPlan | None] | None = None,
                    cancel: threading.Event | None = None) -> list[Result | Exception]:
        """Several statements checked in one scoring pass over all their frames (the
        service's ``/batch_predict`` arrives as many one-image jobs); see entail_batch.py."""
        from chord_core.analysis.entail_batch import entail_many

        return entail_many(self, requests, infos=infos, plans=plans, cancel=cancel)

    def _read(self, info: VideoInfo, sampling_plan: SamplingPlan, clock: _Clock
              ) -> tuple[np.ndarray, SamplingPlan, list[str], float]:
        from chord_core.media.images import read_image
        from chord_core.media.sampling import adopt_decoded_times
        from chord_core.media.video import read_frames_timed

        n = sampling_plan.num_frames
        t = time.perf_counter()
        clock.emit("decoding", f"reading {n} frames", 0, n)
        if info.container == "image":
            frames, read, decoded = read_image(info.path, sampling_plan.input_wh), (0,), (0.0,)
        else:
            frames, read, decoded = read_frames_timed(
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
                timestamps_s=tuple(info.time_of(i) for i in read))
        sampling_plan, note = adopt_decoded_times(sampling_plan, decoded[: len(read)])
        warnings += [note] if note else []
        return frames, sampling_plan, warnings, decode_s

    def _describe(self, lm: LoadedModel, info: VideoInfo, sampling_plan: SamplingPlan,
                  frames: np.ndarray, request: AnalysisRequest, clock: _Clock) -> dict:
        from chord_core.model import loading as m
        from chord_core.model.prompts import DEFAULT_DESCRIBE_PROMPT
        from chord_core.media.sampling import video_metadata

        clock.emit("generating", f"describing {sampling_plan.num_frames} frames", 0, 1)
        reductions: list[str] = []
        meta = video_metadata(info, sampling_plan.frame_indices)
        meta["timestamps_s"] = list(sampling_plan.timestamps_s)  # Qwen3-VL's frame times
        out = self._oom_guard(lambda: m.describe(
            lm, frames, meta,
            request.query.strip() or DEFAULT_DESCRIBE_PROMPT, request.max_new_tokens,
            min_new_tokens=request.min_new_tokens, cancel=clock.cancel), reductions)
        clock.emit("generating", f"{out.new_tokens} tokens generated", 1, 1)
        return {"text": out.text, "raw_outputs": (out.text,), "preprocess_s": out.preprocess_s,
                "generate_s": out.generate_s, "warnings": reductions}

    def _entail(self, lm: LoadedModel, sampling_plan: SamplingPlan, frames: np.ndarray,
                request: AnalysisRequest, clock: _Clock) -> dict:
        from chord_core.analysis.entailment import entail_frames

        n = sampling_plan.num_frames
        clock.emit("checking", f"frame 0/{n}", 0, n)
        reductions: list[str] = []
        batch = [request.batch_size or self.model_cfg.batch_size]
        body = self._oom_guard(lambda: entail_frames(
            lm, sampling_plan, frames, request.query, batch_size=batch[0],
            cancel=clock.cancel,
            on_batch=lambda done, total: clock.emit("checking", f"frame {done}/{total}", done,
                                                    total)), reductions, batch)
        body["warnings"] = tuple(body.get("warnings", ())) + tuple(reductions)
        return body

    def _ground(self, lm: LoadedModel, info: VideoInfo, sampling_plan: SamplingPlan,
                frames: np.ndarray, request: AnalysisRequest, clock: _Clock) -> dict:
        if request.ground_method == "two_pass":
            from chord_core.analysis.two_pass import ground_two_pass

            return ground_two_pass(lm, info, sampling_plan, frames, request, clock,
                                   ground_frames=self._ground_frames, guard=self._oom_guard)
        chunk = self._ground_frames(lm, sampling_plan, frames, request, clock)
        t = time.perf_counter()
        clock.emit("tracking", "linking detections into tracks")
        body = assemble_ground(info, sampling_plan, request.query, [chunk], lm.coord_mode)
        body["postprocess_s"] = time.perf_counter() - t
        return body

    def ground_chunk(self, info: VideoInfo, sampling_plan: SamplingPlan, request: AnalysisRequest,
                     *, on_progress: ProgressFn | None = None,
                     cancel: threading.Event | None = None) -> GroundChunk:
        """Ground one slice of a plan (a worker's share of a split job): read its frames,
        run the model, return the raw per-frame outputs. Tracking happens after merging."""
        clock = _Clock(on_progress, cancel)
        lm = self.load()
        frames, sampling_plan, warnings, decode_s = self._read(info, sampling_plan, clock)
        chunk = self._ground_frames(lm, sampling_plan, frames, request, clock)
        return replace(chunk, decode_s=decode_s, warnings=tuple(warnings) + chunk.warnings)

    def _ground_frames(self, lm: LoadedModel, sampling_plan: SamplingPlan, frames: np.ndarray,
                       request: AnalysisRequest, clock: _Clock) -> GroundChunk:
        from chord_core.model import loading as m
        n = sampling_plan.num_frames
        clock.emit("grounding_frames", f"frame 0/{n}", 0, n)
        reductions: list[str] = []
        batch = [request.batch_size or self.model_cfg.batch_size]
        t = time.perf_counter()

        def run():
            return m.ground_images(
                lm, list(frames), request.query, batch_size=batch[0],
                max_new_tokens=min(request.max_new_tokens, GROUND_MAX_NEW_TOKENS),
                min_new_tokens=request.min_new_tokens,
                on_batch=lambda done, total: clock.emit(
                    "grounding_frames", f"frame {done}/{total}", done, total),
                cancel=clock.cancel)

        outputs = self._oom_guard(run, reductions, batch)
        outs = tuple(FrameOutput(idx, ts, o.text, tuple(o.input_wh)) for o, idx, ts in
                     zip(outputs, sampling_plan.frame_indices, sampling_plan.timestamps_s))
        generate_s, score_s = time.perf_counter() - t, 0.0
        if request.score_boxes:
            from chord_core.analysis.box_scores import score_outputs

            clock.emit("scoring", "scoring the boxes")
            outs, score_s = self._oom_guard(lambda: score_outputs(
                lm, outs, frames, request.query, batch_size=max(batch[0], 16),
                cancel=clock.cancel), reductions, batch)
        return GroundChunk(outs, preprocess_s=sum(getattr(o, "preprocess_s", 0.0)
                                                  for o in outputs),
                           generate_s=generate_s, score_s=score_s, warnings=tuple(reductions))

    def _oom_guard(self, call: Callable, reductions: list[str], batch: list[int] | None = None):
        """Run a model call; on CUDA out-of-memory free the cache and retry with half the
        batch (down to 1). What was reduced is recorded for the result's warnings."""
        import torch

        while True:
            try:
                if self._faults_left > 0:
                    self._faults_left -= 1
                    raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected fault)")
                return call()
            except torch.cuda.OutOfMemoryError:
                from chord_core.model.loading import release_memory

                release_memory()
                if batch is None or batch[0] <= 1:
                    raise _OutOfMemory(
                        "the GPU ran out of memory even at batch size 1",
                        hint="lower --max-pixels or --max-frames, or use a GPU with more "
                             "free memory") from None
                reductions.append(f"out of GPU memory: batch size reduced "
                                  f"{batch[0]} → {batch[0] // 2}")
                log.warning(reductions[-1])
                batch[0] //= 2

    def _export(self, result: Result, out_path: str, clock: _Clock) -> None:
        from chord_core.analysis.render import export_annotated_video

        n = result.video.frame_count
        clock.emit("rendering", "writing annotated video", 0, n)
        export_annotated_video(
            result.video.path, result, out_path,
            on_progress=lambda done, total: clock.emit("rendering", f"frame {done}/{total}",
                                                       done, total),
            cancel=clock.cancel)


class _OutOfMemory(ResourceError):
    """Out of memory at batch size 1: the caller may lower the pixel/frame budget."""


def _halved(sampling: SamplingConfig) -> SamplingConfig:
    max_px = max(sampling.min_pixels, sampling.max_pixels // 2)
    return replace(sampling, max_pixels=max_px,
                   ground_max_pixels=max(sampling.min_pixels, sampling.ground_max_pixels // 2),
                   token_budget=max(64, sampling.token_budget // 2))


@dataclass(frozen=True)
class FrameOutput:
    """The model's raw answer for one grounded frame."""

    frame_index: int
    t_s: float
    text: str
    input_wh: tuple[int, int]
    scores: tuple[float, ...] = ()  # P(the box shows the target), per parsed box in order


@dataclass(frozen=True)
class GroundChunk:
    """Raw grounding outputs of a slice of frames; plain data (crosses processes)."""

    outputs: tuple[FrameOutput, ...]
    preprocess_s: float = 0.0
    generate_s: float = 0.0
    decode_s: float = 0.0
    score_s: float = 0.0  # of which scoring the boxes
    warnings: tuple[str, ...] = ()


def assemble_ground(info: VideoInfo, sampling_plan: SamplingPlan, target: str,
                    chunks: Sequence[GroundChunk], coord_mode: str) -> dict:
    """Merge chunk outputs (in frame order), parse, link tracks, cut segments — pure."""
    from chord_core.analysis import grounding as g
    from chord_core.analysis import tracking as tr
    outputs = sorted((o for c in chunks for o in c.outputs), key=lambda o: o.frame_index)
    detections: list[Detection] = []
    warnings: list[str] = [w for c in chunks for w in c.warnings]
    for out in outputs:
        parsed = g.parse_boxes(out.text, out.input_wh, coords=coord_mode, default_label=target)
        warnings.extend(f"frame {out.frame_index} (t={out.t_s:.2f} s): {w}"
                        for w in parsed.warnings)
        scores = list(out.scores) + [None] * (len(parsed.boxes) - len(out.scores))
        detections.extend(g.to_detection(box, info.size_wh, t_s=out.t_s,
                                         frame_index=out.frame_index, score=score)
                          for box, score in zip(parsed.boxes, scores))
    gap = tr.default_max_gap(1.0 / sampling_plan.fps if sampling_plan.fps > 0 else 1.0)
    linked, tracks = tr.link_tracks(detections, max_gap_s=gap)
    segments = tr.segments_from_tracks(linked, tracks, max_gap_s=gap, duration_s=info.duration_s)
    return {"detections": tuple(linked), "tracks": tuple(tracks), "segments": tuple(segments),
            "raw_outputs": tuple(o.text for o in outputs), "warnings": warnings,
            "method": "per_frame",
            "preprocess_s": sum(c.preprocess_s for c in chunks),
            "generate_s": sum(c.generate_s + c.score_s for c in chunks),
            "score_s": sum(c.score_s for c in chunks)}


def analyze(video_path: str | Path, task: str, query: str = "", *,
            model_cfg: ModelConfig | None = None, sampling: SamplingConfig | None = None,
            max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT, annotated_video: str | None = None,
            on_progress: ProgressFn | None = None) -> Result:
    """One-shot convenience: load the model, analyse one clip, return the result."""
    request = AnalysisRequest(str(video_path), task, query, sampling or SamplingConfig(),
                              max_new_tokens, annotated_video)
    return Engine(model_cfg).analyze(request, on_progress=on_progress)

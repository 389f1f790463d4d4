"""The engine: one clip in, one ``chord.result/v1`` out.

    probe ─▶ plan ─▶ read frames ─▶ model (describe | ground each frame) ─▶ parse ─▶ tracks
                                                                           ─▶ segments ─▶ Result

``Engine`` owns one loaded model (loaded lazily, once) and runs one analysis at a time — or,
with ``describe_many`` (``describe_batch.py``), several describe requests in one batched
generate; the workers (``chord_core.runtime.workers.serve``) and the one-clip CLI feed it.
Everything it takes and returns is plain data (``AnalysisRequest`` → ``Result``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chord_core.analysis.ground_chunks import GroundChunk, assemble_ground, merge_chunks
from chord_core.analysis.request import (
    TASKS,
    AnalysisRequest,
    Clock,
    ProgressFn,
    build_result,
    probe_input,
)
from chord_core.config import (
    MAX_NEW_TOKENS_DEFAULT,
    ModelConfig,
    SamplingConfig,
    injected_oom_faults,
)
from chord_core.errors import JobCancelled, OutOfMemory
from chord_core.media.reader_types import host_frames
from chord_core.types import (
    ModelInfo,
    Result,
    SamplingPlan,
    Timing,
    VideoInfo,
)

if TYPE_CHECKING:
    import numpy as np

    from chord_core.media.read_ahead import ReadAhead
    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)
SLOW_READ_S = 2.0  # a task that waited longer for its frames logs where the read's time went


def frames_device(lm: LoadedModel | None) -> str | None:
    """Where decoded frames may stay: the model's input device when it is a CUDA GPU (NVDEC
    decoding there hands its frames over as a tensor, no host round trip), else None."""
    device = str(getattr(lm, "input_device", "")) if lm is not None else ""
    return device if device.startswith("cuda") else None


class Engine:
    """A loaded model plus the analysis pipeline around it."""

    def __init__(self, model_cfg: ModelConfig | None = None, *,
                 loaded: LoadedModel | None = None) -> None:
        """``loaded``: adopt an already loaded model (benchmarks compare two decoders on one
        copy of the weights) instead of loading ``model_cfg.model`` on first use."""
        self.model_cfg = model_cfg or ModelConfig()
        self._lm: LoadedModel | None = loaded
        self._lock = threading.Lock()
        self._faults_left = injected_oom_faults()
        self._ahead: ReadAhead | None = None  # frames of the worker's next tasks, read early

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

    def warmup(self, on_step: Any = None, tasks: Sequence[str] | None = None
               ) -> dict[str, float]:
        """Capture the decode graphs of every shape a request of ``tasks`` (default: all)
        at the default settings reaches, then run one tiny request of each task so the
        first user request does not pay for CUDA context, kernel selection and allocator
        growth (``warmup.py``). Returns seconds per step (``total_s`` for all);
        ``on_step(detail, done, total)`` as it goes."""
        from chord_core.analysis.warmup import run_warmup

        return run_warmup(self, on_step, TASKS if tasks is None else tasks)

    def warmup_steps(self, tasks: Sequence[str] | None = None) -> list[Any]:
        """The warm-up for ``tasks`` (default: all) as separate steps (``warmup.WarmStep``),
        for a worker warming up in the background between requests."""
        from chord_core.analysis.warmup import warmup_steps

        return warmup_steps(self, self.load(), TASKS if tasks is None else tasks)

    @property
    def model_info(self) -> ModelInfo | None:
        return None if self._lm is None else self._lm.info

    def unload(self) -> None:
        with self._lock:
            self._lm = None
        self.expect([])
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

        clock = Clock(on_progress, cancel)
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
        try:
            body, sampling_plan, warnings, decode_s = self._run_with_budget(
                lm, info, sampling_plan, request, clock)
        except JobCancelled as exc:  # per-frame grounding keeps the frames done, as a Result
            chunk, exc.partial = exc.partial, None
            if isinstance(chunk, GroundChunk) and request.ground_method == "per_frame":
                exc.partial = merge_chunks(request, info, sampling_plan, [chunk], lm.info,
                                           probe_s=probe_s, t0=time.time() - clock.elapsed(),
                                           partial=True)
            raise
        timing = Timing(probe_s=probe_s, load_s=load_s, decode_s=decode_s,
                        preprocess_s=body.pop("preprocess_s"), generate_s=body.pop("generate_s"),
                        postprocess_s=body.pop("postprocess_s", 0.0),
                        score_s=body.pop("score_s", 0.0), total_s=clock.elapsed())
        result = build_result(request, info, sampling_plan, lm.info, timing,
                              tuple(warnings) + tuple(body.pop("warnings", ())), **body)
        if request.annotated_video:
            self._export(result, request.annotated_video, clock)
        clock.emit("done", "analysis finished", 1, 1)
        return result

    def _run_with_budget(self, lm: LoadedModel, info: VideoInfo, sampling_plan: SamplingPlan,
                         request: AnalysisRequest, clock: Clock
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
                    body = self._entail(lm, sampling_plan, host_frames(frames), request,
                                        clock)
                else:
                    body = self._ground(lm, info, sampling_plan, frames, request, clock)
                sampling_plan = body.pop("plan", sampling_plan)  # two_pass: frames grounded
                return body, sampling_plan, reductions + warnings, decode_s
            except OutOfMemory:
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
                    cancel: threading.Event | None = None, on_device: bool = False
                    ) -> tuple[np.ndarray, SamplingPlan, list[str], float]:
        """The plan's frames (or the image) at the plan's size: (frames, the plan of the
        frames actually read, warnings, seconds). No model needed. ``on_device``: frames
        decoded on the model's GPU may stay a tensor there (a caller whose model inputs
        take tensors: describe); else they are a host array."""
        frames, plan, warnings, seconds = self._read(info, sampling_plan, Clock(None, cancel))
        return (frames if on_device else host_frames(frames)), plan, warnings, seconds

    def entail_many(self, requests: Sequence[AnalysisRequest], *,
                    infos: Sequence[VideoInfo | None] | None = None,
                    plans: Sequence[SamplingPlan | None] | None = None,
                    cancel: threading.Event | None = None) -> list[Result | Exception]:
        """Several statements checked in one scoring pass over all their frames (the
        service's ``/batch_predict`` arrives as many one-image jobs); see entail_batch.py."""
        from chord_core.analysis.entail_batch import entail_many

        return entail_many(self, requests, infos=infos, plans=plans, cancel=cancel)

    def expect(self, upcoming: Sequence[tuple[VideoInfo | None, SamplingPlan | None]], *,
               now: Sequence[tuple[VideoInfo | None, SamplingPlan | None]] = ()) -> None:
        """Start reading the frames of the tasks expected next (the worker's queue behind
        the tasks ``now`` in hand) on a background thread; see ``media/read_ahead.py``."""
        if self._ahead is None:
            if not upcoming:
                return
            from chord_core.media.read_ahead import ReadAhead

            self._ahead = ReadAhead()
        self._ahead.model_device = frames_device(self._lm)
        self._ahead.streams = 2 if self._ahead.model_device else 1  # NVDEC: reads overlap
        self._ahead.expect(upcoming, now=now)

    def _read(self, info: VideoInfo, sampling_plan: SamplingPlan, clock: Clock
              ) -> tuple[np.ndarray, SamplingPlan, list[str], float]:
        """Frames through the read-ahead or the reader chain; a tensor on the model's GPU
        when NVDEC decoded them there (``frames_device``), else a host array."""
        from chord_core.media.read_ahead import read_plan_full
        from chord_core.media.sampling import adopt_decoded_times

        n = sampling_plan.num_frames
        t = time.perf_counter()
        clock.emit("decoding", f"reading {n} frames", 0, n)
        ahead = self._ahead.take_full(info, sampling_plan, clock.cancel) if self._ahead \
            else None
        if ahead is not None:  # read while the previous task ran: only the wait counts
            got, decode_s = ahead
            clock.emit("decoding", f"{len(got.indices)} frames read ahead", n, n)
        else:
            got = read_plan_full(info, sampling_plan, clock.cancel, lambda done, total:
                                 clock.emit("decoding", f"frame {done}/{total}", done, total),
                                 model_device=frames_device(self._lm))
            decode_s = time.perf_counter() - t
        if decode_s > SLOW_READ_S:  # where a slow read's time went (a cold start's first)
            log.info("%s: %d frames waited for %.1f s (%s%s: %s)", Path(info.path).name, n,
                     decode_s, got.reader, ", read ahead" if ahead is not None else "",
                     ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in got.stats.items()))
        frames, read, decoded = got.frames, got.indices, got.times_s
        warnings: list[str] = list(info.warnings) + list(sampling_plan.notes)
        if tuple(read) != tuple(sampling_plan.frame_indices):
            missing = sorted(set(sampling_plan.frame_indices) - set(read))
            first = got.stopped_at if got.stopped_at is not None else \
                (missing[0] if missing else None)
            where = f" at {info.time_of(first):.3f} s" if first is not None else ""
            warnings.append(f"{len(missing)} planned frame(s) could not be decoded "
                            f"(first missing index {first if first is not None else '?'}"
                            f"{where}: the file is damaged or truncated there); "
                            "the result uses the frames that were read")
            sampling_plan = replace(
                sampling_plan, frame_indices=tuple(read),
                timestamps_s=tuple(info.time_of(i) for i in read))
        sampling_plan, note = adopt_decoded_times(sampling_plan, decoded[: len(read)])
        warnings += [note] if note else []
        sampling_plan = replace(sampling_plan, reader=got.reader, reader_note=got.note)
        return frames, sampling_plan, warnings, decode_s

    def _describe(self, lm: LoadedModel, info: VideoInfo, sampling_plan: SamplingPlan,
                  frames: np.ndarray, request: AnalysisRequest, clock: Clock) -> dict:
        from chord_core.media.sampling import video_metadata
        from chord_core.model import loading as m
        from chord_core.model.prompts import DEFAULT_DESCRIBE_PROMPT

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
                "generate_s": out.generate_s, "warnings": reductions,
                "tokens": {"prompt": out.prompt_tokens, "completion": out.new_tokens}}

    def _entail(self, lm: LoadedModel, sampling_plan: SamplingPlan, frames: np.ndarray,
                request: AnalysisRequest, clock: Clock) -> dict:
        from chord_core.analysis.entailment import entail_frames

        n = sampling_plan.num_frames
        clock.emit("checking", f"frame 0/{n}", 0, n)
        reductions: list[str] = []
        batch = [request.batch_size or self.model_cfg.batch_size]
        body = self._oom_guard(lambda: entail_frames(
            lm, sampling_plan, frames, request.query, batch_size=batch[0],
            cancel=clock.cancel, think_tokens=request.max_new_tokens,
            on_batch=lambda done, total: clock.emit("checking", f"frame {done}/{total}", done,
                                                    total)), reductions, batch)
        body["warnings"] = tuple(body.get("warnings", ())) + tuple(reductions)
        return body

    def _ground(self, lm: LoadedModel, info: VideoInfo, sampling_plan: SamplingPlan,
                frames: np.ndarray, request: AnalysisRequest, clock: Clock) -> dict:
        if request.ground_method == "two_pass":
            from chord_core.analysis.two_pass import ground_two_pass

            return ground_two_pass(lm, info, sampling_plan, host_frames(frames), request, clock,
                                   ground_frames=self._ground_frames, guard=self._oom_guard)
        chunk = self._ground_frames(lm, sampling_plan, frames, request, clock)
        t = time.perf_counter()
        clock.emit("tracking", "linking detections into tracks")
        body = assemble_ground(info, sampling_plan, request.query, [chunk], lm.coord_mode,
                               thinking=lm.info.thinking)
        body["postprocess_s"] = time.perf_counter() - t
        return body

    def ground_chunk(self, info: VideoInfo, sampling_plan: SamplingPlan, request: AnalysisRequest,
                     *, on_progress: ProgressFn | None = None,
                     cancel: threading.Event | None = None) -> GroundChunk:
        """Ground one slice of a plan (a worker's share of a split job): read its frames,
        run the model, return the raw per-frame outputs. Tracking happens after merging."""
        clock = Clock(on_progress, cancel)
        lm = self.load()
        frames, sampling_plan, warnings, decode_s = self._read(info, sampling_plan, clock)
        chunk = self._ground_frames(lm, sampling_plan, frames, request, clock)
        return replace(chunk, decode_s=decode_s, warnings=tuple(warnings) + chunk.warnings)

    def _ground_frames(self, lm: LoadedModel, sampling_plan: SamplingPlan, frames: np.ndarray,
                       request: AnalysisRequest, clock: Clock) -> GroundChunk:
        from chord_core.analysis.frame_ground import ground_frames

        return ground_frames(lm, sampling_plan, frames, request, clock,
                             batch_size=request.batch_size or self.model_cfg.batch_size,
                             guard=self._oom_guard)

    def _oom_guard(self, call: Callable, reductions: list[str], batch: list[int] | None = None):
        """Run a model call; on CUDA out-of-memory free the cache and retry with half the
        batch (down to 1). What was reduced is recorded for the result's warnings."""
        import torch

        while True:
            try:
                self.raise_injected_oom()
                return call()
            except torch.cuda.OutOfMemoryError:
                from chord_core.model.loading import release_memory

                release_memory()
                if batch is None or batch[0] <= 1:
                    raise OutOfMemory(
                        "the GPU ran out of memory even at batch size 1",
                        hint="lower --max-pixels or --max-frames, or use a GPU with more "
                             "free memory") from None
                reductions.append(f"out of GPU memory: batch size reduced "
                                  f"{batch[0]} → {batch[0] // 2}")
                log.warning(reductions[-1])
                batch[0] //= 2

    def raise_injected_oom(self) -> None:
        """Fault injection (``CHORD_FAULT_OOM=N``): the next N model calls raise CUDA out of
        memory, so the recovery paths can be tested without filling a GPU."""
        if self._faults_left > 0:
            import torch

            self._faults_left -= 1
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected fault)")

    def describe_many(self, requests: Sequence[AnalysisRequest], **kwargs: Any
                      ) -> list[Result | Exception]:
        """Several describe requests in one batched generate (``describe_batch.py``)."""
        from chord_core.analysis.describe_batch import describe_many

        return describe_many(self, requests, **kwargs)

    def _export(self, result: Result, out_path: str, clock: Clock) -> None:
        from chord_core.analysis.render import export_annotated_video

        n = result.video.frame_count
        clock.emit("rendering", "writing annotated video", 0, n)
        export_annotated_video(
            result.video.path, result, out_path,
            on_progress=lambda done, total: clock.emit("rendering", f"frame {done}/{total}",
                                                       done, total),
            cancel=clock.cancel)


def _halved(sampling: SamplingConfig) -> SamplingConfig:
    max_px = max(sampling.min_pixels, sampling.max_pixels // 2)
    return replace(sampling, max_pixels=max_px,
                   ground_max_pixels=max(sampling.min_pixels, sampling.ground_max_pixels // 2),
                   token_budget=max(64, sampling.token_budget // 2))


def analyze(video_path: str | Path, task: str, query: str = "", *,
            model_cfg: ModelConfig | None = None, sampling: SamplingConfig | None = None,
            max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT, annotated_video: str | None = None,
            on_progress: ProgressFn | None = None) -> Result:
    """One-shot convenience: load the model, analyse one clip, return the result."""
    request = AnalysisRequest(str(video_path), task, query, sampling or SamplingConfig(),
                              max_new_tokens, annotated_video)
    return Engine(model_cfg).analyze(request, on_progress=on_progress)

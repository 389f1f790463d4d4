"""What an analysis is asked to do, and the pieces every analysis path shares.

``AnalysisRequest`` (plain data: it crosses threads, processes and the store) → the engine →
a ``Result``, always made by ``build_result`` here. ``plan`` probes a clip and decides its
sampling without a model; ``Clock`` times stages and turns them into progress events.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from chord_core.config import (
    MAX_NEW_TOKENS_DEFAULT,
    MAX_NEW_TOKENS_RANGE,
    MAX_QUERY_CHARS,
    SamplingConfig,
    check_max_new_tokens,
)
from chord_core.errors import ConfigError, JobCancelled
from chord_core.types import (
    ModelInfo,
    ProgressEvent,
    Result,
    SamplingPlan,
    Timing,
    VideoInfo,
)

ProgressFn = Callable[[ProgressEvent], None]
TASKS = ("describe", "ground", "entail")
# ground: every sampled frame (exact), or time spans of the whole clip first (two_pass.py)
GROUND_METHODS = ("per_frame", "two_pass")
# Per-frame cap for grounding answers (a few boxes of JSON); the request's max_new_tokens
# lowers it further when smaller.
GROUND_MAX_NEW_TOKENS = 256


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
    # The folders ``video_path`` must stay under until it is read (the service and the app
    # set them; None, the CLI: any file). Wherever the request is made or unpickled, the path
    # is confined in that process, so the readers open it under these roots
    # (``media.confined``: a symlink swapped in after the submit-time check is refused).
    media_roots: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.media_roots is not None:
            from chord_core.media.confined import confine

            object.__setattr__(self, "media_roots", tuple(str(r) for r in self.media_roots))
            confine(self.video_path, self.media_roots)
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
        self._check_query_as_the_model_takes_it()
        if self.task == "describe":
            check_max_new_tokens(self.max_new_tokens)
        elif not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS_RANGE[1]:
            raise ConfigError(f"max new tokens per grounded frame must be 1–"
                              f"{MAX_NEW_TOKENS_RANGE[1]}, got {self.max_new_tokens}",
                              hint=f"grounding answers are short; {GROUND_MAX_NEW_TOKENS} is "
                                   "plenty")

    def _check_query_as_the_model_takes_it(self) -> None:
        """The target and the statement pass the same checks here as where the prompt is
        built (a 301-character target used to be queued, then fail in the worker)."""
        if self.task == "ground":
            from chord_core.model.prompts import clean_target

            clean_target(self.query)
        elif self.task == "entail":
            from chord_core.analysis.entailment import clean_statement

            clean_statement(self.query)

    def to_dict(self) -> dict:
        return {"video_path": self.video_path, "task": self.task, "query": self.query,
                "sampling": asdict(self.sampling), "max_new_tokens": self.max_new_tokens,
                "annotated_video": self.annotated_video, "batch_size": self.batch_size,
                "min_new_tokens": self.min_new_tokens, "score_boxes": self.score_boxes,
                "ground_method": self.ground_method,
                **({"media_roots": list(self.media_roots)}
                   if self.media_roots is not None else {})}

    def __reduce__(self) -> tuple[Any, tuple[dict]]:
        """Pickled (to a worker process, a Ray actor) through ``from_dict``, so the path is
        confined there too (``media_roots``) before any reader sees it."""
        return (AnalysisRequest.from_dict, (self.to_dict(),))

    @classmethod
    def from_dict(cls, data: dict) -> AnalysisRequest:
        data = dict(data)
        data["sampling"] = SamplingConfig(**data.get("sampling", {}))
        return cls(**data)


def probe_input(path: str | Path, *, decode_images: bool = True) -> VideoInfo:
    """What a file holds: a video (``video.probe``), or a still image as a one-frame clip
    (``decode_images=False``: from its header only, see ``images.image_info``)."""
    from chord_core.media.images import image_info, is_image_path
    from chord_core.media.probe import probe

    return image_info(path, decode=decode_images) if is_image_path(path) else probe(path)


def plan(video_path: str | Path, task: str, sampling: SamplingConfig | None = None
         ) -> tuple[VideoInfo, SamplingPlan]:
    """Probe a clip and decide its sampling plan — cheap, no model. The UI shows this first."""
    from chord_core.media.sampling import plan_sampling
    info = probe_input(video_path)
    return info, plan_sampling(info, task, sampling or SamplingConfig())


class Clock:
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


def build_result(request: AnalysisRequest, info: VideoInfo, sampling_plan: SamplingPlan,
                 model: ModelInfo, timing: Timing, warnings: Any = (), **body: Any) -> Result:
    """The one place a Result is made: every path (one clip, a batch, merged chunks) comes
    here, so the record is stamped and assembled the same way. A Thinking model's reasoning
    is split off its raw outputs here (``reasoning``) and a description keeps only its
    answer."""
    if model.thinking:
        body = _with_reasoning(request.task, body)
    return Result(task=request.task, query=request.query, video=info, sampling=sampling_plan,
                  model=model, timing=timing, warnings=tuple(warnings),
                  created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), **body)


def _with_reasoning(task: str, body: dict) -> dict:
    """``reasoning`` from the raw outputs (unless the task gave its own) and, for describe,
    the text after ``</think>``."""
    from chord_core.analysis.reasoning import split_reasoning

    body = dict(body)
    splits = [split_reasoning(t, thinking=True) for t in body.get("raw_outputs", ())]
    if "reasoning" not in body and any(sp.reasoning for sp in splits):
        body["reasoning"] = tuple(sp.reasoning for sp in splits)
    if task == "describe" and splits:
        body["text"] = splits[0].answer
    return body

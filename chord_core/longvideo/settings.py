"""Long-video settings: when the mode starts, how a clip is cut, how chapters are sized.

| variable            | meaning                                                         |
|---------------------|-----------------------------------------------------------------|
| CHORD_LONG_VIDEO_S  | clips longer than this many seconds get long-video mode (600)   |
| CHORD_LONG_CHUNK_S  | target chunk length in seconds (60)                             |
| CHORD_LONG_CHAPTER_S| about one chapter per this many seconds (300)                   |

The CLI's ``--long-after`` and ``--chunk-s`` override them. They are read by
:func:`settings_from_env`, called by entry points, never at import time. Long-clip grounding's
defaults (``GROUND_LONG_*``, :func:`ground_long_sampling`) are the benchmark's settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from chord_core.config import env_value
from chord_core.errors import ConfigError

if TYPE_CHECKING:
    from chord_core.config import ModelConfig, SamplingConfig

CUT_MODES = ("auto", "scene", "keyframes", "fixed")
LONG_VIDEO_S_DEFAULT = 600.0

# Grounding a long clip: the defaults of ``ground-long`` (and of ``ground`` past the long-video
# threshold) are the settings ``benchmarks/long_video.py`` measures, read from here by both.
# 448×252 (144 visual tokens a frame) rather than the one-clip cap of ≈ 1 MP (1,280 tokens):
# at 1 fps an hour is 3,600 frames, and the larger frames cost ≈ 9× the prefill for boxes a
# tracker joins anyway. 64 answer tokens: one box of Qwen's JSON, fenced, is ≥ 41 tokens
# (digits are one token each), so the 32 first measured cut every box off and the parser
# dropped it (zero detections); several instances a frame need ``--ground-tokens 256``.
# 256 frames a generate call: a decode step reads the weights once for all its rows, and the
# hour grounded at 32 / 64 / 128 took 117.2 / 92.4 / 81.7 s on one H100 (2026-12-07,
# docs/benchmarks.md). Session 13's H100 (the same day, the code of now) took 50.9 s at 256
# against 52.3 at 128: its generate calls summed 40.8 s against 47.4, and its jobs waited
# 10.0 s on NVDEC against 4.7; 72 GB at its peak. A GPU with less room halves the batch on
# out-of-memory (``Engine._oom_guard``) and says so in the result's warnings.
GROUND_LONG_MAX_PIXELS = 112_896  # 448×252
GROUND_LONG_TOKENS = 64
GROUND_LONG_BATCH = 256


@dataclass(frozen=True)
class LongVideoSettings:
    """How long-video mode cuts, describes and merges a clip.

    ``threshold_s``: a clip longer than this is a long video (``is_long``).
    ``chunk_s`` is the target chunk length; a scene-cut chunk lies in
    [``min_chunk_s``, ``max_chunk_s``] (longer scenes are split into windows); fixed
    windows overlap by ``overlap_s`` (frames read twice, once per window; the chunks' own
    time ranges never overlap). ``cuts``: ``scene`` decodes the low-resolution stream at
    ``scene_fps``, ``keyframes`` decodes only keyframes, ``fixed`` decodes nothing, and
    ``auto`` takes the cheapest that stays within ``scan_budget_px`` decoded pixels.
    ``snap_keyframes``: chapters' and search's samples move to the nearest keyframe.
    """

    threshold_s: float = LONG_VIDEO_S_DEFAULT
    chunk_s: float = 60.0
    min_chunk_s: float = 10.0
    max_chunk_s: float = 180.0
    overlap_s: float = 1.0
    cuts: str = "auto"
    cut_threshold: float = 0.4
    scene_fps: float = 4.0
    scan_budget_px: float = 2e10  # ≈ 10 min of 1080p at 30 fps
    describe_fps: float = 0.5
    describe_max_frames: int = 16
    max_new_tokens: int = 192  # per chunk description and per reduce answer (128–2048)
    chapter_s: float = 300.0
    max_chapters: int = 24
    ground_fps: float = 1.0
    ground_chunk_frames: int = GROUND_LONG_BATCH  # one generate call a job at the default
    in_flight: int = 0  # chunk jobs queued at once; 0: chunks_in_flight's two batches
    # chapters and in-clip search: a sample moves to the nearest keyframe (≤ half a sampling
    # interval), so one frame is decoded per sample; the result says how far each moved
    snap_keyframes: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.threshold_s) or self.threshold_s == math.inf) \
                or self.threshold_s < 0:
            raise ConfigError(f"the long-video threshold must be ≥ 0 s, got {self.threshold_s}",
                              hint="e.g. --long-after 600 (10 minutes); --long-after 0 makes "
                                   "every clip a long video")
        if not 1.0 <= self.chunk_s <= 3600.0:
            raise ConfigError(f"the chunk length must be 1–3600 s, got {self.chunk_s}",
                              hint="e.g. --chunk-s 60")
        if not 0 < self.min_chunk_s <= self.chunk_s <= self.max_chunk_s:
            raise ConfigError(
                f"chunk bounds must satisfy 0 < min {self.min_chunk_s} ≤ target "
                f"{self.chunk_s} ≤ max {self.max_chunk_s}",
                hint="leave the bounds at their defaults, or widen them around --chunk-s")
        if not 0 <= self.overlap_s < self.min_chunk_s:
            raise ConfigError(f"the chunk overlap must be ≥ 0 and below the shortest chunk "
                              f"({self.min_chunk_s} s), got {self.overlap_s}",
                              hint="use an overlap of a second or two")
        if not 1.0 <= self.chapter_s <= 86400.0:
            raise ConfigError(f"the chapter length must be 1–86400 s, got {self.chapter_s}",
                              hint="e.g. --chapter-s 300 (about one chapter per 5 minutes)")
        if self.cuts not in CUT_MODES:
            raise ConfigError(f"unknown cut mode {self.cuts!r}",
                              hint=f"use one of: {', '.join(CUT_MODES)}")
        for name in ("scene_fps", "describe_fps", "ground_fps"):
            if not 0 < getattr(self, name) <= 60:
                raise ConfigError(f"{name} must be in (0, 60], got {getattr(self, name)}",
                                  hint="use a rate such as 1 or 2 frames per second")
        if not 128 <= self.max_new_tokens <= 2048:
            raise ConfigError(f"max new tokens per chunk must be 128–2048, got "
                              f"{self.max_new_tokens}", hint="leave it at 192")
        if self.describe_max_frames < 4 or self.ground_chunk_frames < 1:
            raise ConfigError("a chunk needs at least 4 frames to describe and 1 to ground",
                              hint="raise describe_max_frames / ground_chunk_frames")

    def with_overrides(self, **kwargs: object) -> LongVideoSettings:
        """A copy with the given (not None) fields. A new ``chunk_s`` alone moves the chunk
        bounds and the overlap with it, so ``--chunk-s 5`` needs no other option."""
        given = {k: v for k, v in kwargs.items() if v is not None}
        chunk = given.get("chunk_s")
        if isinstance(chunk, (int, float)) and chunk > 0:
            lo = min(float(given.get("min_chunk_s", self.min_chunk_s)), float(chunk))
            given.setdefault("min_chunk_s", lo)
            given.setdefault("max_chunk_s", max(self.max_chunk_s, float(chunk)))
            given.setdefault("overlap_s", min(self.overlap_s, lo / 4))
        return replace(self, **given)

    def is_long(self, duration_s: float) -> bool:
        """Whether a clip of this length gets long-video mode."""
        return duration_s > self.threshold_s


def chunks_in_flight(width: int, setting: int = 0) -> int:
    """Chunk jobs a long run keeps queued at once: ``setting`` (``in_flight``) when it is
    set, else two batches of the workers' batch slots (``width``: workers × batch size), so
    that each worker's read-ahead reads the next batch's frames while this one generates
    (with one batch queued a worker read, then generated, then waited for the next jobs);
    at least 2. The CLI, the service and the app all ask this."""
    return setting if setting > 0 else max(2, 2 * max(0, width))


def one_shot_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings a one-shot run's workers start with (``start_manager(worker_env=)``; the
    caller's environment is left as it is). They start for one run, so what pays only over
    many runs is left out, each unless ``environ`` (default: this process's) sets it:

    * the warm-up (``CHORD_WARMUP=off``): each graph is captured (and compiled) when a job
      first needs it, rather than every task's every shape before the first chunk — 48 of
      the 69 s to ready from a cold start on an H100 (docs/benchmarks.md), for a run that
      uses a few of them;
    * batch 1's own decode graphs (``CHORD_ONE_ROW_GRAPHS=0``): the summary and any lone
      chunk ride in the 2-row graph the map compiles anyway, and batch 1's four pieces,
      compiled with coordinate-descent tuning, are never compiled. With them an empty cache
      started a worker in 77–91 s, before them in 26 s (another host: how much is theirs
      is not measured); they make batch 1 ≈ 5 % faster, on a few requests here."""
    return {name: value for name, value in (("CHORD_WARMUP", "off"),
                                            ("CHORD_ONE_ROW_GRAPHS", "0"))
            if not env_value(name, environ)}


def one_shot_config(cfg: ModelConfig) -> ModelConfig:
    """A one-shot run's model settings: the fast decoder's step is not ``torch.compile``d
    unless the caller asked (``CHORD_COMPILE``; ``cfg.compile`` set). The cold CLI on an H100
    (2026-12-07) spent 15.2 s compiling the step at its first chunk, for a run of ≈ 2,400
    decode steps: at ≈ 6 ms a step, compiling saves ≈ 10–20 % of ≈ 14 s. Eager steps are
    still replayed as CUDA graphs (their capture takes ≈ 0.1 s)."""
    return cfg if cfg.compile is not None else cfg.with_overrides(compile=False)


def ground_long_sampling(max_pixels: int | None = None) -> SamplingConfig:
    """The sampling of long-clip grounding: frames capped at ``max_pixels`` (default
    ``GROUND_LONG_MAX_PIXELS``), the lower pixel bound no higher than the cap."""
    from chord_core.config import SamplingConfig

    px = max_pixels or GROUND_LONG_MAX_PIXELS
    return SamplingConfig(ground_max_pixels=px, min_pixels=min(SamplingConfig().min_pixels, px))


def _seconds(env: Mapping[str, str], name: str) -> float | None:
    raw = env_value(name, env)
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}",
                          hint=f"e.g. {name}=600, or unset it for the default") from None


def settings_from_env(env: Mapping[str, str] | None = None,
                      **overrides: object) -> LongVideoSettings:
    """Settings from ``CHORD_LONG_*`` variables, then explicit ``overrides`` (None = unset)."""
    base = LongVideoSettings().with_overrides(
        threshold_s=_seconds(env, "CHORD_LONG_VIDEO_S"),
        chunk_s=_seconds(env, "CHORD_LONG_CHUNK_S"),
        chapter_s=_seconds(env, "CHORD_LONG_CHAPTER_S"))
    return base.with_overrides(**overrides)

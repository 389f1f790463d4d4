"""Sampling plans (pure): which frames the model sees, at what size, for how many visual tokens.

:func:`plan_sampling` turns a probed :class:`VideoInfo` into a :class:`SamplingPlan`,
following qwen-vl-utils' rules (:func:`nframes_for`, :func:`smart_resize`) plus a
visual-token budget; :func:`video_metadata` is what the transformers video processor needs
next to the sampled frames. No file access, no OpenCV: :mod:`chord_core.media.video` reads frames.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from chord_core.config import FRAME_FACTOR, MIN_FRAMES, PATCH_PX, SamplingConfig
from chord_core.errors import ConfigError, VideoError
from chord_core.types import SamplingPlan, VideoInfo

__all__ = ["MAX_ASPECT_RATIO", "adopt_decoded_times", "auto_fps", "nframes_for", "plan_sampling",
           "smart_resize", "spread_indices", "video_metadata"]

MAX_ASPECT_RATIO = 200
DECODED_AGREE_S = 0.002  # planned (container) and decoded times closer than this agree


# -- qwen-vl-utils rules -----------------------------------------------------------------

def smart_resize(height: int, width: int, factor: int = PATCH_PX, min_pixels: int = 4 * 28 * 28,
                 max_pixels: int = 16384 * 28 * 28) -> tuple[int, int]:
    """(h, w) multiples of ``factor``, near the input aspect, with h×w in
    [min_pixels, max_pixels] — qwen-vl-utils' rule: round each side to the nearest multiple
    (at least one factor); if too large scale both down by √(hw/max) and floor; if too small
    scale up by √(min/hw) and ceil. Aspect ratios above 200 raise ValueError."""
    if height <= 0 or width <= 0:
        raise ValueError(f"frame size must be positive, got {width}×{height}")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.1f} is above "
                         f"{MAX_ASPECT_RATIO}")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def nframes_for(total_frames: int, video_fps: float, target_fps: float, *,
                min_frames: int = MIN_FRAMES, max_frames: int = 768) -> int:
    """Frames to sample — qwen-vl-utils' rule: total/video_fps × target_fps, clamped to
    [ceil_even(min_frames), floor_even(min(max_frames, total))], floored to an even count.
    Short clips: 2–3 frames → 2; a single-frame clip → 1 (the processor pads odd counts by
    repeating the last frame; qwen-vl-utils would refuse it)."""
    if total_frames < 1 or not video_fps > 0 or not target_fps > 0:
        raise ValueError(f"need frames ≥ 1 and positive rates, got {total_frames}, "
                         f"{video_fps}, {target_fps}")
    if total_frames == 1:
        return 1
    lo = math.ceil(min_frames / FRAME_FACTOR) * FRAME_FACTOR
    hi = math.floor(min(max_frames, total_frames) / FRAME_FACTOR) * FRAME_FACTOR
    n = min(max(total_frames / video_fps * target_fps, lo), hi, total_frames)
    return max(FRAME_FACTOR, math.floor(n / FRAME_FACTOR) * FRAME_FACTOR)


def spread_indices(total_frames: int, n: int) -> tuple[int, ...]:
    """``n`` indices spread evenly over the clip: round(linspace(0, total-1, n)), with
    numpy's round-half-to-even like torch.round in qwen-vl-utils. Strictly increasing."""
    return tuple(int(i) for i in np.round(np.linspace(0, total_frames - 1, n)))


# -- sampling plan -----------------------------------------------------------------------

# Tasks that send every sampled frame as its own image request.
PER_FRAME_TASKS = ("ground", "entail")
TASKS = ("describe", "ground", "entail")
# Entailment needs the gist of a frame, not box precision: ≈ 256 visual tokens (448×448).
ENTAIL_MAX_PIXELS = 256 * PATCH_PX * PATCH_PX


def auto_fps(task: str, duration_s: float) -> float:
    """Default sampling rate: describe 2 fps ≤ 10 s, 1 fps ≤ 30 s, else 0.5; ground 2 fps;
    entail (a probability curve over time) 2 fps ≤ 10 s, 1 fps ≤ 60 s, else 0.5."""
    if task == "ground":
        return 2.0
    if task == "entail":
        return 2.0 if duration_s <= 10 else 1.0 if duration_s <= 60 else 0.5
    return 2.0 if duration_s <= 10 else 1.0 if duration_s <= 30 else 0.5


def _tokens(hw: tuple[int, int]) -> int:
    return (hw[0] // PATCH_PX) * (hw[1] // PATCH_PX)


def _groups(task: str, n: int) -> int:
    """Temporal groups paid per request: a describe clip pays per 2 frames (odd padded);
    a grounding request is one image."""
    return 1 if task in PER_FRAME_TASKS else -(-n // FRAME_FACTOR)


def _timeline(info: VideoInfo, notes: list[str]) -> tuple[float, int]:
    """(real fps, frame count) usable for planning, or VideoError."""
    fps, total, dur = info.fps, info.frame_count, info.duration_s
    if not (math.isfinite(fps) and fps > 0):
        fps = total / dur if total > 0 and dur > 0 else 0.0
        if fps > 0:
            notes.append(f"frame rate unknown; using {fps:.3f} fps from {total} frames over "
                         f"{dur:.2f} s")
    if total < 1 and fps > 0 and dur > 0:
        total = max(1, int(round(dur * fps)))
    if fps <= 0 or total < 1:
        raise VideoError(f"{Path(info.path).name or 'video'}: no usable frame rate or frame "
                         f"count (fps={info.fps}, frames={info.frame_count}, "
                         f"duration={info.duration_s})",
                         hint="probe the file with chord_core.media.video.probe(); if that fails too, "
                              "re-encode the video")
    w, h = info.width, info.height
    if w <= 0 or h <= 0 or max(w, h) / min(w, h) > MAX_ASPECT_RATIO:
        raise VideoError(f"{Path(info.path).name or 'video'}: frame size {w}×{h} cannot be "
                         f"given to the model (empty, or aspect ratio above {MAX_ASPECT_RATIO}:1)",
                         hint="crop or re-encode the video to an ordinary frame shape")
    if info.variable_fps and not info.timeline:
        notes.append("variable frame rate: frame times are index / average fps and may be "
                     "off by a few frame intervals")
    return fps, total


def plan_sampling(info: VideoInfo, task: str, cfg: SamplingConfig | None = None
                  ) -> SamplingPlan:
    """Choose frames, frame size and visual-token cost for ``task`` ("describe" | "ground").

    Frame count: :func:`nframes_for` at ``cfg.fps`` or :func:`auto_fps`, capped by
    ``cfg.max_frames``, spread evenly over the whole clip. Size: :func:`smart_resize` of the
    displayed size in [min_pixels, max_pixels] (grounding: ``ground_max_pixels``).
    Tokens: describe = ceil(frames/2) × (H/28)(W/28) for the one clip request; ground =
    frames × (H/28)(W/28), one image request per frame. Budget (``cfg.token_budget`` per
    request): lower the frame size first, down to min_pixels; only then drop frames (to an even
    count, at least 2). Each such decision is a sentence in ``notes``.
    ``min_pixels``/``max_pixels`` in the plan bracket ``input_wh``, so a processor given them
    keeps the frames at that size. ``fps`` is the effective rate, frames / duration.
    """
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}", hint=f"use one of: {', '.join(TASKS)}")
    cfg = cfg or SamplingConfig()
    notes: list[str] = []
    if info.container == "image":
        return _image_plan(info, task, cfg)
    fps, total = _timeline(info, notes)
    duration = total / fps
    target = cfg.fps or auto_fps(task, duration)
    n = nframes_for(total, fps, target, max_frames=cfg.max_frames)
    _note_count(notes, n, total, duration * target, cfg.max_frames, duration)
    max_px = _max_pixels(task, cfg)
    n, hw, cap_px = _fit_budget(task, n, info, cfg, max_px, notes)
    indices = spread_indices(total, n)
    tpf = _tokens(hw)
    return SamplingPlan(
        task=task, fps=n / duration, frame_indices=indices,
        timestamps_s=tuple(info.time_of(i) if info.timeline else i / fps for i in indices),
        input_wh=(hw[1], hw[0]),
        visual_tokens=tpf * (n if task in PER_FRAME_TASKS else _groups(task, n)),
        tokens_per_frame=tpf, max_frames=cfg.max_frames,
        max_pixels=max(cap_px, hw[0] * hw[1]), min_pixels=min(cfg.min_pixels, hw[0] * hw[1]),
        token_budget=cfg.token_budget, notes=tuple(notes))


def _max_pixels(task: str, cfg: SamplingConfig) -> int:
    if task == "describe":
        return cfg.max_pixels
    cap = max(cfg.ground_max_pixels, cfg.min_pixels)
    return max(cfg.min_pixels, min(cap, ENTAIL_MAX_PIXELS)) if task == "entail" else cap


def _image_plan(info: VideoInfo, task: str, cfg: SamplingConfig) -> SamplingPlan:
    """A still image: its one frame at t = 0, sized like one frame of the task."""
    notes: list[str] = []
    max_px = _max_pixels(task, cfg)
    _, hw, cap_px = _fit_budget(task, 1, info, cfg, max_px, notes)
    tpf = _tokens(hw)
    return SamplingPlan(task=task, fps=1.0, frame_indices=(0,), timestamps_s=(0.0,),
                        input_wh=(hw[1], hw[0]), visual_tokens=tpf * _groups(task, 1),
                        tokens_per_frame=tpf, max_frames=cfg.max_frames,
                        max_pixels=max(cap_px, hw[0] * hw[1]),
                        min_pixels=min(cfg.min_pixels, hw[0] * hw[1]),
                        token_budget=cfg.token_budget, notes=tuple(notes))


def _note_count(notes: list[str], n: int, total: int, wanted: float, max_frames: int,
                duration: float) -> None:
    """Explain a frame count that differs from duration × target fps (beyond even rounding)."""
    if wanted > n and total > max_frames and n == max_frames // FRAME_FACTOR * FRAME_FACTOR:
        notes.append(f"the clip is {duration:.1f} s long: {wanted:.0f} frames at the target "
                     f"rate exceed the {max_frames}-frame limit; sampling {n} frames spread "
                     f"evenly ({n / duration:.3f} fps)")
    elif wanted > total:
        notes.append(f"the target rate is above the clip's own frame rate; sampling {n} of "
                     f"its {total} frames")
    elif wanted < MIN_FRAMES and n > wanted:
        notes.append(f"short clip ({duration:.2f} s): sampling {n} frames, the minimum")


def _fit_budget(task: str, n: int, info: VideoInfo, cfg: SamplingConfig, max_px: int,
                notes: list[str]) -> tuple[int, tuple[int, int], int]:
    """Lower resolution, then frames, until a request fits the token budget:
    (frames, (h, w), pixel cap used)."""
    budget, size = cfg.token_budget, (info.height, info.width)
    hw = smart_resize(*size, PATCH_PX, cfg.min_pixels, max_px)
    if _groups(task, n) * _tokens(hw) <= budget:
        return n, hw, max_px
    cap_px = min(max_px, max(cfg.min_pixels, budget // _groups(task, n) * PATCH_PX * PATCH_PX))
    low = smart_resize(*size, PATCH_PX, cfg.min_pixels, cap_px)
    if low != hw:
        notes.append(f"lowered the frame size from {hw[1]}×{hw[0]} to {low[1]}×{low[0]} to fit "
                     f"the {budget}-token budget")
    hw, tpf = low, _tokens(low)
    if task == "describe" and _groups(task, n) * tpf > budget and n > FRAME_FACTOR:
        fewer = min(n, max(FRAME_FACTOR, FRAME_FACTOR * (budget // tpf)))
        notes.append(f"even at the minimum frame size {hw[1]}×{hw[0]}, {n} frames need "
                     f"{_groups(task, n) * tpf} tokens; dropped to {fewer} frames to fit the "
                     f"{budget}-token budget")
        n = fewer
    if _groups(task, n) * tpf > budget:
        notes.append(f"the {budget}-token budget is below the smallest possible request "
                     f"({_groups(task, n) * tpf} tokens at {hw[1]}×{hw[0]}); exceeding it")
    return n, hw, cap_px


def video_metadata(info: VideoInfo, indices: Iterable[int]) -> dict[str, Any]:
    """The ``video_metadata`` the transformers video processor needs next to sampled frames
    (without it, it assumes 24 fps and the frame times are wrong)."""
    return {"total_num_frames": int(info.frame_count), "fps": float(info.fps),
            "frames_indices": [int(i) for i in indices], "duration": float(info.duration_s)}


def adopt_decoded_times(plan: SamplingPlan, decoded_s: Sequence[float]
                        ) -> tuple[SamplingPlan, str | None]:
    """The plan with each sampled frame's time as its decoder reported it (the frame's own
    presentation time), when those times are usable — one per frame, finite, increasing —
    and differ from the planned ones; the note says by how much. Otherwise the plan as is
    (e.g. a clip whose clock goes back keeps the probe's monotonic times, already warned)."""
    t = np.asarray(decoded_s, dtype=np.float64)
    if len(t) != plan.num_frames or not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        return plan, None
    off = float(np.max(np.abs(t - np.asarray(plan.timestamps_s)))) if len(t) else 0.0
    if off <= DECODED_AGREE_S:
        return plan, None
    note = (f"the decoded frames' own times differ from the probe's by up to {off:.3f} s; "
            "using the decoded times")
    return replace(plan, timestamps_s=tuple(round(float(v), 6) for v in t)), note

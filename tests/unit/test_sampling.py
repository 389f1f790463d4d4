"""Sampling plans (pure): frame counts, frame sizes, token budget, checked against an
independent reference of qwen-vl-utils' documented rules written here from the rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chord_core.config import SamplingConfig
from chord_core.errors import ConfigError, VideoError
from chord_core.media.sampling import (
    auto_fps,
    nframes_for,
    plan_sampling,
    smart_resize,
    spread_indices,
    video_metadata,
)
from chord_core.types import VideoInfo

MIN_PX, MAX_PX = 128 * 28 * 28, 768 * 28 * 28


# -- reference implementation of the rules (independent of chord_core) -------------------

def ref_smart_resize(h: int, w: int, min_px: int, max_px: int, f: int = 28) -> tuple[int, int]:
    """Nearest multiples of f (≥ f); too big → scale by sqrt(hw/max) and floor; too small →
    scale by sqrt(min/hw) and ceil."""
    rh, rw = f * max(1, round(h / f)), f * max(1, round(w / f))
    if rh * rw > max_px:
        s = (h * w / max_px) ** 0.5
        return f * max(1, int(h / s // f)), f * max(1, int(w / s // f))
    if rh * rw < min_px:
        s = (min_px / (h * w)) ** 0.5
        return f * math.ceil(h * s / f), f * math.ceil(w * s / f)
    return rh, rw


def ref_nframes(total: int, video_fps: float, fps: float, max_frames: int = 768) -> int:
    """qwen-vl-utils smart_nframes with min 4 / max frames, even; Chord's extension for
    1-frame clips (1 frame)."""
    if total == 1:
        return 1
    lo = 4
    hi = min(max_frames, total) // 2 * 2
    n = total / video_fps * fps
    n = min(max(n, lo), hi, total)
    return int(n // 2 * 2)


def ref_auto_fps(task: str, duration: float) -> float:
    if task == "ground":
        return 2.0
    if duration <= 10:
        return 2.0
    return 1.0 if duration <= 30 else 0.5


def info_for(duration: float, fps: float, wh: tuple[int, int], **kw: object) -> VideoInfo:
    total = max(1, round(duration * fps))
    return VideoInfo(path="/clips/x.mp4", duration_s=total / fps, fps=fps, frame_count=total,
                     width=wh[0], height=wh[1], header_fps=fps, header_frame_count=total,
                     stored_wh=wh, **kw)


# -- smart_resize ------------------------------------------------------------------------

RESIZE_CASES = [
    (240, 320, MIN_PX, MAX_PX), (1080, 1920, MIN_PX, MAX_PX), (1920, 1080, MIN_PX, MAX_PX),
    (2160, 3840, MIN_PX, MAX_PX), (4320, 7680, MIN_PX, MAX_PX), (64, 64, MIN_PX, MAX_PX),
    (28, 28, 784, 784 * 4), (10, 1000, 4 * 784, 16384 * 784), (100, 19999, 4 * 784, 16384 * 784),
    (42, 70, 784, 10**7), (720, 1280, 4 * 784, 16384 * 784), (480, 854, MIN_PX, MIN_PX),
    (1080, 1920, 1280 * 784, 1280 * 784), (333, 777, 256 * 784, 1024 * 784), (1, 150, 784, 10**6),
]


@pytest.mark.parametrize("h,w,lo,hi", RESIZE_CASES,
                         ids=[f"{h}x{w}-{lo}-{hi}" for h, w, lo, hi in RESIZE_CASES])
def test_smart_resize_matches_reference(h: int, w: int, lo: int, hi: int) -> None:
    got = smart_resize(h, w, 28, lo, hi)
    assert got == ref_smart_resize(h, w, lo, hi)
    assert got[0] % 28 == 0 and got[1] % 28 == 0


@pytest.mark.parametrize("h,w", [(1, 201), (300, 1), (10, 2500)], ids=["1x201", "300x1", "10x2500"])
def test_smart_resize_rejects_extreme_aspect(h: int, w: int) -> None:
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(h, w)


def test_smart_resize_rounds_half_to_even_like_python() -> None:
    # 42/28 = 1.5 → 2 and 70/28 = 2.5 → 2 (Python's round, as qwen-vl-utils uses)
    assert smart_resize(42, 70, 28, 784, 10**7) == (56, 56)


# -- frame counts ------------------------------------------------------------------------

NFRAME_CASES = [
    (1, 30, 2), (2, 30, 2), (3, 30, 2), (4, 30, 2), (5, 30, 2), (15, 30, 2), (300, 30, 2),
    (301, 30, 2), (300, 30, 0.5), (60, 1, 2), (7, 1, 2), (10800 * 30, 30, 0.5),
    (1000, 23.976, 1), (1_000_000, 120, 2), (9, 120, 2), (100, 10, 60),
]


@pytest.mark.parametrize("total,vfps,fps", NFRAME_CASES,
                         ids=[f"{t}f@{v}-{f}" for t, v, f in NFRAME_CASES])
@pytest.mark.parametrize("max_frames", [768, 33, 4], ids=["max768", "max33", "max4"])
def test_nframes_matches_reference(total: int, vfps: float, fps: float, max_frames: int) -> None:
    n = nframes_for(total, vfps, fps, max_frames=max_frames)
    assert n == ref_nframes(total, vfps, fps, max_frames)
    assert 1 <= n <= total and n <= max_frames
    assert n % 2 == 0 or total == 1


@pytest.mark.parametrize("args", [(0, 30, 2), (10, 0, 2), (10, 30, 0), (10, float("nan"), 2)],
                         ids=["no-frames", "zero-fps", "zero-target", "nan-fps"])
def test_nframes_rejects_invalid(args: tuple) -> None:
    with pytest.raises(ValueError):
        nframes_for(*args)


@pytest.mark.parametrize("total,n", [(10, 4), (7, 2), (100, 100), (5, 5), (1000, 768)],
                         ids=["10-4", "7-2", "all", "5-5", "1000-768"])
def test_spread_indices_like_linspace(total: int, n: int) -> None:
    idx = spread_indices(total, n)
    assert idx == tuple(int(v) for v in np.round(np.linspace(0, total - 1, n)))
    assert idx[0] == 0 and idx[-1] == total - 1
    assert all(b > a for a, b in zip(idx, idx[1:]))


@pytest.mark.parametrize("task,dur,want", [
    ("describe", 0.5, 2.0), ("describe", 10, 2.0), ("describe", 10.01, 1.0),
    ("describe", 30, 1.0), ("describe", 31, 0.5), ("describe", 10800, 0.5),
    ("ground", 5, 2.0), ("ground", 3600, 2.0)], ids=lambda v: str(v))
def test_auto_fps(task: str, dur: float, want: float) -> None:
    assert auto_fps(task, dur) == want


# -- plans over a table of clips ---------------------------------------------------------

DURATIONS = [0.5, 3, 10, 25, 31, 600, 10800]
FPS = [1, 23.976, 30, 60, 120]
SIZES = [(64, 64), (320, 240), (1280, 720), (1080, 1920), (3840, 2160), (7680, 4320)]
TABLE = [(d, f, s) for d in DURATIONS for f in FPS for s in SIZES]


def _check_plan(info: VideoInfo, task: str, cfg: SamplingConfig) -> None:
    plan = plan_sampling(info, task, cfg)
    total, fps = info.frame_count, info.fps
    target = cfg.fps or ref_auto_fps(task, info.duration_s)
    rule_n = ref_nframes(total, fps, target, cfg.max_frames)
    max_px = cfg.max_pixels if task == "describe" else cfg.ground_max_pixels
    full_hw = ref_smart_resize(info.height, info.width, cfg.min_pixels, max_px)
    floor_hw = ref_smart_resize(info.height, info.width, cfg.min_pixels, cfg.min_pixels)
    h, w = plan.input_wh[1], plan.input_wh[0]
    tpf = (h // 28) * (w // 28)
    n = plan.num_frames
    # never empty, indices valid, increasing, timestamps exact
    assert n >= 1
    assert all(0 <= i < total for i in plan.frame_indices)
    assert all(b > a for a, b in zip(plan.frame_indices, plan.frame_indices[1:]))
    assert plan.timestamps_s == tuple(i / fps for i in plan.frame_indices)
    assert plan.frame_indices == tuple(int(v) for v in np.round(np.linspace(0, total - 1, n)))
    assert n % 2 == 0 or total == 1
    assert h % 28 == 0 and w % 28 == 0
    assert plan.tokens_per_frame == tpf
    assert plan.fps == pytest.approx(n / info.duration_s)
    # token accounting and the per-request budget
    per_request = tpf if task == "ground" else math.ceil(n / 2) * tpf
    assert plan.visual_tokens == (n * tpf if task == "ground" else per_request)
    assert per_request <= cfg.token_budget or any("budget" in s for s in plan.notes)
    # qwen-vl-utils rules when nothing had to give; resolution before frames otherwise
    if (h, w) != full_hw:
        assert h * w <= full_hw[0] * full_hw[1]
        assert any("lowered the frame size" in s for s in plan.notes)
    if n < rule_n:
        assert task == "describe" and (h, w) == floor_hw
        assert any("dropped to" in s for s in plan.notes)
    else:
        assert n == rule_n
    # a processor given the plan's pixel bounds keeps input_wh as is
    assert ref_smart_resize(h, w, plan.min_pixels, plan.max_pixels) == (h, w)


@pytest.mark.parametrize("duration,fps,wh", TABLE,
                         ids=[f"{d}s-{f}fps-{s[0]}x{s[1]}" for d, f, s in TABLE])
@pytest.mark.parametrize("task", ["describe", "ground"])
def test_plan_table(duration: float, fps: float, wh: tuple[int, int], task: str) -> None:
    _check_plan(info_for(duration, fps, wh), task, SamplingConfig())


CFGS = {
    "fps1": SamplingConfig(fps=1.0),
    "fps60": SamplingConfig(fps=60.0),
    "max-frames-16": SamplingConfig(max_frames=16),
    "max-frames-odd": SamplingConfig(max_frames=9),
    "budget-4k": SamplingConfig(token_budget=4000),
    "budget-tiny": SamplingConfig(token_budget=64),
    "small-pixels": SamplingConfig(min_pixels=784, max_pixels=64 * 784, token_budget=2000),
    "ground-cap": SamplingConfig(ground_max_pixels=256 * 784, token_budget=200),
}


@pytest.mark.parametrize("cfg", CFGS.values(), ids=CFGS.keys())
@pytest.mark.parametrize("duration,fps,wh", [(2, 30, (1920, 1080)), (45, 25, (640, 360)),
                                             (3600, 60, (3840, 2160)), (0.5, 24, (64, 64))],
                         ids=["2s-1080p", "45s-360p", "1h-4k", "short-tiny"])
@pytest.mark.parametrize("task", ["describe", "ground"])
def test_plan_configs(cfg: SamplingConfig, duration: float, fps: float, wh: tuple[int, int],
                      task: str) -> None:
    _check_plan(info_for(duration, fps, wh), task, cfg)


def test_long_clip_lowers_resolution_then_drops_frames() -> None:
    info = info_for(10800, 30, (1920, 1080))
    plan = plan_sampling(info, "describe", SamplingConfig())
    assert plan.num_frames < 768
    assert plan.input_wh == ref_smart_resize(1080, 1920, MIN_PX, MIN_PX)[::-1]
    assert plan.visual_tokens <= 24_000
    lowered = [i for i, s in enumerate(plan.notes) if "lowered the frame size" in s]
    dropped = [i for i, s in enumerate(plan.notes) if "dropped to" in s]
    assert lowered and dropped and lowered[0] < dropped[0]


def test_medium_clip_lowers_resolution_only() -> None:
    info = info_for(60, 30, (1920, 1080))  # 30 frames → 15 groups: 1600 tokens each allowed
    plan = plan_sampling(info, "describe", SamplingConfig(token_budget=6000))
    assert plan.num_frames == 30
    assert plan.visual_tokens <= 6000
    assert plan.input_wh != ref_smart_resize(1080, 1920, MIN_PX, MAX_PX)[::-1]
    assert not any("dropped" in s for s in plan.notes)


def test_max_frames_cap_spreads_over_whole_clip() -> None:
    info = info_for(600, 30, (320, 240))
    plan = plan_sampling(info, "ground", SamplingConfig(max_frames=9))
    assert plan.num_frames == 8
    assert plan.frame_indices[0] == 0 and plan.frame_indices[-1] == info.frame_count - 1
    assert any("8 frames spread evenly" in s for s in plan.notes)


def test_ground_never_drops_frames_for_budget() -> None:
    info = info_for(20, 30, (3840, 2160))
    plan = plan_sampling(info, "ground", SamplingConfig(token_budget=100))
    assert plan.num_frames == 40
    assert plan.tokens_per_frame == (ref_smart_resize(2160, 3840, MIN_PX, MIN_PX)[0] // 28) * (
        ref_smart_resize(2160, 3840, MIN_PX, MIN_PX)[1] // 28)
    assert any("budget" in s for s in plan.notes)


# -- unusual VideoInfo: VFR, missing/zero fps, tiny clips ---------------------------------

def test_vfr_clip_gets_a_note_and_average_fps_times() -> None:
    info = info_for(20, 29.5, (1280, 720), variable_fps=True)
    plan = plan_sampling(info, "describe")
    assert any("variable frame rate" in s for s in plan.notes)
    assert plan.timestamps_s == tuple(i / 29.5 for i in plan.frame_indices)


@pytest.mark.parametrize("fps", [0.0, float("nan"), -5.0], ids=["zero", "nan", "negative"])
def test_zero_fps_derived_from_count_and_duration(fps: float) -> None:
    info = VideoInfo(path="x.mp4", duration_s=10.0, fps=fps, frame_count=300, width=320,
                     height=240, header_fps=0.0)
    plan = plan_sampling(info, "describe")
    assert plan.num_frames == 20
    assert plan.timestamps_s[-1] == pytest.approx(299 / 30)
    assert any("frame rate unknown" in s for s in plan.notes)


def test_missing_frame_count_derived_from_duration() -> None:
    info = VideoInfo(path="x.mp4", duration_s=4.0, fps=25.0, frame_count=0, width=320, height=240)
    plan = plan_sampling(info, "describe")
    assert plan.frame_indices[-1] == 99 and plan.num_frames == 8


@pytest.mark.parametrize("info", [
    VideoInfo(path="/a/broken.mp4", duration_s=0.0, fps=0.0, frame_count=0, width=320, height=240),
    VideoInfo(path="/a/broken.mp4", duration_s=0.0, fps=30.0, frame_count=0, width=320, height=240),
    VideoInfo(path="/a/broken.mp4", duration_s=1.0, fps=30.0, frame_count=30, width=0, height=0),
    VideoInfo(path="/a/broken.mp4", duration_s=1.0, fps=30.0, frame_count=30, width=4000,
              height=10),
], ids=["nothing", "no-count-no-duration", "no-size", "aspect-400"])
def test_unplannable_info_raises_video_error(info: VideoInfo) -> None:
    with pytest.raises(VideoError, match="broken.mp4"):
        plan_sampling(info, "describe")


@pytest.mark.parametrize("frames,want", [(1, (0,)), (2, (0, 1)), (3, (0, 2)), (4, (0, 1, 2, 3)),
                                         (5, (0, 1, 3, 4))], ids=lambda v: str(v))
def test_tiny_clips(frames: int, want: tuple[int, ...]) -> None:
    info = VideoInfo(path="x.mp4", duration_s=frames / 30, fps=30.0, frame_count=frames,
                     width=320, height=240)
    assert plan_sampling(info, "describe").frame_indices == want


def test_odd_frame_count_is_padded_in_token_count() -> None:
    info = VideoInfo(path="x.mp4", duration_s=1 / 30, fps=30.0, frame_count=1, width=320,
                     height=240)
    plan = plan_sampling(info, "describe")
    assert plan.num_frames == 1 and plan.visual_tokens == plan.tokens_per_frame


def test_unknown_task_rejected() -> None:
    with pytest.raises(ConfigError):
        plan_sampling(info_for(2, 30, (320, 240)), "summarise")


def test_plan_round_trips_through_dict() -> None:
    from chord_core.types import SamplingPlan

    plan = plan_sampling(info_for(12, 30, (1280, 720)), "describe")
    assert SamplingPlan.from_dict(plan.to_dict()) == plan


def test_video_metadata_for_processor() -> None:
    info = info_for(10, 30, (320, 240))
    plan = plan_sampling(info, "describe")
    meta = video_metadata(info, plan.frame_indices)
    assert meta == {"total_num_frames": 300, "fps": 30.0,
                    "frames_indices": list(plan.frame_indices), "duration": 10.0}
    # what transformers derives from it: sampled fps = frames / duration = the plan's fps
    sampled_fps = len(meta["frames_indices"]) / meta["total_num_frames"] * meta["fps"]
    assert sampled_fps == pytest.approx(plan.fps)

"""Chunks: a clip cut into consecutive pieces at scene cuts, or into fixed windows.

Chunks partition the clip's frames: chunk k holds frames ``[first_frame, end_frame)`` and the
time range ``[start_s, end_s)``, where ``start_s`` is the container time of its first frame
(``VideoInfo.time_of``) and ``end_s`` that of the next chunk's first frame (the clip's
duration for the last) — exact, never index / average fps. A window boundary (not a cut)
lets the chunk read from ``read_from`` a little earlier (``overlap_s``), so what happens
across the boundary is seen whole by one chunk; a cut needs no overlap.

Pure: no decoding, no model. :func:`chunk_plan` makes the sampling plan of one chunk for a
task with the engine's own planner, on the chunk's frames only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from chord_core.config import SamplingConfig
from chord_core.longvideo.scenes import Cut
from chord_core.longvideo.settings import LongVideoSettings
from chord_core.longvideo.stream import index_at
from chord_core.media.sampling import plan_sampling
from chord_core.types import SamplingPlan, VideoInfo


@dataclass(frozen=True)
class Chunk:
    """One piece of the clip (see module docstring). ``cut`` is the strength of the scene
    cut it starts with (0 for the first chunk and for window boundaries)."""

    index: int
    first_frame: int
    end_frame: int
    start_s: float
    end_s: float
    cut: float = 0.0
    read_from: int = -1  # first frame read (overlap); -1 = first_frame

    @property
    def read_first(self) -> int:
        return self.first_frame if self.read_from < 0 else self.read_from

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict:
        return {"index": self.index, "first_frame": self.first_frame,
                "end_frame": self.end_frame, "start_s": self.start_s, "end_s": self.end_s,
                "cut": round(self.cut, 4), "read_from": self.read_first}

    @classmethod
    def from_dict(cls, d: dict) -> Chunk:
        return cls(int(d["index"]), int(d["first_frame"]), int(d["end_frame"]),
                   float(d["start_s"]), float(d["end_s"]), float(d.get("cut", 0.0)),
                   int(d.get("read_from", -1)))


def clip_end_s(info: VideoInfo) -> float:
    """When the clip ends: its duration, or past its last frame's own time if that is later."""
    last = info.time_of(max(0, info.frame_count - 1))
    return max(float(info.duration_s), last)


def make_chunks(info: VideoInfo, cuts: Sequence[Cut], settings: LongVideoSettings
                ) -> tuple[Chunk, ...]:
    """Chunks at the given cuts (short scenes merged, long ones split into windows); with no
    cuts, fixed windows of ``settings.chunk_s``."""
    n = max(1, info.frame_count)
    strength = {c.frame_index: c.strength for c in cuts if 0 < c.frame_index < n}
    bounds = [0] + sorted(strength) + [n]
    bounds = _merge_short(info, bounds, strength, settings.min_chunk_s)
    pieces: list[tuple[int, int, float, bool]] = []  # first, end, cut strength, window start
    for a, b in zip(bounds, bounds[1:]):
        inner = _windows(info, a, b, settings)
        for k, (x, y) in enumerate(inner):
            pieces.append((x, y, strength.get(x, 0.0) if k == 0 else 0.0, k > 0))
    end = clip_end_s(info)
    chunks = []
    for i, (a, b, cut, window) in enumerate(pieces):
        start_s = info.time_of(a)
        end_s = info.time_of(b) if b < n else end
        read = index_at(info, start_s - settings.overlap_s) if window and \
            settings.overlap_s > 0 else a
        chunks.append(Chunk(i, a, b, start_s, end_s, cut, min(read, a)))
    return tuple(chunks)


def _seconds(info: VideoInfo, a: int, b: int) -> float:
    n = max(1, info.frame_count)
    return (info.time_of(b) if b < n else clip_end_s(info)) - info.time_of(a)


def _merge_short(info: VideoInfo, bounds: list[int], strength: dict[int, float],
                 min_s: float) -> list[int]:
    """Drop the weakest inner boundary of any piece shorter than ``min_s`` until none is
    (a flash or a quick back-and-forth is not a chapter's worth)."""
    bounds = list(bounds)
    while len(bounds) > 2:
        short = [k for k in range(len(bounds) - 1)
                 if _seconds(info, bounds[k], bounds[k + 1]) < min_s]
        if not short:
            break
        k = short[0]
        inner = [j for j in (k, k + 1) if 0 < j < len(bounds) - 1]
        drop = min(inner, key=lambda j: strength.get(bounds[j], 0.0))
        del bounds[drop]
    return bounds


def _windows(info: VideoInfo, a: int, b: int, settings: LongVideoSettings
             ) -> list[tuple[int, int]]:
    """[a, b) as one piece when it is at most ``max_chunk_s`` long (a scene) — or, with no
    scene cut inside the clip at all, at most ``chunk_s`` —, else split into equal windows
    of about ``chunk_s`` at the frames nearest the equal times."""
    length = _seconds(info, a, b)
    whole = a == 0 and b >= info.frame_count  # no cut at all: fixed windows
    limit = settings.chunk_s if whole else settings.max_chunk_s
    if length <= limit * 1.0001 or b - a < 2:
        return [(a, b)]
    k = max(2, math.ceil(length / settings.chunk_s - 1e-9))
    t0 = info.time_of(a)
    edges = [a] + [index_at(info, t0 + length * j / k) for j in range(1, k)] + [b]
    edges = sorted(set(e for e in edges if a <= e <= b))
    return [(x, y) for x, y in zip(edges, edges[1:]) if y > x]


def chunk_plan(info: VideoInfo, chunk: Chunk, task: str, sampling: SamplingConfig,
               *, first: int | None = None, end: int | None = None) -> SamplingPlan:
    """The engine's sampling plan for ``task`` over the chunk's frames (from ``read_first``
    unless ``first`` is given, up to ``end_frame`` or ``end``): indices into the whole clip,
    times from its container timeline."""
    a = chunk.read_first if first is None else first
    b = chunk.end_frame if end is None else end
    return range_plan(info, a, b, task, sampling)


def range_plan(info: VideoInfo, a: int, b: int, task: str, sampling: SamplingConfig
               ) -> SamplingPlan:
    """Plan over frames ``[a, b)`` of the clip (see :func:`chunk_plan`)."""
    count = max(1, b - a)
    seconds = max(_seconds(info, a, b), 1e-3)
    fps = count / seconds
    sub = replace(info, frame_count=count, duration_s=seconds, fps=fps, timeline=(),
                  variable_fps=False, warnings=())
    plan = plan_sampling(sub, task, sampling)
    indices = tuple(a + i for i in plan.frame_indices)
    return replace(plan, frame_indices=indices,
                   timestamps_s=tuple(info.time_of(i) for i in indices),
                   fps=len(indices) / seconds)


def snap_plan(info: VideoInfo, plan: SamplingPlan, first: int | None = None,
              end: int | None = None) -> SamplingPlan:
    """The plan with every sample moved to the nearest keyframe (at most half a sampling
    interval away, each keyframe once; see ``media.gop.snap_to_keyframes``), so a reader
    decodes one frame per sample; ``keyframe_moves_s`` says how far each moved. Unchanged
    when the file has no usable packet index (no PyAV, unprovable indices). Samples stay in
    frames ``[first, end)`` (default: the plan's own first to last frame): a chunk's samples
    never move into another chunk."""
    from chord_core.media.gop import snap_to_keyframes
    from chord_core.media.readers import ReaderUnavailable, usable_index

    if plan.num_frames < 1:
        return plan
    try:
        index = usable_index(info)
    except ReaderUnavailable:
        return plan
    lo = plan.frame_indices[0] if first is None else first
    hi = plan.frame_indices[-1] + 1 if end is None else end
    keys = [k for k in index.keyframes if lo <= k < min(hi, info.frame_count)]
    step = (plan.timestamps_s[-1] - plan.timestamps_s[0]) / max(1, plan.num_frames - 1)
    got, moved = snap_to_keyframes(plan.frame_indices, keys, info.time_of,
                                   max_move_s=0.5 * step if step > 0 else 0.0)
    if got[-1] >= max(1, info.frame_count):
        return plan
    return replace(plan, frame_indices=got, timestamps_s=tuple(info.time_of(i) for i in got),
                   keyframe_moves_s=moved)


def slice_plan(plan: SamplingPlan, size: int) -> list[SamplingPlan]:
    """A plan cut into consecutive plans of at most ``size`` frames."""
    out = []
    for s in range(0, plan.num_frames, max(1, size)):
        e = min(plan.num_frames, s + size)
        out.append(replace(plan, frame_indices=plan.frame_indices[s:e],
                           timestamps_s=plan.timestamps_s[s:e],
                           visual_tokens=plan.tokens_per_frame * (e - s)))
    return out
